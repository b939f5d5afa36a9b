"""A tidy results table: one row per strategy and group, with an objective column."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

__all__ = ["ResultsTable", "load_results"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

# Cells read as a missing objective (besides the empty cell).
_MISSING = {"", "nan", "na", "n/a", "none", "null"}


def _as_names(value: Sequence[str] | str, field_name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        raise ValueError(
            f"`{field_name}` must be a sequence of column names such as ['model', 'task'], "
            f"not the string {value!r}."
        )
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"`{field_name}` must hold non-empty column names. Got {name!r}.")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"`{field_name}` names a column more than once: {dup}.")
    return names


def _parse_number(cell: object, column: str, where: str) -> float:
    if cell is None:
        return math.nan
    if isinstance(cell, bool):
        raise ValueError(f"{where}: `{column}` must be a number or empty. Got {cell!r}.")
    if isinstance(cell, int | float):
        return float(cell)
    text = str(cell).strip()
    if text.lower() in _MISSING:
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{where}: `{column}` must be a number or empty. Got {text!r}.") from None


def _check_roles(
    factors: Sequence[str], group: Sequence[str], objective: str, n_column: str | None
) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, str]]:
    """The factor and group columns, and column -> its role (each column has one)."""
    factors_t = _as_names(factors, "factors")
    group_t = _as_names(group, "group")
    if not factors_t:
        raise ValueError("`factors` must name at least one column.")
    if not isinstance(objective, str) or not objective:
        raise ValueError(f"`objective` must be a column name. Got {objective!r}.")
    roles: dict[str, str] = {}
    for role, names in (
        ("factors", factors_t),
        ("group", group_t),
        ("objective", (objective,)),
        ("n_column", (n_column,) if n_column else ()),
    ):
        for name in names:
            if name in roles:
                raise ValueError(
                    f"Column {name!r} is given both as `{roles[name]}` and as `{role}`; "
                    "each column has one role."
                )
            roles[name] = role
    return factors_t, group_t, roles


def _read_rows(
    records: Iterable[Mapping[str, object]],
    roles: Mapping[str, str],
    group: tuple[str, ...],
    factors: tuple[str, ...],
    objective: str,
    n_column: str | None,
    source: str,
) -> tuple[dict[str, tuple[str, ...]], dict[str, IntArray], FloatArray, FloatArray | None]:
    """The levels, codes, objective values and item counts of ``records``."""
    dims = group + factors
    levels: dict[str, dict[str, int]] = {d: {} for d in dims}
    codes: dict[str, list[int]] = {d: [] for d in dims}
    values: list[float] = []
    sizes: list[float] = []
    seen: dict[tuple[str, ...], int] = {}
    needed = [*dims, objective, *([n_column] if n_column else [])]
    for i, row in enumerate(records):
        where = f"{source} row {i + 1}"
        missing = [c for c in needed if c not in row]
        if missing:
            role = roles[missing[0]]
            raise ValueError(
                f"The `{role}` column {missing[0]!r} is not in {source}. "
                f"Available columns: {sorted(map(str, row))!r}."
            )
        key = []
        for d in dims:
            raw = row[d]
            text = "" if raw is None else str(raw).strip()
            codes[d].append(levels[d].setdefault(text, len(levels[d])))
            key.append(text)
        tkey = tuple(key)
        if tkey in seen:
            strategy = dict(zip(factors, tkey[len(group) :], strict=True))
            setting = dict(zip(group, tkey[: len(group)], strict=True))
            raise ValueError(
                f"{where}: strategy {strategy} repeats in setting {setting} (first at row "
                f"{seen[tkey] + 1}); each (group, strategy) must appear once."
            )
        seen[tkey] = i
        values.append(_parse_number(row[objective], objective, where))
        if n_column:
            n = _parse_number(row[n_column], n_column, where)
            if not math.isnan(n) and n < 1:
                raise ValueError(f"{where}: `{n_column}` must be >= 1 or empty. Got {n}.")
            sizes.append(n)
    if not values:
        raise ValueError(f"{source} has no rows.")
    return (
        {d: tuple(levels[d]) for d in dims},
        {d: np.asarray(codes[d], dtype=np.intp) for d in dims},
        np.asarray(values, dtype=np.float64),
        np.asarray(sizes, dtype=np.float64) if n_column else None,
    )


@dataclass(frozen=True)
class ResultsTable:
    """A tidy results table: one row per (group, strategy) with an objective value.

    Build one with :func:`load_results` (CSV) or :meth:`from_records` (any mapping rows).
    Values of every *dimension* column (the group columns and the factors) are kept as
    strings, in order of first appearance. A missing objective (empty cell or ``nan``) is
    ``NaN`` in :attr:`values`; the analyses leave such rows out and report how many.

    Attributes:
        factors: The factor columns (the parts of a strategy, e.g. ``format_requirement``).
        objective: The metric column (higher is better).
        group: Columns whose values define one setting (e.g. ``model`` and ``task``).
        levels: Dimension column -> its values, in order of first appearance.
        codes: Dimension column -> for every row, the index of its value in ``levels``.
        values: The objective of every row (``NaN`` when missing).
        n_items: Per-row sample size (from ``n_column``), or ``None`` without one.
        n_column: The column ``n_items`` came from.
        source: Where the rows came from (a file name or ``"<records>"``).
    """

    factors: tuple[str, ...]
    objective: str
    group: tuple[str, ...]
    levels: Mapping[str, tuple[str, ...]] = field(repr=False)
    codes: Mapping[str, IntArray] = field(repr=False)
    values: FloatArray = field(repr=False)
    n_items: FloatArray | None = field(default=None, repr=False)
    n_column: str | None = None
    source: str = "<records>"

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_records(
        cls,
        records: Iterable[Mapping[str, object]],
        *,
        factors: Sequence[str],
        objective: str,
        group: Sequence[str] = (),
        n_column: str | None = None,
        source: str = "<records>",
    ) -> ResultsTable:
        """Build a table from row mappings (e.g. ``csv.DictReader`` rows or JSON objects).

        Args:
            records: One mapping per row; every named column must be a key of every row.
            factors: Factor columns (at least one).
            objective: Metric column; a number, or empty/``nan``/``None`` when missing.
            group: Columns whose values define one setting. ``()`` means one setting.
            n_column: Optional column with the number of items behind each value (for the
                Fisher-z approximation of significance clusters).
            source: A name for messages and the report.

        Returns:
            The table.

        Raises:
            ValueError: On an empty factor list, a column named twice or in two roles, a
                column missing from a row (the message lists the available columns), a
                non-numeric objective or ``n_column`` cell, a strategy repeated within a
                group, or no rows.

        Example:
            >>> t = ResultsTable.from_records(
            ...     [{"m": "A", "fmt": "labels", "kendall": "0.3"},
            ...      {"m": "A", "fmt": "0-100", "kendall": ""}],
            ...     factors=["fmt"], objective="kendall", group=["m"])
            >>> t.n_rows, t.n_missing
            (2, 1)
        """
        factors_t, group_t, roles = _check_roles(factors, group, objective, n_column)
        levels, codes, values, n_items = _read_rows(
            records, roles, group_t, factors_t, objective, n_column, source
        )
        return cls(
            factors=factors_t,
            objective=objective,
            group=group_t,
            levels=levels,
            codes=codes,
            values=values,
            n_items=n_items,
            n_column=n_column,
            source=source,
        )

    # ------------------------------------------------------------------ properties
    @property
    def dimensions(self) -> tuple[str, ...]:
        """The group columns followed by the factors."""
        return self.group + self.factors

    @property
    def n_rows(self) -> int:
        """Number of rows."""
        return int(self.values.size)

    @property
    def finite(self) -> BoolArray:
        """Mask of the rows with an objective value."""
        mask: BoolArray = np.isfinite(self.values)
        return mask

    @property
    def n_missing(self) -> int:
        """Number of rows without an objective value."""
        return int(self.n_rows - np.count_nonzero(self.finite))

    def check_dimension(self, column: str, role: str) -> str:
        """Return ``column`` if it is a group or factor column, else raise ``ValueError``."""
        if column not in self.levels:
            raise ValueError(
                f"`{role}` must be a group or factor column of the table, one of "
                f"{list(self.dimensions)!r}. Got {column!r}."
            )
        return column

    def value(self, column: str, row: int) -> str:
        """The value of dimension ``column`` in ``row``."""
        return self.levels[column][int(self.codes[column][row])]

    def setting_index(
        self, columns: Sequence[str] | None = None
    ) -> tuple[IntArray, list[tuple[str, ...]]]:
        """Row -> setting id for the combinations of ``columns`` (default: the group).

        Returns:
            ``(ids, keys)``: a setting id per row and the value tuple of every setting, in
            order of first appearance.
        """
        cols = self.group if columns is None else tuple(columns)
        for c in cols:
            self.check_dimension(c, "columns")
        if not cols:
            return np.zeros(self.n_rows, dtype=np.intp), [()]
        index: dict[tuple[int, ...], int] = {}
        ids = np.empty(self.n_rows, dtype=np.intp)
        stacked = np.stack([self.codes[c] for c in cols], axis=1)
        for r, key in enumerate(map(tuple, stacked.tolist())):
            ids[r] = index.setdefault(key, len(index))
        keys = [tuple(self.levels[c][k] for c, k in zip(cols, key, strict=True)) for key in index]
        return ids, keys

    def config(self, row: int, columns: Sequence[str] | None = None) -> dict[str, str]:
        """Column -> value of ``row`` for ``columns`` (default: the factors)."""
        cols = self.factors if columns is None else tuple(columns)
        return {c: self.value(c, row) for c in cols}

    def missing_by_setting(self) -> dict[str, int]:
        """Setting label (``"a / b"``) -> number of rows without an objective, when > 0."""
        ids, keys = self.setting_index()
        out: dict[str, int] = {}
        missing = ~self.finite
        for k, key in enumerate(keys):
            n = int(np.count_nonzero(missing & (ids == k)))
            if n:
                out[" / ".join(key) or "all"] = n
        return out


def load_results(
    path: str | Path,
    *,
    factors: Sequence[str],
    objective: str,
    group: Sequence[str] = (),
    n_column: str | None = None,
) -> ResultsTable:
    """Read a tidy results CSV (one row per strategy and group) into a :class:`ResultsTable`.

    Args:
        path: CSV file with a header row.
        factors: Factor columns, e.g. ``["base_prompt", "task_description",
            "format_requirement"]``.
        objective: Metric column (higher is better), e.g. ``"kendall"``. Empty cells and
            ``nan`` count as missing.
        group: Columns that define one setting, e.g. ``["model", "task"]``.
        n_column: Optional column with the number of items behind each value.

    Returns:
        The table.

    Raises:
        ValueError: If the file does not exist or has no header, or as
            :meth:`ResultsTable.from_records`; an unknown column is reported with the list
            of the file's columns.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"Results CSV not found: {path}")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = list(reader.fieldnames or [])
        if not header:
            raise ValueError(f"{path.name} has no header row.")
        for role, names in (
            ("factors", _as_names(factors, "factors")),
            ("group", _as_names(group, "group")),
            ("objective", (objective,)),
            ("n_column", (n_column,) if n_column else ()),
        ):
            for name in names:
                if name not in header:
                    raise ValueError(
                        f"The `{role}` column {name!r} is not in {path.name}. "
                        f"Available columns: {header!r}."
                    )
        return ResultsTable.from_records(
            reader,
            factors=factors,
            objective=objective,
            group=group,
            n_column=n_column,
            source=path.name,
        )
