"""The cost plan a run prints before its first judge call (calls, tokens, time, money)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from _selection_scripts import respond_with, topical_records, topical_task
from judgeopt.evaluate import (
    RATING_TOKENS,
    TIMED_ROUNDS,
    CallCost,
    CostPlan,
    Timing,
    call_cost,
    duration,
    plan_cost,
    time_judgement,
)
from judgeopt.judge import JudgeProgram, baseline_strategy
from judgeopt.search import sample_valid
from judgeopt.teleprompt import HPSS
from judgeopt.testing import ScriptedLM


@pytest.fixture(scope="module")
def task() -> Any:
    return topical_task()


@pytest.fixture(scope="module")
def records(shared_data: Path) -> Any:
    return topical_records(shared_data)


def test_prompt_tokens_are_counted_on_the_rendered_prompt(task, records) -> None:
    fake = ScriptedLM(lambda m: "Rating: [[3]]")
    judge = JudgeProgram(task, "naturalness", lm=fake.lm)
    cost = call_cost(judge, records[:3], fake.lm)
    counted = [
        fake.lm.count_prompt_tokens(judge.adapter.format(judge.signature, [], dict(r.inputs)))
        for r in records[:3]
    ]
    # The baseline needs no artifact: its prompts are counted exactly as they are sent.
    assert cost.prompt_tokens == pytest.approx(sum(counted) / 3)
    # The baseline explains first: it may write up to its max_tokens.
    assert cost.calls == 1 and cost.explains and cost.completion_tokens == 256


def test_a_rating_first_judge_writes_a_few_tokens_and_sc5_calls_five_times(task, records) -> None:
    fake = ScriptedLM(lambda m: "Rating: [[3]]")
    judge = JudgeProgram(task, "naturalness", lm=fake.lm)
    first = call_cost(
        judge.with_strategy({**judge.strategy.as_dict(), "cot": "none"}), records[:2], fake.lm
    )
    assert first.calls == 1 and not first.explains and first.completion_tokens == 8
    sc5 = call_cost(
        judge.with_strategy({**judge.strategy.as_dict(), "cot": "none", "decoding": "sc5"}),
        records[:2],
        fake.lm,
    )
    assert sc5.calls == 5 and sc5.prompt_tokens == pytest.approx(5 * first.prompt_tokens)
    # Examples not drawn yet are stood in for by other items; generated criteria by the
    # human ones (about their length).
    shots = call_cost(
        judge.with_strategy({**judge.strategy.as_dict(), "cot": "none", "examples": 3}),
        records[:2],
        fake.lm,
    )
    assert shots.prompt_tokens > first.prompt_tokens + 3 * 20
    generated = call_cost(
        judge.with_strategy({**judge.strategy.as_dict(), "cot": "none", "criteria": "self"}),
        records[:2],
        fake.lm,
    )
    assert generated.prompt_tokens == pytest.approx(first.prompt_tokens, rel=0.02)


#: A batch of 16 explanations read from the engine's clock: 60 written tokens a call in 100
#: steps of 0.25 s (8 s of prompts), so 40 steps waited for the longest answer.
CLOCKED = Timing(
    seconds=(25.0 + 8.0) / 16,
    prompt_tokens=200,
    completion_tokens=60,
    in_flight=16,
    prompt_seconds=8.0 / 1200,
    computed_tokens=75.0,
    engine=(100.0, 25.0, 8.0, 16.0),
)


def test_timing_scales_by_tokens_and_the_plan_adds_up() -> None:
    timing = Timing(seconds=10.0, prompt_tokens=600, completion_tokens=160, cap=256)
    # 600 prompt tokens cost the time of 40 written ones: 10 s for 200 units.
    assert timing.per_call(600, 160) == pytest.approx(10.0)
    assert timing.per_call(600, 8) == pytest.approx(10.0 * 48 / 200)

    class Free:
        runs_in_process = True

    plan = plan_cost(
        [(CallCost(1, 600, 160, True), 10), (CallCost(2, 1200, 16, False), 5)],
        Free(),
        timing=timing,
        what="test",
    )
    assert plan.calls == 20 and plan.prompt_tokens == 12000 and plan.completion_tokens == 1680
    assert plan.seconds == pytest.approx(10 * 10.0 + 5 * 2 * 10.0 * 48 / 200)
    assert plan.dollars == 0.0
    line = plan.line()
    assert line.startswith("plan (test): about 20 judge calls") and "$0.00" in line
    assert "12,000 prompt" in line and "2 min" in line
    assert duration(45) == "45 s" and duration(3 * 3600 + 300) == "3 h 05 min"


def test_a_run_of_explanations_waits_once_for_its_longest_answer() -> None:
    """On the engine's clock, the plan adds the timed batch's wait for its longest answers
    once per run of explaining calls (a third element of a plan's entry counts the runs),
    scaled by the tokens they write, and never for calls that stop at their rating."""
    from judgeopt.evaluate import mean_cost

    # 16 calls, 60 written tokens each, 100 steps (one answer ran 100 tokens): 40 steps of
    # waiting at 0.25 s a step.
    timing = CLOCKED
    assert timing.tail_seconds(60) == pytest.approx(40 * 0.25)

    class Free:
        runs_in_process = True

    explaining = CallCost(1, 200, 60, True, 75.0, tail_tokens=60.0)
    stopped = CallCost(1, 200, 3, False, 75.0)
    call = timing.per_call(200, 60, 75.0)
    assert call == pytest.approx(75 * 8.0 / 1200 + 60 * 0.25 / 16)
    one = plan_cost([(explaining, 100)], Free(), timing=timing).seconds
    assert one == pytest.approx(100 * call + 10.0)
    three = plan_cost([(explaining, 300, 3.0)], Free(), timing=timing).seconds
    assert three == pytest.approx(300 * call + 30.0)
    assert plan_cost([(stopped, 100, 5.0)], Free(), timing=timing).seconds == pytest.approx(
        100 * timing.per_call(200, 3, 75.0)
    )
    # A mean over judges (one of four explains): a quarter of a wait per run.
    mixed = mean_cost([explaining, stopped, stopped, stopped])
    assert mixed.tail_tokens == pytest.approx(15.0)
    assert timing.tail_seconds(mixed.tail_tokens) == pytest.approx(2.5)
    # Without the engine's clock, no wait is added: each call at the batch's rate.
    plain = replace(timing, engine=None)
    assert plan_cost([(explaining, 100, 4.0)], Free(), timing=plain).seconds == pytest.approx(
        100 * plain.per_call(200, 60, 75.0)
    )


def test_a_hosted_model_is_priced_by_litellm_and_an_unknown_one_is_not() -> None:
    priced = ScriptedLM(lambda m: "x", model="openai/gpt-4o-mini").lm
    plan = plan_cost([(CallCost(1, 1_000_000, 0, False), 1)], priced, timing=None)
    assert plan.dollars is not None and plan.dollars > 0 and plan.seconds is None
    unknown = ScriptedLM(lambda m: "x", model="openai/not-a-model-anyone-prices").lm
    assert plan_cost([(CallCost(1, 100, 1, False), 1)], unknown, timing=None).dollars is None


def test_the_timed_judgement_needs_a_cache_and_is_not_paid_twice(task, records, tmp_path) -> None:
    fake = ScriptedLM(lambda m: "Rating: [[3]]")
    judge = JudgeProgram(task, "naturalness", lm=fake.lm)
    assert time_judgement(judge, records, fake.lm) is None and fake.requests == []
    cached = ScriptedLM(lambda m: "Rating: [[3]]", cache=tmp_path / "cache")
    judge = JudgeProgram(task, "naturalness", lm=cached.lm)
    timing = time_judgement(judge, records, cached.lm)
    assert timing is not None and timing.seconds >= 0 and len(judged(cached)) == 1
    # The same item again is read from the cache: the next item is timed instead.
    again = time_judgement(judge, records, cached.lm)
    assert again is not None and len(judged(cached)) == 2
    assert judged(cached)[0]["messages"] != judged(cached)[1]["messages"]


def judged(fake: ScriptedLM) -> list[dict[str, Any]]:
    """The judge calls ``fake`` answered, without the plan's one-token probes."""
    return [r for r in fake.requests if r.get("max_tokens") != 1]


def test_sampled_strategies_are_valid_and_reproducible(task) -> None:
    graph = JudgeProgram(task, "naturalness").search_graph()
    a = sample_valid(graph, 12, np.random.default_rng(3))
    assert len(a) == 12 and all(graph.is_valid(s) for s in a)
    assert a == sample_valid(graph, 12, np.random.default_rng(3))
    assert a != sample_valid(graph, 12, np.random.default_rng(4))


def test_compile_logs_its_plan_first_and_keeps_it_beside_what_it_spent(
    task, records, tmp_path, caplog
) -> None:
    fake = ScriptedLM(respond_with(records, "scale10"), cache=tmp_path / "cache")
    student = JudgeProgram(task, "naturalness", lm=fake.lm)
    with caplog.at_level(logging.INFO, logger="judgeopt.progress"):
        judge = HPSS(budget=6, progress=False, threads=2).compile(student, trainset=records)
    lines = [r.getMessage() for r in caplog.records if r.name == "judgeopt.progress"]
    plan_lines = [line for line in lines if line.startswith("plan (")]
    assert plan_lines and lines.index(plan_lines[0]) == 0
    res = judge.search_result
    plan = CostPlan(**res.plan)
    assert plan.what.startswith("6 strategies on ")
    # At most: the search judged no more than the plan's search calls.
    assert 0 < res.calls <= plan.calls and plan.seconds is not None
    # The timed baseline judgement was read back from the cache by the search: no request
    # reached the backend twice.
    sent = [json.dumps(r, sort_keys=True, default=str) for r in fake.judge_requests]
    # + the timed ones (TIMED_ROUNDS per call in flight) and the probe
    assert len(sent) == res.calls + res.selection_calls + 2 * TIMED_ROUNDS + 1
    assert len(sent) == len(set(sent))
    baseline = baseline_strategy(task).as_dict()
    assert any(s["strategy"] == baseline for s in res.evaluation_summaries)


def test_compile_without_a_plan_makes_no_extra_call(task, records, tmp_path) -> None:
    fake = ScriptedLM(respond_with(records, "scale10"), cache=tmp_path / "cache")
    student = JudgeProgram(task, "naturalness", lm=fake.lm)
    judge = HPSS(budget=4, progress=False, plan_cost=False).compile(student, trainset=records)
    res = judge.search_result
    assert res.plan is None
    # The search's calls, and the one-digit probe of whether the endpoint gives logprobs.
    assert len(fake.judge_requests) == res.calls + res.selection_calls + 1


def test_the_embedded_model_counts_the_prompt_tokens_it_is_sent(
    task, records, tmp_path: Path
) -> None:
    """Real model: the plan's count is the prompt the model reads (its chat template and
    vocabulary), and the timed judgement is one real call the next judgement reads back."""
    from judgeopt.lm import LlamaCppLM

    lm = LlamaCppLM("smollm2-135m", n_threads=2, cache=tmp_path / "cache")
    judge = JudgeProgram(task, "naturalness", lm=lm).with_strategy(
        {**baseline_strategy(task).as_dict(), "cot": "none"}
    )
    timing = time_judgement(judge, records, lm)
    assert timing is not None and timing.seconds > 0
    messages = judge.adapter.format(judge.signature, [], dict(records[0].inputs))
    assert timing.prompt_tokens == lm.count_prompt_tokens(messages)
    cost = call_cost(judge, records[:1], lm, timing=timing)
    assert cost.prompt_tokens == timing.prompt_tokens and not cost.explains
    assert cost.tail_tokens == 0.0  # a judge stopped at its rating waits for no answer
    baseline = JudgeProgram(task, "naturalness", lm=lm)  # explains first
    explaining = call_cost(baseline, records[:1], lm, timing=timing)
    assert explaining.explains and explaining.tail_tokens == explaining.completion_tokens > 0
    calls = lm.stats().calls
    judge.with_explain(False).judge(dict(records[0].inputs), sample_id=records[0].id, lm=lm)
    assert lm.stats().calls == calls  # read from the cache


def test_calls_in_flight_are_timed_together_and_read_back(task, records, tmp_path) -> None:
    """``threads`` > 1: ``threads x TIMED_ROUNDS`` baseline judgements are made as a run
    makes them, that many in flight, and timed together (the seconds shared among them);
    each answer is cached for the run that follows."""
    cached = ScriptedLM(lambda m: "Rating: [[3]]", cache=tmp_path / "cache")
    judge = JudgeProgram(task, "naturalness", lm=cached.lm)
    timing = time_judgement(judge, records, cached.lm, threads=4)
    timed = 4 * TIMED_ROUNDS
    assert timing is not None and timing.in_flight == 4 and len(judged(cached)) == timed
    assert timing.prompt_tokens > 0
    # Judged together: the latency is probed, the prompt's reading is not (a batch shares
    # it in ways one call does not show).
    assert timing.latency > 0 and timing.prompt_seconds is None
    assert len(cached.requests) == timed + 1
    plan = plan_cost([(call_cost(judge, records[:4], cached.lm), 10)], cached.lm, timing=timing)
    assert plan.in_flight == 4 and "4 calls in flight" in plan.line()
    # Every one of them is in the cache now: nothing left to time.
    assert time_judgement(judge, records[:timed], cached.lm, threads=4) is None
    assert len(cached.requests) == timed + 1
    # Fewer items than that: all of them are timed.
    fresh = ScriptedLM(lambda m: "Rating: [[3]]", cache=tmp_path / "fresh")
    assert time_judgement(judge, records[:3], fresh.lm, threads=4) is not None
    assert len(judged(fresh)) == 3


def test_the_plan_draws_the_baselines_neighbours_in_a_restricted_space(task) -> None:
    """A preset's narrow space (most of the full space forbidden) still gives the plan
    strategies to count: the baseline's valid one-factor neighbours."""
    from judgeopt.teleprompt import OptimizerConfig
    from judgeopt.teleprompt._planning import plan_strategies
    from judgeopt.teleprompt._searching import build_graph as graph_of

    student = JudgeProgram(task, "naturalness")
    base = student.strategy
    space = {name: [base[name]] for name in base.as_dict()}
    space["scale"] = sorted({base["scale"], 10})
    space["cot"] = ["none", base["cot"]]
    graph = graph_of(OptimizerConfig(space=space), student, ScriptedLM(lambda m: "[[1]]").lm)
    drawn = plan_strategies(graph, base, 24, np.random.default_rng(0))
    assert len(drawn) == 2 and all(graph.is_valid(s) for s in drawn)
    assert all(sum(s[f] != base[f] for f in base.as_dict()) == 1 for s in drawn)
    assert sample_valid(graph, 24, np.random.default_rng(0)) == []  # the old draw's blind spot


def test_the_plan_counts_the_artifacts_the_search_would_generate(task, records, tmp_path) -> None:
    """Strategies with generated artifacts (metrics questions per item, criteria once) add
    their generation calls to the plan; stored artifacts add none."""
    from judgeopt.teleprompt import OptimizerConfig
    from judgeopt.teleprompt._planning import compile_plan
    from judgeopt.teleprompt._searching import build_graph as graph_of

    fake = ScriptedLM(lambda m: "Rating: [[3]]", cache=tmp_path / "cache")
    student = JudgeProgram(task, "naturalness", lm=fake.lm)
    base = student.strategy
    plain = {name: [base[name]] for name in base.as_dict()}
    plain["scale"] = sorted({base["scale"], 10})
    with_metrics = {**plain, "metrics": ["off", "on"]}
    items = records[:10]
    plans = {}
    for name, space in (("plain", plain), ("metrics", with_metrics)):
        graph = graph_of(OptimizerConfig(space=space), student, fake.lm)
        plans[name] = compile_plan(
            graph, student, base, items, None, strategies_left=2, lm=fake.lm, threads=1
        )
    assert plans["plain"].calls == 2 * len(items)
    # One metrics-questions call per item for the one neighbour with metrics on (of the two
    # drawn; the budget covers both).
    assert plans["metrics"].calls == 2 * len(items) + len(items)


def test_the_plan_counts_the_screen_calibration(task, records, tmp_path) -> None:
    """A compile that can choose the ``screened`` defence calibrates its screen first: one
    short call per search and confirmation item, its prompt the screen's question."""
    from judgeopt.teleprompt import OptimizerConfig
    from judgeopt.teleprompt._planning import compile_plan
    from judgeopt.teleprompt._searching import build_graph as graph_of

    fake = ScriptedLM(lambda m: "Rating: [[3]]", cache=tmp_path / "cache")
    student = JudgeProgram(task, "naturalness", lm=fake.lm)
    base = student.strategy
    space = {name: [base[name]] for name in base.as_dict()}
    space["scale"] = sorted({base["scale"], 10})
    graph = graph_of(OptimizerConfig(space=space), student, fake.lm)
    items, confirm = records[:10], records[10:14]
    plans = {
        on: compile_plan(
            graph,
            student,
            base,
            items,
            confirm,
            strategies_left=2,
            lm=fake.lm,
            threads=1,
            screen_calibration=on,
        )
        for on in (False, True)
    }
    assert plans[True].calls == plans[False].calls + len(items) + len(confirm)
    screened = student.with_strategy({**base.as_dict(), "defence": "screened"})
    screen = [fake.lm.count_prompt_tokens(screened.screen_messages(r.inputs)) for r in items]
    extra = plans[True].prompt_tokens - plans[False].prompt_tokens
    assert extra == pytest.approx(sum(screen) / len(screen) * 14, rel=0.01)


def test_an_artifact_call_writes_about_its_stand_in_not_the_output_limit(task, records) -> None:
    """The plan's artifact calls write about as much as the text standing in for the artifact
    (the criteria; the judged text for a reference), at most the LM's ``max_tokens``."""
    from judgeopt.evaluate import artifact_tokens

    fake = ScriptedLM(lambda m: "[[3]]")
    judge = JudgeProgram(task, "naturalness", lm=fake.lm)
    items = records[:4]
    criteria = fake.lm.count_prompt_tokens(
        [{"role": "user", "content": task.criteria_text("naturalness", 5)}]
    )
    assert artifact_tokens(judge, "metrics_questions", items, fake.lm) == criteria
    assert artifact_tokens(judge, "self_criteria", items, fake.lm) == criteria
    field = task.input_names[-1]
    judged = [
        fake.lm.count_prompt_tokens([{"role": "user", "content": str(r.inputs[field])}])
        for r in items
    ]
    assert artifact_tokens(judge, "self_reference", items, fake.lm) == pytest.approx(
        sum(judged) / len(judged)
    )
    assert 0 < criteria < 1024
    fake.lm.kwargs["max_tokens"] = 3
    assert artifact_tokens(judge, "self_criteria", items, fake.lm) == 3
    with pytest.raises(ValueError, match="at least one record"):
        artifact_tokens(judge, "self_criteria", [], fake.lm)


def test_a_starting_compile_counts_the_baseline_as_itself(task, records, tmp_path) -> None:
    """The baseline explains first while the drawn candidates rate first: a compile that has
    not judged it yet plans its explanations on the search items, not a candidate's rating."""
    from judgeopt.teleprompt import OptimizerConfig
    from judgeopt.teleprompt._planning import compile_plan
    from judgeopt.teleprompt._searching import build_graph as graph_of

    words = " ".join(["word"] * 60)
    fake = ScriptedLM(lambda m: f"Explanation: {words}\n\nRating: [[3]]", cache=tmp_path / "c")
    student = JudgeProgram(task, "naturalness", lm=fake.lm)
    base = student.strategy
    assert base["cot"] == "prefix"
    space = {name: [base[name]] for name in base.as_dict()}
    space["cot"] = ["prefix", "none"]
    graph = graph_of(OptimizerConfig(space=space), student, fake.lm)
    items = records[:6]

    def plan(left: bool, judged_items: int = 0, next_strategy: Any = None) -> Any:
        return compile_plan(
            graph,
            student,
            base,
            items,
            None,
            strategies_left=3,
            lm=fake.lm,
            threads=1,
            baseline_left=left,
            judged_items=judged_items,
            next_strategy=next_strategy,
        )

    plans = {left: plan(left) for left in (False, True)}
    assert plans[False].calls == plans[True].calls == 3 * len(items)
    assert plans[False].completion_tokens == 3 * len(items) * RATING_TOKENS
    explained = plans[True].completion_tokens - 2 * len(items) * RATING_TOKENS
    assert explained > len(items) * 40  # the baseline's own explanation, about 60 words each
    # Items of the next strategy judged before an interruption are not planned again.
    for left in (False, True):
        kept = plan(left, judged_items=4)
        assert kept.calls == plans[left].calls - 4
    # A resumed compile whose next strategy explains first plans that one as itself (here
    # the baseline's twin), the strategies after it as drawn ones; its kept items too.
    known = plan(False, next_strategy=base)
    assert known.calls == plans[True].calls
    assert known.completion_tokens - 2 * len(items) * RATING_TOKENS > len(items) * 40
    assert plan(False, judged_items=4, next_strategy=base).calls == plans[True].calls - 4


def test_a_call_costs_the_endpoints_latency_plus_its_tokens() -> None:
    """With the latency and the prompt's reading measured, a call's time is the latency,
    its prompt at the measured rate and its answer at the rate left over from the timed
    judgement; the timed judgement's own tokens give back its seconds."""
    t = Timing(
        seconds=1.0, prompt_tokens=1000, completion_tokens=50, latency=0.2, prompt_seconds=1e-4
    )
    assert t.per_call(1000, 50) == pytest.approx(1.0)
    # latency 0.2 + 0.1 s of prompt + 0.7 s / 50 written tokens
    assert t.per_call(2000, 5) == pytest.approx(0.2 + 0.2 + 5 * 0.7 / 50)
    assert t.per_call(0, 0) == pytest.approx(0.2)
    # Without the prompt's rate: the latency plus the rest scaled by tokens (a prompt token
    # 1/PREFILL_SPEEDUP of a written one).
    from judgeopt.evaluate import PREFILL_SPEEDUP

    u = Timing(seconds=1.0, prompt_tokens=0, completion_tokens=50, latency=0.2)
    assert u.per_call(0, 5) == pytest.approx(0.2 + 0.8 * 5 / 50)
    assert u.per_call(15 * PREFILL_SPEEDUP, 0) == pytest.approx(0.2 + 0.8 * 15 / 50)
    # Calls in flight share the latency; it is never more than the timed seconds.
    assert Timing(1.0, 0, 50, in_flight=4, latency=0.4).per_call(0, 0) == pytest.approx(0.1)
    assert Timing(0.1, 0, 50, latency=5.0).per_call(0, 50) == pytest.approx(0.1)
    # A prompt rate the timed judgement cannot hold (noise) is cut to what it took.
    v = Timing(seconds=1.0, prompt_tokens=1000, completion_tokens=50, prompt_seconds=1.0)
    assert v.per_call(1000, 50) == pytest.approx(1.0) and v.per_call(0, 50) == pytest.approx(0)


def test_the_plan_probes_a_remote_endpoint_and_not_an_embedded_model(task, records, tmp_path):
    """Timed one at a time, a network endpoint gets two one-token probes: the check call's
    messages (latency) and the timed judge's prompt (reading it); their seconds come out as
    set by the endpoint's answer times."""
    import time

    from judgeopt.evaluate import ENDPOINT_CHECK, one_token_call

    def slow(messages: list[dict[str, Any]]) -> str:
        words = sum(len(str(m["content"]).split()) for m in messages)
        time.sleep(0.02 + 2e-5 * words)
        return "Rating: [[3]]"

    fake = ScriptedLM(slow, cache=tmp_path / "cache")
    judge = JudgeProgram(task, "naturalness", lm=fake.lm)
    timing = time_judgement(judge, records, fake.lm)
    assert timing is not None and 0.02 <= timing.latency < 0.2
    assert timing.prompt_seconds is not None and timing.prompt_seconds >= 0
    probes = [r for r in fake.requests if r.get("max_tokens") == 1]
    assert len(probes) == 2 and probes[0]["messages"] == [dict(m) for m in ENDPOINT_CHECK]
    assert probes[1]["messages"] == judged(fake)[0]["messages"]
    # A rating-first judge is not nearly free: each call pays the latency.
    assert timing.per_call(timing.prompt_tokens, 1) >= timing.latency
    # An LM that is not reached over the network is not probed; a failed probe gives None.
    assert one_token_call(object()) is None
    failing = ScriptedLM(lambda m: RuntimeError("down"))
    assert one_token_call(failing.lm) is None


def test_recorded_timing_pools_the_judgements_already_made() -> None:
    from judgeopt.evaluate import PREFILL_SPEEDUP, recorded_timing

    rated = {"calls": 100, "prompt_tokens": 75_000, "completion_tokens": 500, "seconds": 400.0}
    explained = {"calls": 90, "prompt_tokens": 67_500, "completion_tokens": 11_700, "seconds": 1100}
    nothing = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "seconds": 0.0}

    class Capped:  # a judge whose answers are capped at max_tokens
        def __init__(self, max_tokens: int) -> None:
            self.max_tokens = max_tokens

    timing = recorded_timing(Capped(256), [rated, explained, nothing], in_flight=8)
    assert timing is not None and timing.in_flight == 8 and timing.cap == 256
    # The calls that explained (130 tokens each) give the written length ...
    assert timing.prompt_tokens == 750 and timing.completion_tokens == 130
    # ... and every recorded second is spread over the token units, so the recorded calls
    # are timed back as they ran.
    units = (75_000 + 67_500) / PREFILL_SPEEDUP + 500 + 11_700
    per_unit = 1500.0 / units
    assert timing.per_call(750, 5) == pytest.approx(per_unit * (750 / PREFILL_SPEEDUP + 5))
    assert 100 * timing.per_call(750, 5) + 90 * timing.per_call(750, 130) == pytest.approx(
        1500.0, rel=1e-3
    )
    only_rated = recorded_timing(Capped(64), [rated])
    assert only_rated is not None and only_rated.completion_tokens == 5
    assert recorded_timing(Capped(64), [nothing]) is None
    assert recorded_timing(Capped(64), []) is None


