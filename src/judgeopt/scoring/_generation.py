"""What a logprob backend returns: a generated completion or a scored text, with token log-probs.

:class:`Generation` is one completion with the log-probability of each generated token (and, on
request, the top-k alternatives or the full-vocabulary logits); :class:`ScoredText` is a given
response scored by forced decoding. :func:`generation_from_logprobs` reads a ``Generation`` from
the ``logprobs.content`` list of an OpenAI-shaped answer (LiteLLM, vLLM, llama.cpp servers, DSPy
LM outputs), so a judge that asked its LM for ``logprobs=True`` and a glass-box backend read the
same object.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

__all__ = [
    "FloatArray",
    "Generation",
    "Messages",
    "ScoredText",
    "char_offsets",
    "generation_from_logprobs",
]

Messages: TypeAlias = Sequence[Mapping[str, str]]
"""OpenAI-style chat messages: ``[{"role": "user", "content": "..."}, ...]``."""

FloatArray: TypeAlias = npt.NDArray[np.floating[Any]]
"""An array of floats (log-probabilities, logits)."""


@dataclass(frozen=True, eq=False)
class Generation:
    """One generated completion with its token-level probabilities.

    Attributes:
        text: The completion text.
        tokens: The text of each generated token (their concatenation is ``text``, up to
            bytes of a character split over two tokens).
        offsets: The character offset of each token in ``text``.
        token_logprobs: ``(T,)`` log-probability of each generated token under the model's
            own distribution (temperature 1, before any top-k/top-p truncation of sampling).
        top_logprobs: Per position, the top-k alternatives as ``{token text: logprob}``;
            ``None`` when not asked for.
        logits: ``(T, V)`` raw logits at each generated position, for full-vocabulary
            backends when asked for (``full_logprobs=True``); else ``None``.
        token_ids: The generated token ids, when the backend knows them.
        prompt_ids: The prompt's token ids, when the backend knows them.
        finish_reason: ``"stop"`` or ``"length"``.
    """

    text: str
    tokens: tuple[str, ...]
    offsets: tuple[int, ...]
    token_logprobs: FloatArray
    top_logprobs: tuple[dict[str, float], ...] | None = None
    logits: FloatArray | None = None
    token_ids: tuple[int, ...] | None = None
    prompt_ids: tuple[int, ...] | None = None
    finish_reason: str = "stop"

    def token_at(self, char_offset: int) -> int:
        """Return the index of the token that covers character ``char_offset`` of ``text``.

        Raises:
            ValueError: If the offset is outside the text.
        """
        if not 0 <= char_offset < len(self.text) or not self.offsets:
            raise ValueError(
                f"character offset {char_offset} is outside the completion "
                f"({len(self.text)} characters)"
            )
        index = int(np.searchsorted(np.asarray(self.offsets), char_offset, side="right")) - 1
        return max(index, 0)


@dataclass(frozen=True, eq=False)
class ScoredText:
    """A given response scored by forced decoding after the prompt.

    Attributes:
        tokens: The text of each response token.
        token_logprobs: ``(T,)`` log-probability of each response token given everything
            before it.
        logits: ``(T, V)`` raw logits of the distribution that predicted each response
            token (full-vocabulary backends), else ``None``.
        top_logprobs: ``(T, k)`` top-k log-probabilities of those distributions, sorted
            descending and padded with ``-inf`` (servers' prompt logprobs), else ``None``.
        token_ids: The response's token ids, when known.
        prompt_tokens: Number of prompt tokens before the response.
        meta: Backend-specific details.
    """

    tokens: tuple[str, ...]
    token_logprobs: FloatArray
    logits: FloatArray | None = None
    top_logprobs: FloatArray | None = None
    token_ids: tuple[int, ...] | None = None
    prompt_tokens: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tokens)


def char_offsets(pieces: Sequence[bytes]) -> tuple[int, ...]:
    """The character offset, in the decoded text, at which each token's bytes start.

    A character split over two tokens counts once it is complete, so a token that starts
    mid-character gets the offset of that character's end.
    """
    offsets: list[int] = []
    consumed = b""
    for piece in pieces:
        offsets.append(len(consumed.decode("utf-8", errors="ignore")))
        consumed += piece
    return tuple(offsets)


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def generation_from_logprobs(
    content: Sequence[Any],
    *,
    keep_top: bool = True,
    finish_reason: str = "stop",
    text: str | None = None,
) -> Generation:
    """A :class:`Generation` from the ``logprobs.content`` list of an OpenAI-shaped choice.

    Each entry has ``token``, ``logprob``, optionally ``bytes`` (the token's UTF-8 bytes, used
    for character offsets when a character is split over tokens) and ``top_logprobs`` (a list
    of ``{token, logprob}``). Entries may be dicts or SDK objects. When two alternatives
    decode to the same text the larger log-probability is kept.

    Args:
        content: The ``choices[i].logprobs.content`` list (one entry per generated token).
        keep_top: Keep the per-position alternatives as ``top_logprobs``.
        finish_reason: The choice's finish reason.
        text: The choice's message text. vLLM lists the stop token it ended on (``<|im_end|>``)
            in ``content`` but leaves it out of the text; given ``text``, trailing entries
            past it are dropped, so the generation's text is the message's.
    """
    items = list(content)
    pieces: list[bytes] = []
    for item in items:
        raw = _get(item, "bytes")
        pieces.append(bytes(raw) if raw is not None else str(_get(item, "token", "")).encode())
    target = text.strip() if text is not None else ""
    if target:
        # Drop trailing tokens while what remains still holds the whole message text.
        while pieces and target in b"".join(pieces[:-1]).decode("utf-8", errors="replace"):
            pieces.pop()
        items = items[: len(pieces)]
    tokens: list[str] = []
    lps: list[float] = []
    tops: list[dict[str, float]] = []
    for item in items:
        tokens.append(str(_get(item, "token", "")))
        lps.append(float(_get(item, "logprob")))
        alternatives: dict[str, float] = {}
        for alt in _get(item, "top_logprobs") or []:
            alt_text = str(_get(alt, "token", ""))
            value = float(_get(alt, "logprob"))
            alternatives[alt_text] = max(value, alternatives.get(alt_text, -np.inf))
        tops.append(alternatives)
    return Generation(
        text=b"".join(pieces).decode("utf-8", errors="replace"),
        tokens=tuple(tokens),
        offsets=char_offsets(pieces),
        token_logprobs=np.asarray(lps, dtype=np.float64),
        top_logprobs=tuple(tops) if keep_top else None,
        finish_reason=finish_reason,
    )
