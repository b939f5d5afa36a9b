"""What ``judgeopt compile`` does after an aspect's search: judge the chosen judge (and its
ensemble) against the baseline on the held-out test items, write the judge and its report,
and print the summary (the strategies, the choice, the plan beside what was spent, the cost
per judged item)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..evaluate import Comparison, evaluate_against
from ..report import write_judge_report

if TYPE_CHECKING:  # the CLI imports them where they are used: they load DSPy
    from ..data import Record
    from ..judge import JudgeEnsemble, JudgeProgram
    from ..teleprompt import CompileResult, JudgeSearch

__all__ = ["judge_on_test", "planned_and_spent", "print_compile_summary", "write_judge"]


def judge_on_test(
    args: argparse.Namespace,
    optimizer: JudgeSearch,
    judge: JudgeProgram,
    ensemble: JudgeEnsemble | None,
    baseline: JudgeProgram,
    test: list[Record],
) -> tuple[JudgeProgram, JudgeEnsemble | None]:
    """``judge`` (and its ensemble) against ``baseline`` on the test records: the judge and
    the ensemble, each with its test results."""
    res, _, comp = evaluate_against(
        judge,
        baseline,
        test,
        threads=args.threads,
        progress=not args.no_progress,
        desc="test",
        max_consecutive_failures=optimizer.config.max_consecutive_failures,
    )
    bad = res.parse_failures + res.call_failures
    too_many = (
        [
            f"the chosen judge gave no rating for {bad} of {res.n} test items "
            f"({bad / res.n:.0%}), more than max_parse_failures="
            f"{optimizer.config.max_parse_failures:g}"
        ]
        if res.n and bad / res.n > optimizer.config.max_parse_failures
        else []
    )
    judge = judge.with_report(
        judge.report_.with_test(
            res.summary(), res.items, comparison=comp.to_dict(), problems=too_many
        )
    )
    if ensemble is not None:
        eres, _, ecomp = evaluate_against(
            ensemble,
            baseline,
            test,
            labels=("baseline", "ensemble"),
            threads=args.threads,
            progress=not args.no_progress,
            desc="test",
            max_consecutive_failures=optimizer.config.max_consecutive_failures,
        )
        ensemble = ensemble.with_report(
            ensemble.report_.with_test(eres.summary(), comparison=ecomp.to_dict())
        )
    return judge, ensemble


def write_judge(
    args: argparse.Namespace, judge: JudgeProgram, ensemble: JudgeEnsemble | None, out: Path
) -> None:
    """Save the judge (or the ensemble, and the judge beside it), print the summary and write
    the report."""
    if ensemble is not None:
        single = out.with_name(out.stem + ".single.json")
        judge.save(single)
        ensemble.save(out)
    else:
        judge.save(out)
    print_compile_summary(judge, ensemble)
    if ensemble is not None:
        print(
            f"wrote {out} (the ensemble of {len(ensemble.members)} strategies) and {single} "
            "(the chosen single judge)"
        )
    else:
        print(f"wrote {out}")
    if not args.no_report:
        report = out.with_name(out.stem + ".report")
        write_judge_report(judge, report)
        print(f"wrote the report {report / 'index.html'}")


def _print_comparisons(comparisons: dict[str, Any] | None) -> None:
    for split, data in (comparisons or {}).items():
        comp = Comparison(**{**data, "gain_ci": tuple(data["gain_ci"])})
        for line in comp.lines(split):
            print(line)


def planned_and_spent(res: CompileResult, plan: dict[str, Any]) -> str:
    """The search's plan (made before its first call) beside what this run spent on it."""
    from ..evaluate import duration

    spread = plan.get("spread") or {}
    calls = f"planned about {plan['calls']:,} calls"
    if "calls" in spread:
        lo, hi = spread["calls"]
        calls += f" ({round(lo):,}-{round(hi):,} on 8 in 10 simulated search paths)"
    in_flight = int(plan.get("in_flight") or 1)
    at = "one call at a time" if in_flight == 1 else f"{in_flight} calls in flight"
    planned = f"{calls}, {plan['prompt_tokens'] + plan['completion_tokens']:,} tokens" + (
        f", {duration(plan['seconds'])} {at}" if plan["seconds"] else ""
    )
    spent = (
        f"the search made {res.calls:,} calls ({res.prompt_tokens + res.completion_tokens:,} "
        f"tokens), the choice {res.selection_calls:,}; the run took {duration(res.seconds)}"
    )
    return f"cost: {planned}; {spent}"


