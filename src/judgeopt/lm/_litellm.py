"""Any LiteLLM model (hosted APIs, vLLM, llama.cpp servers) as a DSPy LM, with judgeopt's
policies: bounded concurrency, retries with backoff, timeouts, the persistent cache, accounting."""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import dspy
from dspy.clients.base_lm import LM_CLASS_STATE_KEY

from .._validation import check_int, check_number
from ._base import JudgeoptLMMixin, Messages, resolve_cache, usage_of
from ._cache import LMCache
from ._endpoint import NO_KEY as NO_KEY  # re-exported: benchmarks and tests read it here
from ._endpoint import provider_of, resolve_endpoint
from ._errors import LMError, wrap_exception
from ._stats import StatsRecorder

__all__ = ["JudgeLM", "resolve_endpoint"]

logger = logging.getLogger(__name__)

_CLIENT_ARGS = frozenset(
    {"api_base", "base_url", "api_key", "timeout", "num_retries", "max_retries", "cache"}
)

CompletionFn = Callable[..., Any]


def _default_completion_fn(model_type: str) -> CompletionFn:
    # DSPy's own LiteLLM entry points: they add DSPy's User-Agent, honour dspy.streamify and
    # build text-completion prompts the way dspy.LM does. num_retries=0: we own retries.
    from dspy.clients.lm import litellm_completion, litellm_text_completion

    chosen: CompletionFn = litellm_completion if model_type == "chat" else litellm_text_completion
    return chosen


