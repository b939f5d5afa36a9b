"""Resampling statistics: a paired permutation test and a bootstrap interval.

* :func:`permutation_test` is the PERM-INPUTS test of Deutsch, Dror & Roth (2021),
  "A Statistical Analysis of Summarization Evaluation Metrics using Resampling
  Methods", used by PrExMe to decide whether one judge correlates better with
  humans than another.
* :func:`bootstrap_ci` is a percentile bootstrap over items, or over whole groups
  for group-level correlations.
* :func:`paired_bootstrap` is the same bootstrap for the *difference* of two
  judges' correlations with the humans on the same items (both judges see the
  same resampled items or groups), e.g. a compiled judge against a baseline.

Randomness only comes from the ``seed`` argument (an ``int``, ``None`` or a
:class:`numpy.random.Generator`); global random state is never touched.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from judgeopt.metrics._correlation import (
    constant_groups_as_zero,
    correlation,
    rowwise_correlation,
)
from judgeopt.metrics._validation import (
    ConstantGroups,
    FloatArray,
    Groups,
    Method,
    Scores,
    check_constant_groups,
    check_method,
    check_n_resamples,
    group_indices,
    validate_groups,
    validate_pair,
)

__all__ = [
    "BootstrapResult",
    "PairedBootstrapResult",
    "PermutationResult",
    "bootstrap_ci",
    "paired_bootstrap",
    "paired_bootstrap_mean",
    "permutation_test",
]

# Number of (resample, item) cells materialised at once; resamples are processed
# in chunks below this budget so memory stays bounded for large datasets.
_CELL_BUDGET = 2_000_000
# Permuted deltas within this distance of the observed delta count as ">=",
# so that floating-point noise cannot turn an exact tie into a miss.
_TIE_TOLERANCE = 1e-12


@dataclass(frozen=True)
class PermutationResult:
    """Result of :func:`permutation_test`.

    Attributes:
        delta: Observed ``corr(human, metric_a) - corr(human, metric_b)``.
        p_value: One-sided p-value for H1 "metric_a correlates better than
            metric_b": ``(count + 1) / (n_valid + 1)`` where ``count`` is the number
            of valid resamples with a permuted delta ``>=`` the observed one.
        n_resamples: Number of resamples requested.
        n_degenerate: Resamples whose delta was undefined (every group constant
            on one side) and that were left out of the p-value.
    """

    delta: float
    p_value: float
    n_resamples: int
    n_degenerate: int = 0


@dataclass(frozen=True)
class BootstrapResult:
    """Result of :func:`bootstrap_ci`.

    Attributes:
        value: Correlation on the original data.
        low: Lower percentile bound of the interval.
        high: Upper percentile bound of the interval.
        confidence: Nominal coverage, e.g. 0.95.
        n_resamples: Number of resamples requested.
        n_degenerate: Resamples skipped because a side was constant (or every
            resampled group was), so the correlation was undefined.
    """

    value: float
    low: float
    high: float
    confidence: float
    n_resamples: int
    n_degenerate: int = 0


def _chunks(n_resamples: int, n_cells_per_row: int) -> Iterator[int]:
    """Yield chunk sizes summing to ``n_resamples`` that respect the cell budget."""
    size = max(1, _CELL_BUDGET // max(n_cells_per_row, 1))
    done = 0
    while done < n_resamples:
        step = min(size, n_resamples - done)
        yield step
        done += step


def _row_means(values: FloatArray) -> FloatArray:
    """Mean over axis 0 ignoring NaN; all-NaN columns give NaN (no warning)."""
    finite = ~np.isnan(values)
    sums = np.where(finite, values, 0.0).sum(axis=0)
    counts = finite.sum(axis=0)
    out = np.full(values.shape[1], np.nan, dtype=np.float64)
    np.divide(sums, counts, out=out, where=counts > 0)
    return out


def _human_varies(h: FloatArray, parts: list[npt.NDArray[np.intp]]) -> npt.NDArray[np.bool_]:
    """Per group: at least two items and human scores that vary (something to rank)."""
    return np.array([idx.size >= 2 and bool(np.ptp(h[idx]) > 0) for idx in parts], dtype=bool)


def _per_group(
    h: FloatArray,
    p: FloatArray,
    parts: list[npt.NDArray[np.intp]],
    method: Method,
    mode: ConstantGroups,
) -> FloatArray:
    """One judge's correlation in every group (NaN: skipped), ``mode`` applied."""
    values = np.array(
        [rowwise_correlation(h[None, idx], p[None, idx], method)[0] for idx in parts],
        dtype=np.float64,
    )
    if mode == "zero":
        values = constant_groups_as_zero(values, _human_varies(h, parts))
    return values


