"""Does the plan's timed judgement predict what a run's calls take? One closed batch of the
calls in flight (how the plan is timed) against :data:`ROUNDS` rounds kept full as a run keeps
them, both scored on the same run.

For each pair of ``benchmarks/timing_check_prereg.json`` (named in a commit before any of
its items was judged here), on the embedded model with ``--parallel`` calls in flight:

* ``one_batch``: the MT-Bench baseline judges the first ``parallel`` items all at once, the
  batch is timed and its wall time shared among its calls; then the rate of computing a
  prompt token (a one-token call of the next item's prompt), as the plan measured it;
* ``rounds``: :func:`judgeopt.evaluate.time_judgement` with ``rounds=ROUNDS``: the first
  ``parallel x ROUNDS`` items judged as a run judges them, then the same probe;
* ``run``: every strategy of the file judges all the pair's items, one strategy after
  another, as a compile's search evaluates them (:func:`judgeopt.evaluate.evaluate`,
  ``parallel`` calls in flight), the baseline first: its seconds per call.

Every arm starts on a fresh batch engine with its own empty response cache; the two timing
arms alternate which goes first from one pair to the next. Each strategy's predicted seconds
per call is the plan's own (:func:`judgeopt.evaluate.call_cost` on the plan's item sample,
:func:`judgeopt.evaluate.plan_cost` with that arm's timing), and its error is
``(predicted - actual) / actual``. Both timings predict with every reused prompt token free
(``one_batch``, ``rounds``: the plan's time model), and the ``rounds`` timing once more with
a reused token costing :data:`REUSED_COST` of a computed one (``rounds_reused``).
``--one-batch-reused`` adds, afterwards and without a call, the one-batch timing with that
cost (``one_batch_reused``, marked post hoc); ``--recorded`` replays the time model with
and without it on the recorded compiles' rows.

The registered run (benchmarks/results/timing_check.json) decided the plan's settings: one
round (:data:`judgeopt.evaluate.TIMED_ROUNDS`) and reused tokens free
(:data:`judgeopt.evaluate.REUSED_TOKEN_COST`); docs/benchmarks.md, section 16.

A pre-registration whose ``arms`` are ``one_batch`` and ``engine``
(``timing_engine_prereg.json``) runs the engine-clock check instead (:func:`engine_check`):
one timed batch of the baseline per pair read both ways (:func:`both_timings`: its wall time
with the probe, and the batch engine's clock, :func:`judgeopt.evaluate.engine_timing`), every
strategy judged on the pair's items, each pair's totals beside the rows; a stopped run
resumes at the next pair. Its run decided :data:`judgeopt.evaluate.ENGINE_TIMING`
(benchmarks/results/timing_engine.json).

Usage:
    JUDGEOPT_THREADS=2 python benchmarks/timing_check.py \\
        --json benchmarks/results/timing_check.json
    JUDGEOPT_THREADS=2 python benchmarks/timing_check.py --prereg \\
        benchmarks/timing_engine_prereg.json --json benchmarks/results/timing_engine.json

Set JUDGEOPT_THREADS to the CPU threads of the local model (default 2).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from judgeopt.data import Record, load_records
from judgeopt.evaluate import (
    PLAN_WINDOW,
    Timing,
    call_cost,
    evaluate,
    plan_cost,
    plan_sample,
    time_judgement,
)
from judgeopt.evaluate._plan_prompts import cap_of, inputs_of  # the plan's own helpers
from judgeopt.evaluate._run import prompt_reuse_of, scoring_program
from judgeopt.evaluate._timed import (  # the plan's own steps, each arm's from one batch
    _computing,
    _probed,
    _timed_run,
    batch_work_of,
    engine_timing,
    work_since,
)
from judgeopt.judge import ArtifactStore, JudgeProgram, baseline_strategy, load_task
from judgeopt.lm import make_lm
from judgeopt_lab import fresh_engines, markdown_table, pair_file, write_json

PREREG = Path(__file__).with_name("timing_check_prereg.json")
#: The rounds of calls in flight and the reused prompt token's cost the check compares with
#: the plan's one batch and free reused tokens (the values registered).
ROUNDS = 3
REUSED_COST = 0.1
#: Items whose prompts the plan counts (a compile's PLAN_ITEMS).
PLAN_ITEMS = 8


def pair_items(task: str, n: int) -> list[Record]:
    """The first ``n`` records of the pair's validation file (SummEval: its only file)."""
    return load_records(pair_file(task, "valid"))[:n]


