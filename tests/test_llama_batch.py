"""Batched decoding of the embedded model (``LlamaCppLM(parallel=N)``, the batch engine of
``judgeopt.lm._llama_batch``) on real models.

SmolLM2 (fast): responses do not depend on what else was in flight (one at a time, all at
once, another order, a fresh engine), shared prompt blocks, the routing of non-greedy calls,
errors, the cache key, and the decoding rules of ``DecodingSequence`` with scripted logits.
Qwen2.5-Coder-0.5B (slow): the same determinism where llama.cpp's kernels do depend on the
batch layout (tiled quantised matrix products), and ``expected`` ratings of real judge
prompts that agree with the one-at-a-time path up to floating-point rounding.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from judgeopt.evaluate import default_threads
from judgeopt.lm import LlamaCppLM, LMContextOverflow, make_lm
from judgeopt.lm._llama_batch import BLOCK, BatchEngine, batch_width
from judgeopt.lm._llama_decode import (
    DecodingSequence,
    Sampling,
    completion_budget,
    sample_token,
)

llama_cpp = pytest.importorskip("llama_cpp")

SHARED = "You are a careful judge of short restaurant dialogues. " * 10
WORDS = ["like", "hate", "visited", "booked", "found", "left"]


def _messages(i: int) -> list[dict[str, str]]:
    prefix = SHARED if i % 2 == 0 else "Judge this. "
    return [
        {
            "role": "user",
            "content": f"{prefix}Rate from 1 to 10 how natural this is: "
            f"'I {WORDS[i % len(WORDS)]} the place by the river.' "
            "Answer with [[n]] and one sentence.",
        }
    ]


def _lm(model: str, **kw: Any) -> LlamaCppLM:
    try:
        lm = LlamaCppLM(model, cache=False, n_threads=2, **kw)
        lm.load()
    except Exception as e:  # noqa: BLE001 - the model packages are an optional install
        pytest.skip(f"{model} is not available: {e}")
    return lm


@pytest.fixture(scope="module")
def smol() -> LlamaCppLM:
    return _lm("smollm2-135m", parallel=4)


def _engine(lm: LlamaCppLM, parallel: int = 4) -> BatchEngine:
    handle = lm._get_handle()
    return BatchEngine(
        handle.llama,
        parallel=parallel,
        n_ctx=handle.n_ctx,
        n_threads=lm.n_threads,
        lock=handle.lock,
    )


def _run(
    engine: BatchEngine,
    indices: list[int],
    *,
    at_once: bool,
    top: int | None = 3,
    max_tokens: int = 12,
) -> dict[int, dict[str, Any]]:
    """Responses by prompt index, the requests submitted all at once or one after another."""
    out: dict[int, dict[str, Any]] = {}
    if at_once:
        futures = {
            i: engine.submit(_messages(i), max_tokens=max_tokens, top_logprobs=top) for i in indices
        }
        out = {i: f.result(timeout=300) for i, f in futures.items()}
    else:
        for i in indices:
            out[i] = engine.submit(_messages(i), max_tokens=max_tokens, top_logprobs=top).result(
                timeout=300
            )
    for r in out.values():
        r.pop("_seconds", None)
        r.pop("id", None)
        r.pop("created", None)
    return out


def _check_deterministic(lm: LlamaCppLM, n: int = 6) -> None:
    # NOTE: every engine is closed: an idle one keeps a llama.cpp context that slows the
    # other contexts of the process (about 3x, measured), so later tests would crawl.
    first, second = _engine(lm), _engine(lm)
    try:
        one = _run(first, list(range(n)), at_once=False)
        together = _run(first, list(range(n)), at_once=True)
        backwards = _run(second, list(range(n))[::-1], at_once=True)
    finally:
        first.close()
        second.close()
    for i in range(n):
        assert one[i] == together[i], f"prompt {i}: all at once differs from one at a time"
        assert one[i] == backwards[i], f"prompt {i}: another order differs"


def test_batch_width_rounds_up_to_whole_kernel_tiles() -> None:
    assert [batch_width(p) for p in (1, 2, 4, 5, 8, 9)] == [4, 4, 4, 8, 8, 12]
    with pytest.raises(ValueError, match="parallel"):
        BatchEngine(object(), parallel=0, n_ctx=512, n_threads=1, lock=threading.Lock())


def test_responses_do_not_depend_on_what_else_is_in_flight(smol: LlamaCppLM) -> None:
    _check_deterministic(smol)


def test_prompt_blocks_are_shared_and_the_answer_is_the_same(smol: LlamaCppLM) -> None:
    engine = _engine(smol)
    a = _run(engine, [0], at_once=False)[0]
    shared_before, evaluated = engine.prompt_tokens_shared, engine.prompt_tokens_evaluated
    b = _run(engine, [0], at_once=False)[0]
    # The same prompt again: held whole (its cells and last logits), nothing evaluated.
    n_prompt = a["usage"]["prompt_tokens"]
    assert n_prompt > 2 * BLOCK
    assert engine.prompt_tokens_shared - shared_before == n_prompt
    assert engine.prompt_tokens_evaluated == evaluated and engine.prompts_held == 1
    assert a == b
    # A prompt with the same first blocks (another item of the same judge) shares them: the
    # whole blocks, its last call evaluated.
    before, evaluated = engine.prompt_tokens_shared, engine.prompt_tokens_evaluated
    c = _run(engine, [2], at_once=False)[2]
    assert engine.prompt_tokens_shared > before and engine.prompts_held == 1
    shared = engine.prompt_tokens_shared - before
    assert engine.prompt_tokens_evaluated - evaluated == c["usage"]["prompt_tokens"] - shared
    # Another answer of the held prompt (sampled, other length, logprobs): the same as from
    # an engine that evaluates the prompt.
    asks: list[dict[str, Any]] = [
        {"max_tokens": 9, "top_logprobs": None, "sampling": Sampling(1.0, seed=3)},
        {"max_tokens": 5, "top_logprobs": 2},
    ]
    held = [engine.submit(_messages(2), **kw).result(timeout=300) for kw in asks]
    assert engine.prompts_held == 3
    engine.close()
    evaluated_again = []
    for kw in asks:  # a fresh engine each: the prompt evaluated, not held
        fresh = _engine(smol)
        try:
            evaluated_again.append(fresh.submit(_messages(2), **kw).result(timeout=300))
        finally:
            fresh.close()
        assert fresh.prompts_held == 0
    for r in held + evaluated_again:
        r.pop("_seconds", None)
        r.pop("id", None)
        r.pop("created", None)
    assert held == evaluated_again


def test_the_lm_batches_concurrent_greedy_calls(smol: LlamaCppLM) -> None:
    engine = smol._engine(smol._get_handle())
    steps = engine.steps
    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda i: smol(messages=_messages(i), max_tokens=8), range(4)))
    assert all(isinstance(o[0], str) and o[0] for o in outs)
    # Four answers of up to 8 tokens decoded together take about 8 steps, not 4 x 8.
    assert engine.steps - steps <= 12
    assert smol.preferred_threads == 4 and default_threads(smol) == 4


def test_the_lm_reports_the_prompt_tokens_it_computed_and_reused(smol: LlamaCppLM) -> None:
    """``prompt_token_ids`` is the prompt the engine evaluates (its length is the usage), and
    ``prompt_reuse`` counts what the engine computed and what it copied from another slot:
    the same prompt twice is computed once."""
    messages = _messages(0)
    ids = smol.prompt_token_ids(messages)
    assert len(ids) == smol.count_prompt_tokens(messages) > 2 * BLOCK
    smol(messages=messages, max_tokens=4)  # the engine exists from the first batched call
    before, tokens = smol.prompt_reuse(), smol.stats().prompt_tokens
    assert before is not None
    smol(messages=messages, max_tokens=4)
    after = smol.prompt_reuse()
    assert after is not None and smol.stats().prompt_tokens - tokens == len(ids)
    # Held whole by the slot that answered it: nothing evaluated.
    assert after["shared"] - before["shared"] == len(ids)
    assert after["evaluated"] == before["evaluated"] and after["held"] == before["held"] + 1
    one_at_a_time = LlamaCppLM("smollm2-135m", cache=False, n_threads=2, parallel=1)
    assert one_at_a_time.prompt_reuse() is None


def test_the_lm_reports_what_its_engine_spent(smol: LlamaCppLM) -> None:
    """``batch_work``: the engine's steps, the seconds in them and in computing prompts, the
    prompt tokens computed (``prompt_reuse``'s count) and its width; a call that writes
    adds steps and step seconds, a new prompt adds prompt seconds; ``None`` one call at a
    time."""
    smol(messages=_messages(0), max_tokens=2)  # the engine exists from the first batched call
    before = smol.batch_work()
    assert before is not None and before["width"] >= smol.parallel
    fresh = [{"role": "user", "content": "Rate from 1 to 10: 'A clock counts its own steps.'"}]
    smol(messages=fresh, max_tokens=6)  # a prompt no slot holds
    after, reuse = smol.batch_work(), smol.prompt_reuse()
    assert after is not None and reuse is not None
    assert after["evaluated"] == reuse["evaluated"] > before["evaluated"]
    assert after["prompt_seconds"] > before["prompt_seconds"]
    assert after["steps"] > before["steps"] and after["step_seconds"] > before["step_seconds"]
    one_at_a_time = LlamaCppLM("smollm2-135m", cache=False, n_threads=2, parallel=1)
    assert one_at_a_time.batch_work() is None


def test_the_counted_prompt_tokens_are_what_the_engine_computes() -> None:
    """``computed_prompt_tokens`` (what a cost plan times calls on) counts, from the prompts
    alone, the tokens a fresh engine evaluates for each call made one after another: a call
    takes the first free slot, so only the previous prompt's whole blocks are reused."""
    lm = _lm("smollm2-135m", parallel=3)  # an engine of its own, empty
    prompts = [_messages(i) for i in (0, 1, 2, 0, 3, 4)]
    ids = [lm.prompt_token_ids(m) for m in prompts]
    done = []
    for messages in prompts:
        before = lm.prompt_reuse() or {"evaluated": 0}
        lm(messages=messages, max_tokens=2)
        after = lm.prompt_reuse()
        assert after is not None
        done.append(after["evaluated"] - before["evaluated"])
    assert done == lm.computed_prompt_tokens(ids, in_flight=1)
    whole = (len(ids[3]) - 1) // BLOCK * BLOCK
    assert whole > 0 and done[3] == len(ids[3]) - whole and done[2] == len(ids[2])
    # In flight together, the slots hold the last three prompts: the third reuses the first.
    assert lm.computed_prompt_tokens(ids)[2] == len(ids[2]) - whole
    # One call at a time, llama.cpp keeps the previous prompt's prefix (any length) only.
    single = LlamaCppLM("smollm2-135m", cache=False, n_threads=2, parallel=1)

    def common(a: list[int], b: list[int]) -> int:
        return next((k for k, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), 0)

    assert 0 < common(ids[1], ids[2]) < BLOCK
    assert single.computed_prompt_tokens(ids[:3])[2] == len(ids[2]) - common(ids[1], ids[2])
    assert single.computed_prompt_tokens([ids[2], ids[0]])[1] == len(ids[0]) - common(
        ids[2], ids[0]
    )


def test_structured_and_penalised_calls_go_one_at_a_time(smol: LlamaCppLM) -> None:
    engine = smol._engine(smol._get_handle())
    steps = engine.steps
    smol(messages=_messages(1), max_tokens=4, repeat_penalty=1.3)
    smol(messages=_messages(1), max_tokens=4, temperature=0.7, typical_p=0.5)
    assert engine.steps == steps
    assert smol._batchable({"temperature": 0.0, "max_tokens": 4})
    assert smol._batchable({"temperature": 0.5, "seed": 1})
    assert not smol._batchable({"temperature": 0.5, "logprobs": True, "top_logprobs": 2})
    assert not smol._batchable({"response_format": {"type": "json_object"}})
    assert not smol._batchable({"presence_penalty": 0.5})
    assert not smol._batchable({"temperature": 0.5, "typical_p": 0.9})
    assert not smol.copy(parallel=1)._batchable({"temperature": 0.0})


def test_sampled_calls_are_batched_and_depend_on_their_seed_only(smol: LlamaCppLM) -> None:
    engine = smol._engine(smol._get_handle())

    def sample(i: int, seed: int) -> str:
        out = smol(messages=_messages(i), max_tokens=12, temperature=1.0, seed=seed)
        return str(out[0])

    steps = engine.steps
    alone = [sample(0, seed) for seed in range(4)]
    assert engine.steps > steps  # served by the batch engine
    with ThreadPoolExecutor(4) as pool:
        # The same requests among others (other prompts, other seeds), in another order.
        mixed = list(
            pool.map(lambda a: sample(*a), [(1, 9), (0, 3), (2, 7), (0, 2), (0, 1), (3, 5), (0, 0)])
        )
    assert [mixed[6], mixed[4], mixed[3], mixed[1]] == alone
    # Different seeds draw different answers (temperature 1 over 12 tokens).
    assert len(set(alone)) >= 2


def test_sample_token_follows_the_default_sampler_chain() -> None:
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    rng = np.random.default_rng(0)

    def freq(sampling: Sampling, n: int = 20000) -> np.ndarray:
        draws = [sample_token(logits, sampling, rng) for _ in range(n)]
        return np.bincount(draws, minlength=4) / n

    plain = Sampling(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    assert np.allclose(freq(plain), [0.5, 0.3, 0.15, 0.05], atol=0.015)
    # top-k 2: the two most likely tokens, renormalised.
    assert np.allclose(
        freq(Sampling(1.0, top_k=2, top_p=1.0, min_p=0.0)), [0.625, 0.375, 0, 0], atol=0.015
    )
    # top-p 0.7: 0.5 does not reach it, 0.5 + 0.3 does: the first two tokens.
    assert freq(Sampling(1.0, top_k=0, top_p=0.7, min_p=0.0))[2:].sum() == 0
    # min-p 0.25: tokens at least a quarter as likely as the best (0.125): three.
    f = freq(Sampling(1.0, top_k=0, top_p=1.0, min_p=0.25))
    assert f[3] == 0 and f[2] > 0.1
    # The temperature sharpens after the filters: near 0 it is the argmax.
    assert freq(Sampling(0.01, top_k=0, top_p=1.0, min_p=0.0), 200)[0] == 1.0
    # The same seed, the same draws.
    a = Sampling(1.0, seed=5)
    assert [sample_token(logits, a, a.generator()) for _ in range(3)] == [
        sample_token(logits, a, a.generator()) for _ in range(3)
    ]
    with pytest.raises(ValueError, match="temperature > 0"):
        Sampling(temperature=0.0)


def test_cache_keys_separate_the_batched_path() -> None:
    one = LlamaCppLM("smollm2-135m", cache=False)
    four = LlamaCppLM("smollm2-135m", cache=False, parallel=4)
    five = LlamaCppLM("smollm2-135m", cache=False, parallel=5)
    assert one._cache_identity()[1] == "in-process:llama.cpp"
    assert four._cache_identity()[1] == "in-process:llama.cpp:batch4"
    assert five._cache_identity()[1] == "in-process:llama.cpp:batch8"
    assert "parallel=4" in repr(four)
    assert "parallel" not in four.dump_state()


def test_parallel_is_checked_and_local_only() -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="`parallel` argument of LlamaCppLM"):
            LlamaCppLM("smollm2-135m", parallel=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="parallel"):
        make_lm("openai/x", api_base="http://127.0.0.1:9/v1", parallel=4)
    assert make_lm("local:smollm2-135m", cache=False, parallel=2).parallel == 2


def test_a_prompt_that_does_not_fit_fails_alone() -> None:
    lm = _lm("smollm2-135m", parallel=4, n_ctx=256)
    long = [{"role": "user", "content": "word " * 400}]
    with ThreadPoolExecutor(2) as pool:
        bad = pool.submit(lm, messages=long, max_tokens=4)
        good = pool.submit(lm, messages=_messages(1), max_tokens=4)
        with pytest.raises(LMContextOverflow, match="context window"):
            bad.result()
        assert good.result()[0]


def test_a_failed_evaluation_fails_its_requests_and_the_engine_goes_on(
    smol: LlamaCppLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _engine(smol)
    ok = _run(engine, [1], at_once=False)[1]
    calls = {"n": 0}
    original = BatchEngine._decode

    def flaky(self: BatchEngine, columns: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("llama_decode returned -3")
        original(self, columns)

    monkeypatch.setattr(BatchEngine, "_decode", flaky)
    futures = [engine.submit(_messages(i), max_tokens=6, top_logprobs=3) for i in (1, 3)]
    errors = [f.exception(timeout=300) for f in futures]
    assert any(isinstance(e, RuntimeError) and "returned -3" in str(e) for e in errors)
    monkeypatch.setattr(BatchEngine, "_decode", original)
    again = _run(engine, [1], at_once=False)[1]
    assert again == ok
    engine.close()
    with pytest.raises(RuntimeError, match="closed"):
        engine.submit(_messages(1), max_tokens=2, top_logprobs=None)


def test_greedy_sequence_rules_with_scripted_logits(smol: LlamaCppLM) -> None:
    llama = smol._get_handle().llama
    n_vocab = llama.n_vocab()
    words = llama.tokenize(b" so [[7]] and more", add_bos=False)

    def row(token: int) -> np.ndarray:
        r = np.full(n_vocab, -5.0, dtype=np.single)
        r[token] = 5.0
        return r

    prompt = llama.tokenize(b"Rate it:", add_bos=True)
    # A stop string cuts the text before it; the logprobs keep every generated token, the one
    # that completed the stop string included (as llama-cpp-python's logits_all path does).
    seq = DecodingSequence(llama, prompt, ["]]"], 50, 2)
    for t in words:
        if seq.step(row(t)) is None:
            break
    assert seq.done and seq.finish == "stop" and seq.text == " so [[7"
    assert seq.content is not None
    assert "".join(e["token"] for e in seq.content).startswith(" so [[7]]")
    assert len(seq.content) == len(seq.tokens)
    assert all(len(e["top_logprobs"]) >= 1 for e in seq.content)
    # The budget ends a completion with finish_reason "length"; no logprobs without a top-k.
    seq = DecodingSequence(llama, prompt, [], 2, None)
    assert seq.step(row(words[0])) == words[0]
    assert seq.step(row(words[1])) is None
    response = seq.response("m")
    assert response["choices"][0]["finish_reason"] == "length"
    assert response["choices"][0]["logprobs"] is None
    assert response["usage"]["completion_tokens"] == 2
    # An end-of-generation token stops without being part of the text.
    eos = int(llama.token_eos())
    seq = DecodingSequence(llama, prompt, [], 10, None)
    assert seq.step(row(eos)) is None and seq.finish == "stop" and seq.text == ""
    with pytest.raises(ValueError, match="greedy decoding only"):
        DecodingSequence(llama, prompt, [], 10, 2, Sampling(1.0))
    with pytest.raises(ValueError, match="exceed context window"):
        completion_budget(600, 512, 4)
    assert completion_budget(500, 512, None) == 12
    assert completion_budget(100, 512, 64) == 64


def test_a_greedy_loop_is_stopped_once_its_block_is_written_three_times(smol: LlamaCppLM) -> None:
    """:func:`judgeopt.lm.ends_in_loop` ends a greedy completion that repeats one block
    verbatim (finish ``length``, ``looped``); a phrase recurring between other words is no
    loop, and a sampled completion is never stopped for looping."""
    from judgeopt.lm import LOOP_TIMES, LOOP_TOKENS, ends_in_loop

    llama = smol._get_handle().llama
    n_vocab = llama.n_vocab()
    block = llama.tokenize(b" the answer is clear and the text is", add_bos=False)
    assert len(block) * LOOP_TIMES >= LOOP_TOKENS  # the block is long enough to count

    def row(token: int) -> np.ndarray:
        r = np.full(n_vocab, -5.0, dtype=np.single)
        r[token] = 5.0
        return r

    prompt = llama.tokenize(b"Rate it:", add_bos=True)
    seq = DecodingSequence(llama, prompt, [], 200, 2)
    fed = 0
    for t in block * 6:
        fed += 1
        if seq.step(row(t)) is None:
            break
    assert seq.looped and seq.done and seq.finish == "length"
    assert fed == len(seq.tokens) == LOOP_TIMES * len(block)
    # the same tokens with another word between the repeats: no loop, the budget ends it
    other = llama.tokenize(b" so", add_bos=False)
    varied = [t for k in range(6) for t in [*block, *other * (k + 1)]]
    seq = DecodingSequence(llama, prompt, [], len(varied), None)
    assert all(seq.step(row(t)) is not None for t in varied[:-1])
    assert seq.step(row(varied[-1])) is None and not seq.looped
    # sampled: never stopped for looping (a loop can be left at temperature > 0)
    seq = DecodingSequence(llama, prompt, [], 200, None, Sampling(1.0, seed=0))
    assert not seq.stop_loops
    assert not ends_in_loop(block * 2) and ends_in_loop(block * 3)
    assert not ends_in_loop(block[:2] * 3)  # shorter than LOOP_TOKENS in all


@pytest.mark.slow
def test_qwen_batched_is_deterministic_and_agrees_with_one_at_a_time(shared_data: Path) -> None:
    from judgeopt.data import load_records
    from judgeopt.evaluate import evaluate
    from judgeopt.judge import JudgeProgram, baseline_strategy, load_task

    lm = _lm("qwen2.5-coder-0.5b", parallel=4)
    _check_deterministic(lm, n=6)
    task = load_task("sfres")
    records = load_records(shared_data / "sfres" / "valid.jsonl", limit=8)
    strategy = baseline_strategy(task).replace(scale=10, cot="none", decoding="expected")
    one = evaluate(
        JudgeProgram(task, "naturalness", strategy, lm=lm.copy(parallel=1)),
        records,
        threads=1,
        progress=False,
    )
    batched = evaluate(JudgeProgram(task, "naturalness", strategy, lm=lm), records, progress=False)
    assert batched.parse_failures == one.parse_failures == 0
    diffs = [
        abs(float(a.score) - float(b.score))  # type: ignore[arg-type]
        for a, b in zip(one.items, batched.items, strict=True)
    ]
    # The same ratings up to floating-point rounding (the two paths split the work
    # differently; benchmarks/batch_decode.py measures the differences on more items). The
    # llama.cpp build of 2026-11-27 (AVX2, no AMX) puts one of these 8 items 0.455 apart, on
    # the base code too, where earlier builds stayed under 0.3; a build for a CPU with AVX
    # and FMA but no AVX2 (AMD EPYC, 2026-12-03) gives a mean difference of 0.125 (largest
    # 0.367). The bounds follow the builds; a batch that mixed up its sequences' rows would
    # move ratings by points, not tenths.
    assert max(diffs) < 0.5, diffs
    assert float(np.mean(diffs)) < 0.2, diffs
