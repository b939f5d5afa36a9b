"""Choosing the compiled judge after the search: finalists, confirmation, ensemble.

The rules are in :mod:`judgeopt.selection` (pure functions of numbers, ``docs/judge.md``,
"Choosing the judge"); :class:`Chooser` feeds them: it splits the scoring set, picks the
finalists among the search's trials, judges them and the baseline on the confirmation part
(reusing every stored judgement), applies the rule, compares the chosen judge with the
baseline and builds the prompt ensemble when asked. The pooled rules (``shrink``, ``lcb``,
``factor``, ``posterior``) are fed by :mod:`judgeopt.teleprompt._pooling`; the prior default,
returned when the rule keeps the baseline, by :mod:`judgeopt.teleprompt._prior_default`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..data import Record
from ..evaluate import EvalResult, compare
from ..judge import JudgeEnsemble
from ..lm import model_spec
from ..search import Search
from ..selection import SelectionConfig, choose, confirmation_split, veto
from ._choice import ChoiceRun, Selected, Step, lm_stats, trial_key
from ._config import OptimizerConfig
from ._ensembling import build_ensemble, stack_members
from ._guard import run_guard
from ._journal import strategy_key
from ._judging import Evaluator
from ._pooling import (
    POOLED_RULES,
    choose_pooled,
    pooled_note,
)
from ._prior_default import prior_fallback
from ._summary import PassedOver, StrategySummary

#: The note of a comparison whose judge is the baseline itself.
KEPT_BASELINE_NOTE = "the returned judge is the baseline itself: there is no gain to estimate"

__all__ = ["Chooser", "Selected", "lm_stats"]


class Chooser:
    """Chooses the compiled judge of one compile (``docs/judge.md``, "Choosing the judge").

    Args:
        config: The optimizer settings (``selection``, ``ensemble``, ``max_parse_failures``).
        evaluator: Judges the finalists and the baseline (reusing stored judgements).
        metric: What is compared.
    """

    def __init__(self, config: OptimizerConfig, evaluator: Evaluator, *, metric: str) -> None:
        self.config = config
        self.sel: SelectionConfig = config.selection
        self.evaluator = evaluator
        self.metric = metric
        #: Strategy keys the choice may not return, with why (a robustness bound failed).
        self.barred: dict[str, str] = {}

    # The split ----------------------------------------------------------------------------
    def split(
        self, val: list[Record], *, pairwise: bool, aspect: str, level: str
    ) -> tuple[list[Record], list[Record] | None, str | None]:
        """The search part, the confirmation part (``None``: rule ``best`` or a pooled rule,
        which search on everything) and, when the items are too few to confirm or a pooled
        rule cannot apply (:func:`pooled_note`), why."""
        sel = self.sel
        if sel.rule == "best" or sel.rule in POOLED_RULES:
            return val, None, pooled_note(sel.rule, self.metric)
        humans = [r.label if pairwise else r.scores[aspect] for r in val]
        grouped = any(r.group_id for r in val)
        groups = [r.group_id or r.id for r in val] if grouped else None
        n_units = len(set(groups)) if groups else len(val)
        too_few = (
            f"{len(val)} scoring items ({n_units} units) are too few to hold out "
            f"{sel.confirm_fraction:.0%} for confirmation (at least "
            f"{sel.min_confirm_items} confirmation items are needed)"
        )
        if n_units < 2 or len(val) * sel.confirm_fraction < sel.min_confirm_items:
            return val, None, too_few
        search_idx, confirm_idx = confirmation_split(
            humans, groups, fraction=sel.confirm_fraction, seed=sel.seed
        )
        confirm = [val[i] for i in confirm_idx]
        if (
            len(confirm) < sel.min_confirm_items
            or len(search_idx) < 3
            or (level == "group" and len({r.group_id or r.id for r in confirm}) < 3)
        ):
            return val, None, too_few
        return [val[i] for i in search_idx], confirm, None

    # The candidates -----------------------------------------------------------------------
    def finalists(
        self,
        search: Search,
        base: Any,
        n: int,
        unrated: Mapping[int, tuple[int, int]] | None = None,
        excluded: list[PassedOver] | None = None,
    ) -> list[Any]:
        """The ``n`` best distinct trials other than the baseline, by search score.

        A trial that gave no rating (unparsed or failed) for more than
        ``max_parse_failures`` of its search items (``unrated``: number -> (no rating,
        items)) is passed over: its score rests on the few answers that parsed (the rest
        are imputed), and as the compiled judge it would be reported as untrustworthy.
        The trials passed over before the last finalist are appended to ``excluded``.
        """
        limit = self.config.max_parse_failures
        trials = [t for t in search.trials if t.score is not None and math.isfinite(t.score)]
        trials.sort(key=lambda t: (-t.score, t.number))
        out, seen = [], {strategy_key(base.strategy)}
        for t in trials:
            key = strategy_key(base.with_strategy(t.strategy).strategy)
            if key in seen or key in self.barred:
                continue
            seen.add(key)
            bad, n_items = (unrated or {}).get(t.number, (0, 0))
            if n_items and bad / n_items > limit:
                if excluded is not None:
                    excluded.append(PassedOver(trial_key(t), t.score, bad, n_items))
                continue
            out.append(t)
            if len(out) == n:
                break
        return out

    def best_rated(
        self,
        search: Search,
        unrated: Mapping[int, tuple[int, int]],
        excluded: list[PassedOver],
    ) -> Any | None:
        """The trial with the best search score (the baseline's included) among those that
        rated at least ``1 - max_parse_failures`` of their items; ``None`` if none did. The
        trials passed over are appended to ``excluded``."""
        limit = self.config.max_parse_failures
        trials = sorted(
            (t for t in search.trials if t.score is not None and math.isfinite(t.score)),
            key=lambda t: (-t.score, t.number),
        )
        for t in trials:
            if strategy_key(t.strategy) in self.barred:
                continue
            bad, n_items = unrated.get(t.number, (0, 0))
            if not (n_items and bad / n_items > limit):
                return t
            excluded.append(PassedOver(trial_key(t), t.score, bad, n_items))
        return None

    @staticmethod
    def search_score(search: Search, base: Any, program: Any) -> float | None:
        """The best search score of ``program``'s strategy (``None``: not scored)."""
        key = strategy_key(program.strategy)
        scores = [
            t.score
            for t in search.trials
            if t.score is not None
            and math.isfinite(t.score)
            and strategy_key(base.with_strategy(t.strategy).strategy) == key
        ]
        return max(scores) if scores else None

    # The choice ---------------------------------------------------------------------------
    def select(
        self,
        search: Search,
        base: Any,
        baseline: Any,
        search_val: list[Record],
        confirm_val: list[Record] | None,
        *,
        split_note: str | None = None,
        summaries: Sequence[StrategySummary] = (),
    ) -> Selected:
        """Choose the compiled judge among the search's trials and ``baseline``.

        The rule's table (every strategy's stored ratings on the search items), the
        rule (:data:`judgeopt.selection.RULES`), its pick, the guard, the confirmation, the
        prior default and the ensemble, each recorded in the selection record.

        Args:
            search: The finished search.
            base: The compile's program (any strategy): the trials' judges are its copies.
            baseline: ``base`` with the student's strategy.
            search_val: The items the search scored on.
            confirm_val: The confirmation items (``None``: rule ``best`` or a pooled
                rule).
            split_note: Why there are no confirmation items although the rule asks for
                them (from :meth:`split`).
            summaries: The evaluation summaries (their unrated counts).
        """
        run = ChoiceRun(self, search, base, baseline, search_val, summaries)
        if confirm_val is None and self.sel.rule in POOLED_RULES and split_note is None:
            step = self._by_table(run)
        elif confirm_val is None:
            step = self._by_search(run, split_note)
        else:
            step = self._finalists_to_confirm(run, confirm_val)
        self._say_passed_over(run, step)
        if self.sel.guard:
            step = self._guard(run, step)
        judged_on = confirm_val if confirm_val is not None else search_val
        base_res = run.judged(baseline, f"{step.split}: baseline", judged_on)
        programs = [base.with_strategy(t.strategy) for t in step.finalists]
        results = [
            run.judged(prog, f"{step.split}: finalist {i + 1}", judged_on)
            for i, prog in enumerate(programs)
        ]
        labels = run.labels(judged_on)
        if confirm_val is not None:
            step = self._confirm(run, step, programs, labels, base_res, results, judged_on)
        step = self._prior_default(run, step, labels, judged_on)
        kept = strategy_key(step.chosen.strategy) == run.baseline_key
        comparison = compare(
            run.judged(step.chosen, f"{step.split}: chosen", judged_on),
            base_res,
            judged_on,
            metric=self.metric,
            n_resamples=self.sel.n_resamples,
            seed=self.sel.seed,
            note=KEPT_BASELINE_NOTE if kept else step.note,
        )
        ensemble = None
        if step.n_members:
            ensemble = self._ensemble(run, step, programs, results, base_res, judged_on)
        return run.finish(step, comparison, ensemble)

    def _by_table(self, run: ChoiceRun) -> Step:
        """A pooled rule: every strategy judged on all the validation items is compared with
        the baseline there (:mod:`judgeopt.teleprompt._pooling`)."""
        sel = self.sel
        pooled = choose_pooled(
            sel,
            run.table(),
            run.baseline,
            max_parse_failures=self.config.max_parse_failures,
            key_of=trial_key,
            gain_prior=sel.gain_prior_for(model_spec(self.evaluator.lm)),
        )
        run.record.outcome.update(pooled.record.to_dict())
        run.record.confirm_items = 0
        run.excluded.extend(pooled.excluded)
        n_fin = run.n_finalists
        finalists = (
            self.finalists(run.search, run.base, n_fin, run.unrated, run.excluded)
            if run.n_members
            else []
        )
        note = (
            "the items the rule chose the judge on: the gain is biased upward (the rule "
            "corrects for the number of strategies compared, not for this estimate); "
            "evaluate on held-out test items for an unbiased estimate"
        )
        return Step(pooled.chosen, finalists, "validation", note, run.n_members, None, pooled)

    def _by_search(self, run: ChoiceRun, split_note: str | None) -> Step:
        """Rule ``best`` (asked for, or too few items to confirm): the best search score
        among the strategies that rated enough of their items."""
        sel, record = self.sel, run.record
        record.rule = "best"
        record.confirm_items = 0
        best_trial = run.search.best_trial
        assert best_trial is not None
        top = self.best_rated(run.search, run.unrated, run.excluded)
        fallback = None
        if top is None:
            # Every strategy was passed over: the baseline is the fallback (docs/judge.md),
            # never the search's best, whose score rests on the few answers that parsed.
            chosen = run.baseline
            run.excluded[:] = [e for e in run.excluded if e.key not in run.baseline_keys]
            fallback = (
                "selection: every strategy with a search score gave no rating for more "
                f"than max_parse_failures={self.config.max_parse_failures:g} of its "
                "search items; the baseline is returned"
                + (
                    ""
                    if trial_key(best_trial) in run.baseline_keys
                    else f", not the search's best ({trial_key(best_trial)})"
                )
            )
        else:
            chosen = run.base.with_strategy(top.strategy)
            if trial_key(top) in run.baseline_keys and run.excluded:
                fallback = (
                    "selection: the baseline is returned: every strategy with a better "
                    "search score was passed over"
                )
        finalists = (
            ([] if top is None else [top])
            if run.n_members == 0
            else self.finalists(run.search, run.base, run.n_finalists, run.unrated, run.excluded)
        )
        if not finalists and top is not None:
            finalists = [top]
        if sel.rule != "best":
            outcome = (
                "the judge with the best validation score is returned, which is biased "
                "upward (winner's curse)"
                if fallback is None
                else "the rule falls back to the best validation score"
            )
            record.messages.append(f"selection: {split_note}; {outcome}")
        note = (
            "the items the search chose the judge on: the gain is biased upward; "
            "evaluate on held-out test items for an unbiased estimate"
        )
        return Step(chosen, finalists, "validation", note, run.n_members, fallback)

    def _finalists_to_confirm(self, run: ChoiceRun, confirm_val: list[Record]) -> Step:
        """Rules ``confirm`` and ``veto``: the finalists, judged on the confirmation items."""
        n = max(self.sel.compared, run.n_finalists)
        finalists = self.finalists(run.search, run.base, n, run.unrated, run.excluded)
        run.record.confirm_items = len(confirm_val)
        note = (
            "the confirmation items also chose among the finalists: the gain is "
            "somewhat optimistic; evaluate on held-out test items for an unbiased "
            "estimate"
        )
        return Step(run.baseline, finalists, "confirmation", note, run.n_members)

    def _say_passed_over(self, run: ChoiceRun, step: Step) -> None:
        """The messages of the strategies passed over, the fallback and the pooled rule."""
        record = run.record
        if run.excluded:
            unique = list({e.key: e for e in run.excluded}.values())
            record.excluded = unique
            listed = ", ".join(
                str(e).replace(e.key, f"{e.key} (the baseline)", 1)
                if e.key in run.baseline_keys
                else str(e)
                for e in unique
            )
            record.messages.append(
                f"selection: passed over {len(unique)} strateg{'y' if len(unique) == 1 else 'ies'}"
                f" with a high search score that gave no rating for more than "
                f"max_parse_failures={self.config.max_parse_failures:g} of their search "
                f"items (their score rests on the few answers that parsed): {listed}"
            )
        if step.fallback is not None:
            record.messages.append(step.fallback)
        if step.pooled is not None:
            record.messages.append(step.pooled.message)

    def _guard(self, run: ChoiceRun, step: Step) -> Step:
        """The cross-fitted guard of the ensemble or of rule best's pick."""
        check = run_guard(
            self.sel,
            run.table,
            n_items=len(run.search_val),
            ensemble=step.n_members,
            anchor=run.anchor,
            stack=run.stack,
            rule=run.record.rule,
            chose_baseline=strategy_key(step.chosen.strategy) == run.baseline_key,
            metric=self.metric,
        )
        run.record.guard = check.record
        run.record.messages.append(check.message)
        if check.caution is not None:
            run.record.messages.append(check.caution)
        if check.frugal_message is not None:
            run.record.messages.append(check.frugal_message)
        if check.single:  # frugal: rule best's judge does as well as the ensemble
            return replace(step, n_members=0)
        if check.passed:
            return step
        # No ensemble; rule best's own pick is refuted too.
        if run.record.rule == "best":
            return replace(
                step,
                chosen=run.baseline,
                finalists=[],
                fallback=step.fallback or check.message,
                n_members=0,
            )
        return replace(step, n_members=0)

    def _confirm(
        self,
        run: ChoiceRun,
        step: Step,
        programs: list[Any],
        labels: tuple[list[Any], list[str] | None],
        base_res: EvalResult,
        results: list[EvalResult],
        judged_on: list[Record],
    ) -> Step:
        """Rules ``confirm`` and ``veto`` decide on the confirmation items."""
        sel, record, finalists = self.sel, run.record, step.finalists
        if not programs:
            record.messages.append(
                "selection: every strategy other than the baseline was passed over (above); "
                "the baseline is kept"
                if run.excluded
                else "selection: the search found no strategy other than "
                "the baseline with a score; the baseline is kept"
            )
            return step
        humans, groups = labels
        confirm_n = min(sel.compared, len(programs))
        try:
            if sel.rule == "veto":
                base_score = self.search_score(run.search, run.base, run.baseline)
                record.baseline_search_score = base_score
                result = veto(
                    humans,
                    run.vector(base_res, judged_on),
                    run.vector(results[0], judged_on),
                    search_score=finalists[0].score,
                    baseline_search_score=base_score,
                    key=trial_key(finalists[0]),
                    method=self.metric,
                    groups=groups,
                    confidence=sel.confidence,
                    n_resamples=sel.n_resamples,
                    seed=sel.seed,
                )
            else:
                result = choose(
                    humans,
                    run.vector(base_res, judged_on),
                    [run.vector(r, judged_on) for r in results[:confirm_n]],
                    search_scores=[t.score for t in finalists[:confirm_n]],
                    keys=[trial_key(t) for t in finalists[:confirm_n]],
                    method=self.metric,
                    groups=groups,
                    confidence=sel.confidence,
                    n_resamples=sel.n_resamples,
                    seed=sel.seed,
                )
        except ValueError as e:
            record.messages.append(
                f"selection: the confirmation failed ({e}); the baseline is kept"
            )
            return step
        strategies = [run.base.with_strategy(t.strategy).strategy.as_dict() for t in finalists]
        record.outcome.update(result.to_dict(strategies))
        record.messages.append(f"selection: {result.reason}")
        if result.chosen is None:
            return step
        return replace(step, chosen=programs[result.chosen])

    def _prior_default(
        self,
        run: ChoiceRun,
        step: Step,
        labels: tuple[list[Any], list[str] | None],
        judged_on: list[Record],
    ) -> Step:
        """The prior default, returned instead of a kept baseline unless refuted."""
        change = self.sel.prior_for(model_spec(self.evaluator.lm))
        if change is None or strategy_key(step.chosen.strategy) != run.baseline_key:
            return step
        humans, groups = labels
        prior = prior_fallback(
            self.sel,
            change,
            run.baseline,
            judged=lambda program, desc: run.judged(program, desc, judged_on),
            vector=lambda res: run.vector(res, judged_on),
            humans=humans,
            groups=groups,
            metric=self.metric,
            split=step.split,
            forbid=self.config.forbid,
        )
        run.record.prior_fallback = prior.record
        run.record.messages.append(prior.message)
        return step if prior.program is None else replace(step, chosen=prior.program)

    def _ensemble(
        self,
        run: ChoiceRun,
        step: Step,
        programs: list[Any],
        results: list[EvalResult],
        base_res: EvalResult,
        judged_on: list[Record],
    ) -> JudgeEnsemble | None:
        """The prompt ensemble of the best strategies (anchored on the baseline, or its
        weights fitted on the items, if asked)."""
        n_members, anchor = step.n_members, run.anchor
        members, member_res, weights = programs[:n_members], results[:n_members], None
        if anchor or run.stack:
            # The baseline and the M best *other* strategies.
            others = [
                (p, r)
                for p, r in zip(programs, results, strict=True)
                if strategy_key(p.strategy) != run.baseline_key
            ][:n_members]
            members = [run.baseline, *(p for p, _ in others)]
            member_res = [base_res, *(r for _, r in others)]
        if run.stack:
            human, groups = run.labels(judged_on)
            stacked = stack_members(
                members,
                member_res,
                [run.vector(r, judged_on) for r in member_res],
                human,
                groups,
                ridge=run.stack,
                messages=run.record.messages,
            )
            if stacked is None:
                return None
            members, member_res, weights = stacked
        elif anchor:
            weights = [anchor] + [(1.0 - anchor) / max(1, len(others))] * len(others)
        else:
            # The M best by search score, the baseline among them when it ranks there
            # (as the bank's `ensemble` rule; a tie goes to the baseline).
            b_score = self.search_score(run.search, run.base, run.baseline)
            ranked = [] if b_score is None else [(b_score, run.baseline, base_res)]
            found = zip(step.finalists, programs, results, strict=True)
            ranked += [(t.score, p, r) for t, p, r in found]
            ranked = sorted(ranked, key=lambda x: -x[0])[:n_members]
            members, member_res = [p for _, p, _ in ranked], [r for _, _, r in ranked]
        return build_ensemble(
            members,
            member_res,
            judged_on,
            base_res,
            split=step.split,
            note=step.note,
            messages=run.record.messages,
            pairwise=run.base.task.mode == "pairwise",
            metric=self.metric,
            sel=self.sel,
            weights=weights,
            stack=run.stack,
        )
