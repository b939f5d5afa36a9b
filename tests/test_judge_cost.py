"""A compiled judge's cost per judged item: calls from its strategies, a call's seconds and
tokens from the search's own evaluation summaries (hand-made summaries; a scripted compile)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from _selection_scripts import ASPECT, compile_with, respond_with, topical_records, topical_task
from judgeopt.judge import JudgeProgram, load_judge
from judgeopt.teleprompt import JudgeCost, judge_cost


@pytest.fixture(scope="module")
def task() -> Any:
    return topical_task()


@pytest.fixture(scope="module")
def base(task) -> JudgeProgram:
    return JudgeProgram(task, ASPECT)


def _summary(strategy: dict[str, Any], calls: int, seconds: float, n: int = 100) -> dict:
    """A journal line of a strategy judged on ``n`` items with ``calls`` calls."""
    return {
        "number": 0,
        "strategy": strategy,
        "n": n,
        "calls": calls,
        "cache_hits": 0,
        "prompt_tokens": 500 * calls,
        "completion_tokens": 10 * calls,
        "seconds": seconds,
    }


def test_a_single_judge_costs_one_call_at_the_measured_mean(base) -> None:
    s = base.strategy.as_dict()
    cost = judge_cost(base, [s], [_summary(s, 100, 250.0)])
    assert cost == JudgeCost(1.0, 500.0, 10.0, 2.5, 1)
    assert cost.phrase() == "1 call, about 500 prompt and 10 completion tokens, about 2.5 s"
    assert JudgeCost.from_dict(cost.to_dict()) == cost


def test_a_per_item_artifact_and_self_consistency_add_calls(base) -> None:
    plain = base.strategy.as_dict()
    metrics = {**plain, "metrics": "on"}  # a metrics-questions call for every item
    sc5 = {**plain, "cot": "none", "decoding": "sc5"}  # five answers per item
    criteria = {**plain, "criteria": "self"}  # written once per judge: no call per item
    summaries = [
        _summary(metrics, 200, 300.0),
        _summary(sc5, 500, 100.0),
        _summary(criteria, 101, 202.0),
    ]
    assert judge_cost(base, [metrics], summaries).calls == 2
    assert judge_cost(base, [metrics], summaries).seconds == pytest.approx(3.0)
    assert judge_cost(base, [sc5], summaries).calls == 5
    assert judge_cost(base, [sc5], summaries).seconds == pytest.approx(1.0)
    assert judge_cost(base, [criteria], summaries).calls == 1
    assert judge_cost(base, [criteria], summaries).seconds == pytest.approx(2.0)


def test_an_ensemble_adds_its_members_and_a_resumed_strategy_adds_its_sessions(base) -> None:
    a = base.strategy.as_dict()
    b = {**a, "cot": "suffix", "decoding": "expected"}
    summaries = [
        _summary(a, 40, 160.0),  # an earlier session judged 40 items,
        _summary(a, 60, 240.0),  # the resumed one the other 60: 4 s a call either way
        _summary(b, 100, 100.0),
    ]
    cost = judge_cost(base, [a, b], summaries)
    assert (cost.calls, cost.members) == (2.0, 2)
    assert cost.seconds == pytest.approx(5.0)
    assert cost.prompt_tokens == pytest.approx(1000.0)


def test_a_strategy_answered_only_from_the_cache_has_no_measured_time(base) -> None:
    a = base.strategy.as_dict()
    b = {**a, "cot": "suffix"}
    cost = judge_cost(base, [a, b], [_summary(a, 100, 100.0), _summary(b, 0, 0.0)])
    assert cost.calls == 2 and cost.seconds is None and cost.prompt_tokens is None
    assert cost.phrase().endswith("time not measured")
    # A strategy the search never judged is not measured either.
    assert judge_cost(base, [b], [_summary(a, 100, 100.0)]).seconds is None


def test_the_compile_records_each_judges_cost_and_the_judge_keeps_it(
    task, shared_data: Path, tmp_path: Path
) -> None:
    records = topical_records(shared_data)
    judge, _ = compile_with(task, records, respond_with(records, "scale10"), ensemble=2)
    cost = judge.selection["cost_per_item"]
    assert set(cost) == {"baseline", "chosen", "ensemble"}
    assert cost["baseline"]["calls"] == 1 and cost["chosen"]["calls"] == 1
    assert cost["ensemble"]["calls"] == 2 and cost["ensemble"]["members"] == 2
    for name in cost:
        assert cost[name]["seconds"] is not None and cost[name]["seconds"] >= 0
    # The chosen judge's figures are its own search summary's, per call.
    chosen = next(
        s
        for s in judge.search_result.evaluation_summaries
        if s["strategy"] == judge.strategy.as_dict() and s["calls"]
    )
    assert cost["chosen"]["prompt_tokens"] == pytest.approx(
        chosen["prompt_tokens"] / chosen["calls"], abs=0.05
    )
    path = tmp_path / "judge.json"
    judge.save(path)
    assert load_judge(path).selection["cost_per_item"] == cost
    # (The CLI's summary prints it: tests/test_selection_cli.py.)
