"""``benchmarks/resume_timing.py``: a resumed compile's timing against what followed, on
checkpoints made by hand so that every number is known."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _scripts import load_script

from judgeopt.evaluate import REUSED_TOKEN_COST

rt = load_script("resume_timing")

READ, WRITE = 0.01, 0.05  # seconds per computed prompt token, per written token


def _evaluation(calls: int, prompt: int, computed: int | None, written: int) -> dict[str, Any]:
    """An evaluation summary whose seconds follow the two rates on its computed tokens (a
    reused one at REUSED_TOKEN_COST of a computed one)."""
    done = prompt if computed is None else computed
    read = done + REUSED_TOKEN_COST * (prompt - done)
    e: dict[str, Any] = {
        "calls": calls,
        "prompt_tokens": prompt * calls,
        "completion_tokens": written * calls,
        "seconds": calls * (READ * read + WRITE * written),
    }
    if computed is not None:
        e["computed_tokens"] = computed * calls
    return e


def _run() -> list[dict[str, Any]]:
    """Six strategies; the fourth judged first after a resume (no count, all its prompt read
    as computed); the sixth has a long prompt of which little is computed."""
    return [
        _evaluation(100, 200, 60, 5),
        _evaluation(100, 200, 120, 5),
        _evaluation(100, 300, 60, 60),
        _evaluation(100, 200, None, 5),
        _evaluation(100, 200, 70, 5),
        _evaluation(100, 900, 90, 5),
    ]


def test_resume_points_are_uncounted_evaluations_after_counted_ones() -> None:
    run = _run()
    assert rt.resume_points(run) == [3]
    uncounted_start = [{k: v for k, v in e.items() if k != "computed_tokens"} for e in run[:1]]
    assert rt.resume_points(uncounted_start + run[1:]) == [3]  # the first is the run's start
    assert rt.resume_points([{"calls": 1}, {"calls": 1}]) == []  # an LM that never counts


def test_the_fit_times_what_followed_and_pooling_does_not() -> None:
    """At a resume with an uncounted evaluation before it, the fitted rates price the later
    strategies as they ran; pooled on every prompt token, the long shared prompt is priced
    as if it were all computed."""
    run = _run()
    row = rt.at_point(run, 5)  # after the resume: the fifth evaluation is before the point
    assert row is not None and row["mixed"] and row["fitted"]
    assert row["fit_error"] == pytest.approx(0.0, abs=1e-9)
    assert row["pooled_error"] > 0.5
    assert row["strategies_after"] == 1 and row["calls_after"] == 100


def test_measure_reads_checkpoints_and_writes_a_summary(tmp_path: Path) -> None:
    ckpt = tmp_path / "e2e_x" / "pair" / "ckpt"
    ckpt.mkdir(parents=True)
    run = _run()
    run.insert(5, {k: v for k, v in _evaluation(100, 200, 70, 5).items() if k != "computed_tokens"})
    (ckpt / "evaluations.jsonl").write_text("".join(json.dumps(e) + "\n" for e in run))
    rows = rt.measure(tmp_path)
    assert [(r["run"], r["resume_at"], r["mixed"]) for r in rows] == [
        ("e2e_x/pair", 3, False),
        ("e2e_x/pair", 5, True),
    ]
    out = tmp_path / "out.json"
    assert rt.main(["--runs", str(tmp_path), "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["summary"]["mixed_points"] == 1
    assert written["summary"]["fit_mean_abs_error"] == pytest.approx(0.0, abs=1e-9)
    assert rt.main(["--runs", str(tmp_path / "none"), "--out", str(out)]) == 1
