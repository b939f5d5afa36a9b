"""The glass-box features of Huang et al. (seed 003), as pure numpy functions of arrays.

Logprob backends give the arrays (logits, token log-probabilities, attention weights); these
functions turn them into numbers. Notation: a response of ``T`` tokens ``y_1..y_T``; ``p_t``
is the model's next-token distribution that predicted ``y_t`` (over a vocabulary of ``V``
entries); ``log`` is natural.

* :func:`sentprob`: ``(1/T) sum_t log p_t(y_t)``. The paper writes the product
  ``prod_t p_t(y_t)``; its released code (``estimation_mode="logprobs"``) averages the token
  log-probabilities, which removes the length bias of the product. Higher = more likely.
* :func:`softmax_entropy`: ``-(1/T) sum_t sum_v p_t(v) log p_t(v)``, the paper's formula
  (mean over response tokens of the entropy of each distribution). Higher = less confident.
* :func:`softmax_variance`: ``(1/T) sum_t Var_v[log p_t(v)]``, the variance over the
  vocabulary of the log-probabilities of each distribution, averaged over the response tokens
  (population variance, ``E[P^2] - E[P]^2`` as in the paper's formula). This is what the
  released code computes (``torch.var(log_softmax(logits), dim=-1)`` over the response
  positions); the paper's text calls it "the variance of word-level log-probabilities".
  Higher = a sharper (more confident) distribution.
* :func:`softmax_combo`: the paper's "normalized summation of Softmax-Ent and Softmax-Var",
  over a set of items: ``z(Var) - z(Ent)`` with ``z`` the z-score over the items. The entropy
  enters negated so both terms point towards confidence (in the paper's Table 1 both features
  correlate positively, because its code's "entropy" is a logit-spread statistic).
* :func:`ensemble_stats`: Unt-Exp and Unt-Var, the mean and the (population) variance of the
  sentence-level probabilities ``SP`` of ``N`` forward passes.
* :func:`sentprob_ref`: SentProb-Ref ``-(1/T) sum_t p(y~_t) log p(y~_t)`` over the tokens
  ``y~_t`` of a reference answer, as the paper's formula (section 3.2) writes it.
* :func:`attention_entropy`: ``AttnEnt_hl = -(1/T) sum_t sum_j a_tj log a_tj`` for each layer
  and head, where ``a_t`` is the attention distribution of response token ``t``;
  AttnEnt-Min / AttnEnt-Avg are the minimum / mean over heads and layers.

Top-k approximations (for servers that only report the top ``k`` log-probabilities):
:func:`token_entropies_topk` and :func:`token_logprob_variances_topk`. Their error against the
full vocabulary is measured in ``docs/glassbox.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from .._validation import check_int

__all__ = [
    "attention_entropy",
    "ensemble_stats",
    "log_softmax",
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
]

FloatArray = npt.NDArray[np.float64]
TailMode = Literal["ignore", "uniform"]

# Rows of a (T, V) logit matrix processed at once: bounds the float64 working copy.
_CHUNK_ROWS = 32


def _as_2d(values: Any, name: str) -> npt.NDArray[Any]:
    arr = np.asarray(values)
    if arr.ndim != 2:
        raise ValueError(
            f"`{name}` must be a 2-D array (tokens x vocabulary). Got shape {arr.shape} instead."
        )
    return arr


def _as_1d(values: Any, name: str) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"`{name}` must be a 1-D array. Got shape {arr.shape} instead.")
    return arr


def log_softmax(logits: Any, axis: int = -1) -> FloatArray:
    """Return ``log softmax(logits)`` in float64 (stable; rows of ``-inf`` stay ``-inf``)."""
    x = np.asarray(logits, dtype=np.float64)
    peak = np.max(x, axis=axis, keepdims=True)
    peak = np.where(np.isfinite(peak), peak, 0.0)
    shifted = x - peak
    with np.errstate(divide="ignore"):
        lse = np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    out: FloatArray = shifted - lse
    return out


def token_entropies(logits: Any) -> FloatArray:
    """Entropy ``-sum_v p(v) log p(v)`` of the softmax of each row of ``logits`` ``(T, V)``.

    Log-probabilities are accepted as well (their softmax is themselves).
    """
    arr = _as_2d(logits, "logits")
    out = np.empty(arr.shape[0], dtype=np.float64)
    for start in range(0, arr.shape[0], _CHUNK_ROWS):
        lp = log_softmax(arr[start : start + _CHUNK_ROWS])
        p = np.exp(lp)
        # 0 * log 0 = 0: tokens with probability 0 contribute nothing.
        out[start : start + _CHUNK_ROWS] = -np.sum(p * np.where(p > 0, lp, 0.0), axis=1)
    return out


def token_logprob_variances(logits: Any) -> FloatArray:
    """Population variance over the vocabulary of the log-softmax of each row ``(T, V)``."""
    arr = _as_2d(logits, "logits")
    out = np.empty(arr.shape[0], dtype=np.float64)
    for start in range(0, arr.shape[0], _CHUNK_ROWS):
        lp = log_softmax(arr[start : start + _CHUNK_ROWS])
        out[start : start + _CHUNK_ROWS] = np.var(lp, axis=1)
    return out


def softmax_entropy(logits: Any) -> float:
    """Softmax-Ent: the mean over response tokens of :func:`token_entropies`.

    Args:
        logits: ``(T, V)`` logits (or log-probabilities) of the distributions that predicted
            the ``T`` response tokens.

    Returns:
        The feature (NaN for an empty response).

    Example:
        >>> round(softmax_entropy([[0.0, 0.0], [0.0, 0.0]]), 6)  # two fair coins
        0.693147
    """
    ent = token_entropies(logits)
    return float(np.mean(ent)) if ent.size else float("nan")


def softmax_variance(logits: Any) -> float:
    """Softmax-Var: the mean over response tokens of :func:`token_logprob_variances`.

    Example:
        >>> softmax_variance([[0.0, 0.0]])  # uniform: every log-probability equal
        0.0
    """
    var = token_logprob_variances(logits)
    return float(np.mean(var)) if var.size else float("nan")


def topk_logprobs(logits: Any, k: int) -> FloatArray:
    """Return the ``k`` largest log-probabilities of each row, sorted descending ``(T, k)``.

    This is what an OpenAI-compatible server reports as ``top_logprobs``.
    """
    arr = _as_2d(logits, "logits")
    check_int(k, "k", min_value=1, max_value=arr.shape[1])
    out = np.empty((arr.shape[0], k), dtype=np.float64)
    for start in range(0, arr.shape[0], _CHUNK_ROWS):
        lp = log_softmax(arr[start : start + _CHUNK_ROWS])
        part = np.partition(lp, lp.shape[1] - k, axis=1)[:, -k:]
        out[start : start + _CHUNK_ROWS] = -np.sort(-part, axis=1)
    return out


def _tail(top: npt.NDArray[Any], vocab_size: int | None, tail: str) -> tuple[FloatArray, int]:
    if tail not in ("ignore", "uniform"):
        raise ValueError(f"`tail` must be 'ignore' or 'uniform'. Got {tail!r} instead.")
    k = top.shape[1]
    if tail == "uniform":
        if vocab_size is None or isinstance(vocab_size, bool) or vocab_size <= k:
            raise ValueError(
                f"tail='uniform' needs `vocab_size` > k={k} (the model's vocabulary size). "
                f"Got {vocab_size!r} instead."
            )
    p = np.where(np.isfinite(top), np.exp(top), 0.0)
    rest = np.clip(1.0 - p.sum(axis=1), 0.0, 1.0)
    return rest, (int(vocab_size) - k if tail == "uniform" and vocab_size else 0)


def token_entropies_topk(
    top: Any, *, tail: TailMode = "ignore", vocab_size: int | None = None
) -> FloatArray:
    """Approximate :func:`token_entropies` from the top-k log-probabilities ``(T, k)``.

    Args:
        top: Top-k log-probabilities per position (``-inf`` for missing entries).
        tail: ``"ignore"``: ``-sum_top p log p`` (the tail's mass contributes nothing; a lower
            bound). ``"uniform"``: the remaining mass ``r = 1 - sum_top p`` is spread evenly
            over the other ``V - k`` tokens, adding ``-r log(r / (V - k))`` (an upper bound).
        vocab_size: ``V``; needed for ``tail="uniform"``.
    """
    arr = np.asarray(_as_2d(top, "top"), dtype=np.float64)
    rest, n_tail = _tail(arr, vocab_size, tail)
    p = np.where(np.isfinite(arr), np.exp(arr), 0.0)
    ent = -np.sum(np.where(p > 0, p * np.where(np.isfinite(arr), arr, 0.0), 0.0), axis=1)
    if n_tail:
        with np.errstate(divide="ignore", invalid="ignore"):
            ent = ent + np.where(rest > 0, -rest * np.log(rest / n_tail), 0.0)
    out: FloatArray = ent
    return out


def token_logprob_variances_topk(
    top: Any, *, tail: TailMode = "uniform", vocab_size: int | None = None
) -> FloatArray:
    """Approximate :func:`token_logprob_variances` from the top-k log-probabilities ``(T, k)``.

    Args:
        top: Top-k log-probabilities per position (``-inf`` entries are left out).
        tail: ``"ignore"``: the variance of the ``k`` known log-probabilities only.
            ``"uniform"``: the other ``V - k`` tokens each get ``log(r / (V - k))`` with
            ``r = 1 - sum_top p``, and the variance is over all ``V`` values.
        vocab_size: ``V``; needed for ``tail="uniform"``.
    """
    arr = np.asarray(_as_2d(top, "top"), dtype=np.float64)
    rest, n_tail = _tail(arr, vocab_size, tail)
    known = np.isfinite(arr)
    vals = np.where(known, arr, 0.0)
    n_known = known.sum(axis=1)
    if not n_tail:
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = vals.sum(axis=1) / n_known
            out: FloatArray = (vals**2).sum(axis=1) / n_known - mean**2
        return np.maximum(out, 0.0)
    # A tail of zero mass would be log 0 = -inf: floor it at the smallest positive double.
    tail_lp = np.log(np.maximum(rest, np.finfo(np.float64).tiny) / n_tail)
    total = n_known + n_tail
    mean = (vals.sum(axis=1) + n_tail * tail_lp) / total
    second = ((vals**2).sum(axis=1) + n_tail * tail_lp**2) / total
    out = np.maximum(second - mean**2, 0.0)
    return out


def sentprob(token_logprobs: Any) -> float:
    """SentProb: the mean log-probability of the response tokens (NaN when empty).

    Example:
        >>> sentprob([-1.0, -3.0])
        -2.0
    """
    lp = _as_1d(token_logprobs, "token_logprobs")
    return float(np.mean(lp)) if lp.size else float("nan")


def sentprob_ref(token_logprobs: Any) -> float:
    """SentProb-Ref: ``-(1/T) sum_t p(y~_t) log p(y~_t)`` over a reference's tokens.

    Args:
        token_logprobs: ``(T,)`` log-probabilities of the reference tokens under forced
            decoding after the instruction.
    """
    lp = _as_1d(token_logprobs, "token_logprobs")
    if not lp.size:
        return float("nan")
    p = np.exp(lp)
    return float(-np.mean(p * np.where(p > 0, lp, 0.0)))


def ensemble_stats(values: Sequence[float] | Any) -> tuple[float, float]:
    """Unt-Exp and Unt-Var: mean and population variance ``E[SP^2] - E[SP]^2`` of ``N`` values.

    Example:
        >>> ensemble_stats([-1.0, -3.0])
        (-2.0, 1.0)
    """
    arr = _as_1d(values, "values")
    if not arr.size:
        return float("nan"), float("nan")
    return float(np.mean(arr)), float(np.var(arr))


def _zscore(values: FloatArray) -> FloatArray:
    ok = np.isfinite(values)
    out = np.full(values.shape, np.nan)
    if ok.sum() < 2:
        return out
    sd = float(np.std(values[ok]))
    out[ok] = (values[ok] - np.mean(values[ok])) / sd if sd > 0 else 0.0
    return out


def softmax_combo(entropy: Any, variance: Any) -> FloatArray:
    """Softmax-combo over items: ``z(Softmax-Var) - z(Softmax-Ent)``.

    Args:
        entropy: Softmax-Ent of each item.
        variance: Softmax-Var of each item.

    Returns:
        One value per item; NaN where either input is NaN (the z-scores use the items where
        that feature is finite).
    """
    ent = _as_1d(entropy, "entropy")
    var = _as_1d(variance, "variance")
    if ent.shape != var.shape:
        raise ValueError(
            f"`entropy` and `variance` must have the same length. Got "
            f"{ent.size} and {var.size} instead."
        )
    out: FloatArray = _zscore(var) - _zscore(ent)
    return out


def attention_entropy(weights: Any) -> FloatArray:
    """AttnEnt of every layer and head from attention weights ``(L, H, T, N)``.

    Row ``weights[l, h, t]`` is the attention distribution of response token ``t`` over the
    positions before it (zeros where masked). Returns ``(L, H)``:
    ``-(1/T) sum_t sum_j a_tj log a_tj``. AttnEnt-Min is ``out.min()``, AttnEnt-Avg
    ``out.mean()``.
    """
    arr = np.asarray(weights)
    if arr.ndim != 4:
        raise ValueError(
            f"`weights` must be a 4-D array (layers, heads, response tokens, "
            f"positions). Got shape {arr.shape} instead."
        )
    if arr.shape[2] == 0:
        return np.full(arr.shape[:2], np.nan)
    out: FloatArray = np.empty(arr.shape[:2], dtype=np.float64)
    for layer in range(arr.shape[0]):  # one layer at a time bounds the float64 working copy
        # entr(x) = -x log x, and 0 at x = 0 (masked positions contribute nothing).
        out[layer] = _entr(np.asarray(arr[layer], dtype=np.float64)).sum(axis=2).mean(axis=1)
    return out


def _entr(x: FloatArray) -> FloatArray:
    """Elementwise ``-x log x``: 0 at ``x = 0``, ``-inf`` below 0 (``scipy.special.entr``)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out: FloatArray = np.where(x > 0, -x * np.log(np.where(x > 0, x, 1.0)), 0.0)
    out = np.where(x < 0, -np.inf, out)
    out = np.where(np.isnan(x), np.nan, out)
    return out