def test_a_resumed_compile_plans_its_time_on_the_judgements_it_made(
    task, records, tmp_path, caplog
) -> None:
    """Resumed, the compile's baseline answers are all in the cache (nothing to time): its
    plan times the calls left on the strategies already judged."""
    state = {"n": 0, "fail_after": 3 * len(records)}
    respond_one = respond_with(records, "scale10")

    def respond(messages: list[dict[str, Any]]) -> str | BaseException:
        state["n"] += 1
        if state["fail_after"] and state["n"] > state["fail_after"]:
            raise KeyboardInterrupt
        return respond_one(messages)

    cache, ckpt = tmp_path / "cache", tmp_path / "ckpt"
    opt = HPSS(budget=6, progress=False, threads=2, checkpoint_dir=ckpt)
    with pytest.raises(KeyboardInterrupt):
        opt.compile(
            JudgeProgram(task, "naturalness", lm=ScriptedLM(respond, cache=cache).lm),
            trainset=records,
        )
    state["fail_after"] = 0
    with caplog.at_level(logging.INFO, logger="judgeopt.progress"):
        judge = opt.compile(
            JudgeProgram(task, "naturalness", lm=ScriptedLM(respond, cache=cache).lm),
            trainset=records,
        )
    plans = [r.getMessage() for r in caplog.records if r.getMessage().startswith("plan (")]
    res = judge.search_result
    assert any(s.get("calls") for s in res.evaluation_summaries)
    assert len(plans) == 1 and "calls in flight" in plans[0]
    assert res.plan is not None and res.plan["seconds"] is not None


