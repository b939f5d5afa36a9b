"""Per-item glass-box features (:class:`FeatureResult`) and their correlation with human
scores (:func:`correlate_features`, :class:`FeatureCorrelations`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

__all__ = ["FeatureCorrelations", "FeatureResult", "correlate_features"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, eq=False)
class FeatureResult:
    """Per-item glass-box features.

    Attributes:
        features: The feature names, in the order asked for.
        ids: Record ids.
        group_ids: Record group ids (for group-level correlation).
        values: Feature name -> ``(n,)`` values (NaN where an item failed).
        human: Aspect -> ``(n,)`` human scores (NaN where a record has none).
        errors: Record id -> why its features are NaN.
        model: The backend's model.
        backend: The backend's name.
        seconds: Wall time.
        settings: The options used (for the record).
    """

    features: tuple[str, ...]
    ids: tuple[str, ...]
    group_ids: tuple[str | None, ...]
    values: dict[str, FloatArray]
    human: dict[str, FloatArray]
    errors: dict[str, str]
    model: str
    backend: str
    seconds: float
    settings: dict[str, Any] = field(default_factory=dict)

    def rows(self) -> list[dict[str, Any]]:
        """One dict per item: ``id``, ``group_id``, the features and the human scores."""
        out = []
        for i, rid in enumerate(self.ids):
            row: dict[str, Any] = {"id": rid, "group_id": self.group_ids[i]}
            row.update({f: _num(self.values[f][i]) for f in self.features})
            row["human"] = {a: _num(v[i]) for a, v in self.human.items()}
            if rid in self.errors:
                row["error"] = self.errors[rid]
            out.append(row)
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (JSON-ready)."""
        return {
            "model": self.model,
            "backend": self.backend,
            "features": list(self.features),
            "n_items": len(self.ids),
            "n_failed": len(self.errors),
            "seconds": round(self.seconds, 3),
            "settings": self.settings,
            "items": self.rows(),
        }


def _num(value: float) -> float | None:
    return None if not math.isfinite(float(value)) else float(value)


@dataclass(frozen=True)
class FeatureCorrelations:
    """Correlation of every feature with every human aspect.

    Attributes:
        values: ``values[feature][aspect][method]``; NaN when undefined (fewer than 3 items
            with both values, or a constant side).
        n_items: ``n_items[feature][aspect]``: items used.
        level: ``"dataset"`` or ``"group"``.
    """

    values: dict[str, dict[str, dict[str, float]]]
    n_items: dict[str, dict[str, int]]
    level: str

    def table(self, method: str = "spearman") -> str:
        """A text table: one row per feature, one column per aspect."""
        features = list(self.values)
        aspects = sorted({a for f in features for a in self.values[f]})
        width = max([len("feature"), *(len(f) for f in features)])
        head = "  ".join([f"{'feature':<{width}}", *(f"{a[:12]:>12}" for a in aspects)])
        lines = [f"{method} ({self.level} level)", head, "-" * len(head)]
        for f in features:
            cells = []
            for a in aspects:
                v = self.values[f].get(a, {}).get(method, float("nan"))
                cells.append(f"{v:>12.3f}" if math.isfinite(v) else f"{'n/a':>12}")
            lines.append("  ".join([f"{f:<{width}}", *cells]))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (NaN as ``None``)."""
        return {
            "level": self.level,
            "correlations": {
                f: {a: {m: _num(v) for m, v in ms.items()} for a, ms in aspects.items()}
                for f, aspects in self.values.items()
            },
            "n_items": self.n_items,
        }


def correlate_features(
    result: FeatureResult,
    *,
    aspects: Sequence[str] | None = None,
    methods: Sequence[str] = ("spearman", "kendall", "pearson"),
    level: Literal["dataset", "group"] = "dataset",
) -> FeatureCorrelations:
    """Correlate every feature of ``result`` with every human aspect.

    Uses :func:`judgeopt.metrics.correlation` over the items where both the feature and the
    human score are finite. Correlations are raw: a feature expected to fall with quality
    (Softmax-Ent, the ensemble variances) should correlate negatively.

    Args:
        result: From :func:`compute_features`.
        aspects: Aspects to use (default: all in ``result.human``).
        methods: Any of ``"spearman"``, ``"kendall"``, ``"pearson"``.
        level: ``"dataset"`` (one correlation over all items) or ``"group"`` (mean of
            within-group correlations, by ``group_id``).

    Returns:
        The :class:`FeatureCorrelations`.

    Raises:
        ValueError: On an unknown aspect, method or level.
    """
    from judgeopt.metrics import METHODS, correlation  # loads scipy.stats (slow): when used

    if level not in ("dataset", "group"):
        raise ValueError(f"The `level` argument must be 'dataset' or 'group'. Got {level!r}.")
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise ValueError(
            f"The `methods` argument must list methods from {sorted(METHODS)}. "
            f"Got {list(methods)!r} instead."
        )
    chosen = list(result.human) if aspects is None else list(aspects)
    unknown = [a for a in chosen if a not in result.human]
    if unknown:
        raise ValueError(f"Unknown aspect(s) {unknown}; the records have {sorted(result.human)}.")
    groups = np.array([g if g is not None else "" for g in result.group_ids], dtype=object)
    values: dict[str, dict[str, dict[str, float]]] = {}
    counts: dict[str, dict[str, int]] = {}
    for f in result.features:
        values[f], counts[f] = {}, {}
        for a in chosen:
            x, y = result.values[f], result.human[a]
            mask = np.isfinite(x) & np.isfinite(y)
            counts[f][a] = int(mask.sum())
            values[f][a] = {}
            for m in methods:
                try:
                    values[f][a][m] = correlation(
                        y[mask],
                        x[mask],
                        method=m,
                        groups=list(groups[mask]) if level == "group" else None,
                    )
                except ValueError:
                    values[f][a][m] = float("nan")
    return FeatureCorrelations(values, counts, level)
