"""The plan without the run: ``JudgeSearch.plan`` and the commands' ``--plan-only``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from _selection_scripts import ASPECT, respond_with, topical_records, write_preset
from judgeopt.cli import main
from judgeopt.evaluate import TIMED_ROUNDS, CostPlan, Timing
from judgeopt.judge import JudgeProgram, baseline_strategy, load_task
from judgeopt.teleprompt import HPSS
from judgeopt.testing import ScriptedLM


def test_the_api_plan_is_the_compiles_own_and_a_given_timing_makes_no_call(
    shared_data: Path, tmp_path: Path
) -> None:
    """``plan`` with a timing measured before sends nothing; its calls are those the
    compile with the same settings plans for itself (the same search, the same paths)."""
    records = topical_records(shared_data)[:24]
    task = load_task("topical_chat")
    fake = ScriptedLM(respond_with(records, "scale10"), cache=tmp_path / "cache")
    student = JudgeProgram(task, ASPECT, lm=fake.lm)
    optimizer = HPSS(budget=6, progress=False, threads=2, check_endpoint=False)
    timing = Timing(seconds=2.0, prompt_tokens=400, completion_tokens=60, in_flight=2)
    plan = optimizer.plan(student, trainset=records, timing=timing)
    # No judge call: only the one-digit probe of whether the LM gives logprobs (the space
    # holds the expected decoding).
    assert len(fake.requests) == 1
    assert fake.requests[0]["messages"][0]["content"].startswith("Reply with one digit")
    assert isinstance(plan, CostPlan) and plan.what.startswith("6 strategies on 24 search items")
    assert plan.calls >= 6 * 24 and plan.seconds is not None and plan.seconds > 0
    assert plan.line().startswith("plan (6 strategies on 24 search items): about ")
    judge = optimizer.compile(student, trainset=records)
    assert judge.search_result.plan is not None
    assert judge.search_result.plan["calls"] == plan.calls


def test_the_api_plan_times_the_baseline_once_and_the_compile_reads_it_back(
    shared_data: Path, tmp_path: Path
) -> None:
    records = topical_records(shared_data)[:24]
    task = load_task("topical_chat")
    fake = ScriptedLM(respond_with(records, "scale10"), cache=tmp_path / "cache")
    student = JudgeProgram(task, ASPECT, lm=fake.lm)
    optimizer = HPSS(budget=4, progress=False, threads=2)
    plan = optimizer.plan(student, trainset=records)
    assert plan.seconds is not None and plan.timing is not None
    timed = list(fake.judge_requests)
    # The baseline judged on TIMED_ROUNDS rounds of the two calls in flight, and the
    # logprobs probe.
    baseline = {json.dumps(r["messages"]) for r in timed if r.get("max_tokens") != 1}
    assert len(timed) == 2 * TIMED_ROUNDS + 1 and len(baseline) == 2 * TIMED_ROUNDS
    optimizer.compile(student, trainset=records)
    later = [json.dumps(r["messages"]) for r in fake.judge_requests[len(timed) :]]
    assert not baseline & set(later)


def test_cli_compile_plan_only_writes_nothing_then_the_compile_goes_on(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import judgeopt.lm

    records = topical_records(shared_data)
    fakes: list[ScriptedLM] = []

    def fake_make_lm(model: str, **kw: Any) -> Any:
        fakes.append(ScriptedLM(respond_with(records, "scale10"), cache=tmp_path / "cache"))
        return fakes[-1].lm

    monkeypatch.setattr(judgeopt.lm, "make_lm", fake_make_lm)
    preset = write_preset(tmp_path, budget=4)
    data = str(shared_data / "topical_chat" / "valid.jsonl")
    args = [
        "compile", "--task", "topical_chat", "--aspect", ASPECT, "--data", data,
        "--limit", "48", "--test-data", data, "--test-limit", "10",
        "--optimizer", str(preset), "--model", "scripted", "--out", str(tmp_path / "j.json"),
        "--no-progress",
    ]  # fmt: skip
    assert main([*args, "--plan-only"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"{ASPECT}: plan (4 strategies on ")
    assert "about 20 calls more" in out[1]
    assert not (tmp_path / "j.json").exists()
    planned = len(fakes[-1].requests)
    assert 1 <= planned <= 12  # the check call, the logprobs probe and the timed baseline
    assert main(args) == 0
    capsys.readouterr()
    exported = json.loads((tmp_path / "j.json").read_text())
    assert exported["search"]["evaluations"] == 4
    # Finished: the checkpoint holds the whole search, and the plan says so.
    assert main([*args, "--plan-only"]) == 0
    assert "about 0 judge calls" in capsys.readouterr().out
    # A checkpoint of other data is refused, named with the option the user typed.
    other = [*args, "--plan-only"]
    other[other.index("48")] = "40"
    assert main(other) == 2
    assert "--data (trainset)" in capsys.readouterr().err


def test_cli_evaluate_plan_only_prints_the_plan_and_judges_nothing_more(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import judgeopt.lm

    fake = ScriptedLM(lambda m: "Rating: [[2]]", cache=tmp_path / "cache")
    monkeypatch.setattr(judgeopt.lm, "make_lm", lambda model, **kw: fake.lm)
    task = load_task("topical_chat")
    path = tmp_path / "judge.json"
    JudgeProgram(task, ASPECT, baseline_strategy(task).replace(cot="none")).save(path)
    data = str(shared_data / "topical_chat" / "valid.jsonl")
    report = tmp_path / "r.json"
    argv = [
        "evaluate", str(path), "--data", data, "--limit", "12", "--no-progress",
        "--model", "openai/x", "--json", str(report), "--plan-only",
    ]  # fmt: skip
    assert main(argv) == 0
    text = capsys.readouterr()
    assert text.out.startswith("judgeopt evaluate: plan (12 items): about 12 judge calls")
    assert "one call at a time" in text.out  # what the run keeps in flight on this LM
    assert not report.exists()
    assert len(fake.judge_requests) <= 3  # the check call and the one timed judgement
    # Timed with the calls the run keeps in flight: --threads 3 judges three at once.
    assert main([*argv, "--threads", "3", "--limit", "12"]) == 0
    assert "3 calls in flight" in capsys.readouterr().out


def test_the_api_plan_on_the_embedded_engine_times_computed_tokens(
    shared_data: Path, tmp_path: Path
) -> None:
    """Real engine (the smallest local model): the dry run judges the baseline on the items
    in flight and one probe, and plans the search's time on the prompt tokens it computes."""
    try:
        from judgeopt.lm import LlamaCppLM

        lm = LlamaCppLM("smollm2-135m", n_threads=2, parallel=4, cache=tmp_path / "cache")
        lm.load()
    except Exception as e:  # noqa: BLE001 - the model packages are an optional install
        pytest.skip(f"smollm2-135m is not available: {e}")
    records = topical_records(shared_data)[:16]
    student = JudgeProgram(load_task("topical_chat"), ASPECT, lm=lm)
    optimizer = HPSS(budget=4, progress=False, check_endpoint=False, threads=2)
    plan = optimizer.plan(student, trainset=records)
    assert plan.what.startswith("4 strategies on 16 search items")
    assert plan.timing is not None and plan.timing.in_flight == 2
    assert plan.timing.computed_tokens is not None and plan.timing.prompt_seconds is not None
    assert plan.seconds is not None and plan.seconds > 0 and plan.dollars == 0.0
    assert plan.calls >= 4 * 16
    # the timed baseline, the rate probe, a logprobs probe
    assert lm.stats().calls <= 2 * TIMED_ROUNDS + 1 + 1