def test_plan_items_are_spread_over_the_data() -> None:
    from judgeopt.evaluate import plan_sample

    assert plan_sample(list(range(100)), 8) == [0, 14, 28, 42, 57, 71, 85, 99]
    assert plan_sample(list(range(5)), 8) == [0, 1, 2, 3, 4]
    assert plan_sample(list(range(5)), 1) == [0] and plan_sample([], 3) == []
    assert plan_sample(list(range(9)), 0) == []


def test_a_compile_plan_counts_the_items_length_not_the_first_groups(
    task, records, tmp_path
) -> None:
    """A grouped dataset keeps a group's items together: the first group's texts are not the
    data's length (SummEval's first article)."""
    from judgeopt.data import Record
    from judgeopt.teleprompt import OptimizerConfig
    from judgeopt.teleprompt._planning import compile_plan
    from judgeopt.teleprompt._searching import build_graph as graph_of

    def item(i: int, words: int) -> Record:
        r = records[i % len(records)]
        inputs = {**r.inputs, "response": " ".join(["word"] * words)}
        return Record(
            id=f"x{i}", group_id=f"g{i // 8}", system_id=r.system_id, inputs=inputs, scores=r.scores
        )

    items = [item(i, 5 if i < 8 else 2000) for i in range(32)]  # the first group is short
    fake = ScriptedLM(lambda m: "Rating: [[3]]", cache=tmp_path / "c")
    student = JudgeProgram(task, "naturalness", lm=fake.lm)
    base = student.strategy
    space = {name: [base[name]] for name in base.as_dict()}
    space["cot"] = ["prefix", "none"]
    graph = graph_of(OptimizerConfig(space=space), student, fake.lm)
    plan = compile_plan(graph, student, base, items, None, strategies_left=2, lm=fake.lm, threads=1)
    per_call = plan.prompt_tokens / plan.calls
    short = call_cost(student.with_strategy(base), items[:8], fake.lm).prompt_tokens
    long = call_cost(student.with_strategy(base), items[8:], fake.lm).prompt_tokens
    mean = (8 * short + 24 * long) / 32
    assert long > 1.5 * short
    assert abs(per_call - mean) < 0.25 * mean


