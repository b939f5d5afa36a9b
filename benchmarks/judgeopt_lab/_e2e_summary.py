"""The end-to-end benchmark's summary over pairs (``benchmarks/e2e.py``): the mean gains with
their across-pair intervals, the pre-registered criteria and the printed tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._harness import markdown_table

__all__ = ["across_pairs", "e2e_table", "summarise_e2e"]


def across_pairs(
    gains: Sequence[float | None], cis: Sequence[Sequence[float | None] | None]
) -> dict[str, Any] | None:
    """The mean of per-pair gains with two 95 % intervals.

    ``ci_items``: the uncertainty of these pairs' test items only (each pair's standard error
    read off its paired bootstrap interval as width / 3.92, the pairs independent): is the
    mean gain on *these* tasks real? ``ci_pairs``: a t interval over the pairs' gains, which
    also counts how much the gain varies from task to task: would it carry over to another
    task? With four pairs the second is wide.
    """
    keep = [
        (g, c)
        for g, c in zip(gains, cis, strict=True)
        if g is not None and c is not None and None not in c
    ]
    if not keep:
        return None
    g = np.array([k[0] for k in keep], dtype=float)
    se = np.array([(k[1][1] - k[1][0]) / 3.92 for k in keep], dtype=float)
    k = len(g)
    mean = float(g.mean())
    half = 1.96 * float(np.sqrt((se**2).sum())) / k
    out: dict[str, Any] = {
        "mean": mean,
        "n_pairs": k,
        "ci_items": [mean - half, mean + half],
        "ci_pairs": None,
    }
    if k >= 2:
        from scipy.stats import t

        half_p = float(t.ppf(0.975, k - 1) * g.std(ddof=1) / np.sqrt(k))
        out["ci_pairs"] = [mean - half_p, mean + half_p]
    return out


def summarise_e2e(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The end-to-end benchmark's summary over its pairs' rows: mean gains (absolute and
    relative, of the chosen, the ensemble, the shipped judge and the other rules), the
    count of pairs significantly worse or better, the across-pair intervals
    (:func:`across_pairs`) and the pre-registered criteria of docs/benchmarks.md section 11."""
    rel = [r["relative_gain"] for r in rows if r["relative_gain"] is not None]
    gains = [r["gain"] for r in rows if r["gain"] is not None]
    # The paper's rule (keep the best search score) on the same pairs, from the stored test
    # items of the finalists: what the confirmation step changed. It returns the baseline
    # (gain 0) when the baseline's own search score is the best (``rules_on_test``).
    best_fin = {
        _pair(r): f for r in rows for f in r.get("finalists_on_test") or [] if f["search_rank"] == 1
    }
    for r in rows:
        rule = (r.get("rules_on_test") or {}).get("best_search_score")
        if rule is not None:
            best_fin[_pair(r)] = rule
    veto_rows = {
        _pair(r): r["rules_on_test"]["veto"]
        for r in rows
        if (r.get("rules_on_test") or {}).get("veto") is not None
    }
    passed = {_pair(r): r["passed_over_on_test"][0] for r in rows if r.get("passed_over_on_test")}
    veto_gain = {k: f["test_gain"] for k, f in veto_rows.items() if f["test_gain"] is not None}
    best_gain = {k: f["test_gain"] for k, f in best_fin.items() if f["test_gain"] is not None}
    best_rel = [
        best_gain[_pair(r)] / abs(r["baseline"])
        for r in rows
        if _pair(r) in best_gain and r["baseline"]
    ]
    ens_gains = [r["ensemble_gain"] for r in rows if r.get("ensemble_gain") is not None]
    ens_rel = [
        r["ensemble_gain"] / abs(r["baseline"])
        for r in rows
        if r.get("ensemble_gain") is not None and r["baseline"]
    ]
    # The mean of per-pair relative gains explodes on a near-zero baseline (0.063 turns
    # -0.18 into -287 %); the mean gain over the mean baseline is the robust companion.
    bases = [abs(r["baseline"]) for r in rows if r["baseline"] is not None]
    base = float(np.mean(bases)) if bases else 0.0
    shipped = [r["shipped_gain"] for r in rows if r.get("shipped_gain") is not None]
    shipped_rel = [
        r["shipped_relative_gain"] for r in rows if r.get("shipped_relative_gain") is not None
    ]
    out = {
        "mean_gain_shipped": float(np.mean(shipped)) if shipped else None,
        "mean_relative_gain_shipped": float(np.mean(shipped_rel)) if shipped_rel else None,
        "pairs_significantly_worse_shipped": sum(
            bool(r.get("shipped_significantly_worse")) for r in rows
        ),
        "mean_relative_gain": float(np.mean(rel)) if rel else None,
        "mean_gain": float(np.mean(gains)) if gains else None,
        "mean_relative_gain_ensemble": float(np.mean(ens_rel)) if ens_rel else None,
        "pairs_significantly_worse": sum(r["significantly_worse"] for r in rows),
        "pairs_significantly_better": sum(
            r["gain_ci"][0] is not None and r["gain_ci"][0] > 0 for r in rows
        ),
        "n_pairs": len(rows),
        "mean_relative_gain_best_search_score": float(np.mean(best_rel)) if best_rel else None,
        "mean_baseline": base if bases else None,
        "relative_mean_gain": float(np.mean(gains)) / base if gains and base else None,
        "relative_mean_gain_ensemble": (
            float(np.mean(ens_gains)) / base if ens_gains and base else None
        ),
        "relative_mean_gain_best_search_score": (
            float(np.mean(list(best_gain.values()))) / base if best_gain and base else None
        ),
        "mean_relative_gain_veto": (
            float(
                np.mean(
                    [
                        veto_gain[_pair(r)] / abs(r["baseline"])
                        for r in rows
                        if _pair(r) in veto_gain and r["baseline"]
                    ]
                )
            )
            if veto_gain
            else None
        ),
        "relative_mean_gain_veto": (
            float(np.mean(list(veto_gain.values()))) / base if veto_gain and base else None
        ),
        "pairs_significantly_worse_veto": sum(
            f["test_gain_ci"] is not None
            and f["test_gain_ci"][1] is not None
            and f["test_gain_ci"][1] < 0
            for f in veto_rows.values()
        ),
        "mean_gain_intervals": {
            "chosen": across_pairs([r["gain"] for r in rows], [r["gain_ci"] for r in rows]),
            "ensemble": across_pairs(
                [r.get("ensemble_gain") for r in rows], [r.get("ensemble_gain_ci") for r in rows]
            ),
            "ensemble_minus_chosen": across_pairs(
                [r.get("ensemble_minus_chosen") for r in rows],
                [r.get("ensemble_minus_chosen_ci") for r in rows],
            ),
            "best_search_score": _across(rows, best_fin, "test_gain"),
            "veto": _across(rows, veto_rows, "test_gain"),
            "veto_minus_chosen": _across(rows, veto_rows, "minus_chosen"),
            "best_search_score_minus_chosen": _across(rows, best_fin, "minus_chosen"),
            # The best-ranked strategy the compile did not ship among those judged on test
            # (rank 1 of ``--judge-passed-over``): what the selection rule gave up.
            "passed_over_best": _across(rows, passed, "test_gain"),
            "passed_over_best_minus_chosen": _across(rows, passed, "minus_chosen"),
        },
    }
    out["criteria"] = {
        "n_pairs": len(rows),
        "ensemble": _criterion(
            rows,
            out["mean_gain_intervals"]["ensemble_minus_chosen"],
            lambda r: r.get("ensemble_gain_ci"),
        ),
        "veto": _criterion(
            rows,
            out["mean_gain_intervals"]["veto_minus_chosen"],
            lambda r: veto_rows.get(_pair(r), {}).get("test_gain_ci"),
        ),
        "best_search_score": _criterion(
            rows,
            out["mean_gain_intervals"]["best_search_score_minus_chosen"],
            lambda r: best_fin.get(_pair(r), {}).get("test_gain_ci"),
        ),
    }
    return out


