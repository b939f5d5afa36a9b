"""The cost accounting of ``benchmarks/bank_cost.py``: seconds per judgement from the bank's
chunks, a compile's judging seconds per rule, the budget's columns and the comparison with the
reference. Small banks made by hand, so that every number is known."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from judgeopt.selection import Pick, RuleInput, RuleSpec, confirmation_split
from judgeopt_lab import (
    RULES,
    BankColumn,
    BankPair,
    bank_splits,
    compile_seconds,
    cost_matrix,
    first_k,
    judgement_costs,
    race,
    raced,
    replay_bank,
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
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bank_cost.py"
    spec = importlib.util.spec_from_file_location("bank_cost_script", path)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_cost_rows_put_the_replays_gain_beside_the_compiles_hours() -> None:
    script = _script()
    pairs = {}
    for name in "abc":
        p = _pair(n=120)
        pairs[name] = BankPair(name, name, "q", "dataset", p.ids, p.human, p.groups, p.columns)
    rules = {r: RULES[r] for r in ("baseline", "best", "confirm")}
    payload = replay_bank(pairs, rules, n_valids=(60,), n_splits=4)
    cost = {n: np.full((6, 120), 3600.0 / 60) for n in pairs}  # 1 h per column and 60 items
    rows = script.cost_rows(
        pairs,
        {"latency": cost, "equal": cost},
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
