"""Ensembles of the best strategies from a compile, the anchored ensemble and the guard that
refutes an ensemble which costs on the confirmation items (scripted LM)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from _selection_scripts import ASPECT, compile_with, respond_with, topical_records, topical_task
from judgeopt.judge import (
    JudgeEnsemble,
    JudgeProgram,
    baseline_strategy,
    load_judge,
    load_program,
)
from judgeopt.teleprompt import HPSS


@pytest.fixture(scope="module")
def task() -> Any:
    return topical_task()


@pytest.fixture(scope="module")
def records(shared_data: Path) -> Any:
    return topical_records(shared_data)


def test_ensemble_of_the_best_strategies(task, records, tmp_path: Path) -> None:
    respond = respond_with(records, "scale10")
    judge, fake = compile_with(task, records, respond, ensemble=2)
    ens = judge.ensemble
    assert isinstance(ens, JudgeEnsemble) and len(ens.members) == 2
    assert ens.members[0].strategy.as_dict() == judge.selection["finalists"][0]["strategy"]
    comp = ens.comparisons["confirmation"]
    assert comp["chosen"]["label"] == "ensemble" and comp["n"] == judge.selection["confirm_items"]
    # No call beyond the search and the confirmation (members are finalists).
    assert len(fake.judge_requests) == judge.search_result.calls + judge.selection["cost"]["calls"]
    # A prediction is the mean z of the members, on the first member's scale.
    r = records[0]
    pred = ens(**r.inputs)
    scores = [m(**r.inputs).score for m in ens.members]
    assert pred.member_scores == scores
    z = sum((s - mu) / sd for s, mu, sd in zip(scores, ens.means, ens.sds, strict=True)) / 2
    assert pred.score == pytest.approx(ens.means[0] + ens.sds[0] * z)
    path = tmp_path / "ens.json"
    ens.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == "judgeopt-ensemble" and len(data["members"]) == 2
    loaded = load_judge(path, lm=fake.lm)
    assert isinstance(loaded, JudgeEnsemble) and loaded(**r.inputs).score == pred.score
    assert loaded.comparisons == ens.comparisons
    assert loaded.report_ == ens.report_ and loaded.model_name == ens.model_name
    # The compile's results are a frozen report, read through properties, derived, never set.
    for name in ("validation", "test", "selection", "comparisons", "model_name"):
        with pytest.raises(AttributeError):
            setattr(ens, name, None)
    renamed = ens.with_model_name("local:other")
    assert renamed.model_name == "local:other" and ens.model_name != "local:other"
    assert renamed.comparisons == ens.comparisons
    with pytest.raises(AttributeError):
        judge.model_name = "local:other"
    with pytest.raises(ValueError, match="is a judge ensemble"):
        JudgeProgram.load(path)
    with pytest.raises(ValueError, match="is a judge ensemble"):
        load_program(path)
    with pytest.raises(ValueError, match="at least 2 members"):
        JudgeEnsemble(ens.members[:1], [1.0], [1.0])
    with pytest.raises(ValueError, match="standard deviation > 0"):
        JudgeEnsemble(ens.members, [1.0, 2.0], [1.0, 0.0])


def test_anchored_ensemble_holds_the_baseline_at_its_weight(task, records, tmp_path) -> None:
    """``ensemble_anchor=w``: the baseline first at weight ``w``, then the ``ensemble`` best
    other strategies sharing the rest (``ensemble=1`` is allowed then); a prediction is the
    weighted mean z; the weights survive export and load."""
    respond = respond_with(records, "scale10")
    judge, fake = compile_with(task, records, respond, ensemble=2, ensemble_anchor=0.4)
    ens = judge.ensemble
    assert isinstance(ens, JudgeEnsemble) and len(ens.members) == 3
    assert ens.members[0].strategy == baseline_strategy(task)
    assert all(m.strategy != baseline_strategy(task) for m in ens.members[1:])
    assert ens.weights == pytest.approx([0.4, 0.3, 0.3])
    assert ens.selection["anchor"] == 0.4 and ens.selection["weights"] == ens.weights
    r = records[0]
    pred = ens(**r.inputs)
    zs = [(s - mu) / sd for s, mu, sd in zip(pred.member_scores, ens.means, ens.sds, strict=True)]
    z = sum(w * x for w, x in zip(ens.weights, zs, strict=True))
    assert pred.score == pytest.approx(ens.means[0] + ens.sds[0] * z)
    # an unparsed member's weight is shared by the others
    score, z2 = ens.combine([pred.member_scores[0], None, pred.member_scores[2]])
    assert z2 == pytest.approx((0.4 * zs[0] + 0.3 * zs[2]) / 0.7)
    path = tmp_path / "anchored.json"
    ens.save(path)
    data = json.loads(path.read_text())
    assert [m["weight"] for m in data["members"]] == pytest.approx([0.4, 0.3, 0.3])
    loaded = load_judge(path, lm=fake.lm)
    assert loaded.weights == pytest.approx(ens.weights) and loaded(**r.inputs).score == pred.score
    del data["members"][1]["weight"]
    with pytest.raises(ValueError, match="every member needs a `weight`, or none"):
        JudgeEnsemble.from_dict(data)
    data["members"][1]["weight"] = "heavy"
    with pytest.raises(ValueError, match=r"`members\[1\].weight` must be a number"):
        JudgeEnsemble.from_dict(data)
    with pytest.raises(ValueError, match="`weights` must be finite, >= 0"):
        JudgeEnsemble(ens.members, ens.means, ens.sds, weights=[1.0, -1.0, 1.0])
    # a baseline whose ratings do not vary cannot anchor: left out, and said
    from judgeopt.judge import render_messages

    base_texts = {
        render_messages(task, ASPECT, baseline_strategy(task), r.inputs)[-1]["content"]
        for r in records
    }

    def flat_baseline(messages: list[dict[str, Any]]) -> str:
        text = str(messages[-1]["content"])
        return "Rating: [[2]]" if text in base_texts else respond(messages)

    lost, _ = compile_with(task, records, flat_baseline, ensemble=2, ensemble_anchor=0.4)
    assert lost.ensemble is not None and lost.ensemble.selection["anchor"] == 0.0
    assert all(m.strategy != baseline_strategy(task) for m in lost.ensemble.members)
    assert any("no anchor" in m for m in lost.selection["messages"])
    one, _ = compile_with(task, records, respond, ensemble=1, ensemble_anchor=0.5)
    assert one.ensemble is not None and len(one.ensemble.members) == 2
    plain, _ = compile_with(task, records, respond, ensemble=1)
    assert plain.ensemble is None  # one strategy alone is no ensemble
    with pytest.raises(ValueError, match="ensemble_anchor"):
        HPSS(ensemble=2, ensemble_anchor=1.0)


def test_stacked_ensemble_fits_non_negative_weights_and_drops_the_noise(
    task, records, tmp_path
) -> None:
    """``ensemble_stack=ridge``: the baseline and the ``ensemble`` best others, weighted by
    a non-negative ridge stack fitted on the items the judge was chosen on; a member the
    stack gives no weight is left out; the weights survive export and load."""
    respond = respond_with(records, "scale10")
    judge, fake = compile_with(task, records, respond, ensemble=3, ensemble_stack=10.0)
    ens = judge.ensemble
    assert isinstance(ens, JudgeEnsemble) and 2 <= len(ens.members) <= 4
    assert all(w > 0 for w in ens.weights) and sum(ens.weights) == pytest.approx(1.0)
    assert ens.selection["stack"] == 10.0 and ens.selection["anchor"] == 0.0
    # Scale-10 prompts carry the signal here; the hash-noise baseline gets no weight.
    assert all(m.strategy["scale"] == 10 for m in ens.members)
    assert any("non-negative stack" in m for m in judge.selection["messages"])
    path = tmp_path / "stacked.json"
    ens.save(path)
    loaded = load_judge(path, lm=fake.lm)
    r = records[0]
    assert loaded.weights == pytest.approx(ens.weights)
    assert loaded(**r.inputs).score == ens(**r.inputs).score
    # The guard cross-fits the stack itself (fitted on each half, scored on the other).
    guarded, _ = compile_with(
        task, records, respond, ensemble=3, ensemble_stack=10.0, selection={"guard": True}
    )
    guard = guarded.selection["guard"]
    assert guard["checked"] == "ensemble" and guard["passed"] and guard["crossfit_gain"] > 0
    assert any("the stacked ensemble of the baseline" in m for m in guarded.selection["messages"])
    assert guarded.ensemble is not None
    with pytest.raises(ValueError, match="`ensemble_stack` and `ensemble_anchor`"):
        HPSS(ensemble=2, ensemble_anchor=0.5, ensemble_stack=10.0)
    with pytest.raises(ValueError, match="ensemble_stack"):
        HPSS(ensemble=2, ensemble_stack=-1.0)


def test_stack_members_keeps_whom_the_stack_weighs(task, records) -> None:
    """The weights are :func:`judgeopt.selection.stack_rule`'s (``nonneg``) on the members'
    ratings; a stack that keeps one judge builds no ensemble, and says so."""
    import numpy as np

    from judgeopt.selection import RuleInput, stack_rule
    from judgeopt.teleprompt._ensembling import stack_members

    rng = np.random.default_rng(0)
    human = rng.normal(size=80)
    preds = [
        list(human + rng.normal(size=80)),
        list(rng.normal(size=80)),
        list(human + 0.5 * rng.normal(size=80)),
    ]
    names, messages = ["base", "noise", "good"], []
    kept = stack_members(
        names, ["r0", "r1", "r2"], preds, list(human), None, ridge=1.0, messages=messages
    )
    want = stack_rule(
        RuleInput(human=human, preds=np.asarray(preds), baseline=0), ridge=1.0, nonneg=True
    )
    assert kept is not None
    members, results, weights = kept
    assert members == [names[i] for i in want.members] and "noise" not in members
    assert results == [f"r{i}" for i in want.members]
    assert weights == pytest.approx(list(want.weights))
    assert "kept 2 of them" in messages[-1]
    alone = stack_members(
        names[:2],
        ["r0", "r1"],
        [preds[0], [-x for x in preds[0]]],
        list(human),
        None,
        ridge=1.0,
        messages=messages,
    )
    assert alone is None and "gave weight to the baseline alone" in messages[-1]


def test_ensemble_result_combines_the_members_judged_items(task, records) -> None:
    """``judgeopt.evaluate.ensemble_result``: an ensemble's evaluation from its members'
    (no call), each item as the ensemble judges it, the members' costs summed."""
    from judgeopt.evaluate import ensemble_result, evaluate

    judge, fake = compile_with(task, records, respond_with(records, "scale10"), ensemble=2)
    ens = judge.ensemble
    assert ens is not None
    few = records[:12]
    members = [evaluate(m, few, progress=False) for m in ens.members]
    n_calls = len(fake.judge_requests)
    res = ensemble_result(ens, members, few)
    assert len(fake.judge_requests) == n_calls and res.n == 12
    for item, r in zip(res.items, few, strict=True):
        assert item.score == pytest.approx(ens(**r.inputs).score)
    assert res.calls == sum(m.calls for m in members)
    with pytest.raises(ValueError, match="1 member evaluations for an ensemble of 2"):
        ensemble_result(ens, members[:1], few)
    with pytest.raises(ValueError, match="was not judged by every member"):
        ensemble_result(ens, members, records[:13])