def one_batch_timing(judge: Any, records: list[Record], lm: Any, threads: int) -> Timing | None:
    """The plan's timing as it was made before: the first ``threads`` records judged all at
    once, the batch's wall time shared among its calls, then the computed-token probe."""
    scoring = scoring_program(judge)
    lm.count_prompt_tokens([{"role": "user", "content": "OK"}])  # load outside the clock
    batch = records[:threads]
    reuse = prompt_reuse_of(lm)
    before = lm.stats()
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda r: scoring.judge(inputs_of(scoring, r), sample_id=r.id, lm=lm), batch))
    seconds = time.perf_counter() - started
    after = lm.stats()
    calls = after.calls - before.calls
    if calls <= 0:
        return None
    timing = Timing(
        seconds=seconds / calls,
        prompt_tokens=round((after.prompt_tokens - before.prompt_tokens) / calls),
        completion_tokens=round((after.completion_tokens - before.completion_tokens) / calls),
        cap=cap_of(scoring),
        in_flight=threads,
    )
    return _computing(timing, scoring, batch, records[threads], lm, reuse)


def rounds_timing(judge: Any, records: list[Record], lm: Any, threads: int) -> Timing | None:
    """The plan's timing over :data:`ROUNDS` rounds (:func:`time_judgement`)."""
    return time_judgement(judge, records, lm, threads=threads, rounds=ROUNDS)


def predicted(judge: Any, records: list[Record], lm: Any, timing: Timing) -> float:
    """The plan's seconds per call of ``judge`` judging all of ``records`` in one run with
    ``timing`` (a run's wait for its longest explanations shared among its calls)."""
    cost = call_cost(
        judge, plan_sample(records, PLAN_ITEMS), lm, timing=timing, window=records[:PLAN_WINDOW]
    )
    n = len(records)
    seconds = plan_cost([(cost, float(n))], lm, timing=timing).seconds
    assert seconds is not None
    return float(seconds) / max(n * cost.calls, 1e-9)


def strategy_judge(
    task: Any, aspect: str, change: dict[str, Any], records: list[Record], lm: Any
) -> JudgeProgram:
    """The baseline's strategy with ``change``, its in-context examples drawn from
    ``records`` (seed 0), on ``lm``: the judges every arm of the check times and runs."""
    base = JudgeProgram(task, aspect, lm=lm).fresh_copy(
        trainset=records, artifacts=ArtifactStore(), example_seed=0, lm=lm
    )
    return base.with_strategy({**baseline_strategy(task).as_dict(), **change})


def judged_row(
    judge: Any,
    change: dict[str, Any],
    records: list[Record],
    lm: Any,
    parallel: int,
    arms: dict[str, Timing | None],
    *,
    with_work: bool = False,
) -> dict[str, Any]:
    """``judge`` run on ``records`` as a compile's search runs it (``parallel`` in flight):
    its seconds per call, and each arm's predicted seconds per call with its error (``None``
    for an arm without a timing); ``with_work``: what the batch engine spent on it too."""
    work = batch_work_of(lm)
    result = evaluate(judge, records, lm=lm, threads=parallel, progress=False)
    used = work_since(lm, work)
    calls = result.calls or 1
    actual = result.seconds / calls
    row: dict[str, Any] = {
        "strategy": change,
        "calls": result.calls,
        "seconds": round(result.seconds, 2),
        "actual": round(actual, 4),
        "written_per_call": round(result.completion_tokens / calls, 1),
    }
    if with_work:
        row["engine_work"] = None if used is None else {k: round(v, 3) for k, v in used.items()}
    for arm, timing in arms.items():
        if timing is None:
            row[arm] = None
            continue
        guess = predicted(judge, records, lm, timing)
        row[arm] = {"predicted": round(guess, 4), "error": round((guess - actual) / actual, 4)}
    return row


