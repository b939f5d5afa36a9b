"""`judgeopt evaluate --items`: one line per judged item, to see why a judge fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from judgeopt.cli import main
from judgeopt.judge import JudgeProgram, baseline_strategy, load_task
from judgeopt.testing import ScriptedLM


def test_evaluate_items_writes_prediction_raw_status_human(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import judgeopt.lm

    answers = iter(["Rating: [[3]]", "no rating here", "[[1]]", "[[2]]"] * 4)

    def respond(messages: list[dict[str, Any]]) -> Any:
        text = next(answers)
        return RuntimeError("boom") if text == "[[2]]" else text

    monkeypatch.setattr(judgeopt.lm, "make_lm", lambda model, **kw: ScriptedLM(respond).lm)
    task = load_task("topical_chat")
    path = tmp_path / "judge.json"
    JudgeProgram(task, "naturalness", baseline_strategy(task).replace(cot="none")).save(path)
    data = str(shared_data / "topical_chat" / "valid.jsonl")
    items = tmp_path / "out" / "items.jsonl"
    assert (
        main(
            [
                "evaluate",
                str(path),
                "--data",
                data,
                "--limit",
                "4",
                "--items",
                str(items),
                "--no-progress",
                "--model",
                "openai/x",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in items.read_text().splitlines()]
    assert [r["status"] for r in rows] == ["ok", "unparsed", "ok", "failed"]
    first, second, _, fourth = rows
    assert first["prediction"] == 3.0 and first["raw"] == "Rating: [[3]]"
    assert isinstance(first["human"], float) and first["judge"] == "judge.json"
    assert (
        second["prediction"] is None and second["parse_error"] and second["raw"] == "no rating here"
    )
    assert fourth["error"] and "boom" in fourth["error"]
    assert set(first["inputs"]) == set(task.input_names)
    # With --baseline both judges' items are written, labelled.
    answers = iter(["[[2]]", "[[3]]"] * 8)
    monkeypatch.setattr(
        judgeopt.lm, "make_lm", lambda model, **kw: ScriptedLM(lambda m: next(answers)).lm
    )
    assert (
        main(
            [
                "evaluate",
                str(path),
                "--data",
                data,
                "--limit",
                "4",
                "--items",
                str(items),
                "--no-progress",
                "--model",
                "openai/x",
                "--baseline",
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in items.read_text().splitlines()]
    assert [r["judge"] for r in rows] == ["judge.json"] * 4 + ["baseline"] * 4


def test_a_command_stopped_by_sigterm_exits_130_with_one_line(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """SIGTERM during `judgeopt evaluate` (no checkpoint): exit 130, one line on stderr,
    no traceback, and the previous SIGTERM handler back."""
    import os
    import signal

    import judgeopt.lm

    def respond(messages: list[dict[str, Any]]) -> str:
        os.kill(os.getpid(), signal.SIGTERM)
        return "[[2]]"

    monkeypatch.setattr(judgeopt.lm, "make_lm", lambda model, **kw: ScriptedLM(respond).lm)
    task = load_task("topical_chat")
    path = tmp_path / "judge.json"
    JudgeProgram(task, "naturalness", baseline_strategy(task).replace(cot="none")).save(path)
    data = str(shared_data / "topical_chat" / "valid.jsonl")
    assert (
        main(
            [
                "evaluate",
                str(path),
                "--data",
                data,
                "--limit",
                "4",
                "--no-progress",
                "--model",
                "openai/x",
                "--threads",
                "1",
            ]
        )
        == 130
    )
    assert capsys.readouterr().err.strip() == "judgeopt evaluate: stopped (SIGTERM)"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    def ctrl_c(messages: list[dict[str, Any]]) -> str:
        raise KeyboardInterrupt  # what Python's SIGINT handler raises

    monkeypatch.setattr(judgeopt.lm, "make_lm", lambda model, **kw: ScriptedLM(ctrl_c).lm)
    assert (
        main(
            [
                "evaluate",
                str(path),
                "--data",
                data,
                "--limit",
                "4",
                "--no-progress",
                "--model",
                "openai/x",
                "--threads",
                "1",
            ]
        )
        == 130
    )
    assert capsys.readouterr().err.strip() == "judgeopt evaluate: stopped (Ctrl-C)"
