"""The judgement bank: its files, the loader, the pooled decision rules and the replay.

The bank itself is recorded with the embedded model (benchmarks/bank.py); these tests build
small banks by hand so that every number is known.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _scripts import load_script

from judgeopt.judge import JudgeEnsemble, JudgeProgram, load_task
from judgeopt.metrics import correlation
from judgeopt.scoring import combine_z
from judgeopt.selection import (
    GainPrior,
    Pick,
    RuleInput,
    anchored_rule,
    best_rule,
    bootstrap_scores,
    change_key,
    column_scores,
    confirm_rule,
    confirmation_split,
    crossfit_gain,
    ensemble_rule,
    factor_rule,
    frugal,
    guarded,
    impute,
    lcb_rule,
    posterior_rule,
    prior_rule,
    shrink_rule,
    stack_rule,
    with_fallback,
)
from judgeopt_lab import (
    RULES,
    BankColumn,
    BankPair,
    RuleSpec,
    bank_lines,
    bank_splits,
    bank_todo,
    choose_default,
    judgement_covers,
    keep_judgement,
    load_bank,
    pack_bank,
    prior_strategy,
    replay_bank,
    replay_rule,
)

BASE = {"scale": 5, "cot": "prefix", "decoding": "greedy"}


# Files and loader --------------------------------------------------------------------------
def _write_data(root: Path, n: int = 12) -> list[dict[str, Any]]:
    rows = [
        {
            "id": f"x{i:02d}",
            "group_id": f"g{i // 3}",
            "system_id": None,
            "inputs": {"text": f"item {i}"},
            "scores": {"quality": float(i % 5 + 1)},
            "meta": {},
        }
        for i in range(n)
    ]
    (root / "toy").mkdir(parents=True)
    (root / "toy" / "full.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )
    return rows


def _plan(ids: list[str]) -> dict[str, Any]:
    return {
        "format": 1,
        "pairs": [
            {
                "name": "toy_quality",
                "task": "toy",
                "aspect": "quality",
                "level": "dataset",
                "pool": ids,
                "columns": [
                    {"key": "C01", "strategy": BASE, "roles": ["baseline"]},
                    {"key": "C02", "strategy": {**BASE, "decoding": "expected"}, "roles": ["x"]},
                ],
            }
        ],
    }


def _judgement(rid: str, greedy: float | None, source: str = "bank", **kw: Any) -> dict[str, Any]:
    strategy = {k: v for k, v in BASE.items() if k != "decoding"}
    line = {"kind": "judgement", "strategy": strategy, "id": rid, "greedy": greedy}
    line.update({"expected": None, "error": None, "source": source})
    line.update(kw)
    return line


def test_load_bank_reads_packed_and_recent_lines_and_counts_what_is_missing(
    tmp_path: Path,
) -> None:
    rows = _write_data(tmp_path / "data")
    ids = [r["id"] for r in rows]
    plan = _plan(ids)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan), encoding="utf-8")
    sha = hashlib.sha256(plan_path.read_bytes()).hexdigest()[:16]
    bank = tmp_path / "bank"
    bank.mkdir()
    lines = [{"kind": "header", "plan_sha": sha, "pair": "toy_quality"}]
    # greedy-only imports for every item; bank calls (greedy + expected) for half of them
    lines += [_judgement(i, 3.0, source="e2e:items") for i in ids]
    lines += [_judgement(i, 4.0, expected=3.5) for i in ids[:6]]
    (bank / "toy_quality.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in lines) + '{"cut', encoding="utf-8"
    )
    pack_bank(bank, "toy_quality")
    assert not (bank / "toy_quality.jsonl").exists()
    with (bank / "toy_quality.jsonl").open("w", encoding="utf-8") as fh:  # recorded after
        fh.write(json.dumps(_judgement(ids[6], 2.0, expected=2.5)) + "\n")
    assert len(list(bank_lines(bank, "toy_quality"))) == len(lines) + 1

    pair = load_bank(plan_path, bank, data_dir=tmp_path / "data")["toy_quality"]
    greedy, expected = pair.columns
    # a bank call replaces the imported greedy judgement of the same item
    assert greedy.predictions.tolist() == [4.0] * 6 + [2.0] + [3.0] * 5
    assert expected.predictions[:7].tolist() == [3.5] * 6 + [2.5]
    assert pair.missing == 5 and not pair.complete  # 5 items lack an expected rating
    assert pair.baseline is greedy
    assert pair.human.tolist() == [float(i % 5 + 1) for i in range(12)]
    assert load_bank(plan_path, bank, data_dir=tmp_path / "data", complete_only=True) == {}
    # the usable part of a partial pair: the groups (of 3 items) judged by every column;
    # g2 has x06 judged but not x07, x08, so only g0 and g1 remain
    part = pair.judged_groups()
    assert part.ids == tuple(ids[:6]) and part.complete
    assert part.human.tolist() == pair.human[:6].tolist()
    assert [c.predictions.tolist() for c in part.columns] == [[4.0] * 6, [3.5] * 6]
    assert part.judged_groups() is part

    # a bank recorded under another plan is refused
    plan_path.write_text(json.dumps(plan) + " ", encoding="utf-8")
    with pytest.raises(ValueError, match="recorded under plan"):
        load_bank(plan_path, bank, data_dir=tmp_path / "data")
    with pytest.raises(ValueError, match="unknown pair"):
        load_bank(plan, bank, data_dir=tmp_path / "data", pairs=["nope"])


def test_twin_columns_come_from_the_same_calls_and_the_twin_file_fills_the_imports(
    tmp_path: Path,
) -> None:
    rows = _write_data(tmp_path / "data")
    ids = [r["id"] for r in rows]
    rate_first = {"scale": 5, "cot": "suffix"}
    plan = _plan(ids)
    plan["pairs"][0]["columns"] = [
        {"key": "C01", "strategy": BASE, "roles": ["baseline"]},  # explains first: no twin
        {"key": "C02", "strategy": {**rate_first, "decoding": "greedy"}, "roles": ["x"]},
    ]
    bank = tmp_path / "bank"
    bank.mkdir()

    def line(strategy: dict[str, Any], rid: str, **kw: Any) -> dict[str, Any]:
        return {"kind": "judgement", "strategy": strategy, "id": rid, "error": None, **kw}

    base_first = {k: v for k, v in BASE.items() if k != "decoding"}
    lines = [line(base_first, i, greedy=3.0, expected=2.9, source="bank") for i in ids]
    # the rating-first column: bank calls (both ratings) for 8 items, greedy imports for 4
    lines += [line(rate_first, i, greedy=4.0, expected=3.6, source="bank") for i in ids[:8]]
    lines += [line(rate_first, i, greedy=2.0, expected=None, source="e2e:x") for i in ids[8:]]
    (bank / "toy_quality.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    pair = load_bank(_plan_file(tmp_path, plan), bank, data_dir=tmp_path / "data", twins=True)
    p = pair["toy_quality"]
    assert [c.key for c in p.columns] == ["C01", "C02"] and p.twins_missing == 1
    # the re-judged imports (stopped at the rating) complete the twin; the planned column
    # keeps its own (imported) greedy ratings
    twins = [
        {**line(rate_first, i, greedy=2.0, expected=2.4), "kind": "twin", "stored_greedy": 2.0}
        for i in ids[8:]
    ]
    (bank / "toy_quality.twins.jsonl").write_text("".join(json.dumps(x) + "\n" for x in twins))
    p = load_bank(_plan_file(tmp_path, plan), bank, data_dir=tmp_path / "data", twins=True)[
        "toy_quality"
    ]
    assert [c.key for c in p.columns] == ["C01", "C02", "C02~"] and p.twins_missing == 0
    planned, twin = p.columns[1], p.columns[2]
    assert planned.predictions.tolist() == [4.0] * 8 + [2.0] * 4
    assert twin.strategy == {**rate_first, "decoding": "expected"}
    assert twin.roles == ("twin of C02",)
    assert twin.predictions.tolist() == [3.6] * 8 + [2.4] * 4
    # without twins=True nothing changes
    assert (
        len(
            load_bank(_plan_file(tmp_path, plan), bank, data_dir=tmp_path / "data")[
                "toy_quality"
            ].columns
        )
        == 2
    )


def _plan_file(root: Path, plan: dict[str, Any]) -> Path:
    path = root / "plan.json"
    path.write_text(json.dumps(plan), encoding="utf-8")
    return path


def test_the_recorder_fills_a_pair_group_by_group_fewest_calls_first() -> None:
    ids = [f"x{i:02d}" for i in range(6)]
    groups = {i: f"g{int(i[1:]) // 2}" for i in ids}  # g0: x00 x01, g1: x02 x03, g2: x04 x05
    have: dict[tuple[str, str], dict[str, Any]] = {}
    keep_judgement(have, _judgement("x02", 3.0, expected=3.2))  # a bank call: both ratings
    keep_judgement(have, _judgement("x03", 3.0, source="e2e:items"))  # greedy only
    keep_judgement(have, _judgement("x04", 3.0, expected=2.9))
    keep_judgement(have, _judgement("x05", None, error="Timeout"))  # a failed call
    todo = bank_todo(_plan(ids)["pairs"][0], have, groups)
    # g1 and g2 need one call each (x03's expected rating; x05 again), g0 two: the groups
    # with the fewest calls per item first, ties in pool order, each group's items together
    assert [rid for _, rid in todo] == ["x03", "x05", "x00", "x01"]
    assert len({b for b, _ in todo}) == 1  # one base strategy: greedy and expected share a call
    # only until 2 or 4 items are judged by every column (waves of one group here)
    plan = _plan(ids)["pairs"][0]
    assert [rid for _, rid in bank_todo(plan, have, groups, upto=2)] == ["x03"]
    assert [rid for _, rid in bank_todo(plan, have, groups, upto=4)] == ["x03", "x05"]
    with pytest.raises(ValueError, match="`wave` must be at least 1"):
        bank_todo(plan, have, groups, wave=0)
    # waves of >= 4 items (whole groups), column by column inside a wave: the calls in
    # flight together share their strategy's instructions
    plan = _plan(ids)["pairs"][0]
    plan["columns"].append({"key": "C03", "strategy": {**BASE, "scale": 10}, "roles": ["x"]})
    todo = bank_todo(plan, have, groups, wave=4)
    first, ten = (
        json.dumps({"cot": "prefix", "scale": 5}),
        json.dumps({"cot": "prefix", "scale": 10}),
    )
    assert todo == [
        *[(first, r) for r in ["x03", "x05"]],
        *[(ten, r) for r in ["x02", "x03", "x04", "x05"]],
        *[(first, r) for r in ["x00", "x01"]],
        *[(ten, r) for r in ["x00", "x01"]],
    ]


def test_keep_judgement_prefers_bank_calls_and_never_a_failed_call() -> None:
    from judgeopt_lab import keep_judgement

    held: dict[tuple[str, str], dict[str, Any]] = {}
    keep_judgement(held, _judgement("x", 3.0, source="e2e:items"))
    keep_judgement(held, _judgement("x", None, error="timeout"))  # a failed bank call
    assert [v["greedy"] for v in held.values()] == [3.0]
    keep_judgement(held, _judgement("x", 4.0))  # a bank call replaces the import
    keep_judgement(held, _judgement("x", 2.0, source="e2e:test"))  # an import does not
    assert [v["greedy"] for v in held.values()] == [4.0]


def test_judgement_covers() -> None:
    assert not judgement_covers(None, "greedy")
    assert not judgement_covers({"error": "timeout", "source": "bank"}, "greedy")
    imported = {"error": None, "source": "e2e:x", "greedy": None, "expected": None}
    assert judgement_covers(imported, "greedy")  # an unparsed answer is an outcome
    assert not judgement_covers(imported, "expected")
    assert judgement_covers({**imported, "expected_error": "no logprobs"}, "expected")
    assert judgement_covers({**imported, "source": "bank"}, "expected")


# Scores ---------------------------------------------------------------------------------------
def test_column_scores_match_the_metrics_module_with_the_evaluate_imputation() -> None:
    rng = np.random.default_rng(1)
    human = rng.integers(1, 6, 40).astype(float)
    preds = rng.integers(1, 6, (3, 40)).astype(float)
    preds[1, :5] = np.nan
    groups = [f"g{i // 5}" for i in range(40)]
    filled = impute(preds)
    assert filled[1, :5].tolist() == [np.nanmean(preds[1])] * 5
    for level in (None, groups):
        got = column_scores(human, preds, level)
        want = [correlation(human, filled[k], "spearman", groups=level) for k in range(3)]
        assert got == pytest.approx(want)
    boot = bootstrap_scores(human, preds, groups, n_resamples=50, rng=np.random.default_rng(0))
    again = bootstrap_scores(human, preds, groups, n_resamples=50, rng=np.random.default_rng(0))
    assert boot.shape == (50, 3) and np.array_equal(boot, again)


def _toy_input(signal: float, n: int = 120, k: int = 8, seed: int = 0) -> RuleInput:
    """Candidates = noisy copies of the human scores; row 0 (the baseline) and rows 1..k-1
    equally noisy, except row 3 which has ``signal`` less noise."""
    rng = np.random.default_rng(seed)
    human = rng.normal(size=n)
    noise = np.full(k, 1.5)
    noise[3] = 1.5 - signal
    preds = human[None, :] + rng.normal(size=(k, n)) * noise[:, None]
    strategies = [{"scale": 5, "cot": "prefix" if i % 2 else "none", "n": i} for i in range(k)]
    return RuleInput(human=human, preds=preds, baseline=0, strategies=strategies, seed=seed)


def test_rules_pick_a_clearly_better_candidate_and_keep_the_baseline_on_noise() -> None:
    strong = _toy_input(signal=1.2)
    for rule in (best_rule, shrink_rule, lcb_rule, confirm_rule):
        assert rule(strong).single == 3, rule.__name__
    assert factor_rule(strong).single == 3
    # factor_rule reads row i's factor values from strategies[i]: the baseline's row too
    short = RuleInput(strong.human, strong.preds, 0, strategies=strong.strategies[1:])
    with pytest.raises(
        ValueError, match=r"one strategy per candidate \(strategies: 7, candidates: 8\)"
    ):
        factor_rule(short)
    # all candidates the same: the rules that correct for choosing keep the baseline often
    kept = {"shrink": 0, "lcb": 0, "best": 0}
    for seed in range(20):
        flat = _toy_input(signal=0.0, seed=seed)
        kept["shrink"] += shrink_rule(flat).single == 0
        kept["lcb"] += lcb_rule(flat).single == 0
        kept["best"] += best_rule(flat).single == 0
    assert kept["lcb"] >= 13 and kept["shrink"] >= 10, kept  # alpha 0.2 over 7 candidates
    assert kept["best"] <= 8  # the winner's curse: the best score is rarely the baseline's


def test_prior_rule_returns_the_prior_unless_the_labels_refute_it() -> None:
    data = _toy_input(signal=1.2)  # row 3 (cot "prefix", n 3) is clearly better
    change = {"cot": "prefix", "n": 3}
    assert prior_rule(data, strategy=change).single == 3
    assert prior_rule(data, strategy=change, veto_confidence=0.8).single == 3
    worse = _toy_input(signal=-3.0)  # row 3 now much worse than the baseline
    vetoed = prior_rule(worse, strategy=change, veto_confidence=0.8)
    assert vetoed.single == 0 and "vetoed" in vetoed.reason
    assert prior_rule(worse, strategy=change).single == 3  # without a veto: the prior
    assert prior_rule(data, strategy={"cot": "other"}).single == 0  # not a candidate
    assert prior_rule(data, strategy=None).single == 0


def test_ensemble_and_stack_predict_from_their_members() -> None:
    data = _toy_input(signal=1.0)
    pick = ensemble_rule(data, m=3)
    assert len(pick.members) == 3 and 3 in pick.members
    z = (impute(data.preds[list(pick.members)]) - np.array(pick.center)[:, None]) / np.array(
        pick.scale
    )[:, None]
    assert pick.predict(data.preds) == pytest.approx(z.mean(axis=0))
    stacked = stack_rule(data, ridge=1.0)
    assert len(stacked.weights) == data.preds.shape[0]
    assert int(np.argmax(stacked.weights)) == 3
    with_nan = data.preds.copy()
    with_nan[3, 0] = np.nan  # a missing member rating counts as its validation mean
    assert np.isfinite(stacked.predict(with_nan)).all()


def test_a_few_parameter_stack_weighs_the_baseline_and_the_m_best() -> None:
    data = _toy_input(signal=1.0)
    few = stack_rule(data, ridge=1.0, m=2)
    best_others = [int(i) for i in np.argsort(-data.scores, kind="stable") if i != 0][:2]
    assert few.members == (0, *best_others) and len(few.weights) == 3 and 3 in few.members
    assert few.weights[few.members.index(3)] == max(few.weights)
    assert "the 2 best others" in few.reason and not few.averaged
    assert np.isfinite(few.predict(data.preds)).all()
    with pytest.raises(ValueError, match="m .other candidates. must be at least 1"):
        stack_rule(data, m=0)
    # Guarded (the registry's stack+guard): kept on a clear signal, the baseline on noise.
    guard = RULES["stack+guard"]
    assert guard.bind({"m": 3, "ridge": 1.0, "margin": 0.0})(data).members[0] == 0
    assert len(guard.bind({"m": 3, "ridge": 1.0, "margin": 0.0})(data).members) == 4
    assert guard.bind({"m": 3, "ridge": 1.0, "margin": 0.9})(data).single == 0
    # Others that only add noise to a baseline as good as it gets: the guard keeps it.
    kept = 0
    for seed in range(10):
        rng = np.random.default_rng(seed)
        human = rng.normal(size=120)
        preds = rng.normal(size=(8, 120))
        preds[0] = human + 0.5 * rng.normal(size=120)
        noisy = RuleInput(human=human, preds=preds, baseline=0, seed=seed)
        kept += guard.bind({"m": 0, "ridge": 1.0, "margin": 0.0})(noisy).single == 0
    assert kept >= 8, kept


def test_a_non_negative_stack_drops_the_judges_it_would_subtract() -> None:
    """``nonneg``: a judge that helps only with a negative weight (it carries the noise of
    another) is dropped; the rest are a weighted mean z (averaged, as a JudgeEnsemble)."""
    rng = np.random.default_rng(0)
    n = 200
    human = rng.normal(size=n)
    shared = rng.normal(size=n)
    preds = np.vstack(
        [
            human + shared + 0.5 * rng.normal(size=n),  # the baseline, with a shared error
            human + 0.8 * rng.normal(size=n),
            shared + 0.3 * rng.normal(size=n),  # the error alone: useful only subtracted
            human + 0.8 * rng.normal(size=n),
        ]
    )
    data = RuleInput(human=human, preds=preds, baseline=0, seed=0)
    signed = stack_rule(data, ridge=0.01)
    assert signed.weights[2] < 0 and not signed.averaged
    kept = stack_rule(data, ridge=0.01, nonneg=True)
    assert 2 not in kept.members and kept.averaged and min(kept.weights) >= 0
    assert {1, 3} <= set(kept.members)
    # Only noise besides the baseline: one candidate is left, alone.
    flat = RuleInput(human=human, preds=np.vstack([preds[0], -preds[1]]), baseline=0, seed=0)
    assert stack_rule(flat, ridge=0.01, nonneg=True).single == 0


def test_anchored_ensemble_keeps_the_baseline_at_its_weight() -> None:
    data = _toy_input(signal=1.0)
    pick = anchored_rule(data, m=2, w=0.5)
    assert pick.members[0] == data.baseline and len(pick.members) == 3
    assert pick.weights == pytest.approx((0.5, 0.25, 0.25))
    assert 3 in pick.members  # the truly better candidate is among the best others
    z = (impute(data.preds[list(pick.members)]) - np.array(pick.center)[:, None]) / np.array(
        pick.scale
    )[:, None]
    assert pick.predict(data.preds) == pytest.approx(np.array(pick.weights) @ z)
    for bad, match in (({"w": 1.0}, "w .the baseline's weight."), ({"m": 0}, "m .other")):
        with pytest.raises(ValueError, match=match):
            anchored_rule(data, **bad)


def test_the_guard_keeps_a_pick_only_when_it_beats_the_baseline_cross_fitted() -> None:
    """``crossfit_gain``: the rule chosen on each validation half, scored against the
    baseline on the other; ``guarded`` keeps the rule's pick (on all the items) only when
    that gain is positive."""

    def rule(d: RuleInput) -> Pick:
        return anchored_rule(d, m=2, w=0.5)

    strong = _toy_input(signal=1.2)
    first, second = confirmation_split(strong.human, None, fraction=0.5, seed=strong.seed)
    want = []
    for fit, check in ((first, second), (second, first)):
        sub = RuleInput(strong.human[fit], strong.preds[:, fit], 0, seed=strong.seed)
        pred = rule(sub).predict(strong.preds[:, check])
        h = strong.human[check]
        scores = column_scores(h, np.vstack([pred, strong.preds[0, check]]))
        want.append(scores[0] - scores[1])
    gain = crossfit_gain(strong, rule)
    assert gain == pytest.approx(float(np.mean(want))) and gain > 0.05
    kept = guarded(rule)(strong)
    assert kept.members == rule(strong).members and kept.weights == rule(strong).weights
    assert "cross-fitted gain" in kept.reason
    assert guarded(rule, margin=gain + 0.01)(strong).single == 0  # a margin above it
    # keyed: the cross-fitted gain is computed once per input, shared across margins
    fresh = RuleInput(strong.human, strong.preds, 0, seed=strong.seed)
    assert guarded(rule, key="g")(fresh).members == kept.members
    assert guarded(rule, margin=gain + 0.01, key="g")(fresh).single == 0
    assert fresh.memo("g-0.5", lambda: float("nan")) == pytest.approx(gain)
    assert crossfit_gain(strong, lambda d: Pick((d.baseline,))) == 0.0
    # judges unrelated to the human scores: the best few always look better on the items
    # they were chosen on; cross-fitted, they gain nothing, and the guard sends about half
    # of such picks back to the baseline (10 of these 20)
    changed = kept_baseline = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        noise = RuleInput(rng.normal(size=100), rng.normal(size=(8, 100)), 0, seed=seed)
        changed += ensemble_rule(noise, m=3).single != 0
        kept_baseline += guarded(lambda d: ensemble_rule(d, m=3))(noise).single == 0
    assert changed == 20 and kept_baseline >= 8, kept_baseline
    # a group-level task: the halves hold whole groups
    groups = [f"g{i // 4}" for i in range(strong.human.size)]
    grouped = RuleInput(strong.human, strong.preds, 0, groups=groups, seed=1)
    assert np.isfinite(crossfit_gain(grouped, rule))
    assert guarded(rule)(grouped).members in {(0,), rule(grouped).members}


def test_frugal_ships_the_single_judge_that_does_as_well_cross_fitted() -> None:
    """One candidate carries all the signal: the ensemble of the 3 best gains no more than
    it, cross-fitted, so the frugal rule ships the single judge; a tolerance below zero (the
    single judge must beat the ensemble by that much) keeps the ensemble; a margin above
    the single judge's cross-fitted gain keeps the ensemble too."""
    strong = _toy_input(signal=1.4)
    ens = lambda d: ensemble_rule(d, m=3)  # noqa: E731
    g_single, g_ens = crossfit_gain(strong, best_rule), crossfit_gain(strong, ens)
    assert g_single >= g_ens  # the other two members only add noise
    pick = frugal(ens, best_rule)(strong)
    assert pick.single == 3 and "fewer calls" in pick.reason
    assert frugal(ens, best_rule, tolerance=g_ens - g_single - 0.01)(strong).members == (
        ens(strong).members
    )
    assert len(frugal(ens, best_rule, margin=g_single + 0.01)(strong).members) == 3
    # a single pick is returned as it is; a "cheaper" rule that is not cheaper is ignored
    assert frugal(best_rule, ens)(strong).single == 3
    assert frugal(ens, lambda d: ensemble_rule(d, m=3))(strong).members == ens(strong).members
    # keyed: each cross-fitted gain is computed once per input
    fresh = RuleInput(strong.human, strong.preds, 0, seed=strong.seed)
    assert frugal(ens, best_rule, keys=("e", "b"))(fresh).single == 3
    assert fresh.memo("b-0.5", lambda: float("nan")) == pytest.approx(g_single)
    # registered: stack+guard+frugal ships a single judge or the guarded stack
    spec = RULES["stack+guard+frugal"]
    for setting in spec.settings():
        got = spec.bind(setting)(strong)
        assert got.single == 3 or len(got.members) > 1


