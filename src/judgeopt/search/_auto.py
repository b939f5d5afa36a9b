"""``auto``: judgeopt's default search, a budget-aware HPSS with an optional Parzen arm."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .._validation import check_int, check_number
from ._base import SearchGenerator
from ._density import parzen_proposal
from ._factor_priors import FactorPriors
from ._graph import FactorGraph
from ._hpss import _MAX_EMPTY_GENERATIONS, HPSSSearch
from ._space import FactorSpace, Strategy, Value

BUDGET_DEFAULTS: dict[int, dict[str, Any]] = {
    20: {"lambda_": 4.0, "kappa": 1.0, "init_fraction": 0.4, "portfolio": False},
    35: {"lambda_": 8.0, "kappa": 1.0, "init_fraction": 0.4, "portfolio": False},
    50: {"lambda_": 4.0, "kappa": 0.0, "init_fraction": 0.4, "portfolio": True},
    71: {"lambda_": 4.0, "kappa": 0.0, "init_fraction": 0.4, "portfolio": True},
    120: {"lambda_": 8.0, "kappa": 0.0, "init_fraction": 0.4, "portfolio": False},
}
"""The default constants of :class:`AutoSearch` per budget: for each budget of the nested
cross-validation (``benchmarks/search_cv.py``, docs/benchmarks.md), the configuration with the
lowest mean regret on PrExMe's 9 dev surfaces. A budget uses the row of the largest listed
budget not above it (the first row below 20)."""


def defaults_for_budget(budget: int) -> dict[str, Any]:
    """The :data:`BUDGET_DEFAULTS` row that applies to ``budget``."""
    rows = sorted(BUDGET_DEFAULTS)
    key = max([b for b in rows if b <= budget], default=rows[0])
    return dict(BUDGET_DEFAULTS[key])


class AutoSearch(HPSSSearch):
    """HPSS with a lazy start and shrunken advantages: judgeopt's default search (``auto``).

    It keeps HPSS's search loop (a population of the best ``k`` strategies, ``g`` sampled
    one-factor mutations per member and generation, the softmax over value advantages plus
    a UCB bonus, explored samples spending their slot) and changes what the benchmark on
    PrExMe's published surfaces showed to matter (docs/search.md has the numbers):

    * **No initialisation pass.** HPSS first evaluates every one-factor change of the
      baseline (35 of a 71 budget on PrExMe's space, 21 on the judge space), which leaves
      small budgets nothing for the search. Here the search starts from the baseline alone,
      and the population of each generation is the best ``k`` strategies evaluated so far.
    * **Shrunken advantages.** A value's advantage is the sum of its gains divided by
      ``N_ij + kappa`` instead of ``N_ij`` (a Bayesian mean with ``kappa``
      pseudo-observations at zero), then re-centred to mean zero over the factor. Each
      exploration of ``i: c_i -> j`` from a member ``c`` adds HPSS's gain
      ``r_new - (r_c - A_ic_i)`` (Eq. 5). An unseen value sits at the factor's mean, and a
      value seen once counts half as much as its one observation.
    * **No random exploitation.** HPSS replaces a sampled neighbour by the unexplored
      strategy with the highest summed advantage with probability ``rho``; the benchmark
      found no budget where that helps, so ``auto`` exploits only when the neighbourhood of
      the whole population is exhausted (HPSS's stall fallback: after
      ``_MAX_EMPTY_GENERATIONS`` generations without a new strategy).
    * **A UCB bonus chosen per budget** (``lambda_`` 4 or 8): with no initialisation pass
      most values start unseen, and a larger bonus spreads the early mutations over them.
    * **A portfolio arm** (``portfolio=True``): besides the population's one-factor
      mutations (the *local* arm), proposals can come from a multivariate Parzen estimator
      over everything evaluated (the *global* arm, Optuna's TPE rebuilt in numpy:
      :func:`~judgeopt.search._density.parzen_proposal`). Each arm's rate of proposals that
      enter the top ``k`` is estimated with Laplace's rule, ``(wins + 1) / (proposals + 2)``;
      before each local proposal the global arm proposes while its rate is higher. The
      global picks do not update the advantages, but they join the population when good.

    ``lambda_``, ``kappa``, ``init_fraction`` and ``portfolio`` default to ``None``: the
    value :data:`BUDGET_DEFAULTS` holds for the budget, chosen on PrExMe's dev surfaces
    (docs/benchmarks.md, nested cross-validation). The resolved values are stored in the
    state, so a resumed search keeps them.

    ``M_ij`` (appearances, for the UCB bonus) starts at 1 for every value and counts every
    evaluated strategy, the baseline included; ``t = 1 +`` the evaluations after the
    baseline. Failed evaluations (NaN) rank last and enter the advantages as the worst finite
    score seen.

    Args:
        space: The factor space.
        budget: Unique evaluations, the baseline included.
        seed: Seed of the ``numpy.random.Generator``.
        graph: Optional constraints.
        baseline: The starting strategy; default: every factor's first value.
        k: Population size (5).
        g: Mutations per member per generation (2).
        tau: Softmax temperature (5, on scores in percent).
        lambda_: Weight of the UCB bonus (by budget).
        kappa: Shrinkage of the advantages, in pseudo-observations at zero (by budget).
        score_scale: Factor applied to told scores (100: correlations in percent, the scale
            ``tau`` and ``lambda_`` are set for).
        init_fraction: Share of the budget the start's one-factor changes may use (by
            budget).
        min_init_factors: Fewest factors that start must cover, else it is dropped (2).
        priors: Optional :class:`FactorPriors` from earlier results. Each covered value then
            starts with ``prior_weight`` pseudo-observations at its prior advantage:
            ``A_ij = (sum(gains_ij) + w * P_ij) / (N_ij + w + kappa)``, re-centred. The
            search evaluates the baseline, then the ``prior_start`` strategies the priors
            rank best, then the same budget-aware plan as without priors (the benchmark found
            that direct evidence on the small factors beats trusting priors from other
            models: docs/search.md).
        prior_weight: Pseudo-observations of a prior advantage (4).
        prior_start: Strategies ranked best by the priors evaluated after the baseline (0).
        portfolio: Add the Parzen-estimator arm (by budget).

    Raises:
        ValueError: On a hyperparameter out of range or an invalid baseline.

    Example:
        >>> space = FactorSpace({"a": [0, 1, 2], "b": [0, 1, 2]})
        >>> search = AutoSearch(space, budget=6, seed=0)
        >>> while (s := search.ask()) is not None:
        ...     search.tell(s, (s["a"] + s["b"]) / 4)
        >>> search.best_score >= 0.75
        True
    """

    name = "auto"

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
        tau: float = 5.0,
        lambda_: float | None = None,
        kappa: float | None = None,
        score_scale: float = 100.0,
        init_fraction: float | None = None,
        min_init_factors: int = 2,
        priors: FactorPriors | Mapping[str, Any] | None = None,
        prior_weight: float = 4.0,
        prior_start: int = 0,
        portfolio: bool | None = None,
    ) -> None:
        chosen = defaults_for_budget(budget)
        lambda_ = chosen["lambda_"] if lambda_ is None else lambda_
        kappa = chosen["kappa"] if kappa is None else kappa
        init_fraction = chosen["init_fraction"] if init_fraction is None else init_fraction
        portfolio = chosen["portfolio"] if portfolio is None else portfolio
        super().__init__(
            space,
            budget=budget,
            seed=seed,
            graph=graph,
            baseline=baseline,
            k=k,
            g=g,
            rho=0.0,
            tau=tau,
            lambda_=lambda_,
            exploitation=True,
            exploration_term=True,
            heuristic=True,
            score_scale=score_scale,
            priors=priors,
            prior_weight=prior_weight,
            prior_start=prior_start,
        )
        self.kappa = check_number(kappa, "kappa", min_value=0, owner="AutoSearch")
        if not 0.0 <= init_fraction <= 1.0:
            raise ValueError(
                f"The `init_fraction` of AutoSearch must be in [0, 1]. "
                f"Got {init_fraction!r} instead."
            )
        min_init_factors = check_int(
            min_init_factors, "min_init_factors", min_value=1, owner="AutoSearch"
        )
        self.init_fraction = float(init_fraction)
        self.min_init_factors = min_init_factors
        self.portfolio = bool(portfolio)
        # Per arm: [proposals that entered the top k, proposals].
        self.arms: dict[str, list[int]] = {"local": [0, 0], "global": [0, 0]}
        self._G = [np.zeros(len(f.values)) for f in space.factors]  # summed gains
        self._P: list[np.ndarray] | None = None  # prior advantages (with priors)
        self._W: list[np.ndarray] | None = None  # their pseudo-observations

    def get_params(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "seed": self.seed,
            "baseline": self.baseline.as_dict(),
            "k": self.k,
            "g": self.g,
            "tau": self.tau,
            "lambda_": self.lambda_,
            "kappa": self.kappa,
            "score_scale": self.score_scale,
            "init_fraction": self.init_fraction,
            "min_init_factors": self.min_init_factors,
            "portfolio": self.portfolio,
            **self._prior_params(),
        }

    def _update_advantage(self, i: int, j: int, parent: Strategy, r_new: float) -> None:
        """Shrunken running mean of the gains of value ``j``, then re-centring factor ``i``."""
        c_i = self._value_index(parent)[i]
        self._G[i][j] += r_new - (self._r(parent) - self._A[i][c_i])
        self._N[i][j] += 1
        self._set_advantage(i)

    def _set_advantage(self, i: int) -> None:
        if self._P is None or self._W is None:
            a = self._G[i] / np.maximum(self._N[i] + self.kappa, 1e-12)
        else:
            a = (self._G[i] + self._W[i] * self._P[i]) / np.maximum(
                self._N[i] + self._W[i] + self.kappa, 1e-12
            )
        self._A[i] = a - a.mean()

    def _prior_advantages(self) -> None:
        """The priors as ``prior_weight`` pseudo-observations of each covered value."""
        assert self.priors is not None  # internal invariant
        vectors = self.priors.vectors(self.space, self.score_scale)
        self._P = [a for a, _ in vectors]
        self._W = [np.where(known, self.prior_weight, 0.0) for _, known in vectors]
        for i in range(len(self.space.factors)):
            self._set_advantage(i)
        self._has_advantages = True

    def _init_plan(self) -> list[tuple[Strategy, int, int]]:
        """The valid one-factor changes of the baseline for the smallest factors that fit.

        A factor's size here is its number of *valid* changes of the baseline (the graph's
        constraints, such as a restricted space, leave some values out). Factors with at
        least one valid change are taken from the fewest changes up while their changes fit
        in ``init_fraction * budget`` evaluations; a plan that would cover fewer than
        ``min_init_factors`` factors is dropped (the search then starts from the baseline
        alone).
        """
        room = int(self.init_fraction * self.budget)
        changes: dict[int, list[tuple[Strategy, int, int]]] = {}
        for option in self._neighbours_of(self.baseline)[0]:
            changes.setdefault(option[1], []).append(option)
        plan: list[tuple[Strategy, int, int]] = []
        covered = 0
        for i in sorted(changes, key=lambda i: (len(changes[i]), i)):
            if len(plan) + len(changes[i]) > room:
                break
            plan.extend(changes[i])
            covered += 1
        return plan if covered >= self.min_init_factors else []

    def _run(self) -> SearchGenerator:
        if not self.portfolio:
            yield from self._local_run()
            return
        local = self._local_run()
        try:
            pending = next(local)
        except StopIteration:
            return
        while True:
            s, kind = pending

            def free(x: Strategy, held: Strategy = s) -> bool:
                # The local arm's pending proposal is held back for the local arm.
                return x != held and not self.is_explored(x) and self.is_valid(x)

            while kind != "init" and self._rate("global") > self._rate("local"):
                pick = parzen_proposal(
                    self.space,
                    [(t.strategy, self._r(t.strategy)) for t in self._trials],
                    free,
                    self.rng,
                )
                if pick is None:
                    break
                score = yield pick, "model"
                self._credit("global", score)
                self._count(pick)
            score = yield s, kind
            if kind != "init":
                self._credit("local", score)
            try:
                pending = local.send(score)
            except StopIteration:
                return

    def _rate(self, arm: str) -> float:
        """Laplace estimate of an arm's chance to place a proposal in the top ``k``."""
        wins, n = self.arms[arm]
        return (wins + 1) / (n + 2)

    def _credit(self, arm: str, score: float) -> None:
        """Count a proposal of ``arm`` (just told ``score``) and whether it entered the top k."""
        self.arms[arm][1] += 1
        if math.isnan(score):
            return
        better = sum(1 for t in self._trials[:-1] if not t.failed and t.score >= score)
        if better < self.k:
            self.arms[arm][0] += 1

    def _local_run(self) -> SearchGenerator:
        for m in self._M:
            m[:] = 1
        if self.priors is not None:
            # The advantages start at the priors; the baseline and the best strategies by
            # prior come first, then the (budget-aware) plan adds direct evidence on the
            # smallest factors, which the benchmark found worth keeping (docs/search.md).
            self._prior_advantages()
            for s, kind in self._prior_start_strategies():
                yield s, kind
                self._count(s)
        else:
            yield self.baseline, "init"
            self._count(self.baseline)
            self._has_advantages = True
        for s, i, j in self._init_plan():
            if self.is_explored(s) or not self.is_valid(s):
                continue
            yield s, "init"
            self._update_advantage(i, j, self.baseline, self._r(s))
            self._count(s)
        yield from self._iterate()

    def _iterate(self) -> SearchGenerator:
        """The population loop, from the strategies evaluated so far."""
        n_search = 0
        empty_generations = 0
        while True:
            self.population = self._top_k([t.strategy for t in self._trials])
            new = 0
            for c in self.population:
                for _ in range(self.g):
                    sampled = self._sample_neighbour(c, t=n_search + 1)
                    if sampled is None:
                        break
                    cand, i, j = sampled
                    if self.is_explored(cand):
                        continue  # An explored sample spends its slot, as in HPSS.
                    yield cand, "explore"
                    n_search += 1
                    new += 1
                    self._update_advantage(i, j, c, self._r(cand))
                    self._count(cand)
            if new:
                empty_generations = 0
                continue
            empty_generations += 1
            if empty_generations >= _MAX_EMPTY_GENERATIONS:
                pick = self._stall_pick()
                if pick is None:
                    return  # The whole valid space has been explored.
                yield pick
                n_search += 1
                self._count(pick[0])
                empty_generations = 0
