"""Where the demo's time goes: ``judgeopt demo`` run once, then the batch engine's own account.

Runs the README's main job (:func:`judgeopt.demo.run_demo`, its defaults) with a fresh response
cache, then reads what the embedded model's batch engine spent (``LlamaCppLM.batch_work``):
its decoding steps and their seconds (each step writes one token for every slot; idle slots
are padded, so a step costs the same however many are busy), the seconds of computing
prompts and the prompt tokens computed. From them:

* ``full_steps``: the steps the written tokens would take with every slot busy
  (completion tokens / width), and ``padded_seconds``, what the other steps cost (the waits
  for the longest answers at the end of each run of calls, and steps with slots idle);
* ``prompt_share``: the share of the wall time spent computing prompt tokens, and their rate;
* ``plan``: what the compile's plan said for its search before its first call, beside the
  search's ``search_seconds``.

Prints a table and writes JSON (``benchmarks/results/demo_work.json``)::

    python benchmarks/demo_work.py            # about 8 minutes on two cores

``--arms`` runs the demo several times in one process, side by side, each with a fresh
response cache and fresh batch engines, and writes every arm's account: ``together`` is the
demo as it is (the baseline judges the held-out test items in its search run, the compile's
``testset``), ``after`` the demo before that (the baseline's test judgements in a run of
their own after the compile)::

    python benchmarks/demo_work.py --arms together,after,after,together \
        --out benchmarks/results/demo_work_testset.json     # about 35 minutes

Set JUDGEOPT_THREADS to the CPU threads of the local model (default 2).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import judgeopt.demo as demo  # noqa: E402
from judgeopt_lab import markdown_table, write_json  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "demo_work.json"


class _Tee(io.TextIOBase):
    """Write to the terminal and keep a copy."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.kept = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.stream.flush()
        return self.kept.write(text)


ARMS = ("together", "after")