def test_an_ensemble_pick_renormalises_over_parsed_members_as_the_compile_does() -> None:
    """Replay and compile score an ensemble alike: a member whose rating did not parse
    drops out and the others' weights are renormalised (JudgeEnsemble.combine); a stacked
    (linear) pick counts it as its validation mean instead."""
    pick = Pick((0, 1, 2), (0.5, 0.25, 0.25), (3.0, 2.0, 4.0), (1.0, 2.0, 0.5))
    preds = np.array([[4.0, np.nan, np.nan], [4.0, 4.0, np.nan], [np.nan, 3.0, np.nan]])
    out = pick.predict(preds)
    # item 0: z = (1, 1) at weights (0.5, 0.25) -> 1; item 1: z = (1, -2) at (0.25, 0.25)
    assert out[0] == pytest.approx(1.0) and out[1] == pytest.approx(-0.5)
    assert np.isnan(out[2])  # no member parsed
    task = load_task("topical_chat")
    ens = JudgeEnsemble(
        [JudgeProgram(task, "coherence") for _ in range(3)],
        means=list(pick.center),
        sds=list(pick.scale),
        weights=list(pick.weights),
    )
    for i in range(2):
        ratings = [None if np.isnan(x) else float(x) for x in preds[:, i]]
        assert ens.combine(ratings)[1] == pytest.approx(out[i])
    linear = Pick(pick.members, pick.weights, pick.center, pick.scale, averaged=False)
    assert linear.predict(preds)[1] == pytest.approx(0.25 * 1.0 + 0.25 * -2.0)


