"""What a selection rule returns: each finalist's confirmation and the choice among them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..metrics import PairedBootstrapResult


@dataclass(frozen=True)
class Finalist:
    """One strategy re-judged on the confirmation part.

    Attributes:
        key: The caller's identifier (e.g. the evaluation number).
        search_score: Its score on the search part.
        confirm_score: Its score on the confirmation part.
        gain: Paired comparison with the baseline on the confirmation part
            (``delta`` = finalist minus baseline, a two-sided interval).
        lower_bound: One-sided lower bound of the gain at the rule's ``confidence``.
        confirmed: ``lower_bound > 0``.
        error: Why the comparison is undefined (for example, a finalist that gave one rating
            to every item of every group cannot rank anything at group level), or ``None``.
            Such a finalist is not confirmed; its scores and bounds are NaN.
        upper_bound: One-sided upper bound of the gain at the rule's ``confidence`` (what
            :func:`veto` tests).
    """

    key: Any
    search_score: float
    confirm_score: float
    gain: PairedBootstrapResult
    lower_bound: float
    confirmed: bool
    error: str | None = None
    upper_bound: float = math.nan

    def to_dict(self, strategy: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Plain-data form (with the finalist's ``strategy`` when the caller gives it)."""
        out = {
            "key": self.key,
            "search_score": _num(self.search_score),
            "confirm_score": _num(self.confirm_score),
            "gain": _num(self.gain.delta),
            "gain_ci": [_num(self.gain.low), _num(self.gain.high)],
            "lower_bound": _num(self.lower_bound),
            "upper_bound": _num(self.upper_bound),
            "confirmed": self.confirmed,
            "error": self.error,
        }
        if strategy is not None:
            out.update(strategy=dict(strategy))
        return out


@dataclass(frozen=True)
class SelectionResult:
    """The outcome of :func:`choose`.

    Attributes:
        chosen: Index into the finalists, or ``None`` for the baseline.
        finalists: Every finalist's confirmation.
        baseline_score: The baseline's score on the confirmation part.
        confidence: The one-sided level used.
        reason: One sentence for the compile's summary.
    """

    chosen: int | None
    finalists: list[Finalist]
    baseline_score: float
    confidence: float
    reason: str = field(default="")

    def to_dict(self, strategies: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
        """Plain-data form; ``strategies`` (one per finalist, in order) adds each finalist's
        strategy."""
        each: list[Mapping[str, Any] | None] = list(strategies or ())
        each += [None] * (len(self.finalists) - len(each))
        return {
            "chosen": self.chosen,
            "baseline_score": _num(self.baseline_score),
            "confidence": self.confidence,
            "reason": self.reason,
            "finalists": [f.to_dict(s) for f, s in zip(self.finalists, each, strict=False)],
        }


def _num(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)
