"""Ratings read from one answer with log-probabilities, or from several sampled answers.

* :func:`rating_from_generation`: the probability-weighted (expected) rating of one greedy
  :class:`Generation` that carries log-probabilities: the full-vocabulary logits of an
  in-process backend (exact, branches off the greedy path by forced decoding), or the top-k
  log-probabilities a server reports along the generated path (see
  :mod:`judgeopt.scoring._distribution` for the choices).
* :func:`self_consistency` (HPSS Appendix I; Wang et al. 2023): parse each of ``N`` sampled
  answers and average the ratings that parsed; failures are counted, not imputed.

Both read ratings with :func:`parse_rating`, the library's parser.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ._backend import LogprobBackend
from ._distribution import (
    _FIRST_DIGIT,
    RatingDistribution,
    StepFn,
    UnknownContinuation,
    _digit_dict,
    _digit_table,
    _digits_of,
    rating_distribution,
    rating_scale,
    topk_token_logprobs,
)
from ._features import log_softmax
from ._generation import Generation
from ._parse import RatingParse, parse_rating

__all__ = [
    "ExpectedRating",
    "SelfConsistency",
    "rating_from_generation",
    "self_consistency",
]


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


# ---------------------------------------------------------------------------- readers


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
    rating_scale(scale, rating_min)
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
    step = _step_fn(generation, backend, top_k, pos, _generated_path(tokens, pos))
    dist = rating_distribution(
        step, scale=scale, rating_min=rating_min, unknown_continuation=unknown_continuation
    )
    if not dist.mass > 0:
        return ExpectedRating(
            None, greedy, dist, generation.text, method, "no valid rating has any probability"
        )
    return ExpectedRating(dist.expected, greedy, dist, generation.text, method)


def _generated_path(tokens: Sequence[str], pos: int) -> dict[tuple[str, ...], int]:
    """Where the generated path goes: path of token texts -> position of the next token."""
    path_at: dict[tuple[str, ...], int] = {(): pos}
    path: tuple[str, ...] = ()
    for j in range(pos, len(tokens)):
        parsed_tok = _digits_of(tokens[j], first=not path)
        if parsed_tok is None or parsed_tok[1]:
            break
        path = (*path, tokens[j])
        path_at[path] = j + 1
    return path_at


def _step_fn(
    generation: Generation,
    backend: LogprobBackend | None,
    top_k: int | None,
    pos: int,
    path_at: Mapping[tuple[str, ...], int],
) -> StepFn:
    """The next-token log-probabilities after each branch from the rating position ``pos``.

    Raises:
        ValueError: If the generation lacks the log-probabilities the mode needs.
    """
    tokens = generation.tokens
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

    return step


def self_consistency(texts: Sequence[str], *, scale: int, rating_min: int = 1) -> SelfConsistency:
    """Average the ratings parsed from ``N`` sampled answers; count the failures.

    Example:
        >>> self_consistency(["Rating: [[8]]", "[[6]]", "no idea"], scale=10).score
        7.0
    """
    rating_scale(scale, rating_min)
    parses = [parse_rating(t, scale=scale, rating_min=rating_min) for t in texts]
    ratings = tuple(p.score for p in parses)
    good = [r for r in ratings if r is not None]
    errors = tuple(p.error for p in parses if p.error is not None)
    score = float(np.mean(good)) if good else None
    return SelfConsistency(score, ratings, len(ratings) - len(good), errors, tuple(texts))
