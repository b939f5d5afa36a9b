"""The timing a resumed compile plans with, against what its remaining strategies took.

A compile that resumes from its checkpoint finds its baseline in the response cache, so its
plan times the calls from the evaluations already made (:func:`judgeopt.evaluate.
recorded_timing`). On the embedded model each evaluation counts the prompt tokens its calls
computed (the rest came from the prefix cache), except the first one judged after a resume:
the engine starts during it, so its start is unknown and it has no count. Timed on every
prompt token instead, a strategy with ten in-context examples (four times the prompt, most
of it shared between its calls) looks four times as slow as it is.

This reads every stored compile checkpoint (``benchmarks/runs/**/ckpt/evaluations.jsonl``),
finds its resume points (an evaluation without the count, after the first), and at each one
makes the timing from the evaluations before it two ways: ``fit`` (the counted ones fitted,
those without the count left out: what ``recorded_timing`` does) and ``pooled`` (every
evaluation's seconds pooled per token unit, what a single summary without the count used to
send it to). Each timing then prices the evaluations after the point on their own recorded
tokens, the computed ones among them, and the sums are compared with their recorded seconds
(the evaluations after the point without the count, the next resume's first, are left out:
their computed tokens are unknown). The strategies' tokens are the recorded ones, so this
measures the timing alone, not the plan's guess of which strategies come (``plan_paths.py``)
or of their tokens.
No judge call, no model loaded; a second.

    python benchmarks/resume_timing.py

Writes ``benchmarks/results/resume_timing.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from judgeopt.evaluate import Timing, recorded_timing  # noqa: E402
from judgeopt_lab import markdown_table, provenance, write_json  # noqa: E402

ROOT = Path(__file__).resolve().parent
RUNS = ROOT / "runs"
DEFAULT_OUT = ROOT / "results" / "resume_timing.json"
#: Calls in flight of the stored compiles (``e2e.py --parallel``); the pooled and the fitted
#: timing scale with it alike, so it changes neither's error.
IN_FLIGHT = 16


class _Cap:
    """The judge's output cap as ``recorded_timing`` reads it (``max_tokens``)."""

    max_tokens = 256


def resume_points(evaluations: Sequence[Mapping[str, Any]]) -> list[int]:
    """The indices of the evaluations judged first after a resume: no ``computed_tokens``
    where the evaluations before them counted theirs (the first evaluation is the run's
    start, not a resume)."""
    counted = [("computed_tokens" in e) for e in evaluations]
    return [i for i in range(1, len(evaluations)) if not counted[i] and any(counted[:i])]


def priced(timing: Timing, evaluations: Sequence[Mapping[str, Any]]) -> float:
    """The seconds ``timing`` gives ``evaluations``, each priced on its recorded tokens
    (every one of them counted its computed tokens)."""
    total = 0.0
    for e in evaluations:
        calls = float(e.get("calls") or 0)
        if calls <= 0:
            continue
        total += calls * timing.per_call(
            float(e["prompt_tokens"]) / calls,
            float(e["completion_tokens"]) / calls,
            float(e["computed_tokens"]) / calls,
        )
    return total


def at_point(evaluations: Sequence[Mapping[str, Any]], point: int) -> dict[str, Any] | None:
    """Both timings made from the evaluations before ``point``, pricing those from it on
    that counted their computed tokens."""
    before = list(evaluations[:point])
    after = [e for e in evaluations[point:] if "computed_tokens" in e]
    fit = recorded_timing(_Cap(), before, in_flight=IN_FLIGHT)
    stripped = [{k: v for k, v in e.items() if k != "computed_tokens"} for e in before]
    pooled = recorded_timing(_Cap(), stripped, in_flight=IN_FLIGHT)
    actual = sum(float(e.get("seconds") or 0.0) for e in after)
    if fit is None or pooled is None or actual <= 0:
        return None
    row: dict[str, Any] = {
        "resume_at": point,
        "strategies_after": len(after),
        "calls_after": int(sum(int(e.get("calls") or 0) for e in after)),
        "fitted": fit.prompt_seconds is not None,
        # Some evaluation before the point has no count: the case ``recorded_timing`` used
        # to pool (``pooled``); elsewhere it always fitted the counted ones (``fit``).
        "mixed": any("computed_tokens" not in e for e in before),
        "actual_seconds": actual,
    }
    for name, timing in (("fit", fit), ("pooled", pooled)):
        seconds = priced(timing, after)
        row[f"{name}_seconds"] = seconds
        row[f"{name}_error"] = (seconds - actual) / actual
    return row


def measure(runs: Path = RUNS) -> list[dict[str, Any]]:
    """Every resume point of every stored checkpoint under ``runs``."""
    rows = []
    for path in sorted(runs.glob("**/ckpt/evaluations.jsonl")):
        lines = path.read_text(encoding="utf-8").splitlines()
        evaluations = [json.loads(t) for t in lines if t.strip()]
        for point in resume_points(evaluations):
            row = at_point(evaluations, point)
            if row is not None:
                rows.append({"run": path.parent.parent.relative_to(runs).as_posix(), **row})
    return rows


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """The rows as a markdown table: minutes after each resume point and each timing's error."""
    out = [
        [
            r["run"],
            r["resume_at"],
            "yes" if r["mixed"] else "no",
            f"{r['strategies_after']} / {r['calls_after']:,}",
            f"{r['actual_seconds'] / 60:.1f}",
            f"{r['fit_seconds'] / 60:.1f} ({100 * r['fit_error']:+.0f} %)"
            + ("" if r["fitted"] else ", pooled: too few counted"),
            f"{r['pooled_seconds'] / 60:.1f} ({100 * r['pooled_error']:+.0f} %)",
        ]
        for r in rows
    ]
    header = ["run", "resumed at", "mixed", "strategies / calls after", "actual min", "fit"]
    return markdown_table([*header, "pooled"], out)


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean absolute error of each timing over the mixed points (where the two ways of
    ``recorded_timing`` differ), and how many points there were."""
    mixed = [r for r in rows if r["mixed"]]
    out: dict[str, Any] = {"mixed_points": len(mixed), "points": len(rows)}
    for name in ("fit", "pooled"):
        errors = [abs(r[f"{name}_error"]) for r in mixed]
        out[f"{name}_mean_abs_error"] = sum(errors) / len(errors) if errors else None
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", default=str(RUNS), help="the folder searched for checkpoints")
    p.add_argument("--out", default=str(DEFAULT_OUT))
    args = p.parse_args(argv)
    rows = measure(Path(args.runs))
    if not rows:
        print(f"no resume point in a checkpoint under {args.runs}")
        return 1
    print(table(rows))
    summed = summary(rows)
    if summed["mixed_points"]:
        print(
            f"mixed points: {summed['mixed_points']}; mean absolute error: fit "
            f"{100 * summed['fit_mean_abs_error']:.0f} %, pooled "
            f"{100 * summed['pooled_mean_abs_error']:.0f} %"
        )
    result = {"in_flight": IN_FLIGHT, "summary": summed, "points": rows}
    write_json(Path(args.out), result | {"provenance": provenance()})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
