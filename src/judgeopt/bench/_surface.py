"""Loading complete objective surfaces from a tidy CSV table."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..search import FactorSpace, Strategy, read_csv_rows


@dataclass(frozen=True)
class Surface:
    """One complete surface: every strategy of ``space`` with its objective value.

    Attributes:
        name: The group's values joined by ``/`` (e.g. ``"LLaMA3-8B/en_de"``).
        space: The factor space (values in order of first appearance in the CSV).
        values: Strategy -> objective; missing cells already replaced by the surface's worst.
        n_missing: How many cells were missing.
        group: The group columns and their values for this surface (e.g.
            ``{"model": "LLaMA3-8B", "task": "en_de"}``).
    """

    name: str
    space: FactorSpace
    values: dict[Strategy, float] = field(repr=False)
    n_missing: int = 0
    group: dict[str, str] = field(default_factory=dict)

    @property
    def max(self) -> float:
        """The best value of the surface."""
        return max(self.values.values())

    @property
    def median(self) -> float:
        """The median value of the surface."""
        return float(np.median(list(self.values.values())))

    @property
    def top1_threshold(self) -> float:
        """Value of the ``max(1, floor(N / 100))``-th best strategy (the top 1 % cut-off)."""
        ranked = sorted(self.values.values(), reverse=True)
        return ranked[max(1, len(ranked) // 100) - 1]

    def __call__(self, strategy: Strategy) -> float:
        """The recorded objective of ``strategy``."""
        return self.values[strategy]


def load_surfaces(
    path: str | Path,
    *,
    group: Sequence[str],
    factors: Sequence[str],
    objective: str,
) -> list[Surface]:
    """Read surfaces from a CSV with one row per (group, strategy).

    Args:
        path: CSV file with a header row.
        group: Columns whose values identify one surface (e.g. ``["model", "task"]``).
        factors: Columns holding the factor values of a strategy.
        objective: Column with the objective (higher is better). Empty cells count as the
            surface's worst value.

    Returns:
        The surfaces, in order of first appearance.

    Raises:
        ValueError: On a missing column, a non-numeric objective, a duplicated strategy, or
            a surface that does not hold every strategy of the factor space.
    """
    path = Path(path)
    rows = read_csv_rows(path, [*group, *factors, objective], "Surface CSV")
    if not factors:
        raise ValueError("`factors` must name at least one column.")
    values: dict[str, list[str]] = {f: [] for f in factors}
    for row in rows:
        for f in factors:
            if row[f] not in values[f]:
                values[f].append(row[f])
    space = FactorSpace(values)
    groups: dict[tuple[str, ...], dict[Strategy, float]] = {}
    for line, row in enumerate(rows, start=2):
        gkey = tuple(row[g] for g in group)
        s = space.strategy({f: row[f] for f in factors})
        cell = (row[objective] or "").strip()
        try:
            v = float(cell) if cell else math.nan
        except ValueError:
            raise ValueError(
                f"{path.name} line {line}: `{objective}` must be a number or empty. Got {cell!r}."
            ) from None
        table = groups.setdefault(gkey, {})
        if s in table:
            raise ValueError(f"{path.name} line {line}: strategy {s} repeats in group {gkey}.")
        table[s] = v
    out = []
    for gkey, table in groups.items():
        name = "/".join(gkey) if gkey else path.stem
        if len(table) != space.size:
            raise ValueError(
                f"Surface {name!r} has {len(table)} strategies; the factor space has "
                f"{space.size}. Every group must hold every strategy."
            )
        finite = [v for v in table.values() if not math.isnan(v)]
        if not finite:
            raise ValueError(f"Surface {name!r} has no objective value at all.")
        worst = min(finite)
        n_missing = sum(math.isnan(v) for v in table.values())
        filled = {s: (worst if math.isnan(v) else v) for s, v in table.items()}
        out.append(Surface(name, space, filled, n_missing, dict(zip(group, gkey, strict=True))))
    return out
