"""Per-item judge and human scores of strategies (:class:`ItemScores`, :func:`load_items`).

They feed the paired permute-input test of the significance clusters.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ._table import FloatArray, _parse_number

__all__ = ["ITEM_COLUMNS", "ItemScores", "load_items"]

ITEM_COLUMNS: tuple[str, str, str] = ("id", "judge_score", "human_score")
"""Default item id, judge score and human score columns of an items file, as the per-item
JSONL of ``judgeopt grid`` writes them."""


@dataclass(frozen=True)
class ItemScores:
    """Per-item judge and human scores of strategies, for the permute-input test.

    Attributes:
        columns: The key columns (the results table's group columns and factors).
        entries: Key (values of ``columns``) -> ``(item ids, judge scores, human scores)``;
            a judge score is ``NaN`` when it could not be extracted.
        source: Where the rows came from.
    """

    columns: tuple[str, ...]
    entries: Mapping[tuple[str, ...], tuple[tuple[str, ...], FloatArray, FloatArray]] = field(
        repr=False
    )
    source: str = "<records>"

    @classmethod
    def from_records(
        cls,
        records: Iterable[Mapping[str, object]],
        *,
        columns: Sequence[str],
        item_column: str = ITEM_COLUMNS[0],
        judge_column: str = ITEM_COLUMNS[1],
        human_column: str = ITEM_COLUMNS[2],
        source: str = "<records>",
    ) -> ItemScores:
        """Build from rows holding the key columns, an item id, a judge and a human score.

        Args:
            records: One mapping per (strategy, item).
            columns: Key columns, e.g. ``["model", "task", "base_prompt", ...]``.
            item_column: Item id column.
            judge_column: Judge score column; empty or ``nan`` means no score extracted.
            human_column: Human score column (required on every row).
            source: A name for messages.

        Raises:
            ValueError: On a missing column (the available ones are listed), a non-numeric
                score, a missing human score, or an item repeated for one key.
        """
        cols = tuple(columns)
        needed = [*cols, item_column, judge_column, human_column]
        raw: dict[tuple[str, ...], tuple[list[str], list[float], list[float]]] = {}
        seen: set[tuple[tuple[str, ...], str]] = set()
        for i, row in enumerate(records):
            where = f"{source} row {i + 1}"
            missing = [c for c in needed if c not in row]
            if missing:
                raise ValueError(
                    f"Column {missing[0]!r} is not in {source}. Item rows need the key columns "
                    f"{list(cols)!r} and {item_column!r}, {judge_column!r}, {human_column!r}. "
                    f"Available columns: {sorted(map(str, row))!r}."
                )
            key = tuple("" if row[c] is None else str(row[c]).strip() for c in cols)
            item = str(row[item_column]).strip()
            if (key, item) in seen:
                raise ValueError(
                    f"{where}: item {item!r} repeats for {dict(zip(cols, key, strict=True))}."
                )
            seen.add((key, item))
            human = _parse_number(row[human_column], human_column, where)
            if not math.isfinite(human):
                raise ValueError(f"{where}: `{human_column}` must be a finite number.")
            ids, judge, hum = raw.setdefault(key, ([], [], []))
            ids.append(item)
            judge.append(_parse_number(row[judge_column], judge_column, where))
            hum.append(human)
        if not raw:
            raise ValueError(f"{source} has no item rows.")
        entries = {
            k: (tuple(ids), np.asarray(j, dtype=np.float64), np.asarray(h, dtype=np.float64))
            for k, (ids, j, h) in raw.items()
        }
        return cls(columns=cols, entries=entries, source=source)

    def get(self, key: Mapping[str, str]) -> tuple[tuple[str, ...], FloatArray, FloatArray] | None:
        """The item scores of the strategy with ``key`` (column -> value), or ``None``."""
        return self.entries.get(tuple(key.get(c, "") for c in self.columns))


def load_items(
    path: str | Path,
    *,
    columns: Sequence[str],
    item_column: str = ITEM_COLUMNS[0],
    judge_column: str = ITEM_COLUMNS[1],
    human_column: str = ITEM_COLUMNS[2],
) -> ItemScores:
    """Read per-item scores from a CSV (``*.csv``) or JSON Lines file (anything else).

    Every row holds the key ``columns`` (e.g. ``model``, ``task`` and the factors), an item
    id, the judge's score and the human score. See :meth:`ItemScores.from_records`.

    Raises:
        ValueError: If the file is missing or malformed, or as
            :meth:`ItemScores.from_records`.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"Item scores file not found: {path}")
    kw: dict[str, Any] = dict(
        columns=columns,
        item_column=item_column,
        judge_column=judge_column,
        human_column=human_column,
        source=path.name,
    )
    with path.open(newline="", encoding="utf-8") as fh:
        if path.suffix.lower() == ".csv":
            return ItemScores.from_records(csv.DictReader(fh), **kw)
        rows = []
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path.name} line {n}: not valid JSON ({e}).") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path.name} line {n}: expected a JSON object.")
            rows.append(obj)
        return ItemScores.from_records(rows, **kw)
