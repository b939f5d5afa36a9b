"""Glass-box scoring: token-probability features and rating scorers over logprob backends.

* Backends (:class:`LogprobBackend`) say what they can return (:class:`Capability`); asking for
  something they lack raises :class:`CapabilityError`:

  - :class:`LlamaCppBackend`: a GGUF in process, full vocabulary at every position, forced
    decoding of a given text, generation with logprobs;
  - :class:`TransformersBackend`: the same models (or a Hugging Face folder) with
    transformers on CPU torch, full vocabulary and attention weights (optional extra
    ``judgeopt[transformers]``);
  - :class:`LiteLLMBackend`: OpenAI-compatible servers and hosted APIs, top-k logprobs of
    generated tokens (forced decoding only through vLLM's prompt logprobs, on request).

* Features of Huang et al. (seed 003), pure numpy: :func:`sentprob`, :func:`softmax_entropy`,
  :func:`softmax_variance`, :func:`softmax_combo`, :func:`ensemble_stats`,
  :func:`sentprob_ref`, :func:`attention_entropy` and the top-k approximations.
* :func:`compute_features` / :func:`correlate_features` run them over a dataset.
* Rating scorers: :func:`greedy_rating`, :func:`expected_rating` (probability-weighted, with
  multi-token ratings), :func:`self_consistency_rating`, and the raw helpers
  :func:`rating_distribution`, :func:`rating_from_generation`, :func:`self_consistency`.

The protocol, the features and the rating maths live in :mod:`judgeopt.scoring` (shared with
the judge) and are re-exported here. ``import judgeopt.glassbox`` loads neither DSPy nor
LiteLLM: they are loaded when a LiteLLM backend is built or features are computed.

See ``docs/glassbox.md``.
"""

from __future__ import annotations

from judgeopt.scoring import (
    BACKEND_CAPABILITIES,
    Capability,
    CapabilityError,
    ExpectedRating,
    Generation,
    GlassBoxError,
    LogprobBackend,
    RatingDistribution,
    ScoredText,
    SelfConsistency,
    attention_entropy,
    digit_logprobs,
    ensemble_stats,
    generation_from_logprobs,
    log_softmax,
    rating_distribution,
    rating_from_generation,
    self_consistency,
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
    topk_token_logprobs,
)

from ._compute import compute_features
from ._factory import BACKENDS, make_backend
from ._feature_result import FeatureCorrelations, FeatureResult, correlate_features
from ._litellm import LiteLLMBackend
from ._llamacpp import LlamaCppBackend
from ._rating import expected_rating, greedy_rating, self_consistency_rating
from ._registry import DEFAULT_FEATURES, FEATURES, PROMPT_POOL, FeatureSpec
from ._transformers import TransformersBackend

__all__ = [
    "BACKENDS",
    "BACKEND_CAPABILITIES",
    "DEFAULT_FEATURES",
    "FEATURES",
    "PROMPT_POOL",
    "Capability",
    "CapabilityError",
    "ExpectedRating",
    "FeatureCorrelations",
    "FeatureResult",
    "FeatureSpec",
    "Generation",
    "GlassBoxError",
    "LiteLLMBackend",
    "LlamaCppBackend",
    "LogprobBackend",
    "RatingDistribution",
    "ScoredText",
    "SelfConsistency",
    "TransformersBackend",
    "attention_entropy",
    "compute_features",
    "correlate_features",
    "digit_logprobs",
    "ensemble_stats",
    "expected_rating",
    "generation_from_logprobs",
    "greedy_rating",
    "log_softmax",
    "make_backend",
    "rating_distribution",
    "rating_from_generation",
    "self_consistency",
    "self_consistency_rating",
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
