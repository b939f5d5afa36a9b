"""End to end: does a compiled judge beat the MT-Bench baseline on held-out items?

For every task-aspect pair: whole groups of the dataset's full file are split, seeded, into a
validation set (at least ``--n-valid`` items) and a disjoint test set (at least ``--n-test``
items). ``judgeopt``'s default compile (the default search and selection rule of the
``--optimizer`` preset; ``auto``'s ``lcb`` keeps the baseline unless a strategy's paired gain
on the validation items has a lower bound above zero, corrected for the number compared) runs
with ``--budget`` strategies and an ensemble of the ``--ensemble`` best; then the MT-Bench
baseline, the chosen judge and the ensemble are scored on the test items; the *shipped* judge
is what ``judgeopt compile`` writes (the preset's ensemble when it builds one, else the chosen
judge; ``shipped_*`` fields). Per pair: the test
correlations, each gain over the baseline with its paired bootstrap interval (whole groups are
resampled for a group-level correlation), the confirmation results (what the compile saw), the
chosen strategy, calls and seconds. With ``--judge-passed-over K`` (default 1) the ``K``
strategies with the best search scores that the compile did not ship are judged on the same
test items too (``passed_over_on_test``: what the selection rule gave up or saved).
``rated_by_baseline`` scores the gains again on the test items the baseline rated (an
unparsed answer is imputed by the mean rating: is the gain more than the baseline's
failures to answer?).

Every pair checkpoints its compile (``OUT_DIR/<task>_<aspect>/ckpt``) and judge calls are
cached (``OUT_DIR/lm-cache``): an interrupted run resumes where it stopped, across sessions.
Ctrl-C or SIGTERM (the way to stop a ``nohup ... &`` run, which ignores SIGINT) ends the run
with exit code 130; the same command resumes it.
The JSON is rewritten after each pair::

    {"pairs": [{"task", "aspect", "model", "n_valid", "n_test", "baseline", "chosen",
                "ensemble", "gain", "gain_ci": [lo, hi], ...}], "mean_relative_gain": ..}

Usage:
    python benchmarks/e2e.py [--pairs sfres:naturalness,topical_chat:naturalness,
        topical_chat:coherence,summeval:coherence] [--model local] [--budget 20] [--n-valid 100]
        [--n-test 200] [--ensemble M] [--judge-passed-over K] [--parallel 8]
        [--out-dir benchmarks/runs/e2e_runs] [--json benchmarks/results/e2e.json]

Set JUDGEOPT_THREADS to the CPU threads of the local model (default 2).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from judgeopt.data import Record, load_records, split_holdout
from judgeopt.demo import E2E_SPLIT, PER_GROUP
from judgeopt.evaluate import EvalResult, compare, ensemble_result
from judgeopt.judge import JudgeProgram, load_task
from judgeopt.lm import make_lm, parse_local_model
from judgeopt.search import Strategy
from judgeopt.teleprompt import JudgeSearch, judge_cost, load_optimizer
from judgeopt_lab import (
    EXIT_INTERRUPTED,
    across_pairs,
    e2e_table,
    evaluate_stored,
    finalist_report,
    finite_or_none,
    passed_over,
    passed_over_report,
    rated_report,
    rules_report,
    run_interruptible,
    shared_data_dir,
    stored_items,
    strategy_key,
    summarise_e2e,
    write_json,
)

# NOTE: stored_items, evaluate_stored, stored_result and strategy_key (judgeopt_lab) are
# also read from this module by rescore_e2e.py.
__all__ = ["across_pairs", "main", "run_pair", "split_groups", "stored_items", "summarise_e2e"]

#: Calls decoded together by the embedded model: the width every stored run (and its
#: response cache) was judged at, so that a resumed run judges as it began. The CLI's
#: default (``judgeopt.lm.RECOMMENDED_PARALLEL``) is 16 since those runs.
E2E_PARALLEL = 8

DATA = shared_data_dir()
DEFAULT_PAIRS = (
    "sfres:naturalness,topical_chat:naturalness,topical_chat:coherence,summeval:coherence"
)

log = logging.getLogger("e2e")

# How this version of judgeopt scores a group in which a judge gives one rating to every item
# (docs/metrics.md): rows written before 2026-11-27 have no ``scoring`` and were scored with
# such groups left out ("skip"); their derived fields are kept as stored, not recomputed.
SCORING = {"constant_groups": "zero"}


def split_groups(
    records: Sequence[Record], n_valid: int, n_test: int, seed: int, per_group: int | None = None
) -> tuple[list[Record], list[Record]]:
    """Disjoint validation and test sets of whole groups (:func:`judgeopt.data.split_holdout`)."""
    return split_holdout(records, n_valid, n_test, seed=seed, per_group=per_group)


def run_pair(
    task_name: str,
    aspect: str,
    *,
    model: str,
    lm: Any,
    budget: int,
    n_valid: int,
    n_test: int,
    ensemble: int | None,
    seed: int,
    out_dir: Path,
    optimizer: str,
    progress: bool,
    judge_passed_over: int = 0,
) -> dict[str, Any]:
    task = load_task(task_name)
    full = DATA / task_name / "full.jsonl"
    records = load_records(full)
    valid, test = split_groups(records, n_valid, n_test, seed, per_group=PER_GROUP.get(task_name))
    pair_dir = out_dir / f"{task_name}_{aspect}"
    pair_dir.mkdir(parents=True, exist_ok=True)
    log.info("%s/%s: %d validation, %d test items", task_name, aspect, len(valid), len(test))
    preset = load_optimizer(optimizer)
    opt = JudgeSearch.from_config(
        preset,
        budget=budget,
        seed=seed,
        checkpoint_dir=pair_dir / "ckpt",
        progress=progress,
        ensemble=ensemble,
    )
    student = JudgeProgram(task, aspect, lm=lm)
    s0, t0 = lm.stats(), time.perf_counter()
    judge = opt.compile(student, trainset=valid)
    compile_seconds = time.perf_counter() - t0
    s1 = lm.stats()
    judge = judge.with_model_name(model)
    baseline = judge.with_strategy(student.strategy)
    ens = judge.ensemble

    # NOTE: the judged test items are kept per strategy (file name: the strategy's hash), so
    # a resumed run repeats no call; the ensemble's members are judged as single judges.
    def stored(program: Any, name: str) -> EvalResult:
        key = strategy_key(program.strategy.as_dict())
        return evaluate_stored(
            program, test, pair_dir / f"test_{key}.jsonl", desc=f"test: {name}", progress=progress
        )

    results = {"baseline": stored(baseline, "baseline"), "chosen": stored(judge, "chosen")}
    if ens is not None:
        members = [stored(m, f"ensemble member {i + 1}") for i, m in enumerate(ens.members)]
        results["ensemble"] = ensemble_result(ens, members, test)
    s2 = lm.stats()
    comps = {
        name: compare(res, results["baseline"], test, labels=("baseline", name), seed=seed)
        for name, res in results.items()
        if name != "baseline"
    }
    if "ensemble" in results:
        comps["ensemble_vs_chosen"] = compare(
            results["ensemble"], results["chosen"], test, labels=("chosen", "ensemble"), seed=seed
        )
    metric = "spearman"
    scores = {name: finite_or_none(res.metric(metric)) for name, res in results.items()}
    chosen_c = comps["chosen"]
    ens_c = comps.get("ensemble")
    judge = judge.with_report(
        judge.report_.with_test(results["chosen"].summary(), comparison=chosen_c.to_dict())
    )
    judge.save(pair_dir / "judge.json")
    if ens is not None:
        ens = ens.with_model_name(model)
        ens = ens.with_report(
            ens.report_.with_test(
                results["ensemble"].summary(), comparison=comps["ensemble"].to_dict()
            )
        )
        ens.save(pair_dir / "ensemble.json")
    res = judge.search_result
    sel = judge.selection or {}
    row: dict[str, Any] = {
        "task": task_name,
        "aspect": aspect,
        "model": model,
        "level": results["baseline"].level,
        "n_valid": len(valid),
        "n_test": len(test),
        "n_valid_groups": len({r.group_id or r.id for r in valid}),
        "n_test_groups": len({r.group_id or r.id for r in test}),
        "baseline": scores["baseline"],
        "chosen": scores["chosen"],
        "ensemble": scores.get("ensemble"),
        "gain": finite_or_none(chosen_c.gain),
        "gain_ci": list(chosen_c.gain_ci),
        "ensemble_gain": finite_or_none(ens_c.gain) if ens_c else None,
        "ensemble_gain_ci": list(ens_c.gain_ci) if ens_c else None,
        "ensemble_minus_chosen": (
            finite_or_none(comps["ensemble_vs_chosen"].gain)
            if "ensemble_vs_chosen" in comps
            else None
        ),
        "ensemble_minus_chosen_ci": (
            list(comps["ensemble_vs_chosen"].gain_ci) if "ensemble_vs_chosen" in comps else None
        ),
        "relative_gain": (
            finite_or_none(chosen_c.gain) / abs(scores["baseline"])
            if scores["baseline"] and chosen_c.gain is not None
            else None
        ),
        "significantly_worse": bool(chosen_c.gain_ci[1] is not None and chosen_c.gain_ci[1] < 0),
        "chosen_is_baseline": judge.strategy == student.strategy,
        "chosen_strategy": judge.strategy.as_dict(),
        "baseline_strategy": student.strategy.as_dict(),
        "ensemble_members": ([m.strategy.as_dict() for m in ens.members] if ens else None),
        "confirmation": (judge.comparisons or {}).get("confirmation"),
        "ensemble_confirmation": ((ens.comparisons or {}).get("confirmation") if ens else None),
        "selection": {
            k: sel.get(k)
            for k in ("rule", "search_items", "confirm_items", "chosen", "reason", "finalists")
        },
        "test_results": {name: r.summary() for name, r in results.items()},
        "search": {
            "search": res.search,
            "budget": res.budget,
            "evaluations": res.evaluations,
            "best_search_score": finite_or_none(res.best_score),
            "calls": res.calls,
            "trace": [
                {"number": t["number"], "score": t["score"], "strategy": t["strategy"]}
                for t in res.trace
            ],
        },
        # This process's share only: a resumed pair's earlier sessions are not counted here
        # (``search.calls`` counts the search's calls over every session).
        "calls_this_run": {"compile": s1.calls - s0.calls, "test": s2.calls - s1.calls},
        "seconds_this_run": {
            "compile": round(compile_seconds, 1),
            "test": round(sum(r.seconds for r in results.values()), 1),
        },
    }
    # What `judgeopt compile` writes to --out: the ensemble when the preset builds one
    # (an `anchored` or `ensemble` default), else the chosen single judge. An ensemble that
    # only this script asked for (--ensemble) is reported beside it, not shipped.
    row["shipped"] = "ensemble" if ens is not None and ensemble is None else "chosen"
    row |= shipped_fields(row)
    row["selection"]["guard"] = sel.get("guard")
    row["scoring"] = dict(SCORING)
    row["finalists_on_test"] = finalist_report(pair_dir, test, row, seed)
    row["rules_on_test"] = rules_report(pair_dir, valid, test, row, optimizer)
    # What the rule gave up: the best strategies it did not ship, judged on the same test
    # items (their calls are counted in ``calls_this_run.passed_over``, not in ``test``).
    s3 = lm.stats()
    for t in passed_over(row, judge_passed_over):
        strategy = Strategy.from_json(t["strategy"], student.space)
        stored(judge.with_strategy(strategy), f"passed over {t['key']}")
    row["calls_this_run"]["passed_over"] = lm.stats().calls - s3.calls
    row["passed_over_on_test"] = passed_over_report(pair_dir, test, row, seed)
    row["rated_by_baseline"] = rated_report(pair_dir, test, row, seed)
    row["cost_per_item"] = cost_report(pair_dir, row)
    write_json(pair_dir / "result.json", row)
    return row


def shipped_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """The judge the compile ships (``row["shipped"]``: ``"chosen"`` or ``"ensemble"``)
    against the baseline on test: ``shipped_score``, ``shipped_gain``, ``shipped_gain_ci``,
    ``shipped_relative_gain``, ``shipped_significantly_worse``."""
    name = row.get("shipped", "chosen")
    gain, ci = (
        (row["gain"], row["gain_ci"])
        if name == "chosen"
        else (row["ensemble_gain"], row["ensemble_gain_ci"])
    )
    base = row["baseline"]
    return {
        "shipped": name,
        "shipped_score": row[name],
        "shipped_gain": gain,
        "shipped_gain_ci": ci,
        "shipped_relative_gain": gain / abs(base) if gain is not None and base else None,
        "shipped_significantly_worse": bool(ci is not None and ci[1] is not None and ci[1] < 0),
    }


def cost_report(pair_dir: Path, row: Mapping[str, Any]) -> dict[str, Any] | None:
    """Each reported judge's cost per judged item (:func:`judgeopt.teleprompt.judge_cost`:
    calls from its strategies, a call's wall seconds and tokens from the compile's own
    evaluation summaries, ``ckpt/evaluations.jsonl``): the baseline, the chosen single
    judge, the shipped judge (the ensemble's members when it ships one) and the passed-over
    strategies judged on test. ``None`` without the compile's journal."""
    journal = pair_dir / "ckpt" / "evaluations.jsonl"
    if not journal.is_file():
        return None
    summaries = [json.loads(x) for x in journal.read_text(encoding="utf-8").splitlines() if x]
    base = JudgeProgram(load_task(row["task"]), row["aspect"])

    def cost(members: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return judge_cost(base, members, summaries).to_dict()

    shipped = (
        row.get("ensemble_members") or [row["chosen_strategy"]]
        if row.get("shipped") == "ensemble"
        else [row["chosen_strategy"]]
    )
    return {
        "baseline": cost([row["baseline_strategy"]]),
        "chosen": cost([row["chosen_strategy"]]),
        "shipped": cost(shipped),
        "passed_over": [
            {"key": p["key"], **cost([p["strategy"]])} for p in row.get("passed_over_on_test") or []
        ],
        "note": "per judged item; seconds: the compile's wall time per call at its "
        "concurrency, times the judge's calls per item",
    }


def complete_row(row: dict[str, Any], seed: int, out_dir: Path, optimizer: str) -> None:
    """Add the fields of later versions of this script to a row finished earlier, from the
    stored items (no call): the baseline's strategy, the finalists on test and the other
    selection rules.

    A row scored under another convention than this version's (``SCORING``; rows without
    ``scoring`` left judge-constant groups out) keeps the derived fields it has: they are
    what was measured and pre-registered, and recomputing them now would mix two
    conventions in one row (its baseline, chosen and ensemble scores are stored).
    """
    task = load_task(row["task"])
    valid, test = split_groups(
        load_records(DATA / row["task"] / "full.jsonl"),
        row["n_valid"],
        row["n_test"],
        seed,
        per_group=PER_GROUP.get(row["task"]),
    )
    row.setdefault("baseline_strategy", JudgeProgram(task, row["aspect"]).strategy.as_dict())
    row |= shipped_fields(row)  # rows before it shipped the chosen single judge
    for old_key in ("calls", "seconds"):  # renamed: they never counted earlier sessions
        if old_key in row:
            row[f"{old_key}_this_run"] = row.pop(old_key)
    pair_dir = out_dir / f"{row['task']}_{row['aspect']}"
    frozen = row.get("scoring") != SCORING
    if not (frozen and "finalists_on_test" in row):
        row["finalists_on_test"] = finalist_report(pair_dir, test, row, seed)
    if not (frozen and "rules_on_test" in row):
        row["rules_on_test"] = rules_report(pair_dir, valid, test, row, optimizer)
    if not (frozen and "passed_over_on_test" in row):
        row["passed_over_on_test"] = passed_over_report(pair_dir, test, row, seed)
    row["rated_by_baseline"] = rated_report(pair_dir, test, row, seed)
    row["cost_per_item"] = cost_report(pair_dir, row)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--pairs",
        default=DEFAULT_PAIRS,
        help="comma-separated task:aspect pairs (default: %(default)s)",
    )
    p.add_argument("--model", default="local")
    p.add_argument("--budget", type=int, default=20)
    p.add_argument("--n-valid", type=int, default=E2E_SPLIT["n_valid"])
    p.add_argument("--n-test", type=int, default=E2E_SPLIT["n_test"])
    p.add_argument(
        "--ensemble",
        type=int,
        default=None,
        help="also build an ensemble of the M best, reported beside the shipped judge "
        "(default: the preset's ensemble, which is then the shipped judge; the runs of "
        "issue 15 used 3)",
    )
    p.add_argument("--optimizer", default="auto", help="optimizer preset (auto)")
    p.add_argument("--seed", type=int, default=E2E_SPLIT["seed"])
    p.add_argument(
        "--out-dir",
        default="benchmarks/runs/e2e_runs",
        help="checkpoints and judged items, committed so that a later session resumes "
        "(the LM cache inside is not committed)",
    )
    p.add_argument("--json", default="benchmarks/results/e2e.json")
    p.add_argument(
        "--parallel",
        type=int,
        default=E2E_PARALLEL,
        help="local model: judge calls decoded together, as many in flight "
        "(default %(default)s, the width every stored run was judged at; 1: one at a time)",
    )
    p.add_argument(
        "--judge-passed-over",
        type=int,
        default=1,
        metavar="K",
        help="after a pair's compile, also judge on its test items the K strategies with the "
        "best search scores that it did not ship (neither chosen nor baseline), so that the "
        "report says what the selection rule gave up (``passed_over_on_test``; default "
        "%(default)s; 0: none)",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="run no pair: complete the finished pairs' rows from their stored test "
        "items, rewrite the JSON and print the tables (no model is loaded)",
    )
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", force=True
    )
    for name in ("e2e", "judgeopt"):
        logging.getLogger(name).setLevel(logging.INFO)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pairs = [tuple(x.split(":")) for x in args.pairs.split(",") if x]
    out = Path(args.json)
    rows: list[dict[str, Any]] = []
    if out.is_file():
        # Pairs finished by an earlier run of the same settings are kept.
        old = json.loads(out.read_text(encoding="utf-8"))
        if old.get("settings", {}) == _settings(args):
            rows = [r for r in old.get("pairs", []) if (r["task"], r["aspect"]) in pairs]
    for r in rows:
        # Derived from stored judgements only (no call), so recomputed every time: a row
        # written by an older version of this script gets the newer fields.
        complete_row(r, args.seed, out_dir, args.optimizer)
    if args.report_only:
        result = {"settings": _settings(args), "pairs": rows, **summarise_e2e(rows)}
        if rows:
            write_json(out, result)
        print(e2e_table(rows))
        print(json.dumps({k: v for k, v in result.items() if k not in ("pairs", "settings")}))
        return 0
    done = {(r["task"], r["aspect"]) for r in rows}
    # NOTE: `parallel` is not part of the settings: the batched and the one-at-a-time paths
    # give the same greedy answers up to floating-point rounding (docs/lm.md), and the
    # pairs finished before batched decoding existed ran one at a time.
    local = parse_local_model(args.model) is not None
    lm = make_lm(
        args.model, cache=out_dir / "lm-cache", **({"parallel": args.parallel} if local else {})
    )

    def run_pairs() -> int:
        for task_name, aspect in pairs:
            if (task_name, aspect) in done:
                log.info("%s/%s: done earlier", task_name, aspect)
                continue
            t0 = time.perf_counter()
            row = run_pair(
                task_name,
                aspect,
                model=args.model,
                lm=lm,
                budget=args.budget,
                n_valid=args.n_valid,
                n_test=args.n_test,
                ensemble=args.ensemble,
                seed=args.seed,
                out_dir=out_dir,
                optimizer=args.optimizer,
                progress=not args.no_progress,
                judge_passed_over=args.judge_passed_over,
            )
            rows.append(row)
            log.info(
                "%s/%s done in %.0f s: baseline %s, chosen %s, ensemble %s",
                task_name,
                aspect,
                time.perf_counter() - t0,
                row["baseline"],
                row["chosen"],
                row["ensemble"],
            )
            rows.sort(key=lambda r: pairs.index((r["task"], r["aspect"])))
            write_json(out, {"settings": _settings(args), "pairs": rows, **summarise_e2e(rows)})
            print(e2e_table(rows), flush=True)
        return 0

    def stopped() -> None:
        # Finished pairs are in the JSON; the running pair's judgements are in its
        # checkpoint and the LM cache, so only the calls in flight are lost.
        log.warning("stopped after %d finished pair(s); run the same command to resume", len(rows))

    if run_interruptible(run_pairs, on_stop=stopped) == EXIT_INTERRUPTED:
        return EXIT_INTERRUPTED
    result = {"settings": _settings(args), "pairs": rows, **summarise_e2e(rows)}
    print(e2e_table(rows))
    print(json.dumps({k: v for k, v in result.items() if k not in ("pairs", "settings")}))
    return 0


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "model": args.model,
        "budget": args.budget,
        "n_valid": args.n_valid,
        "n_test": args.n_test,
        "ensemble": args.ensemble,
        "optimizer": args.optimizer,
        "seed": args.seed,
    }


if __name__ == "__main__":
    sys.exit(main())