def test_combine_z_leaves_an_item_unrated_without_weight_and_names_a_mismatch() -> None:
    """The arithmetic lives once in judgeopt.scoring: a member whose parsed rating carries
    no weight leaves the item unrated, and a mismatched table names what is missing."""
    out = combine_z([[5.0, 5.0], [1.0, np.nan]], (3.0, 2.0), (1.0, 1.0), (0.0, 1.0))
    assert out[0] == pytest.approx(-1.0) and np.isnan(out[1])
    with pytest.raises(ValueError, match="2 members .* 1 scale"):
        combine_z([[1.0], [2.0]], (0.0, 0.0), (1.0,), (1.0, 1.0))


def test_prior_and_fallback() -> None:
    data = _toy_input(signal=0.0)
    assert prior_rule(data, strategy={"cot": "prefix", "n": 5}).single == 5  # a change
    assert prior_rule(data, strategy={"unknown": 1}).single == 0
    assert prior_rule(data, strategy={}).single == 0
    keep_base = lambda d: Pick((d.baseline,))  # noqa: E731
    assert with_fallback(keep_base, lambda d: Pick((2,)))(data).single == 2
    assert with_fallback(lambda d: Pick((4,)), lambda d: Pick((2,)))(data).single == 4


def test_gain_prior_pools_the_other_tasks_gains_per_change() -> None:
    a, b = change_key({"cot": "none"}), change_key({"scale": 10})
    prior = GainPrior.from_gains([{"{}": 0.0, a: 0.1, b: -0.2}, {a: 0.3}])
    assert prior.means == pytest.approx({a: 0.2, b: -0.2})
    assert prior.counts == {a: 2, b: 1}
    assert prior.sd_task == pytest.approx(np.sqrt(0.02))  # a's spread, 1 degree of freedom
    assert prior.sd_unseen == pytest.approx(np.sqrt(0.14 / 3))
    assert prior.of({"cot": "none"}) == pytest.approx((0.2, np.sqrt(0.02) * np.sqrt(1.5)))
    assert prior.of({}) == (0.0, 0.0)
    assert prior.of({"cot": "suffix"}) == pytest.approx((0.0, np.sqrt(0.14 / 3)))
    with pytest.raises(ValueError, match="at least one task with a change"):
        GainPrior.from_gains([{"{}": 0.0}])