def test_an_ensemble_takes_the_baseline_when_it_ranks_among_the_best(task, records) -> None:
    """``--ensemble M`` without an anchor is the M best strategies of the search, the
    baseline among them when its search score ranks there (as the bank's ``ensemble``)."""
    judge, _ = compile_with(task, records, respond_with(records, "baseline"), ensemble=2)
    ens = judge.ensemble
    assert ens is not None and len(ens.members) == 2
    assert ens.members[0].strategy == baseline_strategy(task)
    assert ens.members[1].strategy != baseline_strategy(task)


def test_the_guard_keeps_a_real_gain_and_refutes_an_ensemble_that_costs(task, records) -> None:
    """``guard``: what rule ``best`` and the ensemble chose on the items they are scored on
    is chosen again on each half and scored on the other; kept only above 0, else no
    ensemble and (rule best) the baseline. From the stored judgements: no call."""
    guarded_best = {"rule": "best", "guard": True}
    good, fake = compile_with(
        task,
        records,
        respond_with(records, "scale10"),
        selection=guarded_best,
        ensemble=2,
        ensemble_anchor=0.4,
    )
    sel = good.selection
    assert sel["guard"]["checked"] == "ensemble" and sel["guard"]["passed"] is True
    assert sel["guard"]["crossfit_gain"] > 0.3 and sel["guard"]["items"] == 96
    assert good.ensemble is not None and good.strategy["scale"] == 10
    assert any(m.startswith("selection: the guard kept the choice: ") for m in sel["messages"])
    assert sel["cost"]["calls"] == 0 and len(fake.judge_requests) == good.search_result.calls
    # a margin above the cross-fitted gain refutes it (no ensemble; rule best: the baseline)
    strict, _ = compile_with(
        task,
        records,
        respond_with(records, "scale10"),
        selection=guarded_best | {"guard_margin": 0.99},
        ensemble=2,
        ensemble_anchor=0.4,
    )
    assert strict.selection["guard"]["passed"] is False and strict.ensemble is None
    assert strict.selection["guard"]["margin"] == 0.99
    assert strict.strategy == baseline_strategy(task)
    assert any("(not above 0.99)" in m for m in strict.selection["messages"])
    # halves below min_confirm_items cannot show anything: the guard does not vouch
    few, _ = compile_with(
        task, records[:30], respond_with(records, "scale10"), selection=guarded_best, ensemble=2
    )
    assert few.selection["guard"]["passed"] is False and few.ensemble is None
    assert any(
        "cannot be cross-fitted on 30 items (halves of 15 items, below min_confirm_items=20)" in m
        for m in few.selection["messages"]
    )
    # The baseline is the informative judge: the ensemble of the two best (the baseline and
    # the best noise) is worse than the baseline on the half it did not see.
    lost, _ = compile_with(
        task, records, respond_with(records, "baseline"), selection=guarded_best, ensemble=2
    )
    sel = lost.selection
    assert sel["guard"]["passed"] is False and sel["guard"]["crossfit_gain"] < 0
    assert lost.ensemble is None and lost.strategy == baseline_strategy(task)
    said = [m for m in sel["messages"] if m.startswith("selection: the guard refuted")]
    assert said and "the baseline is returned" in said[0] and "(not above 0)" in said[0]
    # Nothing to check: rule best kept the baseline; rule confirm held items out.
    kept, _ = compile_with(task, records, respond_with(records, "baseline"), selection=guarded_best)
    assert kept.selection["guard"] == {"checked": None}
    assert any("rule best kept the baseline" in m for m in kept.selection["messages"])
    confirm, _ = compile_with(
        task, records, respond_with(records, "scale10"), selection={"guard": True}
    )
    assert confirm.selection["guard"] == {"checked": None} and confirm.strategy["scale"] == 10
    assert any("rule confirm does not choose on" in m for m in confirm.selection["messages"])


