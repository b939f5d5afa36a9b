"""Choosing the compiled judge with a pooled rule: ``shrink``, ``lcb``, ``factor`` or
``posterior`` on all the validation items.

The rules ``confirm`` and ``veto`` decide from a search half and a confirmation half. The
pooled rules of :mod:`judgeopt.selection` (:func:`~judgeopt.selection.shrink_rule`,
:func:`~judgeopt.selection.lcb_rule`, :func:`~judgeopt.selection.factor_rule`,
:func:`~judgeopt.selection.posterior_rule`) see one
validation set on which every candidate has been judged and use all of it, correcting for
the number of strategies compared instead of holding items out. The search scores on the
whole validation set (as with ``best``); then :func:`choose_pooled` builds the table of every
evaluated strategy's ratings on those items from the stored judgements (no new call, except
for the baseline if the search never judged it), applies the rule and returns its pick or the
baseline (``docs/judge.md``, "Choosing the judge").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..data import Record
from ..search import Search
from ..selection import (
    GainPrior,
    RuleInput,
    RuleSpec,
    SelectionConfig,
    change_from,
    compile_rule,
    table_rules,
)
from ._journal import strategy_key
from ._judging import Evaluator
from ._summary import PassedOver

__all__ = [
    "POOLED_RULES",
    "PooledCandidate",
    "PooledChoice",
    "PooledOutcome",
    "ValidationTable",
    "choose_pooled",
    "pooled_note",
    "validation_table",
]

#: The rules that choose on all the validation items from the stored judgements (those of
#: :data:`judgeopt.selection.RULES` that a compile runs on its validation table).
POOLED_RULES = table_rules()


def pooled_note(rule: str, metric: str) -> str | None:
    """Why the pooled ``rule`` cannot choose this compile's judge (``None``: it can).

    The pooled rules compare Spearman correlations of ratings; a pairwise task (accuracy)
    or another correlation falls back to the best validation score, and the compile says so.
    """
    if rule in POOLED_RULES and metric != "spearman":
        return (
            f"rule {rule!r} compares Spearman correlations of ratings and this compile's "
            f"metric is {metric}"
        )
    return None


@dataclass(frozen=True)
class PooledCandidate:
    """One candidate of a pooled rule: how the compile names it, its strategy, its validation
    score, its gain over the baseline and that gain's bootstrap standard error, and (rule
    ``posterior``) the gain the bank's prior expected of its change from the baseline."""

    key: str
    strategy: dict[str, Any]
    score: float
    gain: float
    se: float
    prior_gain: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The candidate as the selection record's JSON holds it."""
        out = {k: getattr(self, k) for k in ("key", "strategy", "score", "gain", "se")}
        if self.prior_gain is not None:
            out.update(prior_gain=self.prior_gain)
        return out


