"""What the two judgeopt LMs share: DSPy call plumbing, the persistent cache and accounting.

Both LMs implement DSPy 3.4's ``BaseLM.forward(prompt=None, messages=None, **kwargs)``
contract and return an OpenAI-shaped chat-completion response. That contract (not DSPy 3.4's
newer ``engine=`` one) is used on purpose: ``forward`` sees the whole call, including ``n``
and ``rollout_id``, which the persistent cache must key on, whereas an engine sees one
candidate of a request with ``rollout_id`` stripped. DSPy neither caches nor retries a
``forward``-based LM, so the judgeopt cache and retry policy are the only ones in play.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from dspy.utils.callback import with_callbacks

from ._cache import LMCache, cache_key
from ._spend import SpendLimit, prompt_tokens_of
from ._stats import LMStats, StatsRecorder

__all__ = ["AttrDict", "JudgeoptLMMixin", "attributes", "resolve_cache", "to_plain", "usage_of"]

logger = logging.getLogger(__name__)

Messages = list[dict[str, Any]]


class AttrDict(dict[str, Any]):
    """A dict whose keys also read as attributes, like the SDK response objects it stands for."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def model_dump(self, **_: Any) -> dict[str, Any]:
        """Return a plain-dict copy (the pydantic-style accessor DSPy code sometimes calls)."""
        plain: dict[str, Any] = to_plain(self)
        return plain


def to_plain(obj: Any) -> Any:
    """Return ``obj`` as plain dicts and lists.

    Pydantic models (LiteLLM's ``ModelResponse``) are read field by field rather than through
    ``model_dump()``, which emits serializer warnings on some LiteLLM responses.
    """
    from pydantic import BaseModel

    if isinstance(obj, BaseModel):
        obj = dict(obj)
    if isinstance(obj, Mapping):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj


def attributes(obj: Any) -> Any:
    """Return ``obj`` with every mapping turned into an :class:`AttrDict`."""
    if isinstance(obj, Mapping):
        return AttrDict({str(k): attributes(v) for k, v in obj.items()})
    if isinstance(obj, list):
        return [attributes(v) for v in obj]
    return obj


def resolve_cache(cache: bool | str | os.PathLike[str] | LMCache | None) -> LMCache | None:
    """Turn the ``cache=`` argument of an LM into a cache object (or ``None`` when disabled).

    Args:
        cache: ``True`` for the default directory, ``False``/``None`` to disable, a directory,
            or an :class:`LMCache` to share.

    Raises:
        TypeError: For any other type.
    """
    if cache is True:
        return LMCache()
    if cache is False or cache is None:
        return None
    if isinstance(cache, LMCache):
        return cache
    if isinstance(cache, (str, os.PathLike)):
        return LMCache(cache)
    raise TypeError(
        "The `cache` argument must be a bool, a directory path or an LMCache. "
        f"Got {type(cache).__name__} instead."
    )


def usage_of(response: Any) -> dict[str, Any]:
    """Return the ``usage`` block of an OpenAI-shaped response as a plain dict."""
    usage = (
        response.get("usage") if isinstance(response, Mapping) else getattr(response, "usage", None)
    )
    plain = to_plain(usage) if usage is not None else {}
    return plain if isinstance(plain, dict) else {}