def _print_cost(cost: dict[str, Any] | None, shipped_ensemble: bool) -> None:
    """The judges' cost per judged item (the selection record's ``cost_per_item``)."""
    from ..teleprompt import JudgeCost

    if not cost:
        return
    print("cost per judged item (the search's own calls; wall time at its concurrency):")
    shipped = "ensemble" if shipped_ensemble and cost.get("ensemble") else "chosen"
    for name in ("baseline", "chosen", "ensemble"):
        if cost.get(name):
            mark = "  (the judge written)" if name == shipped else ""
            print(f"  {name:<9} {JudgeCost.from_dict(cost[name]).phrase()}{mark}")


def print_compile_summary(judge: JudgeProgram, ensemble: JudgeEnsemble | None) -> None:
    res = judge.search_result
    sel = judge.selection or {}
    part = (
        f"on {sel['search_items']} search items"
        if sel.get("rule") in ("confirm", "veto")
        else f"on {sel.get('search_items', '?')} validation items"
    )
    best = (
        "nan" if res.best_score is None or math.isnan(res.best_score) else f"{res.best_score:.4f}"
    )
    resumed = (
        f", {res.calls_this_run} of them in this run" if res.calls_this_run != res.calls else ""
    )
    print(
        f"search: {res.search}, {res.evaluations} strategies {part}; best {res.metric} "
        f"{best} ({res.calls} calls{resumed}, {res.prompt_tokens + res.completion_tokens} "
        f"tokens, {res.seconds:.0f} s{' in this run' if resumed else ''})"
    )
    if res.plan is not None:
        print(f"  {planned_and_spent(res, res.plan)}")
    print(
        f"  {'#':>3} {res.metric:>9} {'unparsed':>9} {'failed':>7}  strategy (changes from "
        "the first)"
    )
    first = res.evaluation_summaries[0]["strategy"] if res.evaluation_summaries else {}
    for s in res.evaluation_summaries:
        value = s.get(res.metric)
        changed = ", ".join(f"{k}={v}" for k, v in s["strategy"].items() if first.get(k) != v)
        print(
            f"  {s['number'] + 1:>3} {'nan' if value is None else f'{value:.4f}':>9} "
            f"{s['parse_failures']:>4}/{s['n']:<4} {s['call_failures']:>3}/{s['n']:<3}  "
            f"{changed or '(the first)'}"
        )
    if res.racing is not None:
        print(
            f"racing: {res.racing['dropped']} of {res.evaluations} strategies dropped early; "
            f"{res.racing['items_judged']} of {res.racing['items_full']} judgements made"
        )
    for message in sel.get("messages", []):
        print(message)
    cost = sel.get("cost")
    if cost and sel.get("rule") in ("confirm", "veto"):
        print(
            f"confirmation: {sel['confirm_items']} items, {cost['calls']} calls, "
            f"{cost['seconds']:.0f} s"
        )
    print(f"chosen strategy: {judge.strategy}")
    val = judge.validation
    if val is not None:
        print(
            f"chosen judge on the {val['n']} search items: {val['parse_failures']} unparsed, "
            f"{val['call_failures']} failed calls"
        )
    if res.selection_calls:
        print(
            f"calls: {res.calls} for the search, {res.selection_calls} for choosing the "
            f"judge ({res.calls + res.selection_calls} in all)"
        )
    _print_comparisons(judge.comparisons)
    _print_cost(sel.get("cost_per_item"), ensemble is not None)
    if ensemble is not None:
        anchor = (ensemble.selection or {}).get("anchor") or 0.0
        print(
            f"ensemble of {len(ensemble.members)} strategies"
            + (f" (the baseline at weight {anchor:g})" if anchor else "")
            + ":"
        )
        _print_comparisons(ensemble.comparisons)
