"""HPSS compile with a confirmation stage: each selection rule, the prior default, the
fallbacks for strategies that rate too few items, the resume and the forbidden combinations.

The scripted LM (judgeopt.testing.ScriptedLM) rates by the human scores for some strategies
and by noise for others: these check control flow and bookkeeping, never that a judge works.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from _selection_scripts import (
    ASPECT,
    SPACE,
    compile_with,
    respond_noise,
    respond_with,
    topical_records,
    topical_task,
)
from judgeopt.data import load_records
from judgeopt.judge import JudgeProgram, baseline_strategy, load_task
from judgeopt.selection import (
    SelectionConfig,
)
from judgeopt.teleprompt import HPSS, OptimizerConfig
from judgeopt.testing import ScriptedLM


@pytest.fixture(scope="module")
def task() -> Any:
    return topical_task()


@pytest.fixture(scope="module")
def records(shared_data: Path) -> Any:
    return topical_records(shared_data)


def test_compile_confirms_a_better_strategy(task, records) -> None:
    judge, fake = compile_with(task, records, respond_with(records, "scale10"))
    sel, res = judge.selection, judge.search_result
    assert sel["rule"] == "confirm" and sel["search_items"] + sel["confirm_items"] == 96
    # The search saw only the search part.
    assert all(s["n"] == sel["search_items"] for s in res.evaluation_summaries)
    assert judge.strategy["scale"] == 10 and sel["chosen"] is not None
    chosen = sel["finalists"][sel["chosen"]]
    assert chosen["confirmed"] and chosen["lower_bound"] > 0
    assert chosen["strategy"] == judge.strategy.as_dict()
    comp = judge.comparisons["confirmation"]
    assert comp["n"] == sel["confirm_items"] and comp["gain"] > 0 and comp["gain_ci"][0] > 0
    assert comp["chosen"]["score"] == pytest.approx(chosen["confirm_score"])
    # Calls: the search, then baseline + finalists on the confirmation items, no repeats.
    n_final = len(sel["finalists"])
    assert len(fake.judge_requests) == res.calls + (1 + n_final) * sel["confirm_items"]
    assert sel["cost"]["calls"] == (1 + n_final) * sel["confirm_items"]
    # Exported and loaded with the selection record.
    data = judge.export()
    assert data["selection"]["chosen"] == sel["chosen"] and "confirmation" in data["comparisons"]


def test_compile_keeps_the_baseline_when_nothing_is_confirmed(task, records, caplog) -> None:
    judge, _ = compile_with(task, records, respond_with(records, "baseline"))
    sel = judge.selection
    assert judge.strategy == baseline_strategy(task)
    assert sel["chosen"] is None and "baseline is kept" in sel["reason"]
    assert judge.comparisons["confirmation"]["gain"] == 0.0
    assert any("baseline is kept" in m for m in sel["messages"])


def test_compile_with_the_veto_rule(task, records) -> None:
    judge, fake = compile_with(task, records, respond_with(records, "scale10"), selection="veto")
    sel, res = judge.selection, judge.search_result
    assert sel["rule"] == "veto" and sel["search_items"] + sel["confirm_items"] == 96
    assert all(s["n"] == sel["search_items"] for s in res.evaluation_summaries)
    # Only the search's best is judged on the confirmation items, beside the baseline.
    assert len(sel["finalists"]) == 1 and sel["chosen"] == 0
    assert judge.strategy["scale"] == 10 and judge.strategy != baseline_strategy(task)
    best = max(res.evaluation_summaries, key=lambda s: s["spearman"])
    assert sel["finalists"][0]["strategy"] == judge.strategy.as_dict() == best["strategy"]
    assert sel["finalists"][0]["upper_bound"] >= 0 and "is kept" in sel["reason"]
    assert sel["baseline_search_score"] < sel["finalists"][0]["search_score"]
    assert len(fake.judge_requests) == res.calls + 2 * sel["confirm_items"]
    # The baseline's prompt is the informative one: its search score is the best, so the
    # rule keeps it without asking the confirmation items.
    kept, _ = compile_with(task, records, respond_with(records, "baseline"), selection="veto")
    assert kept.strategy == baseline_strategy(task) and kept.selection["chosen"] is None
    assert "baseline has the best search score" in kept.selection["reason"]
    assert kept.comparisons["confirmation"]["gain"] == 0.0


def test_the_prior_default_replaces_the_baseline_when_the_rule_keeps_it(task, records) -> None:
    """With ``prior`` set, a compile whose rule keeps the baseline (here: a budget of 1
    leaves no other strategy) returns the prior instead, judged on the confirmation items,
    because those items do not refute it (a scale-10 prompt rates by the human score)."""
    prior = {"scale": 10}
    judge, fake = compile_with(
        task, records, respond_with(records, "scale10"), budget=1, selection={"prior": prior}
    )
    sel = judge.selection
    assert judge.strategy == baseline_strategy(task).replace(scale=10)
    rec = sel["prior_fallback"]
    assert rec["returned"] and rec["change"] == prior and rec["strategy"]["scale"] == 10
    assert rec["gain"] > 0 and rec["upper_bound"] > 0 and rec["interval"][0] <= rec["gain"]
    assert any(
        m.startswith("selection: the rule kept the baseline; the prior default {'scale': 10}")
        and "not refuted" in m
        for m in sel["messages"]
    ), sel["messages"]
    comp = judge.comparisons["confirmation"]
    assert comp["gain"] == pytest.approx(rec["gain"])
    # Calls: the search (the baseline on the search items), then the baseline and the prior
    # on the confirmation items.
    assert len(fake.judge_requests) == judge.search_result.calls + 2 * sel["confirm_items"]
    # prior_veto off: returned without a comparison of its own (the chosen judge's is kept).
    off, _ = compile_with(
        task,
        records,
        respond_with(records, "scale10"),
        budget=1,
        selection={"prior": prior, "prior_veto": False},
    )
    assert off.strategy["scale"] == 10 and "gain" not in off.selection["prior_fallback"]
    # A prior per model: the compile's model's entry (the model string it records) is used,
    # another model's is not; an explicit ``prior`` wins over ``priors``.
    respond = respond_with(records, "scale10")
    mine, _ = compile_with(
        task, records, respond, budget=1, selection={"priors": {"openai/scripted": prior}}
    )
    assert mine.strategy["scale"] == 10 and mine.selection["prior_fallback"]["returned"]
    other, _ = compile_with(
        task, records, respond, budget=1, selection={"priors": {"local:other": prior}}
    )
    assert other.strategy == baseline_strategy(task) and "prior_fallback" not in other.selection
    assert SelectionConfig(prior={"cot": "none"}, priors={"m": prior}).prior_for("m") == {
        "cot": "none"
    }


def test_the_prior_default_is_vetoed_when_the_labels_refute_it(task, records) -> None:
    judge, _ = compile_with(
        task, records, respond_with(records, "baseline"), selection={"prior": {"scale": 10}}
    )
    sel = judge.selection
    assert judge.strategy == baseline_strategy(task) and not sel["prior_fallback"]["returned"]
    assert sel["prior_fallback"]["upper_bound"] < 0 and sel["prior_fallback"]["reason"].startswith(
        "vetoed: "
    )
    assert any("was vetoed by these labels" in m for m in sel["messages"])
    assert judge.comparisons["confirmation"]["gain"] == 0.0


def test_a_prior_default_outside_the_space_or_forbidden_is_not_used(task, records) -> None:
    respond = respond_with(records, "scale10")
    judge, _ = compile_with(task, records, respond, budget=1, selection={"prior": {"scale": 7}})
    assert (
        judge.strategy == baseline_strategy(task)
        and judge.selection["prior_fallback"]["strategy"] is None
    )
    said = " ".join(judge.selection["messages"])
    assert "the prior default {'scale': 7} is not used: it does not fit" in said and "7" in said
    judge, _ = compile_with(
        task,
        records,
        respond,
        budget=1,
        selection={"prior": {"scale": 10}},
        forbid=[{"scale": 10, "cot": "prefix"}],
    )
    assert judge.strategy == baseline_strategy(task)
    assert "forbidden combination" in judge.selection["prior_fallback"]["reason"]
    # A rule that chooses another strategy leaves the prior unused and unjudged.
    judge, _ = compile_with(task, records, respond, selection={"prior": {"criteria": "none"}})
    assert judge.strategy["scale"] == 10 and "prior_fallback" not in judge.selection
    assert judge.selection["prior"] == {"criteria": "none"}  # the setting, recorded


@pytest.mark.parametrize("rule", ["shrink", "lcb", "factor"])
def test_compile_with_a_pooled_rule_finds_a_better_strategy(task, records, rule) -> None:
    """Rules ``shrink`` and ``lcb`` search on every validation item and compare every
    strategy judged there with the baseline, from the stored judgements (no call beyond the
    search); a clearly better strategy is chosen and the record says why."""
    judge, fake = compile_with(task, records, respond_with(records, "scale10"), selection=rule)
    sel, res = judge.selection, judge.search_result
    assert sel["rule"] == rule and sel["search_items"] == 96 and sel["confirm_items"] == 0
    assert all(s["n"] == 96 for s in res.evaluation_summaries)
    assert judge.strategy["scale"] == 10 and sel["chosen"] is not None
    chosen = sel["candidates"][sel["chosen"]]
    assert chosen["strategy"] == judge.strategy.as_dict()
    said_why = {"shrink": "shrunk gain", "lcb": "lower bound", "factor": "fitted gain"}
    assert said_why[rule] in sel["reason"]
    # Every distinct strategy other than the baseline is a candidate, numbered from 1 as in
    # the summary table, with its validation score (the search's), gain and standard error.
    table = {f"#{s['number'] + 1}": s for s in res.evaluation_summaries}
    base = baseline_strategy(task).as_dict()
    keys = [c["key"] for c in sel["candidates"]]
    assert "#1" not in keys and table["#1"]["strategy"] == base
    assert len(keys) == len({json.dumps(s["strategy"], sort_keys=True) for s in table.values()}) - 1
    for c in sel["candidates"]:
        assert c["score"] == pytest.approx(table[c["key"]]["spearman"])
        assert c["gain"] == pytest.approx(c["score"] - sel["baseline_score"]) and c["se"] > 0
    assert sel["baseline_score"] == pytest.approx(table["#1"]["spearman"])
    said = " ".join(sel["messages"])
    assert f"selection: rule {rule} (" in said and f"chose {chosen['key']}: " in said
    assert sel["reason"] in said and "on all 96 validation items" in said
    # The stored judgements only: no call beyond the search (which judged the baseline).
    assert len(fake.judge_requests) == res.calls and sel["cost"]["calls"] == 0
    comp = judge.comparisons["validation"]
    assert comp["n"] == 96 and comp["gain"] == pytest.approx(chosen["gain"])
    assert "biased upward" in comp["note"] and not sel["kept_baseline"]
    assert judge.export()["selection"]["candidates"] == sel["candidates"]


def test_compile_with_rule_shrink_keeps_the_baseline_when_all_is_noise(task, records) -> None:
    judge, _ = compile_with(task, records, respond_noise, selection="shrink")
    sel = judge.selection
    assert judge.strategy == baseline_strategy(task) and sel["chosen"] is None
    assert sel["reason"].startswith("no shrunk gain above +0.000")
    assert len(sel["candidates"]) >= 5 and all(c["se"] > 0 for c in sel["candidates"])
    best = max(sel["candidates"], key=lambda c: c["gain"])
    assert any(
        m.startswith("selection: rule shrink (")
        and f"kept the baseline: {sel['reason']}" in m
        and f"the best other, {best['key']}, gained {best['gain']:+.3f}" in m
        for m in sel["messages"]
    ), sel["messages"]
    assert judge.comparisons["validation"]["gain"] == 0.0


def test_compile_with_rule_posterior_weighs_the_gains_against_the_models_bank(
    task, records
) -> None:
    """Rule ``posterior`` reads the compile's model's gain prior (``gain_priors``, keyed by
    the model string the compile records): each candidate's validation gain is weighed
    against the bank's gain for its change, the record holds both, the message says which
    prior was read."""
    table = {
        "changes": [{"change": {"scale": 10}, "mean": 0.2, "count": 4}],
        "sd_task": 0.05,
        "sd_unseen": 0.1,
    }
    respond = respond_with(records, "scale10")
    judge, fake = compile_with(
        task,
        records,
        respond,
        selection={"rule": "posterior", "gain_priors": {"openai/scripted": table}},
    )
    sel, res = judge.selection, judge.search_result
    assert sel["rule"] == "posterior" and "rule_applied" not in sel
    assert judge.strategy["scale"] == 10 and sel["reason"].startswith("posterior gain +")
    base = baseline_strategy(task).as_dict()
    for c in sel["candidates"]:
        change = {k: v for k, v in c["strategy"].items() if base[k] != v}
        assert c["prior_gain"] == (0.2 if change == {"scale": 10} else 0.0)
    said = " ".join(sel["messages"])
    assert "rule posterior (gain over the baseline weighed against the model's judgement " in said
    assert len(fake.judge_requests) == res.calls and sel["cost"]["calls"] == 0
    # A margin above every posterior gain keeps the baseline.
    high, _ = compile_with(
        task,
        records,
        respond,
        selection={"rule": "posterior", "gain_prior": table, "margin": 0.95},
    )
    assert high.strategy == baseline_strategy(task)
    assert high.selection["reason"] == "no posterior gain above +0.950"
    assert any("judgement bank above 0.95" in m for m in high.selection["messages"])


def test_rule_posterior_without_a_prior_for_the_model_is_shrink_and_says_so(task, records) -> None:
    table = {"changes": [], "sd_task": 0.05, "sd_unseen": 0.1}
    judge, _ = compile_with(
        task,
        records,
        respond_noise,
        selection={"rule": "posterior", "gain_priors": {"local:other": table}},
    )
    sel = judge.selection
    assert sel["rule"] == "posterior" and sel["rule_applied"] == "shrink"
    assert judge.strategy == baseline_strategy(task)
    assert sel["reason"].startswith("no shrunk gain above +0.000")
    assert any(
        "rule posterior has no gain prior for this model" in m and "rule shrink" in m
        for m in sel["messages"]
    ), sel["messages"]


def test_a_gain_prior_in_a_preset_is_checked_and_read(tmp_path: Path) -> None:
    """``[selection.gain_priors."MODEL"]`` with ``[[...changes]]`` (as ``benchmarks/
    bank_rules.py`` writes it) round-trips to the rule's :class:`GainPrior`; a bad entry
    names its field."""
    from judgeopt.selection import GainPrior, GainPriorTable, change_key
    from judgeopt.teleprompt import load_optimizer

    preset = tmp_path / "preset.toml"
    preset.write_text(
        '[selection]\nrule = "posterior"\nmargin = 0.02\n'
        '[selection.gain_priors."local:qwen"]\nsd_task = 0.04\nsd_unseen = 0.09\n'
        '[[selection.gain_priors."local:qwen".changes]]\n'
        'change = {scale = 10, decoding = "expected"}\nmean = 0.05\ncount = 3\n'
    )
    sel = load_optimizer(preset).selection
    prior = sel.gain_prior_for("local:qwen")
    assert prior is not None and sel.gain_prior_for("local:other") is None
    key = change_key({"decoding": "expected", "scale": 10})
    assert prior.means == {key: 0.05} and prior.counts == {key: 3}
    assert prior.of({"scale": 10, "decoding": "expected"}) == pytest.approx(
        (0.05, 0.04 * (1 + 1 / 3) ** 0.5)
    )
    assert prior.of({"cot": "none"}) == (0.0, 0.09)
    bank = GainPrior.from_gains([{key: 0.1, change_key({"cot": "none"}): -0.2}, {key: 0.0}])
    assert GainPriorTable.from_prior(bank).to_prior() == bank
    preset.write_text('[selection.gain_priors."m"]\nsd_task = 0\nsd_unseen = 0.1\n')
    with pytest.raises(ValueError, match=re.escape("`selection.gain_priors.m.sd_task`")):
        load_optimizer(preset)


def test_a_pooled_rule_compares_only_strategies_judged_on_every_item(task, records) -> None:
    """With racing, a strategy dropped early was judged on a prefix only: it is no candidate
    (and is not judged further), and the record and the message say so."""
    race = {"enabled": True, "top": 1, "min_items": 20}
    judge, fake = compile_with(
        task, records, respond_with(records, "scale10"), selection="lcb", racing=race
    )
    sel, res = judge.selection, judge.search_result
    dropped = [f"#{t['number'] + 1}" for t in res.trace if t["racing"]["dropped"]]
    assert dropped and sel["not_judged_on_all"] == dropped
    assert not set(dropped) & {c["key"] for c in sel["candidates"]}
    assert judge.strategy["scale"] == 10 and sel["cost"]["calls"] == 0
    assert len(fake.judge_requests) == res.calls
    assert any(
        f"({len(dropped)} dropped early by racing, not judged on every item, are not "
        "candidates)" in m
        for m in sel["messages"]
    )


def test_a_pooled_rule_judges_the_baseline_when_the_search_did_not(task, records) -> None:
    """A random search does not start from the baseline: the pooled rule judges it on the
    validation items (once: the comparison reuses those judgements)."""
    from judgeopt.teleprompt import RandomJudgeSearch

    fake = ScriptedLM(respond_with(records, "scale10"))
    opt = RandomJudgeSearch(budget=4, space=SPACE, progress=False, seed=1, selection="shrink")
    judge = opt.compile(JudgeProgram(task, ASPECT, lm=fake.lm), trainset=records)
    sel, res = judge.selection, judge.search_result
    base = baseline_strategy(task).as_dict()
    assert all(s["strategy"] != base for s in res.evaluation_summaries)
    assert len(sel["candidates"]) == 4 and sel["cost"]["calls"] == 96
    assert len(fake.judge_requests) == res.calls + 96
    assert judge.comparisons["validation"]["baseline"]["score"] == pytest.approx(
        sel["baseline_score"]
    )


def test_a_pooled_rule_with_another_metric_falls_back_to_best_and_says_so(task, records) -> None:
    judge, _ = compile_with(
        task, records, respond_with(records, "scale10"), selection="lcb", metric="pearson"
    )
    sel = judge.selection
    assert sel["rule"] == "best" and "candidates" not in sel
    assert sel["messages"][0].startswith(
        "selection: rule 'lcb' compares Spearman correlations of ratings and this compile's "
        "metric is pearson; the judge with the best validation score is returned"
    )


def test_compile_with_a_pooled_rule_at_group_level(shared_data: Path) -> None:
    """A group-level task: the pooled rule's scores are means of per-group correlations
    (the search's own), and its bootstrap resamples whole groups."""
    summeval = load_task("summeval")
    recs = load_records(shared_data / "summeval" / "full.jsonl")[:80]  # 5 articles
    human = {r.inputs["summary"]: r.scores["coherence"] for r in recs}

    def respond(messages: list[dict[str, Any]]) -> str:
        text = str(messages[-1]["content"])
        m = re.search(r"scale of (\d+) to (\d+)", text)
        hi = int(m.group(2)) if m else 3
        h = int(hashlib.sha256(text.encode()).hexdigest(), 16)
        value = next((v for summary, v in human.items() if summary in text), None)
        if hi == 10 and value is not None:
            return f"Rating: [[{round(1 + (value - 1) * 9 / 4)}]]"
        return f"Rating: [[{1 + h % hi}]]"

    fake = ScriptedLM(respond)
    space = {**SPACE, "scale": [5, 10]}  # SummEval's baseline rates on 1 to 5
    opt = HPSS(budget=8, space=space, progress=False, params={"k": 2}, selection="shrink")
    judge = opt.compile(JudgeProgram(summeval, "coherence", lm=fake.lm), trainset=recs)
    sel, res = judge.selection, judge.search_result
    assert sel["rule"] == "shrink" and judge.strategy["scale"] == 10
    table = {f"#{s['number'] + 1}": s for s in res.evaluation_summaries}
    assert res.evaluation_summaries[0]["level"] == "group"
    for c in sel["candidates"]:
        assert c["score"] == pytest.approx(table[c["key"]]["spearman"])
    assert sel["baseline_score"] == pytest.approx(table["#1"]["spearman"])


def respond_half_unparsed(records) -> Any:
    """Scale-10 prompts rate by the human score but give no rating for half the items (by
    a hash of the response); every other prompt is hash noise."""
    good = respond_with(records, "scale10")

    def respond(messages: list[dict[str, Any]]) -> str:
        text = str(messages[-1]["content"])
        response = text.split("## The Start of the Response")[-1].split("## The End")[0]
        if (
            "scale of 1 to 10" in text
            and int(hashlib.sha256(response.encode()).hexdigest(), 16) % 2
        ):
            return "The response is fine, I think."
        return good(messages)

    return respond


@pytest.mark.parametrize(
    "rule", ["confirm", "veto", "best", "shrink", "lcb", "factor", "posterior"]
)
def test_strategies_that_rate_too_few_items_are_passed_over(task, records, rule) -> None:
    """A search score that rests on the half of the answers that parsed (the rest imputed by
    the mean) is not a reason to choose a judge: such strategies are passed over as
    finalists (and by rule ``best``), said so, and recorded; with a looser
    ``max_parse_failures`` they are chosen as before."""
    respond = respond_half_unparsed(records)
    judge, _ = compile_with(task, records, respond, selection=rule)
    sel, res = judge.selection, judge.search_result
    # Keys count from 1, like the summary table (issue 34).
    shares = {
        f"#{s['number'] + 1}": (s["parse_failures"] + s["call_failures"]) / s["n"]
        for s in res.evaluation_summaries
    }
    scores = {f"#{s['number'] + 1}": s["spearman"] for s in res.evaluation_summaries}
    assert sel["excluded"], sel
    for e in sel["excluded"]:
        assert shares[e["key"]] > 0.25 and e["unrated"] / e["n"] == shares[e["key"]]
    best_key = max(scores, key=lambda k: scores[k])
    assert best_key in {e["key"] for e in sel["excluded"]}
    assert judge.strategy["scale"] == 3
    if rule in ("shrink", "lcb", "factor", "posterior"):  # the pooled rules' candidates
        assert all(c["strategy"]["scale"] == 3 for c in sel["candidates"])
    elif rule != "best":  # rule best records no finalists (``finalists`` is the setting)
        assert all(f["strategy"]["scale"] == 3 for f in sel["finalists"])
    assert any("passed over" in m and "max_parse_failures=0.25" in m for m in sel["messages"])
    assert not any("no rating" in p for p in res.problems)
    loose, _ = compile_with(task, records, respond, selection=rule, max_parse_failures=0.6)
    assert "excluded" not in loose.selection
    if rule != "confirm":  # confirm may still keep the baseline on the confirmation items
        assert loose.strategy["scale"] == 10


def respond_mostly_unparsed(records, baseline_parses: bool) -> Any:
    """Every prompt other than the baseline's gives no rating for two items in three (by a
    hash of the response); the scale-10 prompts rate the rest by the human score (the best
    search scores), the others by hash noise. The baseline's prompt rates every item by
    hash noise (``baseline_parses``) or, like the others, only one item in three."""
    from judgeopt.judge import render_messages

    task = load_task("topical_chat")
    base = {
        render_messages(task, ASPECT, baseline_strategy(task), r.inputs)[-1]["content"]
        for r in records
    }
    good = respond_with(records, "scale10")

    def respond(messages: list[dict[str, Any]]) -> str:
        text = str(messages[-1]["content"])
        response = text.split("## The Start of the Response")[-1].split("## The End")[0]
        rated = int(hashlib.sha256(response.encode()).hexdigest(), 16) % 3 == 0
        if text in base and baseline_parses:
            return f"Rating: [[{1 + int(hashlib.sha256(text.encode()).hexdigest(), 16) % 3}]]"
        return good(messages) if rated else "The response is fine, I think."

    return respond


@pytest.mark.parametrize("baseline_parses", [False, True])
@pytest.mark.parametrize("rule", ["confirm", "best", "shrink"])
def test_every_strategy_passed_over_returns_the_baseline_and_says_so(
    task, records, rule, baseline_parses, caplog
) -> None:
    """The user's mistake in issue 34: every strategy was passed over for unrated answers,
    the compile said so ("passed over 2 strategies ... #1, #0") and then returned the
    search's best anyway. The baseline is the fallback (docs/judge.md), the messages say
    so, and they number the strategies from 1 like the summary table."""
    respond = respond_mostly_unparsed(records, baseline_parses)
    judge, _ = compile_with(task, records, respond, selection=rule)
    sel, res = judge.selection, judge.search_result
    assert judge.strategy == baseline_strategy(task), sel["messages"]
    # The search's best is a scale-10 strategy, passed over.
    best = max(res.evaluation_summaries, key=lambda s: s["spearman"])
    assert best["strategy"]["scale"] == 10 and best["strategy"] != judge.strategy.as_dict()
    # Keys count from 1, like the summary table's first column (number + 1).
    table = {f"#{s['number'] + 1}": s for s in res.evaluation_summaries}
    assert f"#{best['number'] + 1}" in {e["key"] for e in sel["excluded"]}
    for e in sel["excluded"]:
        s = table[e["key"]]
        assert e["unrated"] == s["parse_failures"] + s["call_failures"] and e["n"] == s["n"]
        assert e["search_score"] == pytest.approx(s["spearman"])
    assert "#0 " not in " ".join(sel["messages"])
    said = " ".join(sel["messages"])
    assert "passed over" in said and ("baseline is returned" in said or "kept" in said)
    # It is said to be the baseline: no gain to estimate, no "biased upward" estimate of one,
    # and no message that the best validation score is returned.
    assert sel["kept_baseline"]
    for comp in judge.comparisons.values():
        assert comp["note"].startswith("the returned judge is the baseline itself"), comp
    assert "best validation score is returned" not in said
    if rule == "best":
        if baseline_parses:
            assert "the baseline is returned: every strategy with a better" in said
        else:
            # The baseline is not listed as passed over: it is what is returned.
            assert "every strategy with a search score gave no rating" in said
            assert f"not the search's best (#{best['number'] + 1})" in said
            assert not any("(the baseline)" in m for m in sel["messages"])
    else:
        assert "every strategy other than the baseline was passed over" in said
    if rule == "best":  # a rule that fell back: its messages are logged as warnings
        assert any(
            r.levelname == "WARNING" and "baseline is returned" in r.getMessage()
            for r in caplog.records
        )


def test_too_few_items_fall_back_to_best_and_say_so(task, records) -> None:
    judge, fake = compile_with(task, records[:24], respond_with(records, "scale10"), budget=4)
    sel = judge.selection
    assert sel["rule"] == "best" and sel["confirm_items"] == 0
    assert "too few" in sel["messages"][0] and "winner's curse" in sel["messages"][0]
    comp = judge.comparisons["validation"]
    assert comp["n"] == 24 and "biased upward" in comp["note"]
    # The comparison reuses the search's judgements: no call beyond the search.
    assert len(fake.judge_requests) == judge.search_result.calls
    best, fake2 = compile_with(
        task, records[:24], respond_with(records, "scale10"), budget=4, selection="best"
    )
    assert best.selection["rule"] == "best" and best.selection["messages"] == []
    assert best.strategy == judge.strategy and len(fake2.judge_requests) == len(fake.judge_requests)


def test_interrupted_confirmation_resumes_with_no_repeated_call(
    task, records, tmp_path: Path
) -> None:
    respond = respond_with(records, "scale10")
    ref, fake_ref = compile_with(task, records, respond)
    calls = {"n": 0}

    def interrupting(messages: list[dict[str, Any]]) -> str:
        calls["n"] += 1
        if calls["n"] == fake_ref.lm.stats().calls - 30:  # inside the confirmation stage
            raise KeyboardInterrupt
        return respond(messages)

    ckpt = tmp_path / "ckpt"
    with pytest.raises(KeyboardInterrupt):
        compile_with(task, records, interrupting, checkpoint_dir=ckpt)
    first = calls["n"] - 1 - 1  # the interrupted call and the endpoint check
    resumed, fake2 = compile_with(task, records, interrupting, checkpoint_dir=ckpt)
    assert first + len(fake2.judge_requests) == len(fake_ref.judge_requests)
    assert resumed.strategy == ref.strategy
    assert resumed.selection["finalists"] == ref.selection["finalists"]


def test_optimizer_forbid_is_validated_and_the_baseline_must_be_allowed(task, records) -> None:
    fake = ScriptedLM(lambda messages: "Rating: [[2]]")
    student = JudgeProgram(task, ASPECT, lm=fake.lm)
    with pytest.raises(ValueError, match=r"`forbid` entry 1 .*Unknown factor `tone`"):
        HPSS(budget=2, space=SPACE, progress=False, forbid=[{"tone": "formal"}]).compile(
            student, trainset=records
        )
    base = baseline_strategy(task)
    with pytest.raises(ValueError, match="forbidden combination"):
        HPSS(
            budget=2,
            space=SPACE,
            progress=False,
            forbid=[{"cot": base["cot"], "scale": base["scale"]}],
        ).compile(student, trainset=records)
    with pytest.raises(ValueError, match="forbid"):
        OptimizerConfig(forbid={"cot": "none"})  # type: ignore[arg-type]


def test_rate_first_candidates_leave_explaining_first_to_the_baseline(task, records) -> None:
    """``candidates = "rate_first"``: apart from the baseline (which explains first), every
    strategy the search judges gives its rating first, and those calls stop at the rating."""
    from judgeopt.judge import rates_first

    base = baseline_strategy(task)
    assert not rates_first(base) and rates_first({**base.as_dict(), "cot": "suffix"})
    assert not rates_first({**base.as_dict(), "cot": "none", "reference": "dialectic"})
    judge, fake = compile_with(
        task, records, respond_with(records, "scale10"), budget=9, candidates="rate_first"
    )
    judged = [s["strategy"] for s in judge.search_result.evaluation_summaries]
    assert len(judged) == 9  # the baseline and the 8 strategies of SPACE with cot "none"
    assert [s for s in judged if not rates_first(s)] == [base.as_dict()]
    # Without the option the same search judges explaining-first strategies besides it.
    plain, _ = compile_with(task, records, respond_with(records, "scale10"), budget=9)
    explaining = [
        s
        for s in (t["strategy"] for t in plain.search_result.evaluation_summaries)
        if not rates_first(s)
    ]
    assert len(explaining) > 1
    with pytest.raises(ValueError, match="candidates"):
        OptimizerConfig(candidates="cheap")  # type: ignore[arg-type]


def test_cli_candidates_flag(shared_data: Path, tmp_path, monkeypatch) -> None:
    import judgeopt.lm
    from judgeopt.cli import main
    from judgeopt.judge import rates_first

    monkeypatch.setattr(judgeopt.lm, "make_lm", lambda model, **kw: ScriptedLM(respond_noise).lm)
    data = str(shared_data / "topical_chat" / "valid.jsonl")
    out = tmp_path / "judge.json"
    args = ["compile", "--task", "topical_chat", "--aspect", ASPECT, "--data", data]
    args += ["--limit", "24", "--budget", "6", "--model", "scripted", "--no-progress"]
    assert main([*args, "--candidates", "rate_first", "--out", str(out)]) in (0, 1)
    trace = json.loads(out.read_text())["search"]["trace"]
    assert len(trace) == 6
    assert sum(not rates_first(t["strategy"]) for t in trace) <= 1  # the baseline at most
    with pytest.raises(SystemExit):
        main([*args, "--candidates", "cheap", "--out", str(out)])
