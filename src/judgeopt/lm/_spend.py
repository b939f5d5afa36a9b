"""Spending limits: stop a run before the call that would cross a number of calls or dollars.

A :class:`SpendLimit` set on an LM (``lm.limit_spending(max_calls=..., max_cost=...)``, shared
by the LM's copies) is consulted before every request that misses the response cache. When
the next request would cross a limit, :class:`SpendLimitReached` is raised instead of making
it: a ``KeyboardInterrupt``, so every run stops as it does on Ctrl-C (``evaluate`` keeps the
items judged so far, a compile its checkpoint, ``judgeopt`` exits 130 and says how to resume)
and nothing that was paid for is lost. Run the same command again with a higher limit to go on.

Money comes from LiteLLM's price list (``litellm.cost_per_token``; judgeopt loads the copy
shipped with LiteLLM, ``LITELLM_LOCAL_MODEL_COST_MAP=True``). Before a request, its cost is
bounded from above: its prompt tokens (``litellm.token_counter``) at the input price plus its
``max_tokens`` at the output price; after it, the cost of the tokens the provider reports
replaces that bound. The embedded model costs nothing.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import JudgeoptError
from .._signals import SpendLimitReached
from .._validation import check_int, check_number

__all__ = [
    "SpendLimit",
    "SpendLimitReached",
    "UnpricedModelError",
    "price_of",
    "prompt_tokens_of",
]


class UnpricedModelError(JudgeoptError, ValueError):
    """A dollar limit was asked for a model that LiteLLM's price list does not know."""


def price_of(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """Dollars for ``prompt_tokens`` in and ``completion_tokens`` out on ``model`` by
    LiteLLM's price list; ``None`` when the list has no price for it."""
    try:
        import litellm

        prompt, completion = litellm.cost_per_token(
            model=model, prompt_tokens=int(prompt_tokens), completion_tokens=int(completion_tokens)
        )
    except Exception:  # noqa: BLE001 - unknown model or provider: no price
        return None
    total = float(prompt) + float(completion)
    return total if math.isfinite(total) else None


def prompt_tokens_of(model: str, messages: Sequence[Mapping[str, Any]]) -> int:
    """The prompt tokens of ``messages`` by LiteLLM's tokenizer for ``model`` (about 4
    characters a token when none is known)."""
    try:
        import litellm

        return int(litellm.token_counter(model=model, messages=[dict(m) for m in messages]))
    except Exception:  # noqa: BLE001 - no tokenizer known: a rough count (4 characters a token)
        return sum(len(str(m.get("content", ""))) for m in messages) // 4 + 8


class SpendLimit:
    """The calls and dollars one run may spend through an LM (and its copies).

    Args:
        max_calls: Requests to the backend (responses from the cache are free); ``None``: no
            limit.
        max_cost: US dollars by LiteLLM's price list; ``None``: no limit.
        model: The model priced (the LM's LiteLLM model string; ``None``: no price known).
        free: The calls cost nothing (the embedded model, in process).

    Raises:
        ValueError: On a limit below 0 (or a ``max_calls`` that is not an int).
        UnpricedModelError: When ``max_cost`` is set for a model without a known price.
    """

    def __init__(
        self,
        *,
        max_calls: int | None = None,
        max_cost: float | None = None,
        model: str | None = None,
        free: bool = False,
    ) -> None:
        self.max_calls = check_int(
            max_calls, "max_calls", min_value=0, allow_none=True, owner="SpendLimit"
        )
        self.max_cost = check_number(
            max_cost, "max_cost", min_value=0, allow_none=True, owner="SpendLimit"
        )
        self.model = model
        self.free = bool(free)
        if self.max_cost is not None and not self.free and price_of(model or "", 1, 1) is None:
            raise UnpricedModelError(
                f"A dollar limit (max_cost={self.max_cost:g}) needs the model's price, and "
                f"LiteLLM's price list has none for {model!r}: use max_calls instead, or a "
                "model string LiteLLM prices (e.g. 'openai/gpt-4o-mini')."
            )
        self.calls = 0
        self.cost = 0.0
        self._pending = 0.0
        self._lock = threading.Lock()

    def reserve(self, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]) -> float:
        """Account for one request about to be sent; returns the dollars reserved for it.

        Raises:
            SpendLimitReached: When the request would cross a limit (it is not sent).
        """
        bound = 0.0
        if self.max_cost is not None and not self.free:
            n_out = int(params.get("max_tokens") or params.get("max_completion_tokens") or 0)
            n_out *= int(params.get("n") or 1)
            bound = price_of(self.model or "", prompt_tokens_of(self.model or "", messages), n_out)
            bound = 0.0 if bound is None else bound
        with self._lock:
            if self.max_calls is not None and self.calls + 1 > self.max_calls:
                raise SpendLimitReached(
                    f"the limit of {self.max_calls} calls is reached ({self.calls} made)",
                    limit="max_calls",
                )
            if self.max_cost is not None and self.cost + self._pending + bound > self.max_cost:
                raise SpendLimitReached(
                    f"the limit of ${self.max_cost:g} would be crossed by the next call "
                    f"(${self.cost + self._pending:.4g} spent, up to ${bound:.4g} for the next)",
                    limit="max_cost",
                )
            self.calls += 1
            self._pending += bound
        return bound

    def settle(self, reserved: float, usage: Mapping[str, Any] | None) -> None:
        """Replace a request's reserved bound by the cost of the tokens it reported."""
        actual = 0.0
        if not self.free and usage:
            priced = price_of(
                self.model or "",
                int(usage.get("prompt_tokens") or 0),
                int(usage.get("completion_tokens") or 0),
            )
            actual = 0.0 if priced is None else priced
        with self._lock:
            self._pending -= reserved
            self.cost += actual

    def to_dict(self) -> dict[str, Any]:
        """The limits and what was spent under them."""
        return {
            "max_calls": self.max_calls,
            "max_cost": self.max_cost,
            "calls": self.calls,
            "cost": round(self.cost, 6),
        }