def _correlate_rows(
    h: FloatArray,
    scores: FloatArray,
    method: Method,
    parts: list[npt.NDArray[np.intp]] | None,
    mode: ConstantGroups = "zero",
) -> FloatArray:
    """Dataset- or group-level correlation of ``h`` with every row of ``scores``."""
    if parts is None:
        return rowwise_correlation(h[None, :], scores, method)
    per_group = np.stack(
        [rowwise_correlation(h[None, idx], scores[:, idx], method) for idx in parts]
    )
    if mode == "zero":
        varies = _human_varies(h, parts)
        per_group[np.isnan(per_group) & varies[:, None]] = 0.0
    return _row_means(per_group)


def _zscore(x: FloatArray) -> FloatArray:
    """Standardise to mean 0 and (population) standard deviation 1."""
    z: FloatArray = (x - x.mean()) / x.std()
    return z


def permutation_test(
    human: Scores,
    metric_a: Scores,
    metric_b: Scores,
    method: str = "spearman",
    groups: Groups | None = None,
    n_resamples: int = 1000,
    seed: int | np.random.Generator | None = None,
    constant_groups: str = "zero",
) -> PermutationResult:
    """PERM-INPUTS paired permutation test of Deutsch, Dror & Roth (2021).

    The statistic is ``delta = corr(human, a) - corr(human, b)``. Each metric's
    scores are first z-normalised over all items (``(x - mean) / std``), as in
    Deutsch et al., so that exchanging a score of ``a`` with one of ``b`` is
    meaningful when the metrics live on different scales; this does not change
    either observed correlation. Under H0 the two metrics are exchangeable, so
    each resample swaps, independently for every item with probability 0.5, the
    (standardised) scores of ``a`` and ``b`` on that item and recomputes delta.
    The one-sided p-value is ``(count + 1) / (n + 1)`` where ``count`` is the
    number of resamples with ``delta_perm >= delta``.

    Args:
        human: Human scores, one per item.
        metric_a: Scores of the first metric/judge (the one hypothesised better).
        metric_b: Scores of the second metric/judge.
        method: ``"spearman"`` (default), ``"kendall"`` or ``"pearson"``.
        groups: Optional group id per item; the group-level correlation is used.
        n_resamples: Number of random permutations.
        seed: Seed or :class:`numpy.random.Generator` for reproducibility.
        constant_groups: ``"zero"`` (default) or ``"skip"``: how a group where a metric
            is constant and the humans vary counts (:func:`group_correlation`).

    Returns:
        A :class:`PermutationResult`.

    Raises:
        ValueError: On invalid input (as :func:`correlation`, for both metrics),
            an unknown method, a non-positive ``n_resamples``, or if the
            correlation is undefined for every group.
    """
    checked = check_method(method)
    mode = check_constant_groups(constant_groups)
    n_resamples = check_n_resamples(n_resamples)
    h, a = validate_pair(human, metric_a, ("human", "metric_a"))
    _, b = validate_pair(human, metric_b, ("human", "metric_b"))
    parts: list[npt.NDArray[np.intp]] | None = None
    if groups is not None:
        parts = list(group_indices(validate_groups(groups, h.size)).values())
        # Validates that both observed group-level correlations are defined.
        correlation(h, a, checked, groups, mode)
        correlation(h, b, checked, groups, mode)
    za, zb = _zscore(a), _zscore(b)
    observed = float(
        _correlate_rows(h, za[None, :], checked, parts, mode)[0]
        - _correlate_rows(h, zb[None, :], checked, parts, mode)[0]
    )
    rng = np.random.default_rng(seed)
    count = 0
    n_valid = 0
    for size in _chunks(n_resamples, h.size):
        swap = rng.random((size, h.size)) < 0.5
        perm_a = np.where(swap, zb, za)
        perm_b = np.where(swap, za, zb)
        deltas = _correlate_rows(h, perm_a, checked, parts, mode) - _correlate_rows(
            h, perm_b, checked, parts, mode
        )
        finite = ~np.isnan(deltas)
        n_valid += int(finite.sum())
        count += int(np.count_nonzero(deltas[finite] >= observed - _TIE_TOLERANCE))
    return PermutationResult(
        delta=observed,
        p_value=(count + 1) / (n_valid + 1),
        n_resamples=n_resamples,
        n_degenerate=n_resamples - n_valid,
    )