def _pair(row: dict[str, Any]) -> tuple[str, str]:
    return (row["task"], row["aspect"])


def _across(
    rows: list[dict[str, Any]], by_pair: dict[tuple[str, str], dict[str, Any]], key: str
) -> dict[str, Any] | None:
    """:func:`across_pairs` of the per-pair outcomes ``by_pair`` (a rule's pick, a
    finalist, a passed-over strategy): their ``key`` and its interval ``key_ci``."""
    picked = [by_pair.get(_pair(r), {}) for r in rows]
    return across_pairs([p.get(key) for p in picked], [p.get(f"{key}_ci") for p in picked])


def _criterion(
    rows: list[dict[str, Any]], margin: dict[str, Any] | None, gain_ci: Any
) -> dict[str, Any]:
    """The pre-registered test of a candidate default (docs/benchmarks.md section 11,
    "Held-out pairs"): over the pairs, its mean margin over the chosen judge has an items
    interval above zero, and on no pair is it significantly worse than the baseline (every
    pair must have both numbers)."""
    worse, missing = [], []
    for r in rows:
        ci = gain_ci(r)
        name = f"{r['task']}/{r['aspect']}"
        if ci is None or None in ci:
            missing.append(name)
        elif ci[1] < 0:
            worse.append(name)
    above = margin is not None and margin["n_pairs"] == len(rows) and margin["ci_items"][0] > 0
    return {
        "margin_over_chosen": None if margin is None else margin["mean"],
        "margin_ci_items": None if margin is None else margin["ci_items"],
        "pairs_significantly_worse_than_baseline": worse,
        "pairs_missing": missing,
        "met": bool(rows) and above and not worse and not missing,
    }


