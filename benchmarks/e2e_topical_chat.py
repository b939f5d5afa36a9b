"""End to end on Topical-Chat with a real local model: HPSS vs the MT-Bench baseline prompt.

For each aspect: HPSS searches a judge's prompting strategy on a validation subset (whole
dialogue contexts from HPSS's validation split), then the best judge and the MT-Bench
baseline are scored on held-out test items (whole contexts from HPSS's test split).
Prints a table and writes JSON with the correlations, calls, tokens and wall time.

Usage:
    python benchmarks/e2e_topical_chat.py [--model local] [--aspects naturalness,coherence]
        [--n-valid 24] [--n-test 120] [--budget 14] [--search hpss|auto]
        [--decoding greedy|expected] [--out benchmarks/results/e2e_topical_chat.json]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import numpy as np  # noqa: E402

from judgeopt.data import Record, load_records  # noqa: E402
from judgeopt.evaluate import evaluate  # noqa: E402
from judgeopt.judge import JudgeProgram, baseline_strategy, load_task  # noqa: E402
from judgeopt.lm import make_lm  # noqa: E402
from judgeopt.teleprompt import JudgeSearch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "topical_chat"

# A reduced HPSS space that a 2-core CPU can search in minutes: the factors whose values
# need no generated artifacts, and three orders (9 initialisation strategies).
SPACE = {
    "scale": [3, 5, 10],
    "examples": [0, 3],
    "criteria": ["none", "human"],
    "reference": ["none"],
    "cot": ["none", "prefix", "suffix"],
    "autocot": ["off"],
    "metrics": ["off"],
    "order": ["TD-ER-IC", "TD-IC-ER", "IC-TD-ER"],
    # Greedy only, as when the recorded results were made (before the decoding factor).
    "decoding": ["greedy"],
}


# `--decoding expected`: the probability-weighted rating read from the rating token's
# distribution (needs logprobs: the local model is loaded with logits_all). Without
# explanations (cot "none"), so each call generates a few tokens; the start and test
# baseline is the MT-Bench baseline with that CoT and decoding.
SPACE_EXPECTED = {**SPACE, "cot": ["none"], "decoding": ["expected"]}


def by_groups(records: Sequence[Record], n_items: int, seed: int) -> list[Record]:
    """Whole dialogue contexts, in a seeded random order, until ``n_items`` are reached.

    A record without a group is a context of its own.
    """
    groups = sorted({r.group_id or r.id for r in records})
    chosen: set[str] = set()
    count = 0
    for i in np.random.default_rng(seed).permutation(len(groups)):
        if count >= n_items:
            break
        g = groups[int(i)]
        chosen.add(g)
        count += sum((r.group_id or r.id) == g for r in records)
    return [r for r in records if (r.group_id or r.id) in chosen]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="local")
    ap.add_argument("--aspects", default="naturalness,coherence")
    ap.add_argument("--n-valid", type=int, default=24, help="validation items (whole contexts)")
    ap.add_argument("--n-test", type=int, default=120, help="test items (whole contexts)")
    ap.add_argument("--budget", type=int, default=14)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--search", default="hpss", choices=["hpss", "auto"],
                    help="hpss (the paper's algorithm, default) or auto (judgeopt's default); "
                         "same budget, seed and space, so the two can be compared")
    ap.add_argument("--max-tokens", type=int, default=None,
                    help="output budget of every judge call (default: the library's, by "
                         "strategy)")
    ap.add_argument("--threads", type=int, default=1,
                    help="judge calls in flight (for a server model; the in-process model "
                         "serialises calls)")
    ap.add_argument("--decoding", default="greedy", choices=["greedy", "expected"],
                    help="greedy: the reduced space with greedy parsing (default); expected: "
                         "the same space without explanations, scored by the expected rating "
                         "from logprobs")
    ap.add_argument("--out", default=None,
                    help="JSON output (default: benchmarks/results/e2e_topical_chat"
                         "[_SEARCH][_expected][_MODEL]_ASPECTS.json)")
    args = ap.parse_args()
    space = SPACE_EXPECTED if args.decoding == "expected" else SPACE
    model_tag = ("" if args.model == "local" else
                 "_" + "".join(c if c.isalnum() or c in "-." else "_" for c in args.model))
    if args.out is None:
        tag = "" if args.search == "hpss" else f"_{args.search}"
        if args.decoding == "expected":
            tag += "_expected" + model_tag
        args.out = str(ROOT / "benchmarks" / "results" /
                       f"e2e_topical_chat{tag}_{args.aspects.replace(',', '_')}.json")

    task = load_task("topical_chat")
    valid = by_groups(load_records(DATA / "valid.jsonl"), args.n_valid, seed=0)
    test = by_groups(load_records(DATA / "test.jsonl"), args.n_test, seed=1)
    lm = make_lm(args.model, **({"logits_all": True} if args.decoding == "expected"
                                and args.model.startswith("local") else {}))
    print(f"model {args.model}; {len(valid)} validation items, {len(test)} test items; "
          f"budget {args.budget}")
    rows = []
    for aspect in args.aspects.split(","):
        t0 = time.perf_counter()
        s0 = lm.stats()
        start = baseline_strategy(task)
        if args.decoding == "expected":
            start = start.replace(cot="none", decoding="expected")
        student = JudgeProgram(task, aspect, start, lm=lm, max_tokens=args.max_tokens)
        run_dir = f"e2e_{aspect}" if args.search == "hpss" else f"e2e_{args.search}_{aspect}"
        if args.decoding == "expected":
            run_dir += "_expected"
        run_dir += model_tag  # checkpoints of another model must not be resumed
        if args.seed != 0:
            run_dir += f"_seed{args.seed}"
        opt = JudgeSearch(args.search, budget=args.budget, seed=args.seed, space=space,
                          params={"k": 3}, checkpoint_dir=ROOT / "runs" / run_dir,
                          threads=args.threads)
        best = opt.compile(student, trainset=valid)
        search_s = time.perf_counter() - t0
        s1 = lm.stats()
        base = JudgeProgram(task, aspect, start, lm=lm, max_tokens=args.max_tokens)
        base_valid = best.search_result.evaluation_summaries[0]
        t1 = time.perf_counter()
        test_base = evaluate(base, test, desc=f"test baseline {aspect}", threads=args.threads)
        test_best = evaluate(best, test, desc=f"test best {aspect}", threads=args.threads)
        test_s = time.perf_counter() - t1
        s2 = lm.stats()
        row = {
            "aspect": aspect,
            "method": args.search,
            "best_strategy": best.strategy.as_dict(),
            "valid_baseline": base_valid["spearman"],
            "valid_best": best.search_result.best_score,
            "test_baseline": test_base.summary(),
            "test_best": test_best.summary(),
            "search": {"evaluations": best.search_result.evaluations,
                       "calls": s1.calls - s0.calls, "cache_hits": s1.cache_hits - s0.cache_hits,
                       "prompt_tokens": s1.prompt_tokens - s0.prompt_tokens,
                       "completion_tokens": s1.completion_tokens - s0.completion_tokens,
                       "seconds": round(search_s, 1)},
            "test": {"calls": s2.calls - s1.calls,
                     "prompt_tokens": s2.prompt_tokens - s1.prompt_tokens,
                     "completion_tokens": s2.completion_tokens - s1.completion_tokens,
                     "seconds": round(test_s, 1)},
            "trace": [(t["number"], t["kind"], t["score"]) for t in best.search_result.trace],
        }
        rows.append(row)
        print(json.dumps({k: row[k] for k in ("aspect", "valid_baseline", "valid_best")}))
        print(f"  test spearman: baseline {test_base.spearman}, best {test_best.spearman}")
    print()
    print(f"{'aspect':<14}{'valid base':>11}{'valid best':>11}{'test base':>10}{'test best':>10}"
          f"{'calls':>8}{'minutes':>9}")
    for r in rows:
        calls = r["search"]["calls"] + r["test"]["calls"]
        mins = (r["search"]["seconds"] + r["test"]["seconds"]) / 60
        print(f"{r['aspect']:<14}{r['valid_baseline']:>11.3f}{r['valid_best']:>11.3f}"
              f"{r['test_baseline']['spearman']:>10.3f}{r['test_best']['spearman']:>10.3f}"
              f"{calls:>8}{mins:>9.1f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": args.model, "n_valid": len(valid), "n_test": len(test),
                               "budget": args.budget, "space": space, "rows": rows},
                              indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
