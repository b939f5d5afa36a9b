"""Selection that survives noise: the split, the rules, their simulation and settings."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from _rule_tables import correlated_judges
from judgeopt.selection import (
    SelectionConfig,
    choose,
    confirmation_split,
    simulate_selection,
    veto,
)
from judgeopt.teleprompt import HPSS, OptimizerConfig


# The split ----------------------------------------------------------------------------------
def test_split_is_seeded_disjoint_and_keeps_groups_whole() -> None:
    rng = np.random.default_rng(0)
    humans = list(rng.integers(1, 6, size=60).astype(float))
    groups = [f"g{i // 4}" for i in range(60)]
    a = confirmation_split(humans, groups, fraction=0.5, seed=3)
    assert a == confirmation_split(humans, groups, fraction=0.5, seed=3)
    assert a != confirmation_split(humans, groups, fraction=0.5, seed=4)
    search, confirm = a
    assert sorted(search + confirm) == list(range(60)) and not set(search) & set(confirm)
    assert search == sorted(search) and confirm == sorted(confirm)
    assert {groups[i] for i in search}.isdisjoint({groups[i] for i in confirm})
    assert len({groups[i] for i in confirm}) in (7, 8)  # 15 groups, half of them
    s, c = confirmation_split(humans, None, fraction=0.3, seed=0)
    assert len(c) == 18 and len(s) == 42
    # Stratified: both parts span the human scores.
    assert abs(np.mean([humans[i] for i in s]) - np.mean([humans[i] for i in c])) < 0.35
    with pytest.raises(ValueError, match="fraction"):
        confirmation_split(humans, None, fraction=1.0, seed=0)
    with pytest.raises(ValueError, match="part empty"):
        confirmation_split([1.0], None, fraction=0.5, seed=0)


# The rule -----------------------------------------------------------------------------------
def _judges(n: int, rhos: list[float], seed: int = 0) -> tuple[np.ndarray, list[np.ndarray]]:
    return correlated_judges(n, rhos, seed)


def test_choose_confirms_a_clearly_better_finalist() -> None:
    h, (base, weak, strong) = _judges(120, [0.2, 0.1, 0.7])
    r = choose(h, base, [weak, strong], keys=["weak", "strong"], search_scores=[0.5, 0.4])
    assert r.chosen == 1 and r.finalists[1].confirmed and not r.finalists[0].confirmed
    f = r.finalists[1]
    assert f.gain.low <= f.lower_bound <= f.gain.delta <= f.gain.high
    assert f.confirm_score == pytest.approx(f.gain.a) and r.baseline_score == f.gain.b
    assert "'strong' confirmed" in r.reason
    d = r.to_dict()
    assert d["chosen"] == 1 and d["finalists"][1]["gain_ci"][0] > 0
    json.dumps(d)


def test_choose_keeps_the_baseline_and_says_why() -> None:
    h, (base, a, b) = _judges(60, [0.5, 0.45, 0.3], seed=1)
    r = choose(h, base, [a, b], keys=[7, 9])
    assert r.chosen is None
    assert "no finalist beat the baseline" in r.reason and "baseline is kept" in r.reason
    # A lower confidence accepts more readily, never a negative point estimate.
    loose = choose(h, base, [a, b], confidence=0.5)
    assert all(f.confirmed == (f.gain.delta > 0) for f in loose.finalists)


def test_choose_on_accuracy_and_bad_input() -> None:
    base = [1, 0, 1, 0, 1, 0, 1, 0] * 6
    better = [1, 1, 1, 0, 1, 1, 1, 1] * 6
    r = choose([0] * 48, base, [better], method="accuracy")
    assert r.chosen == 0 and r.finalists[0].gain.delta == pytest.approx(0.375)
    with pytest.raises(ValueError, match="at least one finalist"):
        choose([1, 2, 3], [1, 2, 3], [])
    with pytest.raises(ValueError, match="confidence"):
        choose([1, 2, 3], [1, 2, 3], [[3, 2, 1]], confidence=0.3)


def test_choose_compares_a_finalist_that_ranks_nothing_at_group_level() -> None:
    """A finalist with one rating for every item of every group (seen on SummEval coherence:
    the 1.5B rated all 56 confirmation summaries 5) ranks nothing: its group-level
    correlation is 0 (every group counts as 0, docs/metrics.md), so it is compared like any
    other finalist and loses to the baseline; the other finalists are still compared. (Before
    the "zero" rule its comparison was undefined and it was recorded as not comparable.)"""
    h, (base, strong) = _judges(160, [0.1, 0.8], seed=3)
    groups = [i // 8 for i in range(160)]
    constant = [5.0] * 160
    r = choose(h, base, [constant, strong], keys=["#8", "#14"], groups=groups)
    bad, good = r.finalists
    assert not bad.confirmed and bad.error is None and bad.confirm_score == 0.0
    assert bad.gain.delta == pytest.approx(-bad.gain.b) and bad.upper_bound < 0
    assert r.chosen == 1 and good.confirmed and good.error is None
    assert r.baseline_score == pytest.approx(good.gain.b)
    assert "not comparable" not in r.reason
    json.dumps(r.to_dict())
    # Not confirmed either way: the baseline is kept.
    weak = list(base)
    r = choose(h, base, [constant, weak], keys=["#8", "#3"], groups=groups)
    assert r.chosen is None and "'#3'" in r.reason
    # A baseline that ranks nothing scores 0 too, so a finalist is compared with 0.
    r = choose(h, constant, [strong, weak], groups=groups)
    assert r.baseline_score == 0.0 and r.chosen == 0
    # Groups with nothing to rank (every group's human scores constant) leave every
    # comparison undefined: an error, naming why.
    flat = [float(i // 8) for i in range(160)]
    with pytest.raises(ValueError, match="every group was skipped"):
        choose(flat, base, [strong, weak], groups=groups)
    # Malformed input still raises, naming the finalist.
    with pytest.raises(ValueError, match="finalist '#2'"):
        choose(h, base, [strong, strong[:-1]], keys=["#1", "#2"], groups=groups)
    with pytest.raises(ValueError, match="finalist 1"):
        choose(h, base, [strong, [math.nan] * 160], groups=groups)


def test_veto_keeps_the_search_best_unless_the_confirmation_refutes_it() -> None:
    h, (base, worse, same, better) = _judges(120, [0.5, 0.1, 0.5, 0.7], seed=2)
    # Clearly worse on the confirmation items: vetoed, the baseline is kept.
    r = veto(h, base, worse, search_score=0.6, baseline_search_score=0.4, key="#5")
    f = r.finalists[0]
    assert r.chosen is None and f.upper_bound < 0 and "'#5', was vetoed" in r.reason
    assert f.gain.low <= f.lower_bound <= f.gain.delta <= f.upper_bound <= f.gain.high
    # Not refuted (a gain that choose() would not confirm is enough): kept.
    r = veto(h, base, same, search_score=0.6, baseline_search_score=0.4, key="#5")
    f = r.finalists[0]
    assert r.chosen == 0 and f.upper_bound >= 0 and "is kept" in r.reason
    assert f.lower_bound < 0  # confirm would have kept the baseline
    assert ("below the baseline" in r.reason) == (f.gain.delta < 0)
    assert veto(h, base, better, search_score=0.6).chosen == 0
    # The baseline's own search score is the best: nothing to confirm, the baseline is kept.
    r = veto(h, base, better, search_score=0.4, baseline_search_score=0.4, key="#5")
    assert r.chosen is None and "baseline has the best search score" in r.reason
    d = r.to_dict()
    assert d["finalists"][0]["upper_bound"] is not None
    json.dumps(d)


def test_veto_on_a_candidate_that_ranks_nothing_and_bad_input() -> None:
    h, (base,) = _judges(160, [0.3], seed=4)
    groups = [i // 8 for i in range(160)]
    # A candidate that ranks nothing scores 0 in every group: worse than the baseline here,
    # so vetoed.
    r = veto(h, base, [5.0] * 160, search_score=0.5, groups=groups, key="#8")
    assert r.chosen is None and r.finalists[0].error is None
    assert r.finalists[0].confirm_score == 0.0 and r.finalists[0].upper_bound < 0
    assert "baseline is kept" in r.reason
    # With nothing to rank in any group the comparison is undefined: the baseline is kept.
    flat = [float(i // 8) for i in range(160)]
    r = veto(flat, base, list(h), search_score=0.5, groups=groups, key="#8")
    assert r.chosen is None and r.finalists[0].error
    assert "cannot be compared" in r.reason and "baseline is kept" in r.reason
    with pytest.raises(ValueError, match="finalist '#8'"):
        veto(h, base, list(base)[:-1], key="#8")
    with pytest.raises(ValueError, match="confidence"):
        veto(h, base, base, confidence=0.2)
    # The bounds at confidence c are the ends of the central (2c - 1) interval.
    r = veto(h, base, list(h), confidence=0.5)
    f = r.finalists[0]
    assert f.lower_bound == f.upper_bound == f.gain.delta


def test_simulation_veto_sits_between_best_and_confirm() -> None:
    """Veto trusts the search half: when every candidate is worse it returns a worse judge
    more often than confirm and less often than keeping the best score on all items."""
    kw = {"n_valid": 100, "budget": 12, "n_resamples": 300}
    rules = {
        "best": SelectionConfig(rule="best"),
        "confirm": SelectionConfig(rule="confirm"),
        "veto": SelectionConfig(rule="veto"),
    }
    bad = simulate_selection(gain_mean=-0.10, gain_sd=1e-4, n_runs=100, seed=5, configs=rules, **kw)
    # Measured (seeds 5, 7, 11): best 0.49-0.57, veto 0.41, confirm 0.14-0.16; the rules
    # see the same compiles, so the paired differences are steadier than each share.
    assert bad["veto"]["p_worse"] < bad["best"]["p_worse"]
    assert bad["veto"]["p_worse"] > bad["confirm"]["p_worse"]
    good = simulate_selection(gain_mean=0.05, gain_sd=0.05, n_runs=40, seed=6, configs=rules, **kw)
    assert good["veto"]["mean_true_gain"] > good["confirm"]["mean_true_gain"] > 0


def test_simulation_the_rule_rarely_returns_a_worse_judge() -> None:
    """No candidate is better than the baseline: keeping the best validation score returns
    a truly worse judge most of the time, the confirmation rule rarely."""
    out = simulate_selection(
        n_valid=100, budget=12, gain_mean=-0.08, gain_sd=1e-4, n_runs=120, n_resamples=300, seed=5
    )
    # About 0.6 and 0.2 (seeds 5, 7, 11, 13); 120 runs give each share a s.e. near 0.04.
    assert out["best"]["p_worse"] >= 0.5
    assert out["confirm"]["p_worse"] <= min(0.25, out["best"]["p_worse"] / 2)
    assert out["confirm"]["mean_true_gain"] > out["best"]["mean_true_gain"]
    assert out["best"]["mean_claimed_gain"] > 0 > out["best"]["mean_true_gain"]
    # Some candidates truly better: the rule still finds gains.
    good = simulate_selection(
        n_valid=100, budget=12, gain_mean=0.05, gain_sd=0.05, n_runs=40, n_resamples=300, seed=6
    )
    assert good["confirm"]["mean_true_gain"] > 0.03 and good["confirm"]["p_worse"] < 0.1


def test_simulation_rules_are_paired_and_independent_of_each_other() -> None:
    """The rules compared in one simulation see the same data: adding a rule leaves every
    other rule's numbers unchanged, and two identical rules give identical numbers."""
    kw = {
        "n_valid": 60,
        "budget": 8,
        "gain_mean": 0.0,
        "gain_sd": 0.08,
        "n_runs": 12,
        "n_resamples": 200,
        "seed": 3,
    }
    two = simulate_selection(
        configs={"best": SelectionConfig(rule="best"), "confirm": SelectionConfig(rule="confirm")},
        **kw,
    )
    more = simulate_selection(
        configs={
            "one": SelectionConfig(rule="confirm", finalists=1),
            "best": SelectionConfig(rule="best"),
            "confirm": SelectionConfig(rule="confirm"),
            "confirm again": SelectionConfig(rule="confirm"),
        },
        **kw,
    )
    assert more["best"] == two["best"] and more["confirm"] == two["confirm"]
    assert more["confirm again"] == more["confirm"]


