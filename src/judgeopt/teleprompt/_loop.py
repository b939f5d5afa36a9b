"""The compile loop: ask the search for a strategy, judge it, tell the search, record.

In the spirit of an Optuna study's ask/tell loop, :meth:`CompileRun.run` fits on one screen::

    while (strategy := search.ask()) is not None:
        result, racing = judge(strategy)        # on the search items, raced or not
        search.tell(strategy, score(result))
        journal.record(...)                     # checkpoint: resumable from here

and then chooses the compiled judge (:class:`~judgeopt.teleprompt._choosing.Chooser`) and
attaches one frozen :class:`~judgeopt.judge.CompileReport` to it. Everything else is set up
once in :class:`CompileRun`'s constructor: the data, the run journal (checkpoint, resume), the
student's fresh copy the strategies are judged with, and the search.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from .._checkpoint import run_fingerprint
from ..evaluate import CostPlan, EvalResult, Timing, check_label_spread
from ..judge import SCREENED_DEFENCES, ArtifactStore, CompileReport, JudgeStudent, calibrate_screen
from ..lm import LMUnavailable, model_spec
from ..racing import threshold
from ..search import Strategy
from ._attack_bound import hold_to_bound
from ._choice import Selected
from ._choosing import Chooser
from ._compile_result import CompileResult, find_problems
from ._config import OptimizerConfig
from ._guard import few_labels_caution
from ._journal import RunJournal, progress_log, strategy_key
from ._judge_cost import cost_record
from ._judging import Evaluator, check_endpoint, race_plan
from ._planning import compile_plan
from ._searching import (
    build_graph,
    check_student,
    compile_metric,
    make_search,
    student_records,
    with_optional_factors,
)
from ._summary import RaceRecord, StrategySummary, racing_summary, search_trace

__all__ = ["REPORTED", "CompileRun"]

log = logging.getLogger("judgeopt.teleprompt")

#: Marks log records whose text is also in the compiled judge (``selection.messages``,
#: ``search_result.problems``): ``judgeopt compile`` prints those in its summary and drops
#: the records, so that no line appears twice.
REPORTED = {"judgeopt_reported": True}


class CompileRun:
    """One compile of one student (``JudgeSearch.compile`` makes one and runs it).

    Args:
        config: The optimizer settings.
        student: The judge to optimise (any :class:`~judgeopt.judge.JudgeStudent`).
        trainset: Labelled examples (the example pool, and the scoring set without valset).
        valset: Labelled examples the strategies are scored on.
        checkpoint_dir: The run journal's directory (``None``: no checkpoint).
        restart: Discard the checkpoint's results first.
        check_lm: Make one short call before judging (a dead endpoint stops at once).
        progress: Show progress bars (else one log line per strategy).
        plan: Estimate the compile's cost before its first judge call (the baseline
            judged and timed; :mod:`~judgeopt.teleprompt._planning`) and log it.
    """

    def __init__(
        self,
        config: OptimizerConfig,
        student: JudgeStudent,
        *,
        trainset: Sequence[Any],
        valset: Sequence[Any] | None,
        checkpoint_dir: Path | None,
        restart: bool,
        check_lm: bool,
        progress: bool,
        plan: bool = True,
    ) -> None:
        check_student(student)
        student = with_optional_factors(config, student)
        task = self.task = student.task
        self.config, self.student, self.progress = config, student, progress
        self.metric = compile_metric(config, task.mode)
        train = student_records(trainset, student, "trainset")
        val = student_records(valset, student, "valset") if valset is not None else train
        check_label_spread(
            val, task, student.aspect, "valset" if valset is not None else "trainset"
        )
        lm = self.lm = student.resolve_lm()
        journal = self.journal = self._open_journal(
            checkpoint_dir, restart, train, None if valset is None else val
        )
        if check_lm:
            check_endpoint(lm, timeout=config.check_timeout)
        self.artifacts = ArtifactStore(journal.artifacts_path)
        # The strategies are judged with copies of this one: the student's settings, the
        # trainset as example pool, the checkpoint's artifacts and the resolved LM.
        self.base = student.fresh_copy(
            trainset=train, artifacts=self.artifacts, example_seed=config.example_seed, lm=lm
        )
        graph = self.graph = build_graph(config, student, lm)
        search = make_search(config, student, graph)
        self.search, self.summaries = journal.resume(
            search, name=config.search, seed=config.seed, budget=config.budget
        )
        pairwise = task.mode == "pairwise"
        level = "dataset" if pairwise else (task.correlation_level or "dataset")
        self.evaluator = Evaluator(
            lm,
            journal,
            level=level,
            threads=config.threads,
            progress=progress,
            max_consecutive_failures=config.max_consecutive_failures,
        )
        self.chooser = Chooser(config, self.evaluator, metric=self.metric)
        self.search_val, self.confirm_val, self.split_note = self.chooser.split(
            val, pairwise=pairwise, aspect=student.aspect, level=level
        )
        self.val = val
        self.plan = race_plan(
            self.search_val, config.racing, pairwise=pairwise, aspect=student.aspect, level=level
        )
        self.dropped = {s.number for s in self.summaries if s.dropped}
        self.calls_this_run = 0
        sel = self.chooser.sel
        caution = few_labels_caution(
            sel, n_items=len(self.search_val), ensemble=config.ensemble, rule=sel.rule
        )
        if caution is not None:  # said before anything is paid for, and again in the summary
            log.warning("%s", caution)
        self.cost_plan = self._estimate_cost(graph) if plan else None

    def _open_journal(
        self, checkpoint_dir: Path | None, restart: bool, train: Any, valset: Any
    ) -> RunJournal:
        """The run journal, opened on this compile's fingerprint (``None`` directory: none)."""
        journal = RunJournal(checkpoint_dir)
        if checkpoint_dir is not None:
            student = self.student
            journal.open(
                run_fingerprint(
                    task=self.task,
                    aspect=student.aspect,
                    baseline=student.strategy.as_dict(),
                    trainset=train,
                    valset=valset,
                    config=self.config.model_dump(mode="json"),
                    lm=self.lm,
                    max_tokens=student.max_tokens,
                    decoding_params=getattr(student, "decoding_params", {}),
                ),
                restart=restart,
            )
        return journal

    def _estimate_cost(self, graph: Any) -> Any:
        """The cost plan of the strategies left, logged (``None``: none left, or it failed)."""
        if self.config.budget - self.search.n_counted <= 0:
            return None
        try:
            cost_plan = self.estimate_cost()
        except Exception as e:  # noqa: BLE001 - an estimate never stops the compile
            log.warning("no cost plan: %s", e)
            return None
        progress_log.info("%s", cost_plan.line())
        return cost_plan

    def estimate_cost(self, timing: Timing | None = None) -> CostPlan:
        """The cost plan of what is left of the search (its selection included), made now.

        ``timing``: a timing measured before (nothing is judged); ``None``: the baseline is
        judged and timed (:func:`~judgeopt.teleprompt._planning.compile_plan`). A search the
        checkpoint holds whole plans no call.
        """
        left = self.config.budget - self.search.n_counted
        if left <= 0:
            return CostPlan(
                calls=0,
                prompt_tokens=0,
                completion_tokens=0,
                seconds=0.0,
                dollars=0.0,
                what=f"the checkpoint holds all {self.config.budget} strategies",
            )
        return compile_plan(
            self.graph,
            self.base,
            self.student.strategy,
            self.plan.records(len(self.plan.units)),
            self.confirm_val,
            strategies_left=left,
            lm=self.lm,
            threads=self.config.threads,
            baseline_left=self.search.n_evaluations == 0,
            judged=[s.evaluation for s in self.summaries],
            judged_items=self.journal.pending_kept,
            # The pending strategy: ask() returns it again until it is told.
            next_strategy=self.search.ask(),
            screen_calibration=self._screens(),
            search=self.search,
            timing=timing,
        )

    # The loop -----------------------------------------------------------------------------
    def run(self) -> Any:
        """Search, then choose the judge: the compiled judge, carrying its ``report_``."""
        t0 = time.perf_counter()
        self._calibrate_screen()
        search = self.search
        with self._progress_bar() as bar:
            while (strategy := search.ask()) is not None:
                number = search.n_evaluations
                result, racing = self._judge(strategy, number)
                score = result.metric(self.metric)
                if racing is not None and racing.dropped:
                    self.dropped.add(number)
                    if self.config.racing.dropped_score == "bound" and racing.bound is not None:
                        score = racing.bound
                counted = not self._unjudgeable(result)
                search.tell(strategy, score if counted else math.nan, counted=counted)
                summary = StrategySummary(number, strategy.as_dict(), result.summary(), racing)
                self.summaries.append(summary)
                self.journal.record(search, summary, artifacts=self.artifacts)
                self._report(strategy, score, result, bar)
        return self._finish(t0)

    def _unjudgeable(self, result: EvalResult) -> bool:
        """Whether the model refused every call of a strategy because its prompts do not fit
        its context (a strategy with many long in-context examples on long texts): such a
        strategy is recorded but does not spend the budget, up to ``budget`` of them (so a
        space of mostly unjudgeable strategies still ends)."""
        items = result.items
        if not items or any(i.error_kind != "context_overflow" for i in items):
            return False
        search = self.search
        return search.n_evaluations - search.n_counted < self.config.budget

    def _screens(self) -> bool:
        """Whether a strategy the compile can judge screens (its threshold is calibrated)."""
        defences = {*self.config.space.get("defence", ()), self.student.strategy.get("defence")}
        return bool(defences & SCREENED_DEFENCES) and hasattr(self.base, "with_screen_threshold")

    def _calibrate_screen(self) -> None:
        """With defence ``screened`` in the space (or the student's strategy), its threshold
        is calibrated once on the validation items' texts, clean and unlabelled for this
        purpose (:func:`judgeopt.judge.calibrate_screen`: one short call per item), and
        every strategy is judged with it."""
        if not self._screens():
            return
        self.base, calibration = calibrate_screen(
            self.base, self.val, threads=self.config.threads or 2, lm=self.lm
        )
        progress_log.info("%s", calibration.line())

    def _judge(self, strategy: Strategy, number: int) -> tuple[EvalResult, RaceRecord | None]:
        """Judge the search's candidate ``number`` on the search items (raced or not)."""
        race = self.config.racing
        bar_to = (
            threshold(
                [t.score for t in self.search.trials if t.number not in self.dropped],
                self.config.race_top(),
            )
            if race.enabled
            else None
        )
        try:
            return self.evaluator.candidate(
                self.base.with_strategy(strategy),
                strategy,
                number,
                self.plan,
                self.search_val,
                race,
                metric=self.metric,
                bar_to=bar_to,
            )
        except LMUnavailable as e:
            raise self.journal.stopped(
                e, f"strategy {number + 1} of {self.config.budget}", self.search.n_evaluations
            ) from e

    def _report(self, strategy: Strategy, score: float, result: EvalResult, bar: Any) -> None:
        """Count the strategy's calls and show where the search stands."""
        search, metric, budget = self.search, self.metric, self.config.budget
        self.calls_this_run += result.calls
        log.info("[%d/%d] %s -> %s=%s", search.n_counted, budget, strategy, metric, score)
        if not search.trials[-1].counted:
            progress_log.info(
                "strategy %s: every one of its %d prompts is longer than the model's "
                "context, so it was not judged and does not count against the budget "
                "(%d of %d spent)",
                strategy,
                result.n,
                search.n_counted,
                budget,
            )
            return
        if bar is None:
            progress_log.info(
                "strategy %d of %d: %s %s (%d of %d unparsed, %d failed calls; %d calls, "
                "%.0f s); best so far %s",
                search.n_counted,
                budget,
                metric,
                _fmt(score),
                result.parse_failures,
                result.n,
                result.call_failures,
                result.calls,
                result.seconds,
                _fmt(search.best_score),
            )
            return
        bar.update(1)
        best = search.best_score
        bar.set_postfix(
            {f"best {metric}": "nan" if best is None or math.isnan(best) else f"{best:.3f}"}
        )

    @contextmanager
    def _progress_bar(self) -> Iterator[Any]:
        """A progress bar over the budget (``None`` without progress); closed on exit."""
        if not self.progress:
            yield None
            return
        from tqdm import tqdm  # lazy: third-party, only needed with progress bars

        bar = tqdm(
            total=self.config.budget,
            initial=self.search.n_counted,
            desc=f"{self.config.search} {self.task.name}/{self.student.aspect}",
            unit="strategy",
        )
        try:
            yield bar
        finally:
            bar.close()

    # After the search ---------------------------------------------------------------------
    def _finish(self, t0: float) -> Any:
        """Choose the judge and attach the compile's report to it."""
        search, summaries, config = self.search, self.summaries, self.config
        best_trial = search.best_trial
        if best_trial is None:
            raise RuntimeError("The search evaluated no strategy.")
        selected = self._select()
        selected, bound_problems = self._hold_to_bound(selected)
        chosen = selected.judge
        # NOTE: through the judge's space, so summaries of a checkpoint written before the
        # `decoding` factor existed (strategies without it) still match.
        chosen_summary = next(
            (
                s
                for s in reversed(summaries)
                if self.base.with_strategy(s.strategy).strategy == chosen.strategy
            ),
            None,
        )
        validation = None if chosen_summary is None else chosen_summary.to_dict()
        problems = find_problems(
            search,
            summaries,
            chosen_summary,
            selected.comparisons,
            metric=self.metric,
            max_parse_failures=config.max_parse_failures,
        )
        problems += bound_problems
        result = CompileResult(
            search=config.search,
            budget=config.budget,
            seed=config.seed,
            metric=self.metric,
            evaluations=search.n_evaluations,
            uncounted=search.n_evaluations - search.n_counted,
            best_strategy=best_trial.strategy.as_dict(),
            best_score=best_trial.score,
            trace=search_trace(search, summaries, config.racing.enabled),
            evaluation_summaries=[s.to_dict() for s in summaries],
            seconds=time.perf_counter() - t0,
            racing=racing_summary(config, summaries, len(self.dropped), len(self.search_val)),
            # Over every session of the checkpoint (earlier sessions' summaries included).
            calls=sum(s.count("calls") for s in summaries),
            prompt_tokens=sum(s.count("prompt_tokens") for s in summaries),
            completion_tokens=sum(s.count("completion_tokens") for s in summaries),
            calls_this_run=self.calls_this_run,
            selection_calls=selected.record.cost.spent.calls if selected.record.cost else 0,
            plan=None if self.cost_plan is None else self.cost_plan.to_dict(),
            problems=problems,
        )
        for line in problems:
            log.warning("%s", line, extra=REPORTED)
        # A model string that loads again ("local:NAME", "router:FILE#GROUP", LiteLLM's).
        model_name = model_spec(self.lm)
        ensemble = selected.ensemble
        if ensemble is not None:
            ensemble = ensemble.with_report(
                replace(ensemble.report_, model_name=model_name, validation=validation)
            )
        for line in selected.record.messages:
            log.log(logging.WARNING if selected.warn else logging.INFO, "%s", line, extra=REPORTED)
        cost = self._cost_per_item(chosen, ensemble)
        return chosen.with_report(
            CompileReport(
                search_result=result,
                validation=validation,
                selection={**selected.record.to_dict(), "cost_per_item": cost},
                comparisons=selected.comparisons,
                ensemble=ensemble,
                model_name=model_name,
            )
        )

    def _cost_per_item(self, chosen: Any, ensemble: Any) -> dict[str, Any] | None:
        """The baseline's, the chosen judge's and the ensemble's cost per judged item
        (:func:`cost_record`); ``None``, logged, if it cannot be worked out: a report's
        figure never costs the judge a finished compile found."""
        try:
            return cost_record(
                self.base,
                self.summaries,
                baseline=self.base.strategy,
                chosen=chosen.strategy,
                ensemble=None if ensemble is None else [m.strategy for m in ensemble.members],
                graph=self.graph,
            )
        except Exception as e:  # noqa: BLE001 - reported, never fatal
            log.warning("the judge's cost per item could not be worked out: %s", e)
            return None

    def _select(self) -> Selected:
        """The chooser's choice among the search's trials (less any barred)."""
        try:
            return self.chooser.select(
                self.search,
                self.base,
                self.base.with_strategy(self.student.strategy),
                self.search_val,
                self.confirm_val,
                split_note=self.split_note,
                summaries=self.summaries,
            )
        except LMUnavailable as e:
            raise self.journal.stopped(
                e, "choosing the judge after the search", self.search.n_evaluations
            ) from e

    def _hold_to_bound(self, selected: Selected) -> tuple[Selected, list[str]]:
        """Hold the chosen judge to ``max_attack_success`` (:func:`hold_to_bound`)."""
        baseline_key = strategy_key(self.base.with_strategy(self.student.strategy).strategy)

        def choose_again(key: str) -> Selected:
            self.chooser.barred[key] = "above max_attack_success"
            return self._select()

        return hold_to_bound(
            selected,
            self.search_val + (self.confirm_val or []),
            config=self.config,
            lm=self.lm,
            progress=self.progress,
            baseline_key=baseline_key,
            name_of=lambda judge: self._judge_name(judge, baseline_key),
            choose_again=choose_again,
            stopped=lambda e: self.journal.stopped(
                e, "checking the judge's robustness", self.search.n_evaluations
            ),
        )

    def _judge_name(self, judge: Any, baseline_key: str) -> str:
        """How the messages name a judge: the baseline, or its search trial (``#3``)."""
        key = strategy_key(judge.strategy)
        if key == baseline_key:
            return "the baseline"
        for t in self.search.trials:
            if strategy_key(self.base.with_strategy(t.strategy).strategy) == key:
                return f"strategy #{t.number + 1}"
        return "the chosen judge"


def _fmt(value: float | None) -> str:
    return "nan" if value is None or math.isnan(value) else f"{value:.4f}"
