"""Racing: the pure keep/drop rule, the item order, and the teleprompter's control flow.

The control-flow tests use a scripted LM (judgeopt.testing.ScriptedLM) whose ratings follow
the human scores for scale-10 strategies and are noise otherwise, so racing has something
to drop; they check bookkeeping (calls, trace, resume), never that a judge works.
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from judgeopt.data import load_records
from judgeopt.judge import JudgeProgram, load_task
from judgeopt.racing import (
    RacingConfig,
    checkpoint_sizes,
    race_decision,
    race_order,
    threshold,
    unit_keys,
    upper_bound,
)
from judgeopt.teleprompt import HPSS, JudgeSearch, OptimizerConfig, load_optimizer
from judgeopt.testing import ScriptedLM

ASPECT = "naturalness"
Z95 = RacingConfig().z


# The pure rule ------------------------------------------------------------------------------
def test_bound_is_the_estimate_at_the_full_set_and_narrows_with_items() -> None:
    assert upper_bound(0.3, 180, 180, metric="spearman", z=Z95) == 0.3
    bounds = [upper_bound(0.3, m, 180, metric="spearman", z=Z95) for m in (20, 45, 90, 135)]
    assert all(b is not None and b > 0.3 for b in bounds)
    assert bounds == sorted(bounds, reverse=True)
    # Kendall's tau is smaller than Spearman's rho for the same data; so is its spread.
    assert upper_bound(0.2, 45, 180, metric="kendall", z=Z95) < upper_bound(
        0.2, 45, 180, metric="spearman", z=Z95
    )
    assert upper_bound(0.99999, 45, 180, metric="pearson", z=Z95) == 1.0
    assert -1.0 < upper_bound(-1.0, 45, 180, metric="pearson", z=Z95) < -0.99
    assert upper_bound(0.1, 4, 180, metric="spearman", z=Z95) is None  # too few items
    acc = upper_bound(1.0, 20, 100, metric="accuracy", z=Z95)
    assert acc == 1.0
    assert 0.5 < upper_bound(0.5, 20, 100, metric="accuracy", z=Z95) < 0.75
    assert upper_bound(0.3, 5, 20, metric="spearman", z=Z95, level="group") is None
    g = upper_bound(0.3, 5, 20, metric="spearman", z=Z95, level="group", group_sd=0.2)
    assert g == pytest.approx(0.3 + Z95 * 0.2 * math.sqrt(1 / 5 - 1 / 20))


def test_race_decision_keep_and_drop() -> None:
    kw = {"metric": "spearman", "z": Z95}
    assert race_decision(0.05, 45, 180, 0.35, **kw).drop
    assert not race_decision(0.25, 45, 180, 0.35, **kw).drop
    assert not race_decision(0.05, 45, 180, None, **kw).drop  # population not full yet
    assert not race_decision(None, 45, 180, 0.35, **kw).drop  # no estimate: keep judging
    assert not race_decision(-0.9, 180, 180, 0.35, **kw).drop  # the full set is never cut
    d = race_decision(0.05, 45, 180, 0.35, **kw)
    assert d.bound == upper_bound(0.05, 45, 180, **kw)


def test_threshold_is_the_top_th_best_finite_score() -> None:
    assert threshold([0.1, float("nan"), 0.5, 0.3], 2) == 0.3
    assert threshold([0.1, float("nan")], 2) is None
    assert threshold([], 1) is None


def test_bound_covers_the_full_set_value_at_its_level() -> None:
    """Monte Carlo: the one-sided 95 % bound from 45 of 180 items misses the full-set
    Spearman about 5 % of the time (Fisher z with the finite-population correction)."""
    rng = np.random.default_rng(1)
    n, m, reps, misses = 180, 45, 600, 0
    cov = [[1.0, 0.4], [0.4, 1.0]]
    for _ in range(reps):
        h, p = rng.multivariate_normal([0, 0], cov, size=n).T
        p = np.round(p * 1.5)  # judge-like ties
        full = stats.spearmanr(h, p).statistic
        part = stats.spearmanr(h[:m], p[:m]).statistic
        misses += upper_bound(part, m, n, metric="spearman", z=Z95) < full
    assert 0.01 < misses / reps < 0.09, misses / reps


def test_checkpoint_sizes() -> None:
    assert checkpoint_sizes(180, (0.25, 0.5, 0.75), 20) == [45, 90, 135, 180]
    assert checkpoint_sizes(60, (0.25, 0.5, 0.75), 20) == [20, 30, 45, 60]
    assert checkpoint_sizes(24, (0.25, 0.5, 0.75), 20) == [20, 24]
    assert checkpoint_sizes(12, (0.25,), 20) == [12]


def test_race_order_is_seeded_and_stratified() -> None:
    humans = [float(i % 7) for i in range(70)]
    order = race_order(humans, n_strata=7, seed=3)
    assert sorted(order) == list(range(70))
    assert order == race_order(humans, n_strata=7, seed=3)
    assert order != race_order(humans, n_strata=7, seed=4)
    # Every prefix of r * 7 units holds r units of each of the 7 score strata.
    for r in (1, 2, 5):
        assert sorted(humans[i] for i in order[: 7 * r]) == sorted([float(v) for v in range(7)] * r)
    labels = ["a", "b", "tie", "a", "b", "a", "b", "a"]
    first = race_order(labels, n_strata=2, seed=0)[:2]
    assert "a" in {labels[i] for i in first} and {labels[i] for i in first} != {"a"}


def test_unit_keys_groups_are_units() -> None:
    ids, keys, members = unit_keys([1.0, 3.0, 2.0, 2.0], ["g1", "g1", "g2", "g2"])
    assert ids == ["g1", "g2"] and keys == [2.0, 2.0] and members == [[0, 1], [2, 3]]
    ids, keys, members = unit_keys([1.0, 3.0], None)
    assert keys == [1.0, 3.0] and members == [[0], [1]]


def test_config_validation_and_presets() -> None:
    with pytest.raises(ValueError, match="checkpoint"):
        RacingConfig(checkpoints=(0.5, 1.5))
    with pytest.raises(ValueError, match="min_items"):
        RacingConfig(min_items=2)
    cfg = RacingConfig(checkpoints=(0.75, 0.25, 0.25))
    assert cfg.checkpoints == (0.25, 0.75)
    root = Path(__file__).resolve().parents[1] / "optimizers"
    for p in root.glob("*.toml"):
        assert isinstance(load_optimizer(p).racing, RacingConfig)
    racing = load_optimizer("racing")
    assert racing.racing.enabled
    assert not load_optimizer("hpss").racing.enabled
    opt = JudgeSearch.from_config(racing, racing=False)
    assert not opt.config.racing.enabled
    assert opt.config.racing.min_items == racing.racing.min_items
    assert JudgeSearch.from_config(load_optimizer("hpss"), racing=True).config.racing.enabled
    assert HPSS(racing=True).config.racing == RacingConfig(enabled=True)
    assert HPSS(racing={"enabled": True, "top": 2}).config.racing.top == 2
    with pytest.raises(ValueError):
        OptimizerConfig(racing={"enabled": True, "confidence": 1.5})


# The teleprompter ---------------------------------------------------------------------------
SPACE = {
    "scale": [3, 10],
    "examples": [0],
    "criteria": ["none", "human"],
    "reference": ["none"],
    "cot": ["none", "prefix"],
    "autocot": ["off"],
    "metrics": ["off"],
    "order": ["TD-ER-IC", "IC-TD-ER"],
    "decoding": ["greedy"],
}
N_ITEMS = 120


@pytest.fixture(scope="module")
def task():
    return load_task("topical_chat")


@pytest.fixture(scope="module")
def records(shared_data: Path):
    return load_records(shared_data / "topical_chat" / "valid.jsonl")[:N_ITEMS]


def make_respond(records) -> Any:
    """Scale 10: the human score (a good judge); other scales: a hash of the prompt (noise)."""
    human = {r.inputs["response"]: r.scores[ASPECT] for r in records}

    def respond(messages: list[dict[str, Any]]) -> str:
        text = str(messages[-1]["content"])
        response = text.split("## The Start of the Response")[-1].split("## The End")[0].strip()
        m = re.search(r"scale of (\d+) to (\d+)", text)
        hi = int(m.group(2)) if m else 3
        if hi == 10 and response in human:
            return f"Rating: [[{round(1 + (human[response] - 1) * 4.5)}]]"
        h = int(hashlib.sha256(text.encode()).hexdigest(), 16)
        return f"Rating: [[{1 + h % hi}]]"

    return respond


def compile_with(
    task,
    records,
    respond,
    *,
    racing: Any,
    cache: Any = False,
    ckpt: Path | None = None,
    budget: int = 6,
) -> tuple[Any, ScriptedLM]:
    fake = ScriptedLM(respond, cache=cache)
    # selection="best": these tests count the search's calls (the confirmation stage of the
    # default rule is tested in test_selection_compile.py).
    opt = HPSS(
        budget=budget,
        space=SPACE,
        progress=False,
        params={"k": 2},
        racing=racing,
        checkpoint_dir=ckpt,
        selection="best",
    )
    return opt.compile(JudgeProgram(task, ASPECT, lm=fake.lm), trainset=records), fake


RACE = {"enabled": True, "top": 1, "min_items": 20}


def interrupt_after(respond: Any, fail_after: int) -> tuple[Any, dict[str, int]]:
    """``respond`` that raises KeyboardInterrupt from request ``fail_after + 1`` on.

    ``state["n"]`` counts the requests; setting ``state["fail_after"]`` to 0 lets all pass.
    """
    state = {"n": 0, "fail_after": fail_after}

    def interrupting(messages: list[dict[str, Any]]) -> str:
        state["n"] += 1
        if state["fail_after"] and state["n"] > state["fail_after"]:
            raise KeyboardInterrupt
        return respond(messages)

    return interrupting, state


def test_racing_drops_noise_candidates_and_counts_calls(task, records) -> None:
    respond = make_respond(records)
    full, fake_full = compile_with(task, records, respond, racing=False)
    raced, fake = compile_with(task, records, respond, racing=RACE)
    rf, rr = full.search_result, raced.search_result
    # Full evaluation: every candidate on every item, no racing records anywhere.
    assert len(fake_full.judge_requests) == rf.calls == 6 * N_ITEMS
    assert rf.racing is None and all("racing" not in t for t in rf.trace)
    assert all("racing" not in s for s in rf.evaluation_summaries)
    # Racing: the same judge at a fraction of the calls.
    assert raced.strategy == full.strategy and rr.best_score == rf.best_score
    assert rr.calls == len(fake.judge_requests) == sum(s["n"] for s in rr.evaluation_summaries)
    assert rr.calls < 0.7 * rf.calls
    assert rr.racing["dropped"] >= 2 and rr.racing["top"] == 1
    assert rr.racing["items_judged"] == rr.calls and rr.racing["items_full"] == 6 * N_ITEMS
    dropped = [t for t in rr.trace if t["racing"]["dropped"]]
    assert len(dropped) == rr.racing["dropped"]
    for t in dropped:
        r = t["racing"]
        assert r["items"] == 30 and r["of"] == N_ITEMS  # dropped at the first checkpoint
        assert t["score"] == r["estimate"] and r["bound"] < r["threshold"]
        assert t["strategy"]["scale"] == 3
    kept = [t for t in rr.trace if not t["racing"]["dropped"]]
    assert all(t["racing"]["items"] == N_ITEMS for t in kept)
    # The exported judge carries the racing summary.
    assert raced.export()["search"]["racing"]["dropped"] == rr.racing["dropped"]


def test_no_drop_before_the_population_is_full(task, records) -> None:
    # top = 6 = the budget: there is never a 6th full evaluation to race against.
    raced, fake = compile_with(
        task, records, make_respond(records), racing={"enabled": True, "top": 6}
    )
    assert raced.search_result.racing["dropped"] == 0
    assert len(fake.judge_requests) == 6 * N_ITEMS


def test_dropped_score_bound_option(task, records) -> None:
    raced, _ = compile_with(
        task, records, make_respond(records), racing={**RACE, "dropped_score": "bound"}
    )
    dropped = [t for t in raced.search_result.trace if t["racing"]["dropped"]]
    assert dropped and all(t["score"] == t["racing"]["bound"] for t in dropped)


# 190: mid-way through the second candidate (judged in full, past two checkpoints);
# 285: inside the fourth candidate's first chunk (it is then dropped).
@pytest.mark.parametrize("fail_after", [N_ITEMS + 70, 2 * N_ITEMS + 45])
def test_interrupted_racing_compile_resumes_with_no_repeated_call(
    task, records, tmp_path, fail_after
) -> None:
    """No LM cache at all: only the checkpoint's pending items prevent repeated calls."""
    respond = make_respond(records)
    interrupting, state = interrupt_after(respond, fail_after)

    ckpt = tmp_path / "ckpt"
    with pytest.raises(KeyboardInterrupt):
        compile_with(task, records, interrupting, racing=RACE, ckpt=ckpt)
    done = state["n"] - 1 - 1  # the interrupted request, the endpoint check
    assert (ckpt / "pending.jsonl").is_file()
    state["fail_after"] = 0
    resumed, fake2 = compile_with(task, records, interrupting, racing=RACE, ckpt=ckpt)
    ref, fake_ref = compile_with(task, records, respond, racing=RACE)
    assert done + len(fake2.judge_requests) == len(fake_ref.judge_requests)
    assert resumed.search_result.trace == ref.search_result.trace
    assert not (ckpt / "pending.jsonl").exists()
    # A second re-run of the finished compile makes no call at all.
    again, fake3 = compile_with(task, records, interrupting, racing=RACE, ckpt=ckpt)
    assert len(fake3.judge_requests) == 0 and again.strategy == ref.strategy


