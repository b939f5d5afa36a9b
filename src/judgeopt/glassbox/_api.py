"""Compute the glass-box features of seed 003 over a dataset and correlate them with humans.

:func:`compute_features` scores each record's ``(instruction, response)`` pair with a backend
and returns a :class:`FeatureResult`; :func:`correlate_features` correlates every feature with
every human aspect. :func:`make_backend` turns a model string into a backend.

How each feature is obtained (formulas in :mod:`judgeopt.glassbox._features`):

* one forced-decoding pass of the response after ``[system?] user: instruction`` gives
  SentProb (token log-probabilities) and Softmax-Ent / Softmax-Var (full vocabulary, or the
  explicitly requested top-k approximation); Softmax-combo is computed over all items after.
* decoding-based ensemble (Unt-Exp-dec / Unt-Var-dec): ``n_ensemble`` (10, as in the paper)
  responses sampled with random top-k decoding (Fan et al. 2018: ``sample_top_k=10``) for the
  instruction; SP of each is its SentProb from the generated tokens' log-probabilities. It
  measures the model's uncertainty on the instruction (the paper evaluates the model's own
  answer), so it does not depend on the given response: it is sampled once per distinct
  instruction and shared by the items that have it.
* prompt-based ensemble (Unt-Exp-prompt / Unt-Var-prompt): ``n_ensemble`` passes, each with a
  system prompt drawn at random from the paper's pool (:data:`PROMPT_POOL`, Appendix A.1);
  SP of each is the SentProb of the given response under that system prompt.
* with a reference: SentProb-Ref scores the reference after the instruction (once per
  distinct instruction and reference); the calibrated features subtract it
  (``Softmax-Ent - SentProb-Ref``, section 3.2); the in-context illustration features score
  the response after ``user: instruction, assistant: reference, user: instruction``
  (section 3.1).
* AttnEnt-Min / AttnEnt-Avg: from the backend's attention weights of the same pair
  (:class:`TransformersBackend` only; the prompt is then in its KV cache, so only the response
  is evaluated again).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ._backend import Capability, CapabilityError, LogprobBackend, ScoredText
from ._features import (
    attention_entropy,
    ensemble_stats,
    sentprob,
    sentprob_ref,
    softmax_combo,
    token_entropies,
    token_entropies_topk,
    token_logprob_variances,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_FEATURES",
    "FEATURES",
    "PROMPT_POOL",
    "FeatureCorrelations",
    "FeatureResult",
    "FeatureSpec",
    "compute_features",
    "correlate_features",
    "make_backend",
]

logger = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]

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


def _spec(name: str, paper: str, text: str, *needs: Capability, ref: bool = False,
          vocab: bool = False, higher: bool = True) -> FeatureSpec:
    return FeatureSpec(name, paper, text, frozenset(needs), ref, vocab, higher)


FEATURES: Mapping[str, FeatureSpec] = {
    s.name: s
    for s in (
        _spec("sentprob", "SentProb", "mean log-probability of the response tokens", _F),
        _spec("softmax_ent", "Softmax-Ent", "mean entropy of the next-token distributions",
              _F, vocab=True, higher=False),
        _spec("softmax_var", "Softmax-Var",
              "mean variance over the vocabulary of the log-probabilities", _F, vocab=True),
        _spec("softmax_combo", "Softmax-combo", "z(Softmax-Var) - z(Softmax-Ent) over items",
              _F, vocab=True),
        _spec("unt_exp_dec", "DecEnsem-Exp",
              "mean SentProb of responses sampled with top-k decoding",
              Capability.TOP_LOGPROBS),
        _spec("unt_var_dec", "DecEnsem-Var",
              "variance of SentProb of responses sampled with top-k decoding",
              Capability.TOP_LOGPROBS, higher=False),
        _spec("unt_exp_prompt", "PrmEnsem-Exp",
              "mean SentProb of the response under system prompts from the pool", _F),
        _spec("unt_var_prompt", "PrmEnsem-Var",
              "variance of SentProb of the response under system prompts from the pool", _F,
              higher=False),
        _spec("attn_ent_min", "AttnEnt-Min", "minimum over heads and layers of attention "
              "entropy", Capability.ATTENTION),
        _spec("attn_ent_avg", "AttnEnt-Avg", "mean over heads and layers of attention entropy",
              Capability.ATTENTION),
        _spec("sentprob_ref", "SentProb-Ref",
              "-(1/T) sum p log p over the reference's tokens", _F, ref=True),
        _spec("softmax_ent_calib", "Softmax-Ent +calibration", "Softmax-Ent - SentProb-Ref",
              _F, ref=True, vocab=True, higher=False),
        _spec("softmax_var_calib", "Softmax-Var +calibration", "Softmax-Var - SentProb-Ref",
              _F, ref=True, vocab=True),
        _spec("sentprob_illus", "SentProb +illustration",
              "SentProb after an in-context (instruction, reference) turn", _F, ref=True),
        _spec("softmax_ent_illus", "Softmax-Ent +illustration",
              "Softmax-Ent after an in-context (instruction, reference) turn", _F, ref=True,
              vocab=True, higher=False),
        _spec("softmax_var_illus", "Softmax-Var +illustration",
              "Softmax-Var after an in-context (instruction, reference) turn", _F, ref=True,
              vocab=True),
    )
}

#: Features whose top-k approximation is refused (unusable, see docs/glassbox.md).
_TOPK_REFUSED = frozenset({"softmax_var", "softmax_combo", "softmax_var_calib",
                           "softmax_var_illus"})

#: The features computed by default: one forced-decoding pass per item.
DEFAULT_FEATURES: tuple[str, ...] = ("sentprob", "softmax_ent", "softmax_var", "softmax_combo")

TopkTail = Literal["ignore", "uniform"]


#: The backends :func:`make_backend` can build, by :attr:`LogprobBackend.name`.
BACKENDS: tuple[str, ...] = ("llama.cpp", "transformers", "litellm")


def make_backend(
    model: str = "local",
    *,
    backend: str | None = None,
    api_base: str | None = None,
    api_key: str | None = None,
    n_threads: int | None = None,
    n_ctx: int | None = None,
    dtype: str | None = None,
    prompt_logprobs: bool = False,
    cache: bool | str | os.PathLike[str] = True,
) -> LogprobBackend:
    """Build the backend a model string names.

    With ``backend=None`` the model string decides: ``"local"`` / ``"local:NAME"`` /
    ``"local:PATH.gguf"`` run llama.cpp in process (:class:`LlamaCppBackend`, full
    vocabulary); anything else is a LiteLLM model (:class:`LiteLLMBackend`, top-k logprobs of
    generated tokens). ``backend="transformers"`` runs the same local models with
    transformers on CPU torch instead (:class:`TransformersBackend`: full vocabulary and
    attention weights; also ``"local:FOLDER"`` for a Hugging Face model folder).

    Args:
        model: The model string.
        backend: ``None`` (by the model string), ``"llama.cpp"``, ``"transformers"`` or
            ``"litellm"``.
        api_base: Endpoint of a LiteLLM model.
        api_key: Key of a LiteLLM model.
        n_threads: CPU threads of a local model (default ``$JUDGEOPT_THREADS`` or 2).
        n_ctx: Context window of a local model (default 4096).
        dtype: Weights of the transformers backend: ``"float32"`` (default) or
            ``"bfloat16"``.
        prompt_logprobs: LiteLLM against vLLM only: score given texts through its prompt
            logprobs.
        cache: LiteLLM's persistent cache (see :class:`LiteLLMBackend`).

    Raises:
        ValueError: On a malformed model string, an unknown backend, or an option that does
            not apply to the chosen backend.
        ImportError: For ``backend="transformers"`` without its packages (names the install
            command).
    """
    from judgeopt.lm._factory import parse_local_model

    from ._litellm import LiteLLMBackend
    from ._llamacpp import LlamaCppBackend

    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"The `backend` argument must be None or one of {list(BACKENDS)}. "
                         f"Got {backend!r} instead.")
    local = parse_local_model(model)
    chosen = backend or ("litellm" if local is None else "llama.cpp")
    if chosen == "litellm":
        if local is not None:
            raise ValueError(
                f"The local model {model!r} runs in process: use backend='llama.cpp' or "
                "backend='transformers' (a local server is a LiteLLM model such as "
                "'openai/NAME' with api_base)."
            )
        given = [k for k, v in {"n_threads": n_threads, "n_ctx": n_ctx, "dtype": dtype}.items()
                 if v is not None]
        if given:
            raise ValueError(f"{given} only apply to local models, not to {model!r}.")
        return LiteLLMBackend(model, api_base=api_base, api_key=api_key,
                              prompt_logprobs=prompt_logprobs, cache=cache)
    if local is None:
        raise ValueError(
            f"The {chosen} backend runs local models: 'local', 'local:NAME' or 'local:PATH'. "
            f"Got {model!r} instead."
        )
    wrong = {"api_base": api_base, "api_key": api_key}
    given = sorted(k for k, v in wrong.items() if v is not None)
    if given or prompt_logprobs:
        raise ValueError(
            f"{given or ['prompt_logprobs']} only apply to LiteLLM models, not to the local "
            f"model {model!r}."
        )
    kwargs: dict[str, Any] = {"n_threads": n_threads}
    if n_ctx is not None:
        kwargs["n_ctx"] = n_ctx
    if chosen == "transformers":
        from ._transformers import TransformersBackend

        return TransformersBackend(local, dtype=dtype or "float32", **kwargs)
    if dtype is not None:
        raise ValueError(f"`dtype` only applies to backend='transformers' (the llama.cpp "
                         f"backend runs the GGUF's own quantised weights). Got {dtype!r}.")
    return LlamaCppBackend(local, **kwargs)


# ------------------------------------------------------------------------------ results


@dataclass(frozen=True, eq=False)
class FeatureResult:
    """Per-item glass-box features.

    Attributes:
        features: The feature names, in the order asked for.
        ids: Record ids.
        group_ids: Record group ids (for group-level correlation).
        values: Feature name -> ``(n,)`` values (NaN where an item failed).
        human: Aspect -> ``(n,)`` human scores (NaN where a record has none).
        errors: Record id -> why its features are NaN.
        model: The backend's model.
        backend: The backend's name.
        seconds: Wall time.
        settings: The options used (for the record).
    """

    features: tuple[str, ...]
    ids: tuple[str, ...]
    group_ids: tuple[str | None, ...]
    values: dict[str, FloatArray]
    human: dict[str, FloatArray]
    errors: dict[str, str]
    model: str
    backend: str
    seconds: float
    settings: dict[str, Any] = field(default_factory=dict)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per item: ``id``, ``group_id``, the features and the human scores."""
        out = []
        for i, rid in enumerate(self.ids):
            row: dict[str, Any] = {"id": rid, "group_id": self.group_ids[i]}
            row.update({f: _num(self.values[f][i]) for f in self.features})
            row["human"] = {a: _num(v[i]) for a, v in self.human.items()}
            if rid in self.errors:
                row["error"] = self.errors[rid]
            out.append(row)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (JSON-ready)."""
        return {
            "model": self.model,
            "backend": self.backend,
            "features": list(self.features),
            "n_items": len(self.ids),
            "n_failed": len(self.errors),
            "seconds": round(self.seconds, 3),
            "settings": self.settings,
            "items": self.rows(),
        }


def _num(value: float) -> float | None:
    return None if not math.isfinite(float(value)) else float(value)


@dataclass(frozen=True)
class FeatureCorrelations:
    """Correlation of every feature with every human aspect.

    Attributes:
        values: ``values[feature][aspect][method]``; NaN when undefined (fewer than 3 items
            with both values, or a constant side).
        n_items: ``n_items[feature][aspect]``: items used.
        level: ``"dataset"`` or ``"group"``.
    """

    values: dict[str, dict[str, dict[str, float]]]
    n_items: dict[str, dict[str, int]]
    level: str

    def table(self, method: str = "spearman") -> str:
        """A text table: one row per feature, one column per aspect."""
        features = list(self.values)
        aspects = sorted({a for f in features for a in self.values[f]})
        width = max([len("feature"), *(len(f) for f in features)])
        head = "  ".join([f"{'feature':<{width}}", *(f"{a[:12]:>12}" for a in aspects)])
        lines = [f"{method} ({self.level} level)", head, "-" * len(head)]
        for f in features:
            cells = []
            for a in aspects:
                v = self.values[f].get(a, {}).get(method, float("nan"))
                cells.append(f"{v:>12.3f}" if math.isfinite(v) else f"{'n/a':>12}")
            lines.append("  ".join([f"{f:<{width}}", *cells]))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (NaN as ``None``)."""
        return {
            "level": self.level,
            "correlations": {
                f: {a: {m: _num(v) for m, v in ms.items()} for a, ms in aspects.items()}
                for f, aspects in self.values.items()
            },
            "n_items": self.n_items,
        }