class JudgeLM(JudgeoptLMMixin, dspy.LM):
    """A LiteLLM model with bounded concurrency, retries, timeouts, a persistent cache and stats.

    It is a ``dspy.LM`` (so DSPy's adapters see the model's capabilities and DSPy code that
    expects a ``dspy.LM`` accepts it) whose ``forward`` sends the request itself: DSPy's own
    cache (which ignores the endpoint) and DSPy's retries are never used.

    Args:
        model: A LiteLLM model string (``"openai/gpt-4o-mini"``, ``"openai/qwen"`` with
            ``api_base`` for a vLLM or llama.cpp server, ...).
        api_base: Endpoint URL; default from the environment (see :func:`resolve_endpoint`).
        api_key: API key; default from the environment. Never cached, logged or saved.
        model_type: ``"chat"`` or ``"text"``.
        temperature: Default sampling temperature.
        max_tokens: Default completion budget in tokens.
        cache: ``True`` (default directory), ``False``, a directory, or an :class:`LMCache`.
        max_concurrency: At most this many requests of this LM (and its copies) are in flight
            at once, from any number of threads.
        timeout: Per-request timeout in seconds.
        num_retries: Retries of a request that failed transiently (rate limit, timeout,
            connection error, 5xx); other failures are raised at once.
        retry_backoff: Delay before the first retry in seconds; doubled for each next retry
            (with +-20 % jitter), or the server's ``Retry-After`` when it sends one.
        max_backoff: Cap on any single delay in seconds.
        completion_fn: The function that sends one request,
            ``completion_fn(request=dict, num_retries=0) -> response``; defaults to DSPy's
            LiteLLM call. Tests inject a fake here.
        sleep: The function used to wait between retries (injectable for tests).
        **kwargs: Further default decoding parameters (``top_p``, ``seed``, ``logprobs``...).

    Raises:
        ValueError: If an argument is out of range or the model names no LiteLLM provider.
    """

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        model_type: str = "chat",
        temperature: float | None = 0.0,
        max_tokens: int | None = 1024,
        cache: bool | str | os.PathLike[str] | LMCache | None = True,
        max_concurrency: int = 8,
        timeout: float | None = 120.0,
        num_retries: int = 3,
        retry_backoff: float = 1.0,
        max_backoff: float = 30.0,
        completion_fn: CompletionFn | None = None,
        sleep: Callable[[float], None] = time.sleep,
        **kwargs: Any,
    ) -> None:
        if model_type not in ("chat", "text"):
            raise ValueError(
                "The `model_type` argument of JudgeLM must be 'chat' or 'text'. "
                f"Got {model_type!r} instead."
            )
        check_int(max_concurrency, "max_concurrency", min_value=1, owner="JudgeLM")
        check_int(num_retries, "num_retries", min_value=0, owner="JudgeLM")
        check_number(
            timeout, "timeout", min_value=0, min_open=True, allow_none=True, owner="JudgeLM"
        )
        for field, value in (("retry_backoff", retry_backoff), ("max_backoff", max_backoff)):
            check_number(value, field, min_value=0, owner="JudgeLM")
        misplaced = sorted(set(kwargs) & _CLIENT_ARGS)
        if misplaced:
            raise ValueError(
                f"JudgeLM got client setting(s) {misplaced} as decoding parameters; "
                "pass them as the arguments of the same names."
            )
        base, key = resolve_endpoint(model, api_base, api_key)
        super().__init__(
            model=model,
            model_type=model_type,
            temperature=temperature,
            max_tokens=max_tokens,
            cache=False,  # DSPy's cache keys ignore api_base; judgeopt's cache is used instead
            num_retries=num_retries,
            **kwargs,
        )
        self.api_base = base
        self._api_key = key
        self.timeout = float(timeout) if timeout is not None else None
        self.max_concurrency = max_concurrency
        self.retry_backoff = float(retry_backoff)
        self.max_backoff = float(max_backoff)
        self._completion_fn = completion_fn or _default_completion_fn(model_type)
        self._sleep = sleep
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self._rng = random.Random()
        self._stats = StatsRecorder()
        self._response_cache = resolve_cache(cache)

    def __repr__(self) -> str:
        return f"JudgeLM({self.model!r}, api_base={self.api_base!r})"

    def _cache_identity(self) -> tuple[str, str | None]:
        return self.model, self.api_base or f"default:{provider_of(self.model)}"

    def backoff_delay(self, attempt: int, retry_after: float | None = None) -> float:
        """Return the wait before retry number ``attempt + 1`` (``attempt`` counts from 0).

        The server's ``Retry-After`` wins when given; otherwise ``retry_backoff * 2**attempt``
        with +-20 % jitter. Either is capped at ``max_backoff``.
        """
        if retry_after is not None and retry_after >= 0:
            return min(self.max_backoff, float(retry_after))
        base = self.retry_backoff * (2.0**attempt)
        return min(self.max_backoff, base * (0.8 + 0.4 * self._rng.random()))

    def _generate(self, messages: Messages, params: dict[str, Any]) -> Any:
        request: dict[str, Any] = {"model": self.model, "messages": messages}
        request.update({k: v for k, v in params.items() if k != "timeout"})
        timeout = params.get("timeout", self.timeout)
        if self.api_base is not None:
            request["api_base"] = self.api_base
        if self._api_key is not None:
            request["api_key"] = self._api_key
        if timeout is not None:
            request["timeout"] = timeout
        request["max_retries"] = 0  # the openai SDK's own retries: off, we retry here

        for attempt in range(self.num_retries + 1):
            error: LMError | None = None
            cause: BaseException | None = None
            with self._slots:
                started = time.monotonic()
                try:
                    response = self._completion_fn(request=dict(request), num_retries=0)
                except Exception as exc:  # noqa: BLE001 - every failure is classified below
                    error = wrap_exception(
                        exc, model=self.model, endpoint=self.api_base, timeout=timeout
                    )
                    self._stats.record_failure(error.kind, time.monotonic() - started)
                    cause = exc
                else:
                    self._stats.record_call(time.monotonic() - started, usage_of(response))
                    self._check_truncation(response, request.get("max_tokens"))
                    return response
            assert error is not None and cause is not None
            if not error.retryable or attempt >= self.num_retries:
                if error is cause:
                    raise error
                raise error from cause
            delay = self.backoff_delay(attempt, error.retry_after)
            logger.info(
                "%s (attempt %d of %d); retrying in %.1f s",
                error,
                attempt + 1,
                self.num_retries + 1,
                delay,
            )
            self._stats.record_retry()
            self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def dump_state(self) -> dict[str, Any]:
        """Return the constructor arguments needed to rebuild this LM (never the api_key)."""
        state = {k: v for k, v in self.kwargs.items() if k not in ("api_key", LM_CLASS_STATE_KEY)}
        state.update(
            {
                LM_CLASS_STATE_KEY: f"{type(self).__module__}.{type(self).__qualname__}",
                "model": self.model,
                "model_type": self.model_type,
                "api_base": self.api_base,
                "max_concurrency": self.max_concurrency,
                "timeout": self.timeout,
                "num_retries": self.num_retries,
                "retry_backoff": self.retry_backoff,
                "max_backoff": self.max_backoff,
            }
        )
        return state

    @classmethod
    def load_state(cls, state: dict[str, Any], *, allow_custom_lm_class: bool = False) -> JudgeLM:
        """Rebuild a JudgeLM from :meth:`dump_state` output (its api_key from the environment)."""
        state = {k: v for k, v in state.items() if k != LM_CLASS_STATE_KEY}
        return cls(**state)
