"""The cross-fitted guard of a compile (``SelectionConfig.guard``, ``judgeopt compile --guard``).

Rule ``best`` and the prompt ensemble (``--ensemble``, anchored or not) are chosen on the same
items they are then scored on, so their validation gain over the baseline is biased upward by
the choice. The guard asks the same rule twice more, on each half of those items (whole
groups, stratified by the human score, seeded), and scores each half's pick against the
baseline on the half it did not see (:func:`judgeopt.selection.crossfit_gain`). Unless that
cross-fitted gain is above ``guard_margin`` (0 by default) the compile builds no ensemble
and, under rule ``best``, returns the baseline: the compile's form of the ``ensemble+guard``
and ``anchored+guard`` rules the judgement bank replays (``docs/judge.md``, "The
cross-fitted guard").

It reads the stored judgements only (:func:`~judgeopt.teleprompt._pooling.validation_table`):
no judge call, except for the baseline if the search never judged it on those items.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..selection import (
    Pick,
    RuleInput,
    SelectionConfig,
    anchored_rule,
    best_rule,
    crossfit_gain,
    ensemble_rule,
    stack_rule,
)
from ._pooling import ValidationTable

__all__ = [
    "GUARD_FRACTION",
    "GUARD_REGISTERED_ITEMS",
    "GuardCheck",
    "few_labels_caution",
    "run_guard",
]

#: The share of the items in the first half of the cross-fit (as the bank's replay splits).
GUARD_FRACTION = 0.5

#: The number of labelled items the default compile's guard (its fixed margin) was
#: pre-registered and tested at (``benchmarks/default_prereg.json``). Below it the compile
#: still runs the guard, and says that its safety was not shown there.
GUARD_REGISTERED_ITEMS = 100


def few_labels_caution(
    sel: SelectionConfig, *, n_items: int, ensemble: int, rule: str
) -> str | None:
    """The compile's caution when its guard will decide on fewer labelled items than it was
    registered for (``None``: no guard runs, or enough items).

    Replayed on the judgement bank's seven pairs at 50 labelled items, the default compile
    (its guarded stack at margin 0.1) was worse than the baseline in 13.5 % of one pair's
    splits, against 7.0 % at 100 (``benchmarks/results/bank_fixed_seven.json``); ``lcb``
    stayed at or below 7 % on every pair at 40 and 50 (``bank_rules.json``).
    """
    if not sel.guard or n_items >= GUARD_REGISTERED_ITEMS:
        return None
    if not ensemble and rule != "best":  # the guard checks rule best and ensembles only
        return None
    return (
        f"selection: the guard decides on {n_items} labelled items; its margin "
        f"({sel.guard_margin:g}) was registered for {GUARD_REGISTERED_ITEMS} or more. On the "
        f"judgement bank at 50 labels the default compile was worse than the baseline in "
        f"13.5 % of one task's splits (7.0 % at 100); with fewer than "
        f"{GUARD_REGISTERED_ITEMS} labels `--selection lcb` is the safer rule (docs/judge.md, "
        f'"How many labels you need")'
    )


@dataclass(frozen=True)
class GuardCheck:
    """What :func:`run_guard` found.

    Attributes:
        passed: Whether the compile keeps what its rule chose (``True`` also when the guard
            had nothing to check).
        message: The compile's message (what was checked, the cross-fitted gain).
        record: The selection record's ``guard`` entry: ``checked`` (``"ensemble"``,
            ``"best"`` or ``None``), ``crossfit_gain``, ``items``, ``candidates``,
            ``margin``, ``passed``.
    """

    passed: bool
    message: str
    record: dict[str, Any] = field(default_factory=dict)
    #: ``frugal``: the ensemble passed, and rule best's single judge did as well: the
    #: compile ships the single judge and builds no ensemble.
    single: bool = False
    #: ``frugal``'s message (``None``: it did not run).
    frugal_message: str | None = None
    #: :func:`few_labels_caution`'s message when the guard let the choice through on fewer
    #: labelled items than it was registered for (the record then says ``few_labels``).
    caution: str | None = None


def _rule(
    ensemble: int, anchor: float, stack: float = 0.0
) -> tuple[Callable[[RuleInput], Pick], str]:
    """The replay's rule for what the compile chose, and how to name it."""
    if ensemble and stack:
        return (
            lambda d: stack_rule(d, ridge=stack, m=ensemble, nonneg=True),
            f"the stacked ensemble of the baseline and the {ensemble} best others",
        )
    if ensemble and anchor:
        return (
            lambda d: anchored_rule(d, m=ensemble, w=anchor),
            f"the ensemble of the baseline at {anchor:g} and the {ensemble} best others",
        )
    if ensemble:
        return lambda d: ensemble_rule(d, m=ensemble), f"the ensemble of the {ensemble} best"
    return best_rule, "the best validation score"


