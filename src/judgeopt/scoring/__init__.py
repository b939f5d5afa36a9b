"""Scoring: turning a judge model's output into a score, with numpy only.

The layer that :mod:`judgeopt.judge` and :mod:`judgeopt.glassbox` share, below both (it
imports neither DSPy nor LiteLLM nor any model runtime):

* Rating parsing: :func:`parse_rating` / :func:`parse_preference` read a rating or a pairwise
  verdict from free text (:class:`RatingParse`, :class:`PreferenceParse`; the rules in
  :data:`RATING_RULES` / :data:`PREFERENCE_RULES`, documented in ``docs/parsing.md``).
* The logprob-backend protocol: :class:`LogprobBackend` declares :class:`Capability` flags and
  returns a :class:`Generation` or a :class:`ScoredText`; a missing capability raises
  :class:`CapabilityError`. :func:`generation_from_logprobs` reads a ``Generation`` from an
  OpenAI-shaped ``logprobs.content`` list. The concrete backends are in :mod:`judgeopt.glassbox`.
* Rating distributions: :func:`rating_distribution` (``P(rating)`` from next-token
  distributions, multi-token ratings chained), :func:`rating_from_generation` (the expected
  rating of one answer), :func:`self_consistency` (the mean of sampled ratings).
* Combining judges: :func:`combine_z` (the weighted mean z of several judges' ratings, the
  arithmetic a prompt ensemble and a selection rule's pick share).
* Token features of Huang et al.: :func:`log_softmax`, :func:`sentprob`,
  :func:`softmax_entropy`, :func:`softmax_variance`, :func:`topk_logprobs`, ...
"""

from __future__ import annotations

from ._backend import (
    BACKEND_CAPABILITIES,
    Capability,
    CapabilityError,
    GlassBoxError,
    LogprobBackend,
)
from ._combine import combine_z
from ._distribution import (
    RatingDistribution,
    StepFn,
    UnknownContinuation,
    digit_logprobs,
    rating_distribution,
    rating_scale,
    topk_token_logprobs,
)
from ._features import (
    attention_entropy,
    ensemble_stats,
    log_softmax,
    sentprob,
    sentprob_ref,
    softmax_combo,
    softmax_entropy,
    softmax_variance,
    token_entropies,
    token_entropies_topk,
    token_logprob_variances,
    token_logprob_variances_topk,
    topk_logprobs,
)
from ._generation import (
    FloatArray,
    Generation,
    Messages,
    ScoredText,
    char_offsets,
    generation_from_logprobs,
)
from ._parse import (
    PREFERENCE_RULES,
    RATING_RULES,
    Choice,
    PreferenceParse,
    RatingParse,
    Rule,
    parse_preference,
    parse_rating,
)
from ._rating import ExpectedRating, SelfConsistency, rating_from_generation, self_consistency

__all__ = [
    "BACKEND_CAPABILITIES",
    "PREFERENCE_RULES",
    "RATING_RULES",
    "Capability",
    "CapabilityError",
    "Choice",
    "ExpectedRating",
    "FloatArray",
    "Generation",
    "GlassBoxError",
    "LogprobBackend",
    "Messages",
    "PreferenceParse",
    "RatingDistribution",
    "RatingParse",
    "Rule",
    "ScoredText",
    "SelfConsistency",
    "StepFn",
    "UnknownContinuation",
    "attention_entropy",
    "char_offsets",
    "combine_z",
    "digit_logprobs",
    "ensemble_stats",
    "generation_from_logprobs",
    "log_softmax",
    "parse_preference",
    "parse_rating",
    "rating_distribution",
    "rating_from_generation",
    "rating_scale",
    "self_consistency",
    "sentprob",
    "sentprob_ref",
    "softmax_combo",
    "softmax_entropy",
    "softmax_variance",
    "token_entropies",
    "token_entropies_topk",
    "token_logprob_variances",
    "token_logprob_variances_topk",
    "topk_logprobs",
    "topk_token_logprobs",
]
