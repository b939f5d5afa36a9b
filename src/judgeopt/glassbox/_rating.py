"""Rating scorers: greedy parse, probability-weighted expected rating, self-consistency.

Three ways to turn a judge model's answer into a score on a ``rating_min..scale`` scale:

* **greedy**: decode at temperature 0 and parse the rating out of the text
  (:func:`judgeopt.judge.parse_rating`, the library's parser).
* **expected rating** (G-Eval's probability-weighted score): read the model's distribution
  at the position where the greedy answer writes its rating, turn it into a probability for
  every valid rating ``r`` and return ``sum_r r P(r)`` after renormalising over the valid
  ratings. Ratings of several tokens are chained: Qwen writes ``10`` as ``1`` then ``0``, so
  ``P(10) = P(1) P(0 | 1) P(end | 10)`` and ``P(1) = P(1) P(end | 1)``, where ``P(end | s)`` is
  one minus the probability of any digit token after ``s``. Tokenizers with multi-digit
  tokens (``"10"`` as one token) are handled the same way (a token contributes all its
  digits).
* **self-consistency** (HPSS Appendix I): sample ``N`` answers, parse each, average the
  ratings that parsed; failures are counted, not imputed.

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

The functions here take a backend only to generate; they are not wired into
:class:`judgeopt.judge.JudgeProgram`.
"""

from __future__ import annotations

import math
import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from judgeopt.judge import RatingParse, parse_rating

from ._backend import Capability, Generation, LogprobBackend, Messages
from ._features import log_softmax

__all__ = [
    "ExpectedRating",
    "RatingDistribution",
    "SelfConsistency",
    "digit_logprobs",
    "expected_rating",
    "greedy_rating",
    "rating_distribution",
    "rating_from_generation",
    "self_consistency",
    "self_consistency_rating",
    "topk_token_logprobs",
]

FloatArray = npt.NDArray[np.float64]
UnknownContinuation = Literal["drop", "stop"]
#: ``step(path)`` returns ``{token text: logprob}`` for the token after ``path`` (the token
#: texts emitted since the rating position), or ``None`` when that distribution is unknown.
StepFn = Callable[[tuple[str, ...]], Mapping[str, float] | None]

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


def _check_scale(scale: int, rating_min: int) -> tuple[int, ...]:
    for name, value in (("scale", scale), ("rating_min", rating_min)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"The `{name}` argument must be an int. Got {value!r} instead.")
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
    ratings = _check_scale(scale, rating_min)
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


def topk_token_logprobs(
    logprobs: Any, token_texts: Sequence[str], k: int
) -> dict[str, float]:
    """The top-``k`` entries of one full-vocabulary log-probability row, as a server gives them.

    Args:
        logprobs: ``(V,)`` log-probabilities (or logits: they are normalised first).
        token_texts: The text of each token id.
        k: How many to keep.
    """
    row = log_softmax(np.asarray(logprobs, dtype=np.float64))
    if not 1 <= k <= row.size:
        raise ValueError(f"`k` must be in 1..{row.size}. Got {k!r} instead.")
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


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ExpectedRating:
    """The probability-weighted rating of one judge answer.

    Attributes:
        score: The expected rating, or ``None`` when it could not be computed.
        greedy: The greedy answer's parsed rating (``None`` if it did not parse).
        distribution: ``P(rating)``, when computed.
        text: The greedy answer.
        method: ``"full_vocabulary"`` or ``"top_k=K"``.
        error: Why ``score`` is ``None``.
    """

    score: float | None
    greedy: float | None
    distribution: RatingDistribution | None
    text: str
    method: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Whether an expected rating was computed."""
        return self.score is not None


@dataclass(frozen=True)
class SelfConsistency:
    """The mean of ``N`` sampled ratings (HPSS Appendix I; Wang et al. 2023).

    Attributes:
        score: Mean of the ratings that parsed, ``None`` if none did.
        ratings: Each sample's rating (``None`` for a failed parse), in sample order.
        n_failed: Samples whose rating did not parse.
        errors: The parse error of each failed sample.
        texts: The sampled answers.
    """

    score: float | None
    ratings: tuple[float | None, ...]
    n_failed: int
    errors: tuple[str, ...] = ()
    texts: tuple[str, ...] = field(default=(), repr=False)

    @property
    def n(self) -> int:
        """Number of samples."""
        return len(self.ratings)


# ---------------------------------------------------------------------------- scorers


def _rating_start(text: str, parsed: RatingParse) -> int | None:
    """Character offset where the parsed rating's number starts in ``text``."""
    if parsed.matched is None:
        return None
    at = text.rfind(parsed.matched)
    digit = _FIRST_DIGIT.search(parsed.matched)
    if at < 0 or digit is None:
        return None
    return at + digit.start()