def test_posterior_rule_weighs_the_labels_against_the_other_tasks() -> None:
    five = change_key({"cot": "prefix", "n": 5})
    three = change_key({"cot": "prefix", "n": 3})
    flat = _toy_input(signal=0.0)
    # no signal in the labels: a confident prior decides
    sure = GainPrior({five: 0.3}, {five: 6}, sd_task=0.01, sd_unseen=0.05)
    assert posterior_rule(flat, prior=sure).single == 5
    assert posterior_rule(flat, prior=sure, margin=0.5).single == 0
    # clear labels and a vague prior: the labels decide
    vague = GainPrior({}, {}, sd_task=1.0, sd_unseen=1.0)
    assert posterior_rule(_toy_input(signal=1.2), prior=vague).single == 3
    # the labels refute a mild prior
    mild = GainPrior({three: 0.1}, {three: 6}, sd_task=0.1, sd_unseen=0.01)
    assert posterior_rule(_toy_input(signal=1.2), prior=mild).single == 3
    assert posterior_rule(_toy_input(signal=-3.0), prior=mild).single != 3
    assert posterior_rule(flat, prior=None).single == 0
    short = RuleInput(flat.human, flat.preds, 0, strategies=flat.strategies[1:])
    with pytest.raises(ValueError, match=r"strategies: 7, candidates: 8"):
        posterior_rule(short, prior=sure)


# Replay ---------------------------------------------------------------------------------------
def _pair(
    name: str, good: int, seed: int, n: int = 240, level: str = "dataset", good_noise: float = 0.9
) -> BankPair:
    """A synthetic bank pair: 6 columns, column ``good`` (noise ``good_noise``, the others
    2.0) truly better than the baseline (or the baseline itself: ``good=0``)."""
    rng = np.random.default_rng(seed)
    human = rng.integers(1, 6, n).astype(float)
    cols = []
    for i in range(6):
        noise = good_noise if i == good else 2.0
        preds = np.clip(np.round(human + rng.normal(size=n) * noise), 1, 5)
        strategy = {"scale": 5, "cot": "none" if i == good else f"c{i}"}
        roles = ("baseline",) if i == 0 else ("search",)
        cols.append(BankColumn(f"C{i + 1:02d}", strategy, roles, preds))
    return BankPair(
        name=name,
        task=name,
        aspect="q",
        level=level,
        ids=tuple(f"{name}{i}" for i in range(n)),
        human=human,
        groups=np.array([f"g{i // 8}" for i in range(n)], dtype=object),
        columns=tuple(cols),
    )


def test_bank_splits_are_whole_groups_disjoint_and_seeded() -> None:
    pair = _pair("a", good=2, seed=0)
    splits = bank_splits(pair, 100, 5, seed=3)
    assert [len(v) for v, _ in splits] == [104] * 5  # 13 groups of 8
    for v, t in splits:
        assert not set(v) & set(t) and len(v) + len(t) == 240
        assert not {pair.groups[i] for i in v} & {pair.groups[i] for i in t}
    again = bank_splits(pair, 100, 5, seed=3)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(splits, again, strict=True))
    with pytest.raises(ValueError, match="leaves 0 test items"):
        bank_splits(pair, 240, 1)


