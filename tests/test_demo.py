"""``judgeopt demo``: its split draws on the e2e benchmark's parts; a real (small) run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judgeopt.cli import main
from judgeopt.data import load_records, split_holdout
from judgeopt.demo import DEMO_PAIR, demo_split, find_shared_data

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _groups(records: list) -> set[str]:  # type: ignore[type-arg]
    return {r.group_id or r.id for r in records}


@pytest.mark.parametrize("task", ["sfres", "topical_chat", "summeval"])
def test_demo_items_come_from_the_benchmarks_parts(task: str) -> None:
    valid, test = demo_split(task, 40, 100, DATA)
    e2e_valid, e2e_test = split_holdout(
        load_records(DATA / task / "full.jsonl"),
        100,
        200,
        seed=0,
        per_group=8 if task == "summeval" else None,
    )
    assert len(valid) >= 40 and len(test) >= 100
    # The demo tests on the benchmark's test items only: never on items that chose its setup.
    assert {r.id for r in test} <= {r.id for r in e2e_test}
    assert {r.id for r in valid} <= {r.id for r in e2e_valid}
    assert not _groups(valid) & _groups(test)
    # Whole groups: a group in a part has all its (kept) members there.
    for part, full in ((valid, e2e_valid), (test, e2e_test)):
        kept = _groups(part)
        assert {r.id for r in full if (r.group_id or r.id) in kept} == {r.id for r in part}


def test_demo_split_is_the_same_every_time() -> None:
    a = demo_split(*DEMO_PAIR[:1], 40, 100, DATA)
    b = demo_split(*DEMO_PAIR[:1], 40, 100, DATA)
    assert [r.id for r in a[0]] == [r.id for r in b[0]]
    assert [r.id for r in a[1]] == [r.id for r in b[1]]


def test_demo_refuses_more_items_than_the_benchmarks_parts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ValueError, match="n_test at most 200"):
        demo_split("sfres", 40, 500, DATA)
    assert main(["demo", "--n-valid", "150", "--no-progress"]) == 2
    assert "n_valid must be at most 100" in capsys.readouterr().err


def test_demo_task_without_its_aspect_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--task", "topical_chat", "--no-progress"]) == 2
    assert "--task needs --aspect" in capsys.readouterr().err


def test_split_holdout_errors_name_the_argument() -> None:
    records = load_records(DATA / "sfres" / "full.jsonl")
    with pytest.raises(ValueError, match="n_valid must be a positive int"):
        split_holdout(records, 0, 10, seed=0)
    with pytest.raises(ValueError, match="not enough records"):
        split_holdout(records[:50], 40, 100, seed=0)


def test_find_shared_data_finds_the_checkout_neighbour() -> None:
    assert (find_shared_data() / "sfres" / "full.jsonl").is_file()


@pytest.mark.slow
def test_demo_runs_end_to_end_with_a_real_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    # 6 items each (whole groups, so a few more): the default rule (lcb) compares every
    # strategy with the baseline on them and keeps the baseline unless a gain is shown; the
    # baseline writes explanations, so this takes about a minute with the 0.5B model.
    code = main(
        [
            "demo",
            "--model",
            "local:qwen2.5-coder-0.5b",
            "--n-valid",
            "6",
            "--n-test",
            "6",
            "--budget",
            "2",
            "--out-dir",
            str(out),
            "--no-progress",
        ]
    )
    text = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    # Exit 1 exactly when the compile reports a problem (with 6 items the 0.5B model may
    # leave more than a quarter of the baseline's answers without a rating); the judge and
    # the comparison are written either way.
    assert code == (1 if summary["problems"] else 0), text
    assert ("problem:" in text) == bool(summary["problems"])
    assert summary["task"] == "sfres" and summary["n_test"] >= 6
    test = summary["test"]
    assert test["n"] == summary["n_test"]
    assert test["baseline"]["label"] == "baseline" and len(test["gain_ci"]) == 2
    assert "held-out test" in text and "gain" in text
    assert summary["selection"]["rule"] == "lcb"
    exported = json.loads((out / "judge.json").read_text())
    assert exported["comparisons"]["test"]["n"] == summary["n_test"]


def test_demo_leaves_explanations_to_the_baseline(tmp_path: Path) -> None:
    """The demo's forbidden combinations: every strategy the search evaluates, except the
    baseline, rates without an explanation (the speed of the demo rests on it)."""
    from judgeopt.demo import explanations_only_in_baseline
    from judgeopt.judge import JudgeProgram, baseline_strategy, load_task
    from judgeopt.teleprompt import JudgeSearch, load_optimizer
    from judgeopt.testing import ScriptedLM

    spec = load_task("sfres")
    base = baseline_strategy(spec)
    preset = load_optimizer("quick")
    space = dict(preset.space)
    forbid = explanations_only_in_baseline(spec, space)
    assert base["cot"] != "none" and forbid
    assert all(a["cot"] == base["cot"] and len(a) == 2 for a in forbid)
    valid, _ = demo_split("sfres", 40, 100, DATA)
    fake = ScriptedLM(lambda messages: f"Rating: [[{1 + len(str(messages[-1]['content'])) % 5}]]")
    opt = JudgeSearch.from_config(
        preset,
        budget=6,
        space=space,
        forbid=forbid,
        progress=False,
        checkpoint_dir=tmp_path / "ckpt",
    )
    judge = opt.compile(JudgeProgram(spec, "naturalness", lm=fake.lm), trainset=valid)
    trace = judge.search_result.evaluation_summaries
    assert len(trace) == 6 and trace[0]["strategy"] == base.as_dict()
    assert all(t["strategy"]["cot"] == "none" for t in trace[1:])
    # A cot value the baseline does not use is forbidden outright.
    assert {"cot": "suffix"} in explanations_only_in_baseline(
        spec, {**space, "cot": ["none", "prefix", "suffix"]}
    )
    # The checkpoint records the constraint: the same run without it does not resume it.
    plain = JudgeSearch.from_config(
        preset, budget=6, space=space, progress=False, checkpoint_dir=tmp_path / "ckpt"
    )
    with pytest.raises(ValueError, match="forbid"):
        plain.compile(JudgeProgram(spec, "naturalness", lm=fake.lm), trainset=valid)
