"""Running searches against surfaces and aggregating their regret."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from .._optional import import_optional
from .._validation import check_int
from ..search import (
    AutoSearch,
    FactorPriors,
    FactorSpace,
    GreedySearch,
    GridSearch,
    HPSSSearch,
    RandomSearch,
    Search,
    StepwiseGreedySearch,
    Strategy,
    TPESearch,
    Value,
)
from ._surface import Surface

Factory = Callable[[FactorSpace, int, int, Strategy], Search]
PriorFactory = Callable[[FactorSpace, int, int, Strategy, FactorPriors], Search]

METHODS: dict[str, Factory] = {
    "auto": lambda sp, b, s, base: AutoSearch(sp, budget=b, seed=s, baseline=base),
    # `auto` as it stood before issue 16: the same constants at every budget, no portfolio.
    "auto-v1": lambda sp, b, s, base: AutoSearch(
        sp,
        budget=b,
        seed=s,
        baseline=base,
        lambda_=8.0,
        kappa=1.0,
        init_fraction=0.4,
        portfolio=False,
    ),
    "hpss": lambda sp, b, s, base: HPSSSearch(sp, budget=b, seed=s, baseline=base),
    "hpss-no-exploit": lambda sp, b, s, base: HPSSSearch(
        sp, budget=b, seed=s, baseline=base, exploitation=False
    ),
    "hpss-no-explore-term": lambda sp, b, s, base: HPSSSearch(
        sp, budget=b, seed=s, baseline=base, exploration_term=False
    ),
    "hpss-no-heuristic": lambda sp, b, s, base: HPSSSearch(
        sp, budget=b, seed=s, baseline=base, heuristic=False
    ),
    "random": lambda sp, b, s, base: RandomSearch(sp, budget=b, seed=s),
    "greedy": lambda sp, b, s, base: GreedySearch(sp, budget=b, seed=s, baseline=base),
    "stepwise": lambda sp, b, s, base: StepwiseGreedySearch(sp, budget=b, seed=s, baseline=base),
    "grid": lambda sp, b, s, base: GridSearch(sp, budget=b, seed=s),
    "tpe": lambda sp, b, s, base: TPESearch(sp, budget=b, seed=s),
}
"""Benchmark method name -> factory ``(space, budget, seed, baseline) -> search``."""

PRIOR_METHODS: dict[str, PriorFactory] = {
    "auto+priors": lambda sp, b, s, base, pr: AutoSearch(
        sp, budget=b, seed=s, baseline=base, priors=pr
    ),
    "hpss+priors": lambda sp, b, s, base, pr: HPSSSearch(
        sp, budget=b, seed=s, baseline=base, priors=pr
    ),
}
"""Methods that start from :class:`~judgeopt.search.FactorPriors` (one per surface):
factory ``(space, budget, seed, baseline, priors) -> search``."""


def _all_methods() -> list[str]:
    return sorted([*METHODS, *PRIOR_METHODS])


def make_search(
    method: str,
    space: FactorSpace,
    *,
    budget: int,
    seed: int,
    baseline: Mapping[str, Value] | Strategy | None = None,
    priors: FactorPriors | None = None,
) -> Search:
    """Build the search a benchmark method name stands for.

    Raises:
        ValueError: On an unknown method (the message lists the allowed names), or a
            ``+priors`` method without ``priors``.
    """
    base = space.default() if baseline is None else space.strategy(dict(baseline))
    if method in PRIOR_METHODS:
        if priors is None:
            raise ValueError(f"Method {method!r} needs `priors` (FactorPriors for the surface).")
        return PRIOR_METHODS[method](space, budget, seed, base, priors)
    if method not in METHODS:
        raise ValueError(f"Unknown search method {method!r}. Allowed: {_all_methods()!r}.")
    return METHODS[method](space, budget, seed, base)


def leave_one_out_priors(
    surfaces: Sequence[Surface],
    hold_out: str,
    *,
    match: Sequence[str] = (),
    aggregation: Literal["median", "mean"] = "median",
    normalise: Literal["none", "std"] = "none",
) -> dict[str, FactorPriors]:
    """Priors for every surface from the surfaces that differ from it in ``hold_out``.

    For ``hold_out="model"`` the priors of ``LLaMA3-8B/en_de`` come from every surface of
    the other models (leave-one-model-out); with ``match=["task"]`` only from the other
    models' ``en_de`` surfaces.

    Args:
        surfaces: From :func:`load_surfaces` (with group columns).
        hold_out: A group column; sources must have another value in it.
        match: Group columns whose value a source must share with the target.
        aggregation: See :meth:`FactorPriors.estimate`.
        normalise: See :meth:`FactorPriors.estimate`.

    Returns:
        Surface name -> its priors.

    Raises:
        ValueError: On a column that is not a group column of the surfaces, or a surface
            left without any source.
    """
    for col in (hold_out, *match):
        missing = [s.name for s in surfaces if col not in s.group]
        if missing:
            raise ValueError(
                f"`{col}` is not a group column of surface(s) {missing!r}; "
                f"group columns: {sorted(surfaces[0].group) if surfaces else []!r}."
            )
    out = {}
    for target in surfaces:
        sources = {
            s.name: list(s.values.items())
            for s in surfaces
            if s.group[hold_out] != target.group[hold_out]
            and all(s.group[c] == target.group[c] for c in match)
        }
        if not sources:
            raise ValueError(
                f"No surface to estimate the priors of {target.name!r} from "
                f"(hold_out={hold_out!r}, match={list(match)!r})."
            )
        out[target.name] = FactorPriors.estimate(
            sources, aggregation=aggregation, normalise=normalise
        )
    return out


@dataclass(frozen=True)
class RunRecord:
    """One search run on one surface."""

    method: str
    surface: str
    seed: int
    found: float
    evals: int
    norm_regret: float
    top1: bool
    found_over_max: float
    best_strategy: dict[str, Value]


@dataclass(frozen=True)
class MethodResult:
    """Means over surfaces x seeds for one method, and per-surface means."""

    norm_regret: float
    p_top1: float
    found_over_max: float
    evals: float
    seconds: float
    per_surface: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "norm_regret": self.norm_regret,
            "p_top1": self.p_top1,
            "found_over_max": self.found_over_max,
            "evals": self.evals,
            "seconds": self.seconds,
            "per_surface": self.per_surface,
        }


@dataclass(frozen=True)
class BenchResult:
    """The outcome of :func:`run_search_benchmark`."""

    budget: int
    seeds: int
    surfaces: list[str]
    methods: dict[str, MethodResult]
    runs: list[RunRecord] = field(repr=False, default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"budget", "seeds", "surfaces", "methods": {name: {...}}}``."""
        return {
            "budget": self.budget,
            "seeds": self.seeds,
            "surfaces": self.surfaces,
            "methods": {m: r.to_dict() for m, r in self.methods.items()},
        }

    def table(self) -> str:
        """A plain-text table, one row per method."""
        head = (
            f"{'method':<22}{'norm_regret':>12}{'p_top1':>9}{'found/max':>11}{'evals':>8}{'sec':>8}"
        )
        lines = [
            f"budget {self.budget}, {self.seeds} seeds x {len(self.surfaces)} surfaces",
            head,
            "-" * len(head),
        ]
        for m, r in self.methods.items():
            lines.append(
                f"{m:<22}{r.norm_regret:>12.3f}{r.p_top1:>9.3f}{r.found_over_max:>11.3f}"
                f"{r.evals:>8.1f}{r.seconds:>8.2f}"
            )
        return "\n".join(lines)

    def surface_table(self, key: str = "norm_regret") -> str:
        """A plain-text table of one per-surface mean (rows: surfaces, columns: methods)."""
        methods = list(self.methods)
        width = max(12, *(len(m) + 2 for m in methods))
        name_w = max(10, *(len(s) + 2 for s in self.surfaces))
        lines = [
            f"{key} per surface",
            f"{'surface':<{name_w}}" + "".join(f"{m:>{width}}" for m in methods),
        ]
        for s in self.surfaces:
            lines.append(
                f"{s:<{name_w}}"
                + "".join(f"{self.methods[m].per_surface[s][key]:>{width}.3f}" for m in methods)
            )
        return "\n".join(lines)


