"""A scripted LM for unit tests of parsing and control flow (never evidence that a judge works)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

Respond = Callable[[list[dict[str, Any]]], "str | BaseException"]


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
    """

    def __init__(self, respond: Respond, *, cache: Any = False,
                 model: str = "openai/scripted", num_retries: int = 0) -> None:
        from judgeopt.lm import JudgeLM

        self.respond = respond
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.lm = JudgeLM(model, api_base="http://127.0.0.1:9/v1", api_key="test",
                          completion_fn=self._backend, cache=cache, num_retries=num_retries,
                          sleep=lambda _s: None)

    def _backend(self, request: dict[str, Any], num_retries: int) -> dict[str, Any]:
        with self._lock:
            self.requests.append(request)
        reply = self.respond(list(request["messages"]))
        if isinstance(reply, BaseException):
            raise reply
        prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in request["messages"])
        return {
            "id": "scripted", "object": "chat.completion", "created": 0,
            "model": request.get("model", "scripted"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": reply}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": len(reply.split()),
                      "total_tokens": prompt_tokens + len(reply.split())},
        }
