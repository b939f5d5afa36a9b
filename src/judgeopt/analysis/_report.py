"""The whole analysis of a results table, its findings, and the markdown/JSON/PNG report."""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ._aggregate import AGGREGATIONS, check_aggregation
from ._clusters import Cluster, ItemScores, best_between, best_strategies
from ._figures import figures_available, plot_grouped_bars, plot_heatmap, plot_shares
from ._patterns import (
    AggregationComparison,
    Stability,
    TopPrompts,
    _nanmean,
    compare_aggregations,
    pattern_scores,
    ranking_stability,
    top_prompts,
)
from ._table import ResultsTable

__all__ = ["Analysis", "analyze", "write_report"]

log = logging.getLogger(__name__)

ValueGroupSpec = Mapping[str, Mapping[str, Sequence[str]]]


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:.1f}%"


def _f(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 6)


def _p(x: float) -> str:
    if not math.isfinite(x):
        return "n/a"
    return "< 0.001" if x < 0.001 else f"{x:.3f}"


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


def _round_tree(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _round_tree(v) for k, v in obj.items()}
    if isinstance(obj, float):
        return _num(obj)
    return obj


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
    check_aggregation(aggregation)
    if table.n_missing == table.n_rows:
        raise ValueError(f"No row of {table.source} has a `{table.objective}` value to analyse.")
    aggs = tuple(dict.fromkeys(check_aggregation(a, "aggregations") for a in aggregations))
    if aggregation not in aggs:
        aggs = (aggregation, *aggs)
    groups = _check_value_groups(table, value_groups)
    if between is None and table.group:
        between = table.group[0]
    rng = np.random.default_rng(seed)
    top = top_prompts(table, fraction=fraction)
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
    versus = (
        best_between(
            table,
            between,
            items=items,
            test=test,
            method=method,
            alpha=alpha,
            n_resamples=n_resamples,
            seed=rng,
        )
        if between
        else []
    )
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


# --------------------------------------------------------------------------- findings
def _binom_p(k: int, n: int, p: float) -> float:
    from scipy import stats  # type: ignore[import-untyped, unused-ignore]

    if n == 0 or not 0.0 < p < 1.0:
        return math.nan
    return float(stats.binomtest(k, n, p, alternative="two-sided").pvalue)


