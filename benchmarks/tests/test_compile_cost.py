"""benchmarks/compile_cost.py with scripted LMs: the old compile really keeps its explanations
and the new one stops at the rating, the ratings comparison, the estimate's error arithmetic,
the JSON merge of separately run parts, and the demo's subprocess (no model is loaded)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import compile_cost as cc
from judgeopt.judge import baseline_strategy, load_task
from judgeopt.judge._program import SCORE_STOP
from judgeopt.teleprompt import load_optimizer
from judgeopt.testing import ScriptedLM
from judgeopt_lab import strategy_json

ASPECT = "naturalness"
#: A small space around the SFRES baseline (cot prefix) in which most strategies rate first,
#: greedy and expected, so a budget of 6 judges several of each.
SPACE = {
    "scale": [5, 10],
    "examples": [0],
    "criteria": ["human"],
    "reference": ["none"],
    "cot": ["prefix", "none", "suffix"],
    "autocot": ["off"],
    "metrics": ["off"],
    "order": ["TD-ER-IC"],
    "decoding": ["greedy", "expected"],
}


@pytest.fixture(scope="module")
def task() -> Any:
    return load_task("sfres")


@pytest.fixture(scope="module")
def items(shared_data: Path) -> list[Any]:
    return cc.first_items("sfres", 12)


def _preset() -> Any:
    # Every candidate, as both compiles judged before `auto` took rate-first candidates: the
    # two runs then take the same path and differ by the stop at the score alone.
    return load_optimizer("auto").model_copy(update={"space": SPACE, "candidates": "all"})


def _maker(tmp_path: Path, fakes: dict[str, ScriptedLM]) -> Any:
    def make(tag: str) -> Any:
        fakes[tag] = ScriptedLM(cc.hosted_answer, cache=tmp_path / tag, logprobs=cc.hosted_logprobs)
        return fakes[tag].lm

    return make


def test_the_first_items_are_the_head_of_the_e2e_validation_part(shared_data: Path) -> None:
    part = cc.validation_part("sfres")
    assert len(part) >= 100
    assert [r.id for r in cc.first_items("sfres", 30)] == [r.id for r in part[:30]]
    with pytest.raises(ValueError, match="e2e validation part"):
        cc.first_items("sfres", len(part) + 1)


def test_copies_keep_the_class_and_the_old_judge_never_stops(task) -> None:
    base = baseline_strategy(task).replace(cot="none")
    old = cc.recording_student(task, ASPECT, None, old=True).with_strategy(base)
    new = cc.recording_student(task, ASPECT, None, old=False).with_strategy(base)
    for judge, stops in ((old, False), (new, True)):
        for copy in (judge, judge.with_strategy(base.replace(cot="suffix")), judge.fresh_copy()):
            assert isinstance(copy, cc.RecordingJudge)
            measured = copy.with_explain(False)
            assert isinstance(measured, cc.RecordingJudge)
            assert measured.stops_at_score is stops
            assert ("stop" in measured.lm_kwargs()) is stops
            assert measured.judgements is judge.judgements
    assert old.judgements is not new.judgements


def test_the_old_compile_explains_and_the_new_one_stops_with_the_same_ratings(
    task, items, tmp_path: Path
) -> None:
    fakes: dict[str, ScriptedLM] = {}
    part = cc.side_by_side(
        _maker(tmp_path, fakes),
        task,
        ASPECT,
        items,
        preset=_preset(),
        budget=6,
        seed=0,
        progress=False,
    )
    old_requests, new_requests = fakes["old"].judge_requests, fakes["new"].judge_requests
    # Today's compile: no call carried the stop; every rating-first judgement explained.
    assert old_requests and all("stop" not in r for r in old_requests)
    stopped = [r for r in new_requests if r.get("stop") == [SCORE_STOP]]
    assert stopped and len(stopped) < len(new_requests)  # explain-first calls do not stop
    runs = part["runs"]
    assert runs["old"]["judgements_stopped"] == 0 and runs["new"]["judgements_stopped"] > 0
    old_rows = cc.latest(runs["old"]["judgements"])
    new_rows = cc.latest(runs["new"]["judgements"])
    first = [k for k in old_rows if cc.rates_first(k[0])]
    assert first and all(old_rows[k]["explained"] for k in first)
    assert not any(new_rows[k]["explained"] for k in first if k in new_rows)
    # The old compile wrote more tokens for the same judgements.
    assert runs["old"]["completion_tokens"] > runs["new"]["completion_tokens"]
    c = part["comparison"]
    assert part["same_ratings"] is True and c["items_compared"] >= len(items)
    assert not c["paths_diverged"] and c["mismatches"] == []
    assert part["n_items"] == len(items) and part["old_seconds"] > 0
    assert part["ratio"] == pytest.approx(part["new_seconds"] / part["old_seconds"], rel=1e-3)
    assert part["target_met"] == (part["time_target_met"] and part["same_ratings"] is True)
    assert not any("nothing to compare" in n or "same calls" in n for n in part["notes"])
    # The path names each strategy as the judgements do.
    assert {p["strategy"] for p in runs["new"]["path"]} == {k[0] for k in new_rows}
    # Each run says what its compile shipped: the selection's messages, its ensemble's size.
    for run in runs.values():
        shipped = run["shipped"]
        assert set(shipped) == {"guard", "ensemble_members", "messages"}
        assert shipped["messages"] and all(isinstance(m, str) for m in shipped["messages"])
        assert shipped["ensemble_members"] is None or shipped["ensemble_members"] >= 2
    json.dumps(part)  # the part is plain data


def _row(strategy: dict[str, Any], item: str, greedy: Any, score: Any) -> dict[str, Any]:
    return {
        "strategy": strategy_json(strategy),
        "item": item,
        "greedy": greedy,
        "score": score,
        "stopped": False,
        "explained": True,
    }


def test_compare_ratings_counts_rating_first_strategies_only(task) -> None:
    base = baseline_strategy(task).as_dict()  # cot prefix: explains first
    none, suffix = {**base, "cot": "none"}, {**base, "cot": "suffix"}
    old = [
        _row(none, "a", 4, 4.0),
        _row(none, "b", 3, 3.2),
        _row(suffix, "a", [3, 4], 3.5),
        _row(base, "a", 2, 2.0),
        _row(none, "only-old", 1, 1.0),
    ]
    same = [
        _row(none, "a", 4, 4.0),
        _row(none, "b", 3, 3.2 + 1e-9),
        _row(suffix, "a", [3, 4], 3.5),
        _row(base, "a", 5, 5.0),  # an explain-first strategy may differ: not compared
    ]
    dialectic = {**base, "cot": "suffix", "reference": "dialectic"}  # writes a reference first
    assert not cc.rates_first(dialectic) and cc.rates_first(suffix)
    old.append(_row(dialectic, "a", 1, 1.0))
    same.append(_row(dialectic, "a", 2, 2.0))
    c = cc.compare_ratings(old, same)
    assert c["same_ratings"] is True and c["strategies_compared"] == 2
    assert c["items_compared"] == 3 and c["mismatches"] == []
    for changed in (
        _row(none, "b", 3, 3.2 + 1e-5),  # expected rating off by more than 1e-6
        _row(none, "b", 2, 3.2),  # greedy rating differs
        _row(none, "b", 3, None),  # no rating
    ):
        c = cc.compare_ratings(old, [*same[:1], changed, *same[2:]])
        assert c["same_ratings"] is False and len(c["mismatches"]) == 1
        assert c["mismatches"][0]["item"] == "b"
    samples = cc.compare_ratings(old, [*same[:2], _row(suffix, "a", [4, 4], 3.5), same[3]])
    assert samples["same_ratings"] is False
    # Nothing rating-first in common: no verdict.
    assert (
        cc.compare_ratings([_row(base, "a", 2, 2.0)], [_row(base, "a", 2, 2.0)])["same_ratings"]
        is None
    )
    paths = cc.compare_ratings(
        old, same, [strategy_json(base), strategy_json(none)], [strategy_json(base)]
    )
    assert paths["paths_diverged"] and paths["only_old"] == [strategy_json(none)]
    assert paths["common_strategies"] == 1


def test_notes_say_when_the_two_compiles_cannot_show_the_stop(monkeypatch) -> None:
    monkeypatch.setenv("JUDGEOPT_THREADS", "2")
    idle = {"before": [0.4, 0.5, 0.5], "after": [1.1, 0.9, 0.6]}
    run = {"calls": 24, "completion_tokens": 4612, "load_average": idle}
    empty = {"strategies_compared": 0, "paths_diverged": False, "common_strategies": 3}
    notes = cc.side_by_side_notes(run, dict(run), empty)
    assert len(notes) == 2
    assert "nothing to compare" in notes[0] and "the machine's, not the compile's" in notes[1]
    busy = {**run, "completion_tokens": 900, "load_average": {**idle, "after": [4.2, 3, 2]}}
    compared = {**empty, "strategies_compared": 2, "paths_diverged": True}
    notes = cc.side_by_side_notes(run, busy, compared)
    assert len(notes) == 2
    assert "busy during the new compile" in notes[0] and "different paths" in notes[1]
    assert "the 3 strategies both judged" in notes[1]
    notes = cc.side_by_side_notes(run, busy, compared, rechecked=4)
    assert "the 4 rating-first strategies only the new compile judged" in notes[1]


def test_estimate_errors_are_signed_fractions_of_the_actual() -> None:
    assert cc.error(120, 100) == pytest.approx(0.2)
    assert cc.error(80, 100) == pytest.approx(-0.2)
    assert cc.error(None, 100) is None and cc.error(5, 0) is None
    run = {
        "calls": 100,
        "prompt_tokens": 40_000,
        "completion_tokens": 10_000,
        "seconds": 200.0,
        "report": {
            "plan": {
                "calls": 110,
                "prompt_tokens": 30_000,
                "completion_tokens": 10_000,
                "seconds": 260.0,
                "dollars": 0.012,
                "what": "x",
            },
            "search_calls": 95,
            "selection_calls": 2,
            "loop_seconds": 190.0,
        },
    }
    e = cc.estimate_report(run, model="m", dollars=0.01)
    assert e["calls_error"] == pytest.approx(0.1)
    assert e["tokens_error"] == pytest.approx(-0.2)
    assert e["seconds_error"] == pytest.approx(0.3)
    assert e["dollars_error"] == pytest.approx(0.2)
    assert e["prompt_tokens_error"] == pytest.approx(-0.25)
    assert e["target_met"] is False  # seconds 30 % over
    run["report"]["plan"]["seconds"] = 240.0
    assert cc.estimate_report(run, model="m", dollars=0.01)["target_met"] is True
    # The embedded model costs nothing: money is not part of its target.
    free = {**run, "report": {**run["report"], "plan": {**run["report"]["plan"], "dollars": 0.0}}}
    assert cc.estimate_report(free, model="local", dollars=0.0)["dollars_error"] is None
    none = cc.estimate_report(
        {**run, "report": {**run["report"], "plan": None}}, model="m", dollars=None
    )
    assert none["calls_error"] is None and none["target_met"] is None


def test_the_hosted_scripted_model_is_priced_and_counts_like_its_provider(
    task, items, tmp_path: Path
) -> None:
    e = cc.hosted_estimate(
        task,
        ASPECT,
        items,
        preset=load_optimizer("auto"),  # the whole space: the plan draws from it
        budget=4,
        seed=0,
        model="openai/gpt-4o-mini",
        cache=tmp_path / "hosted",
        time_scale=0.0,
    )
    assert e["plan"]["dollars"] > 0 and e["actual"]["dollars"] > 0
    assert e["dollars_error"] is not None and e["calls_error"] is not None
    assert e["actual"]["calls"] == e["run"]["calls"] > 0
    # The actual figures are what the provider counted over the whole compile.
    run, plan = e["run"], e["plan"]
    assert e["actual"]["tokens"] == run["prompt_tokens"] + run["completion_tokens"] > 0
    assert e["tokens_error"] == pytest.approx(
        (plan["prompt_tokens"] + plan["completion_tokens"]) / e["actual"]["tokens"] - 1, abs=1e-4
    )
    assert run["calls"] > run["report"]["search_calls"] > 0  # + the check, probe, timed call


def test_the_hosted_scripted_model_bills_by_the_providers_tokenizer_and_takes_time() -> None:
    import litellm

    fake = cc.HostedScriptedLM("openai/gpt-4o-mini", cache=False, time_scale=1.0)
    messages = [{"role": "user", "content": "Rate on a scale of 1 to 5: the sentence is fine."}]
    t0 = time.perf_counter()
    text = fake.lm(messages=messages, max_tokens=64)[0]
    seconds = time.perf_counter() - t0
    stats = fake.lm.stats()
    prompt = litellm.token_counter(model="openai/gpt-4o-mini", messages=messages)
    completion = litellm.token_counter(model="openai/gpt-4o-mini", text=text)
    assert text.startswith("Rating: [[") and stats.calls == 1
    assert (stats.prompt_tokens, stats.completion_tokens) == (prompt, completion)
    assert completion > len(text.split())  # not the scripted LM's word count
    latency = cc.HOSTED_LATENCY
    assert seconds >= latency["first_token"] + latency["per_completion_token"] * completion
    # max_tokens is honoured as a provider honours it: cut there, billed and timed there.
    t0 = time.perf_counter()
    short = fake.lm.forward(messages=messages, max_tokens=1, cache=False)
    seconds = time.perf_counter() - t0
    assert short["choices"][0]["finish_reason"] == "length"
    assert (
        litellm.token_counter(
            model="openai/gpt-4o-mini", text=short["choices"][0]["message"]["content"]
        )
        == 1
    )
    assert fake.lm.stats().completion_tokens == completion + 1
    assert seconds < latency["first_token"] + latency["per_completion_token"] * completion


def test_parts_merge_into_one_json_and_missing_parts_say_so(tmp_path: Path) -> None:
    out = tmp_path / "compile_cost.json"
    defaults = cc.placeholders("sfres:naturalness", 30, 100)
    first = cc.merge(out, {"demo_seconds": 300.0, "demo": {"seconds": 300.0}}, defaults)
    assert first["full"] == {
        "pair": "sfres:naturalness",
        "n_valid": 100,
        "seconds": None,
        "measured": False,
    }
    assert first["side_by_side"]["old_seconds"] is None and first["estimate"]["measured"] is False
    side = {"n_items": 30, "old_seconds": 9.0, "new_seconds": 3.0, "same_ratings": True}
    cc.merge(out, {"side_by_side": side}, defaults)
    data = json.loads(out.read_text())
    assert data["demo_seconds"] == 300.0 and data["side_by_side"] == side
    assert set(data) >= {"side_by_side", "full", "demo_seconds", "estimate", "provenance"}
    # A part run again replaces its own entry and nothing else.
    cc.merge(out, {"demo_seconds": 200.0, "demo": {"seconds": 200.0}}, defaults)
    data = json.loads(out.read_text())
    assert data["demo_seconds"] == 200.0 and data["side_by_side"] == side


def scripted_lms(monkeypatch: pytest.MonkeyPatch) -> dict[str, ScriptedLM]:
    """Every LM the script makes is a scripted hosted-like model, kept by its cache folder's
    name (the part that made it: ``old``, ``new``, ``recheck``, ``estimate``...)."""
    fakes: dict[str, ScriptedLM] = {}

    def fake_make_lm(model: str, *, cache: Any = None, **kw: Any) -> Any:
        fakes[Path(cache).name] = ScriptedLM(
            cc.hosted_answer, cache=cache, logprobs=cc.hosted_logprobs
        )
        return fakes[Path(cache).name].lm

    monkeypatch.setattr(cc, "make_lm", fake_make_lm)
    return fakes


def test_main_writes_the_schema_with_scripted_models(
    items, tmp_path: Path, monkeypatch, capsys
) -> None:
    fakes = scripted_lms(monkeypatch)
    out = tmp_path / "cc.json"
    args = ["--n-items", "10", "--budget", "3", "--hosted-time-scale", "0", "--no-progress"]
    assert cc.main([*args, "--parts", "estimate", "--out", str(out)]) == 0
    assert set(fakes) == {"estimate"}  # estimate alone runs the new compile once
    assert (
        cc.main([*args, "--parts", "side_by_side,estimate,estimate_hosted", "--out", str(out)]) == 0
    )
    assert set(fakes) == {"estimate", "old", "new"}  # ... and reuses side_by_side's run
    data = json.loads(out.read_text())
    side = data["side_by_side"]
    assert {"n_items", "old_seconds", "new_seconds", "same_ratings"} <= set(side)
    assert side["n_items"] == 10 and side["settings"]["budget"] == 3
    for key in ("estimate", "estimate_hosted"):
        assert {"calls_error", "tokens_error", "seconds_error"} <= set(data[key])
    assert data["estimate"]["actual"]["calls"] == side["runs"]["new"]["calls"]
    assert data["full"]["measured"] is False and data["full"]["n_valid"] == 100
    assert data["demo_seconds"] is None
    printed = capsys.readouterr().out
    assert "new/old time" in printed and "| model | figure |" in printed


def test_the_demo_runs_as_the_readme_says(tmp_path: Path, monkeypatch) -> None:
    seen: dict[str, Any] = {}

    def fake_run(command: list[str], **kw: Any) -> Any:
        seen.update(command=command, **kw)
        out_dir = Path(command[command.index("--out-dir") + 1])
        out_dir.mkdir(parents=True)
        summary = {
            "kept_baseline": True,
            "chosen_strategy": {"cot": "prefix"},
            "test": {"gain": 0.0, "gain_ci": [-0.1, 0.1]},
            "n_valid": 41,
            "n_test": 100,
            "seconds": 1.0,
        }
        (out_dir / "summary.json").write_text(json.dumps(summary))
        stdout = "judgeopt demo: ...\n\nsearch: 6 strategies\nchosen: the MT-Bench baseline (x)\n"
        return subprocess.CompletedProcess(command, 0, stdout, "")

    monkeypatch.setattr(cc.subprocess, "run", fake_run)
    demo = cc.run_demo("local")
    assert seen["command"][1:5] == ["-m", "judgeopt", "demo", "--no-progress"]
    assert "--model" not in seen["command"]
    env = seen["env"]
    assert env["JUDGEOPT_THREADS"] == "2" and not Path(env["JUDGEOPT_CACHE_DIR"]).exists()
    assert env["PYTHONPATH"].split(":")[0] == str(cc.ROOT / "src")
    assert demo["kept_baseline"] is True and demo["gain"] == 0.0 and demo["target_met"]
    assert demo["result_lines"] == ["search: 6 strategies", "chosen: the MT-Bench baseline (x)"]
    assert "--model" in cc.run_demo("local:qwen2.5-coder-0.5b")["command"]


def test_rate_first_candidates_are_rechecked_as_the_old_compile_judged(
    task, items, tmp_path: Path
) -> None:
    """With ``candidates = "rate_first"`` the new compile judges rating-first strategies the
    old one never judged; each is judged again as before (explanation written, no stop) and
    the ratings compared on it."""
    fakes: dict[str, ScriptedLM] = {}
    part = cc.side_by_side(
        _maker(tmp_path, fakes),
        task,
        ASPECT,
        items,
        preset=_preset(),
        budget=9,
        seed=0,
        progress=False,
        new_overrides={"candidates": "rate_first"},
    )
    new_path = [p["strategy"] for p in part["runs"]["new"]["path"]]
    assert sum(not cc.rates_first(s) for s in new_path) <= 1  # the baseline only
    assert part["rechecked_strategies"] > 0 and "recheck" in fakes
    assert all("stop" not in r for r in fakes["recheck"].judge_requests)
    c = part["comparison"]
    assert c["strategies_compared"] >= part["rechecked_strategies"]
    assert part["same_ratings"] is True and c["items_compared"] >= len(items)
    assert part["new_overrides"] == {"candidates": "rate_first"}


def test_recheck_runs_as_its_own_part_on_the_saved_runs(items, tmp_path: Path, monkeypatch) -> None:
    """side_by_side writes its two timed runs first; the untimed recheck reads them back from
    the JSON, judges the missing rating-first strategies as before and completes the part."""
    fakes = scripted_lms(monkeypatch)
    out = tmp_path / "cc.json"
    args = ["--n-items", "10", "--budget", "9", "--no-progress", "--out", str(out)]
    args += ["--new-candidates", "rate_first"]
    with pytest.raises(ValueError, match="no measured side_by_side"):
        cc.main([*args, "--parts", "recheck"])
    assert cc.main([*args, "--parts", "side_by_side"]) == 0
    before = json.loads(out.read_text())["side_by_side"]
    assert before["rechecked_strategies"] == 0 and "recheck" not in fakes
    assert cc.main([*args, "--parts", "recheck"]) == 0
    assert cc.main([*args, "--hosted-time-scale", "0", "--parts", "estimate"]) == 0
    assert "estimate" not in fakes  # the saved new run is the estimate's
    assert (
        cc.main([*args, "--hosted-time-scale", "0", "--parts", "estimate", "--estimate-fresh"]) == 0
    )
    assert "estimate" in fakes  # ... unless asked to compile anew
    after = json.loads(out.read_text())["side_by_side"]
    assert after["rechecked_strategies"] > 0 and "recheck" in fakes
    assert after["old_seconds"] == before["old_seconds"] and after["settings"]
    assert after["same_ratings"] is True
    assert after["comparison"]["items_compared"] > before["comparison"]["items_compared"]