def test_the_baselines_items_are_planned_as_two_runs_after_a_timed_batch(
    task, records, tmp_path
) -> None:
    """On the engine's clock the plan's timed batch is the baseline's first run (its first
    ``in_flight`` items, judged together) and the search judges the rest in another: the
    baseline waits twice for its longest answer; once when the batch is all there is."""
    from judgeopt.data import Record
    from judgeopt.evaluate import timed_runs
    from judgeopt.teleprompt import OptimizerConfig
    from judgeopt.teleprompt._planning import compile_plan
    from judgeopt.teleprompt._searching import build_graph as graph_of

    clocked = CLOCKED
    assert timed_runs(clocked, 40) == 2.0 and timed_runs(clocked, 16) == 1.0
    assert timed_runs(replace(clocked, engine=None), 40) == 1.0
    assert timed_runs(None, 40) == 1.0
    # Items alike (one prompt length): 32 items cost 4 times 8 items' calls and one more wait.
    r = records[0]
    items = [
        Record(
            id=f"same{i}", group_id=f"g{i}", system_id=r.system_id, inputs=r.inputs, scores=r.scores
        )
        for i in range(32)
    ]
    fake = ScriptedLM(lambda m: "Rating: [[3]]", cache=tmp_path / "c")
    student = JudgeProgram(task, "naturalness", lm=fake.lm)
    base = student.strategy
    graph = graph_of(
        OptimizerConfig(space={name: [base[name]] for name in base.as_dict()}), student, fake.lm
    )

    def seconds(n: int) -> float:
        plan = compile_plan(
            graph,
            student,
            base,
            items[:n],
            None,
            strategies_left=1,
            lm=fake.lm,
            threads=16,
            timing=clocked,
            baseline_left=True,
        )
        assert plan.seconds is not None and plan.calls == n
        return plan.seconds

    wait = clocked.tail_seconds(60)
    assert wait > 0
    assert seconds(32) - 4 * seconds(8) == pytest.approx(2 * wait - 4 * wait)


