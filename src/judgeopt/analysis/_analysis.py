"""The whole analysis of a results table: :func:`analyze` and its result, :class:`Analysis`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .. import __version__
from ._aggregate import AGGREGATIONS, check_aggregation
from ._aggregation_comparison import AggregationComparison, compare_aggregations
from ._clusters import Cluster, best_between, best_strategies
from ._findings import _findings, _notes
from ._format import _num, _round_tree
from ._items import ItemScores
from ._patterns import Stability, TopPrompts, pattern_scores, ranking_stability, top_prompts
from ._table import ResultsTable

__all__ = ["Analysis", "analyze"]

ValueGroupSpec = Mapping[str, Mapping[str, Sequence[str]]]


@dataclass(frozen=True)
class Analysis:
    """Everything :func:`analyze` computed; :meth:`to_dict` for JSON, :func:`write_report`.

    Attributes:
        table: The analysed table.
        top: The top strategies of every setting (:func:`top_prompts`).
        value_groups: Factor -> category -> values counted together in the shares.
        best: The best strategies of every setting with their significance cluster.
        between: The group column whose values were compared (e.g. ``"model"``), or ``None``.
        best_between: Per setting of the other group columns, the best of each ``between``.
        aggregation: The aggregation of the stability heatmaps.
        rankings: Factor -> aggregation -> value -> score, over all rows.
        stability: ``(target, changed)`` -> :class:`Stability` with ``aggregation``.
        comparisons: Factor -> :class:`AggregationComparison`.
        findings: Sentences stating the results, computed from the data.
        notes: Caveats (missing values, the significance test used).
    """

    table: ResultsTable = field(repr=False)
    top: TopPrompts = field(repr=False)
    value_groups: dict[str, dict[str, list[str]]]
    best: list[Cluster] = field(repr=False)
    between: str | None
    best_between: list[Cluster] = field(repr=False)
    aggregation: str
    rankings: dict[str, dict[str, dict[str, float]]] = field(repr=False)
    stability: dict[tuple[str, str], Stability] = field(repr=False)
    comparisons: dict[str, AggregationComparison] = field(repr=False)
    findings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def test(self) -> str:
        """The significance test of the clusters."""
        return self.best[0].test if self.best else "none"

    def share_tables(self, column: str, *, groups: bool = False) -> dict[str, Any]:
        """Shares of ``column``'s values (or its value groups) among the top strategies.

        Returns:
            ``{"base_rate": {...}, "overall": {...}, "by": {col: {value: {...}}}}`` where
            ``by`` splits by every group column and by the whole group.
        """
        vg = self.value_groups.get(column) if groups else None
        top = self.top
        out: dict[str, Any] = {
            "base_rate": top.shares(column, value_groups=vg, among="all").get((), {}),
            "overall": top.shares(column, value_groups=vg).get((), {}),
            "by": {},
        }
        splits: list[tuple[str, ...]] = [(g,) for g in self.table.group]
        if len(self.table.group) > 1:
            splits.append(self.table.group)
        for cols in splits:
            if column in cols:
                continue
            out["by"][" / ".join(cols)] = {
                " / ".join(k): v for k, v in top.shares(column, by=cols, value_groups=vg).items()
            }
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable form of the whole analysis."""
        t = self.table
        shares = {
            f: {k: _round_tree(v) for k, v in self.share_tables(f).items()} for f in t.factors
        }
        group_shares = {
            f: {k: _round_tree(v) for k, v in self.share_tables(f, groups=True).items()}
            for f in self.value_groups
        }
        return {
            "judgeopt_version": __version__,
            "source": t.source,
            "objective": t.objective,
            "factors": list(t.factors),
            "group": list(t.group),
            "n_rows": t.n_rows,
            "n_missing": t.n_missing,
            "missing_by_setting": t.missing_by_setting(),
            "levels": {d: list(v) for d, v in t.levels.items()},
            "significance": {
                "test": self.test,
                "method": self.best[0].method if self.best else None,
                "alpha": self.best[0].alpha if self.best else None,
            },
            "best": [c.to_dict() for c in self.best],
            "between": self.between,
            "best_between": [c.to_dict() for c in self.best_between],
            "top": {
                "fraction": self.top.fraction,
                "within": list(self.top.within),
                "n_top": self.top.n_top,
                "thresholds": {k: _num(v) for k, v in self.top.thresholds.items()},
                "shares": shares,
                "value_groups": self.value_groups,
                "value_group_shares": group_shares,
            },
            "rankings": _round_tree(self.rankings),
            "aggregation": self.aggregation,
            "stability": [s.to_dict() for s in self.stability.values()],
            "aggregation_comparison": {f: c.to_dict() for f, c in self.comparisons.items()},
            "findings": list(self.findings),
            "notes": list(self.notes),
        }


def _check_value_groups(
    table: ResultsTable, value_groups: ValueGroupSpec | None
) -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    for column, cats in (value_groups or {}).items():
        if column not in table.factors:
            raise ValueError(
                f"`value_groups` names {column!r}, which is not a factor; factors: "
                f"{list(table.factors)!r}."
            )
        if not isinstance(cats, Mapping) or not cats:
            raise ValueError(
                f"`value_groups[{column!r}]` must map category names to lists of values."
            )
        out[column] = {str(k): list(v) if not isinstance(v, str) else [v] for k, v in cats.items()}
        # Validates the values (raises naming the allowed ones).
        top_prompts(table, fraction=1.0).counts(column, value_groups=out[column])
    return out


