"""Judging with threads > 1: order, progress, accounting, DSPy context, interrupts, racing.

A scripted LM (judgeopt.testing.ScriptedLM) stands in for the model: these tests check the
bookkeeping of concurrent judge calls, never that a judge works.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from pathlib import Path
from typing import Any

import dspy
import litellm
import pytest

from judgeopt.data import load_records
from judgeopt.evaluate import evaluate
from judgeopt.judge import JudgeProgram, load_task
from judgeopt.teleprompt import HPSS
from judgeopt.testing import ScriptedLM

ASPECT = "naturalness"


@pytest.fixture(scope="module")
def task():
    return load_task("topical_chat")


@pytest.fixture(scope="module")
def records(shared_data: Path):
    return load_records(shared_data / "topical_chat" / "valid.jsonl")[:12]


def response_of(messages: list[dict[str, Any]]) -> str:
    text = str(messages[-1]["content"])
    return text.split("## The Start of the Response")[-1].split("## The End")[0].strip()


def rating(messages: list[dict[str, Any]]) -> str:
    h = int(hashlib.sha256(response_of(messages).encode()).hexdigest(), 16)
    return f"Rating: [[{1 + h % 3}]]"


def first_submitted(records: list[Any]) -> Any:
    """The record evaluate submits first (it orders by group, then position)."""
    return min(records, key=lambda r: (r.group_id or "", records.index(r)))


def test_items_are_collected_as_they_finish_and_kept_in_input_order(task, records) -> None:
    slow = first_submitted(records).inputs["response"]

    def respond(messages: list[dict[str, Any]]) -> str:
        time.sleep(0.6 if response_of(messages) == slow else 0.01)
        return rating(messages)

    judge = JudgeProgram(task, ASPECT, lm=ScriptedLM(respond).lm)
    seen: list[str] = []
    res = evaluate(judge, records, threads=4, progress=False, on_item=lambda i: seen.append(i.id))
    slow_id = first_submitted(records).id
    # The slow first call holds nothing up: the others are reported before it.
    assert seen[-1] == slow_id and len(seen) == len(records) == len(set(seen))
    assert [i.id for i in res.items] == [r.id for r in records]
    one = evaluate(judge, records, threads=1, progress=False)
    assert [i.score for i in one.items] == [i.score for i in res.items]


def test_accounting_is_exact_with_threads(task, records, tmp_path: Path) -> None:
    failing = {records[3].inputs["response"], records[7].inputs["response"]}

    def respond(messages: list[dict[str, Any]]) -> str | BaseException:
        time.sleep(0.01)
        if response_of(messages) in failing:
            return litellm.exceptions.BadRequestError("refused", model="x", llm_provider="openai")
        return rating(messages)

    fake = ScriptedLM(respond, cache=tmp_path / "cache")
    judge = JudgeProgram(task, ASPECT, lm=fake.lm)
    res = evaluate(judge, records, threads=8, progress=False)
    stats = fake.lm.stats()
    assert res.calls == stats.calls == len(fake.requests) == 12
    assert res.call_failures == 2 and dict(stats.failures) == {"bad_request": 2}
    sent_prompt = sum(
        sum(len(str(m["content"]).split()) for m in r["messages"])
        for r in fake.requests
        if response_of(r["messages"]) not in failing
    )
    assert res.prompt_tokens == stats.prompt_tokens == sent_prompt
    # Again: the ten answers come from the cache, the two failures are asked again.
    again = evaluate(judge, records, threads=8, progress=False)
    assert again.cache_hits == 10 and again.calls == 2 and again.call_failures == 2
    assert [i.score for i in again.items] == [i.score for i in res.items]


def test_progress_bar_counts_every_item(task, records, monkeypatch) -> None:
    import tqdm

    updates: list[int] = []
    real = tqdm.tqdm

    class Recording(real):  # type: ignore[misc, valid-type]
        def update(self, n: float | None = 1) -> bool | None:
            updates.append(int(n or 0))
            return super().update(n)

    monkeypatch.setattr(tqdm, "tqdm", Recording)
    judge = JudgeProgram(task, ASPECT, lm=ScriptedLM(rating).lm)
    evaluate(judge, records, threads=4, progress=True)
    assert sum(updates) == len(records)


def test_dspy_context_reaches_every_thread(task, records) -> None:
    fake = ScriptedLM(rating)
    judge = JudgeProgram(task, ASPECT, lm=fake.lm)
    with dspy.context(track_usage=True), dspy.track_usage() as usage:
        evaluate(judge, records, threads=4, progress=False)
    totals = usage.get_total_tokens()[fake.lm.model]
    assert totals["prompt_tokens"] == fake.lm.stats().prompt_tokens > 0
    assert totals["completion_tokens"] == fake.lm.stats().completion_tokens


def test_interrupt_drops_the_queued_calls(task, records) -> None:
    started = threading.Event()

    def respond(messages: list[dict[str, Any]]) -> str:
        started.set()
        time.sleep(0.1)
        return rating(messages)

    fake = ScriptedLM(respond)
    judge = JudgeProgram(task, ASPECT, lm=fake.lm)

    def stop(_item: Any) -> None:
        raise KeyboardInterrupt

    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        evaluate(judge, records * 4, threads=2, progress=False, on_item=stop)
    assert time.perf_counter() - t0 < 1.0  # 48 calls of 0.1 s on 2 threads would take 2.4 s
    time.sleep(0.3)  # let the calls in flight finish
    assert started.is_set() and len(fake.requests) <= 4


SPACE = {
    "scale": [3, 10],
    "examples": [0],
    "criteria": ["none", "human"],
    "reference": ["none"],
    "cot": ["none", "prefix"],
    "autocot": ["off"],
    "metrics": ["off"],
    "order": ["TD-ER-IC", "IC-TD-ER"],
    "decoding": ["greedy"],
}


@pytest.mark.parametrize("racing", [False, {"enabled": True, "top": 1, "min_items": 12}])
def test_compile_with_threads_matches_one_thread(task, shared_data: Path, racing: Any) -> None:
    records = load_records(shared_data / "topical_chat" / "valid.jsonl")[:48]
    human = {r.inputs["response"]: r.scores[ASPECT] for r in records}

    def respond(messages: list[dict[str, Any]]) -> str:
        text = str(messages[-1]["content"])
        hi = int(re.search(r"scale of 1 to (\d+)", text).group(1))  # type: ignore[union-attr]
        if hi == 10:  # the good judge; scale 3 is noise, for racing to drop
            return f"Rating: [[{round(1 + (human[response_of(messages)] - 1) * 4.5)}]]"
        return rating(messages)

    results = []
    for threads in (1, 4):
        fake = ScriptedLM(respond)
        opt = HPSS(
            budget=5,
            space=SPACE,
            progress=False,
            params={"k": 2},
            racing=racing,
            threads=threads,
            selection="best",
        )
        best = opt.compile(JudgeProgram(task, ASPECT, lm=fake.lm), trainset=records)
        res = best.search_result
        # Every call but the endpoint check before the search is a judge call.
        assert res.calls == len(fake.requests) - 1 == fake.lm.stats().calls - 1
        assert res.calls == sum(s["n"] for s in res.evaluation_summaries)
        results.append(res)
    one, four = results
    assert four.trace == one.trace and four.calls == one.calls
    if racing:
        assert four.racing["dropped"] == one.racing["dropped"] >= 1