def test_a_call_is_timed_on_the_prompt_tokens_it_computes() -> None:
    """With the timed judgement's computed tokens known, a call's prompt is read at the
    measured rate for the tokens it computes (the rest comes from the prefix cache); a call
    that does not know its own is read whole."""
    t = Timing(
        seconds=2.0,
        prompt_tokens=800,
        completion_tokens=10,
        prompt_seconds=0.01,
        computed_tokens=100,
    )
    assert t.per_call(800, 10, computed=100) == pytest.approx(2.0)
    # 1 s reading 100 computed tokens, 1 s writing 10 tokens: 300 computed tokens cost 3 s.
    assert t.per_call(800, 10, computed=300) == pytest.approx(3.0 + 1.0)
    assert t.per_call(800, 5, computed=0) == pytest.approx(0.5)
    # Not known for the call: all of its prompt tokens are read.
    assert t.per_call(150, 0) == pytest.approx(1.5)
    # Without the rate, computed tokens are not used (the speedup was measured on all).
    u = Timing(seconds=2.0, prompt_tokens=800, completion_tokens=10, computed_tokens=100)
    assert u.per_call(800, 10, computed=700) == pytest.approx(2.0)


def test_mean_cost_keeps_computed_tokens_only_when_every_judge_has_them() -> None:
    from judgeopt.evaluate import mean_cost

    a = CallCost(1, 800, 8, computed_tokens=200)
    b = CallCost(1, 600, 8, computed_tokens=400)
    assert mean_cost([a, b]).computed_tokens == pytest.approx(300)
    assert mean_cost([a, CallCost(1, 600, 8)]).computed_tokens is None


@pytest.fixture(scope="module")
def smol_batched(tmp_path_factory) -> Any:
    try:
        from judgeopt.lm import LlamaCppLM

        lm = LlamaCppLM(
            "smollm2-135m",
            n_threads=2,
            parallel=4,
            cache=tmp_path_factory.mktemp("plan-cache"),
        )
        lm.load()
    except Exception as e:  # noqa: BLE001 - the model packages are an optional install
        pytest.skip(f"smollm2-135m is not available: {e}")
    return lm


def test_a_judge_that_puts_the_item_first_computes_more_of_its_prompt(
    task, records, smol_batched
) -> None:
    """Real tokenizer and chat template: on items judged one after another, the instructions
    first let the prefix cache hold them for every item; the item first leaves every
    prompt's instructions to compute, so its computed share is larger with the same prompt
    tokens."""
    from judgeopt.evaluate import computed_share

    base = JudgeProgram(task, "naturalness", lm=smol_batched)
    shares, costs = {}, {}
    for order in ("TD-ER-IC", "IC-TD-ER"):
        judge = base.with_strategy({**base.strategy.as_dict(), "cot": "none", "order": order})
        shares[order] = computed_share(judge, records[:8], smol_batched, in_flight=4)
        costs[order] = call_cost(judge, records[:8], smol_batched, window=records[:8])
    assert 0 < shares["TD-ER-IC"] < shares["IC-TD-ER"] <= 1
    first, last = costs["TD-ER-IC"], costs["IC-TD-ER"]
    assert first.prompt_tokens == pytest.approx(last.prompt_tokens, rel=0.05)
    assert first.computed_tokens is not None and last.computed_tokens is not None
    assert first.computed_tokens < last.computed_tokens < last.prompt_tokens
    # Without a window (or on an LM that does not count them) nothing is counted.
    assert call_cost(base, records[:8], smol_batched).computed_tokens is None


def test_an_evaluation_that_starts_the_engine_counts_its_computed_tokens(task, records) -> None:
    """The first batched evaluation on a model (a resumed compile's first strategy, say)
    starts its engine: the prompt tokens it computed are counted from the engine's zero, as
    on an engine already running, so a resumed run's first evaluation times the plan too."""
    from judgeopt.evaluate import evaluate
    from judgeopt.lm import LlamaCppLM

    try:  # parallel 7: an engine of its own, not started by another test
        lm = LlamaCppLM("smollm2-135m", cache=False, n_threads=2, parallel=7)
        lm.load()
    except Exception as e:  # noqa: BLE001 - the model packages are an optional install
        pytest.skip(f"smollm2-135m is not available: {e}")
    assert lm.prompt_reuse() is None  # loaded, no batched call yet
    base = JudgeProgram(task, "naturalness", lm=lm)
    judge = base.with_strategy({**base.strategy.as_dict(), "cot": "none"})
    first = evaluate(judge, records[:4], lm=lm, threads=4, progress=False)
    started = lm.prompt_reuse()
    assert started is not None and first.computed_tokens == started["evaluated"] > 0
    again = evaluate(judge, records[4:6], lm=lm, threads=4, progress=False)
    after = lm.prompt_reuse()
    assert after is not None
    assert again.computed_tokens == after["evaluated"] - started["evaluated"] > 0


def test_the_embedded_model_is_timed_on_computed_tokens(task, records, smol_batched) -> None:
    """Real engine, the batch's wall time (``from_engine=False``): judged together, the timed
    judgement records the prompt tokens it computed (the engine's count) and the rate of
    computing one (a one-token call of the next item's prompt, uncached); the plan then
    times an item-first judge longer than the same judge with its instructions first."""
    judge = JudgeProgram(task, "naturalness", lm=smol_batched)
    calls = smol_batched.stats().calls
    timing = time_judgement(judge, records[8:], smol_batched, threads=2, from_engine=False)
    assert timing is not None and timing.in_flight == 2
    # 2 x TIMED_ROUNDS judgements and the probe
    assert smol_batched.stats().calls == calls + 2 * TIMED_ROUNDS + 1
    assert timing.computed_tokens is not None and timing.prompt_seconds is not None
    assert 0 < timing.computed_tokens < timing.prompt_tokens
    assert timing.prompt_seconds > 0
    seconds = {}
    for order in ("TD-ER-IC", "IC-TD-ER"):
        other = judge.with_strategy({**judge.strategy.as_dict(), "cot": "none", "order": order})
        cost = call_cost(other, records[:8], smol_batched, timing=timing, window=records[:16])
        seconds[order] = plan_cost([(cost, 100)], smol_batched, timing=timing).seconds
    assert 0 < seconds["TD-ER-IC"] < seconds["IC-TD-ER"]


