"""The cross-fitted guard's lower bound (``judgeopt.selection.crossfit_bound``, ``guarded``'s
``alpha``): what it reads, how it moves with the level and the number of items, and the
judges it keeps and refuses."""

from __future__ import annotations

import math

import numpy as np
import pytest

from _rule_tables import correlated_table
from judgeopt.selection import (
    RULES,
    RuleInput,
    best_rule,
    crossfit_bound,
    crossfit_gain,
    guarded,
    paired_gain_resamples,
    stack_rule,
)


def _stack(d: RuleInput) -> object:
    return stack_rule(d, ridge=10.0, m=2, nonneg=True)


def test_the_bound_rises_with_its_level_and_stays_below_the_point() -> None:
    data = correlated_table(120, [0.3, 0.5, 0.45])
    point = crossfit_gain(data, best_rule)
    bounds = [crossfit_bound(data, best_rule, alpha=a) for a in (0.01, 0.05, 0.2, 0.5)]
    assert bounds == sorted(bounds)
    assert bounds[2] < point  # an 80 % bound is below the estimate it bounds
    assert abs(bounds[3] - point) < 0.05  # the median replicate is near the point


def test_more_items_bring_the_bound_toward_the_point() -> None:
    gaps = []
    for n in (60, 600):
        data = correlated_table(n, [0.3, 0.55], seed=1)
        gaps.append(crossfit_gain(data, best_rule) - crossfit_bound(data, best_rule, alpha=0.05))
    assert gaps[0] > 2 * gaps[1] > 0


def test_the_same_seed_gives_the_same_bound_and_group_level_works() -> None:
    data = correlated_table(150, [0.2, 0.5], seed=3, groups=15)
    again = correlated_table(150, [0.2, 0.5], seed=3, groups=15)
    first = crossfit_bound(data, best_rule, alpha=0.1)
    assert first == crossfit_bound(again, best_rule, alpha=0.1)
    assert math.isfinite(first)


def test_the_bound_guard_keeps_a_clear_gain_and_refuses_a_noisy_one() -> None:
    clear = correlated_table(400, [0.2, 0.6, 0.55], seed=2)
    pick = guarded(_stack, alpha=0.05)(clear)
    assert pick.single is None and "95% bound" in pick.reason
    # A small gain on few items: the point guard ships it, the bound guard does not.
    for seed in range(40):
        noisy = correlated_table(40, [0.35, 0.45, 0.4], seed=seed)
        if crossfit_gain(noisy, _stack) > 0.02 and guarded(_stack)(noisy).single is None:
            break
    else:  # pragma: no cover - the draw above finds one in the first few seeds
        pytest.fail("no noisy table with a positive cross-fitted gain")
    kept = guarded(_stack, alpha=0.05)(noisy)
    assert kept.single == 0 and "bound" in kept.reason


def test_a_level_outside_zero_one_is_refused_naming_it() -> None:
    data = correlated_table(60, [0.3, 0.5])
    for alpha in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match=r"alpha=.*\(0, 1\)"):
            crossfit_bound(data, best_rule, alpha=alpha)


def test_the_registered_bound_stack_is_the_guarded_stack_on_a_clear_table() -> None:
    spec = RULES["stack+bound"]
    assert spec.config is None  # a bank rule: no compile runs it yet
    clear = correlated_table(300, [0.2, 0.6, 0.55, 0.5, 0.45, 0.4, 0.35], seed=4)
    setting = {"m": 5, "ridge": 10.0, "margin": 0.0, "nonneg": True, "alpha": 0.05}
    bound_pick = spec.bind(setting)(clear)
    assert bound_pick.single is None  # the stack ships
    point = {k: v for k, v in setting.items() if k != "alpha"}
    point_pick = RULES["stack+guard"].bind(point)(clear)
    assert bound_pick.members == point_pick.members and bound_pick.weights == point_pick.weights


def test_paired_gain_resamples_pairs_the_pick_with_the_baseline() -> None:
    data = correlated_table(80, [0.2, 0.6], seed=3, groups=16)
    pick = best_rule(data)
    gains = paired_gain_resamples(pick, data, n_resamples=300, rng=np.random.default_rng(1))
    again = paired_gain_resamples(pick, data, n_resamples=300, rng=np.random.default_rng(1))
    assert gains.shape == (300,) and np.array_equal(gains, again)
    assert np.mean(gains) > 0  # the stronger judge gains on most resamples
    baseline = RULES["baseline"].fn(data)
    zero = paired_gain_resamples(baseline, data, n_resamples=50, rng=np.random.default_rng(1))
    assert np.allclose(zero, 0.0)  # the baseline against itself gains nothing on any resample
