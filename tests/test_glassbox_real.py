"""Glass-box backends against real models (SmolLM2-135M, one CPU thread).

Marked slow: they load a GGUF in process (and start one llama.cpp server on loopback).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from judgeopt.glassbox import (
    Capability,
    CapabilityError,
    LiteLLMBackend,
    LlamaCppBackend,
    compute_features,
    expected_rating,
    softmax_entropy,
    softmax_variance,
)

pytestmark = pytest.mark.slow
pytest.importorskip("llama_cpp")

MESSAGES = [{"role": "user", "content": "Name the capital of France in one sentence."}]
RESPONSE = "The capital of France is Paris, a city on the Seine."


@pytest.fixture(scope="module")
def backend() -> LlamaCppBackend:
    b = LlamaCppBackend("smollm2-135m", n_threads=1, n_ctx=1024)
    try:
        b.vocab_size  # loads the model  # noqa: B018
    except Exception as e:  # noqa: BLE001 - the model package is an optional install
        pytest.skip(f"smollm2-135m is not installed: {e}")
    return b


def test_softmax_features_equal_numpy_on_the_logits_of_the_same_call(
    backend: LlamaCppBackend,
    softmax_reference: Any,
) -> None:
    """Acceptance: the full-vocabulary features equal a direct numpy computation."""
    scored = backend.score(MESSAGES, RESPONSE, full_vocabulary=True)
    assert scored.logits is not None
    assert scored.logits.shape == (len(scored.tokens), backend.vocab_size)
    ent, var, logp = softmax_reference(scored.logits)
    assert softmax_entropy(scored.logits) == pytest.approx(ent, rel=1e-9, abs=1e-12)
    assert softmax_variance(scored.logits) == pytest.approx(var, rel=1e-9, abs=1e-12)
    ids = np.asarray(scored.token_ids)
    np.testing.assert_allclose(
        scored.token_logprobs, logp[np.arange(ids.size), ids], rtol=1e-9, atol=1e-12
    )
    # The dataset API computes the same numbers from its own call.
    res = compute_features(
        [{"id": "x", "inputs": {"q": MESSAGES[0]["content"], "r": RESPONSE}}],
        backend,
        ["sentprob", "softmax_ent", "softmax_var"],
        instruction_field="q",
        response_field="r",
        progress=False,
    )
    assert res.values["softmax_ent"][0] == pytest.approx(ent, rel=1e-6)
    assert res.values["softmax_var"][0] == pytest.approx(var, rel=1e-6)
    assert res.values["sentprob"][0] == pytest.approx(
        float(np.mean(scored.token_logprobs)), rel=1e-6
    )


def test_forced_decoding_is_aligned_with_generation(backend: LlamaCppBackend) -> None:
    """Scoring a greedy answer gives back the log-probabilities it was generated with (no
    off-by-one shift, unlike the llama.cpp server's echo), and the prefix cache is exact."""
    gen = backend.generate(MESSAGES, max_tokens=12, full_logprobs=True)
    assert gen.token_ids and len(gen.tokens) == len(gen.token_ids)
    scored = backend.score(MESSAGES, gen.text, full_vocabulary=True)
    if scored.token_ids != gen.token_ids:
        pytest.skip("the greedy text does not re-tokenize to the generated tokens")
    np.testing.assert_allclose(scored.token_logprobs, gen.token_logprobs, atol=1e-4)
    assert gen.logits is not None
    np.testing.assert_allclose(scored.logits, gen.logits, atol=1e-3)
    # Greedy = argmax of each generated position's own distribution.
    assert list(np.argmax(gen.logits, axis=1)) == list(gen.token_ids)
    again = backend.score(MESSAGES, gen.text)  # all from the prefix cache
    np.testing.assert_allclose(again.token_logprobs, scored.token_logprobs, atol=1e-6)


def test_sampling_is_seeded_whatever_was_evaluated_before(backend: LlamaCppBackend) -> None:
    a = backend.generate(MESSAGES, max_tokens=8, temperature=1.0, top_k=10, seed=4)
    # Scoring a response to the same prompt leaves prompt + response in the prefix cache; the
    # next generation must continue right after the prompt, not after that response.
    backend.score(MESSAGES, RESPONSE)
    b = backend.generate(MESSAGES, max_tokens=8, temperature=1.0, top_k=10, seed=4)
    assert a.text == b.text and a.token_ids == b.token_ids
    np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, atol=1e-4)


def test_expected_rating_plumbing(backend: LlamaCppBackend) -> None:
    ask = "Rate the sentence {!r} from 1 to 10. Answer exactly: Rating: [[N]]"
    msgs = [
        {"role": "user", "content": ask.format("Rome is in Italy")},
        {"role": "assistant", "content": "Rating: [[9]]"},  # one shot: SmolLM2 copies it
        {"role": "user", "content": ask.format("Paris is the capital of France")},
    ]
    exact = expected_rating(msgs, backend, scale=10, max_tokens=24)
    top = expected_rating(msgs, backend, scale=10, max_tokens=24, top_k=20)
    if not exact.ok:
        pytest.skip(f"SmolLM2 gave no rating: {exact.text!r}")
    assert exact.distribution is not None and exact.distribution.unresolved == 0.0
    assert float(exact.distribution.probs.sum()) == pytest.approx(1.0)
    assert 1.0 <= float(exact.score or 0) <= 10.0
    # The server-like top-k reading sees the same greedy answer but not P(0 | "1").
    assert top.greedy == exact.greedy and top.method == "top_k=20" and top.ok
    assert top.distribution is not None
    if exact.greedy != 10.0:
        assert top.distribution.unresolved > 0.0


@pytest.fixture(scope="module")
def server(backend: LlamaCppBackend) -> Iterator[object]:
    from judgeopt.lm import start_llama_server

    with start_llama_server("smollm2-135m", n_threads=1, n_ctx=1024, alias="smol") as srv:
        yield srv


def test_litellm_backend_against_a_llama_cpp_server(
    server: object, tmp_path: Path, backend: LlamaCppBackend
) -> None:
    remote = LiteLLMBackend(
        server.model,
        api_base=server.api_base,  # type: ignore[attr-defined]
        cache=False,
    )
    gen = remote.generate(MESSAGES, max_tokens=8, top_logprobs=5)
    assert gen.text and len(gen.tokens) == gen.token_logprobs.size
    assert gen.top_logprobs is not None and all(len(t) >= 1 for t in gen.top_logprobs)
    # The server's greedy tokens and logprobs agree with the in-process model.
    local = backend.generate(MESSAGES, max_tokens=8)
    if local.text == gen.text:
        np.testing.assert_allclose(gen.token_logprobs, local.token_logprobs, atol=0.05)
    with pytest.raises(CapabilityError) as info:
        remote.score(MESSAGES, RESPONSE)
    assert info.value.capability is Capability.FORCED_DECODING


def test_token_texts_of_long_tokens(backend: LlamaCppBackend) -> None:
    """Tokens longer than llama-cpp-python's 32-byte detokenize buffer keep their text."""
    dashes = "-" * 64
    ids = backend.tokenize(dashes)
    assert len(ids) == 1  # one SmolLM2 token
    texts = backend.token_texts()
    assert texts[ids[0]] == dashes
    assert sum(len(t.encode()) > 32 for t in texts) >= 40
    assert texts[backend.tokenize("Paris")[0]] == "Paris"
