"""Cost of a compile with and without racing: calls, tokens, wall time, and the judges found.

Compiles a judge (Topical-Chat by default, ``--task``) twice with a real local model, the same
search, seed, budget, space and validation items: once judging every candidate on every item
(full), once with racing (docs/judge.md, "Racing"). Each compile gets its own fresh LM cache,
so the racing run cannot profit from the full run's judgements (and no checkpoint is reused).
Both chosen judges are then scored on held-out test items (one shared test cache: identical
test judgements are made once; test calls are not part of the compile cost). Prints a table
and the JSON summary (last line), and writes the JSON with both traces.

Usage:
    python benchmarks/cost.py [--model local:qwen2.5-coder-0.5b] [--aspect naturalness]
        [--n-valid 120] [--n-test 120] [--budget 12] [--out benchmarks/results/cost.json]
    python benchmarks/cost.py --quick     # SmolLM2, 12 items, 4 strategies: plumbing only

Set JUDGEOPT_THREADS to the CPU threads of the local model (default 2).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from judgeopt.data import Record, load_records
from judgeopt.evaluate import evaluate
from judgeopt.judge import JudgeProgram, JudgeTask, baseline_strategy, load_task
from judgeopt.teleprompt import JudgeSearch
from judgeopt_lab import sample_groups, shared_data_dir, spent, write_json

ROOT = Path(__file__).resolve().parents[1]
DATA = shared_data_dir()

# A reduced HPSS space that a 2-core CPU can search in minutes (that of the first end-to-end
# runs, docs/benchmarks.md sections 1-2): the factors whose values need no generated
# artifacts, and three orders (9 initialisation strategies).
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
# distribution (needs logprobs). Without explanations (cot "none"), so each call generates a
# few tokens.
SPACE_EXPECTED = {**SPACE, "cot": ["none"], "decoding": ["expected"]}

# --quick: four strategies of SmolLM2 without explanations (short outputs).
QUICK_SPACE = {
    "scale": [3, 10],
    "examples": [0],
    "criteria": ["none", "human"],
    "reference": ["none"],
    "cot": ["none"],
    "autocot": ["off"],
    "metrics": ["off"],
    "order": ["TD-ER-IC", "IC-TD-ER"],
    "decoding": ["greedy"],
}


def compile_once(
    lm: Any,
    task: JudgeTask,
    aspect: str,
    valid: list[Record],
    *,
    search: str,
    budget: int,
    seed: int,
    space: dict[str, list[Any]],
    k: int,
    racing: dict[str, Any] | bool,
    progress: bool = True,
    threads: int = 1,
) -> dict[str, Any]:
    """One compile on a fresh LM: the chosen judge and what the compile cost."""
    start = baseline_strategy(task)
    for factor in (
        "cot",
        "decoding",
        "scale",
    ):  # the baseline, moved into a space that lacks its value
        if start[factor] not in space[factor]:
            start = start.replace(**{factor: space[factor][0]})
    student = JudgeProgram(task, aspect, start, lm=lm)
    # selection="best" and no endpoint check call: the racing comparison counts the
    # search's judge calls only.
    opt = JudgeSearch(
        search,
        budget=budget,
        seed=seed,
        space=space,
        params={"k": k},
        racing=racing,
        progress=progress,
        threads=threads,
        selection="best",
        check_endpoint=False,
    )
    with spent(lm) as cost:
        best = opt.compile(student, trainset=valid)
    res = best.search_result
    return {
        "judge": best,
        **cost,
        "seconds": round(cost["seconds"], 1),
        "valid": res.best_score,
        "strategy": best.strategy.as_dict(),
        "evaluations": res.evaluations,
        "racing": res.racing,
        "trace": [
            {
                "number": t["number"],
                "kind": t["kind"],
                "score": t["score"],
                "items": (t.get("racing") or {}).get("items", len(valid)),
                "dropped": bool((t.get("racing") or {}).get("dropped")),
            }
            for t in res.trace
        ],
    }


def compare(
    make_lm: Callable[[str], Any],
    task: JudgeTask,
    aspect: str,
    valid: list[Record],
    test: list[Record],
    *,
    search: str,
    budget: int,
    seed: int,
    space: dict[str, list[Any]],
    k: int,
    racing: dict[str, Any],
    progress: bool = True,
    threads: int = 1,
) -> dict[str, Any]:
    """Compile with and without racing (one fresh LM each, from ``make_lm(tag)``), then
    score both chosen judges on ``test`` with a third LM."""
    runs: dict[str, dict[str, Any]] = {}
    for mode, race in (("full", False), ("racing", {**racing, "enabled": True})):
        lm = make_lm(mode)
        runs[mode] = compile_once(
            lm,
            task,
            aspect,
            valid,
            search=search,
            budget=budget,
            seed=seed,
            space=space,
            k=k,
            racing=race,
            progress=progress,
            threads=threads,
        )
        del lm
    test_lm = make_lm("test")
    for run in runs.values():
        ev = evaluate(
            run.pop("judge"), test, lm=test_lm, progress=progress, desc="test", threads=threads
        )
        run["test"] = ev.spearman
        run["test_summary"] = ev.summary()
    full, race_run = runs["full"], runs["racing"]

    def tokens(r: dict[str, Any]) -> int:
        return int(r["prompt_tokens"] + r["completion_tokens"])

    out: dict[str, Any] = {
        "calls_full": full["calls"],
        "calls_racing": race_run["calls"],
        # Non-zero only when a run was resumed from --cache-dir (each arm starts empty).
        "cache_hits_full": full["cache_hits"],
        "cache_hits_racing": race_run["cache_hits"],
        "valid_full": full["valid"],
        "valid_racing": race_run["valid"],
        "test_full": full["test"],
        "test_racing": race_run["test"],
        "tokens_full": tokens(full),
        "tokens_racing": tokens(race_run),
        "seconds_full": full["seconds"],
        "seconds_racing": race_run["seconds"],
        # Judge requests (calls + cache hits): equal to the calls on a fresh cache, and
        # still the compile's cost when a killed run was resumed from --cache-dir.
        "call_ratio": (
            (race_run["calls"] + race_run["cache_hits"]) / (full["calls"] + full["cache_hits"])
            if full["calls"] + full["cache_hits"]
            else None
        ),
        "test_delta": (
            None
            if full["test"] is None or race_run["test"] is None
            else race_run["test"] - full["test"]
        ),
        "same_strategy": full["strategy"] == race_run["strategy"],
        "dropped": (race_run["racing"] or {}).get("dropped"),
    }
    out["target_met"] = (
        out["call_ratio"] is not None
        and out["call_ratio"] <= 0.5
        and out["test_delta"] is not None
        and abs(out["test_delta"]) <= 0.02
    )
    out["runs"] = runs
    return out


def table(result: dict[str, Any]) -> str:
    """A small text table of the two runs."""

    def fmt(v: Any) -> str:
        return "n/a" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))

    lines = [f"{'':<8}{'calls':>7}{'tokens':>9}{'seconds':>9}{'valid':>8}{'test':>8}{'dropped':>9}"]
    for mode in ("full", "racing"):
        r = result["runs"][mode]
        dropped = (r["racing"] or {}).get("dropped", "-")
        lines.append(
            f"{mode:<8}{r['calls']:>7}{r['prompt_tokens'] + r['completion_tokens']:>9}"
            f"{r['seconds']:>9.1f}{fmt(r['valid']):>8}{fmt(r['test']):>8}"
            f"{dropped!s:>9}"
        )
    lines.append(
        f"racing/full calls: {fmt(result['call_ratio'])}; test Spearman difference: "
        f"{fmt(result['test_delta'])}; same strategy: {result['same_strategy']}; "
        f"target (<= 0.5 of the calls, |test diff| <= 0.02) met: "
        f"{result['target_met']}"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="SmolLM2, 12 validation and 9 test items, 4 strategies (plumbing only; "
        "about 110 calls, under 5 minutes on an idle 2-core machine)",
    )
    ap.add_argument(
        "--model",
        default=None,
        help="make_lm model string (default local:qwen2.5-coder-0.5b; --quick: local:smollm2-135m)",
    )
    ap.add_argument(
        "--task",
        default="topical_chat",
        help="a shipped task with valid.jsonl and test.jsonl in the shared data (topical_chat)",
    )
    ap.add_argument("--aspect", default="naturalness")
    ap.add_argument("--n-valid", type=int, default=None, help="validation items (default 120)")
    ap.add_argument("--n-test", type=int, default=None, help="test items (default 120)")
    ap.add_argument("--budget", type=int, default=None, help="strategies (default 12)")
    ap.add_argument("--k", type=int, default=3, help="population size of the search")
    ap.add_argument("--search", default="hpss", choices=["hpss", "auto"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--min-items",
        type=int,
        default=None,
        help="racing: no drop before this many items (default 20; --quick 6)",
    )
    ap.add_argument(
        "--confidence", type=float, default=0.95, help="racing: one-sided level of the bound"
    )
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="judge calls in flight (for a server model such as a vLLM server "
        "with --model openai/NAME and JUDGEOPT_API_BASE; the in-process "
        "model serialises calls)",
    )
    ap.add_argument(
        "--decoding",
        default="greedy",
        choices=["greedy", "expected"],
        help="greedy: the end-to-end benchmark's reduced space (default); "
        "expected: the same space without explanations, scored by the "
        "expected rating (needs logprobs: a server model, or a local model "
        "loaded with logits_all)",
    )
    ap.add_argument(
        "--cache-dir",
        default=None,
        help="keep the three LM caches here (one per arm and the test set), so "
        "a killed run restarted with the same options resumes; judge "
        "requests answered from it are counted as cache hits, not calls "
        "(default: a fresh temporary directory)",
    )
    ap.add_argument(
        "--out", default=None, help="JSON output (default benchmarks/results/cost[_quick].json)"
    )
    args = ap.parse_args(argv)
    quick = args.quick
    model = args.model or ("local:smollm2-135m" if quick else "local:qwen2.5-coder-0.5b")
    n_valid = args.n_valid or (12 if quick else 120)
    n_test = args.n_test or (8 if quick else 120)
    budget = args.budget or (4 if quick else 12)
    k = min(args.k, 2) if quick else args.k
    min_items = args.min_items or (6 if quick else 20)
    space = QUICK_SPACE if quick else SPACE_EXPECTED if args.decoding == "expected" else SPACE
    out = Path(
        args.out
        or ROOT
        / "benchmarks"
        / "results"
        / (
            "cost_quick.json"
            if quick
            else "cost_expected.json"
            if args.decoding == "expected"
            else "cost.json"
        )
    )
    lm_kwargs = (
        {"logits_all": True} if args.decoding == "expected" and model.startswith("local") else {}
    )

    from judgeopt.lm import make_lm

    task = load_task(args.task)
    # Whole dialogue contexts (whole groups), as in the end-to-end runs.
    valid = sample_groups(load_records(DATA / args.task / "valid.jsonl"), n_valid, seed=0)
    test = sample_groups(load_records(DATA / args.task / "test.jsonl"), n_test, seed=1)
    racing = {"min_items": min_items, "confidence": args.confidence}
    print(
        f"model {model}; {len(valid)} validation items, {len(test)} test items; "
        f"{args.search} budget {budget}, k {k}, seed {args.seed}; racing {racing}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="judgeopt-cost-") as tmp:
        cache_root = Path(args.cache_dir) if args.cache_dir else Path(tmp)
        result = compare(
            lambda tag: make_lm(model, cache=cache_root / tag, **lm_kwargs),
            task,
            args.aspect,
            valid,
            test,
            search=args.search,
            budget=budget,
            seed=args.seed,
            space=space,
            k=k,
            racing=racing,
            progress=not args.no_progress,
            threads=args.threads,
        )
    result.update(
        model=model,
        task=args.task,
        aspect=args.aspect,
        n_valid=len(valid),
        n_test=len(test),
        budget=budget,
        k=k,
        search=args.search,
        seed=args.seed,
        racing=racing,
        quick=quick,
        threads=args.threads,
        decoding=args.decoding,
    )
    print(table(result))
    write_json(out, result, indent=1, default=str)
    print(f"wrote {out}")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, default=str))


if __name__ == "__main__":
    main()