def test_replay_scores_the_pick_on_test_against_the_baseline() -> None:
    pair = _pair("a", good=2, seed=0, level="group")
    splits = bank_splits(pair, 100, 20)
    base = replay_rule(pair, lambda d: Pick((d.baseline,)), splits)
    assert not base.gains.any() and base.kept_baseline.all()
    best = replay_rule(pair, best_rule, splits)
    assert best.gains.mean() > 0.1
    v, t = splits[0]
    test_scores = column_scores(pair.human[t], pair.matrix()[:, t], list(pair.groups[t]))
    assert best.gains[0] == pytest.approx(test_scores[best.picks[0][0]] - test_scores[0])


def test_prior_strategy_is_the_best_common_change_of_the_other_pairs() -> None:
    pairs = [_pair(n, good=2, seed=s) for s, n in enumerate("abc")]
    assert prior_strategy(pairs) == {"cot": "none"}  # the change from each baseline


def test_replay_bank_chooses_constants_and_priors_on_the_other_pairs() -> None:
    bank = {n: _pair(n, good=2, seed=s) for s, n in enumerate("abc")}
    # a rule whose constant says which column to return: 2 is good everywhere
    spec = RuleSpec(lambda d, col: Pick((col,)), {"col": (1, 2)})
    payload = replay_bank(
        bank,
        {"fixed": spec, "prior": RULES["prior"], "baseline": RULES["baseline"]},
        n_valids=(100,),
        n_splits=10,
    )
    row = payload["rules"]["fixed"]["n_valid"]["100"]
    assert {p["setting"]["col"] for p in row["per_pair"].values()} == {2}
    assert row["mean_gain"] > 0.1 and row["se"] is not None
    assert set(row) >= {"mean_gain", "se", "mean_relative_gain", "worse_share", "per_pair"}
    assert payload["priors"]["a"] == {"cot": "none"}
    prior_row = payload["rules"]["prior"]["n_valid"]["100"]
    assert prior_row["per_pair"]["a"]["baseline_share"] == 0.0
    assert payload["rules"]["baseline"]["n_valid"]["100"]["mean_gain"] == 0.0
    assert choose_default(payload) in {"fixed", "prior"}
    assert payload["gain_prior"]["means"][change_key({"cot": "none"})] > 0.1
    assert payload["gain_prior"]["counts"][change_key({"cot": "none"})] == 3
    post = replay_bank(bank, {"posterior": RULES["posterior"]}, n_valids=(100,), n_splits=10)
    assert post["rules"]["posterior"]["n_valid"]["100"]["mean_gain"] > 0.1
    with pytest.raises(ValueError, match="at least 2 pairs"):
        replay_bank({"a": bank["a"]}, n_valids=(100,), n_splits=2)


def test_replay_fixed_scores_one_setting_at_every_size_on_replay_banks_splits() -> None:
    """What a preset ships: one rule at one setting, whatever the size; on the same splits
    as :func:`replay_bank` (same seed), so a setting's rows agree between the two."""
    from judgeopt_lab import replay_fixed

    bank = {"a": _pair("a", 2, 0), "b": _pair("b", 2, 1), "c": _pair("c", 0, 2, good_noise=1.6)}
    spec = RuleSpec(lambda d, col: Pick((col,)), {"col": (2,)})
    fixed = replay_fixed(
        bank, "fixed", {"col": 2}, rules={"fixed": spec}, n_valids=(50, 100), n_splits=20
    )
    assert fixed["rule"] == "fixed" and fixed["setting"] == {"col": 2}
    assert set(fixed["n_valid"]) == {"50", "100"}
    full = replay_bank(bank, {"fixed": spec}, n_valids=(100,), n_splits=20)
    got, want = fixed["n_valid"]["100"], full["rules"]["fixed"]["n_valid"]["100"]
    assert got["mean_gain"] == pytest.approx(want["mean_gain"])
    assert got["per_pair"]["c"]["worse_share"] == want["per_pair"]["c"]["worse_share"] > 0.5
    with pytest.raises(ValueError, match="unknown rule 'nope'"):
        replay_fixed(bank, "nope", {}, n_valids=(100,), n_splits=2)


def test_a_rules_constants_are_chosen_by_the_defaults_criterion() -> None:
    """A setting is chosen on the other pairs as the default rule is: the best mean gain
    among the settings that are rarely worse than the baseline on every one of them. Column
    2 is better than the baseline on a and b and a little worse on c (in about 90 % of the
    splits); column 0 is the baseline. Left out, c gets column 2 (safe and better on a and
    b); a and b get the baseline's column, though column 2's mean gain over the other two
    pairs is positive (by gain alone they would get it)."""
    bank = {"a": _pair("a", 2, 0), "b": _pair("b", 2, 1), "c": _pair("c", 0, 2, good_noise=1.6)}
    spec = RuleSpec(lambda d, col: Pick((col,)), {"col": (0, 2)})
    payload = replay_bank(bank, {"fixed": spec}, n_valids=(100,), n_splits=20)
    per_pair = payload["rules"]["fixed"]["n_valid"]["100"]["per_pair"]
    assert {p: v["setting"]["col"] for p, v in per_pair.items()} == {"a": 0, "b": 0, "c": 2}
    gains = {p: v["mean_gain"] for p, v in per_pair.items()}
    assert gains["a"] == gains["b"] == 0.0 and gains["c"] < 0  # c: column 2, its loss


def test_the_choice_of_the_default_is_scored_left_out() -> None:
    """``lopo_default``: for each pair the rule is chosen on the other pairs only. A rule
    that always takes column 2 is good on a and b and no better than the baseline on c: left
    out of the choice, a and b do not get it (it is unsafe on c), and what c gets is that
    rule's or best's row on c, not the best rule in hindsight."""
    bank = {"a": _pair("a", 2, 0), "b": _pair("b", 2, 1), "c": _pair("c", 3, 2)}
    rules = {"fixed": RuleSpec(lambda d: Pick((2,))), "best": RULES["best"]}
    payload = replay_bank(bank, rules, n_valids=(100,), n_splits=20)
    lopo = payload["lopo_default"]["n_valid"]["100"]
    chosen = {p: v["rule"] for p, v in lopo["per_pair"].items()}
    assert chosen["a"] == chosen["b"] == "best"
    for p, rule in chosen.items():
        own = payload["rules"][rule]["n_valid"]["100"]["per_pair"][p]
        assert lopo["per_pair"][p]["mean_gain"] == own["mean_gain"]
    assert set(lopo) >= {"mean_gain", "se", "mean_relative_gain", "worse_share"}
    # the ceiling: each pair's pool-best column (2 on a and b, 3 on c), on the same splits
    ceiling = payload["ceiling"]["n_valid"]["100"]
    assert "ceiling" not in payload["rules"]
    assert ceiling["per_pair"]["c"]["strategy"] == bank["c"].columns[3].strategy
    assert ceiling["per_pair"]["a"]["mean_gain"] == pytest.approx(
        payload["rules"]["fixed"]["n_valid"]["100"]["per_pair"]["a"]["mean_gain"]
    )
    two = replay_bank({"a": bank["a"], "b": bank["b"]}, rules, n_valids=(100,), n_splits=5)
    assert "lopo_default" not in two  # one pair left to choose on is no choice


def test_a_stricter_bound_on_the_other_pairs_chooses_a_rule_safe_there() -> None:
    """``lopo_default_stricter``: with the bound at 0 only a rule never worse than the
    baseline on the other pairs can be chosen (the baseline always is); with the bound at 1
    every rule is safe and the best mean gain on the others wins."""
    bank = {"a": _pair("a", 2, 0), "b": _pair("b", 2, 1), "c": _pair("c", 3, 2)}
    rules = {"fixed": RuleSpec(lambda d: Pick((2,))), "baseline": RULES["baseline"]}
    payload = replay_bank(bank, rules, n_valids=(100,), n_splits=20, stricter=(0.0, 1.0))
    strict = payload["lopo_default_stricter"]
    assert set(strict) == {"0.0", "1.0"}
    for p, v in strict["0.0"]["n_valid"]["100"]["per_pair"].items():
        rows = payload["rules"][v["rule"]]["n_valid"]["100"]["per_pair"]
        assert all(rows[q]["worse_share"] == 0.0 for q in bank if q != p)
    for p, v in strict["1.0"]["n_valid"]["100"]["per_pair"].items():
        rows = {r: payload["rules"][r]["n_valid"]["100"]["per_pair"] for r in rules}
        on_others = {r: sum(rows[r][q]["mean_gain"] for q in bank if q != p) for r in rules}
        assert on_others[v["rule"]] == max(on_others.values())


