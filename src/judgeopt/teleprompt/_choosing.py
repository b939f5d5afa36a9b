"""Choosing the compiled judge after the search: finalists, confirmation, ensemble.

The rules are in :mod:`judgeopt.selection` (pure functions of numbers, ``docs/judge.md``,
"Choosing the judge"); :class:`Chooser` feeds them: it splits the scoring set, picks the
finalists among the search's trials, judges them and the baseline on the confirmation part
(reusing every stored judgement), applies the rule, compares the chosen judge with the
baseline and builds the prompt ensemble when asked. The pooled rules (``shrink``, ``lcb``,
``factor``, ``posterior``) are fed by :mod:`judgeopt.teleprompt._pooling`; the prior default,
returned when the rule keeps the baseline, by :mod:`judgeopt.teleprompt._prior`.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..data import Record
from ..evaluate import EvalResult, ItemResult, compare, correct, item_predictions
from ..judge import JudgeEnsemble
from ..lm import model_spec
from ..search import SearchStrategy
from ..selection import SelectionConfig, choose, confirmation_split, veto
from ._config import OptimizerConfig
from ._ensembling import build_ensemble
from ._guard import run_guard
from ._journal import strategy_key
from ._judging import Evaluator
from ._pooling import POOLED_RULES, ValidationTable, choose_pooled, pooled_note, validation_table
from ._prior import prior_fallback

__all__ = ["Chooser", "Selected", "lm_stats"]


def lm_stats(lm: Any) -> dict[str, int]:
    """The LM's call and token counters (zeros for an LM without ``stats()``)."""
    fn = getattr(lm, "stats", None)
    st = fn() if callable(fn) else None
    keys = ("calls", "cache_hits", "prompt_tokens", "completion_tokens")
    return {k: int(getattr(st, k, 0) or 0) for k in keys}


def trial_key(trial: Any) -> str:
    """How the compile names a search trial in its messages and its selection record
    (``#1`` is the first, as in the summary table; the journal's numbers start at 0)."""
    return f"#{trial.number + 1}"


def in_order(res: EvalResult, records: Sequence[Record]) -> list[ItemResult]:
    """The items of ``res`` in the order of ``records``."""
    by_id = {i.id: i for i in res.items}
    return [by_id[r.id] for r in records]