# ------------------------------------------------------------------------- computation


def _check_features(features: Sequence[str]) -> tuple[str, ...]:
    if isinstance(features, str):
        features = [f.strip() for f in features.split(",") if f.strip()]
    unknown = [f for f in features if f not in FEATURES]
    if unknown or not features:
        raise ValueError(
            f"The `features` argument must list features from {sorted(FEATURES)}. "
            f"Got {list(features)!r} instead."
        )
    return tuple(dict.fromkeys(features))


def _check_capabilities(
    backend: LogprobBackend, features: Sequence[str], topk: int | None
) -> None:
    for name in features:
        spec = FEATURES[name]
        for capability in sorted(spec.needs, key=lambda c: c.value):
            backend.require(capability, name)
        if spec.full_vocabulary and topk is None and not backend.supports(_V):
            raise CapabilityError(
                backend.name, backend.model, _V,
                f"{name} (or pass topk=K to use the top-K approximation, whose error is "
                "measured in docs/glassbox.md)",
            )


def _records(records: Any, limit: int | None) -> list[Any]:
    from judgeopt.data import Record, load_records

    if isinstance(records, (str, os.PathLike)):
        return load_records(records, limit=limit)
    items = list(records)
    if items and not isinstance(items[0], Record):
        items = load_records(items)
    return items[:limit] if limit is not None else items


