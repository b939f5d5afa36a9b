"""The ``decoding`` factor: how a pointwise judge's answer becomes a score.

==============  =========================================================================
value           what the judge does
==============  =========================================================================
``greedy``      one answer at temperature 0; the rating is parsed from the text (the
                library's parser, ``docs/parsing.md``). The baseline and HPSS's own setting.
                Stopped at its rating on an LM known to give logprobs, the call is its
                ``expected`` twin's (``JudgeProgram.twin_read``: one cached answer for both).
``expected``    one answer at temperature 0 with ``logprobs=True, top_logprobs=20``; the
                probability-weighted rating ``sum_r r P(r)`` is read from the model's own
                distribution at the position where that answer writes its rating (after the
                explanation when the strategy has CoT). Ratings of several tokens (``10``,
                ``50``, ``100``) are chained, digits missing from the top-k count as 0 and
                ``P`` is renormalised over the valid ratings
                (:func:`judgeopt.scoring.rating_from_generation`). Needs logprobs.
``sc5``         5 answers sampled at temperature 1.0 (seeds 0..4); the mean of the ratings
                that parsed (HPSS Appendix I / Wang et al. 2023 self-consistency, with the
                G-Eval temperature). Costs 5 calls per item.
==============  =========================================================================

Decoding never changes the prompt. Pairwise judges have no ``decoding`` factor and always
parse their verdict greedily.

Which LMs can serve ``expected`` (:func:`logprob_support`): a :class:`judgeopt.lm.LlamaCppLM`
built with ``logits_all=True``; a :class:`judgeopt.lm.JudgeLM` (any LiteLLM model) whose
provider returns logprobs, found out by LiteLLM's list of supported parameters and then one
probe request of one token; any other DSPy LM by the same probe. Teleprompters check this at
compile start (:func:`check_decodings`).
"""

from __future__ import annotations

import logging
import math
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from judgeopt.scoring import (
    generation_from_logprobs,
    parse_rating,
    rating_from_generation,
    self_consistency,
)
from judgeopt.search import Strategy, Value

from .._errors import JudgeoptError
from .._validation import check_int, check_number
from ._factors import DECODINGS

