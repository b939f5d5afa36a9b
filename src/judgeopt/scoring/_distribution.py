"""Rating distributions: from next-token log-probabilities to ``P(rating)``.

G-Eval's probability-weighted score reads the model's distribution at the position where an
answer writes its rating, turns it into a probability for every valid rating ``r`` and returns
``sum_r r P(r)`` after renormalising over the valid ratings. Ratings of several tokens are
chained: Qwen writes ``10`` as ``1`` then ``0``, so ``P(10) = P(1) P(0 | 1) P(end | 10)`` and
``P(1) = P(1) P(end | 1)``, where ``P(end | s)`` is one minus the probability of any digit
token after ``s``. Tokenizers with multi-digit tokens (``"10"`` as one token) are handled the
same way (a token contributes all its digits).

Choices (documented in ``docs/glassbox.md``):

* A digit missing from a top-k list has probability 0. So with top-k log-probabilities,
  ``P(end | s)`` is ``1 -`` the digit mass *inside* the top-k, and the probability of a
  rating none of whose tokens is in the top-k is 0; renormalisation over the valid ratings
  then spreads the missing mass proportionally.
* Invalid continuations (``0`` on a 1..10 scale, ``11``) lose their mass; renormalising over
  the valid ratings removes it.
* A continuation that cannot be read (a server reports top-k log-probabilities only along
  the generated path, so ``P(0 | 1)`` is unknown when the greedy answer was ``8``) is handled
  by ``unknown_continuation``: ``"drop"`` (default) leaves the ambiguous mass (``P(1)`` at
  scale 10) out before renormalising; ``"stop"`` counts it as the one-digit rating. A
  full-vocabulary backend computes every branch exactly by forced decoding instead.
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

import numpy as np
import numpy.typing as npt

from .._validation import check_int
from ._backend import LogprobBackend
from ._features import log_softmax

__all__ = [
    "RatingDistribution",
    "StepFn",
    "UnknownContinuation",
    "digit_logprobs",
    "rating_distribution",
    "rating_scale",
    "topk_token_logprobs",
]

FloatArray: TypeAlias = npt.NDArray[np.float64]
UnknownContinuation: TypeAlias = Literal["drop", "stop"]
"""What to do with a rating whose continuation is unknown (see :func:`rating_distribution`)."""
StepFn: TypeAlias = Callable[[tuple[str, ...]], Mapping[str, float] | None]
"""``step(path)`` returns ``{token text: logprob}`` for the token after ``path`` (the token
texts emitted since the rating position), or ``None`` when that distribution is unknown."""

_DIGITS = re.compile(r"\d+")
_FIRST_DIGIT = re.compile(r"\d")


@dataclass(frozen=True)
class RatingDistribution:
    """A probability for each valid rating.

    Attributes:
        ratings: The valid ratings ``rating_min..scale``.
        probs: ``P(r)`` renormalised over the valid ratings (sums to 1), or all NaN when no
            valid rating had any mass.
        mass: The total probability of the valid ratings before renormalisation.
        unresolved: Probability left out because a continuation was unknown.
    """

    ratings: tuple[int, ...]
    probs: FloatArray
    mass: float
    unresolved: float = 0.0

    @property
    def expected(self) -> float:
        """``sum_r r P(r)``; NaN when no valid rating had mass."""
        if not self.mass > 0:
            return float("nan")
        return float(np.dot(np.asarray(self.ratings, dtype=np.float64), self.probs))

    @property
    def mode(self) -> int | None:
        """The most probable rating (``None`` without mass)."""
        if not self.mass > 0:
            return None
        return self.ratings[int(np.argmax(self.probs))]

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form: ``{"probs": {rating: p}, "mass": ..., "unresolved": ...}``."""
        return {
            "probs": {str(r): float(p) for r, p in zip(self.ratings, self.probs, strict=True)},
            "mass": self.mass,
            "unresolved": self.unresolved,
            "expected": self.expected,
        }


def rating_scale(scale: int, rating_min: int = 1) -> tuple[int, ...]:
    """The valid ratings ``rating_min..scale``, after checking the scale.

    Raises:
        ValueError: If ``scale`` or ``rating_min`` is not an int, or not
            ``0 <= rating_min < scale``.
    """
    check_int(scale, "scale")
    check_int(rating_min, "rating_min")
    if rating_min < 0 or rating_min >= scale:
        raise ValueError(
            f"The rating scale must satisfy 0 <= rating_min < scale. Got {rating_min}..{scale}."
        )
    return tuple(range(rating_min, scale + 1))


def _digits_of(token: str, first: bool) -> tuple[str, bool] | None:
    """``(digits, ends_number)`` of a token read at a rating step, or ``None`` (no digit).

    At the first step leading whitespace is allowed (``" 8"``); later a token must start with
    a digit to extend the number. ``ends_number`` is true when non-digit text follows the
    digits inside the token (``"8]]"``).
    """
    body = token.lstrip() if first else token
    match = _DIGITS.match(body)
    if match is None:
        return None
    return match.group(0), match.end() < len(body)


