"""Compute the glass-box features of seed 003 over a dataset (:func:`compute_features`).

:func:`compute_features` scores each record's ``(instruction, response)`` pair with a backend
and returns a :class:`FeatureResult` (:func:`correlate_features` then correlates every feature
with every human aspect).

How each feature is obtained (formulas in :mod:`judgeopt.scoring`):

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
import os
import time
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from judgeopt.data import Record, load_records
from judgeopt.scoring import (
    Capability,
    CapabilityError,
    LogprobBackend,
    ScoredText,
    attention_entropy,
    ensemble_stats,
    sentprob,
    sentprob_ref,
    softmax_combo,
    token_entropies,
    token_entropies_topk,
    token_logprob_variances,
)

from .._validation import check_int
from ._feature_result import FeatureResult
from ._registry import (
    DEFAULT_FEATURES,
    FEATURES,
    PROMPT_POOL,
    TOPK_REFUSED,
    TopkTail,
    check_features,
)

__all__ = ["compute_features"]

logger = logging.getLogger(__name__)

_V = Capability.FULL_VOCABULARY


def _check_capabilities(backend: LogprobBackend, features: Sequence[str], topk: int | None) -> None:
    for name in features:
        spec = FEATURES[name]
        for capability in sorted(spec.needs, key=lambda c: c.value):
            backend.require(capability, name)
        if spec.full_vocabulary and topk is None and not backend.supports(_V):
            raise CapabilityError(
                backend.name,
                backend.model,
                _V,
                f"{name} (or pass topk=K to use the top-K approximation, whose error is "
                "measured in docs/glassbox.md)",
            )


def _records(records: Any, limit: int | None) -> list[Any]:
    if isinstance(records, (str, os.PathLike)):
        return load_records(records, limit=limit)
    items = list(records)
    if items and not isinstance(items[0], Record):
        items = load_records(items)
    return items[:limit] if limit is not None else items


class _ItemScorer:
    """Computes the requested features of one item (the per-item half of the work)."""

    def __init__(
        self,
        backend: LogprobBackend,
        features: tuple[str, ...],
        *,
        topk: int | None,
        topk_tail: TopkTail,
        vocab_size: int | None,
        n_ensemble: int,
        sample_top_k: int | None,
        sample_temperature: float,
        sample_max_tokens: int,
        seed: int,
    ) -> None:
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
            # refused up front (see TOPK_REFUSED).
            assert scored.top_logprobs is not None
            ent = token_entropies_topk(
                scored.top_logprobs, tail=self.tail, vocab_size=self.vocab_size
            )
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
                sentprob(
                    self.backend.generate(
                        base,
                        max_tokens=self.sample_max_tokens,
                        temperature=self.sample_temperature,
                        top_k=self.sample_top_k,
                        seed=int(s),
                    ).token_logprobs
                )
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

    def __call__(
        self,
        instruction: str,
        response: str,
        reference: str | None,
        system: str | None,
        rng: np.random.Generator,
    ) -> dict[str, float]:
        want = self.features
        out: dict[str, float] = {}
        base = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": instruction}
        ]
        soft = {
            "softmax_ent",
            "softmax_var",
            "softmax_combo",
            "softmax_ent_calib",
            "softmax_var_calib",
        }
        if want & ({"sentprob"} | soft):
            scored = self._score(base, response, softmax=bool(want & soft))
            out["sentprob"] = sentprob(scored.token_logprobs)
            if want & soft:
                out["softmax_ent"], out["softmax_var"] = self._softmax(scored)
        if want & {"unt_exp_prompt", "unt_var_prompt"}:
            picks = rng.integers(len(PROMPT_POOL), size=self.n_ensemble)
            by_prompt = {
                int(k): sentprob(
                    self.backend.score(
                        [
                            {"role": "system", "content": PROMPT_POOL[int(k)]},
                            {"role": "user", "content": instruction},
                        ],
                        response,
                    ).token_logprobs
                )
                for k in sorted(set(picks.tolist()))
            }
            out["unt_exp_prompt"], out["unt_var_prompt"] = ensemble_stats(
                [by_prompt[int(k)] for k in picks]
            )
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
            shown = [
                *base,
                {"role": "assistant", "content": reference},
                {"role": "user", "content": instruction},
            ]
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
    names = check_features(features)
    fields = _Fields(
        instruction_field, instruction_template, response_field, reference_field, system
    )
    vocab_size = _check_arguments(backend, names, fields, topk, topk_tail, vocab_size, n_ensemble)
    items = _records(records, limit)
    _check_fields(items, names, fields)
    scorer = _ItemScorer(
        backend,
        names,
        topk=topk,
        topk_tail=topk_tail,
        vocab_size=vocab_size,
        n_ensemble=n_ensemble,
        sample_top_k=sample_top_k,
        sample_temperature=sample_temperature,
        sample_max_tokens=sample_max_tokens,
        seed=seed,
    )
    started = time.monotonic()
    rows, errors = _score_items(items, scorer, fields, progress=progress, seed=seed)
    return FeatureResult(
        features=names,
        ids=tuple(r.id for r in items),
        group_ids=tuple(r.group_id for r in items),
        values=_feature_values(names, rows),
        human=_human_scores(items),
        errors=errors,
        model=backend.model,
        backend=backend.name,
        seconds=time.monotonic() - started,
        settings={
            **fields._asdict(),
            "topk": topk,
            "topk_tail": topk_tail if topk is not None else None,
            "vocab_size": vocab_size if topk is not None else None,
            "n_ensemble": n_ensemble,
            "sample_top_k": sample_top_k,
            "sample_temperature": sample_temperature,
            "sample_max_tokens": sample_max_tokens,
            "seed": seed,
        },
    )


class _Fields(NamedTuple):
    """Where :func:`compute_features` reads each record's turns (and the system message)."""

    instruction_field: str | None
    instruction_template: str | None
    response_field: str
    reference_field: str | None
    system: str | None