def rating_from_generation(
    generation: Generation,
    *,
    scale: int,
    rating_min: int = 1,
    backend: LogprobBackend | None = None,
    top_k: int | None = None,
    unknown_continuation: UnknownContinuation = "drop",
) -> ExpectedRating:
    """The expected rating from one greedy generation that carries log-probabilities.

    Args:
        generation: A greedy :class:`Generation` with ``logits`` (full vocabulary) or
            ``top_logprobs``.
        scale: Top of the scale.
        rating_min: Bottom of the scale.
        backend: The full-vocabulary backend that made ``generation``: needed for the
            exact mode (its vocabulary, and branches off the greedy path).
        top_k: ``None``: exact, from the full vocabulary (``generation.logits`` and
            ``backend``). ``K``: only the top-``K`` log-probabilities along the generated
            path, as a server reports them (from ``generation.top_logprobs``, or truncated
            from ``generation.logits``).
        unknown_continuation: See :func:`rating_distribution`.

    Returns:
        The :class:`ExpectedRating`; ``score`` is ``None`` (with ``error``) when the greedy
        answer has no parsable rating or no valid rating has any probability.

    Raises:
        ValueError: If the generation lacks the log-probabilities the mode needs.
    """
    _check_scale(scale, rating_min)
    method = "full_vocabulary" if top_k is None else f"top_k={top_k}"
    parsed = parse_rating(generation.text, scale=scale, rating_min=rating_min)
    greedy = parsed.score

    def fail(error: str) -> ExpectedRating:
        return ExpectedRating(None, greedy, None, generation.text, method, error)

    if not parsed.ok:
        return fail(f"greedy answer has no rating: {parsed.error}")
    start = _rating_start(generation.text, parsed)
    if start is None:
        return fail("could not locate the rating in the greedy answer")
    pos = generation.token_at(start)
    tokens = generation.tokens
    lead = generation.text[generation.offsets[pos] : start]
    if lead.strip():
        return fail(
            f"the rating shares token {tokens[pos]!r} with non-digit text: its distribution "
            "cannot be read"
        )

    # Where the generated path goes: path of token texts -> position of the next token.
    path_at: dict[tuple[str, ...], int] = {(): pos}
    path: tuple[str, ...] = ()
    for j in range(pos, len(tokens)):
        parsed_tok = _digits_of(tokens[j], first=not path)
        if parsed_tok is None or parsed_tok[1]:
            break
        path = (*path, tokens[j])
        path_at[path] = j + 1

    exact = top_k is None
    if exact:
        if generation.logits is None or backend is None:
            raise ValueError(
                "the exact expected rating needs a generation with full-vocabulary logits "
                "(generate(..., full_logprobs=True)) and the backend that made it"
            )
        table = _digit_table(backend)
    elif generation.top_logprobs is None and (generation.logits is None or backend is None):
        raise ValueError(
            "the top-k expected rating needs a generation with top_logprobs, or one with "
            "full-vocabulary logits and the backend that made it"
        )

    def row_dict(index: int) -> dict[str, float] | None:
        if index >= len(tokens):
            return None
        if exact:
            assert generation.logits is not None
            return _digit_dict(log_softmax(generation.logits[index]), table)
        if generation.top_logprobs is not None:
            items = sorted(generation.top_logprobs[index].items(), key=lambda kv: -kv[1])
            return dict(items[:top_k])
        if generation.logits is None or backend is None or top_k is None:
            raise ValueError("truncating full-vocabulary logits to the top-k needs the backend")
        return topk_token_logprobs(generation.logits[index], backend.token_texts(), top_k)

    def step(branch: tuple[str, ...]) -> Mapping[str, float] | None:
        index = path_at.get(branch)
        if index is not None and index < len(tokens):
            return row_dict(index)
        # Off the generated path, or after its last token (the end-of-turn step): only a
        # full-vocabulary backend can compute it, by forced decoding of the branch.
        if not exact or generation.token_ids is None or generation.prompt_ids is None:
            return None
        assert backend is not None
        if index is not None:
            branch_ids = list(generation.token_ids[pos:index])
        else:
            branch_ids = backend.tokenize("".join(branch))
        context = [*generation.prompt_ids, *generation.token_ids[:pos], *branch_ids]
        return _digit_dict(log_softmax(backend.next_logprobs(context)), table)

    dist = rating_distribution(
        step, scale=scale, rating_min=rating_min, unknown_continuation=unknown_continuation
    )
    if not dist.mass > 0:
        return ExpectedRating(
            None, greedy, dist, generation.text, method, "no valid rating has any probability"
        )
    return ExpectedRating(dist.expected, greedy, dist, generation.text, method)


