"""What a selection rule gave up on one end-to-end pair: the search's best strategies that the
compile did not ship, judged on the same test items as the baseline and the chosen judge.

A rule that pools its validation items (``lcb``) keeps the baseline unless a strategy's gain
is clear of the noise and of the number of strategies compared; when it does, the report
of the end-to-end benchmark (``benchmarks/e2e.py``) would otherwise say nothing about what
that caution cost or saved. :func:`passed_over` names the strategies to judge (the script
judges them, ``--judge-passed-over K``); :func:`passed_over_report` reads them back from
the stored test items without a call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from judgeopt.data import Record
from judgeopt.evaluate import compare

from ._e2e_rules import finite_or_none
from ._stored import stored_result, strategy_key

__all__ = ["passed_over", "passed_over_report"]


def _ranked_trace(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The search's evaluated strategies, best search score first (no score last; ties in
    trial order), each with its ``search_rank`` (1 = best) and ``key`` (``#<trial + 1>``, the
    name the compile's reports use)."""
    trace = [t for t in (row.get("search") or {}).get("trace") or [] if t.get("strategy")]
    scored = sorted(
        trace,
        key=lambda t: (t.get("score") is None, -(t.get("score") or 0.0), t["number"]),
    )
    return [
        {**t, "search_rank": rank + 1, "key": f"#{t['number'] + 1}"}
        for rank, t in enumerate(scored)
    ]


def passed_over(row: dict[str, Any], k: int) -> list[dict[str, Any]]:
    """The ``k`` strategies with the best search scores that are neither the chosen judge
    nor the baseline, nor a member of the ensemble when the compile shipped one
    (``row["shipped"] == "ensemble"``), each a trace entry with ``search_rank`` and ``key``,
    best first.

    A strategy evaluated twice in the trace is named once. ``k = 0`` names none.
    """
    if k < 0:
        raise ValueError(f"k (the strategies passed over to judge) must be >= 0, got {k}")
    shipped = [row["chosen_strategy"], row["baseline_strategy"]]
    if row.get("shipped") == "ensemble":
        shipped += row.get("ensemble_members") or []
    skip = {strategy_key(s) for s in shipped}
    out: list[dict[str, Any]] = []
    for t in _ranked_trace(row):
        if len(out) >= k:
            break
        key = strategy_key(t["strategy"])
        if t.get("score") is None or key in skip:
            continue
        skip.add(key)
        out.append(t)
    return out


def passed_over_report(
    pair_dir: Path, test: list[Record], row: dict[str, Any], seed: int
) -> list[dict[str, Any]]:
    """Every strategy the compile passed over whose test items are all stored, best search
    score first: its test score, its paired gain over the baseline and its paired
    difference from the chosen judge (each with the bootstrap interval of
    :func:`~judgeopt.evaluate.compare`, whole groups resampled at group level).

    Reads the stored test items only (``test_<strategy_key>.jsonl`` in ``pair_dir``); the
    strategies judged for another reason (a confirm rule's finalists, an ensemble's
    members) are reported too when they were passed over.
    """
    level = row["level"]

    def result(strategy: dict[str, Any]) -> Any:
        return stored_result(pair_dir / f"test_{strategy_key(strategy)}.jsonl", test, level)

    kept_baseline = row["chosen_is_baseline"]
    base = result(row["baseline_strategy"])
    chosen = base if kept_baseline else result(row["chosen_strategy"])
    if base is None or chosen is None:
        return []
    out = []
    for t in passed_over(row, len(row["search"]["trace"])):
        res = result(t["strategy"])
        if res is None:
            continue
        gain = compare(res, base, test, labels=("baseline", t["key"]), seed=seed)
        margin = (  # the same bootstrap when the compile kept the baseline
            gain
            if kept_baseline
            else compare(res, chosen, test, labels=("chosen", t["key"]), seed=seed)
        )
        out.append(
            {
                "key": t["key"],
                "search_rank": t["search_rank"],
                "search_score": finite_or_none(t["score"]),
                "test": finite_or_none(res.metric("spearman")),
                "test_gain": finite_or_none(gain.gain),
                "test_gain_ci": list(gain.gain_ci),
                "minus_chosen": finite_or_none(margin.gain),
                "minus_chosen_ci": list(margin.gain_ci),
                "strategy": t["strategy"],
            }
        )
    return out
