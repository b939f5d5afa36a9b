"""The prior default: what the compile returns instead of the baseline when its rule keeps
the baseline (``[selection] prior``, ``docs/judge.md``, "The prior default").

A rule keeps the baseline when the labels cannot confirm any strategy. With ~100 labels that
is often, and the baseline (the MT-Bench prompt) is then returned although another strategy
may be better for this model on most tasks. A *prior default* is such a strategy, chosen
without these labels (on the same model's judgement bank, leave one task out), given as its
change from the baseline. Since it was not chosen on these items, its comparison with the
baseline on them is an unbiased estimate; with ``prior_veto`` (default) the compile keeps the
baseline after all when that comparison refutes the prior (one-sided upper bound of the gain
at ``confidence`` below zero, :func:`judgeopt.selection.veto`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..evaluate import EvalResult
from ..selection import SelectionConfig, SelectionResult, veto
from ._journal import strategy_key

__all__ = ["PriorFallback", "PriorRecord", "prior_fallback"]


@dataclass
class PriorRecord:
    """The selection record's ``prior_fallback``, filled in as the prior default is tried.

    Attributes:
        change: The prior default's factor values that differ from the baseline's.
        strategy: Its whole strategy (``None`` when it does not fit the space).
        returned: Whether the compile returns it.
        reason: Why (or why not).
        gain: The paired gain over the baseline, when compared.
        interval: The gain's 95 % interval, when compared.
        upper_bound: The gain's one-sided upper bound at ``confidence``, when compared.
    """

    change: dict[str, Any]
    strategy: dict[str, Any] | None = None
    returned: bool = False
    reason: str | None = None
    gain: float | None = None
    interval: list[float] | None = None
    upper_bound: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form: ``change``, ``strategy``, ``returned``, then each of the
        other fields that was set."""
        out: dict[str, Any] = {
            "change": self.change,
            "strategy": self.strategy,
            "returned": self.returned,
        }
        for name in ("reason", "gain", "interval", "upper_bound"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out


@dataclass(frozen=True)
class PriorFallback:
    """What :func:`prior_fallback` decided.

    Attributes:
        program: The prior default's judge to return, or ``None`` (the baseline stays).
        record: The selection record's ``prior_fallback`` (its ``prior`` is the setting).
        message: The compile's message.
    """

    program: Any | None
    record: PriorRecord
    message: str


def prior_fallback(
    sel: SelectionConfig,
    change: Mapping[str, Any],
    baseline: Any,
    *,
    judged: Callable[[Any, str], EvalResult],
    vector: Callable[[EvalResult], list[float]],
    humans: Sequence[Any],
    groups: Sequence[Any] | None,
    metric: str,
    split: str,
    forbid: Sequence[Mapping[str, Any]] = (),
) -> PriorFallback:
    """The prior default ``change`` in place of ``baseline``, judged on the items the
    rule compared on (``split``), unless it does not fit the compile's factor space or,
    with ``sel.prior_veto``, those items refute it.

    Args:
        sel: The selection settings (``prior_veto``, ``confidence``, ``n_resamples``,
            ``seed``).
        change: The prior default (:meth:`SelectionConfig.prior_for`): factor values that
            differ from the baseline's.
        baseline: The baseline's judge.
        judged: Judges a program on the ``split`` items (reusing stored judgements).
        vector: A result's predictions in the items' order (what the metric compares).
        humans: The human scores (or pairwise labels) of those items.
        groups: Their groups at group level, else ``None``.
        metric: What is compared.
        split: The items' name in messages (``"confirmation"``, ``"validation"``).
        forbid: The optimizer's forbidden combinations: a prior that matches one is not used.
    """
    change = dict(change)
    record = PriorRecord(change)
    program = _prior_program(baseline, change, forbid, record)
    if isinstance(program, PriorFallback):
        return program
    res = judged(program, f"{split}: prior default")
    if not sel.prior_veto:
        record.returned, record.reason = True, "returned without a comparison (prior_veto off)"
        return PriorFallback(
            program,
            record,
            f"selection: the rule kept the baseline; the prior default {change} is returned "
            "instead (chosen on this model's judgement bank, not on these labels)",
        )
    try:
        result = veto(
            humans,
            vector(judged(baseline, f"{split}: baseline")),
            vector(res),
            key="prior default",
            method=metric,
            groups=groups,
            confidence=sel.confidence,
            n_resamples=sel.n_resamples,
            seed=sel.seed,
        )
    except ValueError as e:
        reason = f"it cannot be compared with the baseline on the {split} items ({e})"
        return _not_used(change, record, reason)
    return _verdict(sel, change, program, record, result, len(humans), split)


def _not_used(change: dict[str, Any], record: PriorRecord, reason: str) -> PriorFallback:
    """The baseline stays: the prior default is not used, for ``reason``."""
    record.reason = reason
    return PriorFallback(
        None, record, f"selection: the prior default {change} is not used: {reason}"
    )


def _prior_program(
    baseline: Any,
    change: dict[str, Any],
    forbid: Sequence[Mapping[str, Any]],
    record: PriorRecord,
) -> Any:
    """The prior default's judge, or the :class:`PriorFallback` that keeps the baseline when
    it does not fit the space, is forbidden or is the baseline."""
    try:
        program = baseline.with_strategy({**baseline.strategy.as_dict(), **change})
    except (ValueError, KeyError) as e:
        return _not_used(change, record, f"it does not fit this compile's factor space ({e})")
    strategy = record.strategy = program.strategy.as_dict()
    hit = next((f for f in forbid if all(strategy.get(k) == v for k, v in f.items())), None)
    if hit is not None:
        return _not_used(change, record, f"it is a forbidden combination ({dict(hit)})")
    if strategy_key(program.strategy) == strategy_key(baseline.strategy):
        record.reason = "it is the baseline"
        return PriorFallback(None, record, f"selection: the prior default {change} is the baseline")
    return program


def _verdict(
    sel: SelectionConfig,
    change: dict[str, Any],
    program: Any,
    record: PriorRecord,
    result: SelectionResult,
    n_items: int,
    split: str,
) -> PriorFallback:
    """The prior default unless :func:`veto`'s ``result`` on the ``split`` items refutes it."""
    f = result.finalists[0]
    if f.error is not None:
        reason = f"it cannot be compared with the baseline on the {split} items ({f.error})"
        return _not_used(change, record, reason)
    record.gain, record.interval = f.gain.delta, [f.gain.low, f.gain.high]
    record.upper_bound = f.upper_bound
    told = (
        f"gain {f.gain.delta:+.3f} over the baseline on the {n_items} {split} items "
        f"(95 % interval {f.gain.low:+.3f} to {f.gain.high:+.3f}; one-sided "
        f"{sel.confidence:.0%} upper bound {f.upper_bound:+.3f})"
    )
    if result.chosen is None:
        record.reason = f"vetoed: {told} < 0"
        return PriorFallback(
            None,
            record,
            f"selection: the prior default {change} was vetoed by these labels: {told} < 0; "
            "the baseline is kept",
        )
    record.returned, record.reason = True, f"not vetoed: {told} >= 0"
    return PriorFallback(
        program,
        record,
        f"selection: the rule kept the baseline; the prior default {change} (chosen on this "
        f"model's judgement bank, not on these labels) is returned instead: {told}, not "
        "refuted",
    )