def _findings(a: Analysis) -> list[str]:
    t = a.table
    out: list[str] = []
    obj = f"`{t.objective}`"
    # Best strategies per `between` value.
    if a.between and a.best_between:
        between = a.between
        wins: dict[str, list[str]] = {}
        for cl in a.best_between:
            label = " / ".join(cl.setting.values()) or "all"
            wins.setdefault(cl.best.config[between], []).append(f"{label} {_f(cl.best.value)}")
        for name, won in wins.items():
            out.append(
                f"{name} has the best {obj} in {len(won)} of {len(a.best_between)} "
                f"settings ({', '.join(won)})."
            )
        if a.test != "none":
            parts = []
            for cl in a.best_between:
                members = [r.config[between] for r in cl.members]
                label = " / ".join(cl.setting.values()) or "all"
                parts.append(f"{label}: {', '.join(members)}")
            out.append(
                f"Top significance cluster of the best per {a.between} "
                f"({a.test}, alpha {a.best_between[0].alpha:g}): " + "; ".join(parts) + "."
            )
    # Patterns among the top strategies, per value of `between`.
    pct = f"{100 * a.top.fraction:g} %"
    if a.between:
        for f in t.factors:
            cnt = a.top.counts(f, by=(a.between,))
            base = a.top.shares(f, by=(a.between,), among="all")
            for key, row in cnt.items():
                n = sum(row.values())
                v, k = max(row.items(), key=lambda kv: kv[1])
                b = base[key][v]
                out.append(
                    f"{key[0]}: the most frequent {f} among its top {pct} strategies is "
                    f"{v!r} ({k}/{n} = {_pct(k / n)}; {_pct(b)} of all its strategies, "
                    f"two-sided binomial p {_p(_binom_p(k, n, b))})."
                )
    for f, cats in a.value_groups.items():
        for cat in cats:
            rate = a.top.shares(f, value_groups=cats, among="all")[()][cat]
            overall = a.top.counts(f, value_groups=cats)[()]
            parts = []
            if a.between:
                cnt = a.top.counts(f, by=(a.between,), value_groups=cats)
                rates = a.top.shares(f, by=(a.between,), value_groups=cats, among="all")
                for key, row in sorted(
                    cnt.items(), key=lambda kv: -kv[1][cat] / sum(kv[1].values())
                ):
                    n = sum(row.values())
                    parts.append(
                        f"{key[0]} {_pct(row[cat] / n)} ({row[cat]}/{n}, "
                        f"p {_p(_binom_p(row[cat], n, rates[key][cat]))})"
                    )
            n_all = sum(overall.values())
            parts.append(f"all {_pct(overall[cat] / n_all)}")
            out.append(
                f"{f} '{cat}' among the top {pct} strategies: {', '.join(parts)}; "
                f"{_pct(rate)} of all strategies (p: two-sided binomial test against "
                "the base rate)."
            )
    # Aggregations.
    if a.comparisons:
        for f, comp in a.comparisons.items():
            rank = comp.ranking
            beats = comp.significantly_better(comp.best, 0.05)
            out.append(
                f"Most stable ranking of {f}: by {rank[0][0]} (mean Kendall tau "
                f"{_f(rank[0][1], 3)} between settings; next {rank[1][0]} "
                f"{_f(rank[1][1], 3)}); {rank[0][0]} is significantly (p <= 0.05) more "
                f"stable than {', '.join(beats) if beats else 'none of the others'}."
            )
        aggs = next(iter(a.comparisons.values())).aggregations
        mean = {g: _nanmean([c.stability[g] for c in a.comparisons.values()]) for g in aggs}
        order = sorted(mean.items(), key=lambda kv: -kv[1] if math.isfinite(kv[1]) else math.inf)
        out.append(
            "Averaged over the factors, the aggregations rank by stability as: "
            + ", ".join(f"{g} {_f(v, 3)}" for g, v in order)
            + "."
        )
    # Stability per changed dimension, factor targets.
    for d in t.dimensions:
        rows = [(f, a.stability[(f, d)]) for f in t.factors if (f, d) in a.stability]
        if not rows:
            continue
        rows.sort(key=lambda r: -r[1].mean_tau if math.isfinite(r[1].mean_tau) else math.inf)
        parts = []
        for f, s in rows:
            hi = s.most_stable_pair()
            extra = (
                f", most stable {hi[0]} vs {hi[1]} {_f(hi[2], 2)}"
                if hi and len(s.labels) > 2
                else ""
            )
            parts.append(f"{f} {_f(s.mean_tau, 3)}{extra}")
        out.append(
            f"When {d} changes, the {a.aggregation} rankings keep a mean Kendall tau "
            f"of: {'; '.join(parts)}."
        )
    # Stability of the top shares across the other group columns (e.g. across tasks).
    for g in t.group:
        if g == a.between or len(t.levels[g]) < 2:
            continue
        for f in t.factors:
            sh = a.top.shares(f, by=(g,))
            if len(sh) < 2:
                continue
            spread = {v: [row[v] for row in sh.values()] for v in t.levels[f]}
            v, vals = max(spread.items(), key=lambda kv: max(kv[1]) - min(kv[1]))
            out.append(
                f"Across {g}, the top {pct} share of a {f} value changes by at most "
                f"{100 * (max(vals) - min(vals)):.1f} points ({v!r}: "
                f"{_pct(min(vals))} to {_pct(max(vals))})."
            )
    return out


def _notes(a: Analysis) -> list[str]:
    t = a.table
    out = []
    if t.n_missing:
        where = ", ".join(f"{k}: {v}" for k, v in t.missing_by_setting().items())
        out.append(
            f"{t.n_missing} of {t.n_rows} rows have no `{t.objective}` value and are left "
            f"out of every statistic ({where})."
        )
    test = a.test
    if test == "permutation":
        out.append(
            "Significance clusters use the paired permute-input test (Deutsch et al. "
            "2021) on the per-item scores; a candidate is in the top cluster when the "
            f"test of 'the best beats it' gives p > {a.best[0].alpha:g}."
        )
    elif test == "fisher-z":
        out.append(
            f"The table has only aggregate correlations, so PrExMe's permute-input test "
            f"(which needs per-item scores) cannot be run. Clusters use a Fisher-z "
            f"approximation with the `{t.n_column}` column instead: the two correlations are "
            "treated as independent, which ignores that they share the human scores; the "
            "clusters are therefore wider (more conservative) than PrExMe's. Give per-item "
            "scores (`--items`) for the real test."
        )
    else:
        out.append(
            "No per-item scores and no item counts: strategies are ranked only, "
            "without significance clusters."
        )
    out.append(
        "The best of many strategies is an optimistic estimate of its correlation on "
        "new data (selection bias); the clusters do not correct for it."
    )
    return out


