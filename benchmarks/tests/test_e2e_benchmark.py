"""benchmarks/e2e.py and benchmarks/rescore_e2e.py: the end-to-end benchmark's plumbing with a
scripted LM, its shipped ensemble, SIGTERM and resume, and the rescore of committed results."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _scripts import SCRIPTS, load_script

from _selection_scripts import respond_with, sigterm_lm, write_preset
from judgeopt.data import load_records
from judgeopt.testing import ScriptedLM


def _e2e_script(name: str, tmp_path: Path) -> tuple[Any, Path]:
    """benchmarks/e2e.py loaded as module ``name``, and a small HPSS preset (``SPACE``,
    k = 2, rule ``confirm``: its finalists and confirmation are what the report replays)
    written under ``tmp_path`` for its ``--optimizer``."""
    return load_script("e2e", name), write_preset(tmp_path, rule="confirm")


def _scripted_lms(monkeypatch: Any, e2e: Any, shared_data: Path, good: str) -> list[ScriptedLM]:
    """Every LM ``e2e`` makes is a :class:`ScriptedLM` answering Topical-Chat naturalness
    with :func:`respond_with` (``good``); the returned list collects them."""
    full = load_records(shared_data / "topical_chat" / "full.jsonl")
    fakes: list[ScriptedLM] = []

    def fake_make_lm(model: str, **kw: Any) -> Any:
        fakes.append(ScriptedLM(respond_with(full, good)))
        return fakes[-1].lm

    monkeypatch.setattr(e2e, "make_lm", fake_make_lm)
    return fakes


def _e2e_args(preset: Path, out_dir: Path, out: Path) -> list[str]:
    """A small e2e run of Topical-Chat naturalness (budget 5, 60 / 30 items, ensemble 2)."""
    return [
        "--pairs",
        "topical_chat:naturalness",
        "--budget",
        "5",
        "--n-valid",
        "60",
        "--n-test",
        "30",
        "--ensemble",
        "2",
        "--optimizer",
        str(preset),
        "--out-dir",
        str(out_dir),
        "--json",
        str(out),
        "--no-progress",
    ]


def test_e2e_benchmark_plumbing_with_a_scripted_lm(
    shared_data: Path, tmp_path: Path, monkeypatch
) -> None:
    """benchmarks/e2e.py end to end with a scripted LM in place of the local model: the
    split, the compile, the test comparisons, the JSON schema and the resume."""
    e2e, preset = _e2e_script("e2e_benchmark", tmp_path)
    fakes = _scripted_lms(monkeypatch, e2e, shared_data, "scale10")
    out = tmp_path / "e2e.json"
    args = _e2e_args(preset, tmp_path / "run", out)
    assert e2e.main(args) == 0
    data = json.loads(out.read_text())
    (row,) = data["pairs"]
    for key in (
        "task",
        "aspect",
        "model",
        "n_valid",
        "n_test",
        "baseline",
        "chosen",
        "ensemble",
        "gain",
        "gain_ci",
    ):
        assert key in row
    assert row["n_valid"] >= 60 and row["n_test"] >= 30 and row["n_valid"] % 6 == 0
    assert row["gain"] == pytest.approx(row["chosen"] - row["baseline"])
    assert row["gain_ci"][0] <= row["gain"] <= row["gain_ci"][1]
    assert row["chosen_strategy"]["scale"] == 10 and row["ensemble"] is not None
    assert data["mean_relative_gain"] == pytest.approx(row["gain"] / abs(row["baseline"]))
    assert data["relative_mean_gain"] == pytest.approx(data["mean_relative_gain"])
    one = data["mean_gain_intervals"]["chosen"]
    assert one["mean"] == pytest.approx(row["gain"]) and one["n_pairs"] == 1
    assert one["ci_pairs"] is None  # one pair says nothing about other tasks
    two = e2e.across_pairs([0.1, 0.3, None], [[0.0, 0.196], [0.2, 0.396], None])
    assert two["mean"] == pytest.approx(0.2) and two["n_pairs"] == 2
    assert two["ci_items"] == pytest.approx(
        [0.2 - 1.96 * math.sqrt(0.005) / 2, 0.2 + 1.96 * math.sqrt(0.005) / 2]
    )
    assert two["ci_pairs"] == pytest.approx([0.2 - 12.706 * 0.1, 0.2 + 12.706 * 0.1], abs=1e-3)
    assert (tmp_path / "run" / "topical_chat_naturalness" / "ensemble.json").is_file()
    # Validation and test are disjoint whole groups.
    full = load_records(shared_data / "topical_chat" / "full.jsonl")
    valid, test = e2e.split_groups(full, 60, 30, 0)
    assert not {r.group_id for r in valid} & {r.group_id for r in test}
    # A second run with the same settings keeps the finished pair: no judge call.
    assert e2e.main(args) == 0
    assert len(fakes[-1].judge_requests) == 0
    # Every finalist judged on test (the ensemble's members) is reported against the
    # baseline, ranked by its search score (rank 1: the paper's rule's pick).
    fins = row["finalists_on_test"]
    members = [json.dumps(m, sort_keys=True) for m in row["ensemble_members"]]
    assert {json.dumps(f["strategy"], sort_keys=True) for f in fins} >= {
        m for m in members if m != json.dumps(row["baseline_strategy"], sort_keys=True)
    }
    assert len(fins) >= 1
    assert [f["search_rank"] for f in fins] == sorted(f["search_rank"] for f in fins)
    for fin in fins:
        assert fin["test_gain"] == pytest.approx(fin["test"] - row["baseline"])
        assert fin["test_gain_ci"][0] <= fin["test_gain"] <= fin["test_gain_ci"][1]
    # The other rules, recomputed from the stored judgements: the redone confirmation split
    # reproduces the compile's recorded gains exactly, and the rules' picks are looked up.
    rules = row["rules_on_test"]
    assert rules["check_max_abs_diff"] == pytest.approx(0.0, abs=1e-12)
    by_key = {f["key"]: f for f in fins}
    for name in ("best_search_score", "veto"):
        pick = rules[name]
        if pick["returns"] == "baseline":
            assert pick["test_gain"] == 0.0 and pick["test_gain_ci"] == [0.0, 0.0]
        else:
            assert by_key[pick["returns"]]["search_rank"] == 1
            assert pick["test_gain"] == by_key[pick["returns"]]["test_gain"]
    v = rules["veto"]
    assert (v["returns"] == "baseline") == (
        v["upper_bound"] < 0 or rules["best_search_score"]["returns"] == "baseline"
    )
    assert data["mean_gain_intervals"]["veto"]["mean"] == pytest.approx(v["test_gain"])
    # The pre-registered criteria, mechanically: margin over chosen clear of zero on the
    # items, and no pair significantly worse than the baseline.
    for name, margin in (
        ("ensemble", "ensemble_minus_chosen"),
        ("veto", "veto_minus_chosen"),
        ("best_search_score", "best_search_score_minus_chosen"),
    ):
        crit, m = data["criteria"][name], data["mean_gain_intervals"][margin]
        assert crit["margin_over_chosen"] == m["mean"] and crit["pairs_missing"] == []
        assert crit["met"] == (
            m["ci_items"][0] > 0 and not crit["pairs_significantly_worse_than_baseline"]
        )
    for name in ("best_search_score", "veto"):
        pick = rules[name]
        same = (
            row["chosen_is_baseline"]
            if pick["returns"] == "baseline"
            else by_key[pick["returns"]]["strategy"] == row["chosen_strategy"]
        )
        if same:
            assert pick["minus_chosen"] == 0.0 and pick["minus_chosen_ci"] == [0.0, 0.0]
        else:  # the two judges' gains over the same baseline differ by the margin
            assert pick["minus_chosen"] == pytest.approx(pick["test_gain"] - row["gain"])
    # --report-only completes a row written by an older version (no finalists) from the
    # stored test items, without building an LM.
    for key in ("finalists_on_test", "baseline_strategy", "rules_on_test"):
        del data["pairs"][0][key]
    out.write_text(json.dumps(data))
    n_lms = len(fakes)
    assert e2e.main([*args, "--report-only"]) == 0
    assert len(fakes) == n_lms
    again = json.loads(out.read_text())
    assert again["pairs"][0]["finalists_on_test"] == fins
    assert again["pairs"][0]["rules_on_test"] == rules
    assert again["mean_relative_gain_best_search_score"] == pytest.approx(
        rules["best_search_score"]["test_gain"] / abs(row["baseline"])
    )
    # An ensemble only this script asked for (--ensemble) is reported, not shipped.
    assert row["shipped"] == "chosen" and row["shipped_gain"] == row["gain"]
    assert data["mean_gain_shipped"] == pytest.approx(row["gain"])


def test_e2e_ships_the_presets_guarded_ensemble(
    shared_data: Path, tmp_path: Path, monkeypatch
) -> None:
    """A preset that builds an ensemble (the bank's ``anchored+guard`` as
    ``selection_settings`` writes it) ships it: the row's ``shipped_*`` fields are the
    ensemble's, and the guard's record is kept."""
    e2e, _ = _e2e_script("e2e_benchmark_shipped", tmp_path)
    preset = write_preset(tmp_path)
    preset.write_text(
        "ensemble = 2\nensemble_anchor = 0.4\n"
        + preset.read_text()
        + '[selection]\nrule = "best"\nguard = true\n'
    )
    full = load_records(shared_data / "topical_chat" / "full.jsonl")
    monkeypatch.setattr(
        e2e, "make_lm", lambda model, **kw: ScriptedLM(respond_with(full, "scale10")).lm
    )
    out = tmp_path / "shipped.json"
    args = _e2e_args(preset, tmp_path / "run", out)
    i = args.index("--ensemble")
    assert e2e.main(args[:i] + args[i + 2 :]) == 0
    data = json.loads(out.read_text())
    (row,) = data["pairs"]
    assert row["shipped"] == "ensemble" and row["selection"]["guard"]["passed"] is True
    assert row["shipped_gain"] == row["ensemble_gain"] > 0
    assert row["shipped_gain_ci"] == row["ensemble_gain_ci"]
    assert data["mean_gain_shipped"] == pytest.approx(row["ensemble_gain"])
    assert data["pairs_significantly_worse_shipped"] == 0


def test_e2e_judges_the_strategies_the_rule_passed_over(
    shared_data: Path, tmp_path: Path, monkeypatch
) -> None:
    """Under ``lcb`` with an informative baseline and noise elsewhere, the compile keeps the
    baseline; ``--judge-passed-over 2`` judges the two best other search scores on the test
    items and reports them against the baseline and the chosen judge. A finished pair is
    not judged again, and ``--report-only`` rebuilds the report from the stored items."""
    e2e, _ = _e2e_script("e2e_benchmark_passed_over", tmp_path)
    preset = write_preset(tmp_path, rule="lcb")
    fakes = _scripted_lms(monkeypatch, e2e, shared_data, "baseline")
    out = tmp_path / "passed.json"
    args = _e2e_args(preset, tmp_path / "run", out)
    i = args.index("--ensemble")
    args = [*args[:i], *args[i + 2 :], "--judge-passed-over", "2"]
    assert e2e.main(args) == 0
    (row,) = json.loads(out.read_text())["pairs"]
    assert row["selection"]["rule"] == "lcb" and row["chosen_is_baseline"]
    passed = row["passed_over_on_test"]
    assert len(passed) == 2 and row["calls_this_run"]["passed_over"] == 2 * row["n_test"]
    trace = {t["number"]: t for t in row["search"]["trace"]}
    scores = sorted(
        (t["score"] for t in trace.values() if t["strategy"] != row["baseline_strategy"]),
        reverse=True,
    )
    assert [p["search_score"] for p in passed] == pytest.approx(scores[:2])
    for p in passed:
        assert p["strategy"] not in (row["baseline_strategy"], row["chosen_strategy"])
        assert trace[int(p["key"][1:]) - 1]["strategy"] == p["strategy"]
        assert p["test_gain"] == pytest.approx(p["test"] - row["baseline"])
        assert p["test_gain_ci"][0] <= p["test_gain"] <= p["test_gain_ci"][1]
        # The chosen judge is the baseline here: the two margins are the same numbers.
        assert p["minus_chosen"] == p["test_gain"]
        assert p["test_gain"] < 0  # hash noise against the informative baseline
    data = json.loads(out.read_text())
    best = data["mean_gain_intervals"]["passed_over_best"]
    assert best["mean"] == pytest.approx(passed[0]["test_gain"]) and best["n_pairs"] == 1
    assert "Strategies the compile passed over" in e2e.e2e_table([row])
    # Finished: the same command makes no call; the report comes back from stored items.
    assert e2e.main(args) == 0 and len(fakes[-1].judge_requests) == 0
    del data["pairs"][0]["passed_over_on_test"]
    out.write_text(json.dumps(data))
    assert e2e.main([*args, "--report-only"]) == 0
    assert json.loads(out.read_text())["pairs"][0]["passed_over_on_test"] == passed


def test_passed_over_names_the_best_unshipped_strategies() -> None:
    """:func:`judgeopt_lab.passed_over`: best search score first, the chosen judge, the
    baseline, unscored trials and repeats left out; ``k = 0`` names none; k < 0 is refused."""
    from judgeopt_lab import passed_over

    def s(scale: int, cot: bool = False) -> dict[str, Any]:
        return {"scale": scale, "cot": cot}

    row = {
        "baseline_strategy": s(10),
        "chosen_strategy": s(5),
        "search": {
            "trace": [
                {"number": 0, "score": 0.30, "strategy": s(10)},
                {"number": 1, "score": 0.50, "strategy": s(5)},
                {"number": 2, "score": 0.40, "strategy": s(3)},
                {"number": 3, "score": None, "strategy": s(7)},
                {"number": 4, "score": 0.45, "strategy": s(3, True)},
                {"number": 5, "score": 0.40, "strategy": s(3)},
                {"number": 6, "score": 0.10, "strategy": s(2)},
            ]
        },
    }
    names = [(t["key"], t["search_rank"]) for t in passed_over(row, 3)]
    assert names == [("#5", 2), ("#3", 3), ("#7", 6)]
    assert passed_over(row, 0) == [] and len(passed_over(row, 99)) == 3
    # A shipped ensemble's members were not passed over.
    shipped = {**row, "shipped": "ensemble", "ensemble_members": [s(5), s(3, True)]}
    assert [t["key"] for t in passed_over(shipped, 3)] == ["#3", "#7"]
    with pytest.raises(ValueError, match="k .* must be >= 0, got -1"):
        passed_over(row, -1)


def test_e2e_benchmark_stops_on_sigterm_and_resumes(
    shared_data: Path, tmp_path: Path, monkeypatch, capsys
) -> None:
    """SIGTERM (how a ``nohup ... &`` run is stopped) ends benchmarks/e2e.py with exit code
    130 and a line saying how to resume; the same command then finishes the pair without
    repeating a finished judge call."""
    import signal

    e2e, preset = _e2e_script("e2e_benchmark_sigterm", tmp_path)
    full = load_records(shared_data / "topical_chat" / "full.jsonl")
    state, fakes, fake_make_lm = sigterm_lm(respond_with(full, "scale10"), keep_cache=True)

    monkeypatch.setattr(e2e, "make_lm", fake_make_lm)

    def args(name: str) -> list[str]:
        return _e2e_args(preset, tmp_path / name, tmp_path / f"{name}.json")

    assert e2e.main(args("ref")) == 0
    n_ref = len(fakes[-1].judge_requests)
    state.update(n=0, kill_at=n_ref // 2)
    capsys.readouterr()
    assert e2e.main(args("run")) == 130  # main() sets up logging to stderr
    assert "stopped after 0 finished pair(s); run the same command to resume" in (
        capsys.readouterr().err
    )
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert not (tmp_path / "run.json").exists()
    first = len(fakes[-1].judge_requests)
    assert 0 < first < n_ref
    state.update(n=0, kill_at=0)
    assert e2e.main(args("run")) == 0
    # At most the calls in flight when the signal came are made again.
    assert first + len(fakes[-1].judge_requests) <= n_ref + 8
    ref, run = (
        json.loads((tmp_path / f"{n}.json").read_text())["pairs"][0] for n in ("ref", "run")
    )
    assert run["chosen_strategy"] == ref["chosen_strategy"]
    assert run["baseline"] == ref["baseline"] and run["chosen"] == ref["chosen"]


def test_rescore_of_the_committed_e2e_pairs_reproduces_their_search_scores(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """benchmarks/rescore_e2e.py on the committed end-to-end results, without a model: the
    old rule recomputed from the stored judgements gives every recorded search score, the
    new finalists are eligible and ranked by the new score, and a rule whose picks were
    never judged says so instead of guessing."""
    mod = load_script("rescore_e2e")
    out = tmp_path / "rescore.json"
    assert mod.main(["--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["pairs"]) >= 6
    for row in data["pairs"]:
        assert row["check_max_abs_diff"] == pytest.approx(0.0, abs=1e-12), row["task"]
        now = row["finalists_now"]
        assert [f["new"] for f in now] == sorted((f["new"] for f in now), reverse=True)
        assert all(f["unrated"] / f["n"] <= data["max_parse_failures"] for f in now)
        if row["level"] == "dataset":  # only group-level scores changed
            assert all(f["old"] == f["new"] for f in now)
        for rule in ("confirm", "veto", "best_search_score"):
            pick = row["rules_now"][rule]
            assert "error" in pick or "returns" in pick
            if pick.get("returns") == "baseline":
                assert pick["test_gain"] == 0.0
    relevance = next(r for r in data["pairs"] if r["aspect"] == "relevance")
    # The six strategies tied at 0.514 on one article each drop out of the finalists.
    assert relevance["changed"] and all(
        f["old"] == pytest.approx(0.514, abs=1e-3) for f in relevance["finalists_before"]
    )
    assert all(f["new"] < 0.4 for f in relevance["finalists_now"])
    # Strategies are numbered from 1, as the compile's summary numbers them (the JSON says
    # so), in the JSON and in the printed tables; the committed JSON is this output.
    assert data["numbering"].startswith("strategies are numbered from 1")
    keys = [f["key"] for r in data["pairs"] for f in r["finalists_before"] + r["finalists_now"]]
    assert min(int(k[1:]) for k in keys) >= 1 and max(int(k[1:]) for k in keys) == 20  # of 20
    assert relevance["rules_now"]["confirm"]["returns"] == "#19"  # docs/benchmarks.md, 11
    assert "| summeval/relevance | confirm | #19 | +0.167" in capsys.readouterr().out
    committed = json.loads((SCRIPTS / "results" / "rescore_e2e.json").read_text())
    data.pop("provenance")  # which commit and command made it: not the result
    committed.pop("provenance", None)
    assert data == committed
    # The summary is each rule's mean over the pairs whose pick was judged on test, with the
    # end-to-end summary's two intervals around it.
    for rule in ("confirm", "veto", "best_search_score"):
        gains = [
            r["rules_now"][rule]["test_gain"]
            for r in data["pairs"]
            if r["rules_now"][rule].get("test_gain") is not None
        ]
        mean = data["summary"][rule]["all"]
        assert mean["n_pairs"] == len(gains)
        assert mean["mean"] == pytest.approx(float(np.mean(gains)))
        assert mean["ci_items"][0] <= mean["mean"] <= mean["ci_items"][1]
        assert mean["ci_pairs"][0] <= mean["mean"] <= mean["ci_pairs"][1]


def test_the_e2e_report_replays_confirm_at_the_level_the_compile_would_use(tmp_path: Path) -> None:
    """The e2e report replays confirm and veto at the level ``--selection confirm`` would use:
    the rule's own level unless the preset stated one."""
    from judgeopt.teleprompt import load_optimizer
    from judgeopt_lab import confirmation_kwargs

    auto = load_optimizer("auto")
    preset = tmp_path / "stated.toml"
    preset.write_text('search = "auto"\n[selection]\nrule = "lcb"\nconfidence = 0.9\nseed = 3\n')
    stated = load_optimizer(str(preset))
    assert confirmation_kwargs(auto.selection, None)["confidence"] == 0.8
    assert confirmation_kwargs(stated.selection, ["g"])["confidence"] == 0.9