def _lm(root: Path, tag: str, parallel: int) -> Any:
    lm = make_lm("local", cache=root / tag, parallel=parallel)
    fresh_engines(lm)
    return lm


def pair_row(
    task_name: str,
    aspect: str,
    strategies: list[dict[str, Any]],
    *,
    n_items: int,
    parallel: int,
    timing_first: str,
    root: Path,
) -> dict[str, Any]:
    task = load_task(task_name)
    records = pair_items(task_name, n_items)

    def program(lm: Any, change: dict[str, Any]) -> JudgeProgram:
        return strategy_judge(task, aspect, change, records, lm)

    timings: dict[str, Any] = {}
    order = [timing_first, "rounds" if timing_first == "one_batch" else "one_batch"]
    for arm in order:
        lm = _lm(root, f"{task_name}-{aspect}-{arm}", parallel)
        make = one_batch_timing if arm == "one_batch" else rounds_timing
        started = time.perf_counter()
        timing = make(program(lm, {}), records, lm, parallel)
        timings[arm] = {
            "timing": None if timing is None else asdict(timing),
            "seconds": round(time.perf_counter() - started, 2),
        }
        fresh_engines(lm)
    lm = _lm(root, f"{task_name}-{aspect}-run", parallel)
    rows = []
    for change in strategies:
        arms: dict[str, Timing | None] = {}
        for arm, source, reused in (
            ("one_batch", "one_batch", 0.0),
            ("rounds", "rounds", 0.0),
            ("rounds_reused", "rounds", REUSED_COST),
        ):
            t = timings[source]["timing"]
            arms[arm] = None if t is None else Timing(**t).with_reused_cost(reused)
        rows.append(judged_row(program(lm, change), change, records, lm, parallel, arms))
        print(
            f"  {task_name}:{aspect} {json.dumps(change)}: {rows[-1]['actual']:.3f} s/call",
            flush=True,
        )
    fresh_engines(lm)
    return {
        "pair": f"{task_name}:{aspect}",
        "n_items": len(records),
        "timing_order": order,
        "timings": timings,
        "strategies": rows,
    }


def both_timings(
    judge: Any, records: list[Record], lm: Any, threads: int
) -> tuple[Timing | None, Timing | None, dict[str, float] | None]:
    """The plan's two readings of one batch (the first ``threads`` records judged as a run
    judges them, :func:`judgeopt.evaluate.time_judgement`'s steps): ``one_batch``, its wall
    time shared among the calls and the one-token probe of the next record's prompt, and
    ``engine``, the batch engine's clock over the same batch (:func:`engine_timing`); and
    what the engine spent on it."""
    scoring = scoring_program(judge)
    lm.count_prompt_tokens([{"role": "user", "content": "OK"}])  # load outside the clock
    batch = records[:threads]
    reuse, work = prompt_reuse_of(lm), batch_work_of(lm)
    timed = _timed_run(scoring, batch, lm, threads, False)
    if timed is None:
        return None, None, None
    together, calls = timed
    spent = work_since(lm, work)  # before the probe, which the engine also runs
    engine = engine_timing(together, spent, calls)
    one_batch = _computing(_probed(together, lm), scoring, batch, records[threads], lm, reuse)
    return one_batch, engine, spent


