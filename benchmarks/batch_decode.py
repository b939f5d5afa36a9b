"""Batched decoding of the embedded model against one request at a time, side by side.

Judges the same items with the same judge in two arms: ``one at a time`` (an LM with
``parallel=1``, one call in flight: the path every earlier benchmark used) and ``batched``
(``parallel=P``, P calls in flight: the batch engine of :mod:`judgeopt.lm._llama_batch`).
The items are taken in blocks; every block is judged by both arms, alternating which goes
first, with no response cache, so the two arms see the same machine load. Per judge
strategy it reports the seconds per item of each arm, the speed-up (total time one at a
time over total time batched, with the interval of the per-block speed-ups), how often
the two arms give the same rating, each arm's Spearman correlation with the human labels,
and a determinism check: the first block judged again by the batch engine with a
different number of calls in flight must give identical responses.

``--against Q`` (default 1) makes the first arm a batch engine too, ``parallel=Q`` with Q calls
in flight (its keys stay ``one``; the JSON's ``against`` says Q): the same side by side
answers whether P calls decoded together beat Q (the default 8 against 16, say).

Two strategies by default: the MT-Bench baseline (it writes an explanation before its
rating: generation dominates) and a cheap judge (scale 10, no explanation, ``expected``
rating: one generated token, prompt evaluation dominates). ``--strategies ...,sc5`` adds
self-consistency (the baseline's prompt, 5 sampled answers per item): the arms draw
different random numbers, so only its cost and the determinism check are meaningful.

Prints a table and writes JSON::

    {"parallel": P, "strategies": {"baseline": {"one_s_per_item": .., "batched_s_per_item": ..,
     "speedup": .., "same_rating": .., "deterministic": true, ...}, ...}, ...}

Usage:
    python benchmarks/batch_decode.py --model local --task sfres --aspect naturalness \
        --limit 48 --block 12 --parallel 4 --json benchmarks/results/batch_decode.json

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
from judgeopt.evaluate import evaluate
from judgeopt.judge import JudgeProgram, baseline_strategy, load_task
from judgeopt.lm import LlamaCppLM, make_lm
from judgeopt.metrics import correlation
from judgeopt_lab import normal_interval, shared_data_dir, write_json

DATA = shared_data_dir()


def _corr(scores: list[Any], humans: list[Any]) -> float | None:
    pairs = [
        (float(s), float(h))
        for s, h in zip(scores, humans, strict=True)
        if s is not None and h is not None
    ]
    try:
        return round(correlation([p[1] for p in pairs], [p[0] for p in pairs]), 4)
    except ValueError:  # fewer than 3 items or a constant side
        return None


def run_strategy(
    name: str,
    task: Any,
    aspect: str,
    strategy: Any,
    records: list[Any],
    one: LlamaCppLM,
    batched: LlamaCppLM,
    block: int,
) -> dict[str, Any]:
    judges = {
        "one": JudgeProgram(task, aspect, strategy, lm=one),
        "batched": JudgeProgram(task, aspect, strategy, lm=batched),
    }
    threads = {"one": one.parallel, "batched": batched.parallel}
    # Warm-up (chat template, vocabulary texts, the engine's context), not timed.
    for arm, judge in judges.items():
        evaluate(judge, records[:1], threads=threads[arm], progress=False)
    seconds: dict[str, list[float]] = {"one": [], "batched": []}
    items: dict[str, list[Any]] = {"one": [], "batched": []}
    blocks = [records[i : i + block] for i in range(0, len(records), block)]
    for b, part in enumerate(blocks):
        order = ["one", "batched"] if b % 2 == 0 else ["batched", "one"]
        for arm in order:
            t0 = time.perf_counter()
            res = evaluate(judges[arm], part, threads=threads[arm], progress=False)
            seconds[arm].append(time.perf_counter() - t0)
            items[arm].extend(res.items)
        print(
            f"  {name} block {b + 1}/{len(blocks)} ({len(part)} items): "
            + ", ".join(f"{a} {seconds[a][-1]:.1f} s" for a in ("one", "batched")),
            file=sys.stderr,
            flush=True,
        )
    # Determinism: the first block again through the batch engine, with another number of
    # calls in flight (so other requests share its steps), must answer identically.
    again = evaluate(
        judges["batched"], blocks[0], threads=max(1, batched.parallel - 1), progress=False
    )
    first = items["batched"][: len(blocks[0])]
    deterministic = all(
        a.raw == b.raw and a.score == b.score for a, b in zip(first, again.items, strict=True)
    )
    scores = {arm: [i.score for i in items[arm]] for arm in items}
    humans = [i.human for i in items["one"]]
    both = [
        (a, b)
        for a, b in zip(scores["one"], scores["batched"], strict=True)
        if a is not None and b is not None
    ]
    n = len(records)
    per_block = [o / p for o, p in zip(seconds["one"], seconds["batched"], strict=True)]
    return {
        "strategy": strategy.as_dict(),
        "n": n,
        "one_s_per_item": round(sum(seconds["one"]) / n, 4),
        "batched_s_per_item": round(sum(seconds["batched"]) / n, 4),
        "speedup": round(sum(seconds["one"]) / sum(seconds["batched"]), 4),
        "block_speedups": [round(x, 4) for x in per_block],
        "speedup_interval": [round(x, 4) for x in normal_interval(per_block)],
        "same_rating": round(sum(a == b for a, b in both) / len(both), 4) if both else None,
        "same_text": round(
            sum(a.raw == b.raw for a, b in zip(items["one"], items["batched"], strict=True)) / n, 4
        ),
        "max_abs_rating_difference": (
            round(max(abs(float(a) - float(b)) for a, b in both), 4) if both else None
        ),
        "mean_abs_rating_difference": (
            round(statistics.fmean(abs(float(a) - float(b)) for a, b in both), 4) if both else None
        ),
        # Spearman between the two arms' ratings (the same judge: near 1 when batching
        # changes nothing that matters).
        "rating_correlation": _corr([a for a, _ in both], [b for _, b in both]),
        "parse_failures": {arm: sum(s is None for s in v) for arm, v in scores.items()},
        "spearman": {arm: _corr(v, humans) for arm, v in scores.items()},
        "deterministic": deterministic,
        "seconds": {arm: [round(s, 3) for s in v] for arm, v in seconds.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--model",
        default="local",
        help="an embedded model: local, local:NAME or local:PATH.gguf (local)",
    )
    p.add_argument("--task", default="sfres")
    p.add_argument("--aspect", default="naturalness")
    p.add_argument(
        "--data", default=None, help="labelled JSONL (default: ../shared/data/<task>/valid.jsonl)"
    )
    p.add_argument("--limit", type=int, default=48, help="items (48)")
    p.add_argument("--block", type=int, default=12, help="items per block (12)")
    p.add_argument("--parallel", type=int, default=4, help="requests decoded together (4)")
    p.add_argument(
        "--against",
        type=int,
        default=1,
        help="the other arm's requests decoded together (1: one request at a time)",
    )
    p.add_argument(
        "--strategies",
        default="baseline,cheap",
        help="comma-separated: baseline (MT-Bench, explanation first), cheap "
        "(scale 10, no explanation, expected rating), sc5 (the baseline's "
        "prompt, 5 answers sampled at temperature 1: the two arms draw "
        "different samples, so their ratings are not compared)",
    )
    p.add_argument("--json", default=None, help="write the result here")
    args = p.parse_args(argv)

    task = load_task(args.task)
    data = Path(args.data) if args.data else DATA / args.task / "valid.jsonl"
    records = load_records(data, limit=args.limit)
    one = make_lm(args.model, cache=False)
    if not isinstance(one, LlamaCppLM):
        p.error(f"--model must be an embedded (local) model; got {args.model!r}")
    if args.against < 1 or args.parallel < 1:
        p.error(f"--parallel and --against must be at least 1; got {args.parallel}, {args.against}")
    batched = one.copy(parallel=args.parallel)
    if args.against > 1:
        one = one.copy(parallel=args.against)
    base = baseline_strategy(task)
    known = {
        "baseline": base,
        "cheap": base.replace(scale=10, cot="none", decoding="expected"),
        "sc5": base.replace(decoding="sc5"),
    }
    names = [s for s in args.strategies.split(",") if s]
    unknown = sorted(set(names) - set(known))
    if unknown:
        p.error(f"--strategies: unknown {unknown}; allowed: {sorted(known)}")
    print(
        f"{len(records)} items of {args.task}/{args.aspect}, {one.model}, "
        f"parallel {args.parallel} against {args.against}, {one.n_threads} CPU threads",
        file=sys.stderr,
    )
    result: dict[str, Any] = {
        "model": one.model,
        "task": args.task,
        "aspect": args.aspect,
        "n": len(records),
        "block": args.block,
        "parallel": args.parallel,
        "against": args.against,
        "threads": one.n_threads,
        "strategies": {},
    }
    for name in names:
        result["strategies"][name] = run_strategy(
            name, task, args.aspect, known[name], records, one, batched, args.block
        )
    print(
        f"\n{'strategy':<10}{'one s/item':>12}{'batched s/item':>16}{'speed-up':>10}"
        f"{'interval':>18}{'same rating':>13}{'deterministic':>15}"
    )
    for name, r in result["strategies"].items():
        lo, hi = r["speedup_interval"]
        same = "n/a" if r["same_rating"] is None else f"{r['same_rating']:.2f}"
        print(
            f"{name:<10}{r['one_s_per_item']:>12.3f}{r['batched_s_per_item']:>16.3f}"
            f"{r['speedup']:>10.2f}{f'[{lo:.2f}, {hi:.2f}]':>18}"
            f"{same:>13}{str(r['deterministic']):>15}"
        )
        print(
            f"{'':<10}Spearman with humans: one {r['spearman']['one']}, batched "
            f"{r['spearman']['batched']}; between the arms {r['rating_correlation']}; "
            f"mean |difference| {r['mean_abs_rating_difference']}; parse failures "
            f"{r['parse_failures']}"
        )
    if args.json:
        out = Path(args.json)
        write_json(out, result)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
