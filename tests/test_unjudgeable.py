"""Strategies whose prompts do not fit the model's context: the compile records them and
does not spend its budget on them (``Search.tell(..., counted=False)``).

A scripted LM refuses every scale-10 prompt as too long for its context (as the embedded
1.5B's 4,096 tokens refuse ten in-context stories of HANNA): control flow, not a judge.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import litellm
import pytest

from _selection_scripts import ASPECT, SPACE, respond_with, topical_records, topical_task
from judgeopt.judge import JudgeProgram, render_messages
from judgeopt.teleprompt import HPSS
from judgeopt.testing import ScriptedLM


def _too_long_at_scale_10(records: list[Any]) -> Any:
    rate = respond_with(records, "baseline")

    def respond(messages: list[dict[str, Any]]) -> Any:
        if "scale of 1 to 10" in str(messages[-1]["content"]):
            return litellm.ContextWindowExceededError(
                "prompt too long", model="x", llm_provider="openai"
            )
        return rate(messages)

    return respond


def _compile(records: list[Any], lm: ScriptedLM, budget: int, **kw: Any) -> JudgeProgram:
    opt = HPSS(
        budget=budget,
        space=SPACE,
        progress=False,
        params={"k": 2},
        selection="best",
        **kw,
    )
    return opt.compile(JudgeProgram(topical_task(), ASPECT, lm=lm.lm), trainset=records)


def test_unjudgeable_strategies_do_not_spend_the_budget(
    shared_data: Path, caplog: pytest.LogCaptureFixture
) -> None:
    records = topical_records(shared_data)[:24]
    with caplog.at_level(logging.INFO, logger="judgeopt.progress"):
        best = _compile(records, ScriptedLM(_too_long_at_scale_10(records)), budget=4)
    trace = best.search_result.trace
    uncounted = [t for t in trace if t.get("counted") is False]
    counted = [t for t in trace if t.get("counted", True)]
    assert uncounted, "the search proposed scale-10 strategies"
    assert all(t["strategy"]["scale"] == 10 and t["score"] is None for t in uncounted)
    # Four strategies judged, none of them refused: the budget bought four real judges.
    assert len(counted) == 4 and all(t["strategy"]["scale"] == 3 for t in counted)
    assert all(t["score"] is not None for t in counted)
    assert best.strategy["scale"] == 3
    result = best.search_result
    assert result.evaluations == len(trace) and result.uncounted == len(uncounted)
    assert result.to_dict()["uncounted"] == len(uncounted)
    assert any("longer than the model's context" in r.getMessage() for r in caplog.records)


def test_a_space_of_unjudgeable_strategies_still_ends(shared_data: Path) -> None:
    # Every prompt but the baseline's is refused: `budget` strategies go uncounted, then the
    # refused ones count as failures, so the search ends.
    records = topical_records(shared_data)[:12]
    rate = respond_with(records, "baseline")
    task = topical_task()
    base = JudgeProgram(task, ASPECT)
    prompts = {
        render_messages(task, ASPECT, base.strategy, r.inputs)[-1]["content"] for r in records
    }

    def respond(messages: list[dict[str, Any]]) -> Any:
        if str(messages[-1]["content"]) in prompts:
            return rate(messages)
        return litellm.ContextWindowExceededError("too long", model="x", llm_provider="openai")

    best = _compile(records, ScriptedLM(respond), budget=3)
    flags = [t.get("counted", True) for t in best.search_result.trace]
    assert flags == [True, False, False, False, True, True]
    assert best.search_result.uncounted == 3
    assert best.strategy == base.strategy  # nothing else could be judged


def test_a_checkpoint_resumes_with_its_uncounted_strategies(
    shared_data: Path, tmp_path: Path
) -> None:
    records = topical_records(shared_data)[:24]
    first = _compile(
        records, ScriptedLM(_too_long_at_scale_10(records)), 4, checkpoint_dir=tmp_path / "c"
    )
    lm = ScriptedLM(_too_long_at_scale_10(records))
    again = _compile(records, lm, 4, checkpoint_dir=tmp_path / "c")
    assert again.search_result.trace == first.search_result.trace
    assert not lm.judge_requests  # every strategy came from the checkpoint
    assert math.isfinite(again.search_result.best_score)
