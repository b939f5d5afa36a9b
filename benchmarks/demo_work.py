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

    python benchmarks/demo_work.py            # about 9 minutes on two cores

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


def run(out_dir: Path) -> dict[str, Any]:
    """The demo in ``out_dir`` (its cache there too) and the engine's account of it."""
    held: dict[str, Any] = {}
    make = demo._demo_lm

    def keep(*args: Any, **kwargs: Any) -> Any:
        held["lm"] = make(*args, **kwargs)
        return held["lm"]

    os.environ["JUDGEOPT_CACHE_DIR"] = str(out_dir / "cache")
    tee = _Tee(sys.stdout)
    demo._demo_lm = keep  # type: ignore[assignment]
    try:
        started = time.perf_counter()
        with contextlib.redirect_stdout(tee):
            status = demo.run_demo(out_dir=out_dir / "demo", progress=False)
        wall = time.perf_counter() - started
    finally:
        demo._demo_lm = make
    lm = held["lm"]
    work, stats = lm.batch_work(), lm.stats()
    search = json.loads((out_dir / "demo" / "judge.json").read_text(encoding="utf-8"))["search"]
    plan = search.get("plan") or {}
    width = work["width"]
    full = stats.completion_tokens / width
    step = work["step_seconds"] / max(work["steps"], 1.0)
    lines = tee.kept.getvalue().splitlines()
    return {
        "exit_status": status,
        "wall_seconds": round(wall, 1),
        "calls": stats.calls,
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
    args = p.parse_args(argv)
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
    write_json(args.out, result)
    print(f"wrote {args.out}")
    return 0 if result["exit_status"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