@dataclass(frozen=True)
class PooledOutcome:
    """A pooled rule's outcome, as the selection record keeps it.

    Attributes:
        reason: The rule's own reason for its pick.
        chosen: The index of the pick into ``candidates`` (``None``: the baseline).
        baseline_score: The baseline's validation score.
        candidates: Every candidate compared with the baseline.
        rule_applied: The rule that ran when it is not the one asked for (``shrink`` for a
            ``posterior`` without a prior).
        not_judged_on_all: The strategies racing dropped early (not candidates).
    """

    reason: str
    chosen: int | None
    baseline_score: float
    candidates: tuple[PooledCandidate, ...]
    rule_applied: str | None = None
    not_judged_on_all: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The outcome's fields of the selection record's JSON (the optional ones when set)."""
        out: dict[str, Any] = dict(
            reason=self.reason,
            chosen=self.chosen,
            baseline_score=self.baseline_score,
            candidates=[c.to_dict() for c in self.candidates],
        )
        if self.rule_applied is not None:
            out.update(rule_applied=self.rule_applied)
        if self.not_judged_on_all:
            out.update(not_judged_on_all=list(self.not_judged_on_all))
        return out


@dataclass(frozen=True)
class PooledChoice:
    """What :func:`choose_pooled` decided.

    Attributes:
        chosen: The chosen program (the baseline when the rule kept it).
        record: The rule's outcome (:class:`PooledOutcome`).
        message: The compile's message (which rule chose, and why).
        excluded: The strategies passed over for their unrated answers that could have been
            chosen (validation score above the baseline's), as :class:`Chooser` lists them.
    """

    chosen: Any
    record: PooledOutcome
    message: str
    excluded: list[PassedOver] = field(default_factory=list)


def _ratings(items: Mapping[str, Any], val: list[Record]) -> list[float]:
    """The ratings of ``val``'s items in order, ``nan`` where the judge gave none (a failed
    call is not stored: no rating either, as the search scored it)."""
    out = []
    for r in val:
        item = items.get(r.id)
        out.append(math.nan if item is None or item.score is None else float(item.score))
    return out


@dataclass(frozen=True)
class ValidationTable:
    """Every strategy the search judged on all of the validation items, as the pooled rules
    read them.

    Attributes:
        data: The ratings (row 0 the baseline's, then one row per program), the human
            scores, the groups and the strategies.
        programs: The candidates' programs (row ``i + 1`` of ``data``).
        trials: Their search trials.
        passed: ``(trial, unrated, items)`` of the strategies passed over for giving no
            rating for more than ``max_parse_failures`` of their items.
        partial: The names of the trials racing dropped before every item was judged.
    """

    data: RuleInput
    programs: list[Any]
    trials: list[Any]
    passed: list[tuple[Any, int, int]]
    partial: list[str]


def validation_table(
    evaluator: Evaluator,
    search: Search,
    base: Any,
    baseline: Any,
    val: list[Record],
    *,
    unrated: Mapping[int, tuple[int, int]],
    max_parse_failures: float,
    key_of: Callable[[Any], str],
    seed: int = 0,
    barred: frozenset[str] = frozenset(),
) -> ValidationTable:
    """The table of every strategy's ratings on ``val`` from the stored judgements (no new
    call, except for the baseline if the search never judged it on ``val``).

    A strategy is a candidate when the search judged it on every item of ``val`` and it
    rated at least ``1 - max_parse_failures`` of them (``unrated``: trial number ->
    (answers without a rating, items)) and its key is not ``barred`` (a robustness bound
    it failed); each strategy appears once.
    """
    aspect = base.aspect
    humans = np.asarray([float(r.scores[aspect]) for r in val], dtype=np.float64)
    groups = [r.group_id or r.id for r in val] if evaluator.level == "group" else None
    ids = [r.id for r in val]
    base_res = evaluator.stored(baseline, val, desc="validation: baseline")
    rows = [_ratings({i.id: i for i in base_res.items}, val)]
    store = evaluator.journal.items
    progs: list[Any] = []
    cands: list[Any] = []
    passed: list[tuple[Any, int, int]] = []
    partial: list[str] = []
    seen = {strategy_key(baseline.strategy)}
    for t in sorted(search.trials, key=lambda t: t.number):
        prog = base.with_strategy(t.strategy)
        key = strategy_key(prog.strategy)
        if key in seen or key in barred:
            continue
        items = store.items(prog.strategy)
        bad, n_items = unrated.get(t.number, (0, 0))
        if (n_items < len(ids)) if n_items else any(i not in items for i in ids):
            partial.append(key_of(t))  # dropped early by racing: not judged on every item
            continue
        seen.add(key)
        if n_items and bad / n_items > max_parse_failures:
            passed.append((t, bad, n_items))
            continue
        progs.append(prog)
        cands.append(t)
        rows.append(_ratings(items, val))
    data = RuleInput(
        human=humans,
        preds=np.asarray(rows, dtype=np.float64),
        baseline=0,
        groups=groups,
        strategies=[dict(p.strategy.as_dict()) for p in (baseline, *progs)],
        seed=seed,
    )
    return ValidationTable(data, progs, cands, passed, partial)


def choose_pooled(
    sel: SelectionConfig,
    table: ValidationTable,
    baseline: Any,
    *,
    max_parse_failures: float,
    key_of: Callable[[Any], str],
    gain_prior: GainPrior | None = None,
) -> PooledChoice:
    """Apply the pooled rule ``sel.rule`` to every strategy of ``table`` (those the search
    judged on all the validation items, :func:`validation_table`).

    Args:
        sel: The selection settings (``rule``, ``confidence`` as the bound's level for
            ``lcb``, ``n_resamples``, ``seed``).
        table: The validation table.
        baseline: The compile's program with the student's strategy (row 0 of ``table``).
        max_parse_failures: The share of unrated answers above which a strategy was not a
            candidate (for the message).
        key_of: How the compile names a trial (``#1`` for the first).
        gain_prior: The prior of rule ``posterior`` (the compile's model's); without one
            the rule is ``shrink``, and the message says so.
    """
    data, progs = table.data, table.programs
    n = sel.n_resamples
    # The registry binds the rule's constants from the settings (judgeopt.selection.RULES).
    rule, spec, apply = compile_rule(sel, gain_prior=gain_prior)
    no_prior = rule != sel.rule
    pick = apply(data)
    scores = data.scores
    boot = data.resampled(n)  # the rule's own resamples (cached): the same standard errors
    se = (boot - boot[:, [0]]).std(axis=0, ddof=1)
    row = pick.single if pick.single is not None else 0
    chosen = baseline if row == 0 else progs[row - 1]
    prior = gain_prior if rule == "posterior" else None
    candidates = _candidates(table, se, key_of, prior, dict(baseline.strategy.as_dict()))
    record = PooledOutcome(
        pick.reason,
        None if row == 0 else row - 1,
        float(scores[0]),
        candidates,
        rule_applied="shrink" if no_prior else None,
        not_judged_on_all=tuple(table.partial),
    )
    message = _pooled_message(
        sel,
        spec,
        no_prior,
        table,
        candidates,
        pick.reason,
        row,
        max_parse_failures=max_parse_failures,
        key_of=key_of,
    )
    top = float(scores[0])
    excluded = [
        PassedOver(key_of(t), t.score, bad, n_items)
        for t, bad, n_items in sorted(table.passed, key=lambda x: (-x[0].score, x[0].number))
        if math.isfinite(t.score) and t.score > top
    ]
    return PooledChoice(chosen, record, message, excluded)


def _candidates(
    table: ValidationTable,
    se: np.ndarray,
    key_of: Callable[[Any], str],
    gain_prior: GainPrior | None,
    base_strategy: dict[str, Any],
) -> tuple[PooledCandidate, ...]:
    """Each candidate: key, strategy, validation score, gain and its standard error, and what
    ``gain_prior`` (the bank) said of its change from the baseline."""
    scores = table.data.scores
    out = []
    for i, (t, p) in enumerate(zip(table.trials, table.programs, strict=True)):
        strategy = dict(p.strategy.as_dict())
        prior = (
            None
            if gain_prior is None
            else float(gain_prior.of(change_from(strategy, base_strategy))[0])
        )
        score, gain = float(scores[i + 1]), float(scores[i + 1] - scores[0])
        out.append(PooledCandidate(key_of(t), strategy, score, gain, float(se[i + 1]), prior))
    return tuple(out)


def _pooled_message(
    sel: SelectionConfig,
    spec: RuleSpec,
    no_prior: bool,
    table: ValidationTable,
    candidates: tuple[PooledCandidate, ...],
    reason: str,
    row: int,
    *,
    max_parse_failures: float,
    key_of: Callable[[Any], str],
) -> str:
    """:func:`choose_pooled`'s message: which rule chose ``row`` (0: the baseline), and why."""
    cands, passed, partial = table.trials, table.passed, table.partial
    scores = table.data.scores
    assert spec.summary is not None  # every rule a compile runs on its table has one
    what = spec.summary(sel, len(cands))
    if no_prior:
        what += (
            "; rule posterior has no gain prior for this model (gain_prior / gain_priors), "
            "so the prior is estimated from these labels alone: rule shrink"
        )
    told = (
        f"{len(cands)} strateg{'y' if len(cands) == 1 else 'ies'} compared with the baseline "
        f"on all {table.data.human.size} validation items"
        + (
            f" ({len(partial)} dropped early by racing, not judged on every item, are not "
            "candidates)"
            if partial
            else ""
        )
    )
    if not cands:
        return (
            f"selection: every strategy other than the baseline was passed over ({len(passed)} "
            f"gave no rating for more than max_parse_failures={max_parse_failures:g} of their "
            "validation items); the baseline is kept"
            if passed
            else "selection: the search found no strategy other than the baseline judged on "
            "all the validation items; the baseline is kept"
        )
    if row == 0:
        best = int(np.argmax(scores[1:])) if cands else None
        other = (
            ""
            if best is None
            else f"; the best other, {key_of(cands[best])}, gained "
            f"{candidates[best].gain:+.3f} (standard error {candidates[best].se:.3f})"
        )
        return f"selection: rule {sel.rule} ({what}) kept the baseline: {reason}{other}; {told}"
    c = candidates[row - 1]
    return (
        f"selection: rule {sel.rule} ({what}) chose {c.key}: {reason}; gain "
        f"{c.gain:+.3f} (standard error {c.se:.3f}) on the validation items; {told}"
    )