def bootstrap_ci(
    human: Scores,
    predicted: Scores,
    method: str = "spearman",
    groups: Groups | None = None,
    n_resamples: int = 1000,
    confidence: float = 0.95,
    seed: int | np.random.Generator | None = None,
    constant_groups: str = "zero",
) -> BootstrapResult:
    """Percentile bootstrap confidence interval of a correlation.

    Without ``groups`` items are resampled with replacement. With ``groups``
    whole groups are resampled with replacement (the within-group correlations
    are fixed; a resample's value is the mean over its drawn groups whose
    correlation is defined, counting duplicates; a group where the judge is constant
    and the humans vary counts as 0 unless ``constant_groups="skip"``). Resamples with an undefined
    correlation (a constant side, or only skipped groups drawn) are skipped and
    reported in ``n_degenerate``. The bounds are the ``(1 - confidence) / 2`` and
    ``(1 + confidence) / 2`` quantiles of the remaining values.

    Args:
        human: Human scores, one per item.
        predicted: Judge scores, one per item.
        method: ``"spearman"`` (default), ``"kendall"`` or ``"pearson"``.
        groups: Optional group id per item, for the group-level correlation.
        n_resamples: Number of bootstrap resamples.
        confidence: Coverage of the interval, strictly between 0 and 1.
        seed: Seed or :class:`numpy.random.Generator` for reproducibility.
        constant_groups: ``"zero"`` (default) or ``"skip"``, as in
            :func:`group_correlation`.

    Returns:
        A :class:`BootstrapResult`.

    Raises:
        ValueError: On invalid input (as :func:`correlation`), a non-positive
            ``n_resamples``, ``confidence`` outside ``(0, 1)``, or if every
            resample is degenerate.
    """
    checked = check_method(method)
    n_resamples = check_n_resamples(n_resamples)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence}")
    mode = check_constant_groups(constant_groups)
    value = correlation(human, predicted, checked, groups, mode)
    h, p = validate_pair(human, predicted)
    rng = np.random.default_rng(seed)
    pieces: list[FloatArray] = []
    if groups is None:
        for size in _chunks(n_resamples, h.size):
            idx = rng.integers(0, h.size, size=(size, h.size))
            pieces.append(rowwise_correlation(h[idx], p[idx], checked))
    else:
        parts = list(group_indices(validate_groups(groups, h.size)).values())
        per_group = _per_group(h, p, parts, checked, mode)
        for size in _chunks(n_resamples, per_group.size):
            draw = rng.integers(0, per_group.size, size=(size, per_group.size))
            pieces.append(_row_means(per_group[draw].T))
    values = np.concatenate(pieces)
    valid = values[~np.isnan(values)]
    if valid.size == 0:
        raise ValueError(f"all {n_resamples} bootstrap resamples were degenerate")
    alpha = 1.0 - confidence
    low, high = np.quantile(valid, [alpha / 2.0, 1.0 - alpha / 2.0])
    return BootstrapResult(
        value=value,
        low=float(low),
        high=float(high),
        confidence=float(confidence),
        n_resamples=n_resamples,
        n_degenerate=int(n_resamples - valid.size),
    )


@dataclass(frozen=True)
class PairedBootstrapResult:
    """Result of :func:`paired_bootstrap`.

    Attributes:
        a: ``corr(human, a)`` on the original data.
        b: ``corr(human, b)`` on the original data.
        delta: ``a - b``.
        low: Lower percentile bound of ``delta``.
        high: Upper percentile bound of ``delta``.
        confidence: Nominal two-sided coverage, e.g. 0.95.
        p_not_positive: Share of the valid resamples with ``delta <= 0`` (a one-sided
            bootstrap p-value of "a correlates better than b").
        n: Items (dataset level) or groups (group level) resampled.
        n_resamples: Number of resamples requested.
        n_degenerate: Resamples skipped because the humans were constant (or, at
            group level, no drawn group had a defined correlation for a judge).
    """

    a: float
    b: float
    delta: float
    low: float
    high: float
    confidence: float
    p_not_positive: float
    n: int
    n_resamples: int
    n_degenerate: int = 0

    def to_dict(self) -> dict[str, float | int]:
        """Plain-data form."""
        return {
            "a": self.a,
            "b": self.b,
            "delta": self.delta,
            "low": self.low,
            "high": self.high,
            "confidence": self.confidence,
            "p_not_positive": self.p_not_positive,
            "n": self.n,
            "n_resamples": self.n_resamples,
            "n_degenerate": self.n_degenerate,
        }


