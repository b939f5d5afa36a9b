"""The end-to-end pairs re-scored under the current selection rules, from stored judgements.

Two rules changed after the end-to-end pairs (``benchmarks/e2e.py``) were run:

- at group level a judge that gives one rating to every item of a group now scores 0 in that
  group instead of being left out (``constant_groups="zero"``, docs/metrics.md);
- a strategy that gave no rating for more than ``max_parse_failures`` (0.25) of its search
  items is no longer a finalist (docs/judge.md, "Choosing the judge").

This script asks, for every finished pair, what the same twenty evaluated strategies look
like under the current rules: each strategy's search score (recomputed with the library's
own ``score_items`` from the checkpoint's judged items, numbered from 1 as the compile's
summary numbers them; the old score is recomputed with
``constant_groups="skip"`` and must equal the recorded one), the finalists the current rules
would take, and, where a finalist's test items are stored (it was a finalist or an ensemble
member before), its test gain over the baseline, scored under the current rules.

Then the three rules are applied to the new finalists as the compile applies them
(``confirm``, the default, ``veto`` and the search's best), with the confirmation items the
compile held out, and each rule's pick is looked up on test; ``summary`` gives each rule's
mean test gain over every pair and over the held-out pairs, with the items and the pairs
interval of ``e2e.across_pairs``. By default it makes no call
and changes no result: a finalist whose confirmation or test items were never judged is
listed as such, and a rule that needs it gives no answer. ``--judge-missing`` judges, with
the embedded model, the confirmation items of every new finalist and the test items of every
rule's pick (not of the other finalists), as ``benchmarks/e2e.py`` would have; they are kept
beside the pair's other judgements (``confirm_<key>.jsonl``, ``test_<key>.jsonl``), so
nothing is judged twice and an interrupted run resumes.

It is a re-ranking of the strategies the search evaluated, not a new search: with other
scores HPSS would have proposed other strategies after its first rounds. And it is after
the fact: the rules were changed for the reasons in docs/metrics.md and docs/judge.md, not
fitted to these numbers, but these pairs are where the reasons were seen.

Usage:
    python benchmarks/rescore_e2e.py [--json benchmarks/results/rescore_e2e.json]
        [--judge-missing [--model local]]
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from judgeopt.data import Record, load_records
from judgeopt.evaluate import (
    EvalResult,
    compare,
    item_predictions,
    merge_results,
    score_items,
)
from judgeopt.judge import JudgeProgram, load_task
from judgeopt.lm import make_lm
from judgeopt.metrics import correlation
from judgeopt.selection import choose, confirmation_split, veto
from judgeopt.teleprompt import ItemStore, load_optimizer
from judgeopt_lab import (
    EXIT_INTERRUPTED,
    confirmation_kwargs,
    evaluate_stored,
    finite_or_none,
    run_interruptible,
    stored_result,
    strategy_key,
    write_json,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
e2e = importlib.import_module("e2e")  # the sibling script: its split, intervals and DATA

RESULTS = ROOT / "benchmarks" / "results"
RUNS = ROOT / "benchmarks" / "runs"
SOURCES = ("e2e.json", "e2e_heldout.json")


def old_score(items: list[Any], level: str, groups: list[Any] | None) -> float | None:
    """The search score as recorded before the change (judge-constant groups left out)."""
    human = np.asarray([float(i.human) for i in items])
    pred = np.asarray(item_predictions(items))
    if sum(i.score is not None for i in items) < 3:
        return None
    try:
        return correlation(
            human, pred, groups=groups if level == "group" else None, constant_groups="skip"
        )
    except ValueError:
        return 0.0  # a judge constant on every item, as score_items scores it


def rescore_pair(
    row: dict[str, Any],
    source: str,
    max_parse_failures: float,
    n_finalists: int,
    lm: Any = None,
    progress: bool = False,
) -> dict[str, Any]:
    task_name, aspect, level = row["task"], row["aspect"], row["level"]
    task = load_task(task_name)
    valid, test = e2e.split_groups(
        load_records(e2e.DATA / task_name / "full.jsonl"),
        row["n_valid"],
        row["n_test"],
        0,
        per_group=e2e.PER_GROUP.get(task_name),
    )
    sel_cfg = load_optimizer("auto").selection
    humans = [r.scores[aspect] for r in valid]
    grouped = any(r.group_id for r in valid)
    search_idx, confirm_idx = confirmation_split(
        humans,
        [r.group_id or r.id for r in valid] if grouped else None,
        fraction=sel_cfg.confirm_fraction,
        seed=sel_cfg.seed,
    )
    search: list[Record] = [valid[i] for i in search_idx]
    confirm: list[Record] = [valid[i] for i in confirm_idx]
    groups = [r.group_id or r.id for r in search]
    pair_dir = RUNS / "e2e_runs" / f"{task_name}_{aspect}"
    store = ItemStore(pair_dir / "ckpt" / "items.jsonl")
    base = JudgeProgram(task, aspect)
    evaluations = [
        json.loads(line)
        for line in (pair_dir / "ckpt" / "evaluations.jsonl").read_text().splitlines()
        if line
    ]
    strategies = []
    for ev in evaluations:
        strategy = base.with_strategy(ev["strategy"]).strategy.as_dict()
        stored = store.items(strategy)
        items = [stored.get(r.id) for r in search]
        entry: dict[str, Any] = {
            # Numbered from 1, as the compile's summary and messages number them (the
            # checkpoint's evaluation number + 1; the e2e pairs' own logs numbered from 0).
            "key": f"#{ev['number'] + 1}",
            "strategy": strategy,
            "recorded": ev.get("spearman"),
            "unrated": int(ev.get("parse_failures") or 0) + int(ev.get("call_failures") or 0),
            "n": int(ev["n"]),
        }
        if any(i is None for i in items):
            entry["error"] = "not every search item is stored"
        else:
            entry["old"] = old_score(items, level, groups)
            entry["new"] = score_items(items, pairwise=False, level=level, groups=groups)[
                "spearman"
            ]
        entry["eligible"] = not (entry["n"] and entry["unrated"] / entry["n"] > max_parse_failures)
        strategies.append(entry)
    check = [
        abs(s["old"] - s["recorded"])
        for s in strategies
        if s.get("old") is not None and s.get("recorded") is not None
    ]
    base_dict = row["baseline_strategy"]

    def ranked(score: str, eligible_only: bool) -> list[dict[str, Any]]:
        seen, out = {json.dumps(base_dict, sort_keys=True)}, []
        for s in sorted(
            (s for s in strategies if s.get(score) is not None and math.isfinite(s[score])),
            key=lambda s: -s[score],
        ):
            k = json.dumps(s["strategy"], sort_keys=True)
            if k in seen or (eligible_only and not s["eligible"]):
                continue
            seen.add(k)
            out.append(s)
        return out[:n_finalists]

    def judged(
        strategy: dict[str, Any], records: list[Record], part: str, call: bool = True
    ) -> EvalResult | None:
        """``strategy`` on ``records``: from the stored judgements, else (``lm`` given)
        judged now and kept; ``None`` when not stored and no LM."""
        path = pair_dir / f"{part}_{strategy_key(strategy)}.jsonl"
        if part == "confirm":
            kept = store.items(strategy)
            if all(r.id in kept for r in records):
                return merge_results(
                    [
                        EvalResult(
                            n=len(records),
                            parse_failures=0,
                            call_failures=0,
                            level=level,
                            items=[kept[r.id] for r in records],
                        )
                    ],
                    records,
                    pairwise=False,
                    level=level,
                )
        res = stored_result(path, records, level)
        if res is None and lm is not None and call:
            program = JudgeProgram(task, aspect, lm=lm).with_strategy(strategy)
            res = evaluate_stored(
                program, records, path, desc=f"{part}: {strategy}", progress=progress
            )
        return res

    base_test = judged(base_dict, test, "test")

    def on_test(strategy: dict[str, Any], call: bool = True) -> dict[str, Any]:
        res = judged(strategy, test, "test", call)
        if res is None or base_test is None:
            return {"test": None, "test_gain": None, "test_gain_ci": None}
        c = compare(res, base_test, test, seed=0)
        return {
            "test": finite_or_none(res.metric("spearman")),
            "test_gain": finite_or_none(c.gain),
            "test_gain_ci": list(c.gain_ci),
        }

    def brief(s: dict[str, Any]) -> dict[str, Any]:
        return {
            "key": s["key"],
            "old": s.get("old"),
            "new": s.get("new"),
            "unrated": s["unrated"],
            "n": s["n"],
            **on_test(s["strategy"], False),
        }

    base_entry = next((s for s in strategies if s["strategy"] == base_dict), None)
    now = ranked("new", True)
    rules = apply_rules(
        now,
        base_entry,
        lambda st: judged(st, confirm, "confirm"),
        confirm,
        aspect,
        level,
        sel_cfg,
        on_test,
    )
    return {
        "source": source,
        "task": task_name,
        "aspect": aspect,
        "level": level,
        "search_items": len(search),
        "check_max_abs_diff": max(check) if check else None,
        "baseline_search": None
        if base_entry is None
        else {
            "old": base_entry.get("old"),
            "new": base_entry.get("new"),
            "unrated": base_entry["unrated"],
            "n": base_entry["n"],
        },
        "baseline_test": None
        if base_test is None
        else finite_or_none(base_test.metric("spearman")),
        "finalists_before": [brief(s) for s in ranked("old", False)],
        "finalists_now": [brief(s) for s in ranked("new", True)],
        "changed": [s["key"] for s in ranked("old", False)] != [s["key"] for s in now],
        "rules_now": rules,
    }


def apply_rules(
    finalists: list[dict[str, Any]],
    base_entry: dict[str, Any] | None,
    on_confirm: Any,
    confirm: list[Record],
    aspect: str,
    level: str,
    sel_cfg: Any,
    on_test: Any,
) -> dict[str, Any]:
    """What ``confirm``, ``veto`` and the search's best return with these finalists, and
    the test gain of each pick (a rule returning the baseline gains exactly 0)."""
    out: dict[str, Any] = {}
    base_search = None if base_entry is None else base_entry.get("new")
    if not finalists:
        return {"error": "no eligible finalist"}
    top = finalists[0]
    best_is_base = base_search is not None and not base_search < top["new"]
    baseline_pick = {"returns": "baseline", "test_gain": 0.0, "test_gain_ci": [0.0, 0.0]}
    out["best_search_score"] = (
        baseline_pick if best_is_base else {"returns": top["key"], **on_test(top["strategy"])}
    )
    base_res = on_confirm(base_entry["strategy"]) if base_entry else None
    fin_res = [on_confirm(f["strategy"]) for f in finalists]
    human = [r.scores[aspect] for r in confirm]
    groups = [r.group_id or r.id for r in confirm] if level == "group" else None
    kw = confirmation_kwargs(sel_cfg, groups)

    def vec(res: EvalResult) -> list[float]:
        by_id = {i.id: i for i in res.items}
        return item_predictions([by_id[r.id] for r in confirm])

    def not_judged(results: list[EvalResult | None], keys: list[str]) -> dict[str, Any] | None:
        missing = [k for k, r in zip(keys, results, strict=True) if r is None]
        return (
            {"error": "confirmation items not judged: " + ", ".join(missing)} if missing else None
        )

    keys = [f["key"] for f in finalists]
    out["confirm"] = not_judged([base_res, *fin_res], ["baseline", *keys])
    out["veto"] = not_judged([base_res, fin_res[0]], ["baseline", keys[0]])
    if out["confirm"] is None:
        c = choose(human, vec(base_res), [vec(r) for r in fin_res], keys=keys, **kw)
        out["confirm"] = {
            "reason": c.reason,
            "confirm_gains": [
                finite_or_none(f.gain.delta) if f.gain is not None else None for f in c.finalists
            ],
            **(
                baseline_pick
                if c.chosen is None
                else {
                    "returns": finalists[c.chosen]["key"],
                    **on_test(finalists[c.chosen]["strategy"]),
                }
            ),
        }
    if out["veto"] is not None:
        return out
    v = veto(
        human,
        vec(base_res),
        vec(fin_res[0]),
        search_score=float(top["new"]),
        baseline_search_score=base_search,
        key=top["key"],
        **kw,
    )
    out["veto"] = {
        "reason": v.reason,
        "confirm_gain": finite_or_none(v.finalists[0].gain.delta),
        "upper_bound": finite_or_none(v.finalists[0].upper_bound),
        **(
            baseline_pick
            if v.chosen is None
            else {"returns": top["key"], **on_test(top["strategy"])}
        ),
    }
    return out


RULES = ("confirm", "veto", "best_search_score")


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each rule's mean test gain (``e2e.across_pairs``: the items and the pairs interval),
    over every pair and over the held-out pairs alone, and relative to the mean baseline."""
    base = [r["baseline_test"] for r in rows if r.get("baseline_test") is not None]
    mean_base = float(np.mean(base)) if base else None
    out: dict[str, Any] = {"mean_baseline": mean_base, "n_pairs": len(base)}
    parts = {"all": rows, "heldout": [r for r in rows if r["source"] == "e2e_heldout.json"]}
    for name in RULES:
        out[name] = {}
        for part, subset in parts.items():
            picks = [r["rules_now"].get(name) or {} for r in subset]
            mean = e2e.across_pairs(
                [p.get("test_gain") for p in picks], [p.get("test_gain_ci") for p in picks]
            )
            if mean is not None and part == "all" and mean_base:
                mean["relative"] = mean["mean"] / mean_base
            out[name][part] = mean
    return out


