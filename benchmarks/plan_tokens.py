"""Does the plan count the prompt tokens a run computes? The plan's computed tokens per call
against the engine's count on the prompts the run sends, with no judge call.

For each pair and strategy, on the first ``--items`` validation items (the order a run judges
them), on the embedded model's tokenizer:

* ``run``: the prompts the judge sends (captured from the real judge on a scripted LM that
  answers every call), their tokens computed as the batch engine computes them with
  ``--parallel`` calls in flight (``LlamaCppLM.computed_prompt_tokens``; its agreement with
  the engine's own count: docs/benchmarks.md, section 16), the mean after the first call
  (which computes the instructions a run reads once);
* ``examples``: the plan's figure (:func:`judgeopt.evaluate.call_cost` on the plan's item
  sample and window), in-context examples rendered as the judge shows them;
* ``stand_ins``: the same with the examples stood in for by the last records (the plan's
  rendering before it used the judge's own).

Each plan figure's error is ``(plan - run) / run``, for each length of the window of items
in judging order the plan counts the computed share on (``--windows``; the plan's is
``PLAN_WINDOW``).

Usage:
    python benchmarks/plan_tokens.py --json benchmarks/results/plan_tokens.json   # 5 minutes
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import judgeopt.evaluate._plan_prompts as plan_prompts  # noqa: E402 - the rendering compared
from judgeopt.evaluate import PLAN_WINDOW, call_cost, evaluate, plan_sample  # noqa: E402
from judgeopt.judge import load_task  # noqa: E402
from judgeopt.lm import make_lm  # noqa: E402
from judgeopt.testing import ScriptedLM  # noqa: E402
from judgeopt_lab import markdown_table, write_json  # noqa: E402
from timing_check import PLAN_ITEMS, pair_items, strategy_judge  # noqa: E402

PAIRS = (
    "sfhot:informativeness",
    "sfres:naturalness",
    "summeval:fluency",
    "topical_chat:naturalness",
)
STRATEGIES: tuple[dict[str, Any], ...] = (
    {"cot": "suffix"},
    {"cot": "suffix", "order": "TD-IC-ER"},
    {"cot": "suffix", "examples": 3},
    {"cot": "suffix", "examples": 3, "order": "IC-TD-ER"},
)


@contextmanager
def stood_in() -> Iterator[None]:
    """The plan's rendering with in-context examples stood in for by other records."""
    own = plan_prompts._examples_of
    plan_prompts._examples_of = lambda judge, record: None  # type: ignore[assignment]
    try:
        yield
    finally:
        plan_prompts._examples_of = own  # type: ignore[assignment]


def sent_prompts(task: Any, aspect: str, change: dict[str, Any], records: list[Any]) -> list[Any]:
    """The messages the judge sends for ``records``, in order (a scripted LM answers)."""
    fake = ScriptedLM(lambda messages: "Rating: [[3]]")
    judge = strategy_judge(task, aspect, change, records, fake.lm)
    evaluate(judge, records, lm=fake.lm, threads=1, progress=False)
    return [r["messages"] if isinstance(r, dict) and "messages" in r else r for r in fake.requests]


def row(
    lm: Any, pair: str, change: dict[str, Any], n_items: int, parallel: int, window_items: int
) -> dict[str, Any]:
    task_name, aspect = pair.split(":", 1)
    task = load_task(task_name)
    records = pair_items(task_name, n_items)
    ids = [lm.prompt_token_ids(m) for m in sent_prompts(task, aspect, change, records)]
    computed = lm.computed_prompt_tokens(ids, in_flight=parallel)
    run = statistics.fmean(computed[1:])
    judge = strategy_judge(task, aspect, change, records, lm)
    sample, window = plan_sample(records, PLAN_ITEMS), records[:window_items]
    plans = {"examples": call_cost(judge, sample, lm, window=window).computed_tokens}
    with stood_in():
        plans["stand_ins"] = call_cost(judge, sample, lm, window=window).computed_tokens
    out: dict[str, Any] = {
        "pair": pair,
        "strategy": change,
        "prompt_tokens": round(statistics.fmean(map(len, ids)), 1),
        "run_computed": round(run, 1),
    }
    for how, value in plans.items():
        assert value is not None
        out[how] = {"computed": round(value, 1), "error": round((value - run) / run, 4)}
    return out


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean |error| of each plan figure over all rows, the examples rows and the rest."""
    summary: dict[str, Any] = {}
    for which in ("all", "examples_rows", "other_rows"):
        picked = [
            r
            for r in rows
            if which == "all" or ("examples" in r["strategy"]) == (which == "examples_rows")
        ]
        summary[which] = {
            "rows": len(picked),
            **{
                f"{how}_mean_abs_error": round(
                    statistics.fmean(abs(r[how]["error"]) for r in picked), 4
                )
                for how in ("stand_ins", "examples")
            },
        }
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", default=",".join(PAIRS))
    ap.add_argument("--items", type=int, default=100, help="items judged (a compile's n_valid)")
    ap.add_argument("--parallel", type=int, default=16, help="calls in flight")
    ap.add_argument(
        "--windows",
        default=f"16,32,64,{PLAN_WINDOW}",
        help="items the plan counts the share on (comma-separated; the plan's is "
        f"PLAN_WINDOW, {PLAN_WINDOW})",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    lm = make_lm("local", cache=False, parallel=args.parallel)
    by_window: dict[str, Any] = {}
    for window in sorted({int(w) for w in args.windows.split(",")}):
        rows = [
            row(lm, pair, change, args.items, args.parallel, window)
            for pair in args.pairs.split(",")
            for change in STRATEGIES
        ]
        table = [
            [
                r["pair"],
                ", ".join(f"{k} {v}" for k, v in r["strategy"].items()),
                f"{r['prompt_tokens']:.0f}",
                f"{r['run_computed']:.0f}",
                *(
                    f"{r[h]['computed']:.0f} ({r[h]['error']:+.0%})"
                    for h in ("stand_ins", "examples")
                ),
            ]
            for r in rows
        ]
        header = [
            "pair",
            "strategy",
            "prompt tokens",
            "run computes",
            "plan, stood in",
            "plan, own",
        ]
        print(f"window {window}:")
        print(markdown_table(header, table))
        by_window[str(window)] = {"rows": rows, "summary": summarise(rows)}
        print(by_window[str(window)]["summary"], flush=True)
    if args.json:
        write_json(
            args.json,
            {
                "items": args.items,
                "parallel": args.parallel,
                "plan_window": PLAN_WINDOW,
                "by_window": by_window,
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
