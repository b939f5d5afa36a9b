"""The state of one choice of the compiled judge (:meth:`Chooser.select`): what it returns
(:class:`Selected`), where it stands (:class:`Step`) and what it holds (:class:`ChoiceRun`:
the selection record, the strategies passed over, the validation table and every judged
result, each made once)."""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..data import Record
from ..evaluate import EvalResult, ItemResult, correct, item_predictions
from ..judge import JudgeEnsemble
from ..search import Search
from ._journal import strategy_key
from ._pooling import PooledChoice, ValidationTable, validation_table
from ._prior_default import PriorRecord
from ._summary import PassedOver, StrategySummary

__all__ = [
    "ChoiceRun",
    "Selected",
    "SelectionRecord",
    "Step",
    "in_order",
    "LMCounts",
    "SelectionCost",
    "lm_stats",
    "trial_key",
]


@dataclass(frozen=True)
class LMCounts:
    """An LM's call and token counters at one moment; ``b - a`` is what was spent between."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __sub__(self, other: LMCounts) -> LMCounts:
        return LMCounts(*(getattr(self, f) - getattr(other, f) for f in _COUNTERS))

    def to_dict(self) -> dict[str, int]:
        """The counters by name."""
        return {f: getattr(self, f) for f in _COUNTERS}


_COUNTERS = ("calls", "cache_hits", "prompt_tokens", "completion_tokens")


def lm_stats(lm: Any) -> LMCounts:
    """The LM's call and token counters (zeros for an LM without ``stats()``)."""
    fn = getattr(lm, "stats", None)
    st = fn() if callable(fn) else None
    return LMCounts(*(int(getattr(st, k, 0) or 0) for k in _COUNTERS))


@dataclass(frozen=True)
class SelectionCost:
    """What the choice spent beyond the search: the LM's counters and the wall seconds."""

    spent: LMCounts
    seconds: float

    def to_dict(self) -> dict[str, float]:
        """The counters and ``seconds``, as the selection record's JSON holds them."""
        return {**self.spent.to_dict(), "seconds": self.seconds}


def trial_key(trial: Any) -> str:
    """How the compile names a search trial in its messages and its selection record
    (``#1`` is the first, as in the summary table; the journal's numbers start at 0)."""
    return f"#{trial.number + 1}"


def in_order(res: EvalResult, records: Sequence[Record]) -> list[ItemResult]:
    """The items of ``res`` in the order of ``records``."""
    by_id = {i.id: i for i in res.items}
    return [by_id[r.id] for r in records]


@dataclass
class SelectionRecord:
    """How the compile chose its judge, filled in as the choice goes; exported as the
    ``selection`` of the compile's report (:meth:`to_dict`).

    Attributes:
        settings: The selection configuration (``SelectionConfig``, as JSON).
        rule: The rule that decided (``best`` when another rule fell back to it).
        search_items: The items the strategies were scored on.
        messages: What the choice says, in order (logged, and printed by the CLI).
        outcome: The deciding rule's own fields (``reason``, ``chosen``, ``candidates`` or
            ``finalists``, ...).
        confirm_items: Items set aside to confirm finalists on (0: none).
        excluded: The strategies passed over for unrated answers.
        baseline_search_score: The baseline's search score (rule ``veto``).
        guard: The cross-fitted guard's record.
        prior_fallback: The prior default's record.
        cost: The calls, tokens and seconds the choice spent beyond the search.
        kept_baseline: Whether the returned judge is the baseline itself.
        robustness: The robustness bound's record (:mod:`._attack_bound`), when the
            compile holds its judge to one.
    """

    settings: dict[str, Any]
    rule: str
    search_items: int
    messages: list[str] = field(default_factory=list)
    outcome: dict[str, Any] = field(default_factory=dict)
    confirm_items: int | None = None
    excluded: list[PassedOver] | None = None
    baseline_search_score: float | None = None
    guard: dict[str, Any] | None = None
    prior_fallback: PriorRecord | None = None
    cost: SelectionCost | None = None
    kept_baseline: bool | None = None
    robustness: dict[str, Any] | None = None

    #: The optional fields, in the order :meth:`to_dict` writes them (when set).
    _OPTIONAL = (
        "confirm_items",
        "baseline_search_score",
        "guard",
        "cost",
        "kept_baseline",
        "robustness",
    )

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form: the settings, the rule, the items, the messages, the rule's
        own fields, then each optional field that was set."""
        out = {
            **self.settings,
            "rule": self.rule,
            "search_items": self.search_items,
            "messages": list(self.messages),
            **self.outcome,
        }
        if self.excluded is not None:
            out["excluded"] = [e.to_dict() for e in self.excluded]
        for name in self._OPTIONAL:
            value = getattr(self, name)
            if value is not None:
                out[name] = value.to_dict() if isinstance(value, SelectionCost) else value
        if self.prior_fallback is not None:
            out["prior_fallback"] = self.prior_fallback.to_dict()
        return out


@dataclass(frozen=True)
class Selected:
    """The outcome of :meth:`Chooser.select`.

    Attributes:
        judge: The chosen judge (a fresh copy, without compile results).
        record: How it was chosen (its :meth:`SelectionRecord.to_dict` is the ``selection``
            of the compile's report).
        comparisons: Split name -> the chosen judge against the baseline.
        ensemble: The prompt ensemble, when one was asked for and could be built.
        warn: Whether the record's messages are warnings (a rule fell back, the chosen
            judge scores below the baseline, or the guard decided on fewer labelled items
            than it was registered for).
    """

    judge: Any
    record: SelectionRecord
    comparisons: dict[str, dict[str, Any]]
    ensemble: JudgeEnsemble | None
    warn: bool


@dataclass(frozen=True)
class Step:
    """Where a choice stands: the judge chosen so far, the finalists to judge, the items
    the comparison is made on (``validation`` or ``confirmation``) with its caveat, the
    ensemble's size, the fallback's message (a warning) and a pooled rule's choice."""

    chosen: Any
    finalists: list[Any]
    split: str
    note: str
    n_members: int
    fallback: str | None = None
    pooled: PooledChoice | None = None