def _constant_is_zero(values: FloatArray, human_ok: npt.NDArray[np.bool_]) -> FloatArray:
    """A judge constant on a resample cannot rank: 0 where the humans vary."""
    out = values.copy()
    out[np.isnan(out) & human_ok] = 0.0
    return out


def paired_bootstrap(
    human: Scores,
    a: Scores,
    b: Scores,
    method: str = "spearman",
    groups: Groups | None = None,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int | np.random.Generator | None = None,
    constant_groups: str = "zero",
) -> PairedBootstrapResult:
    """Percentile bootstrap interval of ``corr(human, a) - corr(human, b)``.

    The two judges are scored on the same items, so every resample draws one set
    of items (or, with ``groups``, of whole groups) and recomputes both
    correlations on it: the interval reflects the paired design, which is much
    narrower than two independent intervals when the judges' errors are
    correlated.

    Conventions (those of :func:`judgeopt.evaluate.score_items`): at dataset
    level a judge that is constant on a resample gets correlation 0 (it cannot
    rank anything); a resample whose human scores are constant is skipped. At
    group level each judge's value is the mean of its per-group correlations among
    the drawn groups, as :func:`group_correlation` computes it: a group whose human
    scores are constant is left out, one where only that judge is constant counts
    as 0 (left out of that judge's mean with ``constant_groups="skip"``), so the
    observed ``delta`` is exactly the difference of the two group-level
    correlations.

    Args:
        human: Human scores, one per item.
        a: First judge's scores (e.g. the compiled judge).
        b: Second judge's scores (e.g. the baseline), on the same items.
        method: ``"spearman"`` (default), ``"kendall"`` or ``"pearson"``.
        groups: Optional group id per item, for the group-level correlation.
        n_resamples: Number of bootstrap resamples.
        confidence: Two-sided coverage of the interval, strictly between 0 and 1.
        seed: Seed or :class:`numpy.random.Generator` for reproducibility.
        constant_groups: ``"zero"`` (default) or ``"skip"``, as in
            :func:`group_correlation` (group level only).

    Returns:
        A :class:`PairedBootstrapResult`.

    Raises:
        ValueError: On invalid input (lengths differ, NaN, fewer than 3 items,
            constant human scores), an unknown method, a non-positive
            ``n_resamples``, ``confidence`` outside ``(0, 1)``, or when every
            resample is degenerate.

    Example:
        >>> human = [1, 2, 3, 4, 5, 6, 7, 8]
        >>> r = paired_bootstrap(human, [1, 2, 3, 4, 5, 6, 8, 7], [2, 1, 4, 3, 6, 5, 8, 7],
        ...                      seed=0)
        >>> round(r.delta, 3), r.low <= r.delta <= r.high
        (0.071, True)
    """
    checked = check_method(method)
    mode = check_constant_groups(constant_groups)
    n_resamples = check_n_resamples(n_resamples)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence}")
    h, pa = validate_pair(human, a, ("human", "a"), allow_constant=True)
    _, pb = validate_pair(human, b, ("human", "b"), allow_constant=True)
    if np.ptp(h) == 0:
        raise ValueError("the human scores are constant: no correlation is defined")
    rng = np.random.default_rng(seed)
    if groups is None:
        return _paired_items(h, pa, pb, checked, n_resamples, confidence, rng)
    return _paired_groups(h, pa, pb, groups, checked, mode, n_resamples, confidence, rng)


def _paired_items(
    h: FloatArray,
    pa: FloatArray,
    pb: FloatArray,
    method: Method,
    n_resamples: int,
    confidence: float,
    rng: np.random.Generator,
) -> PairedBootstrapResult:
    """:func:`paired_bootstrap` at dataset level: items are resampled."""
    n = int(h.size)
    ha, hb = rowwise_correlation(h[None, :], np.stack([pa, pb]), method)
    value_a = 0.0 if np.isnan(ha) else float(ha)
    value_b = 0.0 if np.isnan(hb) else float(hb)
    pieces: list[FloatArray] = []
    for size in _chunks(n_resamples, 3 * n):
        idx = rng.integers(0, n, size=(size, n))
        hh = h[idx]
        human_ok = np.ptp(hh, axis=1) > 0
        ca = _constant_is_zero(rowwise_correlation(hh, pa[idx], method), human_ok)
        cb = _constant_is_zero(rowwise_correlation(hh, pb[idx], method), human_ok)
        pieces.append(ca - cb)
    return _paired_result(value_a, value_b, n, pieces, confidence, n_resamples)