def engine_pair_row(
    task_name: str,
    aspect: str,
    strategies: list[dict[str, Any]],
    *,
    n_items: int,
    parallel: int,
    root: Path,
) -> dict[str, Any]:
    """One pair of the engine-clock check: both timings from one batch of the baseline, then
    every strategy judged on the pair's items as a compile's search judges them; per
    strategy, each timing's predicted seconds per call and its error, and what the engine
    spent (steps, their seconds, prompt seconds, tokens computed)."""
    task = load_task(task_name)
    records = pair_items(task_name, n_items)

    def program(lm: Any, change: dict[str, Any]) -> JudgeProgram:
        return strategy_judge(task, aspect, change, records, lm)

    lm = _lm(root, f"{task_name}-{aspect}-timing", parallel)
    started = time.perf_counter()
    one_batch, engine, spent = both_timings(program(lm, {}), records, lm, parallel)
    timings = {
        "one_batch": None if one_batch is None else asdict(one_batch),
        "engine": None if engine is None else asdict(engine),
        "batch_work": spent,
        "seconds": round(time.perf_counter() - started, 2),
    }
    fresh_engines(lm)
    lm = _lm(root, f"{task_name}-{aspect}-run", parallel)
    rows = []
    for change in strategies:
        arms = {"one_batch": one_batch, "engine": engine}
        judge = program(lm, change)
        rows.append(judged_row(judge, change, records, lm, parallel, arms, with_work=True))
        print(
            f"  {task_name}:{aspect} {json.dumps(change)}: {rows[-1]['actual']:.3f} s/call",
            flush=True,
        )
    fresh_engines(lm)
    totals: dict[str, Any] = {"actual_seconds": round(sum(r["seconds"] for r in rows), 1)}
    for arm in ("one_batch", "engine"):
        if all(r[arm] is not None for r in rows):
            guess = sum(r[arm]["predicted"] * r["calls"] for r in rows)
            totals[arm] = {
                "predicted_seconds": round(guess, 1),
                "error": round((guess - totals["actual_seconds"]) / totals["actual_seconds"], 4),
            }
    return {
        "pair": f"{task_name}:{aspect}",
        "n_items": len(records),
        "timings": timings,
        "strategies": rows,
        "totals": totals,
    }


def summarise_engine(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean |error| of each arm over every (pair, strategy) row, the baseline rows and the
    rest, with the paired difference (engine minus one batch) and its standard error; and
    each pair's total (the strategies' seconds together, as a plan adds them)."""
    summary: dict[str, Any] = {}
    for which in ("all", "baseline", "rate_first"):
        picked = [
            r
            for p in pairs
            for i, r in enumerate(p["strategies"])
            if r.get("one_batch") is not None and r.get("engine") is not None
            if which == "all" or (which == "baseline") == (i == 0)
        ]
        a = [abs(r["one_batch"]["error"]) for r in picked]
        b = [abs(r["engine"]["error"]) for r in picked]
        diffs = [y - x for x, y in zip(a, b, strict=True)]
        summary[which] = {
            "rows": len(a),
            "one_batch_mean_abs_error": round(statistics.fmean(a), 4) if a else None,
            "engine_mean_abs_error": round(statistics.fmean(b), 4) if b else None,
            "difference": round(statistics.fmean(diffs), 4) if diffs else None,
            "difference_se": (
                round(statistics.stdev(diffs) / len(diffs) ** 0.5, 4) if len(diffs) > 1 else None
            ),
            "engine_better_rows": sum(d < 0 for d in diffs),
        }
    summary["totals"] = {p["pair"]: p["totals"] for p in pairs}
    return summary


def summarise(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean |error| per arm over every (pair, strategy) row, over the baseline rows and over
    the rest; the paired difference of the absolute errors (rounds minus one batch, and
    rounds with reused tokens costed minus rounds)."""

    def rows(which: str) -> list[dict[str, Any]]:
        return [
            r
            for p in pairs
            for i, r in enumerate(p["strategies"])
            if r.get("one_batch") is not None and r.get("rounds") is not None
            if which == "all" or (which == "baseline") == (i == 0)
        ]

    def compared(picked: list[dict[str, Any]], old: str, new: str) -> dict[str, Any]:
        a = [abs(r[old]["error"]) for r in picked]
        b = [abs(r[new]["error"]) for r in picked]
        diffs = [y - x for x, y in zip(a, b, strict=True)]
        return {
            "rows": len(a),
            f"{old}_mean_abs_error": round(statistics.fmean(a), 4) if a else None,
            f"{new}_mean_abs_error": round(statistics.fmean(b), 4) if b else None,
            "difference": round(statistics.fmean(diffs), 4) if diffs else None,
            "difference_se": (
                round(statistics.stdev(diffs) / len(diffs) ** 0.5, 4) if len(diffs) > 1 else None
            ),
            f"{new}_better_rows": sum(d < 0 for d in diffs),
        }

    summary: dict[str, Any] = {}
    for which in ("all", "baseline", "rate_first"):
        picked = rows(which)
        summary[which] = compared(picked, "one_batch", "rounds")
        summary[f"{which}_reused"] = compared(
            [r for r in picked if r.get("rounds_reused") is not None], "rounds", "rounds_reused"
        )
    return summary