def test_simulated_coarse_judges_have_the_asked_shape_and_bad_settings_are_named() -> None:
    """``mode_share`` puts that share of every judge's ratings on one central value (the
    embedded 1.5B's shape); impossible settings are refused with the field and the value."""
    from judgeopt.selection import _judge_outputs

    rng = np.random.default_rng(0)
    h = rng.standard_normal(20_000)
    y = _judge_outputs(rng, h, np.array([0.3, 0.5]), 0.5, 3, 0.7)
    for row in y:
        values, counts = np.unique(row, return_counts=True)
        assert values.tolist() == [0.0, 1.0, 2.0]
        assert counts / row.size == pytest.approx([0.15, 0.7, 0.15], abs=0.015)
    even = _judge_outputs(rng, h, np.array([0.3]), 0.5, 4, 0.4)[0]
    assert np.mean(even == 1.0) == pytest.approx(0.4, abs=0.015)  # the lower central value
    # Without mode_share, equally likely values, as the committed simulations used.
    flat = _judge_outputs(rng, h, np.array([0.3]), 0.5, 5, None)[0]
    assert np.unique(flat, return_counts=True)[1] / flat.size == pytest.approx([0.2] * 5, abs=0.015)
    kw = {"n_valid": 40, "budget": 4, "n_runs": 2, "n_resamples": 50}
    with pytest.raises(ValueError, match=r"`mode_share` must be above 1/levels = 0\.333 .*0\.2"):
        simulate_selection(levels=3, mode_share=0.2, **kw)
    with pytest.raises(ValueError, match=r"`mode_share` must be .* got 1\.0"):
        simulate_selection(levels=3, mode_share=1.0, **kw)
    with pytest.raises(ValueError, match="`mode_share` needs `levels`"):
        simulate_selection(levels=None, mode_share=0.7, **kw)
    with pytest.raises(ValueError, match=r"`levels` must be an integer >= 2 or None, got 1"):
        simulate_selection(levels=1, **kw)
    for bad in (3.0, True, "3"):
        with pytest.raises(ValueError, match="`levels` must be an integer >= 2 or None"):
            simulate_selection(levels=bad, **kw)
    with pytest.raises(ValueError, match="`mode_share` must be above 1/levels .*'0.7'"):
        simulate_selection(levels=3, mode_share="0.7", **kw)
    # numpy scalars (a grid built with np.arange / np.linspace) are the same as Python ones.
    assert simulate_selection(
        levels=np.int64(3), mode_share=np.float64(0.7), seed=1, **kw
    ) == simulate_selection(levels=3, mode_share=0.7, seed=1, **kw)
    coarse = simulate_selection(levels=3, mode_share=0.7, seed=1, **kw)
    assert set(coarse) == {"best", "confirm"}


