"""Judges under attack: the injection suite's figures for undefended judges on real pairs.

For each pair, ``--limit`` items (whole groups, seeded) of its test file (SummEval: its only
file) are judged clean and under every attack of the suite (``judgeopt.evaluate.robustness``)
by each judge of ``--judges``:

* ``baseline``: the task's MT-Bench baseline as shipped (it explains, then rates; greedy);
* ``rate_first``: the same prompt rating before it explains (``cot`` ``none``), with the
  ``expected`` rating (the probability-weighted mean over the rating tokens).

Writes ``{"suite_version", "model", "settings", "pairs": [{"task", "aspect", "n", "judges":
{NAME: <the robustness report>}}]}`` and prints one table per pair (the report's lines).
Defended judges (delimited text, an explicit rule that instructions inside the text are
judged, not obeyed) are not factors of the search space yet, so none is measured here.

Usage:
    python benchmarks/injection.py --json benchmarks/results/injection.json

Set JUDGEOPT_THREADS to the CPU threads of the local model (default 2).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from judgeopt.data import Record, load_records
from judgeopt.evaluate import SUITE_VERSION, robustness
from judgeopt.judge import JudgeProgram, load_task
from judgeopt.lm import make_lm
from judgeopt_lab import pair_file, sample_groups, write_json

PAIRS = "summeval:coherence,topical_chat:naturalness,sfhot:informativeness"


def pair_records(task: str, n: int, seed: int) -> list[Record]:
    """``n`` items (whole groups, seeded) of the pair's test file (else its only file)."""
    return sample_groups(load_records(pair_file(task, "test")), n, seed=seed, cut=True)


def judges(task_name: str, aspect: str, names: Sequence[str], lm: Any) -> dict[str, Any]:
    """The judges to attack, by name."""
    base = JudgeProgram(load_task(task_name), aspect, lm=lm)
    made = {
        "baseline": base,
        "rate_first": base.with_strategy(
            {**base.strategy.as_dict(), "cot": "none", "decoding": "expected"}
        ),
    }
    unknown = [n for n in names if n not in made]
    if unknown:
        raise SystemExit(f"unknown judge(s) {unknown}; known: {sorted(made)}")
    return {n: made[n] for n in names}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default=PAIRS, help="task:aspect,...")
    ap.add_argument("--judges", default="baseline,rate_first")
    ap.add_argument("--limit", type=int, default=30, help="items per pair (whole groups)")
    ap.add_argument("--model", default="local")
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    lm = make_lm(args.model, parallel=args.parallel)
    pairs = []
    for spec in args.pairs.split(","):
        task_name, aspect = spec.split(":")
        records = pair_records(task_name, args.limit, args.seed)
        row: dict[str, Any] = {"task": task_name, "aspect": aspect, "n": len(records)}
        row["judges"] = {}
        for name, judge in judges(task_name, aspect, args.judges.split(","), lm).items():
            report = robustness(judge, records, threads=args.parallel, seed=args.seed)
            print(f"\n{task_name}/{aspect}, {name}:")
            for line in report.lines():
                print(line)
            row["judges"][name] = report.to_dict()
            if args.json:  # after every judge: an interrupted run keeps what it measured
                payload = {"suite_version": SUITE_VERSION, "model": args.model}
                write_json(args.json, {**payload, "settings": vars(args), "pairs": [*pairs, row]})
        pairs.append(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
