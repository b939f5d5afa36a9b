"""The judge as a DSPy citizen: metric adapter, instance load, aforward, predictors, save.

Control flow with a scripted LM; the same conventions with a real small model are in
test_dspy_real.py.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import dspy
import pytest

from judgeopt.judge import (
    JudgeMetric,
    JudgePredict,
    JudgeProgram,
    UnparsedJudgement,
    baseline_strategy,
    load_task,
)
from judgeopt.testing import ScriptedLM


def answer_rating(rating: str) -> Any:
    def respond(messages: list[dict[str, Any]]) -> str:
        return rating

    return respond


@pytest.fixture(scope="module")
def task():
    return load_task("summeval")


def judge_with(task, reply: str, **kw) -> JudgeProgram:
    lm = ScriptedLM(answer_rating(reply)).lm
    return JudgeProgram(task, "coherence", lm=lm, **kw)


# 1. as_metric ---------------------------------------------------------------------------------
def test_metric_maps_rating_onto_unit_interval(task) -> None:
    ex = dspy.Example(source="An article.").with_inputs("source")
    pred = dspy.Prediction(summary="A summary.")
    for reply, want in (("Rating: [[1]]", 0.0), ("Rating: [[4]]", 0.75), ("[[5]]", 1.0)):
        metric = judge_with(task, reply).as_metric()
        assert metric(ex, pred) == pytest.approx(want)
    # A scale-10 strategy maps over its own range, not the task's 1-5.
    s10 = baseline_strategy(task).replace(scale=10)
    assert judge_with(task, "[[8]]", strategy=s10).as_metric()(ex, pred) == pytest.approx(7 / 9)


def test_metric_unparsed_gives_documented_value_or_raises(task) -> None:
    ex = {"source": "An article.", "summary": "A summary."}
    judge = judge_with(task, "I cannot rate this.")
    assert judge.as_metric()(ex, dspy.Prediction()) == 0.0
    assert judge.as_metric(on_unparsed=0.5)(ex, dspy.Prediction()) == 0.5
    with pytest.raises(UnparsedJudgement, match="no rating"):
        judge.as_metric(on_unparsed="raise")(ex, dspy.Prediction())


def test_metric_threshold_is_pass_fail_under_a_trace(task) -> None:
    metric = judge_with(task, "[[4]]").as_metric(threshold=0.8)
    ex = {"source": "a", "summary": "b"}
    assert metric(ex, dspy.Prediction()) == pytest.approx(0.75)  # Evaluate: the float
    assert metric(ex, dspy.Prediction(), trace=[]) is False  # optimizer: pass/fail
    assert judge_with(task, "[[5]]").as_metric(threshold=0.8)(ex, None, trace=[]) is True


def test_metric_bad_arguments_name_value_and_allowed(task) -> None:
    judge = judge_with(task, "[[4]]")
    with pytest.raises(ValueError, match=r"threshold.*\[0, 1\].*Got 4"):
        judge.as_metric(threshold=4)
    with pytest.raises(ValueError, match=r"on_unparsed.*'raise'.*Got 'zero'"):
        judge.as_metric(on_unparsed="zero")
    with pytest.raises(ValueError, match=r"\['answer'\].*allowed: \['source', 'summary'\]"):
        judge.as_metric(fields={"answer": "pred.answer"})
    metric = judge.as_metric()
    with pytest.raises(ValueError, match=r"needs the input field 'summary'.*fields="):
        metric(dspy.Example(source="x"), dspy.Prediction(answer="y"))


def test_metric_fields_mapping_and_lookup_order(task) -> None:
    seen: list[str] = []

    def respond(messages: list[dict[str, Any]]) -> str:
        seen.append(str(messages[-1]["content"]))
        return "[[3]]"

    judge = JudgeProgram(task, "coherence", lm=ScriptedLM(respond).lm)
    # The judged field comes from the prediction first, context from the example first.
    judge.as_metric()(dspy.Example(source="SRC", summary="GOLD"), dspy.Prediction(summary="PRED"))
    assert "PRED" in seen[-1] and "GOLD" not in seen[-1]
    metric = judge.as_metric(fields={"summary": "pred.answer", "source": lambda e, p: e["doc"]})
    metric({"doc": "DOC"}, dspy.Prediction(answer="ANS"))
    assert "DOC" in seen[-1] and "ANS" in seen[-1]


def test_metric_pairwise_prefers_side(shared_data: Path) -> None:
    pair = load_task("llmbar")
    ex = {"instruction": "Say hi.", "output_a": "hi", "output_b": "hello"}
    for reply, want in (("[[B]]", 1.0), ("[[A]]", 0.0), ("[[C]]", 0.5)):
        judge = JudgeProgram(pair, "overall", lm=ScriptedLM(answer_rating(reply)).lm)
        assert judge.as_metric()(ex, None) == want
    judge = JudgeProgram(pair, "overall", lm=ScriptedLM(answer_rating("[[A]]")).lm)
    assert judge.as_metric(prefer="a")(ex, None) == 1.0


def test_metric_inside_dspy_evaluate_counts_unparsed_as_zero(task) -> None:
    replies = iter(["[[5]]", "no idea", "[[3]]"])
    judge = JudgeProgram(task, "coherence", lm=ScriptedLM(lambda m: next(replies)).lm)
    devset = [
        dspy.Example(source=f"article {i}", summary=f"summary {i}").with_inputs("source")
        for i in range(3)
    ]

    class Echo(dspy.Module):
        def forward(self, source: str) -> dspy.Prediction:
            return dspy.Prediction(summary=source.replace("article", "summary"))

    result = dspy.Evaluate(
        devset=devset, metric=judge.as_metric(), num_threads=1, display_progress=False
    )(Echo())
    assert result.score == pytest.approx(100 * (1.0 + 0.0 + 0.5) / 3)


# 2. load into an instance -------------------------------------------------------------------
def test_instance_load_changes_the_instance(task, tmp_path: Path) -> None:
    lm = ScriptedLM(answer_rating("[[2]]")).lm
    s10 = baseline_strategy(task).replace(scale=10, cot="none")
    JudgeProgram(task, "fluency", s10).save(tmp_path / "judge.json")
    p = JudgeProgram(task, "coherence", lm=lm)
    returned = p.load(tmp_path / "judge.json")
    assert returned is p
    assert p.aspect == "fluency" and p.strategy == s10
    assert p.lm is lm  # keeps its LM
    assert p(source="a", summary="b").score == 2.0  # and judges with the loaded strategy
    assert p.adapter.program is p
    fresh = JudgeProgram.load(tmp_path / "judge.json")  # the class form still returns a new one
    assert fresh is not p and fresh.strategy == s10 and fresh.lm is None


# 3. aforward ----------------------------------------------------------------------------------
def test_acall_awaits_a_judgement(task) -> None:
    judge = judge_with(task, "Rating: [[4]]")
    pred = asyncio.run(judge.acall(source="a", summary="b"))
    assert pred.score == 4.0


# 4. named_predictors / set_lm -------------------------------------------------------------------
def test_predictors_and_set_lm_reach_the_judge(task) -> None:
    judge = JudgeProgram(task, "coherence")
    names = [n for n, _ in judge.named_predictors()]
    assert names == ["predictor"] and isinstance(judge.predictor, JudgePredict)

    class Outer(dspy.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qa = dspy.Predict("question -> answer")
            self.judge = judge

    outer = Outer()
    lm = ScriptedLM(answer_rating("[[5]]")).lm
    outer.set_lm(lm)
    assert judge.lm is lm and outer.get_lm() is lm
    assert judge(source="a", summary="b").score == 5.0
    # A copy made for another strategy has its own predictor (setting its LM leaves ours).
    other = judge.with_strategy(baseline_strategy(task).replace(cot="none"))
    assert other.lm is lm and other.predictor is not judge.predictor
    other.lm = None
    assert judge.lm is lm
    # DSPy's reset_copy (optimizers) resets the predictor, as for any program.
    assert outer.reset_copy().judge.lm is None
    with pytest.raises(TypeError, match="call the JudgeProgram"):
        judge.predictor(source="a", summary="b")


# 5. save(save_program=True) -------------------------------------------------------------------
def test_save_refuses_pickle_mode(task, tmp_path: Path) -> None:
    judge = JudgeProgram(task, "coherence")
    with pytest.raises(ValueError, match="save_program=True"):
        judge.save(tmp_path / "dir", save_program=True)
    with pytest.raises(ValueError, match=re.escape("must end in `.json`")):
        judge.save(tmp_path / "judge.pkl")
    assert not (tmp_path / "dir").exists() and not (tmp_path / "judge.pkl").exists()
    judge.save(tmp_path / "judge.json")
    assert JudgeProgram.load(tmp_path / "judge.json").aspect == "coherence"


def test_metric_is_a_judge_metric(task) -> None:
    assert isinstance(judge_with(task, "[[4]]").as_metric(), JudgeMetric)