def test_recorded_timing_fits_the_rates_of_computed_and_written_tokens() -> None:
    """Summaries that count their computed prompt tokens give the two rates their seconds
    imply (a reused prompt token at REUSED_TOKEN_COST of a computed one): a recorded
    strategy that shared less of its prompt is timed back as it ran."""
    from judgeopt.evaluate import REUSED_TOKEN_COST, recorded_timing

    class Capped:
        max_tokens = 256

    def summary(calls: int, computed: int, written: int) -> dict[str, Any]:
        read = computed + REUSED_TOKEN_COST * (750 * calls - computed)
        seconds = 0.015 * read + 0.065 * written  # the rates to recover
        return {
            "calls": calls,
            "prompt_tokens": 750 * calls,
            "completion_tokens": written,
            "computed_tokens": computed,
            "seconds": seconds,
        }

    instructions_first = summary(104, 177 * 104, 5 * 104)
    item_first = summary(104, 304 * 104, 5 * 104)
    explained = summary(96, 176 * 96, 128 * 96)
    timing = recorded_timing(Capped(), [instructions_first, item_first, explained], in_flight=8)
    assert timing is not None and timing.prompt_seconds == pytest.approx(0.015)
    assert timing.computed_tokens is not None
    for s in (instructions_first, item_first, explained):
        per_call = timing.per_call(750, s["completion_tokens"] / s["calls"])
        assert per_call != pytest.approx(s["seconds"] / s["calls"])  # all 750 tokens read
        computed = s["computed_tokens"] / s["calls"]
        assert timing.per_call(750, s["completion_tokens"] / s["calls"], computed) == pytest.approx(
            s["seconds"] / s["calls"]
        )
    # Summaries whose computed and written tokens are in the same proportion cannot tell
    # the rates apart; one summary with the count beside one without (an LM that does not
    # count) neither: the seconds are pooled as before.
    half = summary(52, 177 * 52, 5 * 52)
    pooled = recorded_timing(Capped(), [instructions_first, half])
    assert pooled is not None
    older = {k: v for k, v in explained.items() if k != "computed_tokens"}
    for timing in (pooled, recorded_timing(Capped(), [instructions_first, older])):
        assert timing is not None and timing.prompt_seconds is None
        assert timing.computed_tokens is None
    # A summary without the count beside those that tell the rates apart (a resumed run's
    # first evaluation: the engine started during it) is left out of the fit, not a reason
    # to pool every prompt token as computed.
    resumed = {**summary(104, 90 * 104, 5 * 104), "seconds": 400.0}
    del resumed["computed_tokens"]
    mixed = recorded_timing(Capped(), [instructions_first, item_first, explained, resumed])
    assert mixed is not None and mixed.prompt_seconds == pytest.approx(0.015)
    for s in (instructions_first, item_first, explained):
        computed = s["computed_tokens"] / s["calls"]
        assert mixed.per_call(750, s["completion_tokens"] / s["calls"], computed) == pytest.approx(
            s["seconds"] / s["calls"]
        )


def test_an_evaluation_on_the_engine_counts_the_prompt_tokens_it_computed(
    task, records, smol_batched
) -> None:
    """Real engine: an evaluation records the prompt tokens its calls computed (fewer than
    it sent: the instructions are shared); an LM without the count records none, and asking
    an unloaded embedded model for it does not load it."""
    from judgeopt.evaluate import evaluate, merge_results
    from judgeopt.lm import LlamaCppLM

    judge = JudgeProgram(task, "naturalness", lm=smol_batched).with_strategy(
        {**baseline_strategy(task).as_dict(), "cot": "none"}
    )
    smol_batched.load()
    smol_batched("warm the engine", max_tokens=1)
    res = evaluate(judge, records[16:24], lm=smol_batched, progress=False)
    assert res.calls == 8 and res.computed_tokens is not None
    assert 0 < res.computed_tokens < res.prompt_tokens
    assert res.summary()["computed_tokens"] == res.computed_tokens
    again = evaluate(judge, records[24:28], lm=smol_batched, progress=False)
    both = merge_results([res, again], records[16:28], pairwise=False, level=res.level)
    assert both.computed_tokens == res.computed_tokens + (again.computed_tokens or 0)
    fake = ScriptedLM(lambda m: "Rating: [[3]]")
    plain = evaluate(JudgeProgram(task, "naturalness", lm=fake.lm), records[:4], progress=False)
    assert plain.computed_tokens is None and "computed_tokens" not in plain.summary()
    assert (
        merge_results(
            [res, plain], records[:4] + records[16:24], pairwise=False, level=res.level
        ).computed_tokens
        is None
    )
    unloaded = LlamaCppLM("smollm2-135m", n_threads=2, parallel=4, cache=False)
    assert unloaded.prompt_reuse() is None and unloaded._handle is None


def _auto_run(task: Any, fake: Any, budget: int, items: Any) -> Any:
    """A compile of the ``auto`` preset at ``budget`` up to its first call (no plan made)."""
    from judgeopt.teleprompt import JudgeSearch, load_optimizer
    from judgeopt.teleprompt._loop import CompileRun

    opt = JudgeSearch.from_config(load_optimizer("auto"), budget=budget, seed=0, progress=False)
    student = JudgeProgram(task, "naturalness", lm=fake.lm)
    return CompileRun(
        opt.config,
        student,
        trainset=list(items),
        valset=None,
        checkpoint_dir=None,
        restart=False,
        check_lm=False,
        progress=False,
        plan=False,
    )


def _starting_plan(run: Any, items: Any, lm: Any, search: Any) -> Any:
    """The plan of ``run`` (:func:`_auto_run`) before its baseline, on ``items``, with a
    fixed timing (nothing judged); ``search``: ``None`` for the neighbours' plan."""
    from judgeopt.teleprompt._planning import compile_plan

    return compile_plan(
        run.graph,
        run.base,
        run.student.strategy,
        items,
        None,
        strategies_left=run.config.budget,
        lm=lm,
        threads=1,
        baseline_left=True,
        next_strategy=run.search.ask(),
        search=search,
        timing=Timing(seconds=1.0, prompt_tokens=100, completion_tokens=50),
    )


def test_simulated_paths_are_the_searchs_own_reproducible_and_leave_it_untouched(
    task, records, tmp_path
) -> None:
    """The plan's paths: copies of the compile's search told made-up scores. The same
    generator gives the same paths, the search's own next proposal and state are unchanged,
    each path spends the budget from the pending strategy on, and a larger budget reaches
    strategies farther from the baseline than its one-factor neighbours."""
    from judgeopt.teleprompt._planning import simulated_paths

    fake = ScriptedLM(lambda m: "Rating: [[3]]", cache=tmp_path / "c")
    run = _auto_run(task, fake, 20, records[:12])
    search = run.search
    before, pending = search.state_dict(), search.ask()
    paths = simulated_paths(search, 6, np.random.default_rng(3))
    assert paths == simulated_paths(search, 6, np.random.default_rng(3))
    assert paths != simulated_paths(search, 6, np.random.default_rng(4))
    assert search.state_dict() == before and search.ask() == pending
    assert all(len(p) == 20 and p[0] == pending for p in paths)
    base = run.student.strategy
    far = {s for p in paths for s in p if sum(s[f] != base[f] for f in base.as_dict()) > 1}
    assert far  # beyond the baseline's neighbours
    # Told a real score first, the paths continue from the search's history.
    search.tell(pending, 0.3)
    resumed = simulated_paths(search, 2, np.random.default_rng(0))
    assert all(len(p) == 19 and p[0] == search.ask() for p in resumed)
    with pytest.raises(ValueError, match="pending"):  # the copies' proposals are not its
        search.tell(resumed[0][1], 0.1)


def test_a_cramped_space_runs_two_paths() -> None:
    """A search that has to exploit (every neighbourhood exhausted: the budget is the whole
    space) gets two simulated paths, not sixteen: its paths differ little and its
    exhaustive picks are slow; a roomy one gets all of them."""
    from judgeopt.search import AutoSearch, FactorSpace
    from judgeopt.teleprompt._planning import CRAMPED_PATHS, simulated_paths

    space = FactorSpace({"a": [0, 1, 2], "b": [0, 1, 2], "c": [0, 1]})
    roomy = simulated_paths(AutoSearch(space, budget=6, seed=0), 16, np.random.default_rng(0))
    assert len(roomy) == 16
    cramped = AutoSearch(space, budget=18, seed=0)
    paths = simulated_paths(cramped, 16, np.random.default_rng(0))
    assert len(paths) == CRAMPED_PATHS == 2
    assert all(sorted(map(str, p)) == sorted(map(str, space.strategies())) for p in paths)