def run_one(surface: Surface, search: Search) -> tuple[Strategy, int]:
    """Drive ``search`` against ``surface`` until it stops; return its best strategy and evals."""
    while (s := search.ask()) is not None:
        search.tell(s, surface(s))
    best = search.best_strategy
    if best is None:
        raise RuntimeError(f"{type(search).__name__} evaluated nothing.")
    return best, search.n_evaluations


def run_search_benchmark(
    surfaces: Sequence[Surface],
    methods: Sequence[str],
    *,
    budget: int,
    seeds: int = 20,
    baseline: Mapping[str, Value] | None = None,
    priors: Mapping[str, FactorPriors] | None = None,
    progress: bool = False,
) -> BenchResult:
    """Run every method with seeds ``0 .. seeds-1`` on every surface.

    Args:
        surfaces: From :func:`load_surfaces`.
        methods: Names from :data:`METHODS`.
        budget: Unique evaluations per run.
        seeds: Number of seeds per method and surface.
        baseline: Starting strategy for the methods that use one (HPSS, greedy, stepwise).
        priors: Surface name -> :class:`FactorPriors`, for the ``+priors`` methods (e.g.
            from :func:`leave_one_out_priors`).
        progress: Show a progress bar (tqdm) on stderr.

    Raises:
        ValueError: On an unknown method, no surfaces, ``seeds < 1`` or an invalid baseline.
    """
    if not surfaces:
        raise ValueError("No surfaces to run on.")
    check_int(seeds, "seeds", min_value=1, owner="run_search_benchmark")
    unknown = [m for m in methods if m not in METHODS and m not in PRIOR_METHODS]
    if unknown:
        raise ValueError(f"Unknown search method(s) {unknown!r}. Allowed: {_all_methods()!r}.")
    if any(m in PRIOR_METHODS for m in methods):
        lacking = [s.name for s in surfaces if priors is None or s.name not in priors]
        if lacking:
            raise ValueError(
                f"The `+priors` methods need priors for every surface; none for {lacking!r}."
            )
    if "tpe" in methods:
        optuna = import_optional("optuna", extra="tpe", purpose="The `tpe` method (TPESearch)")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(methods) * len(surfaces) * seeds, desc="search runs", unit="run")
    runs: list[RunRecord] = []
    results: dict[str, MethodResult] = {}
    for method in methods:
        t0 = time.perf_counter()
        mruns: list[RunRecord] = []
        for surface in surfaces:
            top, med, thr = surface.max, surface.median, surface.top1_threshold
            for seed in range(seeds):
                search = make_search(
                    method,
                    surface.space,
                    budget=budget,
                    seed=seed,
                    baseline=baseline,
                    priors=None if priors is None else priors.get(surface.name),
                )
                best, evals = run_one(surface, search)
                found = surface(best)
                mruns.append(
                    RunRecord(
                        method,
                        surface.name,
                        seed,
                        found,
                        evals,
                        (top - found) / (top - med) if top != med else 0.0,
                        found >= thr,
                        found / top if top != 0 else float("nan"),
                        best.as_dict(),
                    )
                )
                if bar is not None:
                    bar.update(1)
        seconds = time.perf_counter() - t0
        per_surface = {}
        for surface in surfaces:
            rs = [r for r in mruns if r.surface == surface.name]
            per_surface[surface.name] = _means(rs)
        m = _means(mruns)
        results[method] = MethodResult(
            m["norm_regret"], m["p_top1"], m["found_over_max"], m["evals"], seconds, per_surface
        )
        runs.extend(mruns)
    if bar is not None:
        bar.close()
    return BenchResult(budget, seeds, [s.name for s in surfaces], results, runs)


def _means(rs: Sequence[RunRecord]) -> dict[str, float]:
    return {
        "norm_regret": float(np.mean([r.norm_regret for r in rs])),
        "p_top1": float(np.mean([r.top1 for r in rs])),
        "found_over_max": float(np.mean([r.found_over_max for r in rs])),
        "evals": float(np.mean([r.evals for r in rs])),
    }
