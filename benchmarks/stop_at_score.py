"""What a judge's tokens after its rating are worth: the stop at the score, and explanation caps.

Two measurements with the embedded model, the batched engine a compile uses (``--parallel``
requests decoded together; every response a function of its request alone):

* ``stop`` (default): judges that rate before they explain (the MT-Bench baseline with
  ``cot`` ``suffix``, and with ``cot`` ``none``; ``expected`` decoding, so each answer also
  carries the rating's distribution) judge the same items twice, writing their explanation
  (``explain=True``) and stopped at the end of the rating (``explain=False``, what evaluate,
  compiles, grids and the bank do). Reports, per pair and strategy, whether the greedy rating,
  the expected rating and the whole distribution agree on every item, the wall time of each
  arm and the tokens generated.
* ``caps``: judges that explain first (the baseline itself, ``cot`` ``prefix``, greedy) judge
  the same items with smaller output caps than the default 256 tokens. Reports the share of
  items whose rating equals the uncapped one, the items left without a rating, the rank
  correlation with the humans of each cap, and the time.

Every arm starts on a fresh batch engine (no prompt blocks left from another arm) with the
response cache off; arms alternate which goes first from one pair to the next.

Usage:
    python benchmarks/stop_at_score.py --limit 30 --json benchmarks/results/stop_at_score.json
    python benchmarks/stop_at_score.py --mode caps --caps 256,160,96 --limit 30 \\
        --json benchmarks/results/explanation_caps.json

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
from judgeopt.lm import LlamaCppLM, make_lm
from judgeopt.metrics import correlation
from judgeopt_lab import fresh_engines, pair_file, sample_groups, write_json

PAIRS = "summeval:coherence,topical_chat:naturalness,sfhot:informativeness"


def pair_records(task: str, n: int, seed: int) -> list[Record]:
    """``n`` items (whole groups) of a pair's validation file (SummEval: its only file)."""
    return sample_groups(load_records(pair_file(task, "valid")), n, seed, cut=True)


def judge_all(judge: JudgeProgram, records: list[Record], lm: LlamaCppLM) -> dict[str, Any]:
    """Judge ``records`` with ``lm.parallel`` calls in flight; predictions, seconds, tokens."""
    fresh_engines(lm)
    before = lm.stats()
    tokens0, prompt0 = before.completion_tokens, before.prompt_tokens
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=lm.parallel) as pool:
        preds = list(pool.map(lambda r: judge.judge(r.inputs, sample_id=r.id), records))
    seconds = time.perf_counter() - t0
    after = lm.stats()
    return {
        "preds": preds,
        "seconds": seconds,
        "completion_tokens": after.completion_tokens - tokens0,
        "prompt_tokens": after.prompt_tokens - prompt0,
    }


def _spearman(records: list[Record], aspect: str, scores: list[float | None]) -> float | None:
    pairs = [(r.scores[aspect], s) for r, s in zip(records, scores, strict=True) if s is not None]
    if len(pairs) < 3:
        return None
    value = correlation([h for h, _ in pairs], [s for _, s in pairs], "spearman")
    return round(float(value), 4)


def stop_rows(lm: LlamaCppLM, pairs: list[tuple[str, str]], args: argparse.Namespace) -> Any:
    rows = []
    for k, (task_name, aspect) in enumerate(pairs):
        task = load_task(task_name)
        records = pair_records(task_name, args.limit, args.seed)
        for cot in ("suffix", "none"):
            strategy = baseline_strategy(task).replace(cot=cot, decoding="expected")
            judge = JudgeProgram(task, aspect, strategy, lm=lm)
            arms = {"explain": judge, "stop": judge.with_explain(False)}
            order = ["explain", "stop"] if k % 2 == 0 else ["stop", "explain"]
            runs = {name: judge_all(arms[name], records, lm) for name in order}
            full, short = runs["explain"]["preds"], runs["stop"]["preds"]
            both = list(zip(full, short, strict=True))
            same_greedy = sum(a.greedy_score == b.greedy_score for a, b in both)
            same_expected = sum(a.score == b.score for a, b in both)
            same_dist = sum(a.distribution == b.distribution for a, b in both)
            diffs = [
                abs(a.score - b.score)
                for a, b in both
                if a.score is not None and b.score is not None
            ]
            cut = sum(a.raw != b.raw for a, b in both)
            row = {
                "task": task_name,
                "aspect": aspect,
                "cot": cot,
                "n": len(records),
                "order": order,
                "same_greedy": same_greedy,
                "same_expected": same_expected,
                "same_distribution": same_dist,
                "max_expected_diff": max(diffs) if diffs else None,
                "answers_cut": cut,
                "unrated": sum(p.score is None for p in short),
                "seconds_explain": round(runs["explain"]["seconds"], 2),
                "seconds_stop": round(runs["stop"]["seconds"], 2),
                "completion_tokens_explain": runs["explain"]["completion_tokens"],
                "completion_tokens_stop": runs["stop"]["completion_tokens"],
                "prompt_tokens_explain": runs["explain"]["prompt_tokens"],
                "prompt_tokens_stop": runs["stop"]["prompt_tokens"],
                "spearman_dataset": _spearman(records, aspect, [p.score for p in short]),
            }
            rows.append(row)
            print(
                f"{task_name}/{aspect} cot={cot}: same greedy {same_greedy}/{len(records)}, "
                f"expected {same_expected}, distribution {same_dist}; "
                f"{row['seconds_explain']:.0f} s -> {row['seconds_stop']:.0f} s, "
                f"{row['completion_tokens_explain']} -> {row['completion_tokens_stop']} tokens",
                file=sys.stderr,
            )
    n = sum(r["n"] for r in rows)
    explain_s = sum(r["seconds_explain"] for r in rows)
    stop_s = sum(r["seconds_stop"] for r in rows)
    summary = {
        "judgements": n,
        "all_same": all(
            r["same_greedy"] == r["same_expected"] == r["same_distribution"] == r["n"] for r in rows
        ),
        "seconds_explain": round(explain_s, 1),
        "seconds_stop": round(stop_s, 1),
        "time_ratio": round(stop_s / explain_s, 3),
        "suffix_seconds_per_item_explain": _per_item(rows, "suffix", "seconds_explain"),
        "suffix_seconds_per_item_stop": _per_item(rows, "suffix", "seconds_stop"),
        "none_seconds_per_item_explain": _per_item(rows, "none", "seconds_explain"),
        "none_seconds_per_item_stop": _per_item(rows, "none", "seconds_stop"),
    }
    return rows, summary


