"""The transformers glass-box backend (CPU torch): attention weights and a second full-vocabulary
backend, against a real model.

The real-model tests load SmolLM2-135M-Instruct (the registry's Q4_1 GGUF, dequantised by
transformers) once per module, run with one thread and are marked slow. They skip with a
reason when the ``transformers`` extra (``pip install 'judgeopt[transformers]'``) or the model
is missing; the comparisons with llama.cpp also need llama-cpp-python.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np
import pytest

import judgeopt.glassbox as gb
from judgeopt.glassbox import (
    Capability,
    CapabilityError,
    LiteLLMBackend,
    LlamaCppBackend,
    TransformersBackend,
)

HAS_EXTRA = all(
    importlib.util.find_spec(m) is not None for m in ("torch", "transformers", "accelerate", "gguf")
)
needs_extra = pytest.mark.skipif(
    not HAS_EXTRA,
    reason="the transformers extra is not installed: pip install 'judgeopt[transformers]'",
)
needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed"
)

MESSAGES = [{"role": "user", "content": "Name the capital of France in one sentence."}]
RESPONSE = "The capital of France is Paris, a city on the Seine."
MORE_MESSAGES = [
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi there!  \n\nTwo  spaces, émojis 🙂 and <|im_end|> text"},
    ],
    [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a reference"},
        {"role": "user", "content": "q"},
    ],
]


# ------------------------------------------------------------------- without loading a model


@pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("transformers", "accelerate", "gguf")),
    reason="simulates torch alone missing: needs the rest of the transformers extra installed",
)
def test_missing_extra_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    with pytest.raises(ImportError, match=r"torch: pip install 'judgeopt\[transformers\]'"):
        TransformersBackend("smollm2-135m")
    with pytest.raises(ImportError, match="judgeopt.transformers"):
        gb.make_backend("local:smollm2-135m", backend="transformers")


def test_other_backends_asking_for_attention_name_this_backend() -> None:
    for backend in (
        LlamaCppBackend("smollm2-135m", n_threads=1),  # nothing is loaded
        LiteLLMBackend("openai/x", api_base="http://127.0.0.1:9/v1", cache=False),
    ):
        with pytest.raises(CapabilityError) as info:
            backend.attentions(MESSAGES, RESPONSE)
        err = info.value
        assert err.capability is Capability.ATTENTION and err.backend == backend.name
        assert err.available_in == ("transformers",)
        assert "TransformersBackend" in str(err) and "backend='transformers'" in str(err)
        with pytest.raises(CapabilityError, match="attn_ent_min"):
            gb.compute_features(
                [{"id": "x", "inputs": {"q": "q", "r": "r"}}],
                backend,
                ["attn_ent_min"],
                instruction_field="q",
                response_field="r",
                progress=False,
            )


@needs_extra
def test_construction_validates_and_declares_capabilities(tmp_path: Any) -> None:
    backend = gb.make_backend(
        "local:smollm2-135m", backend="transformers", n_threads=1, dtype="bfloat16", n_ctx=512
    )
    assert isinstance(backend, TransformersBackend)
    assert backend.model == "local:smollm2-135m" and backend.dtype == "bfloat16"
    assert backend.capabilities == frozenset(Capability) and backend.n_ctx == 512
    assert gb.make_backend("local:smollm2-135m", backend="transformers").dtype == "float32"
    no_attn = TransformersBackend("smollm2-135m", attention=False)
    assert Capability.ATTENTION not in no_attn.capabilities
    with pytest.raises(CapabilityError, match="attention=False"):
        no_attn.attentions(MESSAGES, RESPONSE)  # refused before anything is loaded
    with pytest.raises(ValueError, match="`dtype`"):
        TransformersBackend("smollm2-135m", dtype="float16")
    with pytest.raises(ValueError, match="`n_ctx`"):
        TransformersBackend("smollm2-135m", n_ctx=4)
    with pytest.raises(ValueError, match="`n_threads`"):
        TransformersBackend("smollm2-135m", n_threads=0)
    with pytest.raises(ValueError, match="local model name"):
        TransformersBackend("no-such-model")
    with pytest.raises(ValueError, match="config.json"):
        TransformersBackend(str(tmp_path))
    not_gguf = tmp_path / "x.gguf"
    not_gguf.write_bytes(b"nope")
    from judgeopt.lm import LocalModelError

    with pytest.raises(LocalModelError, match="not a GGUF"):
        TransformersBackend(str(not_gguf))


# ----------------------------------------------------------------------- with SmolLM2-135M


@pytest.fixture(scope="module")
def backend() -> TransformersBackend:
    if not HAS_EXTRA:
        pytest.skip("the transformers extra is not installed: pip install 'judgeopt[transformers]'")
    b = TransformersBackend("smollm2-135m", n_threads=1, n_ctx=1024)
    try:
        b.vocab_size  # loads the model (about 20-40 s)  # noqa: B018
    except Exception as e:  # noqa: BLE001 - the model package is an optional install
        pytest.skip(f"smollm2-135m could not be loaded: {e}")
    return b


@pytest.fixture(scope="module")
def llama() -> LlamaCppBackend:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    b = LlamaCppBackend("smollm2-135m", n_threads=1, n_ctx=1024)
    try:
        b.vocab_size  # noqa: B018
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"smollm2-135m is not installed: {e}")
    return b


def _plain_forward(backend: TransformersBackend, ids: list[int]) -> Any:
    """One forward pass of the raw transformers model over ``ids``: no cache, no slicing."""
    import torch

    with torch.inference_mode():
        return backend._get()(input_ids=torch.tensor([ids]), output_attentions=True)


@pytest.mark.slow
def test_softmax_features_equal_numpy_on_the_logits_of_the_same_pass(
    backend: TransformersBackend,
    softmax_reference: Any,
) -> None:
    """Acceptance: Softmax-Ent / Softmax-Var equal numpy on the logits of the same pass, and
    those logits are the rows that predicted each response token."""
    scored = backend.score(MESSAGES, RESPONSE, full_vocabulary=True, top_logprobs=5)
    assert scored.logits is not None and scored.top_logprobs is not None
    n = len(scored.tokens)
    assert scored.logits.shape == (n, backend.vocab_size) and scored.logits.dtype == np.float32
    ent, var, logp = softmax_reference(scored.logits)
    assert gb.softmax_entropy(scored.logits) == pytest.approx(ent, rel=1e-9, abs=1e-12)
    assert gb.softmax_variance(scored.logits) == pytest.approx(var, rel=1e-9, abs=1e-12)
    ids = np.asarray(scored.token_ids)
    np.testing.assert_allclose(
        scored.token_logprobs, logp[np.arange(n), ids], rtol=1e-9, atol=1e-12
    )
    np.testing.assert_allclose(scored.top_logprobs, -np.sort(-logp, axis=1)[:, :5], atol=1e-9)
    # The rows are the positions before each response token of a plain full-sequence pass.
    prompt = backend.prompt_ids(MESSAGES)
    assert scored.prompt_tokens == len(prompt)
    plain = _plain_forward(backend, [*prompt, *scored.token_ids]).logits[0].numpy()
    np.testing.assert_allclose(
        scored.logits, plain[len(prompt) - 1 : len(prompt) + n - 1], atol=1e-3
    )
    # The dataset API computes the same numbers from its own call.
    res = gb.compute_features(
        [{"id": "x", "inputs": {"q": MESSAGES[0]["content"], "r": RESPONSE}}],
        backend,
        ["sentprob", "softmax_ent", "softmax_var"],
        instruction_field="q",
        response_field="r",
        progress=False,
    )
    assert res.backend == "transformers"
    assert res.values["softmax_ent"][0] == pytest.approx(ent, rel=1e-6)
    assert res.values["softmax_var"][0] == pytest.approx(var, rel=1e-6)
    assert res.values["sentprob"][0] == pytest.approx(
        float(np.mean(scored.token_logprobs)), rel=1e-6
    )


@pytest.mark.slow
def test_attention_entropy_equals_numpy_on_the_returned_weights(
    backend: TransformersBackend,
) -> None:
    """Acceptance: AttnEnt-Min / AttnEnt-Avg equal numpy on the returned weights, whose rows
    are distributions over everything before each response token."""
    weights = backend.attentions(MESSAGES, RESPONSE)
    prompt = backend.prompt_ids(MESSAGES)
    n_resp = len(backend.tokenize(RESPONSE))
    n_pos = len(prompt) + n_resp - 1
    assert weights.shape == (backend.n_layers, backend.n_heads, n_resp, n_pos)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)
    assert weights.min() >= 0.0
    for t in range(n_resp):  # causal: row t sees the prompt and response tokens < t only
        assert np.all(weights[:, :, t, len(prompt) + t :] == 0.0)
        assert np.all(weights[:, :, t, : len(prompt) + t].sum(axis=-1) > 0.99)
    # The same rows as a plain pass over prompt + response (no cache, no chunking).
    plain = _plain_forward(backend, [*prompt, *backend.tokenize(RESPONSE)])
    full = np.stack([a[0].numpy() for a in plain.attentions])
    np.testing.assert_allclose(weights, full[:, :, len(prompt) - 1 : n_pos, :n_pos], atol=1e-5)

    a = weights.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(a > 0, a * np.log(a), 0.0)
    per_head = np.array(
        [
            [-terms[layer, head].sum(axis=1).mean() for head in range(a.shape[1])]
            for layer in range(a.shape[0])
        ]
    )
    np.testing.assert_allclose(gb.attention_entropy(weights), per_head, rtol=1e-9)
    res = gb.compute_features(
        [{"id": "x", "inputs": {"q": MESSAGES[0]["content"], "r": RESPONSE}}],
        backend,
        ["attn_ent_min", "attn_ent_avg"],
        instruction_field="q",
        response_field="r",
        progress=False,
    )
    assert res.values["attn_ent_min"][0] == pytest.approx(per_head.min(), rel=1e-6, abs=1e-9)
    assert res.values["attn_ent_avg"][0] == pytest.approx(per_head.mean(), rel=1e-6)
    assert 0.0 <= per_head.min() < per_head.mean() < np.log(n_pos)
    empty = backend.attentions(MESSAGES, "")
    assert empty.shape == (backend.n_layers, backend.n_heads, 0, len(prompt))
    assert np.all(np.isnan(gb.attention_entropy(empty)))


@pytest.mark.slow
def test_generation_is_aligned_with_forced_decoding_and_seeded(
    backend: TransformersBackend,
) -> None:
    gen = backend.generate(MESSAGES, max_tokens=12, full_logprobs=True, top_logprobs=3)
    assert gen.token_ids and gen.logits is not None and gen.top_logprobs is not None
    assert list(np.argmax(gen.logits, axis=1)) == list(gen.token_ids)  # greedy
    assert gen.text == "".join(gen.tokens) and gen.offsets[0] == 0
    assert max(gen.top_logprobs[0].values()) == pytest.approx(gen.token_logprobs[0])
    scored = backend.score(MESSAGES, gen.text, full_vocabulary=True)
    if scored.token_ids != gen.token_ids:
        pytest.skip("the greedy text does not re-tokenize to the generated tokens")
    np.testing.assert_allclose(scored.token_logprobs, gen.token_logprobs, atol=1e-4)
    assert scored.logits is not None
    np.testing.assert_allclose(scored.logits, gen.logits, atol=1e-3)
    # next_logprobs agrees with the generation's first distribution.
    first = backend.next_logprobs(list(gen.prompt_ids or ()))
    assert first.shape == (backend.vocab_size,) and np.exp(first).sum() == pytest.approx(1.0)
    assert float(first[gen.token_ids[0]]) == pytest.approx(gen.token_logprobs[0], abs=1e-4)
    # Sampling is seeded, whatever the prefix cache holds.
    a = backend.generate(MESSAGES, max_tokens=8, temperature=1.0, top_k=10, seed=4)
    backend.score(MESSAGES, RESPONSE)
    b = backend.generate(MESSAGES, max_tokens=8, temperature=1.0, top_k=10, seed=4)
    assert a.text == b.text and a.token_ids == b.token_ids
    np.testing.assert_allclose(a.token_logprobs, b.token_logprobs, atol=1e-4)


@pytest.mark.slow
def test_context_overflow_is_an_lm_error(backend: TransformersBackend) -> None:
    from judgeopt.lm import LMContextOverflow, LMError

    small = TransformersBackend("smollm2-135m", n_threads=1, n_ctx=16)
    small._net, small._tok = backend._get(), backend._tok  # share the loaded model
    small._bos_eos, small._eog = backend._bos_eos, backend._eog
    with pytest.raises(LMContextOverflow, match="n_ctx"):
        small.score(MESSAGES, RESPONSE)
    res = gb.compute_features(
        [{"id": "x", "inputs": {"q": "q", "r": RESPONSE}}],
        small,
        ["sentprob"],
        instruction_field="q",
        response_field="r",
        progress=False,
    )
    assert np.isnan(res.values["sentprob"][0]) and "LMContextOverflow" in res.errors["x"]
    assert issubclass(LMContextOverflow, LMError)


@pytest.mark.slow
@needs_llama
def test_prompt_tokens_vocabulary_and_stops_equal_llama_cpp(
    backend: TransformersBackend,
    llama: LlamaCppBackend,
) -> None:
    """Same GGUF, same chat template: the same prompt ids, tokens, token texts and EOG set."""
    for messages in [MESSAGES, *MORE_MESSAGES]:
        assert backend.prompt_ids(messages) == llama.prompt_ids(messages)
    for text in [RESPONSE, " leading space", "émojis 🙂\n\n  x", "<|im_end|> literal", "10"]:
        assert backend.tokenize(text) == llama.tokenize(text)
    assert backend.vocab_size == llama.vocab_size
    assert backend.token_texts() == llama.token_texts()
    ours = {i for i in range(backend.vocab_size) if i in backend._eog}
    theirs = {i for i in range(llama.vocab_size) if llama._is_eog(i)}
    assert ours == theirs


@pytest.mark.slow
@needs_llama
def test_forced_decoding_agrees_with_llama_cpp_on_the_same_gguf(
    backend: TransformersBackend,
    llama: LlamaCppBackend,
) -> None:
    """Dequantised (transformers, float32) vs quantised (llama.cpp) arithmetic on the same
    Q4_1 weights. The weights are the same numbers, but llama.cpp rounds the activations to
    8 bits (Q8_1) for its Q4_1 dot products and sums in another order, and the differences
    compound over 30 layers: they look like noise, not a shift. Measured here on three
    responses: Pearson 0.9987-0.9995, max |diff| 0.27-0.42 nats, mean |diff| 0.06-0.09 (this
    one: 0.9993, 0.32, 0.07); Qwen2.5-Coder-0.5B Q4_K_M: 0.9995-0.9999, 0.15-0.28,
    0.04-0.05. The bounds are about twice the worst measured value, so that an off-by-one
    alignment (Pearson far below 0.9) or a wrong template fails while CPU differences pass."""
    ours = backend.score(MESSAGES, RESPONSE, full_vocabulary=True)
    theirs = llama.score(MESSAGES, RESPONSE, full_vocabulary=True)
    assert ours.token_ids == theirs.token_ids
    diff = np.abs(ours.token_logprobs - theirs.token_logprobs)
    assert np.corrcoef(ours.token_logprobs, theirs.token_logprobs)[0, 1] > 0.995
    assert diff.max() < 0.75 and diff.mean() < 0.15
    assert ours.logits is not None and theirs.logits is not None
    assert gb.softmax_entropy(ours.logits) == pytest.approx(
        gb.softmax_entropy(theirs.logits), rel=0.05
    )
    assert np.mean(np.argmax(ours.logits, 1) == np.argmax(theirs.logits, 1)) >= 0.9


@pytest.fixture(scope="module")
def hf_folder(backend: TransformersBackend, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """SmolLM2 saved from its dequantised GGUF as a Hugging Face model folder (loading a folder
    takes seconds; dequantising the GGUF again would take half a minute)."""
    import copy

    from transformers import AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("hf") / "smollm2"
    net = backend._get()
    config = copy.deepcopy(net.config)  # a GGUF-loaded model refuses save_pretrained
    for key in ("quantization_config", "_pre_quantization_dtype"):
        if hasattr(config, key):
            delattr(config, key)
    plain = AutoModelForCausalLM.from_config(config)
    plain.load_state_dict(net.state_dict())
    plain.generation_config = net.generation_config
    plain.save_pretrained(folder)
    backend._tok.save_pretrained(folder)
    del plain
    return folder


@pytest.mark.slow
def test_bfloat16_weights_stay_close_to_float32(backend: TransformersBackend, hf_folder) -> None:
    # The same weights as the float32 backend's, loaded in bfloat16 from the saved folder.
    half = gb.make_backend(
        f"local:{hf_folder}", backend="transformers", n_threads=1, dtype="bfloat16"
    )
    assert half.dtype == "bfloat16"
    try:
        low = half.score(MESSAGES, RESPONSE)
        weights = half.attentions(MESSAGES, RESPONSE)
    finally:
        half.close()
    exact = backend.score(MESSAGES, RESPONSE)
    assert low.token_ids == exact.token_ids
    assert np.corrcoef(low.token_logprobs, exact.token_logprobs)[0, 1] > 0.98
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=2e-2)


@pytest.mark.slow
def test_a_hugging_face_folder_loads_like_the_gguf(backend: TransformersBackend, hf_folder) -> None:
    """A model folder (here SmolLM2 saved from its dequantised GGUF) is the third input."""
    folder = hf_folder
    local = gb.make_backend(f"local:{folder}", backend="transformers", n_threads=1)
    try:
        assert local.model == f"local:{folder.resolve()}"
        assert local.prompt_ids(MESSAGES) == backend.prompt_ids(MESSAGES)
        ours = local.score(MESSAGES, RESPONSE)
        np.testing.assert_allclose(
            ours.token_logprobs, backend.score(MESSAGES, RESPONSE).token_logprobs, atol=1e-4
        )
        assert (
            local.generate(MESSAGES, max_tokens=12).text
            == backend.generate(MESSAGES, max_tokens=12).text
        )
    finally:
        local.close()
