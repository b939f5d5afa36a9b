"""JudgeProgram, its adapter, artifacts, evaluation, teleprompters and export: control flow.

These tests use a scripted LM (judgeopt.testing.ScriptedLM): they check plumbing, parsing and
bookkeeping. Real-model behaviour is tested in test_judge_real.py.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import dspy
import litellm
import pytest

from judgeopt.data import load_records
from judgeopt.evaluate import evaluate
from judgeopt.judge import JudgeProgram, NoLMError, baseline_strategy, load_task
from judgeopt.search import Strategy
from judgeopt.teleprompt import HPSS, Greedy, JudgeSearch, OptimizerConfig, load_optimizer
from judgeopt.testing import ScriptedLM

ASPECT = "naturalness"


@pytest.fixture(scope="module")
def task():
    return load_task("topical_chat")


@pytest.fixture(scope="module")
def records(shared_data: Path):
    return load_records(shared_data / "topical_chat" / "valid.jsonl")[:12]


def user_text(messages: list[dict[str, Any]]) -> str:
    return str(messages[-1]["content"])


def rating_by_length(messages: list[dict[str, Any]]) -> str:
    """Judge prompts get a rating tied to the response length; generation prompts get text."""
    text = user_text(messages)
    if "## The Start of the Response" not in text:
        return "1. Read the response.\n2. Check it."
    response = text.split("## The Start of the Response")[-1].split("## The End")[0]
    m = re.search(r"scale of (\d+) to (\d+)", text)
    hi = int(m.group(2)) if m else 3
    rating = 1 + (len(response) // 20) % hi
    return f"The response reads fine. Rating: [[{rating}]]"


def test_judge_returns_prediction_and_parses_last_rating(task, records) -> None:
    fake = ScriptedLM(lambda m: "First [[1]] then, finally, Rating: [[3]]")
    judge = JudgeProgram(task, ASPECT, lm=fake.lm)
    pred = judge(**records[0].inputs)
    assert isinstance(pred, dspy.Prediction)
    assert pred.score == 3.0 and pred.parse_error is None
    assert pred.rationale.startswith("First")  # prefix CoT: the output is the rationale
    assert pred.raw.endswith("[[3]]")
    [req] = fake.requests
    assert req["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
    assert "## Conversation History" in req["messages"][1]["content"]
    assert req["max_tokens"] == 256


def test_unparseable_and_out_of_range_are_recorded_not_raised(task, records) -> None:
    judge = JudgeProgram(task, ASPECT, lm=ScriptedLM(lambda m: "I cannot rate this.").lm)
    pred = judge(**records[0].inputs)
    assert pred.score is None and pred.parse_error == "no rating found"
    judge = JudgeProgram(task, ASPECT, lm=ScriptedLM(lambda m: "Rating: [[7]]").lm)
    pred = judge(**records[0].inputs)
    assert pred.score is None and "outside" in pred.parse_error


def test_missing_field_unknown_aspect_unknown_value_no_lm(task, records) -> None:
    judge = JudgeProgram(task, ASPECT, lm=ScriptedLM(lambda m: "[[2]]").lm)
    with pytest.raises(ValueError, match=r"Missing input field\(s\) \['fact'\]"):
        judge(context="hi", response="hello")
    with pytest.raises(ValueError, match="naturalnes"):
        JudgeProgram(task, "naturalnes")
    with pytest.raises(ValueError, match="7 is not a value of factor `scale`"):
        JudgeProgram(task, ASPECT, {**baseline_strategy(task).as_dict(), "scale": 7})
    with dspy.context(lm=None):
        with pytest.raises(NoLMError, match="dspy.configure"):
            JudgeProgram(task, ASPECT)(**records[0].inputs)


def test_works_the_dspy_way_context_and_parallel(task, records) -> None:
    fake = ScriptedLM(rating_by_length)
    judge = JudgeProgram(task, ASPECT)
    with dspy.context(lm=fake.lm):
        single = judge(**records[0].inputs).score
        par = dspy.Parallel(num_threads=2, disable_progress_bar=True)
        outs = par([(judge, dspy.Example(**r.inputs).with_inputs(*r.inputs)) for r in records[:4]])
    assert [o.score for o in outs][0] == single
    assert all(o.score in (1.0, 2.0, 3.0) for o in outs)


def test_as_metric_of_another_dspy_program(task, records) -> None:
    fake = ScriptedLM(rating_by_length)
    judge = JudgeProgram(task, ASPECT, lm=fake.lm)

    def metric(example: dspy.Example, pred: dspy.Prediction, trace: Any = None) -> float:
        return judge(context=example.context, fact=example.fact, response=pred.response).score

    ex = dspy.Example(**records[0].inputs)
    assert metric(ex, dspy.Prediction(response=records[0].inputs["response"])) in (1.0, 2.0, 3.0)


def test_generated_artifacts_are_made_once_per_cache_key(task, records) -> None:
    fake = ScriptedLM(rating_by_length)
    s = baseline_strategy(task).replace(criteria="self", autocot="on", metrics="on")
    judge = JudgeProgram(task, ASPECT, s, lm=fake.lm)
    for r in records[:3]:
        judge.judge(r.inputs, sample_id=r.id)
    gen = [
        q
        for q in fake.requests
        if "## The Start of the Response" not in user_text(q["messages"])
        or "Please propose at most three" in user_text(q["messages"])
    ]
    # criteria once, AutoCoT once, metrics once per sample (3): 5 generations.
    assert len(gen) == 5, [user_text(q["messages"])[:60] for q in gen]
    # Another strategy sharing (criteria, scale) reuses criteria and AutoCoT steps.
    other = judge.with_strategy(s.replace(cot="none", metrics="off"))
    before = len(fake.requests)
    other.judge(records[0].inputs, sample_id=records[0].id)
    assert len(fake.requests) == before + 1  # only the judge call
    keys = sorted(judge.store.to_dict())
    assert any("self_criteria" in k for k in keys) and any("autocot_steps" in k for k in keys)


def test_in_context_examples_exclude_the_judged_item(task, records) -> None:
    fake = ScriptedLM(rating_by_length)
    s = baseline_strategy(task).replace(examples=3)
    judge = JudgeProgram(task, ASPECT, s, trainset=records, lm=fake.lm)
    for r in records:
        judge.judge(r.inputs, sample_id=r.id)
        prompt = user_text(fake.requests[-1]["messages"])
        examples_part = prompt.split("Following these examples")[0]
        assert prompt.count("## Example") == 3
        assert r.inputs["response"] not in examples_part


def test_evaluate_records_failures_and_computes_correlations(task, records) -> None:
    calls = {"n": 0}

    def respond(messages: list[dict[str, Any]]) -> str | BaseException:
        calls["n"] += 1
        if calls["n"] == 2:
            return litellm.exceptions.BadRequestError("boom", model="x", llm_provider="openai")
        if calls["n"] == 3:
            return "no rating here"
        return rating_by_length(messages)

    judge = JudgeProgram(task, ASPECT, lm=ScriptedLM(respond).lm)
    res = evaluate(judge, records, progress=False)
    assert res.n == 12 and res.call_failures == 1 and res.parse_failures == 1
    assert res.spearman is not None and -1 <= res.spearman <= 1
    assert res.calls == 12 and res.prompt_tokens > 0
    failed = [i for i in res.items if i.error]
    assert "LMBadRequest" in failed[0].error
    s = res.summary()
    assert set(s) >= {
        "n",
        "parse_failures",
        "spearman",
        "kendall",
        "pearson",
        "level",
        "calls",
        "seconds",
    }
    assert s["level"] == "dataset"


def test_constant_judge_scores_zero(task, records) -> None:
    judge = JudgeProgram(task, ASPECT, lm=ScriptedLM(lambda m: "[[2]]").lm)
    res = evaluate(judge, records, progress=False)
    assert res.spearman == 0.0


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


def scale_loving(messages: list[dict[str, Any]]) -> str:
    """Scale 10 makes the scripted judge agree with the length proxy; scale 3 inverts it."""
    text = user_text(messages)
    if "scale of 1 to 10" in text:
        return rating_by_length(messages)
    response = text.split("## The Start of the Response")[-1].split("## The End")[0]
    return f"[[{3 - (len(response) // 20) % 3}]]"


def test_compile_returns_best_program_with_search_result(task, records) -> None:
    fake = ScriptedLM(scale_loving)
    judge = JudgeProgram(task, ASPECT, lm=fake.lm)
    # Rule best: the search's best strategy is returned (the other rules are tested in
    # test_selection_compile.py).
    best = HPSS(budget=6, space=SPACE, progress=False, params={"k": 2}, selection="best").compile(
        judge, trainset=records
    )
    res = best.search_result
    assert res.evaluations == 6 and len(res.trace) == 6
    assert best.strategy == Strategy.from_json(json.dumps(res.best_strategy), best.space)
    assert res.best_score == max(t["score"] for t in res.trace if t["score"] is not None)
    assert best.validation is not None and best.validation["spearman"] == res.best_score
    assert all(graph_ok in (3, 10) for graph_ok in [t["strategy"]["scale"] for t in res.trace])
    assert res.trace[0]["strategy"] == baseline_strategy(task).as_dict()


def test_compile_bad_data_and_config(task, records) -> None:
    judge = JudgeProgram(task, ASPECT, lm=ScriptedLM(scale_loving).lm)
    bad = [
        dict(id="x", group_id=None, inputs={"context": "a", "response": "b"}, scores={ASPECT: 2.0})
    ]
    with pytest.raises(ValueError, match="fact"):
        HPSS(budget=2, progress=False).compile(judge, trainset=bad)
    out_of_range = [
        dict(
            id="x",
            group_id=None,
            inputs={"context": "a", "fact": "f", "response": "b"},
            scores={ASPECT: 9.0},
        )
    ]
    with pytest.raises(ValueError, match="9"):
        HPSS(budget=2, progress=False).compile(judge, trainset=out_of_range)
    with pytest.raises(ValueError, match="`search` field must be one of"):
        JudgeSearch("hpsss")
    # a subclass runs its own search: named or left out, never another
    assert HPSS().config.search == HPSS(search="hpss").config.search == "hpss"
    assert JudgeSearch().config.search == "auto" and Greedy().config.search == "greedy"
    with pytest.raises(ValueError, match=r"HPSS runs search 'hpss'; got search='greedy'"):
        HPSS("greedy")
    with pytest.raises(ValueError, match="Unknown `params`"):
        HPSS(params={"kk": 3})
    with pytest.raises(ValueError, match="unknown factor `tone`"):
        HPSS(budget=2, space={"tone": ["x"]}, progress=False).compile(judge, trainset=records)
    with pytest.raises(ValueError, match="baseline"):
        HPSS(budget=2, space={"cot": ["none"]}, progress=False).compile(judge, trainset=records)


def test_presets_load_and_validate() -> None:
    root = Path(__file__).resolve().parents[1] / "optimizers"
    names = sorted(p.stem for p in root.glob("*.toml"))
    assert {"hpss", "greedy", "stepwise", "random", "quick"} <= set(names)
    for name in names:
        cfg = load_optimizer(root / f"{name}.toml")
        assert isinstance(cfg, OptimizerConfig)
    hpss = load_optimizer("hpss")
    assert (hpss.budget, hpss.params) == (
        71,
        {"k": 5, "g": 2, "rho": 0.2, "tau": 5.0, "lambda_": 4.0},
    )


def test_preset_errors_name_the_field(tmp_path: Path) -> None:
    p = tmp_path / "bad.toml"
    p.write_text('search = "hpss"\nbudget = 0\n')
    with pytest.raises(ValueError, match="`budget`"):
        load_optimizer(p)
    p.write_text('search = "hpss"\nbudgets = 3\n')
    with pytest.raises(ValueError, match="`budgets`"):
        load_optimizer(p)


def test_interrupted_compile_resumes_without_repeating_calls(task, records, tmp_path) -> None:
    cache = tmp_path / "cache"
    state = {"n": 0, "fail_after": 30}

    def respond(messages: list[dict[str, Any]]) -> str | BaseException:
        state["n"] += 1
        if state["fail_after"] and state["n"] > state["fail_after"]:
            raise KeyboardInterrupt
        return scale_loving(messages)

    fake = ScriptedLM(respond, cache=cache)
    judge = JudgeProgram(task, ASPECT, lm=fake.lm)
    opt = HPSS(
        budget=6, space=SPACE, progress=False, params={"k": 2}, checkpoint_dir=tmp_path / "ckpt"
    )
    with pytest.raises(KeyboardInterrupt):
        opt.compile(judge, trainset=records)
    # The interrupted request never completed; the first request checked the endpoint (and
    # the cost plan's one-token probes are not judge requests either).
    done = len(fake.judge_requests) - 1
    assert fake.requests[0]["max_tokens"] == 1
    assert (tmp_path / "ckpt" / "search_state.json").is_file()
    state["fail_after"] = 0
    fake2 = ScriptedLM(respond, cache=cache)
    best = opt.compile(JudgeProgram(task, ASPECT, lm=fake2.lm), trainset=records)
    # Finished judge calls came from the cache; only the rest (and the uncached endpoint
    # check) reached the backend.
    assert fake2.requests[0]["max_tokens"] == 1
    assert len(fake2.judge_requests) == 6 * len(records) - done
    full = ScriptedLM(scale_loving)
    ref = HPSS(budget=6, space=SPACE, progress=False, params={"k": 2}).compile(
        JudgeProgram(task, ASPECT, lm=full.lm), trainset=records
    )
    assert best.search_result.trace == ref.search_result.trace


def test_export_load_round_trip_in_fresh_process(task, records, tmp_path) -> None:
    fake = ScriptedLM(rating_by_length)
    s = baseline_strategy(task).replace(examples=3, criteria="self", autocot="on")
    judge = JudgeProgram(task, ASPECT, s, trainset=records, lm=fake.lm)
    scores = [judge.judge(r.inputs, sample_id=r.id).score for r in records[:3]]
    path = tmp_path / "judge.json"
    judge.save(path)
    data = json.loads(path.read_text())
    assert data["format_version"] == 1 and data["aspect"] == ASPECT
    assert data["strategy"] == s.as_dict()
    assert len(next(iter(data["artifacts"]["examples"].values()))) == 3
    assert any("self_criteria" in k for k in data["artifacts"]["texts"])
    assert "{response}" in data["template"] and "{context}" in data["template"]
    assert "api_key" not in path.read_text() and "test" not in json.dumps(data.get("model"))
    loaded = JudgeProgram.load(path, lm=ScriptedLM(rating_by_length).lm)
    assert loaded.strategy == judge.strategy and loaded.task == judge.task
    assert loaded.export()["template"] == data["template"]
    # The judged item is never its own example, also after loading.
    ex_inputs = next(iter(data["artifacts"]["examples"].values()))[0]["inputs"]
    fake3 = ScriptedLM(rating_by_length)
    JudgeProgram.load(path, lm=fake3.lm)(**ex_inputs)
    prompt = user_text(fake3.requests[-1]["messages"])
    assert prompt.split("Following these examples")[0].count(ex_inputs["response"]) == 0
    # A fresh process rebuilds the same prompts (no pickle, no signature file needed).
    code = (
        "import json, sys\n"
        "from judgeopt.judge import JudgeProgram\n"
        "from judgeopt.testing import ScriptedLM\n"
        "sys.path.insert(0, sys.argv[2])\n"
        "from test_judge import rating_by_length\n"
        "j = JudgeProgram.load(sys.argv[1], lm=ScriptedLM(rating_by_length).lm)\n"
        "recs = json.loads(sys.stdin.read())\n"
        "print(json.dumps([j(**r).score for r in recs]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), str(Path(__file__).parent)],
        input=json.dumps([r.inputs for r in records[:3]]),
        text=True,
        capture_output=True,
        check=True,
        timeout=120,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == scores


def test_load_rejects_bad_files(tmp_path: Path) -> None:
    p = tmp_path / "j.json"
    with pytest.raises(ValueError, match="not found"):
        JudgeProgram.load(p)
    p.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        JudgeProgram.load(p)
    p.write_text(json.dumps({"format_version": 99}))
    with pytest.raises(ValueError, match="format_version 99"):
        JudgeProgram.load(p)
    p.write_text(json.dumps({"format_version": 1, "aspect": "x"}))
    with pytest.raises(ValueError, match="invalid exported judge"):
        JudgeProgram.load(p)


def test_pairwise_judge_accuracy_and_examples(shared_data: Path) -> None:
    task = load_task("llmbar")
    recs = load_records(shared_data / "llmbar" / "natural.jsonl")[:10]

    def prefer_longer(messages: list[dict[str, Any]]) -> str:
        text = user_text(messages)
        a = text.split("[The Start of Assistant A's Answer]")[-1] if "Assistant A" in text else ""
        b = text.split("[The Start of Assistant B's Answer]")[-1] if "Assistant B" in text else ""
        return "Verdict: [[A]]" if len(a) >= len(b) else "Verdict: [[B]]"

    judge = JudgeProgram(task, task.aspect_names[0], lm=ScriptedLM(prefer_longer).lm)
    pred = judge(**recs[0].inputs)
    assert pred.score in ("a", "b")
    res = evaluate(judge, recs, progress=False)
    assert res.accuracy is not None and 0 <= res.accuracy <= 1 and res.spearman is None
    assert res.summary()["accuracy"] == res.accuracy
    s = baseline_strategy(task).replace(examples=3)
    with_examples = JudgeProgram(
        task, task.aspect_names[0], s, trainset=recs, lm=ScriptedLM(prefer_longer).lm
    )
    assert with_examples.judge(recs[0].inputs, sample_id=recs[0].id).score in ("a", "b")
    best = HPSS(
        budget=3,
        progress=False,
        space={
            "examples": [0],
            "criteria": ["human"],
            "reference": ["none"],
            "autocot": ["off"],
            "metrics": ["off"],
        },
    ).compile(judge, trainset=recs)
    assert best.search_result.metric == "accuracy"


def test_cli_show_task_strategy_and_errors(capsys) -> None:
    from judgeopt.cli import main

    assert (
        main(
            [
                "show",
                "--task",
                "summeval",
                "--aspect",
                "coherence",
                "--strategy",
                json.dumps(
                    {
                        "scale": 10,
                        "examples": 0,
                        "criteria": "human",
                        "reference": "none",
                        "cot": "none",
                        "autocot": "off",
                        "metrics": "off",
                        "order": "IC-TD-ER",
                    }
                ),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.index("{source}") < out.index("## Instruction")  # IC first
    assert "scale of 1 to 10" in out and "without any explanation" in out
    assert (
        main(["show", "--task", "summeval", "--aspect", "coherence", "--strategy", '{"scale": 7}'])
        == 2
    )
    assert "missing factor" in capsys.readouterr().err
    assert main(["show", "--task", "summeval", "--aspect", "nope"]) == 2
    assert "Allowed aspects" in capsys.readouterr().err


@pytest.mark.parametrize("student", [None, "summeval", object()])
def test_compile_refuses_a_student_that_is_not_a_judge_program(student: object) -> None:
    """A wrong student is refused before any data is read or any LM resolved, naming its
    type and what it lacks of the copy protocol."""
    with pytest.raises(TypeError, match=r"a \w+ is not a judge program; it lacks task, aspect"):
        HPSS(budget=2, progress=False).compile(student, trainset=[])  # type: ignore[arg-type]