# --------------------------------------------------------------------------- report
def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_") or "x"


def _md_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    def cell(x: object) -> str:
        return str(x).replace("|", "\\|")

    lines = [
        "| " + " | ".join(map(cell, header)) + " |",
        "|" + "|".join("---" for _ in header) + "|",
    ]
    lines += ["| " + " | ".join(map(cell, r)) + " |" for r in rows]
    return lines


def _cluster_cell(c: Cluster) -> str:
    if c.size is None:
        return "n/a"
    if c.test == "permutation":
        return f"{c.size} of {c.n_tested + 1} tested"
    return f"{c.size} of {c.n_candidates}"


def write_report(analysis: Analysis, out_dir: str | Path, *, figures: bool = True) -> list[Path]:
    """Write ``report.md``, ``analysis.json`` and the PNG figures into ``out_dir``.

    Args:
        analysis: The result of :func:`analyze`.
        out_dir: Output directory (created if needed); figures are linked relatively.
        figures: Draw the PNG figures. Without matplotlib they are skipped and the report
            says so (``pip install 'judgeopt[report]'``).

    Returns:
        The written files, report first.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    draw = figures and figures_available()
    written: list[Path] = []
    a, t = analysis, analysis.table
    pct = f"{100 * a.top.fraction:g} %"
    lines: list[str] = [f"# Analysis of `{t.source}`", ""]
    sizes = [len(t.levels[f]) for f in t.factors]
    n_strat = int(np.prod(sizes))
    dims_txt = " x ".join(f"{f} ({n})" for f, n in zip(t.factors, sizes, strict=True))
    lines.append(
        f"Objective `{t.objective}` (higher is better) of {t.n_rows} rows: "
        f"{len(t.setting_index()[1])} settings ({' x '.join(t.group) or 'one'}) of up to "
        f"{n_strat} strategies ({dims_txt}). "
        f"Written by `judgeopt analyze`; every number below is computed from the table."
    )
    lines.append("")
    if figures and not draw:
        lines += [
            "> Figures were skipped: matplotlib is not installed "
            "(`pip install 'judgeopt[report]'`).",
            "",
        ]
    lines += ["## Findings", ""] + [f"- {s}" for s in a.findings] + [""]
    lines += ["## Notes", ""] + [f"- {s}" for s in a.notes] + [""]

    # 1. Best strategies.
    lines += ["## 1. Best strategies per setting", ""]
    test_txt = {
        "permutation": "permute-input test",
        "fisher-z": "Fisher-z approximation",
        "none": "no test",
    }[a.test]
    alpha_txt = f", alpha {a.best[0].alpha:g}" if a.test != "none" else ""
    lines.append(
        f"Top cluster: strategies not significantly worse than the best ({test_txt}{alpha_txt})."
    )
    lines.append("")
    rows = []
    for c in a.best:
        b = c.best
        n = "" if b.n_items is None else f"{b.n_items:g}"
        rows.append([*c.setting.values(), b.label, _f(b.value), n, _cluster_cell(c)])
    lines += _md_table([*t.group, "best strategy", t.objective, "n", "top cluster"], rows)
    lines.append("")
    if a.best_between and a.between:
        between = a.between
        lines += [
            f"### Best strategy of each {between}",
            "",
            f"`*` marks the {between}s in the top cluster of their setting; p is the "
            "one-sided p-value of 'the best beats this one'.",
            "",
        ]
        rows = []
        others = [g for g in t.group if g != between]
        for c in a.best_between:
            for r in c.ranked:
                star = "*" if r.in_cluster else ""
                rows.append(
                    [
                        *(c.setting[g] for g in others),
                        r.config[between],
                        ", ".join(v for k, v in r.config.items() if k != between),
                        _f(r.value) + star,
                        _p(r.p_value) if r.p_value is not None else "",
                    ]
                )
        lines += _md_table([*others, between, "best strategy", t.objective, "p"], rows)
        lines.append("")

    # 2. Top shares.
    lines += [
        f"## 2. Patterns among the top {pct} strategies",
        "",
        f"In every setting ({' / '.join(a.top.within) or 'all'}) the strategies at or "
        f"above the {100 * (1 - a.top.fraction):g}th percentile of `{t.objective}` are "
        f"kept ({a.top.n_top} in all), and the share of each factor value among them is "
        "counted; 'all strategies' is the share among every strategy (the base rate).",
        "",
    ]
    for f in t.factors:
        for groups in [False, True] if f in a.value_groups else [False]:
            tab = a.share_tables(f, groups=groups)
            labels = list(tab["base_rate"])
            cols: list[tuple[str, dict[str, float]]] = [("all strategies", tab["base_rate"])]
            for split, per in tab["by"].items():
                if " / " in split:
                    continue
                cols += [(name, sh) for name, sh in per.items()]
            cols.append((f"all top {pct}", tab["overall"]))
            order = sorted(labels, key=lambda v: -tab["overall"].get(v, 0.0))
            title = f"{f} (value groups)" if groups else f
            lines += [f"### {title}", ""]
            lines += _md_table(
                [f, *(c[0] for c in cols)],
                [[v, *(_pct(c[1].get(v, math.nan)) for c in cols)] for v in order],
            )
            lines.append("")
            if draw and order:
                name = f"top_shares_{_slug(f)}{'_groups' if groups else ''}.png"
                base = [100 * tab["base_rate"].get(v, 0.0) for v in order]
                panels = [
                    (
                        f"top {pct} per {split}",
                        [("all strategies", base)]
                        + [(k, [100 * sh.get(v, 0.0) for v in order]) for k, sh in per.items()],
                    )
                    for split, per in tab["by"].items()
                    if " / " not in split
                ]
                if not panels:
                    panels = [
                        (
                            f"top {pct}",
                            [
                                ("all strategies", base),
                                ("top", [100 * tab["overall"].get(v, 0.0) for v in order]),
                            ],
                        )
                    ]
                written.append(
                    plot_shares(
                        out / name,
                        title=f"{title}: share among the top {pct} strategies",
                        labels=order,
                        panels=panels,
                    )
                )
                lines += [f"![{title} shares]({name})", ""]

    # 3. Rankings.
    lines += [
        "## 3. Pattern rankings by aggregation",
        "",
        f"A value's score aggregates `{t.objective}` over every strategy that uses it "
        "(all settings and all other factors pooled).",
        "",
    ]
    for f in t.factors:
        aggs = list(a.rankings[f])
        med = a.rankings[f].get(a.aggregation, a.rankings[f][aggs[0]])
        order = sorted(med, key=lambda v: -med[v] if math.isfinite(med[v]) else math.inf)
        lines += [f"### {f}", ""]
        lines += _md_table(
            [f, *aggs], [[v, *(_f(a.rankings[f][g][v], 3) for g in aggs)] for v in order]
        )
        lines.append("")
        if a.between:
            per = {
                name: pattern_scores(t, f, aggregation=a.aggregation, where={a.between: name})
                for name in t.levels[a.between]
            }
            lines += [f"{a.aggregation.capitalize()} per {a.between}:", ""]
            lines += _md_table([f, *per], [[v, *(_f(per[m][v], 3) for m in per)] for v in order])
            lines.append("")

    # 4. Stability.
    dims = [d for d in t.dimensions if len(t.levels[d]) >= 2]
    lines += [
        "## 4. Stability of the rankings",
        "",
        f"For a ranked dimension (row) and a changed dimension (column), the values of "
        f"the ranked dimension are scored by the {a.aggregation} of `{t.objective}` "
        "separately for each value of the changed one (everything else pooled), and "
        "every two of these rankings are compared with Kendall tau-b. The cell is the "
        "mean tau over the pairs: 1 means the ranking never changes.",
        "",
    ]
    summary = np.full((len(dims), len(dims)), np.nan)
    for i, tgt in enumerate(dims):
        for j, d in enumerate(dims):
            if (tgt, d) in a.stability:
                summary[i, j] = a.stability[(tgt, d)].mean_tau
    lines += _md_table(
        ["ranked \\ changed", *dims],
        [
            [tgt, *(_f(v, 3) if i != j else "-" for j, v in enumerate(summary[i]))]
            for i, tgt in enumerate(dims)
        ],
    )
    lines.append("")
    if draw and len(dims) >= 2:
        name = "stability_summary.png"
        written.append(
            plot_heatmap(
                out / name,
                summary,
                rows=dims,
                cols=dims,
                title=f"Mean Kendall tau between {a.aggregation} rankings",
                xlabel="changed dimension",
                ylabel="ranked dimension",
            )
        )
        lines += [f"![stability summary]({name})", ""]
    if a.comparisons:
        lines += [
            "### Which aggregation gives the most stable rankings?",
            "",
            "Mean Kendall tau between settings (each changed dimension weighs the same); "
            "p-values of 'row is more stable than column' come from a paired sign-flip "
            "permutation test over the compared pairs of settings.",
            "",
        ]
        aggs = list(next(iter(a.comparisons.values())).aggregations)
        lines += _md_table(
            ["ranked", *aggs, "most stable"],
            [
                [f, *(_f(comp.stability[g], 3) for g in aggs), comp.best]
                for f, comp in a.comparisons.items()
            ],
        )
        lines.append("")
        for f, comp in a.comparisons.items():
            lines += [f"p-values for {f} (row more stable than column):", ""]
            lines += _md_table(
                ["", *aggs],
                [
                    [g, *("-" if i == j else _p(comp.p_values[i, j]) for j in range(len(aggs)))]
                    for i, g in enumerate(aggs)
                ],
            )
            lines.append("")
        if draw:
            name = "aggregation_stability.png"
            written.append(
                plot_grouped_bars(
                    out / name,
                    title="Stability of the rankings by aggregation",
                    categories=aggs,
                    series=[
                        (f, [comp.stability[g] for g in aggs]) for f, comp in a.comparisons.items()
                    ],
                    ylabel="mean Kendall tau between settings",
                )
            )
            lines += [f"![aggregation stability]({name})", ""]
            for f, comp in a.comparisons.items():
                name = f"aggregation_significance_{_slug(f)}.png"
                written.append(
                    plot_heatmap(
                        out / name,
                        comp.p_values,
                        rows=aggs,
                        cols=aggs,
                        title=f"p-value: row gives more stable {f} rankings than column",
                        vmin=0.0,
                        vmax=0.2,
                        cmap="viridis_r",
                        fmt="{:.3f}",
                        colorbar="p-value",
                    )
                )
                lines += [f"![aggregation significance {f}]({name})", ""]
    lines += [f"### Heatmaps ({a.aggregation})", ""]
    for d in dims:
        pairs = [(tgt, a.stability[(tgt, d)]) for tgt in dims if (tgt, d) in a.stability]
        lines += [f"#### When {d} changes", ""]
        for tgt, s in pairs:
            lo = s.least_stable_pair()
            hi = s.most_stable_pair()
            txt = f"Ranking of {tgt}: mean tau {_f(s.mean_tau, 3)}"
            if hi and lo and len(s.labels) > 2:
                txt += (
                    f"; most stable {hi[0]} vs {hi[1]} ({_f(hi[2], 2)}), least stable "
                    f"{lo[0]} vs {lo[1]} ({_f(lo[2], 2)})"
                )
            lines += [txt + ".", ""]
            if draw:
                name = f"stability_{_slug(tgt)}_by_{_slug(d)}.png"
                written.append(
                    plot_heatmap(
                        out / name,
                        s.tau,
                        rows=s.labels,
                        cols=s.labels,
                        lower_triangle=True,
                        title=f"Kendall tau of the {tgt} ranking ({a.aggregation})\n"
                        f"between two values of {d}",
                    )
                )
                lines += [f"![{tgt} by {d}]({name})", ""]
    report = out / "report.md"
    report.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    data = out / "analysis.json"
    data.write_text(json.dumps(a.to_dict(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return [report, data, *written]
