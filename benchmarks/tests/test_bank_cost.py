"""The cost accounting of ``benchmarks/bank_cost.py``: seconds per judgement from the bank's
chunks, a compile's judging seconds per rule, the budget's columns and the comparison with the
reference. Small banks made by hand, so that every number is known."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _scripts import load_script

from judgeopt.selection import Pick, RuleInput, RuleSpec, confirmation_split
from judgeopt_lab import (
    RULES,
    BankColumn,
    BankPair,
    bank_splits,
    compile_seconds,
    cost_matrix,
    explains_after_rating,
    first_k,
    judgement_costs,
    path_cut_columns,
    race,
    raced,
    rate_first_columns,
    rate_first_k,
    rates_first,
    replay_bank,
    stopped_costs,
)

S1 = {"scale": 5, "cot": "prefix"}
S2 = {"scale": 5, "cot": "none"}


def _line(strategy: dict[str, Any], rid: str, raw: str, seconds: float | None, **kw: Any) -> Any:
    return {
        "kind": "judgement",
        "strategy": strategy,
        "id": rid,
        "greedy": 3.0,
        "error": None,
        "raw": raw,
        "seconds": seconds,
        "source": "bank" if seconds is not None else "e2e:items",
        **kw,
    }


def _lines() -> list[dict[str, Any]]:
    """An import of S1 on a, b, c; an orphan bank call (no chunk: cut by an interruption);
    then one chunk of four bank calls (16 s of wall time; latencies 1, 1, 2, 4; answers of 10,
    10, 30 and 70 characters), the first of which replaces the import of S1 on a."""
    return [
        {"kind": "header", "plan_sha": "x", "pair": "p"},
        _line(S1, "a", "x" * 40, None),
        _line(S1, "b", "x" * 50, None),
        _line(S1, "c", "x" * 20, None),
        _line(S2, "z", "x" * 90, 3.0),  # orphan: before the chunk's four
        _line(S1, "a", "x" * 10, 1.0),
        _line(S2, "a", "x" * 10, 1.0),
        _line(S2, "b", "x" * 30, 2.0),
        _line(S2, "c", "x" * 70, 4.0),
        {"kind": "chunk", "n": 4, "calls": 4, "seconds": 16.0},
    ]


def _key(strategy: dict[str, Any], rid: str) -> tuple[str, str]:
    import json

    return json.dumps(strategy, sort_keys=True), rid


def test_a_chunks_wall_time_is_shared_by_latency_and_the_rest_follows_the_length_line() -> None:
    costs, fit = judgement_costs(_lines())
    # 16 s shared 1:1:2:4
    assert costs[_key(S1, "a")] == pytest.approx(2.0)  # the bank call, not the import
    assert costs[_key(S2, "a")] == pytest.approx(2.0)
    assert costs[_key(S2, "b")] == pytest.approx(4.0)
    assert costs[_key(S2, "c")] == pytest.approx(8.0)
    # measured: 2, 2, 4, 8 at 10, 10, 30, 70 characters: exactly 1 s + 0.1 s per character
    assert fit.intercept == pytest.approx(1.0) and fit.per_char == pytest.approx(0.1)
    assert fit.r == pytest.approx(1.0) and fit.seconds == 16.0
    assert costs[_key(S1, "b")] == pytest.approx(6.0)  # imported, 50 characters
    assert costs[_key(S1, "c")] == pytest.approx(3.0)  # imported, 20 characters
    assert costs[_key(S2, "z")] == pytest.approx(10.0)  # orphan bank call, 90 characters
    assert (fit.measured, fit.modelled) == (4, 3)
    measured = sum(costs[_key(s, r)] for s, r in [(S1, "a"), (S2, "a"), (S2, "b"), (S2, "c")])
    assert measured == pytest.approx(fit.seconds)  # the shares add up to the wall time


def test_equal_shares_and_an_unknown_share() -> None:
    costs, _ = judgement_costs(_lines(), share="equal")
    assert costs[_key(S2, "c")] == pytest.approx(4.0) and costs[_key(S1, "a")] == 4.0
    with pytest.raises(ValueError, match="share"):
        judgement_costs(_lines(), share="tokens")


def test_cost_matrix_charges_each_decoding_of_the_same_calls() -> None:
    costs, _ = judgement_costs(_lines())
    cols = (
        BankColumn("C01", {**S1, "decoding": "greedy"}, ("baseline", "search #1"), np.ones(3)),
        BankColumn("C02", {**S2, "decoding": "greedy"}, ("search #2",), np.ones(3)),
        BankColumn("C03", {**S2, "decoding": "expected"}, ("search #3",), np.ones(3)),
    )
    pair = BankPair("p", "t", "q", "dataset", ("a", "b", "c"), np.ones(3), np.ones(3), cols)
    m = cost_matrix(pair, costs)
    np.testing.assert_allclose(m, [[2.0, 6.0, 3.0], [2.0, 4.0, 8.0], [2.0, 4.0, 8.0]])


def _pair(n: int = 120, k: int = 6, level: str = "dataset") -> BankPair:
    """``k`` columns in search order (the baseline first), column 2 close to the humans."""
    rng = np.random.default_rng(0)
    human = rng.integers(1, 6, n).astype(float)
    cols = []
    for i in range(k):
        noise = 0.5 if i == 2 else 2.0
        preds = np.clip(np.round(human + rng.normal(size=n) * noise), 1, 5)
        roles = ("baseline", "search #1") if i == 0 else (f"search #{i + 1}",)
        cols.append(BankColumn(f"C{i + 1:02d}", {"scale": 5, "c": i}, roles, preds))
    return BankPair(
        name="p",
        task="t",
        aspect="q",
        level=level,
        ids=tuple(f"i{j}" for j in range(n)),
        human=human,
        groups=np.array([f"g{j // 4}" for j in range(n)], dtype=object),
        columns=tuple(cols),
    )


def test_a_compile_judges_every_strategy_on_every_validation_item_unless_it_confirms() -> None:
    pair = _pair()
    cost = np.arange(1.0, 7.0)[:, None] * np.ones(len(pair.ids))  # column c costs c + 1 s
    valid = np.arange(40)
    assert compile_seconds("lcb", pair, cost, valid, seed=3) == 40 * 21
    assert compile_seconds("baseline", pair, cost, valid, seed=3) == 0.0
    assert compile_seconds("prior", pair, cost, valid, seed=3) == 0.0
    groups = [pair.groups[i] for i in valid]
    search, conf = confirmation_split(pair.human[valid], groups, fraction=0.5, seed=3)
    assert len(search) + len(conf) == 40
    # every column on the search half; the baseline (1 s) and 3 finalists on the other,
    # column 2 (3 s) surely among them
    confirm = compile_seconds("confirm", pair, cost, valid, seed=3)
    finalists = (confirm - 21 * len(search)) / len(conf) - 1.0
    assert finalists in {2 + 3 + 4, 2 + 3 + 5, 2 + 3 + 6, 3 + 4 + 5, 3 + 4 + 6, 3 + 5 + 6}
    # veto: the baseline and the search half's best, column 2
    assert compile_seconds("veto", pair, cost, valid, seed=3) == 21 * len(search) + 4 * len(conf)
    # the vetoed prior is judged on the confirmation half too (here column 6, 6 s)
    with_prior = compile_seconds("confirm+prior(veto)", pair, cost, valid, seed=3, prior_row=5)
    assert with_prior - confirm in {0.0, 6.0 * len(conf)}


def test_a_smaller_budget_keeps_the_baseline_and_the_search_order() -> None:
    pair = _pair(k=6)
    cut, rows = first_k(pair, 3)
    assert rows == [0, 1, 2] and [c.key for c in cut.columns] == ["C01", "C02", "C03"]
    assert first_k(pair, 20)[1] == list(range(6))


def _script() -> Any:
    return load_script("bank_cost", "bank_cost_script")


def test_cost_rows_put_the_replays_gain_beside_the_compiles_hours() -> None:
    script = _script()
    pairs = {}
    for name in "abc":
        p = _pair(n=120)
        pairs[name] = BankPair(name, name, "q", "dataset", p.ids, p.human, p.groups, p.columns)
    rules = {r: RULES[r] for r in ("baseline", "best", "confirm")}
    payload = replay_bank(pairs, rules, n_valids=(60,), n_splits=4)
    cost = {n: np.full((6, 120), 3600.0 / 60) for n in pairs}  # 1 h per column and 60 items
    recorded = {n: 2 * c for n, c in cost.items()}
    rows = script.cost_rows(
        pairs,
        {"latency": cost, "equal": cost, "recorded": recorded},
        payload,
        {n: range(6) for n in pairs},
        n_valid=60,
        n_splits=4,
        seed=0,
    )
    n_valid = [len(v) for v, _ in bank_splits(pairs["a"], 60, 4)]
    assert rows["best"]["cpu_hours"] == pytest.approx(6 * np.mean(n_valid) / 60)
    assert rows["baseline"]["cpu_hours"] == 0 and rows["baseline"]["gain_per_cpu_hour"] is None
    best = payload["rules"]["best"]["n_valid"]["60"]
    assert rows["best"]["mean_gain"] == best["mean_gain"]
    assert rows["best"]["gain_per_cpu_hour"] == pytest.approx(
        best["mean_gain"] / rows["best"]["cpu_hours"]
    )
    assert rows["confirm"]["cpu_hours"] < rows["best"]["cpu_hours"]
    # another accounting's hours, in all and per pair
    h = rows["best"]["cpu_hours"]
    assert rows["best"]["cpu_hours_by_accounting"] == {"recorded": pytest.approx(2 * h)}
    a = rows["best"]["per_pair"]["a"]
    assert a["cpu_hours_by_accounting"]["recorded"] == pytest.approx(2 * a["cpu_hours"])
    assert rows["(default chosen left out)"]["per_pair"]["a"]["rule"] in rules


def test_the_better_default_on_cost_gains_the_same_within_noise_for_less() -> None:
    script = _script()

    def row(gains: list[float], hours: float, worst: float = 0.05) -> dict[str, Any]:
        return {
            "mean_gain": float(np.mean(gains)),
            "se": 0.0,
            "cpu_hours": hours,
            "gain_per_cpu_hour": float(np.mean(gains)) / hours if hours else None,
            "max_pair_worse_share": worst,
            "per_pair": {p: {"mean_gain": g} for p, g in zip("abc", gains, strict=True)},
        }

    budgets = {
        "5": {
            "rules": {
                # within noise but lower on average: not "the same" (nothing gains within noise)
                "lcb": row([0.01, 0.03, 0.02], 1.0),
                "risky": row([0.0, 0.1, 0.0], 0.5, 0.3),  # worse in 30 % on a pair
            }
        },
        "20": {
            "rules": {
                "lcb": row([0.02, 0.05, 0.02], 4.0),
                "raced": row([0.03, 0.04, 0.03], 3.0),  # as much on average, cheaper
                "worse": row([-0.5, -0.4, -0.6], 2.0),
            }
        },
    }
    better = script.compare(budgets, ("20", "lcb"))
    assert better is not None and (better["rule"], better["budget"]) == ("raced", "20")
    assert better["vs_reference"]["mean_difference"] == pytest.approx(0.01 / 3)
    assert budgets["5"]["rules"]["lcb"]["vs_reference"]["within_noise"]
    assert not budgets["20"]["rules"]["worse"]["vs_reference"]["within_noise"]
    assert budgets["20"]["rules"]["lcb"]["vs_reference"]["mean_difference"] == 0.0
    lo, hi = script.t_interval([1.0, 2.0, 3.0])
    assert (lo + hi) / 2 == pytest.approx(2.0) and hi - 2.0 == pytest.approx(
        4.303 / 3**0.5, abs=1e-3
    )


def _race_pair(n: int = 120) -> BankPair:
    """The baseline (noisy), four good columns, then two that rank the items backwards."""
    rng = np.random.default_rng(1)
    human = rng.integers(1, 6, n).astype(float)
    cols = []
    for i in range(7):
        if i >= 5:
            preds = 6.0 - human
        else:
            noise = 2.0 if i == 0 else 0.5
            preds = np.clip(np.round(human + rng.normal(size=n) * noise), 1, 5)
        roles = ("baseline", "search #1") if i == 0 else (f"search #{i + 1}",)
        cols.append(BankColumn(f"C{i + 1:02d}", {"scale": 5, "c": i}, roles, preds))
    return BankPair(
        "r",
        "t",
        "q",
        "dataset",
        tuple(f"i{j}" for j in range(n)),
        human,
        np.array([f"g{j}" for j in range(n)], dtype=object),
        tuple(cols),
    )


def test_racing_drops_a_hopeless_strategy_at_the_first_checkpoint_and_it_costs_its_prefix() -> None:
    pair = _race_pair()
    valid = np.arange(120)
    data = RuleInput(
        human=pair.human, preds=pair.matrix(), baseline=0, split_groups=list(pair.groups)
    )
    judged = race(data, list(range(120)))
    # checkpoints at 30, 60, 90 of 120 items; the five first make the population (top 5)
    assert [len(judged[r]) for r in range(7)] == [120] * 5 + [30, 30]
    cost = np.ones((7, 120))
    assert compile_seconds("lcb", pair, cost, valid, seed=0) == 7 * 120
    assert compile_seconds("lcb", pair, cost, valid, seed=0, racing=True) == 5 * 120 + 2 * 30
    # the raced rule compares only the strategies judged on every item, in the pair's rows
    pick = raced("best", RULES["best"]).fn(data)
    assert pick.members[0] in {1, 2, 3, 4}
    worst = raced("best", RuleSpec(lambda d: Pick((int(np.argmin(d.scores)),))))
    assert worst.fn(data).members == (0,)  # the backward columns were dropped


# The stop at the score and the rate-first candidates ------------------------------------
BASE = {
    "scale": 5,
    "examples": 0,
    "criteria": "human",
    "reference": "none",
    "cot": "prefix",
    "autocot": "off",
    "metrics": "off",
    "order": "TD-ER-IC",
    "decoding": "greedy",
}


def _strategy(**changes: Any) -> dict[str, Any]:
    return {**BASE, **changes}


def _mixed_pair(n: int = 4) -> BankPair:
    """A search path of eight strategies (the baseline first) and one column off it:

    C01 baseline (explains first), C02 explains first, C03 rates only (scale 5), C04 rates
    then explains (scale 5: C03's other factors), C05 rates then explains after a dialectic
    reference (explains first), C06 rates then explains at scale 10 (no rating-only column
    shares its factors), C07 rates only at scale 3, C08 C03's calls read ``expected``
    (the same calls), and C09 C04's twin, off the path."""
    specs = [
        ("C01", _strategy(), ("baseline", "search #1")),
        ("C02", _strategy(autocot="on"), ("search #2",)),
        ("C03", _strategy(cot="none"), ("search #3",)),
        ("C04", _strategy(cot="suffix"), ("search #4",)),
        ("C05", _strategy(cot="suffix", reference="dialectic"), ("search #5",)),
        ("C06", _strategy(cot="suffix", scale=10), ("search #6",)),
        ("C07", _strategy(cot="none", scale=3), ("search #7",)),
        ("C08", _strategy(cot="none", decoding="expected"), ("search #8",)),
        ("C09", _strategy(cot="suffix", decoding="expected"), ("twin of C04",)),
    ]
    rng = np.random.default_rng(2)
    human = rng.integers(1, 6, n).astype(float)
    cols = tuple(BankColumn(k, s, r, rng.integers(1, 6, n).astype(float)) for k, s, r in specs)
    ids = tuple(f"i{j}" for j in range(n))
    groups = np.array(ids, dtype=object)
    return BankPair("m", "t", "q", "dataset", ids, human, groups, cols)


def test_rates_first_is_the_judges_own_definition() -> None:
    from judgeopt.judge import JudgeProgram, baseline_strategy, load_task

    task = load_task("sfres")
    for cot in ("none", "suffix", "prefix"):
        for reference in ("none", "self", "dialectic"):
            strategy = baseline_strategy(task).replace(cot=cot, reference=reference)
            judge = JudgeProgram(task, "naturalness", strategy)
            assert rates_first(dict(strategy)) is judge.rates_first, (cot, reference)
            assert explains_after_rating(dict(strategy)) is (judge.rates_first and cot == "suffix")


def test_rate_first_candidates_keep_the_baseline_and_the_search_order() -> None:
    pair = _mixed_pair()
    cut, rows = rate_first_k(pair)
    # no explanation-first strategy but the baseline, nothing off the search path
    assert [c.key for c in cut.columns] == ["C01", "C03", "C04", "C06", "C07", "C08"]
    assert rows == [0, 2, 3, 5, 6, 7] and cut.baseline.key == "C01"
    # budget k: the baseline and the first k - 1 rate-first strategies of the path
    assert rate_first_k(pair, 3)[1] == [0, 2, 3]
    assert rate_first_k(pair, 1)[1] == [0]
    assert rate_first_k(pair, 20)[1] == rows
    # a path whose columns come out of order is read in its search order
    shuffled = BankPair(
        "m", "t", "q", "dataset", pair.ids, pair.human, pair.groups, pair.columns[::-1]
    )
    assert [shuffled.columns[i].key for i in rate_first_k(shuffled, 3)[1]] == [
        "C04",
        "C03",
        "C01",
    ]
    with pytest.raises(ValueError, match="at least 1"):
        rate_first_k(pair, 0)


def test_a_cut_is_complete_when_its_own_columns_are() -> None:
    """A pair being recorded cut first: a judgement missing from a column outside the cut
    leaves the cut complete; one missing from the cut's own columns does not."""
    pair = _mixed_pair()
    judged = np.array([True, False, True, True])
    cols = list(pair.columns)
    cols[1] = replace(cols[1], judged=judged)  # C02 explains first: outside the cut
    partial = replace(pair, columns=tuple(cols), missing=1)
    assert not partial.complete
    assert rate_first_k(partial)[0].complete and rate_first_k(partial, 3)[0].complete
    assert not first_k(partial, 3)[0].complete  # C02 is among the path's first three
    assert first_k(partial, 1)[0].complete  # the baseline alone
    cols[2] = replace(cols[2], judged=judged)  # C03 rates first: inside the cut
    inside = replace(pair, columns=tuple(cols), missing=2)
    assert not rate_first_k(inside)[0].complete
    assert rate_first_k(inside)[0].missing == 1


def test_rate_first_columns_name_the_cut_in_a_plan() -> None:
    """On a plan's columns (plain data), the same columns :func:`rate_first_k` keeps."""
    pair = _mixed_pair()
    planned = [
        {"key": c.key, "roles": list(c.roles), "strategy": dict(c.strategy)} for c in pair.columns
    ]
    kept = [c["key"] for c in rate_first_columns(planned)]
    assert kept == [c.key for c in rate_first_k(pair)[0].columns]
    assert kept == ["C01", "C03", "C04", "C06", "C07", "C08"]


def test_path_cut_columns_name_first_k_in_a_plan() -> None:
    """On a plan's columns, the same columns :func:`first_k` keeps at every budget; a budget
    below the baseline is refused."""
    pair = _mixed_pair()
    planned = [
        {"key": c.key, "roles": list(c.roles), "strategy": dict(c.strategy)} for c in pair.columns
    ]
    for k in range(1, len(planned) + 2):
        kept = [c["key"] for c in path_cut_columns(planned, k)]
        assert kept == [c.key for c in first_k(pair, k)[0].columns]
    assert len(path_cut_columns(planned, 1)) < len(path_cut_columns(planned, 4))
    with pytest.raises(ValueError, match="at least 1"):
        path_cut_columns(planned, 0)


def _mixed_costs(pair: BankPair) -> np.ndarray:
    cost = np.full((len(pair.columns), len(pair.ids)), 40.0)  # explanations: 40 s
    cost[2] = [1.0, 2.0, 3.0, np.nan]  # C03 rates only; it did not judge the last item
    cost[6] = [5.0, 5.0, 5.0, 5.0]  # C07 rates only, at scale 3
    cost[7] = cost[2]  # C08: C03's calls
    return cost


def test_a_stopped_suffix_call_costs_what_a_rating_only_call_with_its_factors_costs() -> None:
    pair = _mixed_pair()
    cost = _mixed_costs(pair)
    out, notes = stopped_costs(pair, cost, estimate="none")
    # C04 (suffix, scale 5) costs C03's calls item by item (C08 is the same calls, counted
    # once); where C03 judged nothing, C03's median
    np.testing.assert_allclose(out[3], [1.0, 2.0, 3.0, 2.0])
    # C06 (scale 10) has no rating-only column with its factors: the median of C03 and C07
    np.testing.assert_allclose(out[5], [3.0, 3.5, 4.0, 5.0])
    # explanation-first calls (the baseline, C02, the dialectic C05), rating-only calls and
    # the twin off the path (C09 is suffix too: it is stopped like C04) are as recorded, bar C09
    for r in (0, 1, 2, 4, 6, 7):
        np.testing.assert_array_equal(out[r], cost[r])
    np.testing.assert_allclose(out[8], out[3])
    by = {n.key: n for n in notes}
    assert set(by) == {"C04", "C06", "C09"}
    assert by["C04"].by == ("C03",) and by["C04"].same_factors
    assert by["C06"].by == ("C03", "C07") and not by["C06"].same_factors
    assert by["C04"].recorded == 40.0 and by["C04"].stopped == pytest.approx(2.0)
    assert cost[3, 0] == 40.0  # the recorded matrix is left alone


def test_the_ratio_estimate_and_what_stopped_costs_refuses() -> None:
    pair = _mixed_pair()
    cost = _mixed_costs(pair)
    out, notes = stopped_costs(pair, cost, estimate="ratio", ratio=0.25)
    np.testing.assert_allclose(out[3], 10.0)
    np.testing.assert_allclose(out[5], 10.0)
    np.testing.assert_array_equal(out[0], cost[0])
    assert all(n.by == () for n in notes)
    with pytest.raises(ValueError, match="ratio"):
        stopped_costs(pair, cost, estimate="ratio")
    with pytest.raises(ValueError, match="ratio"):
        stopped_costs(pair, cost, estimate="ratio", ratio=1.5)
    with pytest.raises(ValueError, match="estimate"):
        stopped_costs(pair, cost, estimate="tokens")
    no_none = BankPair(
        "m",
        "t",
        "q",
        "dataset",
        pair.ids,
        pair.human,
        pair.groups,
        tuple(c for c in pair.columns if c.strategy["cot"] != "none"),
    )
    with pytest.raises(ValueError, match="no cot 'none' column"):
        stopped_costs(no_none, np.ones((len(no_none.columns), 4)))


def test_a_stopped_compile_costs_less_only_where_a_suffix_strategy_is_judged() -> None:
    pair = _mixed_pair(n=40)
    cost = np.full((9, 40), 10.0)
    cost[[2, 6, 7]] = 1.0
    out, _ = stopped_costs(pair, cost)
    valid = np.arange(40)
    recorded = compile_seconds("lcb", pair, cost, valid, seed=0)
    stopped = compile_seconds("lcb", pair, out, valid, seed=0)
    assert recorded - stopped == pytest.approx(3 * 40 * 9.0)  # C04, C06, C09: 10 s -> 1 s
    cut, rows = rate_first_k(pair)
    assert compile_seconds("lcb", cut, out[rows], valid, seed=0) == pytest.approx(
        40 * (10.0 + 5 * 1.0)
    )


def test_a_rate_first_replay_aliases_budgets_that_hold_the_same_columns() -> None:
    script = _script()
    pairs = {}
    for name in "abc":
        p = _pair(n=80, k=6)
        cots = ["prefix", "prefix", "none", "prefix", "suffix", "prefix"]
        cols = tuple(
            BankColumn(c.key, {**c.strategy, "cot": cot}, c.roles, c.predictions)
            for c, cot in zip(p.columns, cots, strict=True)
        )
        pairs[name] = BankPair(name, name, "q", "dataset", p.ids, p.human, p.groups, cols)
    cost = {n: np.ones((6, 80)) for n in pairs}
    rules = {r: RULES[r] for r in ("baseline", "best")}
    kw = {"n_valid": 40, "n_splits": 3, "seed": 0, "rules": rules}
    runs = [(2, False), (3, False), (5, False), (3, True)]
    rf = script.replay_candidates(pairs, {"latency": cost}, "rate_first", runs, **kw)
    assert list(rf["budgets"]) == ["2", "3", "3 raced"]
    assert rf["budget_aliases"] == {"5": "3"}
    assert rf["budgets"]["3"]["column_keys"]["a"] == ["C01", "C03", "C05"]
    assert rf["budgets"]["2"]["column_keys"]["a"] == ["C01", "C03"]
    assert script.resolve(rf, "5") == "3" and script.resolve(rf, "3") == "3"
    every = script.replay_candidates(pairs, {"latency": cost}, "all", runs[:3], **kw)
    assert list(every["budgets"]) == ["2", "3", "5"] and not every["budget_aliases"]
    # a third of the columns judged on the same items: a third of the hours
    h_all = every["budgets"]["5"]["rules"]["best"]["cpu_hours"]
    h_rf = rf["budgets"]["3"]["rules"]["best"]["cpu_hours"]
    assert h_rf == pytest.approx(h_all * 3 / 5)


def test_the_decision_bounds_the_rate_first_gain_by_one_standard_error() -> None:
    script = _script()

    def row(gains: list[float], hours: float, worse: float = 0.05) -> dict[str, Any]:
        g = np.asarray(gains)
        return {
            "mean_gain": float(g.mean()),
            "se": float(g.std(ddof=1) / np.sqrt(g.size)),
            "cpu_hours": hours,
            "max_pair_worse_share": worse,
            "cpu_hours_by_accounting": {"wall (e2e)": hours / 2, "wall (stop_at_score)": hours},
            "per_pair": {
                p: {"mean_gain": v, "worse_share": worse, "cpu_hours": hours}
                for p, v in zip("abcd", gains, strict=True)
            },
        }

    a = {"budgets": {"20": {"rules": {"lcb": row([0.0, 0.1, 0.0, 0.1], 4.0)}}}}
    # se of a: 0.05/sqrt(4)*2 = 0.0289; b loses 0.02 on average: within one se
    b = {
        "budgets": {"8": {"rules": {"lcb": row([0.0, 0.06, 0.0, 0.06], 1.0, 0.2)}}},
        "budget_aliases": {"20": "8"},
    }
    d = script.decision(a, b, "20", "lcb")
    v = d["rules"]["lcb"]
    assert d["budgets_used"] == {"a": "20", "b": "8"}
    assert v["difference"] == pytest.approx(-0.02)
    assert v["difference_se"] == pytest.approx(0.04 / np.sqrt(3) / 2)
    assert v["within_one_se"] and v["within_one_se_either_side"]
    assert v["cost_fraction"] == pytest.approx(0.25)
    assert v["meets_worse_criterion_a"] and not v["meets_worse_criterion_b"]
    assert v["minutes_b"] == {"recorder": 60.0, "wall": 30.0, "wall_range": [30.0, 60.0]}
    assert v["per_pair"]["a"]["gain_b"] == 0.0 and v["per_pair"]["b"]["gain_a"] == 0.1
    # losing more than one se of a's gain is outside the bound; gaining more is not
    b["budgets"]["8"]["rules"]["lcb"] = row([0.0, 0.0, 0.0, 0.0], 1.0)
    assert not script.decision(a, b, "20", "lcb")["rules"]["lcb"]["within_one_se"]
    b["budgets"]["8"]["rules"]["lcb"] = row([0.1, 0.2, 0.1, 0.2], 1.0)
    up = script.decision(a, b, "20", "lcb")["rules"]["lcb"]
    assert up["within_one_se"] and not up["within_one_se_either_side"]


def test_wall_time_scales_rating_only_and_explaining_calls_apart() -> None:
    script = _script()
    pair = _mixed_pair()
    cost = np.ones((9, 4))
    f = {"rating": 2.0, "explain": 0.5}
    stopped = script.wall_matrix(pair, cost, f, stopped=True)[:, 0]
    # rating-only: C03, C07, C08 and, stopped, the suffix ones C04, C06, C09; not C05
    np.testing.assert_array_equal(stopped, [0.5, 0.5, 2, 2, 0.5, 2, 2, 2, 2])
    recorded = script.wall_matrix(pair, cost, f, stopped=False)[:, 0]
    np.testing.assert_array_equal(recorded, [0.5, 0.5, 2, 0.5, 0.5, 0.5, 2, 2, 0.5])


def test_the_measured_stop_ratio_is_read_from_the_stop_at_score_result(tmp_path: Path) -> None:
    script = _script()
    rows = [
        {
            "task": "t",
            "aspect": "q",
            "cot": "suffix",
            "seconds_explain": 100.0,
            "seconds_stop": 40.0,
        },
        {"task": "t", "aspect": "q", "cot": "none", "seconds_explain": 39.0, "seconds_stop": 38.0},
    ]
    summary = {"suffix_seconds_per_item_explain": 4.0, "suffix_seconds_per_item_stop": 1.0}
    path = tmp_path / "stop.json"
    path.write_text(__import__("json").dumps({"summary": summary, "rows": rows}))
    got = script.stop_ratio(path)
    assert got["ratio"] == 0.25 and got["per_pair"] == {"t_q": 0.4}
    assert got["stopped_over_none"]["t_q"] == pytest.approx(40 / 38)
