"""Spending limits (``lm.limit_spending``, ``--max-calls``, ``--max-cost``): the request that
would cross a limit is not sent, and the run stops as on Ctrl-C with what it judged kept."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from _selection_scripts import ASPECT, respond_with, topical_records, write_preset
from judgeopt.data import Record
from judgeopt.evaluate import evaluate
from judgeopt.judge import JudgeProgram, baseline_strategy, load_task
from judgeopt.lm import SpendLimit, SpendLimitReached, UnpricedModelError, price_of
from judgeopt.testing import ScriptedLM

MESSAGES = [{"role": "user", "content": "Rate: [[rating]]"}]


def test_the_call_that_would_cross_max_calls_is_not_sent() -> None:
    fake = ScriptedLM(lambda m: "[[3]]")
    limit = fake.lm.limit_spending(max_calls=2)
    assert isinstance(limit, SpendLimit)
    copy = fake.lm.copy()  # copies share the limit, as they share the counters
    fake.lm.forward(messages=MESSAGES, max_tokens=4)
    copy.forward(messages=[{"role": "user", "content": "again"}], max_tokens=4)
    with pytest.raises(SpendLimitReached, match="limit of 2 calls is reached") as err:
        fake.lm.forward(messages=[{"role": "user", "content": "third"}], max_tokens=4)
    assert isinstance(err.value, KeyboardInterrupt) and err.value.limit == "max_calls"
    assert len(fake.requests) == 2 and limit.calls == 2
    # Answers from the cache are free.
    cached = ScriptedLM(lambda m: "[[3]]", cache=True)
    cached.lm.limit_spending(max_calls=1)
    for _ in range(3):
        cached.lm.forward(messages=MESSAGES, max_tokens=4)
    assert len(cached.requests) == 1
    # No limit again.
    assert fake.lm.limit_spending() is None
    fake.lm.forward(messages=[{"role": "user", "content": "third"}], max_tokens=4)


def test_a_dollar_limit_bounds_the_next_call_from_above() -> None:
    model = "openai/gpt-4o-mini"
    assert price_of(model, 1000, 0) is not None and price_of("openai/scripted", 1, 1) is None
    fake = ScriptedLM(lambda m: "[[3]]", model=model)
    one = price_of(model, 300, 100) or 0.0
    limit = fake.lm.limit_spending(max_cost=3.5 * one)
    long = [{"role": "user", "content": "word " * 280}]
    sent = 0
    with pytest.raises(SpendLimitReached, match="would be crossed by the next call") as err:
        for _ in range(10):
            fake.lm.forward(messages=long, max_tokens=100, cache=False)
            sent += 1
    assert err.value.limit == "max_cost"
    # The bound before a call counts its max_tokens; the cost after it the tokens it used.
    assert 1 <= sent <= 10 and limit.cost <= limit.max_cost
    assert limit.cost == pytest.approx(sent * (price_of(model, limit_prompt(fake), 1) or 0.0))
    with pytest.raises(UnpricedModelError, match="LiteLLM's price list has none"):
        ScriptedLM(lambda m: "x").lm.limit_spending(max_cost=1.0)
    with pytest.raises(ValueError, match="max_calls"):
        SpendLimit(max_calls=-1)


def limit_prompt(fake: ScriptedLM) -> int:
    """Prompt tokens the scripted backend reports for its last request (words)."""
    return sum(len(str(m["content"]).split()) for m in fake.requests[-1]["messages"])


def test_evaluate_stops_as_on_ctrl_c_and_keeps_the_finished_items() -> None:
    task = load_task("sfres")
    fake = ScriptedLM(lambda m: "Rating: [[4]]")
    judge = JudgeProgram(task, "naturalness", baseline_strategy(task), lm=fake.lm)
    records = [
        Record(
            id=f"r{i}",
            group_id=None,
            system_id=None,
            inputs={"source": f"inform(name=x{i})", "output": f"x{i} is here"},
            scores={"naturalness": float(1 + i % 5)},
        )
        for i in range(10)
    ]
    fake.lm.limit_spending(max_calls=6)
    kept: list[Any] = []
    with pytest.raises(SpendLimitReached):
        evaluate(judge, records, progress=False, threads=2, on_item=kept.append)
    assert len(fake.requests) == 6 and 4 <= len(kept) <= 6


def test_cli_compile_stops_at_max_calls_and_the_same_command_goes_on(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import judgeopt.lm
    from judgeopt.cli import main

    records = topical_records(shared_data)
    fakes: list[ScriptedLM] = []

    def fake_make_lm(model: str, **kw: Any) -> Any:
        fakes.append(ScriptedLM(respond_with(records, "scale10"), cache=tmp_path / "cache"))
        return fakes[-1].lm

    monkeypatch.setattr(judgeopt.lm, "make_lm", fake_make_lm)
    preset = write_preset(tmp_path, budget=4)
    args = [
        "compile", "--task", "topical_chat", "--aspect", ASPECT,
        "--data", str(shared_data / "topical_chat" / "valid.jsonl"), "--limit", "48",
        "--optimizer", str(preset), "--model", "scripted", "--out", str(tmp_path / "j.json"),
        "--no-progress",
    ]  # fmt: skip
    assert main([*args, "--max-calls", "70"]) == 130
    err = capsys.readouterr().err
    assert "stopped (the limit of 70 calls is reached (70 made))" in err
    assert "run the same command to resume, with a higher --max-calls" in err
    assert not (tmp_path / "j.json").exists()
    assert len(fakes[-1].requests) == 70
    # The same command with a higher limit finishes; nothing judged before is asked again.
    assert main([*args, "--max-calls", "1000"]) == 0
    capsys.readouterr()
    again = fakes[-1].judge_requests
    seen = {json.dumps(r["messages"]) for r in fakes[0].judge_requests}
    assert not any(json.dumps(r["messages"]) in seen for r in again)
    exported = json.loads((tmp_path / "j.json").read_text())
    assert exported["search"]["evaluations"] == 4
    # Bad values are refused before anything runs.
    with pytest.raises(SystemExit):
        main([*args, "--max-calls", "-1"])
    assert "expected an integer >= 0" in capsys.readouterr().err
    assert main([*args, "--restart", "--max-cost", "1"]) == 2
    assert "LiteLLM's price list has none" in capsys.readouterr().err
