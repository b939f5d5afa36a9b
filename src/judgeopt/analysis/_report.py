"""The markdown/JSON/PNG report of an :class:`Analysis` (:func:`write_report`)."""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._analysis import Analysis
from ._clusters import Cluster
from ._figures import figures_available, plot_grouped_bars, plot_heatmap, plot_shares
from ._format import _f, _p, _pct
from ._patterns import pattern_scores

__all__ = ["write_report"]

log = logging.getLogger(__name__)


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
    fig_dir = out if draw else None
    written: list[Path] = []
    a = analysis
    lines = _intro_lines(a, skipped=figures and not draw)
    lines += _best_lines(a)
    lines += _share_lines(a, fig_dir, written)
    lines += _ranking_lines(a)
    lines += _stability_lines(a, fig_dir, written)
    report = out / "report.md"
    report.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    data = out / "analysis.json"
    data.write_text(json.dumps(a.to_dict(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return [report, data, *written]


def _intro_lines(a: Analysis, *, skipped: bool) -> list[str]:
    t = a.table
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
    if skipped:
        lines += [
            "> Figures were skipped: matplotlib is not installed "
            "(`pip install 'judgeopt[report]'`).",
            "",
        ]
    lines += ["## Findings", ""] + [f"- {s}" for s in a.findings] + [""]
    lines += ["## Notes", ""] + [f"- {s}" for s in a.notes] + [""]
    return lines


def _best_lines(a: Analysis) -> list[str]:
    t = a.table
    lines = ["## 1. Best strategies per setting", ""]
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
    if not (a.best_between and a.between):
        return lines
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
    return lines


def _share_lines(a: Analysis, fig_dir: Path | None, written: list[Path]) -> list[str]:
    t = a.table
    pct = f"{100 * a.top.fraction:g} %"
    lines = [
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
            if fig_dir is not None and order:
                name = f"top_shares_{_slug(f)}{'_groups' if groups else ''}.png"
                written.append(
                    plot_shares(
                        fig_dir / name,
                        title=f"{title}: share among the top {pct} strategies",
                        labels=order,
                        panels=_share_panels(tab, order, pct),
                    )
                )
                lines += [f"![{title} shares]({name})", ""]
    return lines


def _share_panels(
    tab: dict[str, Any], order: list[str], pct: str
) -> list[tuple[str, list[tuple[str, list[float]]]]]:
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
    if panels:
        return panels
    return [
        (
            f"top {pct}",
            [
                ("all strategies", base),
                ("top", [100 * tab["overall"].get(v, 0.0) for v in order]),
            ],
        )
    ]


def _ranking_lines(a: Analysis) -> list[str]:
    t = a.table
    lines = [
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
    return lines


def _stability_lines(a: Analysis, fig_dir: Path | None, written: list[Path]) -> list[str]:
    t = a.table
    dims = [d for d in t.dimensions if len(t.levels[d]) >= 2]
    lines = [
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
    if fig_dir is not None and len(dims) >= 2:
        name = "stability_summary.png"
        written.append(
            plot_heatmap(
                fig_dir / name,
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
        lines += _comparison_lines(a, fig_dir, written)
    return lines + _heatmap_lines(a, dims, fig_dir, written)


def _comparison_lines(a: Analysis, fig_dir: Path | None, written: list[Path]) -> list[str]:
    lines = [
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
    if fig_dir is None:
        return lines
    name = "aggregation_stability.png"
    written.append(
        plot_grouped_bars(
            fig_dir / name,
            title="Stability of the rankings by aggregation",
            categories=aggs,
            series=[(f, [comp.stability[g] for g in aggs]) for f, comp in a.comparisons.items()],
            ylabel="mean Kendall tau between settings",
        )
    )
    lines += [f"![aggregation stability]({name})", ""]
    for f, comp in a.comparisons.items():
        name = f"aggregation_significance_{_slug(f)}.png"
        written.append(
            plot_heatmap(
                fig_dir / name,
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
    return lines


def _heatmap_lines(
    a: Analysis, dims: list[str], fig_dir: Path | None, written: list[Path]
) -> list[str]:
    lines = [f"### Heatmaps ({a.aggregation})", ""]
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
            if fig_dir is not None:
                name = f"stability_{_slug(tgt)}_by_{_slug(d)}.png"
                written.append(
                    plot_heatmap(
                        fig_dir / name,
                        s.tau,
                        rows=s.labels,
                        cols=s.labels,
                        lower_triangle=True,
                        title=f"Kendall tau of the {tgt} ranking ({a.aggregation})\n"
                        f"between two values of {d}",
                    )
                )
                lines += [f"![{tgt} by {d}]({name})", ""]
    return lines