def _paired_groups(
    h: FloatArray,
    pa: FloatArray,
    pb: FloatArray,
    groups: Groups,
    method: Method,
    mode: ConstantGroups,
    n_resamples: int,
    confidence: float,
    rng: np.random.Generator,
) -> PairedBootstrapResult:
    """:func:`paired_bootstrap` at group level: whole groups are resampled."""
    parts = list(group_indices(validate_groups(groups, h.size)).values())
    n = len(parts)
    per_a = _per_group(h, pa, parts, method, mode)
    per_b = _per_group(h, pb, parts, method, mode)
    if np.isnan(per_a).all() or np.isnan(per_b).all():
        raise ValueError(
            "every group was skipped for one judge (fewer than 2 items or a constant "
            "side); a group-level correlation is undefined"
        )
    value_a = float(np.nanmean(per_a))
    value_b = float(np.nanmean(per_b))
    pieces: list[FloatArray] = []
    for size in _chunks(n_resamples, 2 * n):
        draw = rng.integers(0, n, size=(size, n))
        pieces.append(_row_means(per_a[draw].T) - _row_means(per_b[draw].T))
    return _paired_result(value_a, value_b, n, pieces, confidence, n_resamples)


def _paired_result(
    value_a: float,
    value_b: float,
    n: int,
    pieces: list[FloatArray],
    confidence: float,
    n_resamples: int,
) -> PairedBootstrapResult:
    """The interval of the resampled deltas (NaN: degenerate) and the observed values."""
    values = np.concatenate(pieces)
    valid = values[~np.isnan(values)]
    if valid.size == 0:
        raise ValueError(f"all {n_resamples} bootstrap resamples were degenerate")
    alpha = 1.0 - confidence
    low, high = np.quantile(valid, [alpha / 2.0, 1.0 - alpha / 2.0])
    return PairedBootstrapResult(
        a=value_a,
        b=value_b,
        delta=value_a - value_b,
        low=float(low),
        high=float(high),
        confidence=float(confidence),
        p_not_positive=float(np.mean(valid <= 0.0)),
        n=n,
        n_resamples=n_resamples,
        n_degenerate=int(n_resamples - valid.size),
    )


def paired_bootstrap_mean(
    a: Scores,
    b: Scores,
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int | np.random.Generator | None = None,
) -> PairedBootstrapResult:
    """Percentile bootstrap interval of ``mean(a) - mean(b)`` over paired items.

    For per-item quantities such as the 0/1 correctness of two pairwise judges (whose
    difference of means is the difference of their accuracies).

    Args:
        a: First judge's per-item values.
        b: Second judge's per-item values, on the same items.
        n_resamples: Number of bootstrap resamples.
        confidence: Two-sided coverage, strictly between 0 and 1.
        seed: Seed or :class:`numpy.random.Generator`.

    Raises:
        ValueError: On lengths that differ, NaN, fewer than 3 items, a non-positive
            ``n_resamples`` or ``confidence`` outside ``(0, 1)``.
    """
    n_resamples = check_n_resamples(n_resamples)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence}")
    va, vb = validate_pair(a, b, ("a", "b"), allow_constant=True)
    d = va - vb
    rng = np.random.default_rng(seed)
    pieces: list[FloatArray] = []
    for size in _chunks(n_resamples, d.size):
        idx = rng.integers(0, d.size, size=(size, d.size))
        pieces.append(d[idx].mean(axis=1))
    means = np.concatenate(pieces)
    alpha = 1.0 - confidence
    low, high = np.quantile(means, [alpha / 2.0, 1.0 - alpha / 2.0])
    return PairedBootstrapResult(
        a=float(va.mean()),
        b=float(vb.mean()),
        delta=float(d.mean()),
        low=float(low),
        high=float(high),
        confidence=float(confidence),
        p_not_positive=float(np.mean(means <= 0.0)),
        n=int(d.size),
        n_resamples=n_resamples,
    )
