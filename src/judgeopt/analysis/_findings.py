"""The findings and notes of an :class:`Analysis`: sentences computed from its numbers."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ._aggregation_comparison import _nanmean
from ._format import _f, _p, _pct

if TYPE_CHECKING:  # the analysis calls these; it is named in types only
    from ._analysis import Analysis


def _binom_p(k: int, n: int, p: float) -> float:
    from scipy import stats  # type: ignore[import-untyped, unused-ignore]

    if n == 0 or not 0.0 < p < 1.0:
        return math.nan
    return float(stats.binomtest(k, n, p, alternative="two-sided").pvalue)


def _findings(a: Analysis) -> list[str]:
    pct = f"{100 * a.top.fraction:g} %"
    return [
        *_best_findings(a),
        *_share_findings(a, pct),
        *_aggregation_findings(a),
        *_stability_findings(a, pct),
    ]


def _best_findings(a: Analysis) -> list[str]:
    """The best strategies per `between` value."""
    if not (a.between and a.best_between):
        return []
    between = a.between
    obj = f"`{a.table.objective}`"
    out: list[str] = []
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
    return out


def _share_findings(a: Analysis, pct: str) -> list[str]:
    """Patterns among the top strategies, per value of `between`, and of the value groups."""
    out: list[str] = []
    if a.between:
        for f in a.table.factors:
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
    return out


def _aggregation_findings(a: Analysis) -> list[str]:
    if not a.comparisons:
        return []
    out: list[str] = []
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
    return out


def _stability_findings(a: Analysis, pct: str) -> list[str]:
    """Stability of the factor rankings per changed dimension, and of the top shares across
    the other group columns (e.g. across tasks)."""
    t = a.table
    out: list[str] = []
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
