"""The cross-fitted gain over several halvings (``crossfit_gain``'s and ``guarded``'s
``repeats``): the first halving is the single one, the mean moves less with the seed, and
the registered ``stack+repeat`` is the guarded stack at those repeats."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from _rule_tables import correlated_table
from judgeopt.selection import (
    RULES,
    Pick,
    RuleInput,
    best_rule,
    blocked_split,
    crossfit_gain,
    guarded,
    stack_rule,
)


def _stack(d: RuleInput) -> Pick:
    return stack_rule(d, ridge=10.0, m=2, nonneg=True)


def _reseeded(data: RuleInput, seed: int) -> RuleInput:
    """The same table with another seed (so other halvings)."""
    return RuleInput(human=data.human, preds=data.preds, baseline=0, groups=data.groups, seed=seed)


def test_one_repeat_is_the_single_halving() -> None:
    data = correlated_table(90, [0.3, 0.5, 0.4], seed=4)
    assert crossfit_gain(data, best_rule, repeats=1) == crossfit_gain(data, best_rule)


def test_the_mean_is_the_mean_of_its_halvings_and_reproducible() -> None:
    data = correlated_table(100, [0.3, 0.5, 0.45], seed=5, groups=20)
    mean = crossfit_gain(data, _stack, repeats=4)
    again = crossfit_gain(
        correlated_table(100, [0.3, 0.5, 0.45], seed=5, groups=20), _stack, repeats=4
    )
    assert mean == again and math.isfinite(mean)
    # Its first halving is the single one; the others are other splits of the items.
    single = crossfit_gain(data, _stack)
    two = crossfit_gain(data, _stack, repeats=2)
    assert mean != single and two != single
    assert abs(2 * two - single) <= 2.0  # the second halving's gain is a difference of rhos


def _likert(data: RuleInput) -> RuleInput:
    """``data`` with its human scores on a five-point scale (ties, as labels have)."""
    h = np.clip(np.round(data.human * 1.2 + 3), 1, 5)
    return RuleInput(human=h, preds=data.preds, baseline=0, groups=data.groups, seed=data.seed)


def test_more_halvings_move_less_with_the_seed() -> None:
    data = _likert(correlated_table(80, [0.35, 0.5, 0.45], seed=6))
    one = [crossfit_gain(_reseeded(data, s), _stack) for s in range(30)]
    eight = [crossfit_gain(_reseeded(data, s), _stack, repeats=8) for s in range(30)]
    assert np.std(one) > 0.01  # with tied labels, the single halving depends on the seed
    assert np.std(eight) < 0.6 * np.std(one)
    # Both estimate the same gain: their means agree within the single halving's noise.
    assert abs(np.mean(eight) - np.mean(one)) < 3 * np.std(one) / math.sqrt(30) + 0.01


def test_without_ties_one_halving_is_the_same_for_every_seed() -> None:
    """Why the other halvings are blocked random splits: the systematic split of untied
    scores is every other unit, so each seed gives the same two halves."""
    data = correlated_table(60, [0.35, 0.5, 0.45], seed=8)
    assert len({crossfit_gain(_reseeded(data, s), _stack) for s in range(10)}) == 1
    assert len({crossfit_gain(_reseeded(data, s), _stack, repeats=3) for s in range(10)}) > 5


def test_a_blocked_split_is_stratified_whole_grouped_and_seeded() -> None:
    rng = np.random.default_rng(0)
    h = rng.standard_normal(41)
    first, second = blocked_split(h, None, fraction=0.5, seed=1)
    assert sorted(first + second) == list(range(41)) and abs(len(first) - len(second)) <= 1
    ranked = np.argsort(h, kind="stable")
    for a, b in zip(ranked[0:40:2], ranked[1:40:2], strict=True):
        assert (a in second) != (b in second)  # one of each pair in score order
    assert (first, second) == blocked_split(h, None, fraction=0.5, seed=1)
    assert (first, second) != blocked_split(h, None, fraction=0.5, seed=2)
    groups = [f"g{i // 4}" for i in range(40)]
    a, b = blocked_split(h[:40], groups, fraction=0.5, seed=3)
    assert not {groups[i] for i in a} & {groups[i] for i in b}
    with pytest.raises(ValueError, match="fraction"):
        blocked_split(h, None, fraction=1.0, seed=0)
    with pytest.raises(ValueError, match="empty"):
        blocked_split(h[:1], None, fraction=0.5, seed=0)


def test_the_guard_names_its_halvings_and_refuses_bad_repeats() -> None:
    data = correlated_table(400, [0.2, 0.6, 0.55], seed=2)
    pick = guarded(_stack, repeats=5)(data)
    assert pick.single is None and "over 5 halvings" in pick.reason
    kept = guarded(_stack, repeats=5, margin=1.0)(data)
    assert kept.single == 0 and "over 5 halvings" in kept.reason
    with pytest.raises(ValueError, match="repeats=0"):
        guarded(_stack, repeats=0)
    with pytest.raises(ValueError, match="repeats=3 with alpha=0.1"):
        guarded(_stack, repeats=3, alpha=0.1)
    with pytest.raises(ValueError, match="repeats=-1"):
        crossfit_gain(data, _stack, repeats=-1)


def test_a_guard_with_a_key_keeps_one_and_several_halvings_apart() -> None:
    data = correlated_table(120, [0.3, 0.5, 0.45], seed=7)
    one = guarded(_stack, key="k")(data)
    five = guarded(_stack, key="k", repeats=5)(data)
    assert f"{crossfit_gain(data, _stack):+.3f}" in one.reason
    assert f"{crossfit_gain(data, _stack, repeats=5):+.3f}" in five.reason


def test_the_registered_repeat_stack_is_the_guarded_stack() -> None:
    spec = RULES["stack+repeat"]
    for seed in range(3):
        data = correlated_table(100, [0.3, 0.5, 0.45, 0.4, 0.35, 0.42, 0.38], seed=seed)
        for setting in spec.settings():
            got = spec.bind(setting)(data)

            def stack(d: RuleInput, s: Mapping[str, Any] = setting) -> Pick:
                return stack_rule(d, ridge=float(s["ridge"]), m=int(s["m"]), nonneg=True)

            guard = guarded(stack, margin=float(setting["margin"]), repeats=int(setting["repeats"]))
            want = guard(data)
            assert got.members == want.members and got.reason == want.reason
