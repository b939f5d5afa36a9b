"""Greedy logprobs from the embedded model without ``logits_all`` (the decoding loop of
``judgeopt.lm._llama_decode``) equal the ``logits_all`` path, on real models.

SmolLM2 (fast) checks the raw responses token by token; the slow test judges real SFRES
items with the ``expected`` decoding through both paths with Qwen2.5-Coder-0.5B and requires
the same ratings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from judgeopt.lm import LlamaCppLM, LMBadRequest, LMContextOverflow

llama_cpp = pytest.importorskip("llama_cpp")

PROMPTS = [
    [
        {
            "role": "user",
            "content": "Rate this reply from 1 to 10 and answer as [[rating]]: "
            "'Cats are nice animals.'",
        }
    ],
    [
        {"role": "system", "content": "You are a strict judge."},
        {
            "role": "user",
            "content": "Rate this reply from 1 to 10 and answer as [[rating]]: "
            "'Dogs bark at night.'",
        },
    ],
    [{"role": "user", "content": "Name three colours, separated by commas."}],
]


def _lms(model: str, **kw: Any) -> tuple[LlamaCppLM, LlamaCppLM]:
    try:
        new = LlamaCppLM(model, logits_all=False, cache=False, n_threads=2, **kw)
        new.load()
    except Exception as e:  # noqa: BLE001 - the model packages are an optional install
        pytest.skip(f"{model} is not available: {e}")
    return new, new.copy(logits_all=True)


def _content(response: Any) -> tuple[str, str, list[dict[str, Any]]]:
    choice = response["choices"][0]
    return (
        choice["message"]["content"],
        choice["finish_reason"],
        list(choice["logprobs"]["content"]),
    )


def _cold(lm: LlamaCppLM) -> None:
    handle = lm._get_handle()
    with handle.lock:
        handle.llama.n_tokens = 0


def _same(a: Any, b: Any, tol: float = 2e-4) -> None:
    text_a, finish_a, tokens_a = _content(a)
    text_b, finish_b, tokens_b = _content(b)
    assert (text_a, finish_a) == (text_b, finish_b)
    assert [t["token"] for t in tokens_a] == [t["token"] for t in tokens_b]
    for x, y in zip(tokens_a, tokens_b, strict=True):
        assert abs(float(x["logprob"]) - float(y["logprob"])) < tol
        top_x = {e["token"]: float(e["logprob"]) for e in x["top_logprobs"]}
        top_y = {e["token"]: float(e["logprob"]) for e in y["top_logprobs"]}
        # The same alternatives, up to the order of near ties at the cut-off.
        shared = set(top_x) & set(top_y)
        assert len(shared) >= len(top_y) - 1
        assert all(abs(top_x[t] - top_y[t]) < tol for t in shared)
    assert a["usage"]["prompt_tokens"] == b["usage"]["prompt_tokens"]
    assert a["usage"]["completion_tokens"] == b["usage"]["completion_tokens"]


def test_smollm_logprobs_without_logits_all_equal_the_logits_all_path() -> None:
    new, old = _lms("smollm2-135m", max_tokens=24)
    assert new.supports_logprobs and new.logprobs_hint is None
    for messages in PROMPTS:
        a = new.forward(messages=messages, temperature=0.0, logprobs=True, top_logprobs=20)
        b = old.forward(messages=messages, temperature=0.0, logprobs=True, top_logprobs=20)
        _same(a, b)
        # 20 alternatives (fewer only where several tokens decode to the same text).
        assert all(15 <= len(t["top_logprobs"]) <= 21 for t in _content(a)[2])
        # The loop's text is the plain greedy answer too (from a cold KV cache: a reused
        # prefix changes the last position's logits in the last bits, which can flip a
        # near-tie argmax in llama.cpp's own greedy path as well).
        _cold(new)
        plain = new.forward(messages=messages, temperature=0.0)
        assert plain["choices"][0]["message"]["content"] == _content(a)[0]


def test_prefix_reuse_follows_llama_cpp_python_over_a_sequence_of_calls() -> None:
    """The KV cache is reused as llama-cpp-python's own ``generate`` reuses it.

    llama.cpp's logits depend slightly on how a prompt was split into evaluated batches, so
    a warm call is compared with the ``logits_all`` model after the same sequence of calls
    (same splits), not with a cold call.
    """
    new, old = _lms("smollm2-135m", max_tokens=16)
    sequence = [PROMPTS[0], PROMPTS[1], PROMPTS[1], PROMPTS[2], PROMPTS[0]]
    for i, messages in enumerate(sequence):
        kw = {"temperature": 0.0, "logprobs": True, "top_logprobs": 5}
        _same(new.forward(messages=messages, **kw), old.forward(messages=messages, **kw))
        if i % 2:
            # Plain greedy calls in between move both caches the same way.
            a = new.forward(messages=PROMPTS[0], temperature=0.0)
            b = old.forward(messages=PROMPTS[0], temperature=0.0)
            assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    # A cold call after all that still equals a cold call of the other path.
    _cold(new)
    _cold(old)
    kw = {"temperature": 0.0, "logprobs": True, "top_logprobs": 5}
    _same(new.forward(messages=PROMPTS[1], **kw), old.forward(messages=PROMPTS[1], **kw))


def test_stop_strings_budget_and_refusals() -> None:
    new, old = _lms("smollm2-135m", max_tokens=40)
    kw = {"temperature": 0.0, "logprobs": True, "top_logprobs": 3}
    a = new.forward(messages=PROMPTS[2], stop=[","], **kw)
    b = old.forward(messages=PROMPTS[2], stop=[","], **kw)
    text, finish, tokens = _content(a)
    assert "," not in text and finish == "stop" and text == _content(b)[0]
    assert len("".join(t["token"] for t in tokens)) >= len(text)
    short = new.forward(messages=PROMPTS[2], max_tokens=2, **kw)
    assert _content(short)[1] == "length" and short["usage"]["completion_tokens"] == 2
    with pytest.raises(LMBadRequest, match="temperature=0.7"):
        new.forward(messages=PROMPTS[0], logprobs=True, temperature=0.7)
    small = LlamaCppLM("smollm2-135m", logits_all=False, cache=False, n_threads=1, n_ctx=256)
    with pytest.raises(LMContextOverflow):
        small.forward(messages=[{"role": "user", "content": "word " * 400}], **kw)


@pytest.mark.slow
def test_qwen_expected_ratings_equal_the_logits_all_path(shared_data: Path) -> None:
    from judgeopt.data import load_records
    from judgeopt.judge import JudgeProgram, baseline_strategy, load_task

    new, old = _lms("qwen2.5-coder-0.5b", n_ctx=1024)
    # SFRES: real judge prompts, short enough that the logits_all path (every prompt
    # position's logits) costs seconds, not minutes.
    task = load_task("sfres")
    records = load_records(shared_data / "sfres" / "valid.jsonl")[:4]
    for scale, cot in ((10, "none"), (3, "prefix")):
        strategy = baseline_strategy(task).replace(scale=scale, cot=cot, decoding="expected")
        a = JudgeProgram(task, "naturalness", strategy, lm=new)
        b = JudgeProgram(task, "naturalness", strategy, lm=old)
        for r in records[: 4 if cot == "none" else 1]:
            pa = a.judge(r.inputs, sample_id=r.id)
            pb = b.judge(r.inputs, sample_id=r.id)
            assert pa.raw == pb.raw
            assert (pa.score is None) == (pb.score is None), (pa.parse_error, pb.parse_error)
            if pa.score is not None:
                assert abs(pa.score - pb.score) < 1e-3, (pa.distribution, pb.distribution)