def test_cost_report_reads_the_committed_compile(tmp_path: Path) -> None:
    """Each judge's cost per item on the pre-registered SummEval consistency compile (its
    committed journal): the baseline and every single judge one call, the shipped stack one
    per member, its seconds and tokens the sum of its members'."""
    e2e, _ = _e2e_script("e2e_cost", tmp_path)
    root = Path(__file__).resolve().parents[1]
    rows = json.loads((root / "results" / "e2e_prereg.json").read_text())["pairs"]
    row = next(r for r in rows if (r["task"], r["aspect"]) == ("summeval", "consistency"))
    pair_dir = root / "runs" / "e2e_prereg" / "summeval_consistency"
    cost = e2e.cost_report(pair_dir, row)
    assert cost["baseline"]["calls"] == cost["chosen"]["calls"] == 1
    assert row["shipped"] == "ensemble" and cost["shipped"]["calls"] == 6
    members = [
        e2e.cost_report(pair_dir, {**row, "shipped": "chosen", "chosen_strategy": m})
        for m in row["ensemble_members"]
    ]
    assert cost["shipped"]["seconds"] == pytest.approx(
        sum(m["chosen"]["seconds"] for m in members), abs=0.01
    )
    # The baseline explains before it rates; every other member stops at its rating.
    assert cost["baseline"]["completion_tokens"] > 10 * cost["chosen"]["completion_tokens"]
    assert cost["baseline"]["seconds"] > cost["chosen"]["seconds"] > 0
    assert [p["key"] for p in cost["passed_over"]] == [p["key"] for p in row["passed_over_on_test"]]
    assert e2e.cost_report(tmp_path, row) is None  # no journal: nothing to read


