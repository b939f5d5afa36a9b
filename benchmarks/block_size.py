"""The batch engine's prompt block: would smaller blocks compute fewer tokens, and faster?

The embedded model's batch engine evaluates a prompt in blocks of ``BLOCK`` tokens aligned to
its start and reuses a block another slot already holds (docs/lm.md, "Each response depends
on its request only"). The tokens between the last whole shared block and the first token
that differs (the start of the item, for a judge whose instructions come first) are computed
again on every call: half a block on average, 32 tokens at the engine's 64. Smaller blocks
waste fewer, but every block is one more llama.cpp call. This benchmark measures both sides.

Each pair's items are judged, with the engine's block set to each of ``--blocks`` in turn (a
fresh engine per arm, no response cache, ``--parallel`` calls in flight), by judges a compile
makes: the MT-Bench baseline with ``cot`` ``suffix`` and ``expected`` decoding, stopped at its
rating (the compile's rate-first candidates), and with ``--explain-items`` the baseline itself
(explaining first) on that many items of the first pair. Every arm runs ``--rounds`` times, the
order of the blocks reversed from one round to the next. Reported per pair, judge and
block: the median wall time, the prompt tokens the engine computed, and whether the
ratings (greedy, expected, the distribution) are the same as with the first block.

Usage:
    python benchmarks/block_size.py --json benchmarks/results/block_size.json

Set JUDGEOPT_THREADS to the CPU threads of the local model (default 2).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from judgeopt.data import Record, load_records
from judgeopt.judge import JudgeProgram, baseline_strategy, load_task
from judgeopt.lm import RECOMMENDED_PARALLEL, LlamaCppLM, make_lm
from judgeopt.lm import _llama_batch as engine_module  # the block is the engine's constant
from judgeopt_lab import fresh_engines, markdown_table, pair_file, sample_groups, write_json

PAIRS = "sfres:naturalness:48,summeval:coherence:24"


def pair_records(task: str, n: int) -> list[Record]:
    """``n`` items (whole groups) of the pair's validation file, seed 0."""
    return sample_groups(load_records(pair_file(task, "valid")), n, 0, cut=True)


def judge_arm(judge: JudgeProgram, records: list[Record], lm: LlamaCppLM, block: int) -> Any:
    """Judge ``records`` on a fresh engine whose prompt block is ``block``."""
    engine_module.BLOCK = block
    fresh_engines(lm)
    # The first call builds the context and evaluates the instructions: not timed.
    judge.judge(records[0].inputs, sample_id=f"warm-{block}")
    computed = _evaluated(lm)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=lm.parallel) as pool:
        preds = list(pool.map(lambda r: judge.judge(r.inputs, sample_id=r.id), records))
    return {
        "seconds": time.perf_counter() - started,
        "computed": _evaluated(lm) - computed,
        "preds": [
            (x.raw, getattr(x, "greedy_score", None), x.score, getattr(x, "distribution", None))
            for x in preds
        ],
    }


def _evaluated(lm: LlamaCppLM) -> int:
    """Prompt tokens the model's batch engine has computed (``LlamaCppLM.prompt_reuse``)."""
    reuse = lm.prompt_reuse()
    if reuse is None:
        raise SystemExit("block_size.py needs the batch engine (--parallel above 1)")
    return reuse["evaluated"]


def compare(preds: list[Any], ref: list[Any]) -> dict[str, Any]:
    """How many of ``preds`` (text, greedy, expected, distribution) equal ``ref``'s."""
    both = list(zip(preds, ref, strict=True))
    diffs = [abs(a[2] - b[2]) for a, b in both if a[2] is not None and b[2] is not None]
    return {
        "same_text": sum(a[0] == b[0] for a, b in both),
        "same_greedy": sum(a[1] == b[1] for a, b in both),
        "same_expected": sum(a[2] == b[2] for a, b in both),
        "same_distribution": sum(a[3] == b[3] for a, b in both),
        "max_expected_diff": max(diffs) if diffs else None,
    }


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    lm = make_lm("local", cache=False, parallel=args.parallel)
    if not isinstance(lm, LlamaCppLM):
        raise SystemExit("block_size.py needs the embedded model")
    blocks = [int(b) for b in args.blocks.split(",")]
    rows = []
    for k, spec in enumerate(args.pairs.split(",")):
        task_name, aspect, n = spec.split(":")
        task = load_task(task_name)
        records = pair_records(task_name, int(n))
        base = baseline_strategy(task)
        judges = [("suffix, stopped", base.replace(cot="suffix", decoding="expected"), records)]
        if k == 0 and args.explain_items:
            judges.append(("baseline, explains", base, records[: args.explain_items]))
        for name, strategy, items in judges:
            judge = JudgeProgram(task, aspect, strategy, lm=lm).with_explain(False)
            runs: dict[int, list[Any]] = {b: [] for b in blocks}
            for r in range(args.rounds):
                for b in blocks if r % 2 == 0 else blocks[::-1]:
                    runs[b].append(judge_arm(judge, items, lm, b))
                    print(
                        f"{task_name}/{aspect} {name} block {b}: "
                        f"{runs[b][-1]['seconds']:.1f} s, {runs[b][-1]['computed']} computed",
                        file=sys.stderr,
                    )
            ref = runs[blocks[0]][0]["preds"]
            for b in blocks:
                row = {
                    "pair": f"{task_name}:{aspect}",
                    "judge": name,
                    "n": len(items),
                    "block": b,
                    "seconds": [round(x["seconds"], 2) for x in runs[b]],
                    "median_seconds": round(statistics.median(x["seconds"] for x in runs[b]), 2),
                    "computed": runs[b][0]["computed"],
                    "same_across_rounds": all(x["preds"] == runs[b][0]["preds"] for x in runs[b]),
                    **compare(runs[b][0]["preds"], ref),
                }
                rows.append(row)
    engine_module.BLOCK = blocks[0]
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", default=PAIRS, help=f"task:aspect:items,... ({PAIRS})")
    p.add_argument("--blocks", default="64,32,16", help="block sizes, the reference first")
    p.add_argument("--rounds", type=int, default=2, help="runs of every arm (2)")
    p.add_argument("--explain-items", type=int, default=0, help="baseline items (0: none)")
    p.add_argument(
        "--parallel", type=int, default=RECOMMENDED_PARALLEL, help="calls in flight (the CLI's)"
    )
    p.add_argument("--json", default=None, help="write the result here")
    args = p.parse_args(argv)
    rows = run(args)
    header = ["pair", "judge", "n", "block", "median s", "computed", "same greedy", "same expected"]
    print(
        markdown_table(
            header,
            [
                [
                    r["pair"],
                    r["judge"],
                    r["n"],
                    r["block"],
                    r["median_seconds"],
                    r["computed"],
                    f"{r['same_greedy']}/{r['n']}",
                    f"{r['same_expected']}/{r['n']}",
                ]
                for r in rows
            ],
        )
    )
    if args.json:
        write_json(args.json, {"settings": vars(args), "rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
