"""The rules a judgement bank replays: each a function of a
:class:`~judgeopt.selection.RuleInput`, with the grid of constants
:func:`~judgeopt.bench.replay_bank` chooses leave-one-pair-out.

:data:`RULES` names them as the replay's tables do (``"shrink+prior(veto)"``, ``"anchored"``);
:func:`judgeopt.bench.selection_settings` turns a name and its chosen constants into a
compile's settings. The rules themselves are :mod:`judgeopt.selection`'s; what is here fixes
the constants the compile uses (``confirm``'s bootstrap size) and composes them (a rule with a
prior fallback, a guarded ensemble).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..selection import (
    Pick,
    RuleInput,
    anchored_rule,
    best_rule,
    confirm_rule,
    confirmation_split,
    ensemble_rule,
    factor_rule,
    guarded,
    lcb_rule,
    posterior_rule,
    prior_rule,
    shrink_rule,
    stack_rule,
    veto_rule,
    with_fallback,
)

__all__ = ["RULES", "RuleSpec"]


@dataclass(frozen=True)
class RuleSpec:
    """A rule to replay: its function and the grid of constants chosen leave-one-pair-out.

    ``uses_prior``: the function takes the prior default strategy (``strategy=``);
    ``uses_gain_prior``: it takes the other pairs' :class:`~judgeopt.selection.GainPrior`
    (``prior=``).
    """

    fn: Callable[..., Pick]
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    uses_prior: bool = False
    uses_gain_prior: bool = False
    description: str = ""

    def settings(self) -> list[dict[str, Any]]:
        """Every combination of the grid's constants ({} when there are none)."""
        keys = sorted(self.grid)
        return [
            dict(zip(keys, v, strict=True))
            for v in itertools.product(*(self.grid[k] for k in keys))
        ]


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


def _guarded_anchored(data: RuleInput, *, m: int, w: float, margin: float = 0.0) -> Pick:
    rule = guarded(
        lambda d: anchored_rule(d, m=m, w=w), margin=margin, key=f"crossfit-anchored-{m}-{w}"
    )
    return rule(data)


#: The rules the bank replays (``benchmarks/bank_rules.py``).
RULES: dict[str, RuleSpec] = {
    "baseline": RuleSpec(
        lambda d: Pick((d.baseline,), reason="baseline"), description="always the MT-Bench baseline"
    ),
    "best": RuleSpec(best_rule, description="best validation score (the paper's rule)"),
    "confirm": RuleSpec(
        _confirm, description="today's default: search half, 3 finalists confirmed at 0.8"
    ),
    "veto": RuleSpec(
        _veto, description="search half's best unless the confirmation half vetoes it"
    ),
    "shrink": RuleSpec(
        shrink_rule,
        {"margin": (0.0, 0.02, 0.05)},
        description="empirical-Bayes shrunk paired gain on all items",
    ),
    "lcb": RuleSpec(
        lcb_rule,
        {"alpha": (0.5, 0.2, 0.05)},
        description="best Bonferroni lower bound of the paired gain",
    ),
    "factor": RuleSpec(
        factor_rule,
        {"ridge": (0.3, 1.0, 3.0)},
        description="factor-level pooling (ridge on factor values)",
    ),
    "ensemble": RuleSpec(
        ensemble_rule, {"m": (2, 3, 5)}, description="mean of the m best z-normalised judges"
    ),
    "anchored": RuleSpec(
        anchored_rule,
        {"m": (2, 3, 5), "w": (0.34, 0.5, 0.67)},
        description="the baseline at weight w with the m best others (z-normalised): an "
        "ensemble hedged toward the baseline",
    ),
    # Added 2026-11-28 (eighth session), before SummEval coherence and SFHOT
    # informativeness had any item judged by every column, and before any replay of them.
    # The guards' margin grid added 2026-11-28 (tenth session), with the constants chosen
    # by the default's own criterion (_replay._lopo_setting), after the interim replay on
    # four pairs and before the full one: a margin is how a guard trades gain for safety.
    "ensemble+guard": RuleSpec(
        _guarded_ensemble,
        {"m": (2, 3, 5), "margin": (0.0, 0.05, 0.1)},
        description="the ensemble, kept only when it beats the baseline cross-fitted (chosen "
        "on each validation half, scored on the other) by more than the margin; else the "
        "baseline",
    ),
    "anchored+guard": RuleSpec(
        _guarded_anchored,
        {"m": (2, 3, 5), "w": (0.34, 0.5, 0.67), "margin": (0.0, 0.05, 0.1)},
        description="the anchored ensemble, kept only when it beats the baseline "
        "cross-fitted by more than the margin; else the baseline",
    ),
    "stack": RuleSpec(
        stack_rule,
        {"ridge": (1.0, 10.0)},
        description="ridge stacking of every judge's z-normalised ratings",
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
    ),
}
