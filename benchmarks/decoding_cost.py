"""Cost of the ``expected`` decoding against ``greedy`` with the embedded model, side by side.

Judges the same items with the same judge prompt (default: Topical-Chat coherence, the
MT-Bench baseline moved to scale 10 without an explanation) once per decoding, alternating
which decoding goes first from item to item, with no response cache. Before every timed call
the model's KV cache is cleared, so each call evaluates its whole prompt (a "cold" item: no
prefix shared with the previous call), and neither arm profits from the other having just
evaluated the same prompt. Both arms use one model, loaded once without ``logits_all``:
``expected`` reads its logprobs through the last-position decoding loop
(:mod:`judgeopt.lm._llama_decode`).

With ``--with-logits-all`` a third arm judges every item with ``expected`` through a second
copy of the model loaded with ``logits_all=True`` (the path before the decoding loop) and
the script reports its cost and the largest difference between the two ``expected`` ratings.

Prints a table and writes JSON::

    {"greedy_s_per_item": .., "expected_s_per_item": .., "ratio": .., ...}

Usage:
    python benchmarks/decoding_cost.py --model local --limit 24 \
        --json benchmarks/results/decoding_cost.json [--with-logits-all] [--repeats 2]

Set JUDGEOPT_THREADS to the CPU threads of the local model (default 2).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from judgeopt.data import load_records
from judgeopt.judge import JudgeProgram, baseline_strategy, load_task
from judgeopt.lm import LlamaCppLM, make_lm
from judgeopt_lab import normal_interval, shared_data_dir, write_json

DATA = shared_data_dir()


def _cold(lm: Any) -> None:
    """Forget the KV cache, so the next call evaluates its whole prompt."""
    handle = lm._get_handle()
    with handle.lock:
        handle.llama.n_tokens = 0


def _timed(judge: JudgeProgram, record: Any, lm: Any) -> tuple[float, Any]:
    _cold(lm)
    t0 = time.perf_counter()
    pred = judge.judge(record.inputs, sample_id=record.id, lm=lm)
    return time.perf_counter() - t0, pred


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model",
        default="local",
        help="an embedded model: local, local:NAME or local:PATH.gguf (local)",
    )
    p.add_argument("--task", default="topical_chat")
    p.add_argument("--aspect", default="coherence")
    p.add_argument(
        "--data",
        default=None,
        help="labelled JSONL (default: ../shared/data/topical_chat/valid.jsonl)",
    )
    p.add_argument("--limit", type=int, default=24, help="items (24)")
    p.add_argument("--scale", type=int, default=10, help="rating scale of the judge (10)")
    p.add_argument("--cot", default="none", help="the judge's cot factor (none)")
    p.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="time every call this many times (cold each time) and keep the "
        "fastest, which filters out interference from other processes (1)",
    )
    p.add_argument(
        "--with-logits-all",
        action="store_true",
        help="also time expected through a logits_all=True model (the old path)",
    )
    p.add_argument("--json", default=None, help="write the result here")
    args = p.parse_args(argv)

    task = load_task(args.task)
    data = Path(args.data) if args.data else DATA / args.task / "valid.jsonl"
    records = load_records(data, limit=args.limit)
    strategy = baseline_strategy(task).replace(scale=args.scale, cot=args.cot)
    lm = make_lm(args.model, cache=False)
    if not isinstance(lm, LlamaCppLM):
        p.error(f"--model must be an embedded (local) model; got {args.model!r}")
    judges = {
        name: JudgeProgram(task, args.aspect, strategy.replace(decoding=name), lm=lm)
        for name in ("greedy", "expected")
    }
    old_lm = None
    if args.with_logits_all:
        old_lm = lm.copy(logits_all=True)
        judges["expected_logits_all"] = JudgeProgram(
            task, args.aspect, strategy.replace(decoding="expected"), lm=old_lm
        )
    # Warm-up (model load, chat template, vocabulary texts), not timed.
    for name, judge in judges.items():
        judge.judge(
            records[0].inputs,
            sample_id=records[0].id,
            lm=old_lm if name == "expected_logits_all" else lm,
        )

    seconds: dict[str, list[float]] = {name: [] for name in judges}
    scores: dict[str, list[float | None]] = {name: [] for name in judges}
    names = list(judges)
    print(
        f"{len(records)} items of {args.task}/{args.aspect}, {lm.model}, strategy {strategy}",
        file=sys.stderr,
    )
    for i, record in enumerate(records):
        order = names if i % 2 == 0 else names[::-1]
        for name in order:
            use = old_lm if name == "expected_logits_all" else lm
            runs = [_timed(judges[name], record, use) for _ in range(max(1, args.repeats))]
            s, pred = min(runs, key=lambda sp: sp[0])
            seconds[name].append(s)
            scores[name].append(pred.score)
        print(
            f"  item {i + 1}/{len(records)}: "
            + ", ".join(f"{n} {seconds[n][-1]:.2f} s" for n in names),
            file=sys.stderr,
        )

    per_item = {n: statistics.fmean(v) for n, v in seconds.items()}
    ratios = [e / g for e, g in zip(seconds["expected"], seconds["greedy"], strict=True)]
    result: dict[str, Any] = {
        "greedy_s_per_item": round(per_item["greedy"], 4),
        "expected_s_per_item": round(per_item["expected"], 4),
        "ratio": round(per_item["expected"] / per_item["greedy"], 4),
        "ratio_per_item_median": round(statistics.median(ratios), 4),
        "model": lm.model,
        "task": args.task,
        "aspect": args.aspect,
        "strategy": strategy.as_dict(),
        "n": len(records),
        "threads": lm.n_threads,
        "repeats": max(1, args.repeats),
        "seconds": {n: [round(s, 4) for s in v] for n, v in seconds.items()},
        "mean_interval": {n: [round(x, 4) for x in normal_interval(v)] for n, v in seconds.items()},
        "scores": scores,
        "parse_failures": {n: sum(s is None for s in v) for n, v in scores.items()},
    }
    if old_lm is not None:
        result["expected_logits_all_s_per_item"] = round(per_item["expected_logits_all"], 4)
        result["ratio_logits_all"] = round(per_item["expected_logits_all"] / per_item["greedy"], 4)
        diffs = [
            abs(a - b)
            for a, b in zip(scores["expected"], scores["expected_logits_all"], strict=True)
            if a is not None and b is not None
        ]
        result["max_abs_rating_difference"] = max(diffs) if diffs else None
        result["same_parse_status"] = all(
            (a is None) == (b is None)
            for a, b in zip(scores["expected"], scores["expected_logits_all"], strict=True)
        )

    print(f"\n{'decoding':<24}{'s/item':>10}{'95% interval':>22}{'ratio':>8}")
    for n in names:
        lo, hi = result["mean_interval"][n]
        print(
            f"{n:<24}{per_item[n]:>10.3f}{f'[{lo:.3f}, {hi:.3f}]':>22}"
            f"{per_item[n] / per_item['greedy']:>8.3f}"
        )
    if old_lm is not None:
        print(f"largest |expected - expected_logits_all|: {result['max_abs_rating_difference']}")
    if args.json:
        out = Path(args.json)
        write_json(out, result)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
