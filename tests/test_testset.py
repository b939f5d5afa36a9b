"""The baseline judges a compile's held-out items in its first run (``testset``,
``evaluate(alongside=...)``): the test reads them from the response cache, the compile
never sees them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from judgeopt.demo import demo_split
from judgeopt.evaluate import evaluate
from judgeopt.judge import JudgeProgram, load_task
from judgeopt.teleprompt import JudgeSearch, load_optimizer
from judgeopt.testing import ScriptedLM

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _reply(messages: list[dict[str, Any]]) -> str:
    text = str(messages[-1]["content"])
    return f"The sentence reads well enough. Rating: [[{1 + len(text) % 5}]]"


def _judge(lm: Any) -> JudgeProgram:
    return JudgeProgram(load_task("sfres"), "naturalness", lm=lm)


def test_evaluate_judges_alongside_records_for_the_cache_only(tmp_path: Path) -> None:
    valid, test = demo_split("sfres", 12, 10, DATA)
    fake = ScriptedLM(_reply, cache=tmp_path / "cache")
    judge = _judge(fake.lm)
    seen: list[str] = []
    res = evaluate(
        judge, valid, alongside=test, on_item=lambda i: seen.append(i.id), progress=False, threads=4
    )
    assert [i.id for i in res.items] == [r.id for r in valid]
    assert sorted(seen) == sorted(r.id for r in valid)
    made = len(fake.requests)
    # The counters are the records' own: each of their items one call or one cache hit.
    assert res.calls + res.cache_hits == len(valid) == res.n
    assert res.calls < made
    # The same evaluation without them scores the same, from the cache.
    again = evaluate(judge, valid, progress=False)
    assert again.spearman == res.spearman and again.cache_hits == len(valid)
    # The later evaluation of the held-out items makes no call.
    later = evaluate(judge, test, progress=False)
    assert len(fake.requests) == made
    assert later.calls == 0 and later.cache_hits == len(test) == later.n


def test_alongside_records_that_are_records_or_repeat_an_id(tmp_path: Path) -> None:
    valid, test = demo_split("sfres", 8, 6, DATA)
    fake = ScriptedLM(_reply)
    judge = _judge(fake.lm)
    # A record among the evaluation's own is judged once, as one of them.
    res = evaluate(judge, valid, alongside=[*valid[:3], *test], progress=False, threads=1)
    assert res.n == len(valid) and res.calls + res.cache_hits == len(valid)
    assert res.calls + len(test) >= len(fake.requests) > res.calls
    with pytest.raises(ValueError, match="alongside"):
        evaluate(judge, valid, alongside=[test[0], test[0]], progress=False)


def _compile(tmp_path: Path, name: str, valid: list[Any], testset: Any, cache: bool = True) -> Any:
    fake = ScriptedLM(_reply, cache=tmp_path / f"cache_{name}" if cache else False)
    opt = JudgeSearch.from_config(
        load_optimizer("quick"),
        budget=4,
        progress=False,
        threads=1,  # the same order of calls, so the same cache hits, in both compiles
        checkpoint_dir=tmp_path / f"ckpt_{name}",
    )
    return fake, opt.compile(_judge(fake.lm), trainset=valid, testset=testset)


def test_a_compile_judges_the_baseline_on_its_testset_in_its_first_run(tmp_path: Path) -> None:
    valid, test = demo_split("sfres", 20, 12, DATA)
    fake0, plain = _compile(tmp_path, "plain", valid, None)
    fake1, tested = _compile(tmp_path, "tested", valid, test)
    # The search and the choice are the same: the held-out items are never scored.
    trace0 = plain.search_result.evaluation_summaries
    trace1 = tested.search_result.evaluation_summaries
    assert [t["strategy"] for t in trace1] == [t["strategy"] for t in trace0]
    for key in ("spearman", "n", "calls", "cache_hits", "prompt_tokens", "completion_tokens"):
        assert [t[key] for t in trace1] == [t[key] for t in trace0], key
    assert tested.strategy == plain.strategy
    # The baseline's held-out judgements were made once, during the search ...
    assert len(fake1.judge_requests) == len(fake0.judge_requests) + len(test)
    # ... so the test's baseline makes no call, and the checkpoint holds none of them.
    baseline = tested.with_strategy(_judge(fake1.lm).strategy)
    res = evaluate(baseline, test, progress=False)
    assert res.cache_hits == len(test)
    assert len(fake1.judge_requests) == len(fake0.judge_requests) + len(test)
    stored = "".join(
        p.read_text(errors="ignore") for p in (tmp_path / "ckpt_tested").rglob("*") if p.is_file()
    )
    assert not any(f'"{r.id}"' in stored for r in test)


def test_a_testset_without_a_response_cache_is_left_to_the_test(tmp_path: Path) -> None:
    valid, test = demo_split("sfres", 20, 12, DATA)
    fake0, _ = _compile(tmp_path, "plain", valid, None, cache=False)
    fake1, _ = _compile(tmp_path, "tested", valid, test, cache=False)
    assert len(fake1.judge_requests) == len(fake0.judge_requests)


def test_a_testset_that_does_not_fit_the_task_is_named(tmp_path: Path) -> None:
    valid, _ = demo_split("sfres", 20, 12, DATA)
    with pytest.raises(ValueError, match="testset"):
        _compile(tmp_path, "bad", valid, [{"text": "no fields of the task"}])


def test_counted_aside_counts_the_calls_made_in_its_context_too() -> None:
    from judgeopt.lm import StatsRecorder, counted_aside

    fake = ScriptedLM(lambda messages: "Rating: [[3]]")
    recorder = StatsRecorder()
    with counted_aside(recorder):
        fake.lm.forward(messages=[{"role": "user", "content": "one"}])
    fake.lm.forward(messages=[{"role": "user", "content": "two"}])
    assert recorder.snapshot().calls == 1
    assert fake.lm.stats().calls == 2
