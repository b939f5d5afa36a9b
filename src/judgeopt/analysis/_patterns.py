"""Pattern statistics of a results table (PrExMe Sec. 5 and App. G-J).

* :func:`top_prompts`: the top ``fraction`` (2 %) of strategies of every setting, and the
  share of each pattern (factor value) among them.
* :func:`pattern_scores` / :func:`pattern_ranking`: a pattern's score is an aggregation
  (median, mean, max, ...) of every score of the strategies that use it.
* :func:`ranking_stability`: Kendall tau-b between the rankings of one dimension's values
  computed separately for every value of another dimension (a factor, the task, the model).
* :func:`compare_aggregations`: which aggregation gives the most stable rankings, with a
  paired sign-flip permutation test between every two aggregations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._validation import check_int
from ._aggregate import AGGREGATIONS, aggregate, check_aggregation, kendall_tau_b
from ._table import BoolArray, FloatArray, IntArray, ResultsTable

__all__ = [
    "AggregationComparison",
    "Stability",
    "TopPrompts",
    "compare_aggregations",
    "pattern_ranking",
    "pattern_scores",
    "ranking_stability",
    "top_prompts",
]

ValueGroups = Mapping[str, Sequence[str]]


def _row_mask(table: ResultsTable, where: Mapping[str, str] | None) -> BoolArray:
    """Finite rows matching every ``column == value`` of ``where``."""
    mask = table.finite.copy()
    for column, value in (where or {}).items():
        table.check_dimension(column, "where")
        levels = table.levels[column]
        if value not in levels:
            raise ValueError(
                f"`where` value {value!r} is not a value of {column!r}; allowed: {list(levels)!r}."
            )
        mask &= table.codes[column] == levels.index(value)
    return mask


def _categories(
    table: ResultsTable, column: str, value_groups: ValueGroups | None
) -> tuple[list[str], IntArray]:
    """Labels and level -> label index, with ``value_groups`` merging values into categories.

    Values in no category keep their own name and follow the categories.
    """
    levels = table.levels[column]
    if not value_groups:
        return list(levels), np.arange(len(levels), dtype=np.intp)
    if isinstance(value_groups, str) or not isinstance(value_groups, Mapping):
        raise ValueError(
            f"`value_groups` of {column!r} must map a category name to a list of values."
        )
    owner: dict[str, str] = {}
    for category, members in value_groups.items():
        if isinstance(members, str) or not isinstance(members, Sequence) or not members:
            raise ValueError(
                f"`value_groups` category {category!r} of {column!r} must list at least one "
                f"value. Got {members!r}."
            )
        for v in members:
            if v not in levels:
                raise ValueError(
                    f"`value_groups` category {category!r} names {v!r}, which is not a value of "
                    f"{column!r}; allowed: {list(levels)!r}."
                )
            if v in owner:
                raise ValueError(
                    f"`value_groups` puts {v!r} in both {owner[v]!r} and {category!r}."
                )
            owner[v] = category
    labels = list(value_groups)
    labels += [v for v in levels if v not in owner]
    index = np.array([labels.index(owner.get(v, v)) for v in levels], dtype=np.intp)
    return labels, index


# --------------------------------------------------------------------------- top prompts
@dataclass(frozen=True)
class TopPrompts:
    """The top strategies of every setting (see :func:`top_prompts`).

    Attributes:
        table: The analysed table.
        fraction: The top fraction, e.g. ``0.02``.
        within: The columns whose settings were cut separately (default: the table's group).
        mask: Row mask of the selected strategies.
        thresholds: Setting label (values joined by ``" / "``) -> the objective cut-off.
    """

    table: ResultsTable = field(repr=False)
    fraction: float
    within: tuple[str, ...]
    mask: BoolArray = field(repr=False)
    thresholds: dict[str, float] = field(default_factory=dict)

    @property
    def n_top(self) -> int:
        """Number of selected strategies over all settings."""
        return int(np.count_nonzero(self.mask))

    def counts(
        self,
        column: str,
        *,
        by: Sequence[str] = (),
        value_groups: ValueGroups | None = None,
        among: str = "top",
    ) -> dict[tuple[str, ...], dict[str, int]]:
        """How many selected strategies use each value of ``column``, per setting of ``by``.

        Args:
            column: A factor (or group) column.
            by: Columns to split by (e.g. ``["model"]``); ``()`` pools everything.
            value_groups: Category -> values of ``column`` to count together (e.g.
                ``{"textual labels": ["easy token labels", "complex token labels"]}``).
            among: ``"top"`` counts the selected strategies, ``"all"`` every strategy with
                an objective (the base rate).

        Returns:
            Setting of ``by`` (a value tuple, in order of first appearance) -> label -> count.
            Settings with no strategy counted are left out.
        """
        self.table.check_dimension(column, "column")
        if column in by:
            raise ValueError(f"`by` must not contain the counted column {column!r}.")
        if among not in ("top", "all"):
            raise ValueError(f"`among` must be 'top' or 'all'. Got {among!r} instead.")
        labels, index = _categories(self.table, column, value_groups)
        rows = self.mask if among == "top" else self.table.finite
        ids, keys = self.table.setting_index(by)
        lab = index[self.table.codes[column]]
        out: dict[tuple[str, ...], dict[str, int]] = {}
        for k, key in enumerate(keys):
            sel = rows & (ids == k)
            if not sel.any():
                continue
            n = np.bincount(lab[sel], minlength=len(labels))
            out[key] = {label: int(n[i]) for i, label in enumerate(labels)}
        return out

    def shares(
        self,
        column: str,
        *,
        by: Sequence[str] = (),
        value_groups: ValueGroups | None = None,
        among: str = "top",
    ) -> dict[tuple[str, ...], dict[str, float]]:
        """Share (0-1) of each value of ``column`` among the selected strategies.

        Same arguments as :meth:`counts`; every setting's shares sum to 1.

        Example:
            >>> t = ResultsTable.from_records(
            ...     [{"fmt": f, "td": d, "kd": v} for f, d, v in
            ...      [("a", "x", 0.9), ("a", "y", 0.8), ("b", "x", 0.1), ("b", "y", 0.2)]],
            ...     factors=["fmt", "td"], objective="kd")
            >>> top_prompts(t, fraction=0.5).shares("fmt")
            {(): {'a': 1.0, 'b': 0.0}}
        """
        counts = self.counts(column, by=by, value_groups=value_groups, among=among)
        return {
            key: {label: c / sum(row.values()) for label, c in row.items()}
            for key, row in counts.items()
        }


def top_prompts(
    table: ResultsTable, *, fraction: float = 0.02, within: Sequence[str] | None = None
) -> TopPrompts:
    """Select the top ``fraction`` of strategies of every setting, as PrExMe does.

    In each setting of ``within`` (default: the table's group, e.g. every model and task) the
    cut-off is the ``1 - fraction`` quantile (linear interpolation) of the objective values
    present, and every strategy at or above it is selected: with 720 strategies and
    ``fraction=0.02`` that is the best 15 (ties at the cut-off are all kept). Missing values
    are never selected.

    Args:
        table: The results.
        fraction: Share of strategies to keep, in ``(0, 1]``.
        within: Columns whose settings are cut separately.

    Returns:
        A :class:`TopPrompts`.

    Raises:
        ValueError: On a ``fraction`` outside ``(0, 1]`` or an unknown column.
    """
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, int | float)
        or not (0.0 < float(fraction) <= 1.0)
    ):
        raise ValueError(f"`fraction` must be a number in (0, 1]. Got {fraction!r} instead.")
    cols = table.group if within is None else tuple(within)
    ids, keys = table.setting_index(cols)
    finite = table.finite
    mask = np.zeros(table.n_rows, dtype=bool)
    thresholds: dict[str, float] = {}
    for k, key in enumerate(keys):
        rows = finite & (ids == k)
        if not rows.any():
            continue
        cut = float(np.quantile(table.values[rows], 1.0 - float(fraction)))
        mask |= rows & (table.values >= cut)
        thresholds[" / ".join(key) or "all"] = cut
    return TopPrompts(
        table=table, fraction=float(fraction), within=cols, mask=mask, thresholds=thresholds
    )


# --------------------------------------------------------------------------- rankings
def _cell_values(
    table: ResultsTable, row_dim: str, col_dim: str, mask: BoolArray
) -> list[list[FloatArray]]:
    """Objective values of the masked rows, split by (row_dim value, col_dim value)."""
    n_r, n_c = len(table.levels[row_dim]), len(table.levels[col_dim])
    flat = table.codes[row_dim] * n_c + table.codes[col_dim]
    idx = np.flatnonzero(mask)
    order = idx[np.argsort(flat[idx], kind="stable")]
    bounds = np.searchsorted(flat[order], np.arange(n_r * n_c + 1))
    vals = table.values[order]
    return [
        [vals[bounds[r * n_c + c] : bounds[r * n_c + c + 1]] for c in range(n_c)]
        for r in range(n_r)
    ]


def pattern_scores(
    table: ResultsTable,
    column: str,
    *,
    aggregation: str = "median",
    where: Mapping[str, str] | None = None,
) -> dict[str, float]:
    """Score of every value of ``column``: the aggregation of all its strategies' objectives.

    Args:
        table: The results.
        column: A factor or group column (e.g. ``"format_requirement"`` or ``"model"``).
        aggregation: One of :data:`AGGREGATIONS`.
        where: Optional ``{column: value}`` filter (e.g. ``{"model": "LLaMA3-8B"}``).

    Returns:
        Value -> score, in the column's order; ``NaN`` for a value without any objective.

    Example:
        >>> t = ResultsTable.from_records(
        ...     [{"fmt": "a", "td": "x", "kd": 0.1}, {"fmt": "a", "td": "y", "kd": 0.3},
        ...      {"fmt": "b", "td": "x", "kd": 0.2}],
        ...     factors=["fmt", "td"], objective="kd")
        >>> pattern_scores(t, "fmt", aggregation="max")
        {'a': 0.3, 'b': 0.2}
    """
    table.check_dimension(column, "column")
    check_aggregation(aggregation)
    mask = _row_mask(table, where)
    codes = table.codes[column]
    return {
        v: aggregate(table.values[mask & (codes == i)], aggregation)
        for i, v in enumerate(table.levels[column])
    }


def pattern_ranking(
    table: ResultsTable,
    column: str,
    *,
    aggregation: str = "median",
    where: Mapping[str, str] | None = None,
) -> list[tuple[str, float]]:
    """The values of ``column`` sorted by :func:`pattern_scores`, best first (``NaN`` last)."""
    scores = pattern_scores(table, column, aggregation=aggregation, where=where)
    return sorted(
        scores.items(), key=lambda kv: (math.isnan(kv[1]), -kv[1] if not math.isnan(kv[1]) else 0.0)
    )


# --------------------------------------------------------------------------- stability
@dataclass(frozen=True)
class Stability:
    """How stable the ranking of ``target``'s values is when ``changed`` changes.

    Attributes:
        target: The ranked dimension (e.g. ``"format_requirement"``).
        changed: The dimension whose value changes (e.g. ``"task"``).
        aggregation: How each value's scores were aggregated.
        labels: The values of ``changed`` (rows and columns of ``tau``).
        target_labels: The values of ``target`` (columns of ``scores``).
        scores: ``scores[i, j]``: aggregated score of ``target`` value ``j`` when
            ``changed`` is ``labels[i]``.
        tau: Kendall tau-b between the rankings of every two values of ``changed``
            (symmetric, 1 on the diagonal, ``NaN`` where undefined).
    """

    target: str
    changed: str
    aggregation: str
    labels: tuple[str, ...]
    target_labels: tuple[str, ...]
    scores: FloatArray = field(repr=False)
    tau: FloatArray = field(repr=False)

    @property
    def pair_taus(self) -> FloatArray:
        """Tau of every pair ``i < j`` in row-major order (``NaN`` where undefined)."""
        i, j = np.triu_indices(len(self.labels), k=1)
        out: FloatArray = self.tau[i, j]
        return out

    @property
    def mean_tau(self) -> float:
        """Mean tau over the defined pairs (``NaN`` if none): higher is more stable."""
        pairs = self.pair_taus
        pairs = pairs[np.isfinite(pairs)]
        return float(pairs.mean()) if pairs.size else math.nan

    def most_stable_pair(self) -> tuple[str, str, float] | None:
        """The pair of ``changed`` values whose rankings agree most."""
        return self._extreme_pair(max)

    def least_stable_pair(self) -> tuple[str, str, float] | None:
        """The pair of ``changed`` values whose rankings agree least."""
        return self._extreme_pair(min)

    def _extreme_pair(self, pick: Any) -> tuple[str, str, float] | None:
        i, j = np.triu_indices(len(self.labels), k=1)
        cand = [
            (self.labels[a], self.labels[b], float(self.tau[a, b]))
            for a, b in zip(i.tolist(), j.tolist(), strict=True)
            if np.isfinite(self.tau[a, b])
        ]
        return pick(cand, key=lambda c: c[2]) if cand else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable form."""
        return {
            "target": self.target,
            "changed": self.changed,
            "aggregation": self.aggregation,
            "labels": list(self.labels),
            "target_labels": list(self.target_labels),
            "mean_tau": _num(self.mean_tau),
            "tau": [[_num(v) for v in row] for row in self.tau.tolist()],
        }


def _num(v: float) -> float | None:
    return None if v is None or not math.isfinite(v) else round(float(v), 6)


def _tau_matrix(scores: FloatArray) -> FloatArray:
    k = scores.shape[0]
    tau = np.eye(k)
    for a in range(k):
        for b in range(a + 1, k):
            tau[a, b] = tau[b, a] = kendall_tau_b(scores[a], scores[b])
    return tau


def _stability_from_cells(
    table: ResultsTable,
    target: str,
    changed: str,
    aggregation: str,
    cells: list[list[FloatArray]],
) -> Stability:
    scores = np.array(
        [[aggregate(c, aggregation) for c in row] for row in cells], dtype=np.float64
    ).reshape(len(cells), len(table.levels[target]))
    return Stability(
        target=target,
        changed=changed,
        aggregation=aggregation,
        labels=table.levels[changed],
        target_labels=table.levels[target],
        scores=scores,
        tau=_tau_matrix(scores),
    )


def _check_pair(table: ResultsTable, target: str, changed: str) -> None:
    table.check_dimension(target, "target")
    table.check_dimension(changed, "changed")
    if target == changed:
        raise ValueError(f"`target` and `changed` must differ. Got {target!r} for both.")


def ranking_stability(
    table: ResultsTable,
    target: str,
    changed: str,
    *,
    aggregation: str = "median",
    where: Mapping[str, str] | None = None,
) -> Stability:
    """Kendall tau between rankings of ``target``'s values when ``changed`` changes.

    For every value ``c`` of ``changed``, each value of ``target`` gets the aggregation of
    all objectives of the rows with that ``target`` value and ``changed == c``, pooled over
    every other column (PrExMe Sec. 5, Fig. 5). Two values of ``changed`` are compared by
    Kendall tau-b between their score vectors; ``target`` values without a score on either
    side are left out of that pair.

    Args:
        table: The results.
        target: The ranked dimension (a factor or group column).
        changed: The dimension that changes (a factor or group column other than ``target``).
        aggregation: One of :data:`AGGREGATIONS`.
        where: Optional ``{column: value}`` filter applied first.

    Returns:
        A :class:`Stability`.

    Raises:
        ValueError: On an unknown or repeated column or an unknown aggregation.
    """
    _check_pair(table, target, changed)
    check_aggregation(aggregation)
    cells = _cell_values(table, changed, target, _row_mask(table, where))
    return _stability_from_cells(table, target, changed, aggregation, cells)


# --------------------------------------------------------------------------- aggregations
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
    mask = table.finite
    taus: dict[str, list[FloatArray]] = {a: [] for a in aggs}
    per_changed: dict[str, dict[str, float]] = {a: {} for a in aggs}
    weights: list[FloatArray] = []
    used = [d for d in dims if len(table.levels[d]) >= 2]
    for d in used:
        cells = _cell_values(table, d, target, mask)
        n_pairs = len(table.levels[d]) * (len(table.levels[d]) - 1) // 2
        weights.append(np.full(n_pairs, 1.0 / (n_pairs * len(used))))
        for a in aggs:
            st = _stability_from_cells(table, target, d, a, cells)
            taus[a].append(st.pair_taus)
            per_changed[a][d] = st.mean_tau
    stability = {a: _nanmean(list(per_changed[a].values())) for a in aggs}
    w = np.concatenate(weights) if weights else np.zeros(0)
    all_taus = {a: np.concatenate(taus[a]) if taus[a] else np.zeros(0) for a in aggs}
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(n_resamples, w.size))
    p = np.full((len(aggs), len(aggs)), np.nan)
    for i, a in enumerate(aggs):
        for j, b in enumerate(aggs):
            if i == j:
                continue
            p[i, j] = _sign_flip_p(all_taus[a] - all_taus[b], w, signs)
    return AggregationComparison(
        target=target,
        changed=tuple(used),
        aggregations=aggs,
        per_changed=per_changed,
        stability=stability,
        p_values=p,
        n_resamples=n_resamples,
    )


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
