"""``benchmarks/demo_plan.py``: the demo's cut of a bank pair (rate-first strategies and their
free decoding twins), its held-out rows (whole groups) and its per-split outcomes and seconds,
on small banks made by hand so that every number is known."""

from __future__ import annotations

import numpy as np
from _scripts import load_script

from judgeopt.selection import Pick, RuleInput
from judgeopt_lab import BankColumn, BankPair

dp = load_script("demo_plan")


def _pair(n: int = 160, level: str = "dataset") -> BankPair:
    """The baseline (explains first), then rate-first columns in search order: #2 greedy
    (close to the humans) with its expected twin, #3 explaining first, #4 rating only."""
    rng = np.random.default_rng(0)
    human = rng.integers(1, 6, n).astype(float)

    def noisy(sd: float) -> np.ndarray:
        return np.clip(np.round(human + rng.normal(size=n) * sd), 1, 5)

    cols = (
        BankColumn(
            "C01", {"cot": "prefix", "decoding": "greedy"}, ("baseline", "search #1"), noisy(3.0)
        ),
        BankColumn(
            "C02", {"cot": "none", "s": 2, "decoding": "greedy"}, ("search #2",), noisy(0.4)
        ),
        BankColumn(
            "C03", {"cot": "prefix", "s": 3, "decoding": "greedy"}, ("search #3",), noisy(2.0)
        ),
        BankColumn(
            "C04", {"cot": "none", "s": 4, "decoding": "greedy"}, ("search #4",), noisy(2.0)
        ),
        BankColumn(
            "C02~", {"cot": "none", "s": 2, "decoding": "expected"}, ("twin of C02",), noisy(0.5)
        ),
    )
    return BankPair(
        name="p",
        task="t",
        aspect="q",
        level=level,
        ids=tuple(f"i{j}" for j in range(n)),
        human=human,
        groups=np.array([f"g{j // 8}" for j in range(n)], dtype=object),
        columns=cols,
    )


def test_the_cut_keeps_rate_first_strategies_with_their_twins_and_one_call_each() -> None:
    cut, call_of = dp.demo_cut(_pair(), 3)
    # the baseline and the first 2 rate-first strategies of the path (#3 explains first)
    assert [c.key for c in cut.columns] == ["C01", "C02", "C04", "C02~"]
    # the twin is read off its column's call
    assert call_of == [0, 1, 2, 1]
    cut2, _ = dp.demo_cut(_pair(), 2)
    assert [c.key for c in cut2.columns] == ["C01", "C02", "C02~"]


def test_held_out_rows_are_whole_groups_of_the_test_part() -> None:
    pair = _pair()
    test = np.arange(40, 160)
    rows = dp.test_rows(pair, test, 50, np.random.default_rng(1))
    assert 50 <= len(rows) < 58 and set(rows) <= set(test.tolist())
    groups = {pair.groups[i] for i in rows}
    assert sum(1 for i in test if pair.groups[i] in groups) == len(rows)  # whole groups
    assert len(dp.test_rows(pair, test, 500, np.random.default_rng(1))) == len(test)


def _keep_baseline(data: RuleInput) -> Pick:
    return Pick((data.baseline,), reason="baseline")


def _best_other(data: RuleInput) -> Pick:
    return Pick((1,), reason="column C02")


def test_each_split_costs_the_search_then_the_baseline_and_the_pick_on_the_test() -> None:
    cut, call_of = dp.demo_cut(_pair(), 3)
    cost = np.zeros((len(cut.columns), len(cut.ids)))
    cost[0], cost[1], cost[2] = 5.0, 1.0, 2.0  # the twin (row 3) costs nothing
    rules = {"keep": _keep_baseline, "best": _best_other}
    out = dp.plan_pair(cut, cost, call_of, rules, n_valid=40, n_test=80, n_splits=6, seed=0)
    keep, best = out["keep"], out["best"]
    assert keep["n_test"] == 80
    # labelled: every call on 40 items (8 s each); held out: the baseline, and the pick's call
    assert keep["seconds"] == 40 * 8.0 + 80 * 5.0
    assert best["seconds"] == 40 * 8.0 + 80 * 6.0
    assert keep["shipped"] == 0.0 and keep["mean_gain"] == 0.0 and keep["shows_gain"] == 0.0
    # the close column beats the noisy baseline on every 80-item test, its interval above 0
    assert best["shipped"] == 1.0 and best["mean_gain"] > 0.2
    assert best["gain_share"] == 1.0 and best["shows_gain"] == 1.0 and best["shows_loss"] == 0.0


def test_the_ceiling_is_the_best_column_with_its_interval() -> None:
    cut, _ = dp.demo_cut(_pair(), 3)
    c = dp.ceiling(cut)
    assert c["strategy"]["s"] == 2 and c["gain"] > 0.2 and c["ci"][0] > 0
