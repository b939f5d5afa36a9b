"""`judgeopt evaluate --items`: one line per judged item, to see why a judge fails."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from judgeopt.cli import EXIT_UNTRUSTED, main
from judgeopt.judge import JudgeProgram, baseline_strategy, load_task
from judgeopt.testing import ScriptedLM


def judged(respond: Any) -> Any:
    """``respond`` for the judge calls; the check call ``evaluate`` makes first is answered
    without counting as one (the responders below count calls)."""
    from judgeopt.evaluate import ENDPOINT_CHECK

    check = [dict(m) for m in ENDPOINT_CHECK]
    return lambda messages: "OK" if list(messages) == check else respond(messages)


def test_evaluate_items_writes_prediction_raw_status_human(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import judgeopt.lm

    answers = iter(["Rating: [[3]]", "no rating here", "[[1]]", "[[2]]"] * 4)

    def respond(messages: list[dict[str, Any]]) -> Any:
        text = next(answers)
        return RuntimeError("boom") if text == "[[2]]" else text

    monkeypatch.setattr(judgeopt.lm, "make_lm", lambda model, **kw: ScriptedLM(judged(respond)).lm)
    task = load_task("topical_chat")
    path = tmp_path / "judge.json"
    JudgeProgram(task, "naturalness", baseline_strategy(task).replace(cot="none")).save(path)
    data = str(shared_data / "topical_chat" / "valid.jsonl")
    items = tmp_path / "out" / "items.jsonl"
    # 2 of the 4 answers give no rating: more than max_parse_failures=0.25, so the judge is
    # not trustworthy and evaluate exits 1 as compile would (issue 34); the items are written.
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
        == EXIT_UNTRUSTED
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
        judgeopt.lm, "make_lm", lambda model, **kw: ScriptedLM(judged(lambda m: next(answers))).lm
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


def _evaluate(path: Path, data: str, *extra: str) -> int:
    return main(
        ["evaluate", str(path), "--data", data, "--no-progress", "--model", "openai/x", *extra]
    )


def test_evaluate_with_most_answers_unrated_is_not_trustworthy(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The user's mistake in issue 34: `evaluate --items` with 13 of 16 answers unparsed
    exited 0 without a warning, while compile calls the same share "not trustworthy". Now:
    compile's gate (max_parse_failures, 0.25 by default) and exit status, the problem on
    stderr, the summary and the items still written."""
    import judgeopt.lm

    def respond_with(rated: set[int]) -> Any:
        calls = {"n": 0}

        def respond(messages: list[dict[str, Any]]) -> str:
            calls["n"] += 1
            return "Rating: [[2]]" if calls["n"] in rated else "It reads well enough."

        return respond

    task = load_task("topical_chat")
    path = tmp_path / "judge.json"
    JudgeProgram(task, "naturalness", baseline_strategy(task).replace(cot="none")).save(path)
    data = str(shared_data / "topical_chat" / "valid.jsonl")
    items = tmp_path / "items.jsonl"
    summary = tmp_path / "summary.json"
    args = ["--limit", "16", "--threads", "1", "--items", str(items), "--json", str(summary)]
    monkeypatch.setattr(
        judgeopt.lm, "make_lm", lambda model, **kw: ScriptedLM(judged(respond_with({1, 2, 3}))).lm
    )
    assert _evaluate(path, data, *args) == EXIT_UNTRUSTED == 1
    out, err = capsys.readouterr()
    assert json.loads(out)["parse_failures"] == 13
    assert "judgeopt: problem: the judge judge.json gave no rating for 13 of 16 items (81%" in err
    assert "max_parse_failures=0.25" in err and "not trustworthy" in err
    assert "--max-parse-failures" in err and "Traceback" not in err
    assert len(items.read_text().splitlines()) == 16 and summary.is_file()
    # A looser gate accepts it; a judge that rated 13 of 16 passes the default one.
    monkeypatch.setattr(
        judgeopt.lm, "make_lm", lambda model, **kw: ScriptedLM(judged(respond_with({1, 2, 3}))).lm
    )
    assert _evaluate(path, data, *args, "--max-parse-failures", "0.9") == 0
    assert "problem" not in capsys.readouterr().err
    monkeypatch.setattr(
        judgeopt.lm,
        "make_lm",
        lambda model, **kw: ScriptedLM(judged(respond_with(set(range(4, 17))))).lm,
    )
    assert _evaluate(path, data, *args) == 0
    assert "problem" not in capsys.readouterr().err

    # With --baseline the gate is the judge's; the baseline's share is only reported.
    def judge_rates(messages: list[dict[str, Any]]) -> str:
        explains = "Begin your evaluation by providing" in str(messages[-1]["content"])
        return "It reads well enough." if explains else "Rating: [[2]]"  # the baseline explains

    monkeypatch.setattr(
        judgeopt.lm, "make_lm", lambda model, **kw: ScriptedLM(judged(judge_rates)).lm
    )
    assert _evaluate(path, data, "--limit", "16", "--baseline") == 0
    err = capsys.readouterr().err
    assert "problem: the baseline gave no rating for 16 of 16" in err
    assert "not trustworthy" not in err
    with pytest.raises(SystemExit) as exit_:
        _evaluate(path, data, "--max-parse-failures", "1.5")
    assert exit_.value.code == 2
    assert "expected a share between 0 and 1" in capsys.readouterr().err


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

    monkeypatch.setattr(judgeopt.lm, "make_lm", lambda model, **kw: ScriptedLM(judged(respond)).lm)
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
    # The plan printed before judging, then the one line of the stop.
    plan, stop = capsys.readouterr().err.strip().splitlines()
    assert (
        plan.startswith("judgeopt evaluate: plan (")
        and stop == "judgeopt evaluate: stopped (SIGTERM)"
    )
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    def ctrl_c(messages: list[dict[str, Any]]) -> str:
        raise KeyboardInterrupt  # what Python's SIGINT handler raises

    monkeypatch.setattr(judgeopt.lm, "make_lm", lambda model, **kw: ScriptedLM(judged(ctrl_c)).lm)
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
    plan, stop = capsys.readouterr().err.strip().splitlines()
    assert plan.startswith("judgeopt evaluate: plan (")
    assert stop == "judgeopt evaluate: stopped (Ctrl-C)"


def test_evaluate_on_a_csv_without_a_column_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34: a missing CSV column named the field but not the file. Before any call
    (the endpoint refuses connections, the exit status is 2)."""
    task = load_task("topical_chat")
    path = tmp_path / "judge.json"
    JudgeProgram(task, "naturalness").save(path)
    data = tmp_path / "mine.csv"
    data.write_text("context,fact,naturalness\nhi,a fact,2\nyo,another,3\n", encoding="utf-8")
    dead = ["--model", "openai/x", "--api-base", "http://127.0.0.1:9/v1", "--no-progress"]
    assert main(["evaluate", str(path), "--data", str(data), *dead]) == 2
    err = capsys.readouterr().err
    assert f"{data}, line 1: field 'response': missing column" in err
    assert "the file's columns are context, fact, naturalness" in err
    # Every column there but no score for the aspect: named with the file too.
    data.write_text("context,fact,response\nhi,a fact,ok\nyo,another,so\n", encoding="utf-8")
    assert main(["evaluate", str(path), "--data", str(data), *dead]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"judgeopt: error: --data {data}: the 2 records do not fit")
    assert "no record has a score for `naturalness`" in err