class _ItemScorer:
    """Computes the requested features of one item (the per-item half of the work)."""

    def __init__(self, backend: LogprobBackend, features: tuple[str, ...], *, topk: int | None,
                 topk_tail: TopkTail, vocab_size: int | None,
                 n_ensemble: int, sample_top_k: int | None, sample_temperature: float,
                 sample_max_tokens: int, seed: int) -> None:
        self.backend = backend
        self.seed = seed
        # Values that depend on the instruction (and reference) only, not on the response:
        # computed once per instruction, so items that share it share the exact same value.
        self._shared: dict[tuple[str, ...], tuple[float, float]] = {}
        self.features = set(features)
        self.topk = topk
        self.tail = topk_tail
        self.vocab_size = vocab_size
        self.n_ensemble = n_ensemble
        self.sample_top_k = sample_top_k
        self.sample_temperature = sample_temperature
        self.sample_max_tokens = sample_max_tokens

    def _softmax(self, scored: ScoredText) -> tuple[float, float]:
        if self.topk is None:
            assert scored.logits is not None
            ent, var = token_entropies(scored.logits), token_logprob_variances(scored.logits)
        else:
            # Only the entropy has a usable top-k approximation; the variance features are
            # refused up front (see _TOPK_REFUSED).
            assert scored.top_logprobs is not None
            ent = token_entropies_topk(scored.top_logprobs, tail=self.tail,
                                       vocab_size=self.vocab_size)
            var = np.full(ent.shape, np.nan)
        if not ent.size:
            return float("nan"), float("nan")
        return float(np.mean(ent)), float(np.mean(var))

    def _instruction_rng(self, key: tuple[str, ...]) -> np.random.Generator:
        digest = hashlib.sha256("\x00".join(key).encode("utf-8")).digest()
        entropy = [self.seed, int.from_bytes(digest[:8], "little")]
        return np.random.default_rng(np.random.SeedSequence(entropy))

    def _decoding_ensemble(self, base: list[dict[str, str]]) -> tuple[float, float]:
        key = ("decoding", *(m["content"] for m in base))
        if key not in self._shared:
            seeds = self._instruction_rng(key).integers(2**31 - 1, size=self.n_ensemble)
            sps = [
                sentprob(self.backend.generate(
                    base, max_tokens=self.sample_max_tokens,
                    temperature=self.sample_temperature, top_k=self.sample_top_k,
                    seed=int(s)).token_logprobs)
                for s in seeds
            ]
            self._shared[key] = ensemble_stats(sps)
        return self._shared[key]

    def _sentprob_ref(self, base: list[dict[str, str]], reference: str) -> float:
        key = ("reference", *(m["content"] for m in base), reference)
        if key not in self._shared:
            value = sentprob_ref(self.backend.score(base, reference).token_logprobs)
            self._shared[key] = (value, value)
        return self._shared[key][0]

    def _score(self, messages: list[dict[str, str]], text: str, softmax: bool) -> ScoredText:
        if not softmax:
            return self.backend.score(messages, text)
        if self.topk is None:
            return self.backend.score(messages, text, full_vocabulary=True)
        return self.backend.score(messages, text, top_logprobs=self.topk)

    def __call__(self, instruction: str, response: str, reference: str | None,
                 system: str | None, rng: np.random.Generator) -> dict[str, float]:
        want = self.features
        out: dict[str, float] = {}
        base = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": instruction}
        ]
        soft = {"softmax_ent", "softmax_var", "softmax_combo", "softmax_ent_calib",
                "softmax_var_calib"}
        if want & ({"sentprob"} | soft):
            scored = self._score(base, response, softmax=bool(want & soft))
            out["sentprob"] = sentprob(scored.token_logprobs)
            if want & soft:
                out["softmax_ent"], out["softmax_var"] = self._softmax(scored)
        if want & {"unt_exp_prompt", "unt_var_prompt"}:
            picks = rng.integers(len(PROMPT_POOL), size=self.n_ensemble)
            by_prompt = {
                int(k): sentprob(self.backend.score(
                    [{"role": "system", "content": PROMPT_POOL[int(k)]},
                     {"role": "user", "content": instruction}], response).token_logprobs)
                for k in sorted(set(picks.tolist()))
            }
            out["unt_exp_prompt"], out["unt_var_prompt"] = ensemble_stats(
                [by_prompt[int(k)] for k in picks])
        if want & {"unt_exp_dec", "unt_var_dec"}:
            out["unt_exp_dec"], out["unt_var_dec"] = self._decoding_ensemble(base)
        if want & {"attn_ent_min", "attn_ent_avg"}:
            per_head = attention_entropy(self.backend.attentions(base, response))
            out["attn_ent_min"] = float(np.min(per_head))
            out["attn_ent_avg"] = float(np.mean(per_head))
        if want & {"sentprob_ref", "softmax_ent_calib", "softmax_var_calib"}:
            assert reference is not None
            ref = self._sentprob_ref(base, reference)
            out["sentprob_ref"] = ref
            if want & {"softmax_ent_calib", "softmax_var_calib"}:
                out["softmax_ent_calib"] = out["softmax_ent"] - ref
                out["softmax_var_calib"] = out["softmax_var"] - ref
        illus = {"sentprob_illus", "softmax_ent_illus", "softmax_var_illus"}
        if want & illus:
            assert reference is not None
            shown = [*base, {"role": "assistant", "content": reference},
                     {"role": "user", "content": instruction}]
            need_soft = bool(want & {"softmax_ent_illus", "softmax_var_illus"})
            scored = self._score(shown, response, softmax=need_soft)
            out["sentprob_illus"] = sentprob(scored.token_logprobs)
            if need_soft:
                out["softmax_ent_illus"], out["softmax_var_illus"] = self._softmax(scored)
        return out