def e2e_table(rows: list[dict[str, Any]]) -> str:
    """The end-to-end benchmark's markdown tables: per pair, the other rules, the finalists."""

    def f(x: Any) -> str:
        return "n/a" if x is None else f"{x:+.3f}" if isinstance(x, float) else str(x)

    def ci(pair: Any) -> str:
        lo, hi = pair or [None, None]
        return f"[{f(lo)}, {f(hi)}]"

    main_rows = [
        [
            f"{r['task']}/{r['aspect']}",
            r["level"],
            f"{r['n_valid']} / {r['n_test']}",
            f(r["baseline"]),
            f(r["chosen"]),
            f"{f(r['gain'])} {ci(r['gain_ci'])}",
            f(r["ensemble"]),
            f"{f(r['ensemble_gain'])} {ci(r['ensemble_gain_ci'])}",
            "yes" if r["chosen_is_baseline"] else "no",
            r.get("shipped", "chosen"),
        ]
        for r in rows
    ]
    rule_rows = []
    for r in rows:
        rules = r.get("rules_on_test") or {}
        b, v = rules.get("best_search_score"), rules.get("veto")
        if b is None or v is None:
            continue
        rule_rows.append(
            [
                f"{r['task']}/{r['aspect']}",
                f(rules["baseline_search_score"]),
                b["returns"],
                f"{f(b['test_gain'])} {ci(b['test_gain_ci'])}",
                v["returns"],
                f"{f(v['confirm_gain'])} ({f(v['upper_bound'])})",
                f"{f(v['test_gain'])} {ci(v['test_gain_ci'])}",
            ]
        )
    finalist_rows = [
        [
            f"{r['task']}/{r['aspect']}",
            fin["key"],
            fin["search_rank"],
            f(fin["search_score"]),
            f(fin["confirm_gain"]),
            "yes" if fin["confirmed"] else "no",
            f(fin["test"]),
            f"{f(fin['test_gain'])} {ci(fin['test_gain_ci'])}",
        ]
        for r in rows
        for fin in r.get("finalists_on_test") or []
    ]
    passed_rows = [
        [
            f"{r['task']}/{r['aspect']}",
            t["key"],
            t["search_rank"],
            f(t["search_score"]),
            f(t["test"]),
            f"{f(t['test_gain'])} {ci(t['test_gain_ci'])}",
            f"{f(t['minus_chosen'])} {ci(t['minus_chosen_ci'])}",
        ]
        for r in rows
        for t in r.get("passed_over_on_test") or []
    ]

    def per_item(c: Any) -> str:
        if not c:
            return "n/a"
        secs = "time not measured" if c.get("seconds") is None else f"{c['seconds']:.1f} s"
        return f"{c['calls']:g} call{'' if c['calls'] == 1 else 's'}, {secs}"

    cost_rows = [
        [
            f"{r['task']}/{r['aspect']}",
            per_item(r["cost_per_item"].get("baseline")),
            per_item(r["cost_per_item"].get("chosen")),
            f"{r.get('shipped', 'chosen')}: {per_item(r['cost_per_item'].get('shipped'))}",
            "; ".join(
                f"{t['key']}: {per_item(t)}" for t in r["cost_per_item"].get("passed_over") or []
            )
            or "none",
        ]
        for r in rows
        if r.get("cost_per_item")
    ]
    cost_part = (
        [
            "",
            "Cost per judged item (calls; wall seconds per call measured on the compile's "
            "own validation calls, times the calls per item):",
            "",
            markdown_table(
                ["pair", "baseline", "chosen", "shipped", "passed over"],
                cost_rows,
            ),
        ]
        if cost_rows
        else []
    )
    rated_rows = [
        [
            f"{r['task']}/{r['aspect']}",
            f"{rb['n_items']} of {rb['n_test']}",
            f(rb["baseline"]),
            *(
                f"{f(rb[name]['gain'])} {ci(rb[name]['gain_ci'])}" if rb.get(name) else "n/a"
                for name in ("chosen", "ensemble")
            ),
            "; ".join(
                f"{t['key']}: {f(t['gain'])} {ci(t['gain_ci'])}"
                for t in rb.get("passed_over") or []
            )
            or "none",
        ]
        for r in rows
        if (rb := r.get("rated_by_baseline"))
    ]
    rated_part = (
        [
            "",
            "On the test items the baseline rated (its unparsed answers, imputed by its mean "
            "rating in the headline, left out for every judge):",
            "",
            markdown_table(
                [
                    "pair",
                    "items",
                    "baseline",
                    "chosen gain [95% CI]",
                    "ensemble gain [95% CI]",
                    "passed over: gain [95% CI]",
                ],
                rated_rows,
            ),
        ]
        if rated_rows
        else []
    )
    return "\n".join(
        [
            markdown_table(
                [
                    "pair",
                    "level",
                    "n valid / test",
                    "baseline",
                    "chosen",
                    "gain [95% CI]",
                    "ensemble",
                    "ensemble gain [95% CI]",
                    "chosen = baseline",
                    "shipped",
                ],
                main_rows,
            ),
            "",
            "Other selection rules on test (from the stored judgements, no call; the "
            "baseline's own search score counts):",
            "",
            markdown_table(
                [
                    "pair",
                    "baseline search score",
                    "best search score: returns",
                    "test gain [95% CI]",
                    "veto: returns",
                    "confirmation gain (80% upper bound)",
                    "test gain [95% CI]",
                ],
                rule_rows,
            ),
            "",
            "Finalists on test (search rank 1 is the paper's rule's pick unless the "
            "baseline's search score is higher):",
            "",
            markdown_table(
                [
                    "pair",
                    "finalist",
                    "search rank",
                    "search score",
                    "confirmation gain",
                    "confirmed",
                    "test",
                    "test gain [95% CI]",
                ],
                finalist_rows,
            ),
            "",
            "Strategies the compile passed over, on test (``--judge-passed-over``; the "
            "margin is their paired test difference from the shipped chosen judge):",
            "",
            markdown_table(
                [
                    "pair",
                    "strategy",
                    "search rank",
                    "search score",
                    "test",
                    "test gain [95% CI]",
                    "minus chosen [95% CI]",
                ],
                passed_rows,
            ),
            *cost_part,
            *rated_part,
        ]
    )
