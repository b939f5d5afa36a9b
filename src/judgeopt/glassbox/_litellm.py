"""OpenAI-compatible servers and hosted APIs through LiteLLM: top-k logprobs of generated tokens.

What such servers give (see ``docs/glassbox.md``):

* ``logprobs=True, top_logprobs=K``: the log-probability of each generated token and its top
  ``K`` alternatives (OpenAI allows at most 20; llama.cpp and vLLM servers more). This is
  :attr:`Capability.TOP_LOGPROBS`, enough for greedy and expected ratings, self-consistency and
  the decoding-based ensemble.
* Log-probabilities of a *given* text (forced decoding) need the prompt's log-probabilities.
  vLLM returns them correctly (``prompt_logprobs`` of its chat endpoint); the llama.cpp
  server's ``echo`` logprobs are shifted by one position, and hosted APIs give none. So
  forced decoding is only enabled with ``prompt_logprobs=True``, meant for vLLM; never
  silently. Even then only the top-k of each distribution is known, never the full vocabulary.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from judgeopt.scoring import (
    BACKEND_CAPABILITIES,
    Capability,
    CapabilityError,
    Generation,
    GlassBoxError,
    LogprobBackend,
    Messages,
    ScoredText,
    generation_from_logprobs,
)

__all__ = ["LiteLLMBackend"]

logger = logging.getLogger(__name__)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


class LiteLLMBackend(LogprobBackend):
    """A LiteLLM model (vLLM, llama.cpp server, hosted API) as a logprob backend.

    Requests go through :class:`judgeopt.lm.JudgeLM`, so they get its retries, timeouts,
    bounded concurrency, persistent cache and accounting.

    Args:
        model: A LiteLLM model string (``"openai/NAME"`` with ``api_base`` for a server), or
            an existing :class:`judgeopt.lm.JudgeLM`.
        api_base: Endpoint of the model (default from the environment).
        api_key: Key of the model (default from the environment).
        prompt_logprobs: Enable forced decoding through vLLM's ``prompt_logprobs`` extension
            (adds :attr:`Capability.PROMPT_LOGPROBS` and :attr:`Capability.FORCED_DECODING`).
            Only for vLLM: other servers ignore or mis-align the extension.
        cache: The LM's persistent cache (``True``: default directory, ``False``: none).
        **lm_kwargs: Further :func:`judgeopt.lm.make_lm` arguments (``timeout``,
            ``num_retries``, ``max_concurrency``...).

    Example:
        >>> backend = LiteLLMBackend("openai/qwen", api_base="http://127.0.0.1:8080/v1",
        ...                          cache=False)
        >>> sorted(c.value for c in backend.capabilities)
        ['top_logprobs']
    """

    name = "litellm"

    def __init__(
        self,
        model: Any,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        prompt_logprobs: bool = False,
        cache: bool | str | os.PathLike[str] = True,
        **lm_kwargs: Any,
    ) -> None:
        from judgeopt.lm import JudgeLM, make_lm  # DSPy-based: loaded when a backend is built

        if isinstance(model, JudgeLM):
            if api_base is not None or api_key is not None or lm_kwargs:
                raise ValueError(
                    "LiteLLMBackend got a JudgeLM and LM settings; configure the JudgeLM instead."
                )
            lm = model
        elif isinstance(model, str) and model:
            lm = make_lm(model, api_base=api_base, api_key=api_key, cache=cache, **lm_kwargs)
            if not isinstance(lm, JudgeLM):
                raise ValueError(
                    f"LiteLLMBackend is for LiteLLM models; {model!r} is a local model: use "
                    "LlamaCppBackend (or make_backend) for it."
                )
        else:
            raise ValueError(
                "The `model` argument of LiteLLMBackend must be a LiteLLM model string or a "
                f"JudgeLM. Got {model!r} instead."
            )
        self.lm = lm
        self.model = str(lm.model)
        caps = {Capability.TOP_LOGPROBS}
        if prompt_logprobs:
            caps |= {Capability.PROMPT_LOGPROBS, Capability.FORCED_DECODING}
        self.capabilities = frozenset(caps) & BACKEND_CAPABILITIES["litellm"][0]
        self.prompt_logprobs = bool(prompt_logprobs)
        # One-token probe requests end with finish_reason="length" by design: a copy of the
        # LM whose truncation warning is silenced (it shares cache, stats and slots).
        self._probe = lm.copy()
        self._probe._check_truncation = lambda *_a, **_k: None

    def __repr__(self) -> str:
        api_base = getattr(self.lm, "api_base", None)
        return f"LiteLLMBackend({self.model!r}, api_base={api_base!r})"

    def generate(
        self,
        messages: Messages,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        top_k: int | None = None,
        seed: int | None = None,
        top_logprobs: int = 0,
        full_logprobs: bool = False,
    ) -> Generation:
        """One chat completion with ``logprobs=True``; see :meth:`LogprobBackend.generate`.

        ``top_k`` is sent as the ``top_k`` extension field (vLLM, llama.cpp server).

        Raises:
            CapabilityError: For ``full_logprobs=True``, or when the server's answer carries no
                logprobs (e.g. hosted reasoning models).
            LMError: When the request fails (see :mod:`judgeopt.lm`).
        """
        if full_logprobs:
            self.require(Capability.FULL_VOCABULARY, "full-vocabulary logits of a generation")
        params: dict[str, Any] = {
            "max_tokens": max_tokens,
            "temperature": temperature,
            "logprobs": True,
            # Some servers (llama.cpp) only return logprobs when top_logprobs is set.
            "top_logprobs": max(1, int(top_logprobs)),
        }
        if seed is not None:
            params["seed"] = int(seed)
        if top_k is not None:
            params["extra_body"] = {"top_k": int(top_k)}
        response = self.lm.forward(messages=[dict(m) for m in messages], **params)
        choice = _get(response, "choices")[0]
        content = _get(_get(choice, "logprobs"), "content")
        if not content:
            raise CapabilityError(
                self.name,
                self.model,
                Capability.TOP_LOGPROBS,
                "this request: the server's answer carried no logprobs",
            )
        return generation_from_logprobs(
            content,
            keep_top=bool(top_logprobs),
            finish_reason=str(_get(choice, "finish_reason") or "stop"),
            text=_get(_get(choice, "message"), "content"),
        )

    def _prompt_tokens(self, messages: Sequence[Mapping[str, str]]) -> int:
        response = self._probe.forward(
            messages=[dict(m) for m in messages], max_tokens=1, temperature=0.0
        )
        return int(_get(_get(response, "usage") or {}, "prompt_tokens") or 0)

    def _prompt_logprobs(
        self, messages: Sequence[Mapping[str, str]], k: int
    ) -> tuple[list[Any], int]:
        # vLLM extensions: score the final assistant message as a continuation, no new header.
        extra = {
            "prompt_logprobs": k,
            "add_generation_prompt": False,
            "continue_final_message": True,
        }
        response = self._probe.forward(
            messages=[dict(m) for m in messages],
            max_tokens=1,
            temperature=0.0,
            extra_body=extra,
        )
        plp = _get(response, "prompt_logprobs")
        usage = _get(response, "usage") or {}
        n_prompt = int(_get(usage, "prompt_tokens") or 0)
        if plp is None:
            raise GlassBoxError(
                f"the server behind {self.model} returned no `prompt_logprobs`: forced decoding "
                "through a server needs vLLM (LiteLLMBackend(..., prompt_logprobs=True) is only "
                "for vLLM). Use a local model ('local:...') to score given texts."
            )
        return list(plp), n_prompt

    def score(
        self,
        messages: Messages,
        response: str,
        *,
        top_logprobs: int = 0,
        full_vocabulary: bool = False,
    ) -> ScoredText:
        """Score ``response`` through vLLM's prompt logprobs (``prompt_logprobs=True`` only).

        Three requests: the prompt alone (its token count), prompt + response with
        ``prompt_logprobs=0`` (each token's own log-probability) and, when
        ``top_logprobs > 0``, with ``prompt_logprobs=top_logprobs`` (the top-k).

        Raises:
            CapabilityError: Without ``prompt_logprobs=True``, or for ``full_vocabulary``.
        """
        self.require(Capability.FORCED_DECODING, "scoring a given response")
        if full_vocabulary:
            self.require(Capability.FULL_VOCABULARY, "full-vocabulary logits of a given text")
        full = [*messages, {"role": "assistant", "content": response}]
        n_prompt = self._prompt_tokens(messages)
        own, n_total = self._prompt_logprobs(full, 0)
        rows = own[n_prompt:n_total] if n_total else own[n_prompt:]
        tokens: list[str] = []
        lps: list[float] = []
        for row in rows:
            entry = next(iter((row or {}).values()), None)
            if entry is None:
                raise GlassBoxError(f"vLLM returned an empty prompt-logprob entry for {self.model}")
            tokens.append(str(_get(entry, "decoded_token", "")))
            lps.append(float(_get(entry, "logprob")))
        top = None
        if top_logprobs:
            ranked, _ = self._prompt_logprobs(full, int(top_logprobs))
            top = np.full((len(rows), int(top_logprobs)), -np.inf)
            for t, row in enumerate(ranked[n_prompt : n_prompt + len(rows)]):
                entries = sorted(
                    (
                        float(_get(e, "logprob"))
                        for e in (row or {}).values()
                        if 1 <= int(_get(e, "rank", top_logprobs + 1)) <= top_logprobs
                    ),
                    reverse=True,
                )
                top[t, : len(entries)] = entries[: int(top_logprobs)]
        return ScoredText(
            tokens=tuple(tokens),
            token_logprobs=np.asarray(lps, dtype=np.float64),
            top_logprobs=top,
            prompt_tokens=n_prompt,
        )