class ChoiceRun:
    """The state of one ``Chooser.select`` (``chooser`` gives its ``config``, ``sel`` and
    ``evaluator``): the selection record, the strategies passed
    over, the validation table (built once), every judged result (judged once) and the
    cost counters."""

    def __init__(
        self,
        chooser: Any,
        search: Search,
        base: Any,
        baseline: Any,
        search_val: list[Record],
        summaries: Sequence[StrategySummary],
    ) -> None:
        config, sel = chooser.config, chooser.sel
        self.chooser, self.search, self.base, self.baseline = chooser, search, base, baseline
        self.search_val = search_val
        self.stats0, self.t0 = lm_stats(chooser.evaluator.lm), time.perf_counter()
        self.anchor = config.ensemble_anchor
        #: A stacked ensemble's ridge penalty per item (0: not stacked).
        self.stack = config.ensemble_stack
        with_baseline = bool(self.anchor or self.stack)
        self.n_members = config.ensemble if config.ensemble >= (1 if with_baseline else 2) else 0
        # An anchored or stacked ensemble takes the baseline and the n best strategies other
        # than it: one finalist more, in case the baseline is among the best.
        self.n_finalists = (
            self.n_members + 1 if with_baseline and self.n_members else self.n_members
        )
        self.record = SelectionRecord(sel.model_dump(mode="json"), sel.rule, len(search_val))
        self.unrated = {s.number: (s.unrated, s.n) for s in summaries}
        self.excluded: list[PassedOver] = []
        self.baseline_key = strategy_key(baseline.strategy)
        self.baseline_keys = {
            trial_key(t)
            for t in search.trials
            if strategy_key(base.with_strategy(t.strategy).strategy) == self.baseline_key
        }
        self._results: dict[str, EvalResult] = {}

    @functools.cache  # noqa: B019 - one run, one table
    def table(self) -> ValidationTable:
        """Every strategy's stored ratings on the search's items (built once)."""
        return validation_table(
            self.chooser.evaluator,
            self.search,
            self.base,
            self.baseline,
            self.search_val,
            unrated=self.unrated,
            max_parse_failures=self.chooser.config.max_parse_failures,
            key_of=trial_key,
            seed=self.chooser.sel.seed,
            barred=frozenset(self.chooser.barred),
        )

    def judged(self, program: Any, desc: str, records: list[Record]) -> EvalResult:
        """``program`` on ``records`` (the run's comparison items), judged once."""
        key = strategy_key(program.strategy)
        if key not in self._results:
            self._results[key] = self.chooser.evaluator.stored(program, records, desc=desc)
        return self._results[key]

    def labels(self, records: list[Record]) -> tuple[list[Any], list[str] | None]:
        """The human scores (or labels) of ``records`` and their groups at group level."""
        pairwise = self.base.task.mode == "pairwise"
        humans = [r.label if pairwise else r.scores[self.base.aspect] for r in records]
        group_level = self.chooser.evaluator.level == "group"
        return humans, [r.group_id or r.id for r in records] if group_level else None

    def vector(self, res: EvalResult, records: list[Record]) -> list[float]:
        """A judge's predictions (pairwise: correct or not) in the order of ``records``."""
        items = in_order(res, records)
        return correct(items) if self.base.task.mode == "pairwise" else item_predictions(items)

    def finish(self, step: Step, comparison: Any, ensemble: JudgeEnsemble | None) -> Selected:
        """The record's cost and last warning, and the outcome."""
        record, sel = self.record, self.chooser.sel
        spent = lm_stats(self.chooser.evaluator.lm) - self.stats0
        record.cost = SelectionCost(spent, round(time.perf_counter() - self.t0, 3))
        record.kept_baseline = strategy_key(step.chosen.strategy) == self.baseline_key
        warn = comparison.gain is not None and comparison.gain < 0
        if warn:
            record.messages.append(
                f"selection: the returned judge scores {comparison.gain:+.3f} against the "
                f"baseline on the {step.split} items"
            )
        few_labels = bool((record.guard or {}).get("few_labels"))
        warn = warn or few_labels or step.fallback is not None or record.rule != sel.rule
        compiled = step.chosen.with_strategy(step.chosen.strategy)
        return Selected(compiled, record, {step.split: comparison.to_dict()}, ensemble, warn)
