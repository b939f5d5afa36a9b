"""Which aggregation gives the most stable rankings (PrExMe App. G): :func:`compare_aggregations`.

Every aggregation's rankings of one dimension are scored with :func:`ranking_stability`'s
Kendall taus, and every two aggregations are compared with a paired sign-flip permutation test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._validation import check_int
from ._aggregate import AGGREGATIONS, check_aggregation
from ._patterns import _cell_values, _check_pair, _num, _stability_from_cells
from ._table import FloatArray, ResultsTable

__all__ = ["AggregationComparison", "compare_aggregations"]


@dataclass(frozen=True)
class AggregationComparison:
    """Which aggregation ranks ``target``'s values most stably (see :func:`compare_aggregations`).

    Attributes:
        target: The ranked dimension.
        changed: The dimensions that were changed.
        aggregations: The compared aggregations.
        per_changed: Aggregation -> changed dimension -> mean tau over its pairs.
        stability: Aggregation -> mean of ``per_changed`` over the changed dimensions.
        p_values: ``p_values[i, j]``: one-sided p-value of "aggregation ``i`` gives more
            stable rankings than aggregation ``j``" (diagonal ``NaN``).
        n_resamples: Random sign flips per test.
    """

    target: str
    changed: tuple[str, ...]
    aggregations: tuple[str, ...]
    per_changed: dict[str, dict[str, float]]
    stability: dict[str, float]
    p_values: FloatArray = field(repr=False)
    n_resamples: int = 0

    @property
    def ranking(self) -> list[tuple[str, float]]:
        """Aggregations sorted by stability, most stable first."""
        return sorted(
            self.stability.items(), key=lambda kv: -kv[1] if math.isfinite(kv[1]) else math.inf
        )

    @property
    def best(self) -> str:
        """The most stable aggregation."""
        return self.ranking[0][0]

    def significantly_better(self, name: str, alpha: float = 0.05) -> list[str]:
        """The aggregations that ``name`` beats with ``p <= alpha``."""
        i = self.aggregations.index(name)
        return [
            b for j, b in enumerate(self.aggregations) if j != i and self.p_values[i, j] <= alpha
        ]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable form."""
        return {
            "target": self.target,
            "changed": list(self.changed),
            "aggregations": list(self.aggregations),
            "stability": {a: _num(v) for a, v in self.stability.items()},
            "per_changed": {
                a: {d: _num(v) for d, v in row.items()} for a, row in self.per_changed.items()
            },
            "p_values": [[_num(v) for v in row] for row in self.p_values.tolist()],
            "n_resamples": self.n_resamples,
            "best": self.best,
        }