@dataclass(frozen=True)
class Selected:
    """The outcome of :meth:`Chooser.select`.

    Attributes:
        judge: The chosen judge (a fresh copy, without compile results).
        record: How it was chosen (the ``selection`` of the compile's report).
        comparisons: Split name -> the chosen judge against the baseline.
        ensemble: The prompt ensemble, when one was asked for and could be built.
        warn: Whether the record's messages are warnings (a rule fell back, or the chosen
            judge scores below the baseline).
    """

    judge: Any
    record: dict[str, Any]
    comparisons: dict[str, dict[str, Any]]
    ensemble: JudgeEnsemble | None
    warn: bool


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
        search: SearchStrategy,
        base: Any,
        n: int,
        unrated: Mapping[int, tuple[int, int]] | None = None,
        excluded: list[dict[str, Any]] | None = None,
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
            if key in seen:
                continue
            seen.add(key)
            bad, n_items = (unrated or {}).get(t.number, (0, 0))
            if n_items and bad / n_items > limit:
                if excluded is not None:
                    excluded.append(
                        {
                            "key": trial_key(t),
                            "search_score": t.score,
                            "unrated": bad,
                            "n": n_items,
                        }
                    )
                continue
            out.append(t)
            if len(out) == n:
                break
        return out

    def best_rated(
        self,
        search: SearchStrategy,
        unrated: Mapping[int, tuple[int, int]],
        excluded: list[dict[str, Any]],
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
            bad, n_items = unrated.get(t.number, (0, 0))
            if not (n_items and bad / n_items > limit):
                return t
            excluded.append(
                {"key": trial_key(t), "search_score": t.score, "unrated": bad, "n": n_items}
            )
        return None

    @staticmethod
    def search_score(search: SearchStrategy, base: Any, program: Any) -> float | None:
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
        search: SearchStrategy,
        base: Any,
        baseline: Any,
        search_val: list[Record],
        confirm_val: list[Record] | None,
        *,
        split_note: str | None = None,
        summaries: Sequence[Mapping[str, Any]] = (),
    ) -> Selected:
        """Choose the compiled judge among the search's trials and ``baseline``.

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
        sel, metric, evaluator = self.sel, self.metric, self.evaluator
        best_trial = search.best_trial
        assert best_trial is not None
        stats0 = lm_stats(evaluator.lm)
        t0 = time.perf_counter()
        anchor = self.config.ensemble_anchor
        n_members = self.config.ensemble if self.config.ensemble >= (1 if anchor else 2) else 0
        # An anchored ensemble takes the n best strategies other than the baseline: one
        # finalist more, in case the baseline is among the best.
        n_fin = n_members + 1 if anchor and n_members else n_members
        record: dict[str, Any] = {
            "rule": sel.rule,
            **sel.model_dump(mode="json"),
            "search_items": len(search_val),
            "messages": [],
        }
        comparisons: dict[str, dict[str, Any]] = {}
        unrated = {
            int(s["number"]): (
                int(s.get("parse_failures") or 0) + int(s.get("call_failures") or 0),
                int(s.get("n") or 0),
            )
            for s in summaries
        }
        excluded: list[dict[str, Any]] = []
        baseline_key = strategy_key(baseline.strategy)
        baseline_keys = {
            trial_key(t)
            for t in search.trials
            if strategy_key(base.with_strategy(t.strategy).strategy) == baseline_key
        }
        fallback = None
        pooled = None

        @functools.cache
        def table() -> ValidationTable:
            """Every strategy's stored ratings on the search's items (built once)."""
            return validation_table(
                evaluator,
                search,
                base,
                baseline,
                search_val,
                unrated=unrated,
                max_parse_failures=self.config.max_parse_failures,
                key_of=trial_key,
                seed=sel.seed,
            )

        if confirm_val is None and sel.rule in POOLED_RULES and split_note is None:
            # A pooled rule: every strategy judged on all the validation items is compared
            # with the baseline there (judgeopt.teleprompt._pooling).
            pooled = choose_pooled(
                sel,
                table(),
                baseline,
                max_parse_failures=self.config.max_parse_failures,
                key_of=trial_key,
                gain_prior=sel.gain_prior_for(model_spec(evaluator.lm)),
            )
            record.update(pooled.record)
            record["confirm_items"] = 0
            excluded.extend(pooled.excluded)
            chosen = pooled.chosen
            finalists = self.finalists(search, base, n_fin, unrated, excluded) if n_members else []
            judged_on, split = search_val, "validation"
            note = (
                "the items the rule chose the judge on: the gain is biased upward (the rule "
                "corrects for the number of strategies compared, not for this estimate); "
                "evaluate on held-out test items for an unbiased estimate"
            )
        elif confirm_val is None:
            # Rule "best" (asked for, or too few items to confirm): the best search score
            # among the strategies that rated enough of their items.
            record["rule"] = "best"
            record["confirm_items"] = 0
            if sel.rule != "best":
                record["messages"].append(
                    f"selection: {split_note}; the judge with the best validation score "
                    "is returned, which is biased upward (winner's curse)"
                )
            top = self.best_rated(search, unrated, excluded)
            if top is None:
                # Every strategy was passed over: the baseline is the fallback
                # (docs/judge.md), never the search's best, whose score rests on the few
                # answers that parsed.
                chosen = baseline
                excluded = [e for e in excluded if e["key"] not in baseline_keys]
                fallback = (
                    "selection: every strategy with a search score gave no rating for more "
                    f"than max_parse_failures={self.config.max_parse_failures:g} of its "
                    "search items; the baseline is returned"
                    + (
                        ""
                        if trial_key(best_trial) in baseline_keys
                        else f", not the search's best ({trial_key(best_trial)})"
                    )
                )
            else:
                chosen = base.with_strategy(top.strategy)
                if trial_key(top) in baseline_keys and excluded:
                    fallback = (
                        "selection: the baseline is returned: every strategy with a better "
                        "search score was passed over"
                    )
            finalists = (
                ([] if top is None else [top])
                if n_members == 0
                else self.finalists(search, base, n_fin, unrated, excluded)
            )
            if not finalists and top is not None:
                finalists = [top]
            judged_on, split = search_val, "validation"
            note = (
                "the items the search chose the judge on: the gain is biased upward; "
                "evaluate on held-out test items for an unbiased estimate"
            )
        else:
            finalists = self.finalists(search, base, max(sel.compared, n_fin), unrated, excluded)
            record["confirm_items"] = len(confirm_val)
            judged_on, split = confirm_val, "confirmation"
            note = (
                "the confirmation items also chose among the finalists: the gain is "
                "somewhat optimistic; evaluate on held-out test items for an unbiased "
                "estimate"
            )
            chosen = baseline
        if excluded:
            unique = list({e["key"]: e for e in excluded}.values())
            record["excluded"] = unique
            listed = ", ".join(
                f"{e['key']}{' (the baseline)' if e['key'] in baseline_keys else ''} "
                f"({e['unrated']} of {e['n']}; search score {e['search_score']:.3f})"
                for e in unique
            )
            record["messages"].append(
                f"selection: passed over {len(unique)} strateg{'y' if len(unique) == 1 else 'ies'}"
                f" with a high search score that gave no rating for more than "
                f"max_parse_failures={self.config.max_parse_failures:g} of their search "
                f"items (their score rests on the few answers that parsed): {listed}"
            )
        if fallback is not None:
            record["messages"].append(fallback)
        if pooled is not None:
            record["messages"].append(pooled.message)
        if sel.guard:
            check = run_guard(
                sel,
                table,
                n_items=len(search_val),
                ensemble=n_members,
                anchor=anchor,
                rule=record["rule"],
                chose_baseline=strategy_key(chosen.strategy) == baseline_key,
                metric=metric,
            )
            record["guard"] = check.record
            record["messages"].append(check.message)
            if not check.passed:  # no ensemble; rule best's own pick is refuted too
                n_members = 0
                if record["rule"] == "best":
                    chosen, finalists, fallback = baseline, [], fallback or check.message
        pairwise = base.task.mode == "pairwise"
        level = evaluator.level
        results: dict[str, EvalResult] = {}

        def judged(program: Any, desc: str) -> EvalResult:
            key = strategy_key(program.strategy)
            if key not in results:
                results[key] = evaluator.stored(program, judged_on, desc=desc)
            return results[key]

        base_res = judged(baseline, f"{split}: baseline")
        fin_progs = [base.with_strategy(t.strategy) for t in finalists]
        fin_res = [judged(p, f"{split}: finalist {i + 1}") for i, p in enumerate(fin_progs)]
        humans: list[Any] = [r.label if pairwise else r.scores[base.aspect] for r in judged_on]
        groups = [r.group_id or r.id for r in judged_on] if level == "group" else None

        def vector(res: EvalResult) -> list[float]:
            items = in_order(res, judged_on)
            return correct(items) if pairwise else item_predictions(items)

        if confirm_val is not None and fin_progs:
            confirm_n = min(sel.compared, len(fin_progs))
            try:
                if sel.rule == "veto":
                    base_score = self.search_score(search, base, baseline)
                    record["baseline_search_score"] = base_score
                    result = veto(
                        humans,
                        vector(base_res),
                        vector(fin_res[0]),
                        search_score=finalists[0].score,
                        baseline_search_score=base_score,
                        key=trial_key(finalists[0]),
                        method=metric,
                        groups=groups,
                        confidence=sel.confidence,
                        n_resamples=sel.n_resamples,
                        seed=sel.seed,
                    )
                else:
                    result = choose(
                        humans,
                        vector(base_res),
                        [vector(r) for r in fin_res[:confirm_n]],
                        search_scores=[t.score for t in finalists[:confirm_n]],
                        keys=[trial_key(t) for t in finalists[:confirm_n]],
                        method=metric,
                        groups=groups,
                        confidence=sel.confidence,
                        n_resamples=sel.n_resamples,
                        seed=sel.seed,
                    )
            except ValueError as e:
                record["messages"].append(
                    f"selection: the confirmation failed ({e}); the baseline is kept"
                )
                result = None
            if result is not None:
                record.update(result.to_dict())
                for f, t in zip(record["finalists"], finalists, strict=False):
                    f["strategy"] = base.with_strategy(t.strategy).strategy.as_dict()
                record["messages"].append(f"selection: {result.reason}")
                if result.chosen is not None:
                    chosen = fin_progs[result.chosen]
        elif confirm_val is not None:
            record["messages"].append(
                "selection: every strategy other than the baseline was passed over (above); "
                "the baseline is kept"
                if excluded
                else "selection: the search found no strategy other than "
                "the baseline with a score; the baseline is kept"
            )
        change = sel.prior_for(model_spec(evaluator.lm))
        if change is not None and strategy_key(chosen.strategy) == baseline_key:
            prior = prior_fallback(
                sel,
                change,
                baseline,
                judged=judged,
                vector=vector,
                humans=humans,
                groups=groups,
                metric=metric,
                split=split,
                forbid=self.config.forbid,
            )
            record["prior_fallback"] = prior.record
            record["messages"].append(prior.message)
            if prior.program is not None:
                chosen = prior.program
        chosen_res = judged(chosen, f"{split}: chosen")
        comparison = compare(
            chosen_res,
            base_res,
            judged_on,
            metric=metric,
            n_resamples=sel.n_resamples,
            seed=sel.seed,
            note=note,
        )
        comparisons[split] = comparison.to_dict()
        ensemble = None
        if n_members:
            members, member_res, weights = fin_progs[:n_members], fin_res[:n_members], None
            if anchor:
                others = [
                    (p, r)
                    for p, r in zip(fin_progs, fin_res, strict=True)
                    if strategy_key(p.strategy) != baseline_key
                ][:n_members]
                members = [baseline, *(p for p, _ in others)]
                member_res = [base_res, *(r for _, r in others)]
                weights = [anchor] + [(1.0 - anchor) / max(1, len(others))] * len(others)
            else:
                # The M best by search score, the baseline among them when it ranks there
                # (as the bank's `ensemble` rule; a tie goes to the baseline).
                b_score = self.search_score(search, base, baseline)
                ranked = [] if b_score is None else [(b_score, baseline, base_res)]
                found = zip(finalists, fin_progs, fin_res, strict=True)
                ranked += [(t.score, p, r) for t, p, r in found]
                ranked = sorted(ranked, key=lambda x: -x[0])[:n_members]
                members, member_res = [p for _, p, _ in ranked], [r for _, _, r in ranked]
            ensemble = build_ensemble(
                members,
                member_res,
                judged_on,
                base_res,
                split=split,
                note=note,
                record=record,
                pairwise=pairwise,
                metric=metric,
                sel=sel,
                weights=weights,
            )
        stats1 = lm_stats(evaluator.lm)
        record["cost"] = {k: stats1[k] - stats0[k] for k in stats0}
        record["cost"]["seconds"] = round(time.perf_counter() - t0, 3)
        compiled = chosen.with_strategy(chosen.strategy)
        warn = comparison.gain is not None and comparison.gain < 0
        if warn:
            record["messages"].append(
                f"selection: the returned judge scores {comparison.gain:+.3f} against the "
                f"baseline on the {split} items"
            )
        warn = warn or fallback is not None or record["rule"] != sel.rule
        return Selected(compiled, record, comparisons, ensemble, warn)
