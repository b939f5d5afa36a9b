"""Aggregations of a pattern's scores, and Kendall tau-b between two score vectors."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ._table import FloatArray

__all__ = ["AGGREGATIONS", "aggregate", "kendall_tau_b"]

# NOTE: PrExMe (Sec. 5, App. G) ranks a pattern by aggregating every score of the prompts that
# use it, and compares median, mean, "top 10 %" (its code takes the 90th percentile), max,
# min, standard deviation and saturation. q75 is added as a milder upper quantile.
_FUNCS: dict[str, Callable[[FloatArray], float]] = {
    "median": lambda v: float(np.median(v)),
    "mean": lambda v: float(np.mean(v)),
    "max": lambda v: float(np.max(v)),
    "min": lambda v: float(np.min(v)),
    "q75": lambda v: float(np.quantile(v, 0.75)),
    "q90": lambda v: float(np.quantile(v, 0.90)),
    "std": lambda v: float(np.std(v)),
    # Mizrahi et al. (2024) as PrExMe implements it: (1 - (max - mean)) * max.
    "saturation": lambda v: float((1.0 - (np.max(v) - np.mean(v))) * np.max(v)),
}

AGGREGATIONS: tuple[str, ...] = tuple(_FUNCS)
"""Names accepted wherever an aggregation is asked for, in PrExMe's order plus ``q75``."""


def check_aggregation(name: str, field_name: str = "aggregation") -> str:
    """Return ``name`` if it is a known aggregation, else raise ``ValueError``."""
    if name not in _FUNCS:
        raise ValueError(
            f"The `{field_name}` must be one of {list(AGGREGATIONS)!r}. Got {name!r} instead."
        )
    return name


def aggregate(values: FloatArray | list[float], how: str = "median") -> float:
    """Aggregate the finite entries of ``values`` with the aggregation ``how``.

    Args:
        values: Scores; ``NaN`` entries are ignored.
        how: One of :data:`AGGREGATIONS`.

    Returns:
        The aggregate, or ``NaN`` when no value is finite.

    Raises:
        ValueError: On an unknown aggregation.

    Example:
        >>> aggregate([0.1, 0.4, float("nan"), 0.2], "median")
        0.2
    """
    func = _FUNCS[check_aggregation(how)]
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        return math.nan
    return func(arr)


def kendall_tau_b(x: FloatArray | list[float], y: FloatArray | list[float]) -> float:
    """Kendall tau-b of two equally long vectors (equal to ``scipy.stats.kendalltau``).

    Pairs with a ``NaN`` on either side are dropped first. Returns ``NaN`` (never a warning)
    when fewer than two pairs remain or a side is constant.

    Example:
        >>> kendall_tau_b([1, 2, 3], [1, 3, 2])
        0.3333333333333333
    """
    a = np.asarray(x, dtype=np.float64)
    b = np.asarray(y, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"x and y must be 1-D and equally long; got {a.shape} and {b.shape}.")
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    n = a.size
    if n < 2:
        return math.nan
    i, j = np.triu_indices(n, k=1)
    da = np.sign(a[j] - a[i])
    db = np.sign(b[j] - b[i])
    n_pairs = da.size
    untied_a = n_pairs - int(np.count_nonzero(da == 0))
    untied_b = n_pairs - int(np.count_nonzero(db == 0))
    if untied_a == 0 or untied_b == 0:
        return math.nan
    tau = float(np.sum(da * db)) / math.sqrt(float(untied_a) * float(untied_b))
    return min(1.0, max(-1.0, tau))
