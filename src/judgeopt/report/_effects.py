"""What the report computes from an exported judge: factor effects, the baseline's strategy and
score, the scales of the scatter, and the formatting of a value that may be missing."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

import numpy as np

__all__ = [
    "baseline_score",
    "baseline_strategy_of",
    "factor_effects",
    "finite",
    "fmt",
    "human_range",
    "rating_range",
]


def finite(x: Any) -> TypeGuard[float]:
    """Whether ``x`` is a finite number (not ``None``, a bool or NaN)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def fmt(x: Any, missing: str = "\u2013", signed: bool = False) -> str:
    """A number with 3 decimals (integers as they are), ``missing`` for ``None``/NaN."""
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int):
        return str(x)
    if finite(x):
        return f"{x:+.3f}" if signed else f"{x:.3f}"
    if x is None or isinstance(x, float):
        return missing
    return str(x)


def factor_effects(trace: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each factor value's mean score over the evaluations that use it, with a 95 % interval.

    Returns:
        factor -> ``[{"value", "n", "mean", "lo", "hi"}]`` in first-seen order; ``lo``/``hi``
        are ``None`` for a value seen once. Failed evaluations (no score) are left out.
    """
    scores: dict[str, dict[str, list[float]]] = {}
    for t in trace:
        score = t.get("score")
        if not finite(score):
            continue
        for factor, value in (t.get("strategy") or {}).items():
            scores.setdefault(factor, {}).setdefault(str(value), []).append(float(score))
    out: dict[str, list[dict[str, Any]]] = {}
    for factor, by_value in scores.items():
        rows = []
        for value, xs in by_value.items():
            arr = np.asarray(xs)
            mean = float(arr.mean())
            half = 1.96 * float(arr.std(ddof=1)) / math.sqrt(len(arr)) if len(arr) > 1 else None
            rows.append(
                {
                    "value": value,
                    "n": len(arr),
                    "mean": mean,
                    "lo": None if half is None else mean - half,
                    "hi": None if half is None else mean + half,
                }
            )
        out[factor] = rows
    return out


def baseline_strategy_of(data: Mapping[str, Any]) -> dict[str, Any] | None:
    """The baseline's strategy of the exported judge's task (``None``: the task is unreadable)."""
    from ..judge import JudgeTask, baseline_strategy  # lazy: judgeopt.judge loads DSPy

    try:
        task = JudgeTask.from_dict(data["task"])
        return dict(baseline_strategy(task).as_dict())
    except (KeyError, TypeError, ValueError):
        return None


def baseline_score(data: Mapping[str, Any], trace: Sequence[Mapping[str, Any]]) -> float | None:
    """The search score of the baseline's strategy, if the search evaluated it."""
    base = baseline_strategy_of(data)
    if base is None:
        return None
    for t in trace:
        strategy = t.get("strategy") or {}
        if all(strategy.get(k) == v for k, v in base.items() if k in strategy) and finite(
            t.get("score")
        ):
            return float(t["score"])
    return None


def rating_range(data: Mapping[str, Any]) -> tuple[float, float] | None:
    """The judge's rating scale (``scoring.rating_min`` .. ``rating_max``)."""
    scoring = data.get("scoring") or {}
    lo, hi = scoring.get("rating_min"), scoring.get("rating_max")
    if finite(lo) and finite(hi) and hi > lo:
        return float(lo), float(hi)
    return None


def human_range(data: Mapping[str, Any]) -> tuple[float, float] | None:
    """The human scores' range: the aspect's ``score_range``, else the task's."""
    task = data.get("task") or {}
    aspect = (task.get("aspects") or {}).get(data.get("aspect")) or {}
    for source in (aspect, task):
        rng = source.get("score_range") if isinstance(source, Mapping) else None
        if rng and len(rng) == 2 and finite(rng[0]) and finite(rng[1]) and rng[1] > rng[0]:
            return float(rng[0]), float(rng[1])
    return None