def test_interrupted_full_compile_resumes_with_no_repeated_call(task, records, tmp_path) -> None:
    respond = make_respond(records)
    interrupting, state = interrupt_after(respond, N_ITEMS + 40)

    ckpt = tmp_path / "ckpt"
    with pytest.raises(KeyboardInterrupt):
        compile_with(task, records, interrupting, racing=False, ckpt=ckpt, budget=3)
    done = state["n"] - 1 - 1  # the interrupted request, the endpoint check
    state["fail_after"] = 0
    resumed, fake2 = compile_with(task, records, interrupting, racing=False, ckpt=ckpt, budget=3)
    assert done + len(fake2.judge_requests) == 3 * N_ITEMS
    ref, _ = compile_with(task, records, respond, racing=False, budget=3)
    assert resumed.search_result.trace == ref.search_result.trace


def test_cost_benchmark_compares_full_and_racing_runs(task, records) -> None:
    """benchmarks/cost.py's comparison, with a scripted LM in place of the local model."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "cost.py"
    spec = importlib.util.spec_from_file_location("cost_benchmark", path)
    cost = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cost)
    respond = make_respond(records)
    lms: dict[str, ScriptedLM] = {}

    def make_lm(tag: str) -> Any:
        lms[tag] = ScriptedLM(respond)
        return lms[tag].lm

    out = cost.compare(
        make_lm,
        task,
        ASPECT,
        list(records),
        list(records[:30]),
        search="hpss",
        budget=5,
        seed=0,
        space=cost.QUICK_SPACE,
        k=1,
        racing={"min_items": 20},
        progress=False,
    )
    assert {"calls_full", "calls_racing", "valid_full", "valid_racing"} <= set(out)
    assert out["calls_full"] == len(lms["full"].judge_requests) == 5 * N_ITEMS
    assert out["calls_racing"] == len(lms["racing"].judge_requests) < out["calls_full"]
    assert out["valid_racing"] == out["valid_full"] and out["same_strategy"]
    assert out["test_delta"] == 0.0 and out["dropped"] >= 1
    assert "racing/full calls" in cost.table(out)


def test_cli_racing_flag(shared_data: Path, records, tmp_path, monkeypatch, capsys) -> None:
    import json

    import judgeopt.lm
    from judgeopt.cli import main

    fakes: list[ScriptedLM] = []

    def fake_make_lm(model: str, **kw: Any) -> Any:
        fakes.append(ScriptedLM(make_respond(records)))
        return fakes[-1].lm

    monkeypatch.setattr(judgeopt.lm, "make_lm", fake_make_lm)
    data = str(shared_data / "topical_chat" / "valid.jsonl")
    common = [
        "compile",
        "--task",
        "topical_chat",
        "--aspect",
        ASPECT,
        "--data",
        data,
        "--limit",
        str(N_ITEMS),
        "--budget",
        "4",
        "--model",
        "scripted",
        "--no-progress",
    ]
    out = tmp_path / "raced.json"
    assert main([*common, "--optimizer", "hpss", "--racing", "--out", str(out)]) == 0
    assert "racing:" in capsys.readouterr().out
    search = json.loads(out.read_text())["search"]
    assert search["racing"]["enabled"] and search["racing"]["top"] == 5
    out2 = tmp_path / "full.json"
    assert main([*common, "--optimizer", "racing", "--no-racing", "--out", str(out2)]) == 0
    assert json.loads(out2.read_text())["search"]["racing"] is None
    # Judge calls only: neither the endpoint check, the decoding check's logprob probe nor the
    # generation of an artifact (1024-token budget) that a strategy of the start needs.
    judge_calls = [
        r for r in fakes[1].judge_requests if not r.get("logprobs") and r.get("max_tokens") != 1024
    ]
    assert len(judge_calls) == 4 * N_ITEMS


def test_racing_module_imports_no_llm_stack() -> None:
    import subprocess
    import sys

    code = (
        "import sys, judgeopt.racing; "
        "print(sorted(m for m in ('dspy', 'litellm', 'openai') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_cost_quick_runs_with_smollm2(tmp_path, monkeypatch, capsys) -> None:
    """benchmarks/cost.py --quick (smaller still, on SFRES's short prompts) end to end with
    the real SmolLM2."""
    import importlib.util
    import json

    pytest.importorskip("llama_cpp")
    from judgeopt.lm import ensure_local_model

    try:
        ensure_local_model("smollm2-135m")
    except Exception as e:  # noqa: BLE001 - the model package is an optional install
        pytest.skip(f"smollm2-135m is not installed: {e}")
    monkeypatch.setenv("JUDGEOPT_THREADS", "2")
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "cost.py"
    spec = importlib.util.spec_from_file_location("cost_benchmark", path)
    cost = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cost)
    out = tmp_path / "cost.json"
    cost.main(
        [
            "--quick",
            "--task",
            "sfres",
            "--n-valid",
            "6",
            "--n-test",
            "2",
            "--budget",
            "2",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert {"calls_full", "calls_racing", "valid_full", "valid_racing"} <= set(printed)
    # At most two judges per item, and the plan's one-token probe of the embedded model.
    assert 0 < printed["calls_racing"] <= printed["calls_full"] <= 2 * printed["n_valid"] + 1
    assert json.loads(out.read_text())["runs"]["racing"]["racing"]["enabled"]
