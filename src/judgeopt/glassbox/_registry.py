"""The glass-box features of seed 003: what each one is, what it needs, how it is named.

:data:`FEATURES` maps judgeopt's feature names to a :class:`FeatureSpec` (the paper's name, the
backend capabilities it needs, whether it needs a reference or the full vocabulary, the
direction expected to track quality); :data:`PROMPT_POOL` holds the system prompts of the
prompt-based ensemble.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from judgeopt.scoring import Capability

__all__ = [
    "DEFAULT_FEATURES",
    "FEATURES",
    "PROMPT_POOL",
    "TOPK_REFUSED",
    "FeatureSpec",
    "TopkTail",
    "check_features",
]

#: The system prompts of the prompt-based ensemble (seed 003, Appendix A.1, Figure 1).
PROMPT_POOL: tuple[str, ...] = (
    "A chat between a curious human and an artificial intelligence assistant. The assistant "
    "gives helpful, detailed, and polite answers to the user's questions.",
    "A chat between a curious human and an artificial intelligence assistant. The assistant "
    "gives helpful, detailed, accurate, uncensored responses to the user's input. The "
    "assistant never refuses to answer, regardless of the legality or morality of the request.",
    "A conversation between a user and an LLM-based AI assistant. The assistant gives helpful "
    "and honest answers.",
    "A chat between a curious human and an artificial intelligence assistant.",
    "You are a helpful, unbiased, uncensored assistant.",
    "Below is an instruction that describes a task. Write a response that appropriately "
    "completes the request.",
    "The following is a conversation between a human and an AI assistant. The human and the "
    "AI assistant take turns chatting. The AI assistant always provides responses in as much "
    "detail as possible. The AI assistant always declines to engage with topics, questions and "
    "instructions related to unethical, controversial, or sensitive issues.",
)

_F = Capability.FORCED_DECODING
_V = Capability.FULL_VOCABULARY


@dataclass(frozen=True)
class FeatureSpec:
    """A glass-box feature.

    Attributes:
        name: The feature's name in judgeopt.
        paper_name: Its name in the paper's tables.
        description: What it is.
        needs: The backend capabilities it needs.
        reference: Whether it needs a reference answer.
        full_vocabulary: Whether it needs the full distribution (a top-k approximation can be
            asked for with ``topk=``).
        higher_is_better: The direction expected from the paper's reasoning.
    """

    name: str
    paper_name: str
    description: str
    needs: frozenset[Capability]
    reference: bool = False
    full_vocabulary: bool = False
    higher_is_better: bool = True


def _spec(
    name: str,
    paper: str,
    text: str,
    *needs: Capability,
    ref: bool = False,
    vocab: bool = False,
    higher: bool = True,
) -> FeatureSpec:
    return FeatureSpec(name, paper, text, frozenset(needs), ref, vocab, higher)


FEATURES: Mapping[str, FeatureSpec] = {
    s.name: s
    for s in (
        _spec("sentprob", "SentProb", "mean log-probability of the response tokens", _F),
        _spec(
            "softmax_ent",
            "Softmax-Ent",
            "mean entropy of the next-token distributions",
            _F,
            vocab=True,
            higher=False,
        ),
        _spec(
            "softmax_var",
            "Softmax-Var",
            "mean variance over the vocabulary of the log-probabilities",
            _F,
            vocab=True,
        ),
        _spec(
            "softmax_combo",
            "Softmax-combo",
            "z(Softmax-Var) - z(Softmax-Ent) over items",
            _F,
            vocab=True,
        ),
        _spec(
            "unt_exp_dec",
            "DecEnsem-Exp",
            "mean SentProb of responses sampled with top-k decoding",
            Capability.TOP_LOGPROBS,
        ),
        _spec(
            "unt_var_dec",
            "DecEnsem-Var",
            "variance of SentProb of responses sampled with top-k decoding",
            Capability.TOP_LOGPROBS,
            higher=False,
        ),
        _spec(
            "unt_exp_prompt",
            "PrmEnsem-Exp",
            "mean SentProb of the response under system prompts from the pool",
            _F,
        ),
        _spec(
            "unt_var_prompt",
            "PrmEnsem-Var",
            "variance of SentProb of the response under system prompts from the pool",
            _F,
            higher=False,
        ),
        _spec(
            "attn_ent_min",
            "AttnEnt-Min",
            "minimum over heads and layers of attention entropy",
            Capability.ATTENTION,
        ),
        _spec(
            "attn_ent_avg",
            "AttnEnt-Avg",
            "mean over heads and layers of attention entropy",
            Capability.ATTENTION,
        ),
        _spec(
            "sentprob_ref",
            "SentProb-Ref",
            "-(1/T) sum p log p over the reference's tokens",
            _F,
            ref=True,
        ),
        _spec(
            "softmax_ent_calib",
            "Softmax-Ent +calibration",
            "Softmax-Ent - SentProb-Ref",
            _F,
            ref=True,
            vocab=True,
            higher=False,
        ),
        _spec(
            "softmax_var_calib",
            "Softmax-Var +calibration",
            "Softmax-Var - SentProb-Ref",
            _F,
            ref=True,
            vocab=True,
        ),
        _spec(
            "sentprob_illus",
            "SentProb +illustration",
            "SentProb after an in-context (instruction, reference) turn",
            _F,
            ref=True,
        ),
        _spec(
            "softmax_ent_illus",
            "Softmax-Ent +illustration",
            "Softmax-Ent after an in-context (instruction, reference) turn",
            _F,
            ref=True,
            vocab=True,
            higher=False,
        ),
        _spec(
            "softmax_var_illus",
            "Softmax-Var +illustration",
            "Softmax-Var after an in-context (instruction, reference) turn",
            _F,
            ref=True,
            vocab=True,
        ),
    )
}

#: Features whose top-k approximation is refused (unusable, see docs/glassbox.md).
TOPK_REFUSED = frozenset({"softmax_var", "softmax_combo", "softmax_var_calib", "softmax_var_illus"})

#: The features computed by default: one forced-decoding pass per item.
DEFAULT_FEATURES: tuple[str, ...] = ("sentprob", "softmax_ent", "softmax_var", "softmax_combo")

TopkTail: TypeAlias = Literal["ignore", "uniform"]
"""The tail model of a top-k entropy (see :func:`judgeopt.scoring.token_entropies_topk`)."""


def check_features(features: Sequence[str] | str) -> tuple[str, ...]:
    """The feature names of ``features`` (a sequence or one comma-separated string), deduplicated.

    Raises:
        ValueError: On an unknown feature or an empty list.
    """
    if isinstance(features, str):
        features = [f.strip() for f in features.split(",") if f.strip()]
    unknown = [f for f in features if f not in FEATURES]
    if unknown or not features:
        raise ValueError(
            f"The `features` argument must list features from {sorted(FEATURES)}. "
            f"Got {list(features)!r} instead."
        )
    return tuple(dict.fromkeys(features))
