"""Choosing the compiled judge so that the choice survives noise (the winner's curse).

A search evaluates many strategies on one validation set and keeps the best score. With a few
dozen items each score carries sampling noise of about +-0.2 (Spearman), so the maximum of
twenty noisy scores is biased upward: the "best" strategy is often one that was lucky on
those items, and on new items it can be worse than the baseline it replaced.

The default rule is ``rule="lcb"`` (below; the judgement bank's choice, ``docs/judge.md``,
"How many labels you need"). The rule that holds items out, ``rule="confirm"`` (the default
before the bank; ``docs/judge.md``, "Choosing the judge"):

1. **Split** the scoring set once, seeded, into a *search* part and a *confirmation* part
   (:func:`confirmation_split`): whole groups (items that share a source) go to one side,
   and the split is stratified by the human score, so both parts span the score range.
2. **Search** on the search part only, with the whole budget.
3. **Confirm**: judge the ``finalists`` best distinct strategies of the search (by their
   search score) and the baseline on the confirmation part, which the search never saw.
4. **Choose** (:func:`choose`): for every finalist, the paired bootstrap of its gain over the
   baseline on the confirmation items (both judges see the same resampled items, or whole
   groups for a group-level correlation). A finalist is *confirmed* when the one-sided lower
   bound of its gain at level ``confidence`` is above zero; among the confirmed finalists
   the one with the highest lower bound is chosen. When none is confirmed the baseline is
   returned, and the result says so (with the best finalist's gain and interval).

``rule="veto"`` (:func:`veto`) splits and searches the same way but trusts the search: it
returns the strategy with the best search score (the baseline when that is the baseline's)
unless the confirmation vetoes it, that is unless the one-sided upper bound at
``confidence`` of its paired gain over the baseline on the confirmation items is below zero.
Only that one strategy (and the baseline) is judged on the confirmation part. It returns
more gains than ``confirm`` and, when no strategy is truly better, more worse judges (the
simulation's table in ``docs/judge.md``); a judge it keeps with a negative confirmation gain
is reported as such.

``rule="shrink"``, ``rule="lcb"``, ``rule="factor"`` and ``rule="posterior"`` hold nothing
out: the search scores on every item, then the compile applies :func:`shrink_rule`,
:func:`lcb_rule` or :func:`factor_rule` (the pooled rules of ``_pooled``) or
:func:`posterior_rule` (with the model's :class:`GainPriorTable`) to every strategy judged on
all of them, the baseline among them.

With a *prior default* (``SelectionConfig.prior``, or ``priors`` per model), whatever the
rule, the compile returns the prior instead of the baseline when the rule keeps the baseline,
unless the items the rule compared on refute it (``prior_veto``; :func:`prior_rule` is the
same decision on numbers). :func:`posterior_rule` weighs every candidate's gain on the labels
against other tasks' gains for the same change (:class:`GainPrior`), a hierarchical form of
the same idea (``_cross_task_prior``).

So the confirm rule can only return a judge whose confirmed gain is positive. For one finalist whose
true gain is zero or negative, the chance that its lower bound clears zero is at most about
``1 - confidence``; with several finalists the chances add up (at most ``finalists * (1 -
confidence)``, usually far less because the finalists' errors are correlated).
:func:`simulate_selection` measures the probability of returning a truly worse judge, and
the expected true gain, by simulation against the rule that keeps the best validation score
(``rule="best"``, the paper's and the behaviour before this module); the defaults
(``confidence=0.8``, 3 finalists, half the items for confirmation) were chosen on those
simulations (``docs/judge.md``, "Choosing the judge", has the table).

The confirmation gain of the chosen judge is still an optimistic estimate (it was used to
choose); an unbiased estimate needs items that played no part in the choice: evaluate on a
held-out test set (``--test-data``).

Everything here is a pure function of numbers (numpy and :mod:`judgeopt.metrics`).

The package's modules: ``_config`` (:class:`SelectionConfig`), ``_split``
(:func:`confirmation_split`, :func:`blocked_split`), ``_rule_result`` (:class:`Finalist`,
:class:`SelectionResult`), ``_rules`` (the decision rules :func:`choose` and :func:`veto`),
``_table`` (a whole table of judgements: :class:`RuleInput`, its scores, a rule's
:class:`Pick`), ``_pooled`` (the rules on such a table), ``_cross_task_prior`` (the rules
that read other tasks' results), ``_registry`` (:data:`RULES`: every rule by name, as the
compile and the judgement bank both read them) and
``_simulation`` (:func:`simulate_selection`).
"""

from ._config import GainPriorChange, GainPriorTable, SelectionConfig, default_confidence
from ._config import Rule as Rule
from ._cross_task_prior import GainPrior, change_from, change_key, posterior_rule, prior_rule
from ._pooled import (
    anchored_rule,
    best_rule,
    confirm_rule,
    crossfit_bound,
    crossfit_gain,
    ensemble_rule,
    factor_rule,
    frugal,
    guarded,
    lcb_rule,
    shrink_rule,
    stack_rule,
    veto_rule,
    with_fallback,
)
from ._registry import RULES, RuleSpec, compile_rule, table_rules
from ._rule_result import Finalist, SelectionResult
from ._rules import choose, veto
from ._simulation import _judge_outputs as _judge_outputs  # the tests draw simulated judges
from ._simulation import simulate_selection
from ._split import blocked_split, confirmation_split
from ._table import (
    Pick,
    RuleInput,
    bootstrap_scores,
    column_scores,
    impute,
    paired_gain_resamples,
)

__all__ = [
    "RULES",
    "Pick",
    "RuleInput",
    "RuleSpec",
    "compile_rule",
    "table_rules",
    "best_rule",
    "bootstrap_scores",
    "GainPrior",
    "GainPriorChange",
    "GainPriorTable",
    "change_from",
    "change_key",
    "column_scores",
    "confirm_rule",
    "crossfit_bound",
    "crossfit_gain",
    "anchored_rule",
    "ensemble_rule",
    "factor_rule",
    "frugal",
    "guarded",
    "impute",
    "lcb_rule",
    "paired_gain_resamples",
    "posterior_rule",
    "prior_rule",
    "shrink_rule",
    "stack_rule",
    "veto_rule",
    "with_fallback",
    "Finalist",
    "SelectionConfig",
    "SelectionResult",
    "choose",
    "blocked_split",
    "confirmation_split",
    "default_confidence",
    "simulate_selection",
    "veto",
]