def _per_item(rows: list[dict[str, Any]], cot: str, key: str) -> float:
    sel = [r for r in rows if r["cot"] == cot]
    return round(sum(r[key] for r in sel) / sum(r["n"] for r in sel), 3)


def cap_rows(lm: LlamaCppLM, pairs: list[tuple[str, str]], args: argparse.Namespace) -> Any:
    caps = sorted({int(c) for c in args.caps.split(",")}, reverse=True)
    rows = []
    for k, (task_name, aspect) in enumerate(pairs):
        task = load_task(task_name)
        records = pair_records(task_name, args.limit, args.seed)
        base = baseline_strategy(task)  # explains first (cot prefix), greedy
        runs = {}
        for cap in caps if k % 2 == 0 else caps[::-1]:
            judge = JudgeProgram(task, aspect, base, lm=lm, max_tokens=cap)
            runs[cap] = judge_all(judge, records, lm)
        ref = [p.score for p in runs[caps[0]]["preds"]]
        for cap in caps:
            scores = [p.score for p in runs[cap]["preds"]]
            row = {
                "task": task_name,
                "aspect": aspect,
                "cap": cap,
                "n": len(records),
                "same_as_largest": sum(a == b for a, b in zip(ref, scores, strict=True)),
                "unrated": sum(s is None for s in scores),
                "spearman_dataset": _spearman(records, aspect, scores),
                "seconds": round(runs[cap]["seconds"], 2),
                "completion_tokens": runs[cap]["completion_tokens"],
            }
            rows.append(row)
            print(
                f"{task_name}/{aspect} cap {cap}: same as {caps[0]} on {row['same_as_largest']}/"
                f"{row['n']}, unrated {row['unrated']}, {row['seconds']:.0f} s",
                file=sys.stderr,
            )
    summary = {
        str(cap): {
            "same_as_largest": sum(r["same_as_largest"] for r in rows if r["cap"] == cap),
            "unrated": sum(r["unrated"] for r in rows if r["cap"] == cap),
            "n": sum(r["n"] for r in rows if r["cap"] == cap),
            "seconds": round(sum(r["seconds"] for r in rows if r["cap"] == cap), 1),
            "mean_spearman_dataset": _mean(
                [r["spearman_dataset"] for r in rows if r["cap"] == cap]
            ),
        }
        for cap in caps
    }
    return rows, summary


def _mean(values: list[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return round(statistics.fmean(kept), 4) if kept else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=["stop", "caps"], default="stop")
    p.add_argument("--model", default="local", help="an embedded model (local)")
    p.add_argument("--pairs", default=PAIRS, help=f"task:aspect,... ({PAIRS})")
    p.add_argument("--limit", type=int, default=30, help="items per pair (30)")
    p.add_argument("--seed", type=int, default=0, help="which items (0)")
    p.add_argument("--parallel", type=int, default=8, help="requests decoded together (8)")
    p.add_argument("--caps", default="256,160,96", help="caps mode: output caps (256,160,96)")
    p.add_argument("--json", default=None, help="write the result here")
    args = p.parse_args(argv)

    lm = make_lm(args.model, cache=False, parallel=args.parallel)
    if not isinstance(lm, LlamaCppLM):
        p.error(f"--model must be an embedded (local) model; got {args.model!r}")
    pairs = [tuple(x.split(":", 1)) for x in args.pairs.split(",")]
    rows, summary = (stop_rows if args.mode == "stop" else cap_rows)(lm, pairs, args)  # type: ignore[arg-type]
    result = {
        "mode": args.mode,
        "model": lm.model,
        "parallel": args.parallel,
        "limit": args.limit,
        "seed": args.seed,
        "summary": summary,
        "rows": rows,
    }
    print(summary)
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