def _unchecked(checked: str | None, rule: str, metric: str) -> GuardCheck | None:
    """The guard's answer when it has nothing to check, or cannot check it (``None``: it
    runs)."""
    if checked is None:
        why = (
            "rule best kept the baseline"
            if rule == "best"
            else f"rule {rule} does not choose on the items it is scored on"
        )
        return GuardCheck(
            True,
            f"selection: the guard had nothing to check ({why}; it checks rule best and ensembles)",
            {"checked": None},
        )
    if metric != "spearman":
        return GuardCheck(
            True,
            f"selection: the guard compares Spearman correlations of ratings and this "
            f"compile's metric is {metric}; it was not run",
            {"checked": None},
        )
    return None


def run_guard(
    sel: SelectionConfig,
    table: Callable[[], ValidationTable],
    *,
    n_items: int,
    ensemble: int,
    anchor: float,
    stack: float = 0.0,
    rule: str,
    chose_baseline: bool,
    metric: str,
) -> GuardCheck:
    """Cross-fit what the compile chose on the items the search scored on.

    Args:
        sel: The selection settings (``seed`` of the halves, ``guard_margin``).
        table: Builds the :class:`~judgeopt.teleprompt._pooling.ValidationTable` of those
            items (called only when there is something to check).
        n_items: How many items the search scored on.
        ensemble: The ensemble's size (0: none is built).
        anchor: The baseline's weight in it (0: none).
        stack: Its ridge penalty per item when its weights are fitted (0: not stacked).
        rule: The rule that chose the single judge (the guard checks it when it is
            ``"best"`` and no ensemble is built).
        chose_baseline: Whether that rule kept the baseline.
        metric: The compile's metric (the guard compares Spearman correlations).
    """
    checked = "ensemble" if ensemble else "best" if rule == "best" and not chose_baseline else None
    unchecked = _unchecked(checked, rule, metric)
    if unchecked is not None:
        return unchecked
    fn, what = _rule(ensemble, anchor, stack)
    refuted = "selection: the guard refuted the choice (no ensemble" + (
        "; the baseline is returned): " if rule == "best" else "): "
    )
    if n_items * GUARD_FRACTION < sel.min_confirm_items:
        # Halves of a few items give cross-fitted gains of +-1: no evidence either way, and
        # a guard that cannot check does not vouch.
        return GuardCheck(
            False,
            f"{refuted}{what} cannot be cross-fitted on {n_items} items (halves of "
            f"{n_items * GUARD_FRACTION:g} items, below min_confirm_items="
            f"{sel.min_confirm_items})",
            {"checked": checked, "crossfit_gain": None, "items": n_items, "passed": False},
        )
    built = table()
    margin = sel.guard_margin
    record: dict[str, Any] = {
        "checked": checked,
        "crossfit_gain": None,
        "items": n_items,
        "candidates": len(built.programs),
        "margin": margin,
        "passed": False,
    }
    told = f"{what}, chosen on each half of the {n_items} items the search scored on,"
    try:
        gain = float(crossfit_gain(built.data, fn, fraction=GUARD_FRACTION))
    except ValueError as e:  # too few groups to split in two
        return GuardCheck(False, f"{refuted}{told} could not be cross-fitted ({e})", record)
    if not math.isfinite(gain):  # a half whose ratings or labels did not vary
        return GuardCheck(False, f"{refuted}{told} has no cross-fitted gain", record)
    told += f" gained {gain:+.3f} over the baseline on the other half"
    record |= {"crossfit_gain": gain, "passed": gain > margin}
    if not gain > margin:
        return GuardCheck(False, f"{refuted}{told} (not above {margin:g})", record)
    # Only a choice the guard lets through carries the few-labels risk (a refuted one is the
    # baseline).
    caution = few_labels_caution(sel, n_items=n_items, ensemble=ensemble, rule=rule)
    if caution is not None:
        record["few_labels"] = True
    kept = GuardCheck(
        True, f"selection: the guard kept the choice: {told}", record, caution=caution
    )
    if checked == "ensemble" and sel.frugal is not None and rule == "best":
        members = len(fn(built.data).members)
        if members > 1:  # a stack that kept one judge is no dearer than it
            return _frugal(sel, built, gain, kept, members)
    return kept


def _frugal(
    sel: SelectionConfig, built: ValidationTable, gain: float, kept: GuardCheck, members: int
) -> GuardCheck:
    """``frugal``: rule best's single judge instead of the ensemble the guard kept, when its
    own cross-fitted gain (the same halves) is above the margin and at least the
    ensemble's ``gain`` minus the tolerance."""
    tolerance = float(sel.frugal or 0.0)
    # The halves are the ensemble's (memoised on the table), so this cross-fit splits too.
    single = float(crossfit_gain(built.data, best_rule, fraction=GUARD_FRACTION))
    ships = math.isfinite(single) and single > sel.guard_margin and single >= gain - tolerance
    record = kept.record | {
        "frugal": {"tolerance": tolerance, "single_crossfit_gain": single, "single": ships}
    }
    said = (
        f"selection: frugal: rule best's judge, chosen on each half, gained {single:+.3f} on "
        f"the other half against the ensemble's {gain:+.3f}"
    )
    if ships:
        said += (
            f" (within {tolerance:g}): the single judge is written, 1 prompt per item "
            f"instead of {members}"
        )
    else:
        said += ": the ensemble is kept"
    return GuardCheck(
        True, kept.message, record, single=ships, frugal_message=said, caution=kept.caution
    )