def test_selection_config_validation() -> None:
    with pytest.raises(ValueError, match="confirm_fraction"):
        SelectionConfig(confirm_fraction=1.2)
    with pytest.raises(ValueError, match="rule"):
        SelectionConfig(rule="median")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="extra"):
        OptimizerConfig(selection={"rules": "best"})  # type: ignore[arg-type]
    cfg = HPSS(selection="best").config.selection
    assert cfg.rule == "best" and cfg.finalists == 3
    assert HPSS(selection={"confidence": 0.9}).config.selection.confidence == 0.9
    assert HPSS(selection="shrink").config.selection.rule == "shrink"


def test_one_default_rule_with_its_own_level(tmp_path: Path) -> None:
    """``SelectionConfig()``, a teleprompter without ``selection`` and every preset without
    a ``[selection]`` table choose by the bank's rule (``lcb`` at 0.95); ``auto`` ships the
    pre-registered guarded stack (``best`` with the cross-fitted guard at margin 0.1). A level
    nobody stated is the rule's own, so switching the rule switches it, and a stated one is
    kept for whichever rule runs, as are the preset's other stated settings."""
    from judgeopt.selection import default_confidence
    from judgeopt.teleprompt import JudgeSearch, load_optimizer

    default = SelectionConfig()
    assert (default.rule, default.confidence) == ("lcb", 0.95)
    assert default.model_dump(exclude_unset=True) == {}  # the level was not stated
    assert SelectionConfig(rule="confirm").confidence == 0.8 == default_confidence("veto")
    assert SelectionConfig(rule="lcb", confidence=0.9).confidence == 0.9
    assert SelectionConfig(confidence=0.6).rule == "lcb"
    assert JudgeSearch().config.selection == default == HPSS().config.selection
    for name in ("hpss", "quick", "greedy"):
        assert load_optimizer(name).selection == default, name
    auto = load_optimizer("auto")
    assert (auto.selection.rule, auto.selection.guard, auto.selection.guard_margin) == (
        "best",
        True,
        0.1,
    )
    # --selection RULE: the new rule at its own level, the preset's stated settings kept.
    switched = JudgeSearch.from_config(auto, selection="lcb").config.selection
    assert (switched.rule, switched.confidence, switched.guard) == ("lcb", 0.95, True)
    switched = JudgeSearch.from_config(auto, selection="confirm").config.selection
    assert (switched.rule, switched.confidence) == ("confirm", 0.8)
    assert JudgeSearch.from_config(load_optimizer("hpss")).config.selection.confidence == 0.95
    preset = tmp_path / "stated.toml"
    preset.write_text('search = "auto"\n[selection]\nrule = "lcb"\nconfidence = 0.9\nseed = 3\n')
    stated = load_optimizer(str(preset))
    kept = JudgeSearch.from_config(stated, selection="veto").config.selection
    assert (kept.rule, kept.confidence, kept.seed) == ("veto", 0.9, 3)
    # The simulation runs best, confirm and veto only, and says so for another rule.
    with pytest.raises(ValueError, match=r"configs\['d'\]: rule 'lcb' is not simulated"):
        simulate_selection(configs={"d": default}, n_runs=2)


