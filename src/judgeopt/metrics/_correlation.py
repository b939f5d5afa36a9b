"""Dataset-level and group-level correlation between human and judge scores.

Definitions follow HPSS (Wen et al. 2025, Appendix A):

* **dataset level**: one correlation over all items of the dataset;
* **group (sample) level**: for each query/source (a *group*), the correlation
  between the scores of the responses to it, then the unweighted mean over groups.

The three coefficients match :func:`scipy.stats.spearmanr` (average ranks for
ties), :func:`scipy.stats.kendalltau` (tau-b) and :func:`scipy.stats.pearsonr`.
They are computed by one vectorised routine, :func:`rowwise_correlation`, that
also serves the resampling tests in :mod:`judgeopt.metrics._significance`.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

# scipy ships no type information unless scipy-stubs is installed.
from judgeopt.metrics._validation import (
    FloatArray,
    Groups,
    Method,
    Scores,
    check_constant_groups,
    check_method,
    group_indices,
    validate_groups,
    validate_pair,
)

__all__ = [
    "GroupCorrelation",
    "constant_groups_as_zero",
    "correlation",
    "correlations",
    "group_correlation",
    "rowwise_correlation",
]

# Kendall tau-b is vectorised over all item pairs (O(n^2) per row) when a row has
# at most this many pairs; longer rows go to scipy's O(n log n) routine, which is
# faster from about 100 items on (measured: ~250 us per call vs ~90 us at n=100).
_KENDALL_VECTOR_MAX_PAIRS = 5_000
# Largest number of (row, pair) cells materialised at once by the vectorised path.
_KENDALL_CELL_BUDGET = 1_000_000


def _scipy_stats() -> Any:
    """``scipy.stats``, imported on first use: it takes about half a second to import,
    which every ``judgeopt`` command (``--help`` included) would pay otherwise."""
    from scipy import stats  # type: ignore[import-untyped, unused-ignore]

    return stats


@dataclass(frozen=True)
class GroupCorrelation:
    """Result of :func:`group_correlation`.

    Attributes:
        value: Unweighted mean of the per-group correlations that entered it.
        n_groups_used: Number of groups that entered the mean.
        n_groups_skipped: Number of groups left out: fewer than two items, constant
            human scores, or (with ``constant_groups="skip"``) constant judge scores.
        per_group: Correlation of every used group, keyed by group id, in the order
            the groups first appear (a judge-constant group counted as 0 is here with
            0.0). Skipped groups are absent.
        skipped: Ids of the skipped groups, in first-seen order.
        n_groups_constant: Groups in which the judge's scores are constant while the
            human scores vary: counted as 0 (``"zero"``, so they are among the used
            groups) or left out (``"skip"``, among the skipped ones).
    """

    value: float
    n_groups_used: int
    n_groups_skipped: int
    per_group: dict[Hashable, float]
    skipped: tuple[Hashable, ...] = ()
    n_groups_constant: int = 0


def _pearson_rows(x: FloatArray, y: FloatArray) -> FloatArray:
    """Pearson r row by row; rows are assumed non-constant (no division guard)."""
    xc = x - x.mean(axis=1, keepdims=True)
    yc = y - y.mean(axis=1, keepdims=True)
    xc = xc / np.linalg.norm(xc, axis=1, keepdims=True)
    yc = yc / np.linalg.norm(yc, axis=1, keepdims=True)
    r: FloatArray = np.clip(np.sum(xc * yc, axis=1), -1.0, 1.0)
    return r


def _kendall_rows(x: FloatArray, y: FloatArray) -> FloatArray:
    """Kendall tau-b row by row; rows are assumed non-constant."""
    n_rows, n = np.broadcast_shapes(x.shape, y.shape)
    n_pairs = n * (n - 1) // 2
    if n_pairs > _KENDALL_VECTOR_MAX_PAIRS:
        xb = np.broadcast_to(x, (n_rows, n))
        yb = np.broadcast_to(y, (n_rows, n))
        return np.array(
            [float(_scipy_stats().kendalltau(xb[k], yb[k]).statistic) for k in range(n_rows)],
            dtype=np.float64,
        )
    i, j = np.triu_indices(n, k=1)
    out = np.empty(n_rows, dtype=np.float64)
    chunk = max(1, _KENDALL_CELL_BUDGET // max(n_pairs, 1))
    for start in range(0, n_rows, chunk):
        stop = min(start + chunk, n_rows)
        xs = x[start:stop] if x.shape[0] > 1 else x
        ys = y[start:stop] if y.shape[0] > 1 else y
        dx = np.sign(xs[:, j] - xs[:, i])
        dy = np.sign(ys[:, j] - ys[:, i])
        s = np.sum(dx * dy, axis=1)
        untied_x = n_pairs - np.count_nonzero(dx == 0, axis=1)
        untied_y = n_pairs - np.count_nonzero(dy == 0, axis=1)
        out[start:stop] = s / np.sqrt(untied_x.astype(np.float64) * untied_y)
    clipped: FloatArray = np.clip(out, -1.0, 1.0)
    return clipped


def rowwise_correlation(x: FloatArray, y: FloatArray, method: Method) -> FloatArray:
    """Correlate ``x[k]`` with ``y[k]`` for every row ``k`` (vectorised).

    This is the computational core of the module. It performs no input
    validation beyond shapes: callers validate user input first.

    Args:
        x: Array of shape ``(R, n)`` or ``(1, n)`` (broadcast over rows).
        y: Array of shape ``(R, n)`` or ``(1, n)``.
        method: ``"spearman"``, ``"kendall"`` (tau-b) or ``"pearson"``.

    Returns:
        Array of ``R`` correlations; a row where either side is constant, or
        that has fewer than two columns, gives NaN.

    Raises:
        ValueError: If the arrays are not two-dimensional or do not broadcast.
    """
    if x.ndim != 2 or y.ndim != 2:
        raise ValueError("rowwise_correlation expects two-dimensional arrays")
    n_rows, n = np.broadcast_shapes(x.shape, y.shape)
    out = np.full(n_rows, np.nan, dtype=np.float64)
    if n < 2:
        return out
    valid = np.broadcast_to(np.ptp(x, axis=1) > 0, (n_rows,)) & np.broadcast_to(
        np.ptp(y, axis=1) > 0, (n_rows,)
    )
    if not valid.any():
        return out
    xv = x[valid] if x.shape[0] > 1 else x
    yv = y[valid] if y.shape[0] > 1 else y
    if method == "pearson":
        out[valid] = _pearson_rows(xv, yv)
    elif method == "spearman":
        rx = np.asarray(_scipy_stats().rankdata(xv, axis=1), dtype=np.float64)
        ry = np.asarray(_scipy_stats().rankdata(yv, axis=1), dtype=np.float64)
        out[valid] = _pearson_rows(rx, ry)
    else:
        out[valid] = _kendall_rows(xv, yv)
    return out


def constant_groups_as_zero(values: FloatArray, human_varies: npt.NDArray[np.bool_]) -> FloatArray:
    """Per-group correlations with the undefined ones of judge-constant groups set to 0.

    ``values`` holds one correlation per group (NaN where undefined); ``human_varies`` is
    true for the groups with at least two items whose human scores vary, so that a NaN
    there can only come from a constant judge. Other NaN stay NaN (skipped).
    """
    out = values.copy()
    out[np.isnan(out) & human_varies] = 0.0
    return out


def group_correlation(
    human: Scores,
    predicted: Scores,
    groups: Groups,
    method: str = "spearman",
    constant_groups: str = "zero",
) -> GroupCorrelation:
    """Group-level (HPSS "sample-level") correlation with bookkeeping.

    For every group the correlation between the human and the predicted scores of
    its items is computed; the result is the unweighted mean over groups. Groups
    with fewer than two items, or whose human scores are constant, are skipped (there
    is nothing to rank). A group whose *predicted* scores are constant while the human
    scores vary counts as a correlation of 0 by default: the judge ranks nothing there,
    as a constant judge scores 0 at dataset level. Leaving such groups out instead
    (``constant_groups="skip"``, the common practice of published evaluation scripts)
    scores a judge only where it chose to discriminate, so a judge that gives one rating
    to most groups and breaks a tie in one is rewarded for it (``docs/metrics.md``).

    Args:
        human: Human scores, one per item.
        predicted: Judge scores, one per item.
        groups: One hashable group id per item (e.g. the source document id).
        method: ``"spearman"`` (default), ``"kendall"`` (tau-b) or ``"pearson"``.
        constant_groups: ``"zero"`` (default) or ``"skip"``: how a group with constant
            predicted and varying human scores counts.

    Returns:
        A :class:`GroupCorrelation` with the mean, the used/skipped counts and
        the per-group values.

    Raises:
        ValueError: On invalid input (see :func:`correlation`), if ``groups`` has
            the wrong length, ``constant_groups`` is not allowed, or if every group is
            skipped.
    """
    checked = check_method(method)
    mode = check_constant_groups(constant_groups)
    h, p = validate_pair(human, predicted)
    ids = validate_groups(groups, h.size)
    per_group: dict[Hashable, float] = {}
    skipped: list[Hashable] = []
    n_constant = 0
    for gid, idx in group_indices(ids).items():
        value = float(rowwise_correlation(h[None, idx], p[None, idx], checked)[0])
        if np.isnan(value) and idx.size >= 2 and np.ptp(h[idx]) > 0:
            n_constant += 1
            if mode == "zero":
                value = 0.0
        if np.isnan(value):
            skipped.append(gid)
        else:
            per_group[gid] = value
    if not per_group:
        why = (
            "fewer than 2 items or constant human scores"
            if mode == "zero"
            else "fewer than 2 items or a constant side, with constant_groups='skip'"
        )
        raise ValueError(
            f"every one of the {len(skipped)} groups was skipped ({why}); a group-level "
            "correlation is undefined"
        )
    mean = float(np.mean(np.fromiter(per_group.values(), dtype=np.float64)))
    return GroupCorrelation(
        value=mean,
        n_groups_used=len(per_group),
        n_groups_skipped=len(skipped),
        per_group=per_group,
        skipped=tuple(skipped),
        n_groups_constant=n_constant,
    )


def correlation(
    human: Scores,
    predicted: Scores,
    method: str = "spearman",
    groups: Groups | None = None,
    constant_groups: str = "zero",
) -> float:
    """Correlation between human and judge scores, dataset- or group-level.

    Without ``groups`` this is the dataset-level coefficient over all items.
    With ``groups`` it is :func:`group_correlation` ``(...).value``: the
    unweighted mean of within-group correlations, skipping groups with fewer
    than two items or constant human scores; a group where only the judge is
    constant counts as 0 (``constant_groups="skip"`` leaves it out).

    Args:
        human: Human scores, one per item.
        predicted: Judge scores, one per item.
        method: ``"spearman"`` (default, average ranks for ties), ``"kendall"``
            (tau-b, as :func:`scipy.stats.kendalltau`) or ``"pearson"``.
        groups: Optional group id per item for the group-level variant.
        constant_groups: ``"zero"`` (default) or ``"skip"``, as in
            :func:`group_correlation` (group level only; checked either way).

    Returns:
        The correlation coefficient in ``[-1, 1]``.

    Raises:
        ValueError: If the lengths differ, either input holds NaN/inf, there are
            fewer than 3 items, either side is constant, ``method`` or
            ``constant_groups`` is unknown, ``groups`` has the wrong length, or every
            group is skipped.
    """
    if groups is not None:
        return group_correlation(human, predicted, groups, method, constant_groups).value
    checked = check_method(method)
    check_constant_groups(constant_groups)
    h, p = validate_pair(human, predicted)
    return float(rowwise_correlation(h[None, :], p[None, :], checked)[0])


def correlations(
    human: Scores,
    predicted: Scores,
    groups: Groups | None = None,
    constant_groups: str = "zero",
) -> dict[str, float]:
    """Spearman, Kendall tau-b and Pearson correlation in one call.

    Args:
        human: Human scores, one per item.
        predicted: Judge scores, one per item.
        groups: Optional group id per item for group-level correlations.
        constant_groups: ``"zero"`` (default) or ``"skip"``, as in
            :func:`group_correlation`.

    Returns:
        A dict with keys ``"spearman"``, ``"kendall"`` and ``"pearson"``.

    Raises:
        ValueError: On invalid input, as for :func:`correlation`.
    """
    return {
        method: correlation(
            human, predicted, method=method, groups=groups, constant_groups=constant_groups
        )
        for method in ("spearman", "kendall", "pearson")
    }