def test_a_compile_plan_prices_what_the_searchs_paths_visit(task, records, tmp_path) -> None:
    """Given the search, the plan prices the strategies its simulated paths visit: at a
    budget where they reach self-consistency (five calls per item) the plan counts more calls
    than the baseline's neighbours would, and it is the same plan every time."""
    fake = ScriptedLM(lambda m: "Rating: [[3]]", cache=tmp_path / "c")
    items = records[:10]
    run = _auto_run(task, fake, 20, items)

    def plan(search: Any) -> Any:
        return _starting_plan(run, items, fake.lm, search)

    asked = len(fake.requests)  # the compile's probe of the LM's logprobs
    neighbours, paths = plan(None), plan(run.search)
    assert paths.calls > neighbours.calls >= 20 * len(items)
    assert plan(run.search).to_dict() == paths.to_dict()
    assert len(fake.requests) == asked  # priced, not judged
    # The spread over the paths: the plan's figures lie within it (the mean of the paths),
    # it is said in the plan's line and kept in its record; one path has none.
    assert neighbours.spread is None and "simulated" not in neighbours.line()
    assert paths.spread is not None and set(paths.spread) == {"calls", "tokens", "seconds"}
    lo, hi = paths.spread["calls"]
    assert 20 * len(items) <= lo <= paths.calls <= hi
    lo, hi = paths.spread["tokens"]
    assert lo <= paths.prompt_tokens + paths.completion_tokens <= hi
    assert "8 in 10 of the search's simulated paths:" in paths.line()
    assert json.loads(json.dumps(paths.to_dict()))["spread"]["calls"][1] == pytest.approx(
        paths.spread["calls"][1], abs=1e-3
    )


def test_a_search_that_cannot_be_copied_is_planned_on_the_neighbours(
    task, records, tmp_path, monkeypatch, caplog
) -> None:
    """The plan never stops a compile: a search whose state does not rebuild prices the
    baseline's neighbours instead, and says so."""
    from judgeopt.search import Search

    fake = ScriptedLM(lambda m: "Rating: [[3]]", cache=tmp_path / "c")
    items = records[:10]
    run = _auto_run(task, fake, 20, items)

    def broken(cls: Any, state: Any, **params: Any) -> Any:
        raise ValueError("no copy")

    monkeypatch.setattr(Search, "from_state", classmethod(broken))
    with caplog.at_level(logging.WARNING, logger="judgeopt.teleprompt"):
        plan = _starting_plan(run, items, fake.lm, run.search)
    assert plan.calls == 20 * len(items) and plan.spread is None
    assert "no simulated path (no copy)" in caplog.text


def test_a_sampled_judge_computes_each_items_prompt_once_on_the_engine(
    task, records, smol_batched
) -> None:
    """Self-consistency's samples of an item share its prompt: the real engine reuses the
    first sample's blocks for the others, and the plan counts them that way (about the
    computed tokens of one greedy call per item, not five)."""
    from judgeopt.evaluate import evaluate

    base = {**baseline_strategy(task).as_dict(), "cot": "none"}
    greedy = JudgeProgram(task, "naturalness", lm=smol_batched).with_strategy(base)
    sampled = greedy.with_strategy({**base, "decoding": "sc5"})
    smol_batched.load()
    smol_batched("warm the engine", max_tokens=1)
    items = records[30:33]
    one = evaluate(greedy, items, lm=smol_batched, progress=False)
    five = evaluate(sampled, items, lm=smol_batched, progress=False)
    assert five.calls == 5 * one.calls
    assert one.computed_tokens is not None and five.computed_tokens is not None
    assert five.computed_tokens < 2 * one.computed_tokens
    window = records[36:40]
    plan_one = call_cost(greedy, window, smol_batched, window=window)
    plan_five = call_cost(sampled, window, smol_batched, window=window)
    assert plan_five.calls == 5 * plan_one.calls
    assert plan_one.computed_tokens and plan_five.computed_tokens
    assert plan_five.computed_tokens < 2 * plan_one.computed_tokens


def test_the_compile_summary_prints_the_plan_as_it_was_made() -> None:
    """The summary's cost line: the plan's calls in flight (not always one at a time) and
    its spread over the search's simulated paths beside what the run spent."""
    from types import SimpleNamespace

    from judgeopt.cli._compile_output import planned_and_spent

    res = SimpleNamespace(
        calls=700, prompt_tokens=150_000, completion_tokens=5_000, selection_calls=0, seconds=2400
    )
    plan = CostPlan(
        calls=755,
        prompt_tokens=157_000,
        completion_tokens=7_000,
        seconds=2_600.0,
        dollars=0.0,
        in_flight=8,
        spread={"calls": (640.0, 905.0), "tokens": (1.0, 2.0)},
    ).to_dict()
    line = planned_and_spent(res, plan)  # type: ignore[arg-type]
    assert "planned about 755 calls (640-905 on 8 in 10 simulated search paths)" in line
    assert "43 min 8 calls in flight" in line and "one call at a time" not in line
    free = CostPlan(1, 1, 1, 1.0, 0.0, spread={"calls": (1, 2), "dollars": (0.0, 0.0)})
    assert "1-2 calls" in free.line() and "$0.00-" not in free.line()  # a free model's
    priced = CostPlan(1, 1, 1, 1.0, 0.5, spread={"dollars": (0.25, 1.5)})
    assert priced.line().endswith("(8 in 10 of the search's simulated paths: $0.25-1.50)")
    plan.update(in_flight=1, spread=None)
    line = planned_and_spent(res, plan)  # type: ignore[arg-type]
    assert "one call at a time" in line and "simulated" not in line
    assert "the search made 700 calls (155,000 tokens)" in line


def test_a_reused_prompt_token_costs_a_share_of_a_computed_one() -> None:
    """The probe's seconds are shared among the tokens it computed and those it reused (at
    ``reused_cost`` each): a call that reuses a long prefix (in-context examples) is timed
    longer than one that reuses none with the same computed tokens; at cost 0 the reused
    tokens are free, as the time model was before."""
    probe = (1.5, 100.0, 600.0)  # seconds, computed, all prompt tokens
    base = Timing(
        seconds=4.0,
        prompt_tokens=600,
        completion_tokens=60,
        in_flight=8,
        computed_tokens=100.0,
        probe=probe,
    )
    free, costed = base.with_reused_cost(0.0), base.with_reused_cost(0.1)
    assert free.prompt_seconds == pytest.approx(1.5 / 100)
    assert costed.prompt_seconds == pytest.approx(1.5 / (100 + 0.1 * 500))
    # The timed judgement itself is timed back as it ran, whatever the cost.
    for t in (free, costed):
        assert t.per_call(600, 60, 100) == pytest.approx(4.0)
    long_prefix = costed.per_call(2600, 5, 100)
    short = costed.per_call(100, 5, 100)
    assert long_prefix > short and free.per_call(2600, 5, 100) == pytest.approx(
        free.per_call(100, 5, 100)
    )
    # Read back from a plan's JSON (a list), the probe is a tuple again.
    again = Timing(**{**costed.__dict__, "probe": list(probe)})
    assert again == costed


def test_a_decoding_twin_judged_before_costs_no_call(task, records, tmp_path) -> None:
    """The plan prices a stopped greedy or ``expected`` strategy whose twin came before it on
    its path (or was judged already) at no call, on an LM known to return logprobs only; a
    judge that explains first never shares its call, nor does self-consistency."""
    from judgeopt.teleprompt._planning import _priced

    fake = ScriptedLM(lambda m: "Rating: [[3]]", cache=tmp_path / "c")
    fake.lm.supports_logprobs = True  # the compile keeps `expected` in its space
    run = _auto_run(task, fake, 20, records[:10])
    first = baseline_strategy(task).replace(cot="suffix")
    greedy, expected, sc5 = (first.replace(decoding=d) for d in ("greedy", "expected", "sc5"))
    prefix = baseline_strategy(task)
    prefix_expected = prefix.replace(decoding="expected")
    one = CallCost(1.0, 100.0, 5.0, computed_tokens=40.0)
    rendered = dict.fromkeys([greedy, expected, sc5, prefix, prefix_expected], one)

    def calls(path: list[Any], before: list[Any] = [], twins: bool = True) -> list[float]:  # noqa: B006
        costs = _priced(run.base, fake.lm, [path], rendered, before, twins)[0]
        assert all((c.computed_tokens == 0.0) == (c.calls == 0.0) for c in costs)
        return [c.calls for c in costs]

    assert calls([greedy, sc5, expected]) == [1.0, 1.0, 0.0]
    assert calls([greedy], before=[expected]) == [0.0]
    assert calls([prefix, prefix_expected]) == [1.0, 1.0]
    assert calls([greedy, expected], twins=False) == [1.0, 1.0]
    fake.lm.supports_logprobs = None
    assert calls([greedy, expected]) == [1.0, 1.0]
    # A whole plan: the twins the search's paths revisit are not counted.
    unknown = _starting_plan(run, records[:10], fake.lm, run.search)
    fake.lm.supports_logprobs = True
    known = _starting_plan(run, records[:10], fake.lm, run.search)
    assert known.calls < unknown.calls