#: The recorded compiles whose time-model rows ``--recorded`` replays: (file, keys to them).
RECORDED = (
    ("compile_cost.json", ("full_8_in_flight", "run", "time_model")),
    ("compile_cost.json", ("estimate_summeval", "time_model")),
    ("compile_cost_heldout.json", ("estimate", "time_model")),
)


def recorded_replay(results: Path, costs: tuple[float, ...] = (0.0, REUSED_COST)) -> Any:
    """The time model with each reused-token cost, replayed on the strategies of the recorded
    compiles' ``time_model`` rows (no call): mean |error| of the seconds per call.

    Rows without their tokens per call (recorded before they were kept) get them back from
    their two predictions, which are linear in the prompt and written tokens; the recorded
    timings have no probe figures, so the probe is taken as the timed calls' mean (computed
    ``computed_tokens`` of ``prompt_tokens``): an approximation, said so in the output."""
    out = []
    for name, keys in RECORDED:
        node: Any = json.loads((results / name).read_text(encoding="utf-8"))
        for key in keys:
            node = (node or {}).get(key)
        if not node:
            continue
        t = node["timing"]
        timing = Timing(**{**t, "reused_cost": 0.0, "probe": None})
        reading = min(t["prompt_seconds"] * t["computed_tokens"], t["seconds"])
        writing = (t["seconds"] - reading) / t["completion_tokens"]
        unit = t["prompt_tokens"] / 15.0 + t["completion_tokens"]  # PREFILL_SPEEDUP
        probe = (
            t["prompt_seconds"] * t["computed_tokens"],
            float(t["computed_tokens"]),
            float(t["prompt_tokens"]),
        )
        errors: dict[str, list[float]] = {str(c): [] for c in costs}
        for row in node["strategies"]:
            share = row["computed_share"]
            if "prompt_per_call" in row:
                prompt, written = row["prompt_per_call"], row["written_per_call"]
            else:  # all_read = T (P/15 + W) / unit; computed = rate C + writing W
                a = [[1 / 15.0, 1.0], [t["prompt_seconds"] * share, writing]]
                b = [row["all_read"] * unit / t["seconds"], row["computed"]]
                det = a[0][0] * a[1][1] - a[0][1] * a[1][0]
                prompt = (b[0] * a[1][1] - a[0][1] * b[1]) / det
                written = (a[0][0] * b[1] - b[0] * a[1][0]) / det
            for c in costs:
                model = replace(timing, probe=probe).with_reused_cost(c)
                guess = model.per_call(prompt, written, share * prompt)
                errors[str(c)].append(
                    abs(guess - row["seconds_per_call"]) / row["seconds_per_call"]
                )
        out.append(
            {
                "compile": f"{name}:{keys[0]}",
                "strategies": len(node["strategies"]),
                "mean_abs_error": {c: round(statistics.fmean(e), 4) for c, e in errors.items()},
            }
        )
    return {
        "rows": out,
        "note": "the probe of a recorded timing is taken as the timed calls' mean (its own "
        "figures were not recorded); the cost 0.1 was fitted on the first compile",
    }


