"""Is an end-to-end gain more than the baseline's unparsed answers?

The MT-Bench baseline explains before it rates, and the embedded 1.5B sometimes writes until
its token limit without a rating (a fifth of SummEval consistency's test answers). An
unparsed answer is imputed by the judge's mean rating, a tie in the correlation, so part of
a judge's gain over the baseline can be the baseline's failures to answer rather than better
ratings. :func:`rated_report` scores the gain again on the test items the baseline did rate,
paired and with the same bootstrap (whole groups at group level), from the stored
judgements, without a call: the user's gain (all items, the headline) and this one bound
what the failures explain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from judgeopt.data import Record
from judgeopt.evaluate import compare, ensemble_result
from judgeopt.judge import load_judge

from ._e2e_rules import finite_or_none
from ._stored import stored_result, strategy_key

__all__ = ["rated_report"]


def rated_report(
    pair_dir: Path, test: list[Record], row: dict[str, Any], seed: int
) -> dict[str, Any] | None:
    """The shipped judge (and, when it is an ensemble, the chosen single judge) against the
    baseline on the test items the baseline rated: ``n_items`` rated of ``n_test``, each
    judge's score there and its paired ``gain`` with ``gain_ci``; ``passed_over``: the same
    for each strategy of ``row["passed_over_on_test"]`` judged on every test item.

    ``None`` when a needed judge's test items are not all stored (a pair still running) or
    the shipped ensemble's file (``ensemble.json``) is missing.
    """
    level = row["level"]

    def result(strategy: dict[str, Any], records: list[Record]) -> Any:
        return stored_result(pair_dir / f"test_{strategy_key(strategy)}.jsonl", records, level)

    base_all = result(row["baseline_strategy"], test)
    if base_all is None:
        return None
    rated_ids = {i.id for i in base_all.items if i.score is not None and i.error is None}
    rated = [r for r in test if r.id in rated_ids]
    judges: dict[str, Any] = {}
    chosen = result(row["chosen_strategy"], rated)
    if chosen is None:
        return None
    judges["chosen"] = chosen
    if row.get("shipped") == "ensemble":
        path = pair_dir / "ensemble.json"
        members = [result(s, rated) for s in row.get("ensemble_members") or []]
        if not path.is_file() or not members or any(m is None for m in members):
            return None
        judges["ensemble"] = ensemble_result(load_judge(path), members, rated)
    base = result(row["baseline_strategy"], rated)
    out: dict[str, Any] = {
        "n_items": len(rated),
        "n_test": len(test),
        "baseline": finite_or_none(base.metric("spearman")),
    }
    for name, res in judges.items():
        c = compare(res, base, rated, labels=("baseline", name), seed=seed)
        out[name] = {
            "score": finite_or_none(res.metric("spearman")),
            "gain": finite_or_none(c.gain),
            "gain_ci": list(c.gain_ci),
        }
    passed = []
    for t in row.get("passed_over_on_test") or []:
        res = result(t["strategy"], rated)
        if res is None:
            continue
        c = compare(res, base, rated, labels=("baseline", t["key"]), seed=seed)
        passed.append(
            {
                "key": t["key"],
                "score": finite_or_none(res.metric("spearman")),
                "gain": finite_or_none(c.gain),
                "gain_ci": list(c.gain_ci),
            }
        )
    out["passed_over"] = passed
    out["note"] = (
        "the test items the baseline rated (its unparsed answers left out for every judge); "
        "paired gain and bootstrap interval as for the headline"
    )
    return out
