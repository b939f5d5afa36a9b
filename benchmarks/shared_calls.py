"""Calls that reuse what another call computed, side by side with the calls they replace.

Two savings of the embedded model that change no rating:

* **The expected twin from the greedy call** (:meth:`judgeopt.judge.JudgeProgram.twin_read`).
  A greedy judge stopped at its rating, on an LM that returns logprobs, asks its call for
  them: the request is then its ``expected`` twin's, so when a search judges the twin (the
  same strategy with ``decoding`` ``expected``, one mutation away) every answer is in the
  response cache.
* **A prompt held whole** (the batch engine's kept logits, :mod:`judgeopt.lm._llama_batch`).
  Self-consistency (``sc5``) sends each item's prompt five times in a row; the second to
  fifth start from the logits the first one's slot kept, evaluating no prompt token.

Each block of items is judged by both arms, alternating which goes first, each with a fresh
response cache and fresh engine slots: ``before`` (no twin read, no held prompts: the
engine and judge as they were) and ``after``. Per block and arm, three phases, as a search
meets them: the greedy strategy, then its ``expected`` twin, then its ``sc5`` variant.
Reported per phase: seconds per item of each arm, the speed-up (total before over total
after, with the normal interval of the per-block ratios), calls that reached the model,
and whether the two arms gave the same rating (and the same answer text) on every item.

Prints a table and writes JSON::

    {"phases": {"greedy": {"before_s_per_item", "after_s_per_item", "speedup",
     "speedup_interval", "same_rating", "same_text", "calls": {"before", "after"}}, ...},
     "total": {...}, "n": .., "parallel": .., "strategy": {...}}

Usage:
    python benchmarks/shared_calls.py --limit 48 --block 16 \\
        --json benchmarks/results/shared_calls.json

Set JUDGEOPT_THREADS to the CPU threads of the local model (default 2).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from judgeopt.data import load_records
from judgeopt.evaluate import evaluate
from judgeopt.judge import JudgeProgram, baseline_strategy, load_task
from judgeopt.lm import RECOMMENDED_PARALLEL, make_lm
from judgeopt.lm import _llama_batch as engine_module  # the held-prompt switch
from judgeopt_lab import fresh_engines, markdown_table, normal_interval, shared_data_dir, write_json

PHASES = ("greedy", "expected", "sc5")
ARMS = ("before", "after")


def _judge_block(
    arm: str, strategy: Any, task: Any, aspect: str, part: list[Any], lm: Any, parallel: int
) -> dict[str, dict[str, Any]]:
    """The three phases of one block in one arm: seconds, calls, ratings, texts."""
    engine_module.HOLD_PROMPTS = arm == "after"
    twin_read = JudgeProgram.twin_read
    if arm == "before":
        JudgeProgram.twin_read = lambda self, lm: None  # type: ignore[method-assign]
    try:
        fresh_engines(lm)  # empty slots: nothing held from the other arm
        out: dict[str, dict[str, Any]] = {}
        for phase in PHASES:
            judge = JudgeProgram(task, aspect, strategy.replace(decoding=phase), lm=lm)
            calls = lm.stats().calls
            t0 = time.perf_counter()
            res = evaluate(judge, part, threads=parallel, progress=False)
            out[phase] = {
                "seconds": time.perf_counter() - t0,
                "calls": lm.stats().calls - calls,
                "scores": [i.score for i in res.items],
                "raw": [i.raw for i in res.items],
            }
        return out
    finally:
        JudgeProgram.twin_read = twin_read  # type: ignore[method-assign]
        engine_module.HOLD_PROMPTS = True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="local")
    ap.add_argument("--task", default="sfres")
    ap.add_argument("--aspect", default="naturalness")
    ap.add_argument("--split", default="valid")
    ap.add_argument("--limit", type=int, default=48)
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--parallel", type=int, default=RECOMMENDED_PARALLEL)
    ap.add_argument("--cot", default="suffix", help="the strategy's cot (none or suffix)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    task = load_task(args.task)
    records = load_records(shared_data_dir() / args.task / f"{args.split}.jsonl")[: args.limit]
    strategy = baseline_strategy(task).replace(cot=args.cot)
    blocks = [records[i : i + args.block] for i in range(0, len(records), args.block)]
    with tempfile.TemporaryDirectory(prefix="judgeopt-shared-calls-") as tmp:
        warm = make_lm(args.model, parallel=args.parallel, cache=False)
        # Warm-up (model load, chat template, vocabulary texts), not timed.
        evaluate(JudgeProgram(task, args.aspect, strategy, lm=warm), records[:1], progress=False)
        runs: dict[str, list[dict[str, dict[str, Any]]]] = {a: [] for a in ARMS}
        for b, part in enumerate(blocks):
            for arm in ARMS if b % 2 == 0 else ARMS[::-1]:
                lm = make_lm(args.model, parallel=args.parallel, cache=Path(tmp) / f"{arm}{b}")
                runs[arm].append(
                    _judge_block(arm, strategy, task, args.aspect, part, lm, args.parallel)
                )
            print(
                f"block {b + 1}/{len(blocks)} ({len(part)} items): "
                + ", ".join(
                    f"{a} " + " / ".join(f"{runs[a][-1][p]['seconds']:.0f}" for p in PHASES)
                    for a in ARMS
                )
                + " s (greedy / expected / sc5)",
                file=sys.stderr,
                flush=True,
            )
    n = len(records)
    phases: dict[str, Any] = {}
    for phase in (*PHASES, "total"):
        names = PHASES if phase == "total" else (phase,)
        secs = {a: [sum(r[p]["seconds"] for p in names) for r in runs[a]] for a in ARMS}
        same = all(
            runs["before"][b][p]["scores"] == runs["after"][b][p]["scores"]
            for b in range(len(blocks))
            for p in names
        )
        same_text = all(
            runs["before"][b][p]["raw"] == runs["after"][b][p]["raw"]
            for b in range(len(blocks))
            for p in names
        )
        ratios = [x / y for x, y in zip(secs["before"], secs["after"], strict=True)]
        phases[phase] = {
            "before_s_per_item": round(sum(secs["before"]) / n, 4),
            "after_s_per_item": round(sum(secs["after"]) / n, 4),
            "speedup": round(sum(secs["before"]) / sum(secs["after"]), 4),
            "block_speedups": [round(x, 4) for x in ratios],
            "speedup_interval": [round(x, 4) for x in normal_interval(ratios)],
            "same_rating": same,
            "same_text": same_text,
            "calls": {a: sum(r[p]["calls"] for r in runs[a] for p in names) for a in ARMS},
            "seconds": {a: [round(s, 3) for s in secs[a]] for a in ARMS},
        }
    rows = [
        (
            p,
            f"{v['before_s_per_item']:.3f}",
            f"{v['after_s_per_item']:.3f}",
            f"{v['speedup']:.2f} [{v['speedup_interval'][0]:.2f}, {v['speedup_interval'][1]:.2f}]",
            f"{v['calls']['before']} / {v['calls']['after']}",
            "yes" if v["same_rating"] else "NO",
            "yes" if v["same_text"] else "NO",
        )
        for p, v in phases.items()
    ]
    print(
        markdown_table(
            (
                "phase",
                "before s/item",
                "after s/item",
                "speed-up [95 %]",
                "calls before / after",
                "same rating",
                "same text",
            ),
            rows,
        )
    )
    if args.json:
        write_json(
            args.json,
            {
                "n": n,
                "blocks": len(blocks),
                "parallel": args.parallel,
                "model": args.model,
                "pair": f"{args.task}:{args.aspect}",
                "strategy": strategy.as_dict(),
                "phases": phases,
            },
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