def repredict(
    path: Path,
    arm: str,
    source: str,
    reused: float,
    *,
    tail_once: bool = True,
    against: str | None = None,
) -> dict[str, Any]:
    """Add the prediction ``arm`` (``source``'s timing with a reused token at ``reused``, a
    run's wait for its longest answers once with ``tail_once``) to every row of a run's
    JSON, from its recorded timings (no judge call: the embedded model is loaded for its
    tokenizer), and summarise it against ``against`` (default: ``source`` as recorded)."""
    against = against or source
    data = json.loads(path.read_text(encoding="utf-8"))
    # The run's parallel: the computed share is counted on that many slots.
    lm = make_lm("local", cache=False, parallel=int(data["parallel"]))
    for pair in data["pairs"]:
        task_name, aspect = pair["pair"].split(":", 1)
        task = load_task(task_name)
        records = pair_items(task_name, pair["n_items"])
        base = JudgeProgram(task, aspect, lm=lm).fresh_copy(
            trainset=records, artifacts=ArtifactStore(), example_seed=0, lm=lm
        )
        recorded = pair["timings"][source]
        recorded = recorded.get("timing", recorded)  # the engine check keeps it unwrapped
        for row in pair["strategies"]:
            judge = base.with_strategy({**baseline_strategy(task).as_dict(), **row["strategy"]})
            timing = replace(Timing(**recorded).with_reused_cost(reused), tail_once=tail_once)
            guess = predicted(judge, records, lm, timing)
            actual = row["actual"]
            row[arm] = {"predicted": round(guess, 4), "error": round((guess - actual) / actual, 4)}
    rows = [r for p in data["pairs"] for r in p["strategies"]]
    a = [abs(r[against]["error"]) for r in rows]
    b = [abs(r[arm]["error"]) for r in rows]
    diffs = [y - x for x, y in zip(a, b, strict=True)]
    wait = "once per run" if tail_once else "in every call (the batch's own rate)"
    data.setdefault("post_hoc", {})[arm] = {
        "what": f"{source}'s timing with a reused prompt token at {reused} of a computed one "
        f"and the wait for the longest answers {wait}, with the plan as it is now, added "
        "after the run's results were read: not a pre-registered comparison",
        f"{against}_mean_abs_error": round(statistics.fmean(a), 4),
        f"{arm}_mean_abs_error": round(statistics.fmean(b), 4),
        "difference": round(statistics.fmean(diffs), 4),
        "difference_se": round(statistics.stdev(diffs) / len(diffs) ** 0.5, 4),
        f"{arm}_better_rows": sum(d < 0 for d in diffs),
        "rows": len(rows),
    }
    write_json(path, data)
    return data["post_hoc"][arm]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prereg", type=Path, default=PREREG)
    ap.add_argument("--pairs", help="override the registered pairs (task:aspect,...)")
    ap.add_argument("--items", type=int, help="override the registered number of items")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--recorded",
        action="store_true",
        help="replay the time model on the recorded compiles' rows instead (no call)",
    )
    ap.add_argument(
        "--one-batch-reused",
        action="store_true",
        help="add to the run in --json the one-batch timing's prediction with reused tokens "
        "costed (no judge call; a post-hoc reading, marked so)",
    )
    ap.add_argument(
        "--tail-once",
        action="store_true",
        help="add to the engine check in --json the engine timing's prediction with a run's "
        "wait for its longest answers once and in every call (no judge call; post hoc)",
    )
    args = ap.parse_args(argv)
    if args.recorded:
        print(json.dumps(recorded_replay(Path(__file__).with_name("results")), indent=2))
        return 0
    if args.tail_once:
        if args.json is None:
            ap.error("--tail-once needs --json (an engine check's run)")
        every = repredict(args.json, "engine_tail_every", "engine", 0.0, tail_once=False)
        once = repredict(args.json, "engine_tail_once", "engine", 0.0, against="engine_tail_every")
        print(json.dumps({"engine_tail_every": every, "engine_tail_once": once}, indent=2))
        return 0
    if args.one_batch_reused:
        if args.json is None:
            ap.error("--one-batch-reused needs --json (the run to add the prediction to)")
        added = repredict(args.json, "one_batch_reused", "one_batch", REUSED_COST)
        print(json.dumps(added, indent=2))
        return 0
    plan = json.loads(args.prereg.read_text(encoding="utf-8"))
    pairs = args.pairs.split(",") if args.pairs else plan["pairs"]
    n_items = args.items or int(plan["items"])
    parallel = int(plan["parallel"])
    if plan.get("arms") == ["one_batch", "engine"]:
        return engine_check(args, plan, pairs, n_items, parallel)
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="timing-check-") as tmp:
        for k, pair in enumerate(pairs):
            task_name, aspect = pair.split(":", 1)
            print(f"{pair}: {n_items} items, {parallel} calls in flight", flush=True)
            out.append(
                pair_row(
                    task_name,
                    aspect,
                    plan["strategies"],
                    n_items=n_items,
                    parallel=parallel,
                    timing_first="one_batch" if k % 2 == 0 else "rounds",
                    root=Path(tmp),
                )
            )
    summary = summarise(out)
    table = []
    for p in out:
        for r in p["strategies"]:
            table.append(
                [
                    p["pair"],
                    json.dumps(r["strategy"]) if r["strategy"] else "baseline",
                    f"{r['actual']:.3f}",
                    *(
                        "-" if r[a] is None else f"{r[a]['predicted']:.3f} ({r[a]['error']:+.0%})"
                        for a in ("one_batch", "rounds", "rounds_reused")
                    ),
                ]
            )
    header = ["pair", "strategy", "actual s/call", "one batch", "rounds", "rounds, reused"]
    print(markdown_table(header, table))
    print(json.dumps(summary, indent=2))
    if args.json:
        write_json(
            args.json,
            {
                "timed_rounds": ROUNDS,
                "reused_token_cost": REUSED_COST,
                "parallel": parallel,
                "prereg": str(args.prereg.name),
                "pairs": out,
                "summary": summary,
                "criterion": plan["criterion"],
            },
        )
    return 0


