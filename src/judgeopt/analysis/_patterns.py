"""Pattern statistics of a results table (PrExMe Sec. 5 and App. G-J).

* :func:`top_prompts`: the top ``fraction`` (2 %) of strategies of every setting, and the
  share of each pattern (factor value) among them.
* :func:`pattern_scores` / :func:`pattern_ranking`: a pattern's score is an aggregation
  (median, mean, max, ...) of every score of the strategies that use it.
* :func:`ranking_stability`: Kendall tau-b between the rankings of one dimension's values
  computed separately for every value of another dimension (a factor, the task, the model).

Which aggregation gives the most stable rankings is in ``_aggregation_comparison``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._aggregate import aggregate, check_aggregation, kendall_tau_b
from ._table import BoolArray, FloatArray, IntArray, ResultsTable

__all__ = [
    "Stability",
    "TopPrompts",
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