def compute_features(
    records: Any,
    backend: LogprobBackend,
    features: Sequence[str] = DEFAULT_FEATURES,
    *,
    instruction_field: str | None = None,
    response_field: str = "response",
    instruction_template: str | None = None,
    reference_field: str | None = None,
    system: str | None = None,
    limit: int | None = None,
    progress: bool = True,
    topk: int | None = None,
    topk_tail: TopkTail = "uniform",
    vocab_size: int | None = None,
    n_ensemble: int = 10,
    sample_top_k: int | None = 10,
    sample_temperature: float = 1.0,
    sample_max_tokens: int = 256,
    seed: int = 0,
) -> FeatureResult:
    """Compute glass-box features for each record's ``(instruction, response)`` pair.

    Args:
        records: Records (:class:`judgeopt.data.Record`), dicts in the JSONL schema, or a
            JSONL/CSV path.
        backend: The model (:func:`make_backend`).
        features: Names from :data:`FEATURES` (or one comma-separated string).
        instruction_field: The input field holding the instruction (the user turn).
        response_field: The input field holding the response to score (the assistant turn).
        instruction_template: Instead of ``instruction_field``: a template with ``{field}``
            placeholders filled from the record's inputs (e.g. ``"Summarize:\\n{source}"``).
        reference_field: The input field holding a reference answer (needed by the
            reference features).
        system: A system message before the instruction (default: none, i.e. the chat
            template's default).
        limit: Use the first ``limit`` records.
        progress: Show a progress bar.
        topk: ``None``: the softmax features use the full vocabulary (needs a full-vocabulary
            backend). ``K``: Softmax-Ent (and its calibrated / illustrated variants) use the
            top-K approximation instead (asked for explicitly, never a fallback). The
            Softmax-Var features have no usable top-K approximation (measured in
            ``docs/glassbox.md``) and are refused with ``topk``.
        topk_tail: The tail model of the top-K entropy (:func:`token_entropies_topk`):
            ``"uniform"`` (default; ranks items like the full vocabulary in the measurements)
            or ``"ignore"``.
        vocab_size: The vocabulary size for the ``"uniform"`` tail (default: the backend's,
            when it knows it).
        n_ensemble: Forward passes of each ensemble (10 in the paper).
        sample_top_k: ``k`` of the random top-k decoding of the decoding-based ensemble.
        sample_temperature: Sampling temperature of that ensemble.
        sample_max_tokens: Token budget of each sampled response.
        seed: Seeds the ensembles: the prompt-based one per item
            (``SeedSequence([seed, item index])``), the decoding-based one per instruction
            (``SeedSequence([seed, sha256 of the instruction])``; it depends on the instruction
            only, so it is sampled once per distinct instruction and shared).

    Returns:
        The :class:`FeatureResult`. An item whose scoring fails (an :class:`LMError`, e.g.
        a context overflow) gets NaN features and an entry in ``errors``.

    Raises:
        CapabilityError: Before any work, if the backend lacks a capability a feature needs.
        ValueError: On unknown features, missing fields, or features that need a reference
            without ``reference_field``.
    """
    from judgeopt.judge import fill_template
    from judgeopt.lm import LMError

    names = _check_features(features)
    if (instruction_field is None) == (instruction_template is None):
        raise ValueError("Give exactly one of `instruction_field` and `instruction_template`.")
    needs_ref = [f for f in names if FEATURES[f].reference]
    if needs_ref and not reference_field:
        raise ValueError(f"The features {needs_ref} need a reference: pass `reference_field`.")
    if topk is not None and (isinstance(topk, bool) or not isinstance(topk, int) or topk < 1):
        raise ValueError(f"The `topk` argument must be None or an int >= 1. Got {topk!r}.")
    if isinstance(n_ensemble, bool) or not isinstance(n_ensemble, int) or n_ensemble < 2:
        raise ValueError(f"The `n_ensemble` argument must be an int >= 2. Got {n_ensemble!r}.")
    _check_capabilities(backend, names, topk)
    if topk is not None:
        refused = [f for f in names if f in _TOPK_REFUSED]
        if refused:
            raise ValueError(
                f"The features {refused} have no usable top-k approximation (the variance over "
                "the vocabulary is dominated by the tokens outside the top-k; see "
                "docs/glassbox.md): use a full-vocabulary backend without `topk`, or drop them."
            )
        if topk_tail == "uniform" and vocab_size is None:
            vocab_size = getattr(backend, "vocab_size", None)
            if vocab_size is None:
                raise ValueError(
                    "topk_tail='uniform' needs the model's vocabulary size: pass `vocab_size` "
                    "(e.g. 151936 for Qwen2.5), or use topk_tail='ignore'."
                )
    items = _records(records, limit)
    needed_fields = [response_field, *([instruction_field] if instruction_field else []),
                     *([reference_field] if needs_ref and reference_field else [])]
    for i, rec in enumerate(items):
        missing = [f for f in needed_fields if f not in rec.inputs]
        if missing:
            raise ValueError(f"record {rec.id!r} (#{i}) has no input field(s) {missing}; it has "
                             f"{sorted(rec.inputs)}.")

    scorer = _ItemScorer(backend, names, topk=topk, topk_tail=topk_tail, vocab_size=vocab_size,
                         n_ensemble=n_ensemble, sample_top_k=sample_top_k,
                         sample_temperature=sample_temperature,
                         sample_max_tokens=sample_max_tokens, seed=seed)
    started = time.monotonic()
    rows: list[dict[str, float]] = []
    errors: dict[str, str] = {}
    iterator: Any = items
    if progress:
        from tqdm import tqdm  # type: ignore[import-untyped, unused-ignore]

        iterator = tqdm(items, desc="glass-box features", unit="item")
    for index, rec in enumerate(iterator):
        instruction = (fill_template(instruction_template, rec.inputs) if instruction_template
                       else rec.inputs[str(instruction_field)])
        reference = rec.inputs.get(reference_field) if reference_field else None
        rng = np.random.default_rng(np.random.SeedSequence([seed, index]))
        try:
            rows.append(scorer(instruction, rec.inputs[response_field], reference, system, rng))
        except LMError as exc:
            logger.warning("glass-box features of %s failed: %s", rec.id, exc)
            errors[rec.id] = f"{type(exc).__name__}: {exc}"
            rows.append({})

    values = {f: np.array([row.get(f, np.nan) for row in rows], dtype=np.float64)
              for f in names if f != "softmax_combo"}
    if "softmax_combo" in names:
        ent = np.array([row.get("softmax_ent", np.nan) for row in rows], dtype=np.float64)
        var = np.array([row.get("softmax_var", np.nan) for row in rows], dtype=np.float64)
        values["softmax_combo"] = softmax_combo(ent, var)
    aspects = sorted({a for rec in items for a in rec.scores})
    human = {a: np.array([rec.scores.get(a, np.nan) for rec in items], dtype=np.float64)
             for a in aspects}
    settings = {
        "instruction_field": instruction_field, "instruction_template": instruction_template,
        "response_field": response_field, "reference_field": reference_field, "system": system,
        "topk": topk, "topk_tail": topk_tail if topk is not None else None,
        "vocab_size": vocab_size if topk is not None else None,
        "n_ensemble": n_ensemble, "sample_top_k": sample_top_k,
        "sample_temperature": sample_temperature, "sample_max_tokens": sample_max_tokens,
        "seed": seed,
    }
    return FeatureResult(
        features=names,
        ids=tuple(r.id for r in items),
        group_ids=tuple(r.group_id for r in items),
        values={f: values[f] for f in names},
        human=human,
        errors=errors,
        model=backend.model,
        backend=backend.name,
        seconds=time.monotonic() - started,
        settings=settings,
    )


