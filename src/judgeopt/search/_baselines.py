"""The baseline searches of HPSS App. F.2: random, greedy, stepwise-greedy, and grid."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._validation import check_int
from ._base import Search, SearchGenerator, rank_key
from ._graph import FactorGraph
from ._hpss import resolve_baseline
from ._space import FactorSpace, Strategy, Value, _same_value

# NOTE: above this many strategies RandomSearch samples with rejection instead of
# shuffling the enumerated space.
_ENUMERATION_LIMIT = 200_000


class RandomSearch(Search):
    """Uniform random search without replacement over the valid strategies.

    Args:
        space: The factor space.
        budget: Unique evaluations.
        seed: Seed of the ``numpy.random.Generator``.
        graph: Optional constraints.
    """

    name = "random"

    def get_params(self) -> dict[str, Any]:
        return {"budget": self.budget, "seed": self.seed}

    def _run(self) -> SearchGenerator:
        if self.space.size <= _ENUMERATION_LIMIT:
            order = self.rng.permutation(self.space.size)
            for idx in order:
                s = self.space.from_index(int(idx))
                if self.is_valid(s) and not self.is_explored(s):
                    yield s, "random"
            return
        while True:  # pragma: no cover - exercised only with huge spaces
            s = self.space.from_index(int(self.rng.integers(self.space.size)))
            if self.is_valid(s) and not self.is_explored(s):
                yield s, "random"


class GridSearch(Search):
    """Every valid strategy, in grid order (the last factor varies fastest).

    Args:
        space: The factor space.
        budget: Unique evaluations; by default the whole space.
        seed: Unused by the algorithm (kept for the common interface).
        graph: Optional constraints.
    """

    name = "grid"

    def __init__(
        self,
        space: FactorSpace,
        *,
        budget: int | None = None,
        seed: int | None = 0,
        graph: FactorGraph | None = None,
    ) -> None:
        super().__init__(
            space, budget=space.size if budget is None else budget, seed=seed, graph=graph
        )

    def get_params(self) -> dict[str, Any]:
        return {"budget": self.budget, "seed": self.seed}

    def _run(self) -> SearchGenerator:
        for s in self.space.strategies():
            if self.is_valid(s):
                yield s, "grid"


class GreedySearch(Search):
    """Greedy search (HPSS App. F.2): perturb the current best, keep the best.

    Starting from the baseline, each iteration makes ``n_perturbations`` random one-factor
    perturbations of the current strategy (a uniformly chosen factor set to a uniformly
    chosen *other* value); already explored or invalid perturbations use up their slot
    without an evaluation, as in the authors' code. The best of the current strategy and the
    new ones becomes the current strategy (ties keep the earlier one). The search ends when
    the budget is spent or every valid neighbour of the current strategy is explored (a local
    optimum).

    Args:
        space: The factor space.
        budget: Unique evaluations, the baseline included.
        seed: Seed of the ``numpy.random.Generator``.
        graph: Optional constraints.
        baseline: Starting strategy; default: every factor's first value.
        n_perturbations: Perturbations per iteration (5).
    """

    name = "greedy"

    def __init__(
        self,
        space: FactorSpace,
        *,
        budget: int = 71,
        seed: int | None = None,
        graph: FactorGraph | None = None,
        baseline: Mapping[str, Value] | Strategy | None = None,
        n_perturbations: int = 5,
    ) -> None:
        super().__init__(space, budget=budget, seed=seed, graph=graph)
        n_perturbations = check_int(
            n_perturbations, "n_perturbations", min_value=1, owner=type(self).__name__
        )
        self.baseline = resolve_baseline(space, baseline)
        if graph is not None:
            graph.check(self.baseline)
        self.n_perturbations = n_perturbations

    def get_params(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "seed": self.seed,
            "baseline": self.baseline.as_dict(),
            "n_perturbations": self.n_perturbations,
        }

    def _perturb(self, current: Strategy) -> Strategy | None:
        factors = [f for f in self.space.factors if len(f.values) > 1]
        if not factors:
            return None
        f = factors[int(self.rng.integers(len(factors)))]
        others = [v for v in f.values if not _same_value(v, current[f.name])]
        return current.replace(**{f.name: others[int(self.rng.integers(len(others)))]})

    def _run(self) -> SearchGenerator:
        current = self.baseline
        yield current, "init"
        while True:
            if all(
                self.is_explored(s) or not self.is_valid(s) for s in self.space.neighbours(current)
            ):
                return  # Local optimum: nothing left to perturb.
            candidates = [current]
            for _ in range(self.n_perturbations):
                cand = self._perturb(current)
                if cand is None or self.is_explored(cand) or not self.is_valid(cand):
                    continue
                yield cand, "explore"
                candidates.append(cand)
            numbers = {t.strategy: t.number for t in self._trials}
            current = min(candidates, key=lambda s: rank_key(self.score_of(s), numbers[s]))


class StepwiseGreedySearch(Search):
    """Stepwise-Greedy (HPSS App. F.2): optimise one factor at a time.

    Factors are taken in ``order`` (default: the space's factor order, which for the HPSS
    space is Table 1's). For each factor every other value is evaluated with all other
    factors held at the current best, and the best value is kept (ties keep the current
    value). The evaluation count is fixed: ``1 + sum(m_i - 1)`` (21 for HPSS's space).

    Args:
        space: The factor space.
        budget: Unique evaluations (the search ends earlier once every factor is done).
        seed: Unused by the algorithm (kept for the common interface).
        graph: Optional constraints.
        baseline: Starting strategy; default: every factor's first value.
        order: Factor names in optimisation order.
    """

    name = "stepwise"

    def __init__(
        self,
        space: FactorSpace,
        *,
        budget: int = 71,
        seed: int | None = 0,
        graph: FactorGraph | None = None,
        baseline: Mapping[str, Value] | Strategy | None = None,
        order: Sequence[str] | None = None,
    ) -> None:
        super().__init__(space, budget=budget, seed=seed, graph=graph)
        self.baseline = resolve_baseline(space, baseline)
        if graph is not None:
            graph.check(self.baseline)
        order_t = tuple(space.names if order is None else order)
        if sorted(order_t) != sorted(space.names):
            raise ValueError(
                f"`order` must list every factor exactly once: "
                f"{list(space.names)!r}. Got {list(order_t)!r}."
            )
        self.order = order_t

    def get_params(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "seed": self.seed,
            "baseline": self.baseline.as_dict(),
            "order": list(self.order),
        }

    def _run(self) -> SearchGenerator:
        current = self.baseline
        yield current, "init"
        for name in self.order:
            step = [current]
            for v in self.space[name].values:
                cand = current.replace(**{name: v})
                if self.is_explored(cand) or not self.is_valid(cand):
                    continue
                yield cand, "explore"
                step.append(cand)
            numbers = {t.strategy: t.number for t in self._trials}
            current = min(step, key=lambda s: rank_key(self.score_of(s), numbers[s]))