def rating_distribution(
    step: StepFn,
    *,
    scale: int,
    rating_min: int = 1,
    unknown_continuation: UnknownContinuation = "drop",
) -> RatingDistribution:
    """Turn next-token distributions at the rating position into ``P(rating)``.

    Args:
        step: ``step(path) -> {token text: logprob} | None``: the distribution of the token
            after ``path``, the tuple of token texts emitted since the rating position
            (``()`` is the rating position itself). Only tokens that start with a digit
            matter (at the first step after optional whitespace). ``None``: unknown.
        scale: Top of the scale.
        rating_min: Bottom of the scale (default 1).
        unknown_continuation: ``"drop"`` or ``"stop"``, for a rating that may continue into
            a longer valid rating (``1`` -> ``10``) when the continuation is unknown.

    Returns:
        The :class:`RatingDistribution`.

    Raises:
        ValueError: On an invalid scale or ``unknown_continuation``.

    Example:
        >>> import math
        >>> tables = {(): {"1": math.log(0.5), "8": math.log(0.5)},
        ...           ("1",): {"0": math.log(0.9), "]]": math.log(0.1)}}
        >>> dist = rating_distribution(tables.get, scale=10)
        >>> round(dist.expected, 2)  # P(10)=0.45, P(1)=0.05, P(8)=0.5
        8.55
    """
    ratings = rating_scale(scale, rating_min)
    if unknown_continuation not in ("drop", "stop"):
        raise ValueError(
            "The `unknown_continuation` argument must be 'drop' or 'stop'. "
            f"Got {unknown_continuation!r} instead."
        )
    valid = {str(r): i for i, r in enumerate(ratings)}
    prefixes = {s[:n] for s in valid for n in range(1, len(s))}
    probs = np.zeros(len(ratings), dtype=np.float64)
    unresolved = 0.0

    def expand(path: tuple[str, ...], digits: str, mass: float) -> None:
        nonlocal unresolved
        dist = step(path)
        if dist is None:
            if path and digits in valid and unknown_continuation == "stop":
                probs[valid[digits]] += mass
            else:
                unresolved += mass
            return
        digit_mass = 0.0
        for token, logprob in dist.items():
            parsed = _digits_of(token, first=not path)
            if parsed is None or not math.isfinite(logprob):
                continue
            more, ends = parsed
            p = math.exp(logprob)
            digit_mass += p
            number = digits + more
            if ends or number not in prefixes:
                if number in valid:
                    probs[valid[number]] += mass * p
                # else: not a valid rating (0, 11 on 1..10): its mass is lost.
            else:
                expand((*path, token), number, mass * p)
        if path and digits in valid:
            probs[valid[digits]] += mass * max(0.0, 1.0 - digit_mass)

    expand((), "", 1.0)
    mass = float(probs.sum())
    normed = probs / mass if mass > 0 else np.full(len(ratings), np.nan)
    return RatingDistribution(ratings, normed, mass, unresolved)


# ------------------------------------------------------------------ raw-distribution helpers


def _merge(out: dict[str, float], text: str, logprob: float) -> None:
    # Two ids can decode to the same text; their probabilities add.
    out[text] = float(np.logaddexp(out[text], logprob)) if text in out else float(logprob)


def topk_token_logprobs(logprobs: Any, token_texts: Sequence[str], k: int) -> dict[str, float]:
    """The top-``k`` entries of one full-vocabulary log-probability row, as a server gives them.

    Args:
        logprobs: ``(V,)`` log-probabilities (or logits: they are normalised first).
        token_texts: The text of each token id.
        k: How many to keep.
    """
    row = log_softmax(np.asarray(logprobs, dtype=np.float64))
    check_int(k, "k", min_value=1, max_value=row.size)
    top = np.argpartition(row, row.size - k)[-k:]
    out: dict[str, float] = {}
    for i in top[np.argsort(-row[top])]:
        _merge(out, token_texts[int(i)], float(row[int(i)]))
    return out


class _DigitTable:
    """Ids and texts of the vocabulary entries that start with a digit (after whitespace)."""

    def __init__(self, texts: Sequence[str]) -> None:
        ids = [i for i, t in enumerate(texts) if _FIRST_DIGIT.match(t.lstrip())]
        self.ids = np.asarray(ids, dtype=np.int64)
        self.texts = [texts[i] for i in ids]


_TABLES: weakref.WeakKeyDictionary[LogprobBackend, _DigitTable] = weakref.WeakKeyDictionary()


def _digit_table(backend: LogprobBackend) -> _DigitTable:
    table = _TABLES.get(backend)
    if table is None:
        table = _DigitTable(backend.token_texts())
        _TABLES[backend] = table
    return table


def digit_logprobs(logprobs: Any, token_texts: Sequence[str]) -> dict[str, float]:
    """The digit-leading entries of one full-vocabulary row as ``{token text: logprob}``.

    Only tokens that start with a digit (after optional whitespace) can extend a rating, so
    the others are left out; :func:`rating_distribution` needs nothing else.
    """
    row = log_softmax(np.asarray(logprobs, dtype=np.float64))
    table = _DigitTable(token_texts)
    return _digit_dict(row, table)


def _digit_dict(row: FloatArray, table: _DigitTable) -> dict[str, float]:
    out: dict[str, float] = {}
    for i, text in zip(table.ids, table.texts, strict=True):
        _merge(out, text, float(row[i]))
    return out