def test_cli_evaluate_plan_counts_a_judge_that_sends_the_baselines_prompts_once(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """``evaluate --baseline`` on a judge that is the baseline (a compile that kept it) sends
    each prompt once: the second judge's answers come from the cache, and the plan says so;
    a judge with other prompts is counted in full."""
    import judgeopt.lm

    fake = ScriptedLM(lambda m: "Rating: [[2]]", cache=tmp_path / "cache")
    monkeypatch.setattr(judgeopt.lm, "make_lm", lambda model, **kw: fake.lm)
    task = load_task("topical_chat")
    data = str(shared_data / "topical_chat" / "valid.jsonl")
    kept, other = tmp_path / "kept.json", tmp_path / "other.json"
    JudgeProgram(task, ASPECT, baseline_strategy(task)).save(kept)
    JudgeProgram(task, ASPECT, baseline_strategy(task).replace(cot="none")).save(other)
    common = ["--data", data, "--limit", "12", "--no-progress", "--model", "openai/x"]
    assert main(["evaluate", str(kept), *common, "--baseline", "--plan-only"]) == 0
    out = capsys.readouterr().out
    assert "plan (2 judges on 12 items, one sending the other's prompts" in out
    assert "about 12 judge calls" in out
    assert main(["evaluate", str(other), *common, "--baseline", "--plan-only"]) == 0
    out = capsys.readouterr().out
    assert "about 24 judge calls" in out and "other's prompts" not in out