def expected_rating(
    messages: Messages,
    backend: LogprobBackend,
    *,
    scale: int,
    rating_min: int = 1,
    top_k: int | None = None,
    max_tokens: int = 512,
    unknown_continuation: UnknownContinuation = "drop",
) -> ExpectedRating:
    """Generate the judge's answer greedily and return its probability-weighted rating.

    Args:
        messages: The judge prompt (e.g. :func:`judgeopt.judge.render_messages`).
        backend: The model.
        scale: Top of the rating scale.
        rating_min: Bottom of the scale (default 1).
        top_k: ``None`` (default): the exact expected rating from the full vocabulary
            (needs :attr:`Capability.FULL_VOCABULARY`). ``K``: use the top-``K``
            log-probabilities of the generated tokens, as servers give them.
        max_tokens: Completion budget.
        unknown_continuation: See :func:`rating_distribution`.

    Returns:
        The :class:`ExpectedRating` (``score`` ``None`` with an ``error`` on failure).

    Raises:
        CapabilityError: If the backend cannot give what the mode needs.

    Example:
        >>> from judgeopt.glassbox import make_backend  # doctest: +SKIP
        >>> backend = make_backend("local:qwen2.5-coder-0.5b")  # doctest: +SKIP
        >>> expected_rating([{"role": "user", "content": "Rate 1-10 ... [[rating]]"}],
        ...                 backend, scale=10).score  # doctest: +SKIP
        7.83
    """
    _check_scale(scale, rating_min)
    if top_k is None:
        backend.require(
            Capability.FULL_VOCABULARY,
            "the exact expected rating (pass top_k=K to use the top-K log-probabilities)",
        )
        generation = backend.generate(messages, max_tokens=max_tokens, full_logprobs=True)
    else:
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ValueError(f"The `top_k` argument must be an int >= 1. Got {top_k!r} instead.")
        backend.require(Capability.TOP_LOGPROBS, "the expected rating from top-k logprobs")
        generation = backend.generate(messages, max_tokens=max_tokens, top_logprobs=top_k)
    return rating_from_generation(
        generation,
        scale=scale,
        rating_min=rating_min,
        backend=backend,
        top_k=top_k,
        unknown_continuation=unknown_continuation,
    )


def greedy_rating(
    messages: Messages,
    backend: LogprobBackend,
    *,
    scale: int,
    rating_min: int = 1,
    max_tokens: int = 512,
) -> RatingParse:
    """Generate at temperature 0 and parse the rating (:func:`judgeopt.judge.parse_rating`)."""
    _check_scale(scale, rating_min)
    generation = backend.generate(messages, max_tokens=max_tokens)
    return parse_rating(generation.text, scale=scale, rating_min=rating_min)


def self_consistency(
    texts: Sequence[str], *, scale: int, rating_min: int = 1
) -> SelfConsistency:
    """Average the ratings parsed from ``N`` sampled answers; count the failures.

    Example:
        >>> self_consistency(["Rating: [[8]]", "[[6]]", "no idea"], scale=10).score
        7.0
    """
    _check_scale(scale, rating_min)
    parses = [parse_rating(t, scale=scale, rating_min=rating_min) for t in texts]
    ratings = tuple(p.score for p in parses)
    good = [r for r in ratings if r is not None]
    errors = tuple(p.error for p in parses if p.error is not None)
    score = float(np.mean(good)) if good else None
    return SelfConsistency(score, ratings, len(ratings) - len(good), errors, tuple(texts))


def self_consistency_rating(
    messages: Messages,
    backend: LogprobBackend,
    *,
    scale: int,
    rating_min: int = 1,
    n: int = 20,
    temperature: float = 1.0,
    seed: int = 0,
    max_tokens: int = 512,
) -> SelfConsistency:
    """Sample ``n`` answers (seeds ``seed..seed+n-1``) and average their parsed ratings.

    HPSS Appendix I uses ``n=20`` generations and the mean score.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"The `n` argument must be an int >= 1. Got {n!r} instead.")
    if not temperature > 0:
        raise ValueError(
            f"The `temperature` argument must be > 0 for sampling. Got {temperature!r} instead."
        )
    texts = [
        backend.generate(
            messages, max_tokens=max_tokens, temperature=temperature, seed=seed + i
        ).text
        for i in range(n)
    ]
    return self_consistency(texts, scale=scale, rating_min=rating_min)
