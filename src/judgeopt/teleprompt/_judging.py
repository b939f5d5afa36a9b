"""Judging strategies during a compile: retries, stored judgements, racing (the endpoint check
before the search is :func:`judgeopt.evaluate.check_endpoint`).

:class:`Evaluator` judges one program on a list of records the way a compile needs it: every
judged item goes to the run journal (so a resumed compile repeats no call), items whose call
failed transiently are judged once more, and a candidate of the search can be judged chunk by
chunk and dropped early by racing (:mod:`judgeopt.racing`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..data import Record
from ..evaluate import (
    ENDPOINT_CHECK,
    EvalResult,
    ItemResult,
    check_endpoint,
    evaluate,
    merge_results,
)
from ..lm import LMUnavailable
from ..metrics import group_correlation
from ..racing import (
    RaceDecision,
    RacingConfig,
    checkpoint_sizes,
    race_decision,
    race_order,
    unit_keys,
)
from ..search import Strategy
from ._journal import RunJournal
from ._summary import RaceCheck, RaceRecord

__all__ = ["ENDPOINT_CHECK", "Evaluator", "Plan", "check_endpoint", "finite_or_none", "race_plan"]

log = logging.getLogger("judgeopt.teleprompt")


def finite_or_none(value: float) -> float | None:
    """A metric for a record: ``None`` for NaN (no correlation defined)."""
    return None if math.isnan(value) else value


@dataclass(frozen=True)
class Plan:
    """Validation units in judging order and the unit counts after which racing checks."""

    units: list[list[Record]]
    sizes: list[int]

    def records(self, n_units: int) -> list[Record]:
        """The records of the first ``n_units`` units."""
        return [r for unit in self.units[:n_units] for r in unit]


def race_plan(
    val: list[Record], race: RacingConfig, *, pairwise: bool, aspect: str, level: str
) -> Plan:
    """The fixed item order and checkpoints of racing (one chunk of everything without)."""
    if not race.enabled:
        return Plan([val], [1])
    humans = [r.label if pairwise else r.scores[aspect] for r in val]
    groups = [r.group_id or r.id for r in val] if level == "group" else None
    _, keys, members = unit_keys(humans, groups)
    per_unit = len(val) / len(members)
    min_units = max(3, math.ceil(race.min_items / per_unit)) if groups else race.min_items
    sizes = checkpoint_sizes(len(members), race.checkpoints, min_units)
    order = race_order(keys, n_strata=sizes[0], seed=race.seed)
    return Plan([[val[i] for i in members[u]] for u in order], sizes)


class Evaluator:
    """Judges programs for one compile, recording every judged item in the journal.

    Args:
        lm: The LM every judgement uses.
        journal: The run journal (its item store and pending items are written).
        level: ``dataset`` or ``group`` (how a correlation is computed).
        threads: Judge calls in flight at once (``None``: what the LM keeps busy).
        progress: Show progress bars.
        max_consecutive_failures: The circuit breaker of :func:`judgeopt.evaluate.evaluate`.
    """

    def __init__(
        self,
        lm: Any,
        journal: RunJournal,
        *,
        level: str,
        threads: int | None,
        progress: bool,
        max_consecutive_failures: int,
    ) -> None:
        self.lm = lm
        self.journal = journal
        self.level = level
        self.threads = threads
        self.progress = progress
        self.max_consecutive_failures = max_consecutive_failures

    def retrying(
        self,
        program: Any,
        records: list[Record],
        *,
        desc: str,
        on_item: Callable[[ItemResult], Any],
    ) -> EvalResult:
        """Evaluate ``records``; judge the items whose call failed transiently once more.

        A judgement is final only when its call did not fail transiently (see
        :data:`judgeopt.lm.TRANSIENT_KINDS`): items that still fail after the second try
        stop the compile (:class:`judgeopt.lm.LMUnavailable`), so no strategy is scored with
        judgements the endpoint never made; the items judged are kept in the checkpoint and
        a re-run judges only the failed ones. The circuit breaker stops a dead endpoint
        after ``max_consecutive_failures`` calls in a row.
        """
        limit = self.max_consecutive_failures
        res = evaluate(
            program,
            records,
            lm=self.lm,
            threads=self.threads,
            progress=self.progress,
            desc=desc,
            on_item=on_item,
            max_consecutive_failures=limit,
        )
        failed = {i.id for i in res.items if i.transient}
        if not failed:
            return res
        log.info(
            "%s: %d judge call(s) failed transiently; trying them once more", desc, len(failed)
        )
        again = evaluate(
            program,
            [r for r in records if r.id in failed],
            lm=self.lm,
            threads=self.threads,
            progress=self.progress,
            desc=f"{desc} (retry)",
            on_item=on_item,
            max_consecutive_failures=limit,
        )
        still = [i for i in again.items if i.transient]
        if still:
            raise LMUnavailable(
                f"{desc}: {len(still)} of {len(records)} judge calls failed twice ("
                f"{still[-1].error}); their strategy is not scored with missing judgements",
                last=None,
            )
        return merge_results(
            [res, again], records, pairwise=program.task.mode == "pairwise", level=self.level
        )

    def stored(self, program: Any, records: list[Record], *, desc: str) -> EvalResult:
        """Evaluate ``program`` on ``records``, reusing and recording items in the journal."""
        store = self.journal.items
        done = store.items(program.strategy)
        todo = [r for r in records if r.id not in done]
        parts = []
        if len(done):
            parts.append(
                EvalResult(
                    n=len(done),
                    parse_failures=0,
                    call_failures=0,
                    level=self.level,
                    items=[done[r.id] for r in records if r.id in done],
                )
            )
        if todo:
            parts.append(
                self.retrying(
                    program, todo, desc=desc, on_item=lambda item: store.add(program.strategy, item)
                )
            )
        return merge_results(
            parts, records, pairwise=program.task.mode == "pairwise", level=self.level
        )

    def candidate(
        self,
        program: Any,
        strategy: Strategy,
        number: int,
        plan: Plan,
        val: list[Record],
        race: RacingConfig,
        *,
        metric: str,
        bar_to: float | None,
    ) -> tuple[EvalResult, RaceRecord | None]:
        """Judge the search's candidate ``number`` chunk by chunk; stop early when racing
        drops it.

        Returns the evaluation (on the items judged) and the racing record (``None``
        without racing).
        """
        pending, store, level = self.journal.pending, self.journal.items, self.level
        pairwise = program.task.mode == "pairwise"

        def keep(item: ItemResult) -> None:
            pending.add(item)
            store.add(program.strategy, item)

        done = pending.resume(number, strategy)
        parts = [_resumed(list(done.values()), level)] if done else []
        checks: list[RaceCheck] = []
        n_items = len(val)
        for size in plan.sizes:
            recs = plan.records(size)
            todo = [r for r in recs if r.id not in done]
            if todo:
                res = self.retrying(program, todo, desc=f"strategy {number + 1}", on_item=keep)
                parts.append(res)
                done.update((i.id, i) for i in res.items)
            if not race.enabled:
                break
            if size == plan.sizes[-1]:
                checks.append(RaceCheck(len(recs), None, None))
                break
            partial, estimate, decision = self._race_check(
                parts, recs, size, len(plan.units), race, metric, bar_to, pairwise
            )
            checks.append(RaceCheck(len(recs), estimate, decision.bound))
            if decision.drop:
                race_record = RaceRecord(
                    True, len(recs), n_items, estimate, decision.bound, bar_to, tuple(checks)
                )
                return partial, race_record
        result = (
            parts[0]
            if len(parts) == 1 and not race.enabled
            else merge_results(parts, val, pairwise=pairwise, level=level)
        )
        if not race.enabled:
            return result, None
        estimate = finite_or_none(result.metric(metric))
        checks[-1] = replace(checks[-1], estimate=estimate)
        return result, RaceRecord(False, n_items, n_items, estimate, None, bar_to, tuple(checks))

    def _race_check(
        self,
        parts: list[EvalResult],
        recs: list[Record],
        size: int,
        n_units: int,
        race: RacingConfig,
        metric: str,
        bar_to: float | None,
        pairwise: bool,
    ) -> tuple[EvalResult, float | None, RaceDecision]:
        """Racing's check after the first ``size`` of ``n_units`` units (``recs``): the
        partial result, its estimate and the decision."""
        partial = merge_results(parts, recs, pairwise=pairwise, level=self.level)
        estimate = finite_or_none(partial.metric(metric))
        sd = _group_sd(partial.items, recs, metric) if self.level == "group" else None
        decision = race_decision(
            estimate,
            size,
            n_units,
            bar_to,
            metric=metric,
            z=race.z,
            level=self.level,
            group_sd=sd,
        )
        return partial, estimate, decision


def _resumed(items: list[ItemResult], level: str) -> EvalResult:
    """Items judged before (resumed from the checkpoint) as one part of a result."""
    return EvalResult(n=len(items), parse_failures=0, call_failures=0, level=level, items=items)


def _group_sd(items: Sequence[ItemResult], records: Sequence[Record], metric: str) -> float | None:
    """Spread of the per-group correlations of judged items (mean-imputed, as scored)."""
    parsed = [float(i.score) for i in items if i.score is not None]
    if len(parsed) < 3:
        return None
    fill = sum(parsed) / len(parsed)
    pred = [fill if i.score is None else float(i.score) for i in items]
    human = [float(i.human) for i in items]  # type: ignore[arg-type]
    try:
        per = list(
            group_correlation(
                human, pred, [r.group_id or r.id for r in records], metric
            ).per_group.values()
        )
    except ValueError:
        return None
    if len(per) < 2:
        return None
    mean = sum(per) / len(per)
    return math.sqrt(sum((v - mean) ** 2 for v in per) / (len(per) - 1))
