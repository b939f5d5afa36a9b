"""Optuna's TPE sampler behind the ask/tell contract (optional dependency ``optuna``)."""

from __future__ import annotations

import math
import warnings
from typing import Any

from ._base import Kind, Search, SearchGenerator
from ._graph import FactorGraph
from ._space import FactorSpace, Strategy

# NOTE: TPE may keep proposing strategies it has seen; after this many proposals in a row
# without a new one the search falls back to one uniformly random unexplored strategy.
_MAX_DUPLICATES_IN_A_ROW = 200


class TPESearch(Search):
    """Optuna's Tree-structured Parzen Estimator (the sampler of DSPy's MIPROv2).

    Multivariate TPE over the categorical factors, seeded, driven through Optuna's ask/tell
    interface. A proposal that repeats an evaluated strategy is told its known score and
    does not count against the budget; a proposal that violates a constraint is told the
    worst score seen so far. Failed evaluations (NaN) are told to Optuna as the worst score
    seen so far, so TPE learns to avoid them.

    Args:
        space: The factor space.
        budget: Unique evaluations.
        seed: Seed (also seeds Optuna's sampler).
        graph: Optional constraints.
        n_startup_trials: Random trials before TPE's model is used (Optuna's default, 10).
        multivariate: Use the multivariate TPE (default ``True``).

    Raises:
        ImportError: If Optuna is not installed (``pip install 'judgeopt[tpe]'``).
    """

    name = "tpe"

    def __init__(
        self,
        space: FactorSpace,
        *,
        budget: int = 71,
        seed: int | None = None,
        graph: FactorGraph | None = None,
        n_startup_trials: int = 10,
        multivariate: bool = True,
    ) -> None:
        super().__init__(space, budget=budget, seed=seed, graph=graph)
        try:
            import optuna  # noqa: F401
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("TPESearch needs Optuna: pip install 'judgeopt[tpe]'") from e
        self.n_startup_trials = int(n_startup_trials)
        self.multivariate = bool(multivariate)
        self.n_duplicates = 0

    def get_params(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "seed": self.seed,
            "n_startup_trials": self.n_startup_trials,
            "multivariate": self.multivariate,
        }

    def _worst(self) -> float:
        finite = [t.score for t in self._trials if not t.failed]
        return min(finite) if finite else 0.0

    def _run(self) -> SearchGenerator:
        import optuna
        from optuna.distributions import BaseDistribution, CategoricalDistribution

        with warnings.catch_warnings():
            # `multivariate` is flagged experimental by Optuna; that is known and accepted.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(
                seed=self.seed % (2**32),
                multivariate=self.multivariate,
                n_startup_trials=self.n_startup_trials,
            )
        study = optuna.create_study(direction="maximize", sampler=sampler)
        dists: dict[str, BaseDistribution] = {
            f.name: CategoricalDistribution(list(f.values)) for f in self.space.factors
        }
        in_a_row = 0
        while True:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                trial = study.ask(dists)
            s = Strategy(self.space.names, tuple(trial.params[n] for n in self.space.names))
            s = self.space.validate(s)
            if self.is_explored(s) or not self.is_valid(s):
                known = self.score_of(s) if self.is_explored(s) else float("nan")
                study.tell(trial, self._worst() if math.isnan(known) else known)
                self.n_duplicates += 1
                in_a_row += 1
                if in_a_row < _MAX_DUPLICATES_IN_A_ROW:
                    continue
                rest = [
                    x
                    for x in self.space.strategies()
                    if not self.is_explored(x) and self.is_valid(x)
                ]
                if not rest:
                    return
                s = rest[int(self.rng.integers(len(rest)))]
                score = yield s, "random"
                in_a_row = 0
                continue
            in_a_row = 0
            complete = len(
                study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            )
            kind: Kind = "random" if complete < self.n_startup_trials else "model"
            score = yield s, kind
            study.tell(trial, self._worst() if math.isnan(score) else score)