def table(rows: list[dict[str, Any]]) -> str:
    def f(x: Any) -> str:
        return "n/a" if x is None else f"{x:+.3f}" if isinstance(x, float) else str(x)

    def fins(items: list[dict[str, Any]]) -> str:
        out = []
        for s in items:
            t = (
                "test not judged"
                if s["test_gain"] is None
                else f"test {f(s['test_gain'])} [{f(s['test_gain_ci'][0])}, "
                f"{f(s['test_gain_ci'][1])}]"
            )
            out.append(f"{s['key']} {f(s['new'])} ({s['unrated']}/{s['n']} unrated; {t})")
        return "; ".join(out)

    lines = [
        "| pair | finalists before (old score) | finalists now (new score; test gain "
        "over the baseline) | changed |",
        "|---|---|---|---|",
    ]
    for r in rows:
        before = ", ".join(f"{s['key']} {f(s['old'])}" for s in r["finalists_before"])
        lines.append(
            f"| {r['task']}/{r['aspect']} | {before} | {fins(r['finalists_now'])} | "
            f"{'yes' if r['changed'] else 'no'} |"
        )
    lines += ["", "| pair | rule | returns | test gain [95% CI] |", "|---|---|---|---|"]
    for r in rows:
        for name in RULES:
            pick = r["rules_now"].get(name) or {}
            if "error" in pick or "returns" not in pick:
                lines.append(
                    f"| {r['task']}/{r['aspect']} | {name} | "
                    f"{pick.get('error', r['rules_now'].get('error'))} | |"
                )
                continue
            ci = pick.get("test_gain_ci") or [None, None]
            gain = (
                "test not judged"
                if pick.get("test_gain") is None
                else f"{f(pick['test_gain'])} [{f(ci[0])}, {f(ci[1])}]"
            )
            lines.append(f"| {r['task']}/{r['aspect']} | {name} | {pick['returns']} | {gain} |")
    summary = summarise(rows)
    lines += [
        "",
        f"mean baseline on test: {f(summary['mean_baseline'])} ({summary['n_pairs']} pairs)",
        "",
        "| rule | pairs | mean test gain | items 95% CI | pairs 95% CI | relative |",
        "|---|---|---|---|---|---|",
    ]
    for name in RULES:
        for part, m in summary[name].items():
            if m is None:
                lines.append(f"| {name} | {part} | no test gain | | | |")
                continue
            ci_p = m["ci_pairs"] or [None, None]
            lines.append(
                f"| {name} | {part} ({m['n_pairs']}) | {f(m['mean'])} | "
                f"[{f(m['ci_items'][0])}, {f(m['ci_items'][1])}] | "
                f"[{f(ci_p[0])}, {f(ci_p[1])}] | {f(m.get('relative'))} |"
            )
    return "\n".join(lines)


