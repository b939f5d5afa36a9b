"""Number formatting shared by the findings, the JSON form and the markdown report."""

from __future__ import annotations

import math
from typing import Any


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:.1f}%"


def _f(x: float | None, digits: int = 4) -> str:
    return "n/a" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 6)


def _p(x: float) -> str:
    if not math.isfinite(x):
        return "n/a"
    return "< 0.001" if x < 0.001 else f"{x:.3f}"


def _round_tree(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _round_tree(v) for k, v in obj.items()}
    if isinstance(obj, float):
        return _num(obj)
    return obj