def test_the_guard_cautions_below_the_labels_it_was_registered_for(
    task, records, caplog: pytest.LogCaptureFixture
) -> None:
    """A guard that decides on fewer labelled items than the default's registration (100)
    says so before the search and in the selection's messages, marks its record and makes the
    selection a warning; the choice itself is unchanged."""
    from judgeopt.selection import SelectionConfig
    from judgeopt.teleprompt._guard import GUARD_REGISTERED_ITEMS, few_labels_caution

    guarded = {"rule": "best", "guard": True, "guard_margin": 0.1}
    with caplog.at_level("WARNING", logger="judgeopt.teleprompt"):
        judge, _ = compile_with(
            task, records, respond_with(records, "scale10"), selection=guarded, ensemble=2
        )
    sel = judge.selection
    assert len(records) < GUARD_REGISTERED_ITEMS == 100
    assert sel["guard"]["passed"] is True and sel["guard"]["few_labels"] is True
    said = [m for m in sel["messages"] if "labelled items; its margin (0.1)" in m]
    assert len(said) == 1 and f"decides on {len(records)} labelled items" in said[0]
    assert "--selection lcb" in said[0]
    early = [r for r in caplog.records if "labelled items; its margin" in r.getMessage()]
    assert early and early[0].levelname == "WARNING"
    # the same pick as without the caution: the caution changes nothing but the words
    assert judge.ensemble is not None and judge.strategy["scale"] == 10
    # at the registered size, with no guard, or a rule the guard does not check: silent
    config = SelectionConfig(rule="best", guard=True, guard_margin=0.1)
    assert few_labels_caution(config, n_items=100, ensemble=5, rule="best") is None
    assert few_labels_caution(config, n_items=99, ensemble=5, rule="best") is not None
    assert few_labels_caution(config, n_items=50, ensemble=0, rule="confirm") is None
    unguarded = SelectionConfig(rule="best")
    assert few_labels_caution(unguarded, n_items=50, ensemble=5, rule="best") is None
    # a refuted guard returns the baseline: the summary has no caution (said before the search)
    strict, _ = compile_with(
        task, records, respond_with(records, "baseline"), selection=guarded, ensemble=2
    )
    assert (
        strict.selection["guard"]["passed"] is False
        and "few_labels" not in strict.selection["guard"]
    )
    assert not any("labelled items; its margin" in m for m in strict.selection["messages"])
    # nothing to check (rule best kept the baseline): no caution in the record
    kept, _ = compile_with(task, records, respond_with(records, "baseline"), selection=guarded)
    assert kept.selection["guard"] == {"checked": None}
    assert not any("labelled items; its margin" in m for m in kept.selection["messages"])


def test_the_guard_is_a_preset_setting_a_flag_and_no_part_of_the_checkpoint(
    task, records, tmp_path: Path
) -> None:
    from judgeopt.teleprompt import JudgeSearch, load_optimizer

    preset = tmp_path / "guarded.toml"
    preset.write_text('ensemble = 2\n[selection]\nrule = "best"\nguard = true\n')
    cfg = load_optimizer(preset)
    assert cfg.selection.guard is True
    assert JudgeSearch.from_config(cfg, guard=False).config.selection.guard is False
    on = JudgeSearch.from_config(cfg, selection="veto")
    assert on.config.selection.guard is True and on.config.selection.rule == "veto"
    # Switching the guard on for a finished compile reuses its judgements.
    ckpt = tmp_path / "ckpt"
    respond = respond_with(records, "scale10")
    compile_with(task, records, respond, selection="best", ensemble=2, checkpoint_dir=ckpt)
    again, fake = compile_with(
        task,
        records,
        respond,
        selection={"rule": "best", "guard": True, "guard_margin": 0.05},
        ensemble=2,
        checkpoint_dir=ckpt,
    )
    assert again.selection["guard"]["passed"] is True and len(fake.judge_requests) == 0
