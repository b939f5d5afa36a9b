"""``benchmarks/bank_budget.py``: one rule along a search path cut at several budgets, on
synthetic bank pairs whose better column enters the path late."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from _scripts import load_script

from judgeopt_lab import BankColumn, BankPair, along_path

bb = load_script("bank_budget")


def _path_pair(n: int = 240, good_at: int = 5) -> BankPair:
    """Six columns along a path: the baseline first, the truly better one ``good_at``-th."""
    rng = np.random.default_rng(0)
    human = rng.integers(1, 6, n).astype(float)
    cols = []
    for i in range(6):
        noise = 0.7 if i + 1 == good_at else 2.0
        preds = np.clip(np.round(human + rng.normal(size=n) * noise), 1, 5)
        roles = ("baseline", "search #1") if i == 0 else (f"search #{i + 1}",)
        cols.append(BankColumn(f"C{i + 1:02d}", {"scale": 5, "k": i}, roles, preds))
    return BankPair(
        name="p",
        task="p",
        aspect="q",
        level="dataset",
        ids=tuple(f"p{i}" for i in range(n)),
        human=human,
        groups=np.array([f"g{i // 8}" for i in range(n)], dtype=object),
        columns=tuple(cols),
    )


def test_the_gain_appears_at_the_cut_that_holds_the_better_column() -> None:
    pair = _path_pair(good_at=5)
    out = bb.budget_replay(pair, [2, 4, 5, 6], "best", {}, n_valid=100, n_splits=20, reference=4)
    cuts = out["cuts"]
    assert [cuts[k]["strategies"] for k in ("2", "4", "5", "6")] == [2, 4, 5, 6]
    assert cuts["5"]["mean_gain"] > cuts["4"]["mean_gain"] + 0.1
    assert cuts["4"]["minus_reference"] == 0.0
    assert cuts["5"]["minus_reference"] == pytest.approx(
        cuts["5"]["mean_gain"] - cuts["4"]["mean_gain"]
    )
    assert cuts["5"]["minus_reference_se"] > 0
    assert 0.0 <= cuts["2"]["worse_share"] <= 1.0
    # the same splits for every cut: a cut holding the same columns gives the same gains
    again = bb.budget_replay(pair, [5], "best", {}, n_valid=100, n_splits=20, reference=4)
    assert again["cuts"]["5"]["mean_gain"] == cuts["5"]["mean_gain"]
    assert "minus_reference" not in again["cuts"]["5"]  # the reference cut was not replayed


def test_a_cut_with_unjudged_items_is_reported_not_replayed() -> None:
    pair = _path_pair()
    judged = np.ones(len(pair.ids), dtype=bool)
    judged[:7] = False
    cols = list(pair.columns)
    cols[5] = replace(cols[5], judged=judged)
    pair = replace(pair, columns=tuple(cols), missing=7)
    out = bb.budget_replay(pair, [5, 6], "best", {}, n_valid=100, n_splits=5, reference=5)
    assert out["cuts"]["5"]["complete"] and "mean_gain" in out["cuts"]["5"]
    assert out["cuts"]["6"] == {"strategies": 6, "complete": False, "missing": 7}
    assert "missing" in bb.table(out)
    with pytest.raises(ValueError, match="unknown rule"):
        bb.budget_replay(pair, [5], "nope", {})


def test_along_path_then_cut_follows_the_new_paths_order() -> None:
    pair = _path_pair(good_at=2)  # better column second on the stored path
    c = pair.columns
    path = [{"strategy": c[0].strategy, "role": "search #1"}] + [
        {"strategy": c[i].strategy, "role": f"search #{n + 2}"} for n, i in enumerate([5, 4, 1])
    ]
    along = along_path(pair, path)
    out = bb.budget_replay(along, [3, 4], "best", {}, n_valid=100, n_splits=20, reference=3)
    # on the new path the better column comes fourth: only the cut at 4 holds it
    assert out["cuts"]["4"]["minus_reference"] > 0.1


def _with_cot(pair: BankPair, explains_first: set[int]) -> BankPair:
    """``pair`` whose columns at ``explains_first`` (0-based) explain before rating."""
    cols = [
        replace(c, strategy={**c.strategy, "cot": "prefix" if i in explains_first else "none"})
        for i, c in enumerate(pair.columns)
    ]
    return replace(pair, columns=tuple(cols))


def test_the_rate_first_replay_chooses_only_among_the_cuts_rate_first_strategies() -> None:
    # the better column (fifth on the path) explains first: the default's candidates
    # (rate_first) never hold it, every candidate of the cut does
    pair = _with_cot(_path_pair(good_at=5), explains_first={0, 4})
    every = bb.budget_replay(pair, [4, 5], "best", {}, n_valid=100, n_splits=20, reference=4)
    rate = bb.budget_replay(
        pair, [4, 5], "best", {}, n_valid=100, n_splits=20, reference=4, candidates="rate_first"
    )
    assert every["cuts"]["5"]["minus_reference"] > 0.1
    assert rate["candidates"] == "rate_first"
    # the cut at 5 adds only an explanation-first strategy: the same candidates, the same gains
    assert rate["cuts"]["5"]["strategies"] == 5
    assert rate["cuts"]["5"]["candidates"] == rate["cuts"]["4"]["candidates"] == 4
    assert rate["cuts"]["5"]["minus_reference"] == 0.0
    # an unjudged explanation-first column does not make a rate-first cut incomplete
    judged = np.ones(len(pair.ids), dtype=bool)
    judged[:3] = False
    cols = list(pair.columns)
    cols[4] = replace(cols[4], judged=judged)
    partial = replace(pair, columns=tuple(cols), missing=3)
    again = bb.budget_replay(
        partial, [5], "best", {}, n_valid=100, n_splits=20, reference=4, candidates="rate_first"
    )
    assert again["cuts"]["5"]["complete"]
    assert again["cuts"]["5"]["mean_gain"] == rate["cuts"]["5"]["mean_gain"]
    assert not bb.budget_replay(partial, [5], "best", {}, n_splits=5)["cuts"]["5"]["complete"]
    with pytest.raises(ValueError, match="candidates"):
        bb.budget_replay(pair, [5], "best", {}, candidates="some")
