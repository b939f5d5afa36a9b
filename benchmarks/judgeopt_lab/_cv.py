"""Nested cross-validation of searches over surfaces: does a search's tuning generalise?

A search *family* is a set of configurations (hyperparameters, design variants, or whole
searches for a per-budget choice), each a factory ``(space, budget, seed, baseline) ->
search``. The protocol, per budget and per held-out group value (e.g. one model):

1. every configuration of the family runs on every *training* surface (the surfaces with
   another value in the held-out column) with seeds ``0 .. seeds-1``;
2. the configuration with the lowest mean normalised regret on the training surfaces is
   selected (ties go to the first configuration listed);
3. the selected configuration is scored on the held-out surfaces with the same seeds.

Every surface is held out exactly once, so each family ends with one out-of-fold run per
(surface, seed), and families are compared on the same runs (paired by surface and seed).
A family with a single configuration (the paper's HPSS, Optuna's TPE) is simply scored on
every surface; a family tuned on *all* surfaces beforehand (``auto`` as shipped before this
protocol) is reported the same way, but its numbers are optimistic.

Standard errors are over the out-of-fold runs (surfaces x seeds): they measure the noise of
the seeds on these surfaces, not the spread of new surfaces, which the per-surface columns
show.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from judgeopt.bench import Surface
from judgeopt.search import FactorSpace, Search, Strategy, Value

#: A search configuration: ``(space, budget, seed, baseline) -> search``.
Factory = Callable[[FactorSpace, int, int, Strategy], Search]
Family = Mapping[str, Factory]


def run_scores(
    surface: Surface,
    factory: Factory,
    *,
    budget: int,
    seeds: int,
    baseline: Strategy,
) -> list[tuple[float, bool]]:
    """``(norm_regret, in_top1)`` of one configuration on one surface, seed by seed."""
    top, med, thr = surface.max, surface.median, surface.top1_threshold
    out = []
    for seed in range(seeds):
        search = factory(surface.space, budget, seed, baseline)
        while (s := search.ask()) is not None:
            search.tell(s, surface(s))
        best = search.best_strategy
        if best is None:
            raise RuntimeError(f"{type(search).__name__} evaluated nothing.")
        found = surface(best)
        out.append(((top - found) / (top - med) if top != med else 0.0, found >= thr))
    return out


class RunCache:
    """Run scores keyed by ``(configuration, budget, surface)``, checkpointed to JSON.

    A benchmark that is cut off resumes from the file: finished (configuration, budget,
    surface) cells are read back, never rerun. Cells with fewer seeds than asked are rerun.

    Args:
        path: JSON checkpoint file (``None``: in memory only).
    """

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = None if path is None else Path(path)
        self._cells: dict[str, list[list[float]]] = {}
        self._dirty = False
        if self.path is not None and self.path.exists():
            self._cells = json.loads(self.path.read_text(encoding="utf-8"))

    @staticmethod
    def key(config: str, budget: int, surface: str) -> str:
        """The cell key ``config|budget|surface``."""
        return f"{config}|{budget}|{surface}"

    def get(
        self,
        config: str,
        budget: int,
        surface: Surface,
        factory: Factory,
        *,
        seeds: int,
        baseline: Strategy,
    ) -> np.ndarray:
        """The ``(seeds, 2)`` array of (regret, top1) for a cell, running it if needed."""
        k = self.key(config, budget, surface.name)
        cell = self._cells.get(k)
        if cell is None or len(cell) < seeds:
            runs = run_scores(surface, factory, budget=budget, seeds=seeds, baseline=baseline)
            cell = [[r, float(t)] for r, t in runs]
            self._cells[k] = cell
            self._dirty = True
        return np.asarray(cell[:seeds], dtype=float)

    def save(self) -> None:
        """Write the checkpoint (atomically) if anything changed."""
        if self.path is None or not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._cells), encoding="utf-8")
        tmp.replace(self.path)
        self._dirty = False


@dataclass(frozen=True)
class CVMethodResult:
    """One family at one budget under the protocol.

    Attributes:
        norm_regret: Mean out-of-fold normalised regret.
        se_regret: Its standard error over the out-of-fold runs.
        p_top1: Share of out-of-fold runs that found a top-1 % strategy.
        se_top1: Its standard error.
        picks: Held-out group value -> the configuration selected on the other surfaces.
        per_surface: Surface -> mean out-of-fold regret.
        regrets: The out-of-fold regrets, in (surface, seed) order.
    """

    norm_regret: float
    se_regret: float
    p_top1: float
    se_top1: float
    picks: dict[str, str]
    per_surface: dict[str, float]
    regrets: list[float] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "norm_regret": self.norm_regret,
            "se_regret": self.se_regret,
            "p_top1": self.p_top1,
            "se_top1": self.se_top1,
            "picks": self.picks,
            "per_surface": self.per_surface,
        }


@dataclass(frozen=True)
class CVResult:
    """The outcome of :func:`cross_validate_searches` for one held-out column."""

    hold_out: str
    seeds: int
    surfaces: list[str]
    budgets: list[int]
    families: dict[str, list[str]]
    results: dict[int, dict[str, CVMethodResult]]

    def paired(self, budget: int, a: str, b: str) -> tuple[float, float]:
        """Mean and standard error of ``regret(a) - regret(b)``, paired by surface and seed."""
        d = np.asarray(self.results[budget][a].regrets) - np.asarray(
            self.results[budget][b].regrets
        )
        return float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else 0.0

    def verdict(self, budget: int, a: str, others: Sequence[str]) -> str:
        """``win``, ``tie`` or ``loss`` of ``a`` against the better of ``others``.

        The better of ``others`` is the one with the lower mean regret; ``a`` wins when its
        mean regret is lower by more than one standard error of ``a``'s mean, loses when higher
        by more than one, and ties otherwise.
        """
        res = self.results[budget]
        best = min(others, key=lambda m: res[m].norm_regret)
        diff = res[a].norm_regret - res[best].norm_regret
        se = res[a].se_regret
        return "win" if diff < -se else "loss" if diff > se else "tie"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "hold_out": self.hold_out,
            "seeds": self.seeds,
            "surfaces": self.surfaces,
            "families": self.families,
            "budgets": {},
        }
        names = list(self.families)
        for b in self.budgets:
            entry: dict[str, Any] = {m: r.to_dict() for m, r in self.results[b].items()}
            entry["paired"] = {
                f"{x}-{y}": dict(zip(("mean", "se"), self.paired(b, x, y), strict=True))
                for i, x in enumerate(names)
                for y in names[i + 1 :]
            }
            out["budgets"][str(b)] = entry
        return out

    def table(self) -> str:
        """Markdown table: mean regret ± s.e. / P(top 1 %) ± s.e. per budget and family."""
        names = list(self.families)
        head = "| budget | " + " | ".join(names) + " |"
        lines = [
            f"nested leave-one-{self.hold_out}-out, {len(self.surfaces)} surfaces x "
            f"{self.seeds} seeds: mean norm. regret ± s.e. / P(top 1 %) ± s.e.",
            head,
            "|---" * (len(names) + 1) + "|",
        ]
        for b in self.budgets:
            cells = [
                f"{self.results[b][m].norm_regret:.3f} ± {self.results[b][m].se_regret:.3f}"
                f" / {self.results[b][m].p_top1:.2f} ± {self.results[b][m].se_top1:.2f}"
                for m in names
            ]
            lines.append(f"| {b} | " + " | ".join(cells) + " |")
        return "\n".join(lines)


def cross_validate_searches(
    surfaces: Sequence[Surface],
    families: Mapping[str, Family],
    *,
    hold_out: str,
    budgets: Sequence[int] = (20, 35, 50, 71, 120),
    seeds: int = 20,
    baseline: Mapping[str, Value] | None = None,
    cache: RunCache | None = None,
    log: Callable[[str], None] | None = None,
) -> CVResult:
    """Nested cross-validation of search families, one held-out group value at a time.

    Args:
        surfaces: From :func:`~judgeopt.bench.load_surfaces` (with group columns).
        families: Family name -> {configuration name -> factory}. Configuration names must
            be unique across families when they denote different searches (they key the
            cache); the first configuration wins ties in the selection.
        hold_out: The group column whose values are held out in turn (``"model"``,
            ``"task"``).
        budgets: Budgets (unique evaluations per run); the selection is made per budget.
        seeds: Seeds ``0 .. seeds-1`` per configuration and surface.
        baseline: Starting strategy (default: the space's first values).
        cache: Run cache (e.g. checkpointed to a file to resume); a fresh in-memory one by
            default.
        log: Called with a line of progress after each configuration and budget.

    Returns:
        A :class:`CVResult`.

    Raises:
        ValueError: On no surfaces, an empty family, ``seeds < 1``, a column that is not a
            group column, or a column with a single value (nothing to train on).
    """
    if not surfaces:
        raise ValueError("No surfaces to run on.")
    if seeds < 1:
        raise ValueError(f"`seeds` must be >= 1. Got {seeds}.")
    empty = [f for f, configs in families.items() if not configs]
    if empty:
        raise ValueError(f"Family {empty[0]!r} has no configuration.")
    missing = [s.name for s in surfaces if hold_out not in s.group]
    if missing:
        raise ValueError(f"`{hold_out}` is not a group column of surface(s) {missing!r}.")
    folds = list(dict.fromkeys(s.group[hold_out] for s in surfaces))
    if len(folds) < 2:
        raise ValueError(f"`{hold_out}` has a single value ({folds!r}): nothing to train on.")
    cache = RunCache() if cache is None else cache
    base = {
        s.name: (s.space.default() if baseline is None else s.space.strategy(dict(baseline)))
        for s in surfaces
    }
    results: dict[int, dict[str, CVMethodResult]] = {}
    for budget in budgets:
        results[budget] = {}
        for fam, configs in families.items():
            t0 = time.perf_counter()
            # cell[config][surface] -> (seeds, 2)
            cells = {
                c: {
                    s.name: cache.get(c, budget, s, f, seeds=seeds, baseline=base[s.name])
                    for s in surfaces
                }
                for c, f in configs.items()
            }
            cache.save()
            picks: dict[str, str] = {}
            oof: dict[str, np.ndarray] = {}
            for fold in folds:
                train = [s.name for s in surfaces if s.group[hold_out] != fold]
                test = [s.name for s in surfaces if s.group[hold_out] == fold]
                scores = {c: float(np.mean([cells[c][n][:, 0] for n in train])) for c in configs}
                pick = min(configs, key=lambda c: scores[c])  # first listed wins ties
                picks[fold] = pick
                for n in test:
                    oof[n] = cells[pick][n]
            runs = np.concatenate([oof[s.name] for s in surfaces])
            reg, top = runs[:, 0], runs[:, 1]
            n = len(reg)
            results[budget][fam] = CVMethodResult(
                float(reg.mean()),
                float(reg.std(ddof=1) / math.sqrt(n)) if n > 1 else 0.0,
                float(top.mean()),
                float(math.sqrt(top.mean() * (1 - top.mean()) / n)),
                picks,
                {s.name: float(oof[s.name][:, 0].mean()) for s in surfaces},
                [float(x) for x in reg],
            )
            if log is not None:
                r = results[budget][fam]
                log(
                    f"b{budget} {fam}: {r.norm_regret:.3f} ± {r.se_regret:.3f} / "
                    f"{r.p_top1:.2f}  picks {picks}  ({time.perf_counter() - t0:.1f} s)"
                )
    return CVResult(
        hold_out,
        seeds,
        [s.name for s in surfaces],
        list(budgets),
        {f: list(c) for f, c in families.items()},
        results,
    )