def test_rated_report_leaves_the_baselines_unparsed_items_out(tmp_path: Path) -> None:
    """The gains again on the test items the baseline rated, on the pre-registered SummEval
    consistency compile: every judge scored on the same subset (the baseline's own score
    there differs from its headline, which imputes its unparsed answers), and nothing
    reported when a judge's test items are not all stored."""
    e2e, _ = _e2e_script("e2e_rated", tmp_path)
    root = Path(__file__).resolve().parents[1]
    rows = json.loads((root / "results" / "e2e_prereg.json").read_text())["pairs"]
    row = next(r for r in rows if (r["task"], r["aspect"]) == ("summeval", "consistency"))
    _, test = e2e.split_groups(
        load_records(e2e.DATA / "summeval" / "full.jsonl"),
        row["n_valid"],
        row["n_test"],
        0,
        per_group=e2e.PER_GROUP.get("summeval"),
    )
    pair_dir = root / "runs" / "e2e_prereg" / "summeval_consistency"
    rated = e2e.rated_report(pair_dir, test, row, 0)
    unparsed = row["test_results"]["baseline"]["parse_failures"]
    assert unparsed > 0 and rated["n_items"] == row["n_test"] - unparsed
    assert rated["baseline"] != pytest.approx(row["baseline"])
    for name in ("chosen", "ensemble"):
        lo, hi = rated[name]["gain_ci"]
        assert lo < rated[name]["gain"] < hi
        assert rated[name]["score"] - rated["baseline"] == pytest.approx(rated[name]["gain"])
    assert [p["key"] for p in rated["passed_over"]] == [
        p["key"] for p in row["passed_over_on_test"]
    ]
    assert all(p["gain_ci"][0] < p["gain"] < p["gain_ci"][1] for p in rated["passed_over"])
    # A row whose chosen judge was never judged on test: nothing to report.
    other = {**row, "chosen_strategy": {**row["chosen_strategy"], "scale": 7}}
    assert e2e.rated_report(pair_dir, test, other, 0) is None
    assert e2e.rated_report(tmp_path, test, row, 0) is None