def run(out_dir: Path, arm: str = "together") -> dict[str, Any]:
    """The demo in ``out_dir`` (its cache there too) and the engine's account of it.

    ``arm``: ``together`` (the demo as it is) or ``after`` (the baseline's held-out test
    judgements left to the test, as before the compile's ``testset``).
    """
    from judgeopt_lab import fresh_engines

    held: dict[str, Any] = {}
    make, compile_ = demo._demo_lm, demo._compile

    def alone(spec: Any, aspect: str, lm: Any, items: Any, *rest: Any) -> Any:
        return compile_(spec, aspect, lm, (items[0], []), *rest)

    def keep(*args: Any, **kwargs: Any) -> Any:
        held["lm"] = make(*args, **kwargs)
        return held["lm"]

    os.environ["JUDGEOPT_CACHE_DIR"] = str(out_dir / "cache")
    tee = _Tee(sys.stdout)
    demo._demo_lm = keep  # type: ignore[assignment]
    if arm == "after":
        demo._compile = alone  # type: ignore[assignment]
    try:
        started = time.perf_counter()
        with contextlib.redirect_stdout(tee):
            status = demo.run_demo(out_dir=out_dir / "demo", progress=False)
        wall = time.perf_counter() - started
    finally:
        demo._demo_lm, demo._compile = make, compile_
    lm = held["lm"]
    work, stats = lm.batch_work(), lm.stats()
    fresh_engines(lm)  # the next arm starts with empty slots
    summary = json.loads((out_dir / "demo" / "summary.json").read_text(encoding="utf-8"))
    search = json.loads((out_dir / "demo" / "judge.json").read_text(encoding="utf-8"))["search"]
    plan = search.get("plan") or {}
    width = work["width"]
    full = stats.completion_tokens / width
    step = work["step_seconds"] / max(work["steps"], 1.0)
    lines = tee.kept.getvalue().splitlines()
    return {
        "arm": arm,
        "exit_status": status,
        "wall_seconds": round(wall, 1),
        "test": {k: summary["test"].get(k) for k in ("n", "gain", "gain_ci")},
        "calls": stats.calls,
        "cache_hits": stats.cache_hits,
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "engine": {k: round(v, 3) for k, v in work.items()},
        "step_seconds_each": round(step, 4),
        "full_steps": round(full, 1),
        "padded_steps": round(work["steps"] - full, 1),
        "padded_seconds": round((work["steps"] - full) * step, 1),
        "prompt_share": round(work["prompt_seconds"] / wall, 3),
        "steps_share": round(work["step_seconds"] / wall, 3),
        "engine_share": round((work["prompt_seconds"] + work["step_seconds"]) / wall, 3),
        "seconds_per_computed_token": round(work["prompt_seconds"] / work["evaluated"], 5),
        "computed_share_of_prompt_tokens": round(work["evaluated"] / stats.prompt_tokens, 3),
        "search_seconds": round(float(search["seconds"]), 1),
        "plan": {k: plan.get(k) for k in ("calls", "seconds", "what", "spread")},
        "result_lines": [x for x in lines if x.startswith(("search:", "chosen:", "  "))],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument(
        "--arms",
        default=None,
        help=f"comma-separated arms run in this order, side by side (of {', '.join(ARMS)}); "
        "default: the demo once, as it is",
    )
    args = p.parse_args(argv)
    if args.arms is None:
        return _one(args.out)
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms:
        p.error(f"--arms: {bad or args.arms!r} not among {', '.join(ARMS)}")
    return _side_by_side(arms, args.out)


def _side_by_side(arms: list[str], out: Path) -> int:
    """Every arm in turn; a table of their wall times and the JSON of all."""
    results = []
    for k, arm in enumerate(arms):
        with tempfile.TemporaryDirectory(prefix=f"judgeopt-demo-work-{k}-") as tmp:
            results.append(run(Path(tmp), arm))
        r = results[-1]
        print(f"arm {k + 1} of {len(arms)} ({arm}): {r['wall_seconds']:.0f} s", flush=True)
        # Written after every arm, so an interrupted run keeps the arms it finished.
        write_json(out, {"arms": arms, "finished": k + 1, "runs": results})
    summary: dict[str, Any] = {}
    for arm in dict.fromkeys(arms):
        walls = [r["wall_seconds"] for r in results if r["arm"] == arm]
        summary[arm] = {"runs": walls, "mean_seconds": round(sum(walls) / len(walls), 1)}
    if len(summary) == 2:
        summary["ratio_together_to_after"] = round(
            summary["together"]["mean_seconds"] / summary["after"]["mean_seconds"], 3
        )
    rows = [
        [
            r["arm"],
            f"{r['wall_seconds']:.0f}",
            f"{r['search_seconds']:.0f}",
            str(r["calls"]),
            str(r["cache_hits"]),
            f"{r['padded_seconds']:.0f}",
            f"{r['test']['gain']:+.3f}",
        ]
        for r in results
    ]
    head = ["arm", "wall s", "search s", "calls", "cache hits", "padded s", "test gain"]
    print(markdown_table(head, rows))
    write_json(out, {"arms": arms, "finished": len(arms), "summary": summary, "runs": results})
    print(f"wrote {out}")
    return 0 if all(r["exit_status"] == 0 for r in results) else 1


def _one(out: Path) -> int:
    """The demo once, as it is (``benchmarks/results/demo_work.json``)."""
    with tempfile.TemporaryDirectory(prefix="judgeopt-demo-work-") as tmp:
        result = run(Path(tmp))
    e = result["engine"]
    rows = [
        ["wall", f"{result['wall_seconds']:.0f} s", "", ""],
        [
            "computing prompts",
            f"{e['prompt_seconds']:.0f} s",
            f"{e['evaluated']:.0f} tokens computed of {result['prompt_tokens']}",
            f"{1000 * result['seconds_per_computed_token']:.1f} ms a token",
        ],
        [
            "decoding steps",
            f"{e['step_seconds']:.0f} s",
            f"{e['steps']:.0f} steps of {e['width']:.0f} columns for "
            f"{result['completion_tokens']} written tokens",
            f"{result['step_seconds_each']:.3f} s a step",
        ],
        [
            "of them padded",
            f"{result['padded_seconds']:.0f} s",
            f"{result['padded_steps']:.0f} steps beyond {result['full_steps']:.0f} full ones",
            "",
        ],
    ]
    print(markdown_table(["part", "seconds", "what", "rate"], rows))
    write_json(out, result)
    print(f"wrote {out}")
    return 0 if result["exit_status"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
