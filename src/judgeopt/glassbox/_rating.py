"""Rating scorers over a logprob backend: greedy parse, expected rating, self-consistency.

Three ways to have a backend's model rate on a ``rating_min..scale`` scale:

* :func:`greedy_rating`: decode at temperature 0 and parse the rating out of the text
  (:func:`judgeopt.scoring.parse_rating`, the library's parser).
* :func:`expected_rating` (G-Eval's probability-weighted score): generate greedily with
  log-probabilities and read ``sum_r r P(r)`` at the position where the answer writes its
  rating (:func:`judgeopt.scoring.rating_from_generation`; the choices are documented in
  :mod:`judgeopt.scoring` and ``docs/glassbox.md``).
* :func:`self_consistency_rating` (HPSS Appendix I): sample ``N`` answers, parse each,
  average the ratings that parsed (:func:`judgeopt.scoring.self_consistency`).

They take a backend only to generate; :class:`judgeopt.judge.JudgeProgram` reads the same
ratings from its LM's answers through :mod:`judgeopt.scoring`.
"""

from __future__ import annotations

from judgeopt.scoring import (
    Capability,
    ExpectedRating,
    LogprobBackend,
    Messages,
    RatingParse,
    SelfConsistency,
    UnknownContinuation,
    parse_rating,
    rating_from_generation,
    rating_scale,
    self_consistency,
)

from .._validation import check_int, check_number

__all__ = ["expected_rating", "greedy_rating", "self_consistency_rating"]


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
    rating_scale(scale, rating_min)
    if top_k is None:
        backend.require(
            Capability.FULL_VOCABULARY,
            "the exact expected rating (pass top_k=K to use the top-K log-probabilities)",
        )
        generation = backend.generate(messages, max_tokens=max_tokens, full_logprobs=True)
    else:
        check_int(top_k, "top_k", min_value=1)
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
    """Generate at temperature 0 and parse the rating (:func:`judgeopt.scoring.parse_rating`)."""
    rating_scale(scale, rating_min)
    generation = backend.generate(messages, max_tokens=max_tokens)
    return parse_rating(generation.text, scale=scale, rating_min=rating_min)


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
    check_int(n, "n", min_value=1)
    check_number(temperature, "temperature", min_value=0, min_open=True)
    texts = [
        backend.generate(
            messages, max_tokens=max_tokens, temperature=temperature, seed=seed + i
        ).text
        for i in range(n)
    ]
    return self_consistency(texts, scale=scale, rating_min=rating_min)