def test_significant_losses_are_counted_for_the_ceiling_and_the_left_out_defaults() -> None:
    """With ``significance``, the ceiling and every left-out default count the splits whose
    shipped judge is significantly worse than the baseline on the test items: never more
    than the splits where it is worse at all; c's column 2 (a little worse than the
    baseline, in about 90 % of its splits) is worse often and significantly worse less."""
    bank = {"a": _pair("a", 2, 0), "b": _pair("b", 2, 1), "c": _pair("c", 0, 2, good_noise=1.6)}
    rules = {"fixed": RuleSpec(lambda d: Pick((2,))), "baseline": RULES["baseline"]}
    plain = replay_bank(bank, rules, n_valids=(100,), n_splits=20, stricter=(1.0,))
    payload = replay_bank(
        bank, rules, n_valids=(100,), n_splits=20, stricter=(1.0,), significance=0.95
    )
    assert "sig_worse_share" not in plain["ceiling"]["n_valid"]["100"]["per_pair"]["a"]
    rows = [
        payload["ceiling"]["n_valid"]["100"],
        payload["lopo_default"]["n_valid"]["100"],
        payload["lopo_default_stricter"]["1.0"]["n_valid"]["100"],
    ]
    for row in rows:
        for v in row["per_pair"].values():
            assert 0.0 <= v["sig_worse_share"] <= v["worse_share"]
        assert row["max_pair_sig_worse_share"] <= row["max_pair_worse_share"]
    # Chosen on a and b with every rule safe (bound 1), c gets column 2: worse in most splits.
    c = payload["lopo_default_stricter"]["1.0"]["n_valid"]["100"]["per_pair"]["c"]
    assert c["rule"] == "fixed" and c["worse_share"] > 0.5 > c["sig_worse_share"]
    # The counts leave the rest of the replay as it was.
    assert payload["rules"] == plain["rules"]


def test_bank_rules_prints_how_many_labels_are_needed() -> None:
    """benchmarks/bank_rules.py's table for docs/judge.md: a row per rule and size with the
    mean gain and its standard error, worse shares and the baseline's share."""
    script = load_script("bank_rules", "bank_rules_script")
    bank = {n: _pair(n, good=2, seed=s) for s, n in enumerate("abc")}
    rules = {"best": RULES["best"], "baseline": RULES["baseline"]}
    payload = replay_bank(bank, rules, n_valids=(50, 100), n_splits=5)
    table = script.labels_table(payload, ["baseline", "best", "(default chosen left out)"])
    lines = table.splitlines()
    assert len(lines) == 2 + 3 * 2 and "| baseline | 50 | +0.000 (0.000) |" in lines[2]
    best = payload["rules"]["best"]["n_valid"]["100"]
    assert f"| best | 100 | {best['mean_gain']:+.3f} ({best['se']:.3f}) |" in table
    assert "| (default chosen left out) | 100 |" in table


def test_the_banks_choice_becomes_a_presets_selection_settings(tmp_path: Path) -> None:
    """:func:`selection_settings` turns a replayed rule (its constants chosen on every pair,
    its prior the all-pairs one) into the settings a compile reads; :func:`preset_toml`
    writes them as a preset that loads back to the same :class:`SelectionConfig`; the rules
    a compile cannot run are refused with the reason."""
    from judgeopt.selection import GainPrior, SelectionConfig
    from judgeopt.teleprompt import load_optimizer
    from judgeopt_lab import preset_toml, selection_settings

    bank = {n: _pair(n, good=2, seed=s) for s, n in enumerate("abc")}
    names = [
        "confirm+prior(veto)",
        "shrink+prior",
        "lcb",
        "factor",
        "ensemble",
        "anchored",
        "anchored+guard",
        "posterior",
    ]
    rules = {r: RULES[r] for r in [*names, "stack", "baseline", "prior"]}
    payload = replay_bank(bank, rules, n_valids=(100,), n_splits=4)
    guard = payload["rules"]["anchored+guard"]["n_valid"]["100"]
    assert guard["setting"]["m"] in (2, 3, 5) and guard["setting"]["w"] in (0.34, 0.5, 0.67)
    assert guard["setting"]["margin"] in (0.0, 0.05, 0.1)
    assert payload["prior"] == {"cot": "none"}
    model = "local:qwen2.5-coder-1.5b"
    got = {r: selection_settings(payload, model=model, rule=r) for r in names}
    assert got["confirm+prior(veto)"] == {
        "selection": {
            "rule": "confirm",
            "priors": {model: {"cot": "none"}},
            "prior_veto": True,
        }
    }
    shrink = payload["rules"]["shrink+prior"]["n_valid"]["100"]["setting"]
    assert got["shrink+prior"]["selection"]["margin"] == shrink["margin"]
    assert got["shrink+prior"]["selection"]["prior_veto"] is False
    alpha = payload["rules"]["lcb"]["n_valid"]["100"]["setting"]["alpha"]
    assert got["lcb"]["selection"] == {"rule": "lcb", "confidence": pytest.approx(1 - alpha)}
    assert got["factor"]["selection"]["ridge"] in RULES["factor"].grid["ridge"]
    m = payload["rules"]["ensemble"]["n_valid"]["100"]["setting"]["m"]
    assert got["ensemble"] == {"selection": {"rule": "best"}, "ensemble": m}
    anchored = payload["rules"]["anchored"]["n_valid"]["100"]["setting"]
    assert got["anchored"] == {
        "selection": {"rule": "best"},
        "ensemble": anchored["m"],
        "ensemble_anchor": anchored["w"],
    }
    # the cross-fitted guard is the compile's `guard` (judgeopt.teleprompt._guard)
    margin = {"guard_margin": guard["setting"]["margin"]} if guard["setting"]["margin"] else {}
    assert got["anchored+guard"] == {
        "selection": {"rule": "best", "guard": True} | margin,
        "ensemble": guard["setting"]["m"],
        "ensemble_anchor": guard["setting"]["w"],
    }
    for r in names:
        path = tmp_path / f"{r}.toml"
        path.write_text(preset_toml(got[r]), encoding="utf-8")
        cfg = load_optimizer(path)
        assert cfg.selection == SelectionConfig(**got[r]["selection"]), r
        assert cfg.ensemble == got[r].get("ensemble", 0)
        assert cfg.ensemble_anchor == got[r].get("ensemble_anchor", 0.0)
    post = load_optimizer(tmp_path / "posterior.toml").selection
    assert post.rule == "posterior" and post.gain_prior_for("local:other") is None
    bank_prior = GainPrior(**payload["gain_prior"])
    read = post.gain_prior_for(model)
    assert read is not None and read.counts == bank_prior.counts
    assert read.means == pytest.approx(bank_prior.means, abs=1e-4)
    assert read.sd_task == pytest.approx(bank_prior.sd_task, abs=1e-4)
    payload["default"] = "lcb"
    assert selection_settings(payload, model=model) == got["lcb"]
    for bad, said in (
        ("stack", "stacks every evaluated strategy"),
        ("baseline", "never changes the judge"),
        ("prior", "ignores the labels"),
    ):
        with pytest.raises(ValueError, match=f"rule '{re.escape(bad)}' is not one a compile runs"):
            selection_settings(payload, model=model, rule=bad)
        with pytest.raises(ValueError, match=said):
            selection_settings(payload, model=model, rule=bad)
    with pytest.raises(ValueError, match="not replayed at n_valid=50"):
        selection_settings(payload, model=model, rule="lcb", n_valid=50)
    # The guarded stack: the compile's --ensemble m --ensemble-stack ridge --guard, at the
    # settings it can export (the baseline and m best others, no negative weight).
    stack = {"m": 5, "ridge": 10.0, "margin": 0.1, "nonneg": True}
    payload["rules"]["stack+guard"] = {"n_valid": {"100": {"setting": stack}}}
    made = selection_settings(payload, model=model, rule="stack+guard")
    assert made == {
        "selection": {"rule": "best", "guard": True, "guard_margin": 0.1},
        "ensemble": 5,
        "ensemble_stack": 10.0,
    }
    path = tmp_path / "stack.toml"
    path.write_text(preset_toml(made), encoding="utf-8")
    cfg = load_optimizer(path)
    assert (cfg.ensemble, cfg.ensemble_stack, cfg.ensemble_anchor) == (5, 10.0, 0.0)
    assert cfg.selection.guard and cfg.selection.guard_margin == 0.1
    for bad in ({"m": 0, "nonneg": True}, {"m": 5, "nonneg": False}):
        payload["rules"]["stack+guard"]["n_valid"]["100"]["setting"] = stack | bad
        with pytest.raises(ValueError, match=r"m >= 1 and nonneg true"):
            selection_settings(payload, model=model, rule="stack+guard")