class JudgeoptLMMixin:
    """Shared behaviour of :class:`LlamaCppLM` and :class:`JudgeLM` (used with ``dspy.BaseLM``).

    Subclasses set ``_stats``, ``_response_cache`` and ``kwargs`` in ``__init__`` and implement
    ``_cache_identity()`` and ``_generate(messages, params)``.
    """

    _stats: StatsRecorder
    _response_cache: LMCache | None
    kwargs: dict[str, Any]
    model: str
    model_type: str

    #: Whether calls with ``logprobs=True`` return token log-probabilities: ``True``,
    #: ``False``, or ``None`` when only a request can tell (a LiteLLM model: set it on the
    #: instance to skip the probe of :func:`judgeopt.judge.logprob_support`).
    supports_logprobs: bool | None = None

    def _check_truncation(self, results: Any, max_tokens: Any = None) -> None:
        """Log a response cut by its token limit, naming the limit of *that* request.

        Replaces ``dspy.LM._check_truncation``, which names ``self.kwargs["max_tokens"]`` (the
        LM's default, 1024 here) although judge calls pass their own limit (256, 64...).
        """
        choices = (
            results.get("choices")
            if isinstance(results, Mapping)
            else getattr(results, "choices", None)
        ) or []
        finish = [
            c.get("finish_reason") if isinstance(c, Mapping) else getattr(c, "finish_reason", None)
            for c in choices
        ]
        if "length" in finish:
            limit = max_tokens if max_tokens is not None else self.kwargs.get("max_tokens")
            logger.warning(
                "%s: a response was cut at its max_tokens=%s (finish_reason "
                "'length'); a judge counts an answer without a rating as a parse "
                "failure.",
                self.model,
                limit,
            )

    # NOTE: DSPy 3.4's BaseLM.__call__ warns on every call that forward()-based LMs, and
    # OpenAI-style messages= dicts, are deprecated (both removed in 3.5). judgeopt pins
    # dspy==3.4.1 and uses that contract on purpose (see the module docstring): messages= is
    # what these LMs take natively. So these two methods are BaseLM's own minus the warnings.
    @with_callbacks
    def __call__(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        from dspy.clients.execution import execute, finalize, prepare

        call = prepare(self, prompt, messages, kwargs)
        return finalize(self, call, execute(self, call))

    @with_callbacks
    async def acall(self, prompt: Any = None, *, messages: Any = None, **kwargs: Any) -> Any:
        import asyncio

        from dspy.clients.execution import aexecute, finalize, prepare

        call = await asyncio.to_thread(prepare, self, prompt, messages, kwargs, asynchronous=True)
        return finalize(self, call, await aexecute(self, call))

    async def aforward(self, prompt: Any = None, messages: Any = None, **kwargs: Any) -> Any:
        """Run :meth:`forward` in a worker thread (the backends are synchronous)."""
        import asyncio

        return await asyncio.to_thread(self.forward, prompt, messages, **kwargs)

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        # DSPy deep-copies programs (optimizers, Module.deepcopy); a copy shares the loaded
        # model, the locks, the cache and the counters, like BaseLM.copy().
        return self.copy()  # type: ignore[attr-defined]

    def stats(self) -> LMStats:
        """Return a snapshot of this LM's call accounting (shared with its copies)."""
        return self._stats.snapshot()

    def reset_stats(self) -> None:
        """Set this LM's call accounting back to zero."""
        self._stats.reset()

    def limit_spending(
        self, *, max_calls: int | None = None, max_cost: float | None = None
    ) -> SpendLimit | None:
        """Stop before the request that would cross ``max_calls`` requests or ``max_cost``
        US dollars (LiteLLM's price list), counted from now, for this LM and its copies.

        The request is not sent: :class:`judgeopt.lm.SpendLimitReached` (a
        ``KeyboardInterrupt``) is raised instead, so a run stops as on Ctrl-C with what it
        judged kept. Responses from the cache are free. ``None`` for both removes the limit.

        Returns:
            The :class:`judgeopt.lm.SpendLimit` now in force (``None``: none).

        Raises:
            ValueError: On a negative limit, or ``max_cost`` for a model LiteLLM does not
                price (:class:`judgeopt.lm.UnpricedModelError`).
        """
        limit = (
            None
            if max_calls is None and max_cost is None
            else SpendLimit(
                max_calls=max_calls,
                max_cost=max_cost,
                model=self.priced_model(),
                free=self.runs_in_process,
            )
        )
        self._stats.limit = limit
        return limit

    #: Whether calls run on this machine's CPU in this process (the embedded model): free.
    runs_in_process: bool = False

    def priced_model(self) -> str | None:
        """The LiteLLM model string a price is looked up for (``None``: none known)."""
        return str(self.model)

    def count_prompt_tokens(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """The prompt tokens ``messages`` make on this model, without a call.

        By LiteLLM's tokenizer for the model (a close estimate for models it does not know:
        about 4 characters a token); the embedded model counts with its own vocabulary.
        """
        return prompt_tokens_of(self.priced_model() or "", messages)

    @property
    def response_cache(self) -> LMCache | None:
        """The persistent cache this LM reads and writes, or ``None`` when disabled."""
        return self._response_cache

    # -- the shared call path ---------------------------------------------------------------

    def _cache_identity(self) -> tuple[str, str | None]:
        """Return (model identity, endpoint) for the cache key."""
        raise NotImplementedError

    def _generate(self, messages: Messages, params: dict[str, Any]) -> Any:
        """Call the backend once (with its own retries) and return the raw response."""
        raise NotImplementedError

    def _to_cacheable(self, response: Any) -> dict[str, Any]:
        plain = to_plain(response)
        return plain if isinstance(plain, dict) else {}

    def forward(
        self,
        prompt: str | None = None,
        messages: Sequence[Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Answer one request; the DSPy ``BaseLM`` contract.

        Args:
            prompt: A user prompt, when ``messages`` is not given.
            messages: OpenAI-style chat messages.
            **kwargs: Decoding parameters for this call, over the LM's defaults
                (``temperature``, ``max_tokens``, ``top_p``, ``n``, ``seed``, ``stop``,
                ``logprobs``, ``top_logprobs``, ``response_format``, ``rollout_id``...).
                ``cache=False`` skips the persistent cache for this call.

        Returns:
            An OpenAI-shaped chat-completion response (``choices``, ``usage``, ``model``). A
            cache hit is a dict with attribute access, ``cache_hit=True`` and empty ``usage``.

        Raises:
            LMError: A subclass naming the failure (see :mod:`judgeopt.lm`).
        """
        params = {**self.kwargs, **kwargs}
        use_cache = bool(params.pop("cache", True))
        if messages is None:
            if prompt is None:
                raise ValueError("forward() needs `prompt` or `messages`; got neither.")
            chat: Messages = [{"role": "user", "content": prompt}]
        else:
            chat = [dict(m) for m in messages]

        key = None
        cache = self._response_cache if use_cache else None
        if cache is not None:
            model_id, endpoint = self._cache_identity()
            try:
                key = cache_key(
                    model=model_id,
                    endpoint=endpoint,
                    messages=chat,
                    params=params,
                    api=self.model_type,
                )
            except (TypeError, ValueError) as exc:
                logger.warning(
                    "call to %s not cached: its request cannot be keyed (%s)", self.model, exc
                )
            if key is not None:
                hit = cache.get(key)
                if hit is not None:
                    self._stats.record_cache_hit()
                    return attributes({**hit, "usage": {}, "cache_hit": True})

        limit = self._stats.limit
        reserved = limit.reserve(chat, params) if limit is not None else 0.0
        response = None
        try:
            response = self._generate(chat, params)
        finally:
            if limit is not None:
                # A failed request was still made (it counts as a call), but costs nothing.
                limit.settle(reserved, None if response is None else usage_of(response))
        if cache is not None and key is not None:
            value = self._to_cacheable(response)
            if value.get("choices"):
                cache.put(key, value, model=self.model)
        return response