def _check_arguments(
    table: ResultsTable,
    aggregation: str,
    aggregations: Sequence[str],
    value_groups: ValueGroupSpec | None,
) -> tuple[tuple[str, ...], dict[str, dict[str, list[str]]]]:
    """The aggregations to compare (``aggregation`` among them) and the checked value groups."""
    check_aggregation(aggregation)
    if table.n_missing == table.n_rows:
        raise ValueError(f"No row of {table.source} has a `{table.objective}` value to analyse.")
    aggs = tuple(dict.fromkeys(check_aggregation(a, "aggregations") for a in aggregations))
    if aggregation not in aggs:
        aggs = (aggregation, *aggs)
    return aggs, _check_value_groups(table, value_groups)


def _clusters(
    table: ResultsTable,
    between: str | None,
    rng: np.random.Generator,
    *,
    items: ItemScores | None,
    test: str | None,
    method: str | None,
    alpha: float,
    max_candidates: int,
    n_resamples: int,
) -> tuple[list[Cluster], list[Cluster]]:
    """The best strategies of every setting, and the best of each ``between`` value."""
    best = best_strategies(
        table,
        items=items,
        test=test,
        method=method,
        alpha=alpha,
        max_candidates=max_candidates,
        n_resamples=n_resamples,
        seed=rng,
    )
    if not between:
        return best, []
    versus = best_between(
        table,
        between,
        items=items,
        test=test,
        method=method,
        alpha=alpha,
        n_resamples=n_resamples,
        seed=rng,
    )
    return best, versus


def _rankings_and_stability(
    table: ResultsTable,
    aggregation: str,
    aggs: tuple[str, ...],
    n_resamples: int,
    rng: np.random.Generator,
) -> tuple[
    dict[str, dict[str, dict[str, float]]],
    dict[tuple[str, str], Stability],
    dict[str, AggregationComparison],
]:
    """The rankings, their stability with ``aggregation`` and the comparison of ``aggs``."""
    rankings = {
        f: {a: pattern_scores(table, f, aggregation=a) for a in aggs} for f in table.factors
    }
    dims = [d for d in table.dimensions if len(table.levels[d]) >= 2]
    stability = {
        (t, d): ranking_stability(table, t, d, aggregation=aggregation)
        for t in dims
        for d in dims
        if t != d
    }
    comparisons = {}
    if len(aggs) >= 2:
        for f in table.factors:
            if len(table.levels[f]) >= 2 and any(d != f for d in dims):
                comparisons[f] = compare_aggregations(
                    table,
                    f,
                    changed=[d for d in dims if d != f],
                    aggregations=aggs,
                    n_resamples=n_resamples,
                    seed=rng,
                )
    return rankings, stability, comparisons


def analyze(
    table: ResultsTable,
    *,
    items: ItemScores | None = None,
    fraction: float = 0.02,
    aggregation: str = "median",
    aggregations: Sequence[str] = AGGREGATIONS,
    value_groups: ValueGroupSpec | None = None,
    between: str | None = None,
    test: str | None = None,
    method: str | None = None,
    alpha: float = 0.075,
    max_candidates: int = 20,
    n_resamples: int = 1000,
    seed: int | None = 0,
) -> Analysis:
    """Run the whole PrExMe-style analysis of a results table.

    Args:
        table: The results (:func:`load_results`).
        items: Per-item scores for the permute-input significance test.
        fraction: The top fraction of every setting whose patterns are counted (0.02).
        aggregation: The aggregation of the stability heatmaps (PrExMe: median).
        aggregations: The aggregations ranked and compared for stability.
        value_groups: Factor -> category -> values counted together, e.g.
            ``{"format_requirement": {"textual labels": [...], "numeric scores": [...]}}``.
        between: Group column whose values compete in :func:`best_between` (default: the
            first group column; ``None`` when the table has no group).
        test, method, alpha, max_candidates, n_resamples: As :func:`best_strategies`.
        seed: Seed of every permutation test (the analysis is deterministic for a seed).

    Returns:
        An :class:`Analysis`.

    Raises:
        ValueError: On an unknown column, aggregation or value, bad numeric arguments, or a
            table without any objective value.
    """
    aggs, groups = _check_arguments(table, aggregation, aggregations, value_groups)
    if between is None and table.group:
        between = table.group[0]
    rng = np.random.default_rng(seed)
    top = top_prompts(table, fraction=fraction)
    best, versus = _clusters(
        table,
        between,
        rng,
        items=items,
        test=test,
        method=method,
        alpha=alpha,
        max_candidates=max_candidates,
        n_resamples=n_resamples,
    )
    rankings, stability, comparisons = _rankings_and_stability(
        table, aggregation, aggs, n_resamples, rng
    )
    analysis = Analysis(
        table=table,
        top=top,
        value_groups=groups,
        best=best,
        between=between,
        best_between=versus,
        aggregation=aggregation,
        rankings=rankings,
        stability=stability,
        comparisons=comparisons,
    )
    return replace(analysis, findings=_findings(analysis), notes=_notes(analysis))