def test_choose_default_prefers_safe_rules() -> None:
    def row(rel: float, worst: float) -> dict[str, Any]:
        return {"n_valid": {"100": {"mean_gain": rel, "max_pair_worse_share": worst}}}

    payload = {"rules": {"risky": row(0.5, 0.3), "safe": row(0.2, 0.05), "zero": row(0, 0)}}
    assert choose_default(payload) == "safe"
    assert choose_default({"rules": {"risky": row(0.5, 0.3), "r2": row(0.1, 0.2)}}) == "r2"


# The committed plan and bank -------------------------------------------------------------------
ROOT = Path(__file__).resolve().parents[2]


def test_the_committed_plan_meets_the_issue_and_the_bank_files_match_it() -> None:
    from judgeopt_lab import shared_data_dir

    plan_path = ROOT / "benchmarks" / "bank_plan.json"
    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    assert len(plan["pairs"]) >= 5
    data = shared_data_dir()
    for p in plan["pairs"]:
        assert p["n_pool"] == len(p["pool"]) == len(set(p["pool"])) >= 250
        assert len(p["columns"]) >= 16
        assert sum("baseline" in c["roles"] for c in p["columns"]) == 1
        assert not any(str(c["strategy"]["decoding"]).startswith("sc") for c in p["columns"])
        path = data / p["task"] / "full.jsonl"
        if not path.is_file():
            continue
        rows = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
        group = {r["id"]: r["group_id"] or r["id"] for r in rows}
        pool_groups = {group[i] for i in p["pool"]}
        # whole groups: every item of a pool group is in the pool (SummEval keeps 8 of each
        # article's 16 summaries in the e2e split, so there a group is the split's 8)
        if p["e2e_split"]["per_group"] is None:
            whole = {i for i, g in group.items() if g in pool_groups}
            assert whole == set(p["pool"]), p["name"]
    sha = hashlib.sha256(plan_path.read_bytes()).hexdigest()[:16]
    for p in plan["pairs"]:
        for line in bank_lines(ROOT / "benchmarks" / "runs" / "bank", p["name"]):
            if line.get("kind") == "header":
                assert line["plan_sha"] == sha, p["name"]


def test_the_plan_script_reproduces_the_committed_plan_from_the_stored_e2e_runs() -> None:
    """``bank.py plan`` is a function of the stored e2e runs and the shared data: rerun, it
    writes the committed plan again (the plan every bank file names by its sha256)."""
    from judgeopt_lab import shared_data_dir

    if not (shared_data_dir() / "sfres" / "full.jsonl").is_file():
        pytest.skip("the shared data is not beside the project")
    script = load_script("bank_plan", "bank_plan_script")
    committed = json.loads(script.PLAN.read_text(encoding="utf-8"))
    assert script.make_plan(committed["min_pool"]) == committed


def test_the_default_preset_ships_the_preregistered_candidate() -> None:
    """``optimizers/auto.toml`` (``judgeopt compile``'s default) is the candidate
    ``benchmarks/default_prereg.json`` registered, and it ships it because the committed
    verdict adopted it (all five criteria met); the rule the bank's replay chose on five pairs
    (``benchmarks/results/bank_rules.json``'s ``preset``, ``lcb``) stays
    ``SelectionConfig()``'s default, and the demo (41 labels, below the 100 the candidate was
    registered for) compiles with it."""
    from judgeopt.demo import demo_selection
    from judgeopt.selection import SelectionConfig
    from judgeopt.teleprompt import load_optimizer

    results = ROOT / "benchmarks" / "results"
    verdict = json.loads((results / "default_prereg_verdict.json").read_text(encoding="utf-8"))
    assert verdict["decision"] == "adopt"
    assert all(c["status"] == "met" for c in verdict["criteria"].values())
    plan = json.loads((ROOT / "benchmarks" / "default_prereg.json").read_text(encoding="utf-8"))
    candidate = load_optimizer(str(ROOT / plan["candidate"]["preset"]))
    shipped = load_optimizer("auto")
    assert shipped.model_dump() == candidate.model_dump()
    assert (shipped.budget, shipped.candidates) == (20, "rate_first")
    payload = json.loads((results / "bank_rules.json").read_text(encoding="utf-8"))
    assert "interim" not in payload and len(payload["settings"]["pairs"]) >= 5
    assert payload["preset"]["selection"]["rule"] == payload["default"]
    default = SelectionConfig().model_dump()
    for key, value in payload["preset"]["selection"].items():
        assert default[key] == value, key
    assert demo_selection() == SelectionConfig()


def _bank_plan_script() -> Any:
    return load_script("bank_plan", "bank_plan_script")


