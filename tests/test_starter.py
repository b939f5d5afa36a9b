"""Your own data in minutes: a minimal task TOML, `judgeopt init`, the plain data layout."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from judgeopt.cli import main
from judgeopt.judge import generation_prompt, hpss_strategy, load_task, render_template
from judgeopt.testing import ScriptedLM

QUESTIONS = [
    ("Why is the sky blue?", "Rayleigh scattering of sunlight.", 5),
    ("How do I reset my password?", "Click 'forgot password'.", 4),
    ("What is 2+2?", "5", 1),
    ("Where is Paris?", "In France.", 5),
    ("Can I get a refund?", "Maybe.", 2),
    ("Is it open on Sunday?", "Yes, 9-5.", 4),
    ("Who wrote Hamlet?", "Shakespeare.", 5),
    ("Why?", "Because.", 1),
    ("How long is shipping?", "3 days.", 4),
    ("What colour?", "Blue-ish?", 2),
    ("Is it safe?", "It passed the tests.", 3),
    ("Do you ship abroad?", "No.", 3),
]


def rate_by_length(messages: list[dict[str, Any]]) -> str:
    text = str(messages[-1]["content"])
    m = re.search(r"scale of (\d+) to (\d+)", text)
    hi = int(m.group(2)) if m else 5
    return f"Rating: [[{1 + len(text) % hi}]]"


def test_minimal_task_is_ten_lines_and_renders_every_factor(
    support_task: str, tmp_path: Path
) -> None:
    path = tmp_path / "support.toml"
    path.write_text(support_task)
    assert len([line for line in support_task.splitlines() if line.strip()]) <= 10
    # The task docs/tasks.md shows a new user is this one.
    doc = (Path(__file__).resolve().parents[1] / "docs" / "tasks.md").read_text(encoding="utf-8")
    assert f"```toml\n{support_task}```" in doc
    task = load_task(path)
    assert (
        task.mode,
        task.judged_fields,
        task.noun,
        task.baseline_scale,
        task.correlation_level,
    ) == ("pointwise", ("answer",), "answer", 5, "dataset")
    assert task.field("question").label == "Question"
    full = hpss_strategy(
        task,
        {
            "scale": 10,
            "examples": 0,
            "criteria": "self",
            "reference": "self",
            "cot": "suffix",
            "autocot": "on",
            "metrics": "on",
            "order": "IC-ER-TD",
            "decoding": "greedy",
        },
    )
    text = render_template(task, "helpfulness", full)
    assert "## Question\n{question}" in text and "{answer}" in text
    assert "reference answer" in text
    inputs = {"question": "Q?", "answer": "A."}
    for kind in ("reference", "autocot", "metrics", "criteria"):
        prompt = generation_prompt(
            task, "helpfulness", kind, scale=10, criteria_text="C.", inputs=inputs
        )
        assert "{" not in prompt, (kind, prompt)
    # A pairwise task is as short.
    pair = tmp_path / "pair.toml"
    pair.write_text(
        'name = "pairs"\nmode = "pairwise"\n[[inputs]]\nname = "prompt"\n'
        '[[inputs]]\nname = "output_a"\n[[inputs]]\nname = "output_b"\n'
        '[aspects.overall]\ncriteria = "Overall: which output is better?"\n'
    )
    ptask = load_task(pair)
    assert ptask.judged_fields == ("output_a", "output_b")
    for kind in ("reference", "autocot", "metrics"):
        generation_prompt(ptask, "overall", kind, criteria_text="C.", inputs={"prompt": "P"})


def test_minimal_task_errors_still_name_the_field(support_task: str, tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(support_task.replace("score_range = [1, 5]\n", ""))
    with pytest.raises(ValueError, match="score_range"):
        load_task(path)
    path.write_text(support_task.replace('name = "answer"', 'name = "answer"\nlabel = ""'))
    with pytest.raises(ValueError, match=r"inputs\.1\.label"):
        load_task(path)


def _write_csv(path: Path) -> None:
    lines = ["question,answer,helpfulness"]
    lines += [f'"{q}","{a}",{s}' for q, a, s in QUESTIONS]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_init_then_compile_on_a_plain_csv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import judgeopt.lm

    data = tmp_path / "mine.csv"
    _write_csv(data)
    toml = tmp_path / "mine.toml"
    assert main(["init", "--data", str(data), "--out", str(toml)]) == 0
    task = load_task(toml)
    assert task.input_names == ("question", "answer") and task.aspect_names == ("helpfulness",)
    assert task.score_range == (1, 5) and task.judged_fields == ("answer",)
    assert "--aspect helpfulness" in capsys.readouterr().out
    # Not overwritten without --force.
    assert main(["init", "--data", str(data), "--out", str(toml)]) == 2
    assert "--force" in capsys.readouterr().err
    monkeypatch.setattr(judgeopt.lm, "make_lm", lambda m, **kw: ScriptedLM(rate_by_length).lm)
    out = tmp_path / "judge.json"
    # The quick preset's space (scales 3, 10) does not hold this task's baseline scale (5).
    rc = main(
        [
            "compile",
            "--task",
            str(toml),
            "--aspect",
            "helpfulness",
            "--data",
            str(data),
            "--optimizer",
            "quick",
            "--budget",
            "3",
            "--selection",
            "best",
            "--out",
            str(out),
            "--no-progress",
            "--model",
            "openai/x",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    exported = json.loads(out.read_text())
    assert exported["validation"]["n"] == len(QUESTIONS)
    rc = main(["evaluate", str(out), "--data", str(data), "--no-progress", "--model", "openai/x"])
    assert rc == 0


def test_jsonl_with_a_score_key_and_init_errors(
    support_task: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    import judgeopt.lm

    data = tmp_path / "qa.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question": q, "answer": a, "score": s}) + "\n" for q, a, s in QUESTIONS
        )
    )
    toml = tmp_path / "qa.toml"
    assert main(["init", "--data", str(data), "--out", str(toml)]) == 0
    assert load_task(toml).aspect_names == ("score",)
    # A task whose aspect is named otherwise reads `score` as the judged aspect's score.
    toml.write_text(support_task)
    monkeypatch.setattr(judgeopt.lm, "make_lm", lambda m, **kw: ScriptedLM(rate_by_length).lm)
    rc = main(
        [
            "compile",
            "--task",
            str(toml),
            "--aspect",
            "helpfulness",
            "--data",
            str(data),
            "--optimizer",
            "quick",
            "--budget",
            "2",
            "--selection",
            "best",
            "--out",
            str(tmp_path / "j.json"),
            "--no-progress",
            "--model",
            "openai/x",
        ]
    )
    assert rc == 0, capsys.readouterr().err
    # A column the task does not name is refused, and the error says which ones it knows.
    bad = tmp_path / "bad.csv"
    bad.write_text("question,reply,helpfulness\nq,a,3\n")
    rc = main(
        [
            "compile",
            "--task",
            str(toml),
            "--aspect",
            "helpfulness",
            "--data",
            str(bad),
            "--out",
            str(tmp_path / "k.json"),
            "--no-progress",
            "--model",
            "openai/x",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "'reply'" in err and "['answer', 'question']" in err
    one = tmp_path / "one.csv"
    one.write_text("answer,score\na,3\n")
    assert main(["init", "--data", str(one), "--out", str(tmp_path / "one.toml")]) == 2
    assert "at least 2 text columns" in capsys.readouterr().err


def test_a_baseline_outside_the_presets_space_is_named(
    support_task: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    import judgeopt.lm

    data = tmp_path / "mine.csv"
    _write_csv(data)
    toml = tmp_path / "wide.toml"
    toml.write_text(support_task.replace("[1, 5]", "[1, 100]"))
    monkeypatch.setattr(judgeopt.lm, "make_lm", lambda m, **kw: ScriptedLM(rate_by_length).lm)
    rc = main(
        [
            "compile",
            "--task",
            str(toml),
            "--aspect",
            "helpfulness",
            "--data",
            str(data),
            "--optimizer",
            "quick",
            "--out",
            str(tmp_path / "j.json"),
            "--no-progress",
            "--model",
            "openai/x",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "scale=100 (the space allows [3, 5, 10])" in err
    assert "baseline_scale" in err


def test_init_reads_the_shared_schema_and_pairwise_labels(
    shared_data: Path, tmp_path: Path
) -> None:
    out = tmp_path / "se.toml"
    assert (
        main(["init", "--data", str(shared_data / "summeval" / "full.jsonl"), "--out", str(out)])
        == 0
    )
    task = load_task(out)
    # SummEval's human `reference` input is a reserved name: left out, and said so.
    assert task.input_names == ("source", "summary") and "Left out" in out.read_text()
    assert task.aspect_names == ("coherence", "consistency", "fluency", "relevance")
    out = tmp_path / "pairs.toml"
    assert (
        main(["init", "--data", str(shared_data / "llmbar" / "natural.jsonl"), "--out", str(out)])
        == 0
    )
    pair = load_task(out)
    assert pair.mode == "pairwise" and pair.judged_fields == ("output_a", "output_b")
    assert pair.aspect_names == ("overall",)


def test_init_refuses_constant_scores_and_warns_on_a_constant_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Human scores that never vary cannot be correlated with: `init` refuses them (exit 2,
    naming `--data`, the column and the value) as compile does, instead of writing a
    `score_range = [3, 4]` whose comment says the scores "lie in 3 .. 4"."""
    data = tmp_path / "flat.csv"
    data.write_text(
        "question,answer,helpfulness\n" + "".join(f'"{q}","{a}",3\n' for q, a, _ in QUESTIONS),
        encoding="utf-8",
    )
    toml = tmp_path / "flat.toml"
    assert main(["init", "--data", str(data), "--out", str(toml)]) == 2
    err = capsys.readouterr().err
    assert "`--data`" in err and str(data) in err
    assert f"every one of the {len(QUESTIONS)} human `helpfulness` scores is 3" in err
    assert "use data whose human scores vary" in err
    assert not toml.exists()
    # One constant column among varying ones: the task is written, the column is named on
    # stderr and in the TOML, and the suggested compile names an aspect that can compile.
    mixed = tmp_path / "mixed.csv"
    mixed.write_text(
        "question,answer,politeness,helpfulness\n"
        + "".join(f'"{q}","{a}",4,{s}\n' for q, a, s in QUESTIONS),
        encoding="utf-8",
    )
    toml = tmp_path / "mixed.toml"
    assert main(["init", "--data", str(mixed), "--out", str(toml)]) == 0
    captured = capsys.readouterr()
    assert "warning: `--data`" in captured.err and "human `politeness` scores is 4" in captured.err
    assert "refuses the aspect `politeness`" in captured.err
    assert "--aspect helpfulness" in captured.out
    text = toml.read_text()
    assert "# The human scores in the data lie in 1 .. 5." in text
    assert "--aspect helpfulness" in text.splitlines()[1]
    assert "Not compilable on this data" in text.split("[aspects.politeness]")[1]
    assert "Not compilable" not in text.split("[aspects.helpfulness]")[1]
    assert load_task(toml).aspect_names == ("politeness", "helpfulness")