__all__ = [
    "DECODING_PARAMS",
    "Decoding",
    "LogprobsUnavailableError",
    "check_decodings",
    "decoding_for",
    "logprob_support",
    "logprobs_known",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decoding:
    """The parameters of one ``decoding`` value.

    Attributes:
        name: The factor value (``"greedy"``, ``"expected"``, ``"sc5"``).
        samples: Answers per item (``> 1``: self-consistency, the mean of their ratings).
        temperature: Sampling temperature of those answers (0 for one greedy answer).
        top_logprobs: Alternatives per position asked of the LM (``expected`` only; ``None``:
            no logprobs are asked for).
        seed: Seed of the first sample; sample ``i`` uses ``seed + i`` (so each is cached).
    """

    name: str
    samples: int = 1
    temperature: float = 0.0
    top_logprobs: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.name not in DECODINGS:
            raise ValueError(f"Unknown decoding {self.name!r}. Allowed: {list(DECODINGS)!r}.")
        check_int(self.samples, "samples", min_value=1, kind="field", owner="Decoding")
        check_int(self.seed, "seed", min_value=0, kind="field", owner="Decoding")
        # NOTE: 20 is OpenAI's maximum; llama.cpp and vLLM servers allow more, but 20 already
        # holds every digit token at a rating position in practice.
        check_int(
            self.top_logprobs,
            "top_logprobs",
            min_value=1,
            max_value=20,
            allow_none=True,
            kind="field",
            owner="Decoding",
        )
        check_number(self.temperature, "temperature", min_value=0, kind="field", owner="Decoding")
        kind = {"greedy": (False, False), "expected": (False, True), "sc5": (True, False)}
        many, logprobs = kind[self.name]
        if (self.samples > 1) != many or (self.top_logprobs is not None) != logprobs:
            raise ValueError(
                f"Decoding {self.name!r} must have "
                + ("`samples` > 1" if many else "`samples` == 1")
                + (" and `top_logprobs` set" if logprobs else " and no `top_logprobs`")
                + f". Got samples={self.samples!r}, top_logprobs={self.top_logprobs!r}."
            )
        if self.samples > 1 and not self.temperature > 0:
            raise ValueError(
                "Self-consistency (`samples` > 1) needs a `temperature` > 0. "
                f"Got {self.temperature!r}."
            )

    @property
    def needs_logprobs(self) -> bool:
        """Whether the LM must return token log-probabilities."""
        return self.top_logprobs is not None

    def call_kwargs(self, index: int = 0) -> dict[str, Any]:
        """LM arguments of answer ``index`` (added to the judge's ``max_tokens``).

        ``greedy`` adds nothing, so its requests (and cache keys) are those of judges
        without a ``decoding`` factor.
        """
        if self.needs_logprobs:
            return {"temperature": 0.0, "logprobs": True, "top_logprobs": self.top_logprobs}
        if self.samples > 1:
            return {"temperature": float(self.temperature), "seed": self.seed + index}
        return {}

    def with_params(self, params: Mapping[str, Any]) -> Decoding:
        """A copy with some parameters changed (from an exported judge's ``scoring``).

        Raises:
            ValueError: On an unknown parameter or an invalid value.
        """
        allowed = {"samples", "temperature", "top_logprobs", "seed"}
        unknown = sorted(set(params) - allowed)
        if unknown:
            raise ValueError(
                f"Unknown decoding parameter(s) {unknown!r}. Allowed: {sorted(allowed)!r}."
            )
        return replace(self, **dict(params))

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (the exported judge's ``scoring`` block uses it)."""
        return asdict(self)


DECODING_PARAMS: Mapping[str, Decoding] = {
    "greedy": Decoding("greedy"),
    "expected": Decoding("expected", top_logprobs=20),
    "sc5": Decoding("sc5", samples=5, temperature=1.0),
}
"""The parameters of each ``decoding`` value (see the module docstring)."""


def decoding_for(
    strategy: Strategy | Mapping[str, Value] | str | None, params: Mapping[str, Any] | None = None
) -> Decoding:
    """The :class:`Decoding` of a strategy (or of a ``decoding`` value).

    A strategy without a ``decoding`` factor (pairwise, or saved before it existed) decodes
    greedily.

    Args:
        strategy: A strategy, a mapping of factor values, a decoding name, or ``None``.
        params: Parameter overrides (see :meth:`Decoding.with_params`).

    Raises:
        ValueError: On an unknown decoding value or parameter.
    """
    if strategy is None:
        name = "greedy"
    elif isinstance(strategy, str):
        name = strategy
    else:
        name = str(strategy.get("decoding", "greedy"))
    if name not in DECODING_PARAMS:
        raise ValueError(f"Unknown decoding {name!r}. Allowed: {list(DECODINGS)!r}.")
    base = DECODING_PARAMS[name]
    return base.with_params(params) if params else base


class LogprobsUnavailableError(JudgeoptError, ValueError):
    """A decoding needs token log-probabilities that the judge's LM cannot give.

    Raised at compile start when the user asked for such a decoding explicitly (in the
    optimizer's ``space`` or the student's strategy); otherwise those values are left out of
    the search with a logged warning.

    Attributes:
        model: The LM's model name.
        values: The decodings that need logprobs.
        reason: Why the LM cannot give them.
    """

    def __init__(self, model: str, values: Sequence[str], reason: str) -> None:
        self.model = model
        self.values = tuple(values)
        self.reason = reason
        super().__init__(
            f"The decoding(s) {list(values)!r} need token log-probabilities, but the LM "
            f"{model!r} cannot give them: {reason}. Use decoding 'greedy' or 'sc5', or an LM "
            "with logprobs: make_lm('local...', logits_all=True) for the embedded model, or a "
            "server that returns logprobs (vLLM, llama.cpp server, OpenAI non-reasoning "
            "models)."
        )


# ----------------------------------------------------------------------------- capability

_PROBE_MESSAGES = [{"role": "user", "content": "Reply with one digit: 7"}]
_support: weakref.WeakKeyDictionary[Any, tuple[bool, str]] = weakref.WeakKeyDictionary()


def _get(obj: Any, key: str, default: Any = None) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


def _litellm_refuses(lm: Any) -> str | None:
    """Why LiteLLM says the provider takes no ``logprobs`` parameter, or ``None``.

    An LM over several deployments (a ``RouterLM``) lists them in ``endpoints``; one that
    refuses is enough, since the Router may send any request to it.
    """
    endpoints = getattr(lm, "endpoints", None) or [
        (getattr(lm, "model", None), getattr(lm, "api_base", None))
    ]
    for model, api_base in endpoints:
        if not isinstance(model, str) or api_base:
            # NOTE: behind an api_base the server decides (vLLM and llama.cpp servers give
            # logprobs whatever LiteLLM's table says about the model name): only the probe
            # knows.
            continue
        try:
            import litellm

            model_name, provider, _, _ = litellm.get_llm_provider(model)
            params = litellm.get_supported_openai_params(
                model=model_name, custom_llm_provider=provider
            )
        except Exception:  # noqa: BLE001 - an unknown model: leave it to the probe
            continue
        if params is not None and "logprobs" not in params:
            return f"LiteLLM lists no `logprobs` parameter for {provider} model {model_name!r}"
    return None


def _probe(lm: Any, top_logprobs: int) -> tuple[bool, str]:
    kwargs = {"max_tokens": 1, "temperature": 0.0, "logprobs": True, "top_logprobs": top_logprobs}
    probe = lm.copy() if hasattr(lm, "copy") else lm
    if hasattr(probe, "_check_truncation"):
        # A one-token probe ends with finish_reason="length" by design.
        probe._check_truncation = lambda *_a, **_k: None
    try:
        response = probe.forward(messages=[dict(m) for m in _PROBE_MESSAGES], **kwargs)
    except Exception as exc:  # noqa: BLE001 - any refusal means "no logprobs here"
        return False, f"a probe request with logprobs=True failed ({type(exc).__name__}: {exc})"
    choices = _get(response, "choices") or []
    content = _get(_get(choices[0], "logprobs"), "content") if choices else None
    if not content:
        return False, "its answer to a probe request with logprobs=True carried no logprobs"
    return True, "a probe request returned logprobs"


def logprob_support(lm: Any, *, top_logprobs: int = 20) -> tuple[bool, str]:
    """Whether ``lm`` returns token log-probabilities, and how that was found out.

    In order: the LM's own ``supports_logprobs`` flag when it is a bool (``LlamaCppLM``:
    its ``logits_all``; settable on a ``JudgeLM``), LiteLLM's table of supported parameters
    for hosted models (no ``api_base``), then one probe request of one token with
    ``logprobs=True`` (through the LM, so it is cached and counted). The answer is remembered
    per LM object.

    Returns:
        ``(supported, reason)``.
    """
    flag = getattr(lm, "supports_logprobs", None)
    if isinstance(flag, bool):
        hint = getattr(lm, "logprobs_hint", None)
        return flag, (
            "its supports_logprobs flag is set"
            if flag
            else (hint or "its supports_logprobs flag is False")
        )
    try:
        known = _support.get(lm)
    except TypeError:  # not weak-referenceable
        known = None
    if known is not None:
        return known
    refused = _litellm_refuses(lm)
    result = (False, refused) if refused else _probe(lm, top_logprobs)
    try:
        _support[lm] = result
    except TypeError:
        pass
    return result


def logprobs_known(lm: Any) -> bool:
    """Whether ``lm`` is known to return token log-probabilities without asking it: its own
    ``supports_logprobs`` flag when it is a bool, else an earlier :func:`logprob_support`
    answer for it (a compile's check of its decodings at its start). Unknown counts as no;
    nothing is sent to the LM."""
    flag = getattr(lm, "supports_logprobs", None)
    if isinstance(flag, bool):
        return flag
    try:
        known = _support.get(lm)
    except TypeError:  # not weak-referenceable
        return False
    return bool(known and known[0])


def check_decodings(lm: Any, values: Sequence[str], *, explicit: Sequence[str] = ()) -> list[str]:
    """The decodings of ``values`` that ``lm`` cannot serve (to leave out of a search).

    Args:
        lm: The judge's LM.
        values: The decodings the search may propose.
        explicit: The decodings the user asked for by name.

    Returns:
        The values to leave out (a warning is logged for them); empty when the LM serves
        them all.

    Raises:
        LogprobsUnavailableError: When one of ``explicit`` needs logprobs and ``lm`` has none.
    """
    needing = [v for v in values if decoding_for(v).needs_logprobs]
    if not needing:
        return []
    top = max(int(decoding_for(v).top_logprobs or 1) for v in needing)
    ok, reason = logprob_support(lm, top_logprobs=top)
    if ok:
        return []
    model = str(getattr(lm, "model", type(lm).__name__))
    asked = [v for v in needing if v in explicit]
    if asked:
        raise LogprobsUnavailableError(model, asked, reason)
    log.warning(
        "decoding(s) %s left out of the search: the LM %r gives no logprobs (%s)",
        needing,
        model,
        reason,
    )
    return needing


# --------------------------------------------------------------------------------- scoring


def output_text(output: Any) -> tuple[str, Any]:
    """``(text, logprobs)`` of one DSPy LM output (a string, or a dict with logprobs)."""
    if isinstance(output, Mapping):
        return str(output.get("text") or ""), output.get("logprobs")
    return str(output or ""), None


def expected_prediction(
    text: str, logprobs: Any, *, bounds: tuple[int, int], top_logprobs: int
) -> dict[str, Any]:
    """Score fields of an ``expected`` answer: the expected rating from its logprobs.

    Returns a dict with ``score`` (``None`` on failure), ``parse_error``, ``parse_method``,
    ``greedy_score`` (the answer's parsed rating) and ``distribution`` (``{"probs": {rating:
    p}, "mass": ..., "expected": ...}`` or ``None``).
    """
    lo, hi = bounds
    content = _get(logprobs, "content") if logprobs is not None else None
    greedy = parse_rating(text, scale=hi, rating_min=lo)
    out: dict[str, Any] = {
        "greedy_score": greedy.score,
        "distribution": None,
        "parse_method": f"expected(top_logprobs={top_logprobs})",
    }
    if not text.strip():
        return {**out, "score": None, "parse_error": "empty output"}
    if not content:
        return {**out, "score": None, "parse_error": "expected rating: the LM returned no logprobs"}
    generation = generation_from_logprobs(list(content), text=text)
    if generation.text != text:
        # NOTE: the tokens are the source of truth for positions; a provider that post-edits
        # the message (strips whitespace) still gives them in order.
        log.debug("logprob tokens and message text differ; reading the tokens")
    result = rating_from_generation(generation, scale=hi, rating_min=lo, top_k=top_logprobs)
    dist = result.distribution.to_dict() if result.distribution is not None else None
    if not result.ok:
        error = result.error or "no expected rating"
        if not greedy.ok:
            error = greedy.error or error
        return {
            **out,
            "distribution": dist,
            "score": None,
            "parse_error": error if not greedy.ok else f"expected rating: {error}",
        }
    score = float(result.score)  # type: ignore[arg-type]
    return {
        **out,
        "distribution": dist,
        "score": score if math.isfinite(score) else None,
        "parse_error": None,
    }


def samples_prediction(texts: Sequence[str], *, bounds: tuple[int, int]) -> dict[str, Any]:
    """Score fields of self-consistency: the mean of the ratings that parsed.

    Returns a dict with ``score`` (``None`` when no sample parsed), ``parse_error``,
    ``parse_method`` and ``samples`` (each sample's rating, ``None`` for a failed parse).
    """
    lo, hi = bounds
    sc = self_consistency(list(texts), scale=hi, rating_min=lo)
    error = None
    if sc.score is None:
        first = sc.errors[0] if sc.errors else "no rating found"
        error = f"no sample had a rating ({sc.n_failed}/{sc.n} failed; first: {first})"
    return {
        "score": sc.score,
        "parse_error": error,
        "samples": list(sc.ratings),
        "parse_method": f"self-consistency {sc.n - sc.n_failed}/{sc.n}",
    }
