"""A scripted LM for unit tests of parsing and control flow (never evidence that a judge works)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Respond = Callable[[list[dict[str, Any]]], "str | BaseException"]
#: ``logprobs(reply, request)`` -> the ``logprobs.content`` list of the reply, or an exception.
Logprobs = Callable[[str, dict[str, Any]], "list[dict[str, Any]] | BaseException | None"]


def logprob_content(
    tokens: Sequence[str],
    alternatives: Mapping[int, Mapping[str, float]] | None = None,
) -> list[dict[str, Any]]:
    """An OpenAI-shaped ``logprobs.content`` list for a reply split into ``tokens``.

    Args:
        tokens: The reply's tokens, in order (their concatenation is the reply).
        alternatives: Position -> ``{token: probability}`` of the top alternatives there
            (probabilities, not logs). The generated token gets its probability from this
            table, else 1. Positions without an entry list only the generated token.

    Example:
        >>> logprob_content(["[[", "7", "]]"], {1: {"7": 0.6, "8": 0.4}})[1]["top_logprobs"][1]
        {'token': '8', 'logprob': -0.916290731874155, 'bytes': [56]}
    """
    table = alternatives or {}
    out: list[dict[str, Any]] = []
    for i, token in enumerate(tokens):
        alts = dict(table.get(i, {token: 1.0}))
        p = alts.get(token, 1.0)
        top = [
            {
                "token": t,
                "logprob": math.log(q) if q > 0 else -math.inf,
                "bytes": list(t.encode("utf-8")),
            }
            for t, q in sorted(alts.items(), key=lambda kv: -kv[1])
        ]
        out.append(
            {
                "token": token,
                "logprob": math.log(p) if p > 0 else -math.inf,
                "bytes": list(token.encode("utf-8")),
                "top_logprobs": top,
            }
        )
    return out


class ScriptedLM:
    """Factory of a :class:`judgeopt.lm.JudgeLM` whose backend is a Python function.

    ``respond(messages)`` returns the reply text, or an exception to raise (e.g. a LiteLLM
    timeout). Every request goes through the real JudgeLM path: cache, accounting, retries
    and error wrapping. ``requests`` records what reached the backend.

    Args:
        respond: The reply function.
        cache: Passed to :class:`~judgeopt.lm.JudgeLM` (``False``, or a directory).
        model: The LiteLLM model string the LM reports.
        num_retries: Retries of transient failures.
        logprobs: ``logprobs(reply, request)`` gives the ``logprobs.content`` of a reply to a
            request with ``logprobs=True`` (see :func:`logprob_content`), ``None`` to send
            none, or an exception to raise (a provider that refuses the parameter). Without
            it, replies never carry logprobs (a provider that ignores the parameter).
    """

    def __init__(
        self,
        respond: Respond,
        *,
        cache: Any = False,
        model: str = "openai/scripted",
        num_retries: int = 0,
        logprobs: Logprobs | None = None,
    ) -> None:
        from judgeopt.lm import JudgeLM  # lazy: judgeopt.lm loads DSPy and LiteLLM

        self.respond = respond
        self.logprobs = logprobs
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.lm = JudgeLM(
            model,
            api_base="http://127.0.0.1:9/v1",
            api_key="test",
            completion_fn=self._backend,
            cache=cache,
            num_retries=num_retries,
            sleep=lambda _s: None,
        )

    @property
    def judge_requests(self) -> list[dict[str, Any]]:
        """:attr:`requests` without the endpoint check a compile makes before its search
        and the one-token probes of its cost plan (:func:`judgeopt.evaluate.one_token_call`:
        ``max_tokens`` 1 without logprobs, which no judge call asks for; the logprobs probe
        of an ``expected`` decoding asks for logprobs and is kept)."""
        from judgeopt.teleprompt import ENDPOINT_CHECK  # lazy: loads DSPy

        check = [dict(m) for m in ENDPOINT_CHECK]

        def plan_probe(r: dict[str, Any]) -> bool:
            return r.get("max_tokens") == 1 and not r.get("logprobs")

        return [r for r in self.requests if list(r["messages"]) != check and not plan_probe(r)]

    def _backend(self, request: dict[str, Any], num_retries: int) -> dict[str, Any]:
        with self._lock:
            self.requests.append(request)
        reply = self.respond(list(request["messages"]))
        if isinstance(reply, BaseException):
            raise reply
        # Stop strings as a server applies them: the text ends before the first one found;
        # the logprobs (below) cover the generated text through that stop string.
        stops = request.get("stop") or []
        stops = [stops] if isinstance(stops, str) else list(stops)
        found = [(reply.find(s), s) for s in stops if s and s in reply]
        generated = reply
        if found:
            at, stop = min(found)
            reply, generated = reply[:at], reply[: at + len(stop)]
        choice: dict[str, Any] = {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": reply},
        }
        if request.get("logprobs") and self.logprobs is not None:
            content = self.logprobs(generated, request)
            if isinstance(content, BaseException):
                raise content
            if content is not None:
                choice["logprobs"] = {"content": content}
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in request["messages"])
        return {
            "id": "scripted",
            "object": "chat.completion",
            "created": 0,
            "model": request.get("model", "scripted"),
            "choices": [choice],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(reply.split()),
                "total_tokens": prompt_tokens + len(reply.split()),
            },
        }
