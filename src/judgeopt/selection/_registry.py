"""The selection rules by name: one registry that the compile and the judgement bank both read.

A rule is one :class:`RuleSpec`: its function of a :class:`~judgeopt.selection.RuleInput` (a
table of every candidate's ratings, the baseline's among them, and the human scores), the
grid of constants the bank replays it at, what it needs besides the table (the prior default
strategy, other tasks' gain priors) and, for a rule a compile runs on its validation table,
how the compile's :class:`~judgeopt.selection.SelectionConfig` sets its constants
(:attr:`RuleSpec.constants`), how the bank's setting becomes those fields
(:attr:`RuleSpec.config`) and how the compile names it in its message
(:attr:`RuleSpec.summary`).

Compositions are rules too: a rule with the prior default as its fallback (``+prior``,
``+prior(veto)``), a cross-fitted guard around an ensemble (``+guard``, ``+bound`` on the
guard's lower bound, ``+repeat`` on its mean over several halvings); they are built from
:func:`~judgeopt.selection.with_fallback`, :func:`~judgeopt.selection.prior_rule` and
:func:`~judgeopt.selection.guarded`.

A new rule is one entry of :data:`RULES` (and, for the compile to run it on its validation
table, a ``constants`` and a ``summary``; the :data:`~judgeopt.selection.Rule` names of the
configuration must list it). ``benchmarks/tests/test_rule_registry.py`` checks, for every
rule a compile runs, that the compile's binding and the bank's pick the same judges on the
same tables.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._cross_task_prior import GainPrior, posterior_rule, prior_rule
from ._pooled import (
    RuleFn,
    anchored_rule,
    best_rule,
    confirm_rule,
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
from ._split import confirmation_split
from ._table import Pick, RuleInput

if TYPE_CHECKING:
    from ._config import SelectionConfig

__all__ = ["RULES", "RuleSpec", "compile_rule", "table_rules"]


@dataclass(frozen=True)
class RuleSpec:
    """A selection rule: its function, its constants and what it needs.

    Attributes:
        fn: ``fn(data, **constants)`` -> :class:`~judgeopt.selection.Pick`.
        grid: The constants the bank replays it at (each combination is one setting, chosen
            leave-one-pair-out).
        uses_prior: ``fn`` takes the prior default strategy (``strategy=``).
        uses_gain_prior: ``fn`` takes other tasks' :class:`~judgeopt.selection.GainPrior`
            (``prior=``).
        description: What it does, in one line (the bank's tables print it).
        constants: For a rule a compile runs on its validation table: the constants of
            ``fn`` that a :class:`~judgeopt.selection.SelectionConfig` sets (``None``: the
            compile does not run it on a table).
        config: The :class:`~judgeopt.selection.SelectionConfig` fields (and the compile's
            ``ensemble``, ``ensemble_anchor``, ``ensemble_stack``) that run the rule at one
            of its settings: ``config(setting)`` -> ``{"selection": {...}, ...}`` (``None``:
            not a compile rule; ``ValueError`` for a setting a compile cannot run).
        summary: How the compile names the rule in its message: ``summary(config, n)`` for
            ``n`` strategies compared.
    """

    fn: Callable[..., Pick]
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    uses_prior: bool = False
    uses_gain_prior: bool = False
    description: str = ""
    constants: Callable[[SelectionConfig], dict[str, Any]] | None = None
    config: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    summary: Callable[[SelectionConfig, int], str] | None = None

    def settings(self) -> list[dict[str, Any]]:
        """Every combination of the grid's constants ({} when there are none)."""
        keys = sorted(self.grid)
        return [
            dict(zip(keys, v, strict=True))
            for v in itertools.product(*(self.grid[k] for k in keys))
        ]

    def bind(
        self,
        setting: Mapping[str, Any] | None = None,
        *,
        strategy: Mapping[str, Any] | None = None,
        prior: GainPrior | None = None,
        **fixed: Any,
    ) -> RuleFn:
        """The rule as a function of a table alone, at ``setting`` (and ``fixed``
        constants), with the prior default or gain prior it needs."""
        kwargs = {**dict(setting or {}), **fixed}
        if self.uses_prior:
            kwargs["strategy"] = strategy
        if self.uses_gain_prior:
            kwargs["prior"] = prior

        def rule(data: RuleInput) -> Pick:
            return self.fn(data, **kwargs)

        return rule


def table_rules() -> tuple[str, ...]:
    """The rules a compile runs on its whole validation table (no items held out)."""
    return tuple(name for name, spec in RULES.items() if spec.constants is not None)


def compile_rule(
    sel: SelectionConfig, *, gain_prior: GainPrior | None = None
) -> tuple[str, RuleSpec, RuleFn]:
    """The rule a compile applies to its validation table under ``sel``.

    ``posterior`` without a gain prior for the compile's model is ``shrink`` (the prior
    estimated from the labels alone).

    Returns:
        ``(the rule applied, its spec, the rule as a function of the table)``.

    Raises:
        ValueError: When ``sel.rule`` is not a rule a compile runs on its table.
    """
    name = "shrink" if sel.rule == "posterior" and gain_prior is None else sel.rule
    spec = RULES.get(name)
    if spec is None or spec.constants is None:
        raise ValueError(
            f"rule {sel.rule!r} does not choose on the whole validation table; those that "
            f"do: {list(table_rules())!r}"
        )
    return name, spec, spec.bind(spec.constants(sel), prior=gain_prior)


# ------------------------------------------------------------------------ the compositions


def _shrink_or_prior(data: RuleInput, *, strategy: Mapping[str, Any] | None, margin: float) -> Pick:
    return with_fallback(
        lambda d: shrink_rule(d, margin=margin), lambda d: prior_rule(d, strategy=strategy)
    )(data)


def _confirm(data: RuleInput) -> Pick:
    """:func:`confirm_rule` with the compile's constants, once per split (the rules that
    build on it reuse the pick); 500 bootstrap resamples instead of the compile's 2000
    (the bound moves by about 0.005)."""
    return data.memo("confirm-pick", lambda: confirm_rule(data, n_resamples=500))


def _veto(data: RuleInput) -> Pick:
    return veto_rule(data, n_resamples=500)


def _confirm_or_prior(data: RuleInput, *, strategy: Mapping[str, Any] | None) -> Pick:
    return with_fallback(_confirm, lambda d: prior_rule(d, strategy=strategy))(data)


def _confirm_or_vetoed_prior(data: RuleInput, *, strategy: Mapping[str, Any] | None) -> Pick:
    """The compile's ``confirm`` with a ``prior`` and ``prior_veto``: the prior, judged on
    the confirmation half, unless its paired gain's one-sided 80 % upper bound there is
    below 0."""
    _, conf = confirmation_split(
        data.human,
        data.split_groups if data.split_groups is not None else data.groups,
        fraction=0.5,
        seed=data.seed,
    )
    return with_fallback(
        _confirm,
        lambda d: prior_rule(d, strategy=strategy, veto_confidence=0.8, items=conf),
    )(data)


def _shrink_or_vetoed_prior(
    data: RuleInput, *, strategy: Mapping[str, Any] | None, margin: float
) -> Pick:
    """``shrink`` with a vetoed prior (judged on all the validation items, as the compile's
    pooled rules compare)."""
    return with_fallback(
        lambda d: shrink_rule(d, margin=margin),
        lambda d: prior_rule(d, strategy=strategy, veto_confidence=0.8),
    )(data)


def _guarded_ensemble(data: RuleInput, *, m: int, margin: float = 0.0) -> Pick:
    rule = guarded(lambda d: ensemble_rule(d, m=m), margin=margin, key=f"crossfit-ensemble-{m}")
    return rule(data)


def _guarded_stack(
    data: RuleInput,
    *,
    ridge: float,
    m: int = 0,
    margin: float = 0.0,
    nonneg: bool = False,
    alpha: float | None = None,
    repeats: int = 1,
) -> Pick:
    """The stack (``m`` 0: of every candidate; ``nonneg``: no negative weight), kept only
    when its cross-fitted gain over the baseline is above ``margin``: the gain on one
    halving (``stack+guard``), its one-sided ``1 - alpha`` lower bound
    (:func:`~judgeopt.selection.crossfit_bound`, 500 resamples: ``stack+bound``), or its
    mean over ``repeats`` seeded halvings (``stack+repeat``)."""
    stack, key = _stack(ridge, m, nonneg)
    rule = guarded(stack, margin=margin, key=key, alpha=alpha, n_resamples=500, repeats=repeats)
    return rule(data)


def _stack(ridge: float, m: int, nonneg: bool) -> tuple[RuleFn, str]:
    """The stack rule at these constants (``m`` 0: every candidate), and the memo key of
    its cross-fitted gain (shared by its guard and ``frugal``)."""
    size = None if m == 0 else m

    def stack(d: RuleInput) -> Pick:
        return stack_rule(d, ridge=ridge, m=size, nonneg=nonneg)

    return stack, f"crossfit-stack-{m}-{ridge}-{nonneg}"


def _frugal_stack(
    data: RuleInput,
    *,
    ridge: float,
    m: int = 0,
    margin: float = 0.0,
    nonneg: bool = False,
    tolerance: float = 0.0,
) -> Pick:
    """``stack+guard``, or the single best judge by validation score when the stack would
    ship and the single judge's cross-fitted gain is above the margin and at least the
    stack's minus ``tolerance`` (one call per item instead of one per member)."""
    stack, key = _stack(ridge, m, nonneg)
    rule = frugal(
        guarded(stack, margin=margin, key=key),
        best_rule,
        tolerance=tolerance,
        margin=margin,
        keys=(key, "crossfit-best"),
    )
    return rule(data)


def _guarded_anchored(data: RuleInput, *, m: int, w: float, margin: float = 0.0) -> Pick:
    rule = guarded(
        lambda d: anchored_rule(d, m=m, w=w), margin=margin, key=f"crossfit-anchored-{m}-{w}"
    )
    return rule(data)


# ------------------------------------------------------------- what a compile reads of them


def _margin_above(sel: SelectionConfig) -> str:
    return f" above {sel.margin:g}" if sel.margin else ""


def _only(rule: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    return lambda setting: {"selection": {"rule": rule}}


def _guard(setting: Mapping[str, Any]) -> dict[str, Any]:
    """The compile's guard at the setting's margin, under rule ``best`` (a refuted ensemble
    returns the baseline)."""
    margin = float(setting.get("margin", 0.0))
    return {"rule": "best", "guard": True} | ({"guard_margin": margin} if margin else {})


def _stack_config(setting: Mapping[str, Any]) -> dict[str, Any]:
    """``stack+guard`` as a compile runs it: ``--ensemble m --ensemble-stack ridge --guard``.
    The compile stacks the baseline and the ``m`` best others without negative weights;
    the bank's stack of every candidate, or one with negative weights, it cannot export."""
    m, nonneg = int(setting.get("m", 0)), bool(setting.get("nonneg", False))
    if m < 1 or not nonneg:
        raise ValueError(
            f"stack+guard at m={m}, nonneg={nonneg}: a compile stacks the baseline and the "
            "m best others with no negative weight (m >= 1 and nonneg true)"
        )
    return {"selection": _guard(setting), "ensemble": m, "ensemble_stack": float(setting["ridge"])}


def _frugal_config(setting: Mapping[str, Any]) -> dict[str, Any]:
    """``stack+guard+frugal`` as a compile runs it: ``stack+guard``'s settings with
    ``[selection] frugal`` at the tolerance."""
    made = _stack_config(setting)
    made["selection"] = {**made["selection"], "frugal": float(setting.get("tolerance", 0.0))}
    return made


#: The rules by name (``benchmarks/bank_rules.py`` replays them all; a compile runs those
#: with a ``config``).
RULES: dict[str, RuleSpec] = {
    "baseline": RuleSpec(
        lambda d: Pick((d.baseline,), reason="baseline"), description="always the MT-Bench baseline"
    ),
    "best": RuleSpec(
        best_rule, description="best validation score (the paper's rule)", config=_only("best")
    ),
    "confirm": RuleSpec(
        _confirm,
        description="today's default: search half, 3 finalists confirmed at 0.8",
        config=_only("confirm"),
    ),
    "veto": RuleSpec(
        _veto,
        description="search half's best unless the confirmation half vetoes it",
        config=_only("veto"),
    ),
    "shrink": RuleSpec(
        shrink_rule,
        {"margin": (0.0, 0.02, 0.05)},
        description="empirical-Bayes shrunk paired gain on all items",
        constants=lambda sel: {"n_resamples": sel.n_resamples, "margin": sel.margin},
        config=lambda s: {"selection": {"rule": "shrink", "margin": s.get("margin", 0.0)}},
        summary=lambda sel, n: "empirical-Bayes shrunk gain over the baseline" + _margin_above(sel),
    ),
    "lcb": RuleSpec(
        lcb_rule,
        {"alpha": (0.5, 0.2, 0.05)},
        description="best Bonferroni lower bound of the paired gain",
        constants=lambda sel: {"alpha": 1.0 - sel.confidence, "n_resamples": sel.n_resamples},
        config=lambda s: {
            "selection": {"rule": "lcb", "confidence": 1.0 - float(s.get("alpha", 0.2))}
        },
        summary=lambda sel, n: (
            f"one-sided {sel.confidence:.0%} lower bound of the gain over the baseline, "
            + (f"corrected for {n} comparisons" if n > 1 else "one comparison, uncorrected")
        ),
    ),
    "factor": RuleSpec(
        factor_rule,
        {"ridge": (0.3, 1.0, 3.0)},
        description="factor-level pooling (ridge on factor values)",
        constants=lambda sel: {"ridge": sel.ridge, "n_resamples": sel.n_resamples},
        config=lambda s: {"selection": {"rule": "factor", "ridge": s.get("ridge", 1.0)}},
        summary=lambda sel, n: "gain over the baseline pooled by factor value",
    ),
    "ensemble": RuleSpec(
        ensemble_rule,
        {"m": (2, 3, 5)},
        description="mean of the m best z-normalised judges",
        config=lambda s: {"selection": {"rule": "best"}, "ensemble": int(s["m"])},
    ),
    "anchored": RuleSpec(
        anchored_rule,
        {"m": (2, 3, 5), "w": (0.34, 0.5, 0.67)},
        description="the baseline at weight w with the m best others (z-normalised): an "
        "ensemble hedged toward the baseline",
        config=lambda s: {
            "selection": {"rule": "best"},
            "ensemble": int(s["m"]),
            "ensemble_anchor": float(s["w"]),
        },
    ),
    "ensemble+guard": RuleSpec(
        _guarded_ensemble,
        {"m": (2, 3, 5), "margin": (0.0, 0.05, 0.1)},
        description="the ensemble, kept only when it beats the baseline cross-fitted (chosen "
        "on each validation half, scored on the other) by more than the margin; else the "
        "baseline",
        config=lambda s: {"selection": _guard(s), "ensemble": int(s["m"])},
    ),
    "anchored+guard": RuleSpec(
        _guarded_anchored,
        {"m": (2, 3, 5), "w": (0.34, 0.5, 0.67), "margin": (0.0, 0.05, 0.1)},
        description="the anchored ensemble, kept only when it beats the baseline "
        "cross-fitted by more than the margin; else the baseline",
        config=lambda s: {
            "selection": _guard(s),
            "ensemble": int(s["m"]),
            "ensemble_anchor": float(s["w"]),
        },
    ),
    "stack": RuleSpec(
        stack_rule,
        {"ridge": (1.0, 10.0)},
        description="ridge stacking of every judge's z-normalised ratings",
    ),
    "stack+guard": RuleSpec(
        _guarded_stack,
        {
            "m": (0, 3, 5),
            "ridge": (1.0, 10.0),
            "margin": (0.0, 0.05, 0.1),
            "nonneg": (False, True),
        },
        description="ridge stacking (m 0: every judge; else the baseline and the m best "
        "others; nonneg: no negative weight, an exportable ensemble), kept only when it "
        "beats the baseline cross-fitted by more than the margin; else the baseline",
        config=_stack_config,
    ),
    "stack+bound": RuleSpec(
        _guarded_stack,
        {
            "m": (5,),
            "ridge": (10.0,),
            "margin": (0.0, 0.05),
            "nonneg": (True,),
            "alpha": (0.05, 0.1, 0.2),
        },
        description="stack+guard whose guard reads the cross-fitted gain's one-sided lower "
        "bound (1 - alpha, a paired bootstrap over each half's items) instead of its point: "
        "the margin grows with the noise of the items",
    ),
    "stack+repeat": RuleSpec(
        _guarded_stack,
        {
            "m": (5,),
            "ridge": (10.0,),
            "margin": (0.0, 0.05, 0.1),
            "nonneg": (True,),
            "repeats": (5,),
        },
        description="stack+guard whose guard reads the cross-fitted gain averaged over "
        "several seeded halvings of the items instead of one: the point without the noise "
        "of which items fall on which side",
    ),
    "stack+guard+frugal": RuleSpec(
        _frugal_stack,
        {
            "m": (5,),
            "ridge": (10.0,),
            "margin": (0.1,),
            "nonneg": (True,),
            "tolerance": (0.0, 0.02, 0.05),
        },
        description="stack+guard, or the single best judge when its cross-fitted gain is "
        "above the margin and within the tolerance of the stack's (fewer calls per item)",
        config=_frugal_config,
    ),
    "prior": RuleSpec(
        prior_rule,
        uses_prior=True,
        description="the prior default (best mean gain on the other pairs), no labels",
    ),
    "shrink+prior": RuleSpec(
        _shrink_or_prior,
        {"margin": (0.0, 0.02)},
        uses_prior=True,
        description="shrink; the prior default when it keeps the baseline",
    ),
    "confirm+prior": RuleSpec(
        _confirm_or_prior,
        uses_prior=True,
        description="confirm; the prior default when it keeps the baseline",
    ),
    "confirm+prior(veto)": RuleSpec(
        _confirm_or_vetoed_prior,
        uses_prior=True,
        description="confirm; the prior default when it keeps the baseline, unless the "
        "confirmation half refutes it",
    ),
    "shrink+prior(veto)": RuleSpec(
        _shrink_or_vetoed_prior,
        {"margin": (0.0, 0.02)},
        uses_prior=True,
        description="shrink; the prior default when it keeps the baseline, unless all the "
        "validation items refute it",
    ),
    "posterior": RuleSpec(
        posterior_rule,
        {"margin": (0.0, 0.02)},
        uses_gain_prior=True,
        description="best posterior gain: the labels' paired gain weighed against the other "
        "pairs' gains for the same change",
        constants=lambda sel: {"margin": sel.margin, "n_resamples": sel.n_resamples},
        summary=lambda sel, n: (
            "gain over the baseline weighed against the model's judgement bank" + _margin_above(sel)
        ),
    ),
}