def test_an_extension_plan_holds_the_continued_searchs_new_strategies(tmp_path: Path) -> None:
    """``bank.py extend``: the strategies a pair's search evaluated after the stored path (the
    continued run must repeat that path and have the stored split), keyed after the base
    pair's columns, on the same pool; self-consistency left out as in the base plan."""
    script = _bank_plan_script()
    base_path = ROOT / "benchmarks" / "bank_plan.json"
    base = json.loads(base_path.read_text(encoding="utf-8"))
    name = "sfhot_informativeness"
    stored = json.loads(
        (ROOT / "benchmarks" / "runs" / "e2e_runs" / name / "result.json").read_text("utf-8")
    )
    trace = sorted(stored["search"]["trace"], key=lambda t: int(t["number"]))
    n = len(trace)
    new = [
        {**trace[0]["strategy"], "scale": 10, "cot": "none"},
        {**trace[0]["strategy"], "decoding": "sc5"},
        {**trace[0]["strategy"], "scale": 3, "cot": "none"},
        trace[3]["strategy"],  # a strategy the base plan holds: not a new column
    ]
    run = tmp_path / name
    run.mkdir()
    continued = dict(stored)
    continued["search"] = {
        **stored["search"],
        "trace": trace + [{"number": n + k, "strategy": s} for k, s in enumerate(new)],
    }
    (run / "result.json").write_text(json.dumps(continued), encoding="utf-8")
    made = script.extension_plan(base, "abc", name, run, n + 4)
    pair = made["pairs"][0]
    base_pair = next(p for p in base["pairs"] if p["name"] == name)
    assert pair["name"] == f"{name}_b{n + 4}" and pair["pool"] == base_pair["pool"]
    assert made["extends"] == {"plan_sha": "abc", "pair": name, "budget": n + 4}
    first = len(base_pair["columns"]) + 1
    assert [c["key"] for c in pair["columns"]] == [f"C{first:02d}", f"C{first + 1:02d}"]
    assert [c["strategy"] for c in pair["columns"]] == [new[0], new[2]]
    assert pair["columns"][0]["roles"] == [f"search #{n + 1}"]
    assert [e["reason"] for e in made["excluded"]] == ["self-consistency"]
    assert script.e2e_dir_of(pair) == run.resolve()
    # only as far as the budget asked
    short = script.extension_plan(base, "abc", name, run, n + 1)
    assert [c["strategy"] for c in short["pairs"][0]["columns"]] == [new[0]]
    # A strategy the search told uncounted (no item fit the context) is no column and did not
    # spend the budget.
    refused = {"number": n, "strategy": {**trace[0]["strategy"], "scale": 100}, "counted": False}
    later = [{**t, "number": t["number"] + 1} for t in continued["search"]["trace"][n:]]
    search = {**continued["search"], "trace": [*trace, refused, *later]}
    (run / "result.json").write_text(json.dumps({**continued, "search": search}), "utf-8")
    made = script.extension_plan(base, "abc", name, run, n + 1)
    assert [c["strategy"] for c in made["pairs"][0]["columns"]] == [new[0]]
    assert made["pairs"][0]["columns"][0]["roles"] == [f"search #{n + 2}"]
    assert [e["reason"].split(":")[0] for e in made["excluded"]] == ["unjudgeable"]
    with pytest.raises(ValueError, match=rf"evaluated {n + 4} of {n + 5} strategies"):
        script.extension_plan(base, "abc", name, run, n + 5)
    (run / "result.json").write_text(json.dumps(continued), encoding="utf-8")
    with pytest.raises(ValueError, match=r"evaluated \d+ of \d+ strategies"):
        script.extension_plan(base, "abc", name, run, n + 10)
    with pytest.raises(ValueError, match="not in the base plan"):
        script.extension_plan(base, "abc", "nope", run, n + 1)
    continued["search"]["trace"][4] = {"number": 4, "strategy": new[0]}
    (run / "result.json").write_text(json.dumps(continued), encoding="utf-8")
    with pytest.raises(ValueError, match="search #5 is not the base plan's"):
        script.extension_plan(base, "abc", name, run, n + 1)
    continued = dict(stored, n_valid=stored["n_valid"] + 1)
    (run / "result.json").write_text(json.dumps(continued), encoding="utf-8")
    with pytest.raises(ValueError, match="is not the base run's"):
        script.extension_plan(base, "abc", name, run, n)


def test_join_pairs_puts_an_extensions_columns_after_the_base_pairs() -> None:
    from dataclasses import replace

    from judgeopt_lab import join_pairs

    base = _pair("a", good=2, seed=0)
    more = replace(
        _pair("a", good=3, seed=1),
        name="a_b40",
        columns=tuple(
            replace(c, key=f"C{k + 7:02d}", roles=("search #21",))
            for k, c in enumerate(_pair("a", good=3, seed=1).columns[1:])
        ),
        seconds=5.0,
        calls=3,
    )
    joined = join_pairs(base, more)
    assert joined.name == "a_b40" and len(joined.columns) == 11
    assert joined.baseline is base.baseline and joined.ids == base.ids
    assert (joined.seconds, joined.calls) == (5.0, 3)
    with pytest.raises(ValueError, match="both pairs have columns"):
        join_pairs(base, base)
    with pytest.raises(ValueError, match="not an extension"):
        join_pairs(base, _pair("b", good=2, seed=0))


def test_a_path_plan_holds_the_columns_another_search_path_needs(tmp_path: Path) -> None:
    """``bank.py extend --own-path``: another compile of a bank pair (its own search path, the
    stored split) needs the columns of its path that the base pair lacks; the plan keeps the
    whole path, in order, for the replay."""
    script = _bank_plan_script()
    base = json.loads((ROOT / "benchmarks" / "bank_plan.json").read_text(encoding="utf-8"))
    name = "sfhot_informativeness"
    stored = json.loads(
        (ROOT / "benchmarks" / "runs" / "e2e_runs" / name / "result.json").read_text("utf-8")
    )
    base_pair = next(p for p in base["pairs"] if p["name"] == name)
    held = [c["strategy"] for c in base_pair["columns"]]
    first = held[0]  # the baseline
    own = [
        first,
        {**first, "cot": "suffix"},
        held[3],  # a column the base pair holds: read from it, no new column
        {**first, "cot": "suffix", "decoding": "sc5"},  # no bank plan holds self-consistency
        {**first, "cot": "none", "scale": 10},
    ]
    own = [s for k, s in enumerate(own) if k == 0 or s != first]
    run = tmp_path / name
    run.mkdir()
    trace = [{"number": k, "strategy": s} for k, s in enumerate(own)]
    (run / "result.json").write_text(
        json.dumps({**stored, "search": {**stored["search"], "trace": trace}}), encoding="utf-8"
    )
    made = script.path_plan(base, "abc", name, run, len(own))
    pair = made["pairs"][0]
    assert pair["name"] == f"{name}_path{len(own)}" and pair["pool"] == base_pair["pool"]
    assert made["extends"] == {"plan_sha": "abc", "pair": name, "budget": len(own), "path": "own"}
    assert [p["strategy"] for p in pair["path"]] == own
    assert [p["role"] for p in pair["path"]] == [f"search #{k + 1}" for k in range(len(own))]
    new = [s for s in own if s not in held and s["decoding"] != "sc5"]
    assert [c["strategy"] for c in pair["columns"]] == new
    first_key = len(base_pair["columns"]) + 1
    assert pair["columns"][0]["key"] == f"C{first_key:02d}"
    assert [e["reason"] for e in made["excluded"]] == ["self-consistency"]
    assert script.e2e_dir_of(pair) == run.resolve()
    short = script.path_plan(base, "abc", name, run, 2)
    assert len(short["pairs"][0]["path"]) == 2
    with pytest.raises(ValueError, match=rf"evaluated {len(own)} of {len(own) + 1} strategies"):
        script.path_plan(base, "abc", name, run, len(own) + 1)
    (run / "result.json").write_text(json.dumps({**stored, "n_valid": 7}), encoding="utf-8")
    with pytest.raises(ValueError, match="is not the base run's"):
        script.path_plan(base, "abc", name, run, 1)


def test_along_path_orders_the_joined_columns_by_another_path() -> None:
    from dataclasses import replace

    from judgeopt_lab import along_path, first_k

    pair = _pair("a", good=2, seed=0)
    c = pair.columns
    twin = replace(c[3], key="C04~", strategy={**c[3].strategy, "decoding": "expected"})
    pair = replace(pair, columns=(*c, twin))
    path = [
        {"strategy": c[0].strategy, "role": "search #1"},
        {"strategy": c[4].strategy, "role": "search #2"},
        {"strategy": {"scale": 5, "decoding": "sc5"}, "role": "search #3"},  # no column: skipped
        {"strategy": twin.strategy, "role": "search #4"},
        {"strategy": c[2].strategy, "role": "search #5"},
    ]
    along = along_path(pair, path)
    assert [col.key for col in along.columns] == ["C01", "C05", "C04~", "C03"]
    assert along.columns[0].roles == ("baseline", "search #1")
    later = [("search #2",), ("search #4",), ("search #5",)]
    assert [col.roles for col in along.columns[1:]] == later
    cut, _ = first_k(along, 4)
    assert [col.key for col in cut.columns] == ["C01", "C05", "C04~"]
    with pytest.raises(ValueError, match="has no column"):
        along_path(pair, [path[0], {"strategy": {"scale": 9}, "role": "search #2"}])
    with pytest.raises(ValueError, match="does not start with its baseline"):
        along_path(pair, path[1:])


def test_record_refuses_a_path_cut_below_the_baseline(capsys: pytest.CaptureFixture[str]) -> None:
    """``bank.py record --path-cut 0`` names the option and what is allowed, before any model
    is loaded or plan read."""
    bank = load_script("bank", "bank_script")
    with pytest.raises(SystemExit):
        bank.main(["record", "--path-cut", "0", "--plan", "no-such-plan.json"])
    assert "--path-cut 0: must be at least 1" in capsys.readouterr().err
