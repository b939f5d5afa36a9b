"""HPSS: Heuristic Prompting Strategy Search (Wen et al., 2025), as an ask/tell search."""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._validation import check_int, check_number
from ._base import Kind, Search, SearchGenerator, rank_key
from ._factor_priors import FactorPriors
from ._graph import FactorGraph
from ._space import FactorSpace, Strategy, Value

# NOTE: a generation in which every sampled neighbour was already explored evaluates
# nothing; this many such generations in a row trigger the stall fallback (see HPSS docs).
_MAX_EMPTY_GENERATIONS = 50


def resolve_baseline(
    space: FactorSpace, baseline: Mapping[str, Value] | Strategy | None
) -> Strategy:
    """The baseline strategy: ``baseline`` validated against ``space``, or ``space.default()``."""
    if baseline is None:
        return space.default()
    return space.strategy(dict(baseline))


class HPSSSearch(Search):
    """Heuristic Prompting Strategy Search, exactly as Algorithms 1-2 and Eq. 2-7 of the paper.

    **Initialisation** (Algorithm 1): the baseline strategy, then every one-factor change of
    it (factor by factor, values in order). The initial advantage of value ``j`` of factor
    ``i`` is its strategy's score minus the mean over that factor's values (the baseline's
    own value scores as the baseline). The population is the top ``k``.

    **Iterative search** (Algorithm 2): each generation, for each population member ``c``
    and ``g`` times, a neighbour (one factor changed, ``i: c_i -> j``) is sampled with
    probability ``softmax(B / tau)`` where
    ``B = A_ij - A_ic_i + lambda * sqrt(ln t / M_ij)`` (Eq. 3-4). An already explored
    neighbour is skipped (the slot is used up, no evaluation). Otherwise, with probability
    ``rho`` it is replaced by the unexplored strategy with the highest summed advantage
    (exploitation, Eq. 7). After an exploration, ``A_ij`` becomes the running mean of
    ``r_new - (r_c - A_ic_i)`` over its ``N_ij`` updates (Eq. 5) and factor ``i``'s
    advantages are re-centred to mean zero (Eq. 6). After the generation the best ``k`` of
    the old population and the new strategies form the new population. Scores are used in
    percent (``score_scale=100`` multiplies correlations told in [-1, 1]).

    Where the prose and the listing differ, this follows the **listing**:

    * The prose gives exploration probability ``rho``; the listing (and the authors' code)
      exploits with probability ``rho`` (0.2) after sampling an unexplored neighbour.
    * The listing only checks the budget at the top of a generation; here the budget is a
      hard cap on unique evaluations, initialisation included (71 in the paper).

    Quantities the paper leaves implicit, fixed as in the authors' release: the UCB step is
    ``t = 1 +`` the number of iterative-search evaluations so far; ``M_ij`` starts at 1 for
    every value after initialisation and counts the values of every strategy evaluated
    afterwards (exploitation included); ``N_ij`` starts at 1. Exploitation ties (equal summed
    advantage) go to the strategy whose values rank first in advantage order, then factor
    value order.

    Choices of this implementation for cases the paper does not cover: a failed evaluation
    (NaN) ranks last and enters the advantage arithmetic as the worst finite score seen so
    far; a value whose one-factor change of the baseline violates a constraint starts with
    advantage 0 and ``N_ij = 0``; if :data:`_MAX_EMPTY_GENERATIONS` generations in a row
    evaluate nothing (every sampled neighbour explored), one exploitation step is taken
    instead (a uniformly random unexplored strategy when exploitation is switched off), and
    the search ends when the whole valid space is explored.

    Args:
        space: The factor space.
        budget: Unique evaluations, initialisation included. Paper: 71.
        seed: Seed of the ``numpy.random.Generator``.
        graph: Optional constraints.
        baseline: The starting strategy (a mapping or :class:`Strategy`); default: every
            factor's first value.
        k: Population size (5).
        g: Mutations per member per generation (2).
        rho: Exploitation probability (0.2).
        tau: Softmax temperature (5).
        lambda_: Weight of the UCB exploration term (4).
        exploitation: ``False`` is the paper's "w/o exploitation" ablation.
        exploration_term: ``False`` is the "w/o exploration term" ablation (``lambda = 0``).
        heuristic: ``False`` samples neighbours uniformly (no advantage guidance).
        score_scale: Factor applied to told scores before the advantage arithmetic (100: the
            paper's percent scale that ``tau`` and ``lambda`` are tuned for).
        priors: Optional :class:`FactorPriors` (or their :meth:`~FactorPriors.to_dict` form)
            estimated from earlier results. Not in the paper: with priors the initialisation
            pass is skipped; the advantages start at the priors (rescaled to
            ``score_scale``), each covered value counting as ``prior_weight`` observations
            (``N_ij``; uncovered values start at 0 with ``N_ij = 0``), the search evaluates
            the baseline and then the ``prior_start`` unexplored strategies with the highest
            summed prior advantage, and Algorithm 2 runs from there. ``None`` (the default)
            is the paper's algorithm, unchanged.
        prior_weight: Observations a prior advantage counts as (1).
        prior_start: Strategies ranked best by the priors evaluated after the baseline (1).

    Raises:
        ValueError: On a hyperparameter out of range or an invalid baseline.

    Example:
        >>> space = FactorSpace({"a": [0, 1, 2], "b": [0, 1, 2]})
        >>> search = HPSS(space, budget=8, seed=0, k=2)
        >>> while (s := search.ask()) is not None:
        ...     search.tell(s, (s["a"] + s["b"]) / 4)
        >>> search.best_strategy["a"] + search.best_strategy["b"] >= 3
        True
    """

    name = "hpss"

    def __init__(
        self,
        space: FactorSpace,
        *,
        budget: int = 71,
        seed: int | None = None,
        graph: FactorGraph | None = None,
        baseline: Mapping[str, Value] | Strategy | None = None,
        k: int = 5,
        g: int = 2,
        rho: float = 0.2,
        tau: float = 5.0,
        lambda_: float = 4.0,
        exploitation: bool = True,
        exploration_term: bool = True,
        heuristic: bool = True,
        score_scale: float = 100.0,
        priors: FactorPriors | Mapping[str, Any] | None = None,
        prior_weight: float = 1.0,
        prior_start: int = 1,
    ) -> None:
        super().__init__(space, budget=budget, seed=seed, graph=graph)
        owner = type(self).__name__
        k = check_int(k, "k", min_value=1, owner=owner)
        g = check_int(g, "g", min_value=1, owner=owner)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"The `rho` of HPSS must be in [0, 1]. Got {rho!r} instead.")
        if not tau > 0:
            raise ValueError(f"The `tau` of HPSS must be > 0. Got {tau!r} instead.")
        if not lambda_ >= 0:
            raise ValueError(f"The `lambda_` of HPSS must be >= 0. Got {lambda_!r} instead.")
        if not score_scale > 0:
            raise ValueError(f"The `score_scale` of HPSS must be > 0. Got {score_scale!r}.")
        self.baseline = resolve_baseline(space, baseline)
        if graph is not None:
            graph.check(self.baseline)
        self.k, self.g = k, g
        self.rho, self.tau, self.lambda_ = float(rho), float(tau), float(lambda_)
        self.exploitation, self.exploration_term, self.heuristic = (
            bool(exploitation),
            bool(exploration_term),
            bool(heuristic),
        )
        self.score_scale = float(score_scale)
        self.priors = (
            None
            if priors is None
            else priors
            if isinstance(priors, FactorPriors)
            else FactorPriors.from_dict(priors)
        )
        if self.priors is not None:
            self.priors.check(space)
        self.prior_weight = check_number(prior_weight, "prior_weight", min_value=0, owner=owner)
        self.prior_start = check_int(prior_start, "prior_start", min_value=0, owner=owner)
        sizes = [len(f.values) for f in space.factors]
        self._A = [np.zeros(m) for m in sizes]  # advantages
        # Exploration counts; float so that a prior can count as a fractional observation.
        self._N = [np.zeros(m) for m in sizes]
        self._M = [np.zeros(m, dtype=np.int64) for m in sizes]  # appearance counts
        self._has_advantages = False
        self.population: list[Strategy] = []
        self._neighbour_cache: dict[
            Strategy, tuple[list[tuple[Strategy, int, int]], list[int], list[int], list[int]]
        ] = {}

    def get_params(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "seed": self.seed,
            "baseline": self.baseline.as_dict(),
            "k": self.k,
            "g": self.g,
            "rho": self.rho,
            "tau": self.tau,
            "lambda_": self.lambda_,
            "exploitation": self.exploitation,
            "exploration_term": self.exploration_term,
            "heuristic": self.heuristic,
            "score_scale": self.score_scale,
            **self._prior_params(),
        }

    def _prior_params(self) -> dict[str, Any]:
        """The prior-related constructor arguments; empty without priors (unchanged states)."""
        if self.priors is None:
            return {}
        return {
            "priors": self.priors.to_dict(),
            "prior_weight": self.prior_weight,
            "prior_start": self.prior_start,
        }

    def advantages(self) -> dict[str, dict[str, float]] | None:
        if not self._has_advantages:
            return None
        return {
            f.name: {str(v): float(a) for v, a in zip(f.values, self._A[i], strict=True)}
            for i, f in enumerate(self.space.factors)
        }

    # Helpers -----------------------------------------------------------------------------
    def _value_index(self, strategy: Strategy) -> list[int]:
        return [f.index(strategy[f.name]) for f in self.space.factors]

    def _r(self, strategy: Strategy) -> float:
        """A strategy's score in percent, failures replaced by the worst finite score."""
        score = self.score_of(strategy)
        if not math.isnan(score):
            return score * self.score_scale
        finite = [t.score for t in self._trials if not t.failed]
        return min(finite) * self.score_scale if finite else 0.0

    def _top_k(self, candidates: list[Strategy]) -> list[Strategy]:
        order = {t.strategy: t.number for t in self._trials}
        ranked = sorted(candidates, key=lambda s: rank_key(self.score_of(s), order[s]))
        return ranked[: self.k]

    def neighbour_distribution(
        self, c: Strategy, t: int
    ) -> tuple[list[tuple[Strategy, int, int]], np.ndarray]:
        """Eq. 3-4: the valid one-factor changes of ``c`` and their sampling probabilities.

        Args:
            c: The population member to mutate.
            t: The UCB step (``1 +`` iterative-search evaluations so far).

        Returns:
            ``(options, p)`` where each option is ``(strategy, factor_index, value_index)``
            and ``p`` the probability of each (uniform when ``heuristic=False``).
        """
        options, fi, vj, ci = self._neighbours_of(c)
        if not options:
            return options, np.zeros(0)
        if not self.heuristic:
            return options, np.full(len(options), 1.0 / len(options))
        A = self._A
        bonus = np.fromiter(
            (A[i][j] - A[i][k] for i, j, k in zip(fi, vj, ci, strict=True)),
            dtype=float,
            count=len(options),
        )
        if self.exploration_term:
            m = np.fromiter(
                (self._M[i][j] for i, j in zip(fi, vj, strict=True)),
                dtype=float,
                count=len(options),
            )
            bonus += self.lambda_ * np.sqrt(math.log(t) / m)
        z = bonus / self.tau
        p = np.exp(z - z.max())
        return options, p / p.sum()

    def _neighbours_of(
        self, c: Strategy
    ) -> tuple[list[tuple[Strategy, int, int]], list[int], list[int], list[int]]:
        """Valid one-factor changes of ``c`` with factor, value and current-value indices.

        Cached per strategy: validity never changes during a search.
        """
        hit = self._neighbour_cache.get(c)
        if hit is not None:
            return hit
        cur = self._value_index(c)
        options: list[tuple[Strategy, int, int]] = []
        for i, f in enumerate(self.space.factors):
            for j, v in enumerate(f.values):
                if j == cur[i]:
                    continue
                cand = c.replace(**{f.name: v})
                if self.is_valid(cand):
                    options.append((cand, i, j))
        entry = (
            options,
            [o[1] for o in options],
            [o[2] for o in options],
            [cur[o[1]] for o in options],
        )
        self._neighbour_cache[c] = entry
        return entry

    def _sample_neighbour(self, c: Strategy, t: int) -> tuple[Strategy, int, int] | None:
        """Sample from :meth:`neighbour_distribution`; ``None`` if ``c`` has no valid neighbour."""
        options, p = self.neighbour_distribution(c, t)
        if not options:
            return None
        if self.heuristic:
            idx = int(self.rng.choice(len(options), p=p))
        else:
            idx = int(self.rng.integers(len(options)))
        return options[idx]

    def _argmax_unexplored(self) -> Strategy | None:
        """Eq. 7: the unexplored valid strategy with the highest summed advantage.

        Best-first enumeration of the separable sum (a k-best walk over per-factor value
        rankings), so it never scans the whole space.
        """
        factors = self.space.factors

        def ranking(i: int) -> list[int]:
            adv = self._A[i]
            return sorted(range(len(adv)), key=lambda j: (-float(adv[j]), j))

        rankings = [ranking(i) for i in range(len(factors))]

        def total(ranks: tuple[int, ...]) -> float:
            return float(sum(self._A[i][rankings[i][r]] for i, r in enumerate(ranks)))

        start = (0,) * len(factors)
        heap = [(-total(start), start)]
        seen = {start}
        while heap:
            _, ranks = heapq.heappop(heap)
            s = Strategy(
                self.space.names,
                tuple(
                    f.values[rankings[i][r]]
                    for i, (f, r) in enumerate(zip(factors, ranks, strict=True))
                ),
            )
            if not self.is_explored(s) and self.is_valid(s):
                return s
            for i in range(len(factors)):
                if ranks[i] + 1 < len(factors[i].values):
                    nxt = ranks[:i] + (ranks[i] + 1,) + ranks[i + 1 :]
                    if nxt not in seen:
                        seen.add(nxt)
                        heapq.heappush(heap, (-total(nxt), nxt))
        return None

    def _stall_pick(self) -> tuple[Strategy, Kind] | None:
        """The stall fallback: the exploitation pick, or a uniform one when exploitation is off."""
        if self.exploitation:
            best = self._argmax_unexplored()
            return None if best is None else (best, "exploit")
        rest = [s for s in self.space.strategies() if not self.is_explored(s) and self.is_valid(s)]
        if not rest:
            return None
        return rest[int(self.rng.integers(len(rest)))], "random"

    def _init_advantages(self) -> None:
        """Algorithm 1, lines 9-11."""
        base_idx = self._value_index(self.baseline)
        for i, f in enumerate(self.space.factors):
            s = np.full(len(f.values), np.nan)
            for j, v in enumerate(f.values):
                strat = self.baseline if j == base_idx[i] else self.baseline.replace(**{f.name: v})
                if self.is_explored(strat):
                    s[j] = self._r(strat)
                    self._N[i][j] = 1
            mean = float(np.nanmean(s)) if np.isfinite(s).any() else 0.0
            s[np.isnan(s)] = mean
            self._A[i] = s - mean
            self._M[i][:] = 1
        self._has_advantages = True

    def _prior_advantages(self) -> None:
        """Advantages from the priors instead of the initialisation pass.

        ``A_i`` is the prior (rescaled to :attr:`score_scale`); a covered value counts as
        ``prior_weight`` observations (``N_ij``), an uncovered one as none.
        """
        assert self.priors is not None  # internal invariant
        for i, (a, known) in enumerate(self.priors.vectors(self.space, self.score_scale)):
            self._A[i] = a.copy()
            self._N[i] = np.where(known, self.prior_weight, 0.0)
            self._M[i][:] = 1
        self._has_advantages = True

    def _prior_start_strategies(self) -> SearchGenerator:
        """The start with priors: the baseline, then the ``prior_start`` unexplored strategies
        with the highest summed prior advantage (best first). Returns nothing; call
        :meth:`_prior_advantages` first."""
        yield self.baseline, "init"
        for _ in range(self.prior_start):
            best = self._argmax_unexplored()
            if best is None:
                return
            yield best, "init"

    def _update_advantage(self, i: int, j: int, parent: Strategy, r_new: float) -> None:
        """Eq. 5-6: running-mean update of ``A_ij``, then re-centring factor ``i``."""
        c_i = self._value_index(parent)[i]
        gain = r_new - (self._r(parent) - self._A[i][c_i])
        n = self._N[i][j]
        self._A[i][j] = (self._A[i][j] * n + gain) / (n + 1)
        self._N[i][j] = n + 1
        self._A[i] -= self._A[i].mean()

    def _count(self, strategy: Strategy) -> None:
        for i, j in enumerate(self._value_index(strategy)):
            self._M[i][j] += 1

    # The algorithm -----------------------------------------------------------------------
    def _run(self) -> SearchGenerator:
        if self.priors is not None:
            # With priors the advantages are known up front: no initialisation pass.
            self._prior_advantages()
            yield from self._prior_start_strategies()
            self.population = self._top_k([t.strategy for t in self._trials])
        else:
            # Algorithm 1: initialisation.
            init = [self.baseline] + [
                s for s in self.space.neighbours(self.baseline) if self.is_valid(s)
            ]
            for s in init:
                yield s, "init"
            self._init_advantages()
            self.population = self._top_k(init)
        yield from self._iterate()

    def _iterate(self) -> SearchGenerator:
        """Algorithm 2: the iterative search from :attr:`population`."""
        n_search = 0
        empty_generations = 0
        while True:
            new_members: list[Strategy] = []
            for c in self.population:
                for _ in range(self.g):
                    sampled = self._sample_neighbour(c, t=n_search + 1)
                    if sampled is None:
                        break
                    cand, i, j = sampled
                    if self.is_explored(cand):
                        continue  # Skip explored strategies (listing line 8-9).
                    exploit = self.exploitation and bool(self.rng.random() < self.rho)
                    if exploit:
                        best = self._argmax_unexplored()
                        cand = best if best is not None else cand
                    yield cand, ("exploit" if exploit else "explore")
                    n_search += 1
                    new_members.append(cand)
                    if not exploit:
                        self._update_advantage(i, j, c, self._r(cand))
                    self._count(cand)
            if new_members:
                empty_generations = 0
            else:
                empty_generations += 1
                if empty_generations >= _MAX_EMPTY_GENERATIONS:
                    pick = self._stall_pick()
                    if pick is None:
                        return  # The whole valid space has been explored.
                    yield pick
                    n_search += 1
                    new_members.append(pick[0])
                    self._count(pick[0])
                    empty_generations = 0
            self.population = self._top_k(self.population + new_members)