def test_an_unknown_rule_is_named_with_the_allowed_ones(tmp_path: Path) -> None:
    """Every way of naming a rule (the config, a teleprompter's argument, a preset's
    override, a preset file) refuses an unknown one, naming the field, the value and the
    rules allowed."""
    from judgeopt.teleprompt import JudgeSearch, load_optimizer

    allowed = "'confirm', 'veto', 'best', 'shrink', 'lcb', 'factor' or 'posterior'"
    for make in (
        lambda: SelectionConfig(rule="median"),  # type: ignore[arg-type]
        lambda: HPSS(selection="median"),
        # A preset's override (the CLI's path) is validated too, not copied in unchecked.
        lambda: JudgeSearch.from_config(OptimizerConfig(), selection="median"),
    ):
        with pytest.raises(ValueError) as e:
            make()
        text = str(e.value)
        assert "rule" in text and "'median'" in text and allowed in text, text
    preset = tmp_path / "preset.toml"
    preset.write_text('search = "hpss"\n[selection]\nrule = "median"\n')
    with pytest.raises(ValueError, match=re.escape(f"`selection.rule`: Input should be {allowed}")):
        load_optimizer(preset)
    preset.write_text('search = "hpss"\n[selection]\nrule = "shrink"\n')
    assert load_optimizer(preset).selection.rule == "shrink"
    preset.write_text('[selection]\nprior = {scale = 10, decoding = "expected"}\n')
    assert load_optimizer(preset).selection.prior == {"scale": 10, "decoding": "expected"}
    preset.write_text("[selection]\nprior = {scale = [10]}\n")
    with pytest.raises(ValueError, match=re.escape("`selection.prior.scale")):
        load_optimizer(preset)


def test_the_lcb_summary_counts_its_comparisons_in_words() -> None:
    from judgeopt.selection import RULES

    summary = RULES["lcb"].summary
    assert summary(SelectionConfig(), 1).endswith("one comparison, uncorrected")
    assert summary(SelectionConfig(), 7).endswith("corrected for 7 comparisons")