def engine_check(
    args: argparse.Namespace, plan: dict[str, Any], pairs: list[str], n_items: int, parallel: int
) -> int:
    """The engine-clock check (a pre-registration whose ``arms`` are ``one_batch`` and
    ``engine``): every pair, the table, the summary and the JSON; a pair already in the JSON
    is kept, so a stopped run resumes at the next pair."""
    done: dict[str, Any] = {}
    if args.json and args.json.exists():
        kept = json.loads(args.json.read_text(encoding="utf-8"))
        if kept.get("prereg") == args.prereg.name:
            done = {p["pair"]: p for p in kept.get("pairs", [])}
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="timing-check-") as tmp:
        for pair in pairs:
            if pair in done and done[pair]["n_items"] == n_items:
                out.append(done[pair])
                continue
            task_name, aspect = pair.split(":", 1)
            print(f"{pair}: {n_items} items, {parallel} calls in flight", flush=True)
            row = engine_pair_row(
                task_name,
                aspect,
                plan["strategies"],
                n_items=n_items,
                parallel=parallel,
                root=Path(tmp),
            )
            out.append(row)
            if args.json:
                write_json(args.json, _engine_json(args, plan, parallel, out))
    table = []
    for p in out:
        for r in p["strategies"]:
            table.append(
                [
                    p["pair"],
                    json.dumps(r["strategy"]) if r["strategy"] else "baseline",
                    f"{r['actual']:.3f}",
                    *(
                        "-" if r[a] is None else f"{r[a]['predicted']:.3f} ({r[a]['error']:+.0%})"
                        for a in ("one_batch", "engine")
                    ),
                ]
            )
    print(markdown_table(["pair", "strategy", "actual s/call", "one batch", "engine"], table))
    result = _engine_json(args, plan, parallel, out)
    print(json.dumps(result["summary"], indent=2))
    if args.json:
        write_json(args.json, result)
    return 0


def _engine_json(
    args: argparse.Namespace, plan: dict[str, Any], parallel: int, pairs: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "parallel": parallel,
        "prereg": str(args.prereg.name),
        "pairs": pairs,
        "summary": summarise_engine(pairs),
        "criterion": plan["criterion"],
    }


if __name__ == "__main__":
    sys.exit(main())