def correlate_features(
    result: FeatureResult,
    *,
    aspects: Sequence[str] | None = None,
    methods: Sequence[str] = ("spearman", "kendall", "pearson"),
    level: Literal["dataset", "group"] = "dataset",
) -> FeatureCorrelations:
    """Correlate every feature of ``result`` with every human aspect.

    Uses :func:`judgeopt.metrics.correlation` over the items where both the feature and the
    human score are finite. Correlations are raw: a feature expected to fall with quality
    (Softmax-Ent, the ensemble variances) should correlate negatively.

    Args:
        result: From :func:`compute_features`.
        aspects: Aspects to use (default: all in ``result.human``).
        methods: Any of ``"spearman"``, ``"kendall"``, ``"pearson"``.
        level: ``"dataset"`` (one correlation over all items) or ``"group"`` (mean of
            within-group correlations, by ``group_id``).

    Returns:
        The :class:`FeatureCorrelations`.

    Raises:
        ValueError: On an unknown aspect, method or level.
    """
    from judgeopt.metrics import METHODS, correlation

    if level not in ("dataset", "group"):
        raise ValueError(f"The `level` argument must be 'dataset' or 'group'. Got {level!r}.")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValueError(f"The `methods` argument must list methods from {sorted(METHODS)}. "
                         f"Got {list(methods)!r} instead.")
    chosen = list(result.human) if aspects is None else list(aspects)
    unknown = [a for a in chosen if a not in result.human]
    if unknown:
        raise ValueError(f"Unknown aspect(s) {unknown}; the records have {sorted(result.human)}.")
    groups = np.array([g if g is not None else "" for g in result.group_ids], dtype=object)
    values: dict[str, dict[str, dict[str, float]]] = {}
    counts: dict[str, dict[str, int]] = {}
    for f in result.features:
        values[f], counts[f] = {}, {}
        for a in chosen:
            x, y = result.values[f], result.human[a]
            mask = np.isfinite(x) & np.isfinite(y)
            counts[f][a] = int(mask.sum())
            values[f][a] = {}
            for m in methods:
                try:
                    values[f][a][m] = correlation(
                        y[mask], x[mask], method=m,
                        groups=list(groups[mask]) if level == "group" else None)
                except ValueError:
                    values[f][a][m] = float("nan")
    return FeatureCorrelations(values, counts, level)