def _check_arguments(
    backend: LogprobBackend,
    names: tuple[str, ...],
    fields: _Fields,
    topk: int | None,
    topk_tail: TopkTail,
    vocab_size: int | None,
    n_ensemble: int,
) -> int | None:
    """Check :func:`compute_features`' arguments; return the vocabulary size to use."""
    if (fields.instruction_field is None) == (fields.instruction_template is None):
        raise ValueError("Give exactly one of `instruction_field` and `instruction_template`.")
    needs_ref = [f for f in names if FEATURES[f].reference]
    if needs_ref and not fields.reference_field:
        raise ValueError(f"The features {needs_ref} need a reference: pass `reference_field`.")
    check_int(topk, "topk", min_value=1, allow_none=True)
    check_int(n_ensemble, "n_ensemble", min_value=2)
    _check_capabilities(backend, names, topk)
    if topk is not None:
        refused = [f for f in names if f in TOPK_REFUSED]
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
    return vocab_size


def _check_fields(items: list[Any], names: tuple[str, ...], fields: _Fields) -> None:
    needs_ref = any(FEATURES[f].reference for f in names)
    needed_fields = [
        fields.response_field,
        *([fields.instruction_field] if fields.instruction_field else []),
        *([fields.reference_field] if needs_ref and fields.reference_field else []),
    ]
    for i, rec in enumerate(items):
        missing = [f for f in needed_fields if f not in rec.inputs]
        if missing:
            raise ValueError(
                f"record {rec.id!r} (#{i}) has no input field(s) {missing}; it has "
                f"{sorted(rec.inputs)}."
            )


def _score_items(
    items: list[Any], scorer: _ItemScorer, fields: _Fields, *, progress: bool, seed: int
) -> tuple[list[dict[str, float]], dict[str, str]]:
    """Each item's features (``{}`` for a failed one) and the failures' messages by item id."""
    # Both load DSPy (judge sits below glassbox, lm's errors derive from DSPy's): imported
    # when features are computed, so `import judgeopt.glassbox` stays light.
    from judgeopt.judge import fill_template
    from judgeopt.lm import LMError

    template, reference_field = fields.instruction_template, fields.reference_field
    rows: list[dict[str, float]] = []
    errors: dict[str, str] = {}
    iterator: Any = items
    if progress:
        from tqdm import tqdm  # type: ignore[import-untyped, unused-ignore]

        iterator = tqdm(items, desc="glass-box features", unit="item")
    for index, rec in enumerate(iterator):
        instruction = (
            fill_template(template, rec.inputs)
            if template
            else rec.inputs[str(fields.instruction_field)]
        )
        reference = rec.inputs.get(reference_field) if reference_field else None
        rng = np.random.default_rng(np.random.SeedSequence([seed, index]))
        response = rec.inputs[fields.response_field]
        try:
            rows.append(scorer(instruction, response, reference, fields.system, rng))
        except LMError as exc:
            logger.warning("glass-box features of %s failed: %s", rec.id, exc)
            errors[rec.id] = f"{type(exc).__name__}: {exc}"
            rows.append({})
    return rows, errors


def _feature_values(names: tuple[str, ...], rows: list[dict[str, float]]) -> dict[str, Any]:
    values = {
        f: np.array([row.get(f, np.nan) for row in rows], dtype=np.float64)
        for f in names
        if f != "softmax_combo"
    }
    if "softmax_combo" in names:
        ent = np.array([row.get("softmax_ent", np.nan) for row in rows], dtype=np.float64)
        var = np.array([row.get("softmax_var", np.nan) for row in rows], dtype=np.float64)
        values["softmax_combo"] = softmax_combo(ent, var)
    return {f: values[f] for f in names}


def _human_scores(items: list[Any]) -> dict[str, Any]:
    aspects = sorted({a for rec in items for a in rec.scores})
    return {
        a: np.array([rec.scores.get(a, np.nan) for rec in items], dtype=np.float64) for a in aspects
    }