def test_a_batch_is_read_from_the_engines_clock() -> None:
    """``engine_timing``: a call costs its computed prompt tokens at the seconds the engine
    spent per computed token of the batch, and its written tokens at the batch's step seconds
    per written token; the batch's wall time beyond the engine's is left out."""
    from judgeopt.evaluate import engine_timing

    together = Timing(
        seconds=36.4 / 16, prompt_tokens=520, completion_tokens=59, cap=256, in_flight=16
    )
    spent = {
        "steps": 72.0,
        "step_seconds": 22.4,
        "prompt_seconds": 12.9,
        "evaluated": 1161.0,
        "width": 16.0,
    }
    clocked = engine_timing(together, spent, 16)
    assert clocked is not None
    assert clocked.seconds == pytest.approx((22.4 + 12.9) / 16)
    assert clocked.prompt_seconds == pytest.approx(12.9 / 1161)
    assert clocked.computed_tokens == pytest.approx(1161 / 16)
    assert clocked.engine == (72.0, 22.4, 12.9, 16.0) and clocked.in_flight == 16
    # The timed judge, a run of 16 of its calls, is timed back as the engine ran it: its
    # calls at full steps, and the batch's wait for its longest answer (72 steps for 59
    # tokens a call) once per run ...
    per_written, lockstep = (22.4 / 16) / 59, 22.4 / 72 / 16
    assert clocked.tail_once
    assert clocked.tail_seconds(59) == pytest.approx((72 - 59) * 22.4 / 72)
    run = 16 * clocked.per_call(520, 59, 1161 / 16) + clocked.tail_seconds(59)
    assert run == pytest.approx(16 * clocked.seconds)
    assert clocked.per_call(520, 59, 1161 / 16) == pytest.approx(12.9 / 16 + 59 * lockstep)
    # ... so a run of 100 such calls waits once, not every 16 calls; half the tokens, half
    # the wait.
    assert clocked.tail_seconds(29.5) == pytest.approx(clocked.tail_seconds(59) / 2)
    # With ``tail_once`` off, each call at the batch's own rate (the wait in every call).
    every = replace(clocked, tail_once=False)
    assert every.per_call(520, 59, 1161 / 16) == pytest.approx(clocked.seconds)
    assert every.tail_seconds(59) == 0.0
    # A judge that rates first: its computed tokens, then its few tokens at a full step's
    # share (the batch, waiting for its longest answers, wrote slower), either way.
    assert lockstep < per_written
    assert clocked.per_call(520, 3, 60) == pytest.approx(12.9 / 1161 * 60 + 3 * lockstep)
    assert every.per_call(520, 3, 60) == pytest.approx(clocked.per_call(520, 3, 60))
    # Without the engine's figures, the batch's own rate.
    plain = replace(clocked, engine=None)
    assert plain.per_call(520, 3, 60) == pytest.approx(12.9 / 1161 * 60 + 3 * per_written)
    assert plain.tail_seconds(59) == 0.0
    # A step is shared among the calls in flight, at most the engine's width (6 of 8 here).
    narrow = replace(clocked, in_flight=6, engine=(72.0, 22.4, 12.9, 8.0))
    assert narrow._lockstep(1.0) == pytest.approx(22.4 / 72 / 6)
    # Read back from a plan's JSON (lists), the same timing.
    assert Timing(**{**clocked.__dict__, "engine": [72.0, 22.4, 12.9, 16.0]}) == clocked
    # Nothing to read: no engine, no call, or an engine that neither computed nor wrote.
    assert engine_timing(together, None, 16) is None
    assert engine_timing(together, spent, 0) is None
    assert engine_timing(together, {**spent, "evaluated": 0.0}, 16) is None
    assert engine_timing(together, {**spent, "step_seconds": 0.0}, 16) is None


def test_the_embedded_model_is_timed_on_its_engines_clock(task, records, smol_batched) -> None:
    """Real engine: read from the engine's clock, the timed batch makes no probe call, and
    its timing holds what the engine spent (steps, their seconds, prompt seconds, width)."""
    judge = JudgeProgram(task, "naturalness", lm=smol_batched)
    calls = smol_batched.stats().calls
    timing = time_judgement(judge, records[24:], smol_batched, threads=2)  # ENGINE_TIMING
    assert timing is not None and timing.engine is not None
    assert smol_batched.stats().calls == calls + 2 * TIMED_ROUNDS  # no probe
    steps, step_seconds, prompt_seconds, width = timing.engine
    assert steps >= 1 and step_seconds > 0 and prompt_seconds > 0 and width >= 2
    assert timing.prompt_seconds is not None and timing.computed_tokens is not None
    assert 0 < timing.computed_tokens <= timing.prompt_tokens
    # The batch, planned as a run of its calls (each at full steps) and one wait for its
    # longest answer, takes the engine's time back.
    call = timing.per_call(timing.prompt_tokens, timing.completion_tokens, timing.computed_tokens)
    run = timing.in_flight * call + timing.tail_seconds(timing.completion_tokens)
    assert run == pytest.approx(timing.in_flight * timing.seconds, rel=0.05)


def test_the_plan_renders_the_examples_the_judge_shows(task, records) -> None:
    """In-context examples need no LM call, so the plan renders the judge's own (its
    stratified selection, the slot's spare for an item that is its own example): every
    planned prompt is the prompt the run sends. Without a pool to select them from, other
    records stand in for them."""
    from judgeopt.evaluate._plan_prompts import plan_messages
    from judgeopt.judge import ArtifactStore

    fake = ScriptedLM(lambda messages: "Rating: [[2]]")
    student = JudgeProgram(task, "naturalness", lm=fake.lm)
    base = student.fresh_copy(
        trainset=records, artifacts=ArtifactStore(), example_seed=0, lm=fake.lm
    )
    judge = base.with_strategy({**baseline_strategy(task).as_dict(), "cot": "none", "examples": 3})
    chosen = next(iter(judge.maker.examples_for_export(judge.strategy).values()))
    own = [r for r in records if dict(r.inputs) == chosen[0]["inputs"]]
    judged = [*own, *[r for r in records[:6] if r not in own]]
    for i, record in enumerate(judged):
        fake.requests.clear()
        judge.judge(dict(record.inputs), sample_id=record.id, lm=fake.lm)
        sent = fake.requests[-1]
        sent = sent["messages"] if isinstance(sent, dict) and "messages" in sent else sent
        assert plan_messages(judge, judged, i) == sent
    # An item that is its own example is shown the spare: its prompt differs from the rest.
    assert own and plan_messages(judge, judged, 0)[-1] != plan_messages(judge, judged, 1)[-1]
    # A judge that shows no examples has none to show.
    plain = base.with_strategy({**baseline_strategy(task).as_dict(), "cot": "none"})
    assert plain.maker.examples_shown(plain.strategy, judged[0].inputs, sample_id="x") == []
    # No pool: stood in for by the last records, the same for every item.
    bare = JudgeProgram(task, "naturalness", lm=fake.lm).with_strategy(judge.strategy.as_dict())
    shown = plan_messages(bare, judged, 0)[-1]["content"]
    assert str(judged[-1].inputs["response"]) in shown