#: How the JSON's strategy keys (``#N``) count: written into it, since its keys numbered from 0
#: until 2026-11-27 (the e2e pairs' compile logs and the docs' e2e sections still do).
NUMBERING = (
    "strategies are numbered from 1, as in the compile's summary (the checkpoint's "
    "evaluation number + 1)"
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=str(RESULTS / "rescore_e2e.json"))
    p.add_argument("--finalists", type=int, default=3)
    p.add_argument(
        "--judge-missing",
        action="store_true",
        help="judge the new finalists' confirmation items and the rules' picks' "
        "test items that are not stored",
    )
    p.add_argument("--model", default="local")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    limit = load_optimizer("auto").max_parse_failures
    lm = None
    if args.judge_missing:
        lm = make_lm(args.model, cache=RUNS / "e2e_runs" / "lm-cache", parallel=e2e.E2E_PARALLEL)
    rows = []

    def rescore_all() -> int:
        for source in SOURCES:
            path = RESULTS / source
            if not path.is_file():
                continue
            for row in json.loads(path.read_text(encoding="utf-8"))["pairs"]:
                rows.append(
                    rescore_pair(
                        row, source, limit, args.finalists, lm=lm, progress=not args.no_progress
                    )
                )
        return 0

    def stopped() -> None:
        print(
            "stopped; the judgements made are kept: run the same command to resume", file=sys.stderr
        )

    # Only a run that judges (--judge-missing) has something to keep on SIGTERM.
    if run_interruptible(rescore_all, on_stop=stopped, sigterm=lm is not None) == EXIT_INTERRUPTED:
        return EXIT_INTERRUPTED
    out = {
        "numbering": NUMBERING,
        "max_parse_failures": limit,
        "finalists": args.finalists,
        "pairs": rows,
        "summary": summarise(rows),
    }
    write_json(args.json, out)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