def compare_aggregations(
    table: ResultsTable,
    target: str,
    *,
    changed: Sequence[str] | None = None,
    aggregations: Sequence[str] = AGGREGATIONS,
    n_resamples: int = 2000,
    seed: int | np.random.Generator | None = 0,
) -> AggregationComparison:
    """Compare how stable each aggregation's rankings of ``target`` are (PrExMe App. G).

    For every aggregation and every changed dimension, :func:`ranking_stability` gives one
    tau per pair of that dimension's values. An aggregation's stability is the mean tau of
    each changed dimension, averaged over the dimensions (each dimension weighs the same,
    so a factor with 24 values does not drown a task with 3).

    The test of "aggregation A is more stable than B" is a paired permutation test on the
    per-pair differences ``tau_A - tau_B`` (pairs where either is undefined are left out):
    under H0 the two aggregations are exchangeable on every pair, so each resample flips
    the sign of every difference with probability 0.5; the statistic is the weighted mean
    difference (weights as above) and ``p = (count(stat_perm >= stat) + 1) / (n + 1)``.

    NOTE: PrExMe's own test swaps single entries of the concatenated score vectors between
    the two aggregations; swapping whole pairs keeps the unit of stability (a pair of
    settings) intact and needs no correlation per resample.

    Args:
        table: The results.
        target: The ranked dimension.
        changed: Dimensions to change (default: every other factor and group column).
        aggregations: Aggregations to compare (at least two).
        n_resamples: Random sign flips per test.
        seed: Seed or generator of the sign flips.

    Returns:
        An :class:`AggregationComparison`.

    Raises:
        ValueError: On unknown columns or aggregations, fewer than two aggregations, or a
            non-positive ``n_resamples``.
    """
    table.check_dimension(target, "target")
    dims = tuple(d for d in table.dimensions if d != target) if changed is None else tuple(changed)
    if not dims:
        raise ValueError("`changed` must name at least one other column.")
    for d in dims:
        _check_pair(table, target, d)
    aggs = tuple(check_aggregation(a, "aggregations") for a in aggregations)
    if len(set(aggs)) < 2:
        raise ValueError(f"`aggregations` must name at least two aggregations. Got {aggs!r}.")
    check_int(n_resamples, "n_resamples", min_value=1, owner="compare_aggregations")
    used = [d for d in dims if len(table.levels[d]) >= 2]
    taus, per_changed, weights = _pair_taus(table, target, used, aggs)
    return AggregationComparison(
        target=target,
        changed=tuple(used),
        aggregations=aggs,
        per_changed=per_changed,
        stability={a: _nanmean(list(per_changed[a].values())) for a in aggs},
        p_values=_p_values(aggs, taus, weights, n_resamples, seed),
        n_resamples=n_resamples,
    )


def _pair_taus(
    table: ResultsTable, target: str, used: Sequence[str], aggs: tuple[str, ...]
) -> tuple[dict[str, FloatArray], dict[str, dict[str, float]], FloatArray]:
    """Aggregation -> the tau of every pair of settings; aggregation -> changed dimension ->
    mean tau; and the weight of every pair (each changed dimension weighs the same)."""
    mask = table.finite
    taus: dict[str, list[FloatArray]] = {a: [] for a in aggs}
    per_changed: dict[str, dict[str, float]] = {a: {} for a in aggs}
    weights: list[FloatArray] = []
    for d in used:
        cells = _cell_values(table, d, target, mask)
        n_pairs = len(table.levels[d]) * (len(table.levels[d]) - 1) // 2
        weights.append(np.full(n_pairs, 1.0 / (n_pairs * len(used))))
        for a in aggs:
            st = _stability_from_cells(table, target, d, a, cells)
            taus[a].append(st.pair_taus)
            per_changed[a][d] = st.mean_tau
    w = np.concatenate(weights) if weights else np.zeros(0)
    all_taus = {a: np.concatenate(taus[a]) if taus[a] else np.zeros(0) for a in aggs}
    return all_taus, per_changed, w


def _p_values(
    aggs: tuple[str, ...],
    taus: dict[str, FloatArray],
    weights: FloatArray,
    n_resamples: int,
    seed: int | np.random.Generator | None,
) -> FloatArray:
    """``p[i, j]``: :func:`_sign_flip_p` of "``aggs[i]`` is more stable than ``aggs[j]``"."""
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(n_resamples, weights.size))
    p = np.full((len(aggs), len(aggs)), np.nan)
    for i, a in enumerate(aggs):
        for j, b in enumerate(aggs):
            if i == j:
                continue
            p[i, j] = _sign_flip_p(taus[a] - taus[b], weights, signs)
    return p


def _nanmean(values: list[float]) -> float:
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    return float(arr.mean()) if arr.size else math.nan


def _sign_flip_p(diff: FloatArray, weights: FloatArray, signs: FloatArray) -> float:
    """One-sided p-value of a weighted mean difference > 0 under random sign flips."""
    keep = np.isfinite(diff)
    if not keep.any():
        return math.nan
    d = diff[keep] * weights[keep]
    d = d / weights[keep].sum()
    observed = float(d.sum())
    perm = signs[:, keep] @ d
    count = int(np.count_nonzero(perm >= observed - 1e-12))
    return float((count + 1) / (signs.shape[0] + 1))
