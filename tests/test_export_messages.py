"""The exported JSON is self-contained: rendered messages, placeholders, edited templates."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from judgeopt.data import load_records
from judgeopt.judge import JudgeProgram, baseline_strategy, fill_template, load_task
from judgeopt.testing import ScriptedLM


def reply(messages: list[dict[str, Any]]) -> str:
    text = str(messages[-1]["content"])
    if "generate the evaluation steps" in text:
        return "1. Read the summary.\n2. Judge {it}."
    if "evaluation criteria of" in text:
        return "coherence: the summary is well organised."
    if "propose at most three" in text:
        return "1. Is the summary ordered?"
    return "Rating: [[4]]"


@pytest.fixture(scope="module")
def records(shared_data: Path):
    return load_records(shared_data / "summeval" / "full.jsonl", limit=40)


def full_judge(records) -> JudgeProgram:
    task = load_task("summeval")
    strategy = baseline_strategy(task).replace(
        examples=3, criteria="self", autocot="on", metrics="on"
    )
    judge = JudgeProgram(task, "coherence", strategy, trainset=records, lm=ScriptedLM(reply).lm)
    judge(source="An article.", summary="A summary.")  # generates the artifacts
    return judge


def test_messages_fill_every_artifact_but_item_fields(records, tmp_path: Path) -> None:
    judge = full_judge(records)
    judge.save(tmp_path / "judge.json")
    data = json.loads((tmp_path / "judge.json").read_text())
    system, user = data["messages"]
    assert system == {"role": "system", "content": "You are a helpful assistant."}
    text = user["content"]
    for artifact in ("{icl_examples}", "{autocot_steps}", "{self_criteria}"):
        assert artifact not in data["messages"][1]["content"]
        assert (
            artifact in data["template"]
            or artifact == "{self_criteria}"
            or artifact == "{autocot_steps}"
        )
    assert "coherence: the summary is well organised." in text
    assert "1. Read the summary.\n2. Judge {it}." in text  # braces kept verbatim
    assert text.count("## Example ") == 3
    # Only the item's fields and the per-item artifacts are left open.
    assert data["placeholders"] == ["source", "summary", "metrics_questions"]
    filled = fill_template(text, {"source": "S", "summary": "T", "metrics_questions": "Q?"})
    assert "{summary}" not in filled and "Q?" in filled


def test_an_edited_template_is_refused_and_a_removed_one_loads(records, tmp_path) -> None:
    judge = full_judge(records)
    path = tmp_path / "judge.json"
    judge.save(path)
    data = json.loads(path.read_text())
    edited = dict(data, template=data["template"].replace("impartial", "strict"))
    (tmp_path / "edited.json").write_text(json.dumps(edited))
    with pytest.raises(ValueError, match=r"`template` does not match.*never read back"):
        JudgeProgram.load(tmp_path / "edited.json")
    msgs = json.loads(json.dumps(data["messages"]))
    msgs[1]["content"] += " Be strict."
    (tmp_path / "edited2.json").write_text(json.dumps(dict(data, messages=msgs)))
    with pytest.raises(ValueError, match="`messages` does not match"):
        JudgeProgram.load(tmp_path / "edited2.json")
    bare = {k: v for k, v in data.items() if k not in ("template", "messages", "placeholders")}
    (tmp_path / "bare.json").write_text(json.dumps(bare))
    loaded = JudgeProgram.load(tmp_path / "bare.json")
    assert loaded.export()["messages"] == data["messages"]


def test_pairwise_export_and_load_round_trip(shared_data: Path, tmp_path: Path) -> None:
    task = load_task("llmbar")
    pairs = load_records(shared_data / "llmbar" / "natural.jsonl", limit=20)
    strategy = baseline_strategy(task).replace(examples=3, cot="none")
    verdicts = {"a": "[[A]]", "b": "[[B]]"}

    def respond(messages: list[dict[str, Any]]) -> str:
        text = str(messages[-1]["content"])
        return verdicts["a" if len(text) % 2 else "b"]

    lm = ScriptedLM(respond).lm
    judge = JudgeProgram(task, "overall", strategy, trainset=pairs, lm=lm)
    before = [judge(**r.inputs).score for r in pairs[:4]]
    judge.save(tmp_path / "pair.json")
    data = json.loads((tmp_path / "pair.json").read_text())
    assert data["mode"] == "pairwise" and data["scoring"]["scale"] is None
    user = data["messages"][-1]["content"]
    assert user.count("## Example ") == 3 and "{icl_examples}" not in user
    assert any(v in user for v in ("[[A]]", "[[B]]", "[[C]]"))
    assert data["placeholders"] == ["instruction", "output_a", "output_b"]
    loaded = JudgeProgram.load(tmp_path / "pair.json", lm=lm)
    assert loaded.task.mode == "pairwise" and loaded.strategy == judge.strategy
    assert [loaded(**r.inputs).score for r in pairs[:4]] == before
    assert loaded.export()["messages"] == data["messages"]


def test_show_prints_the_filled_messages(records, tmp_path: Path, capsys) -> None:
    from judgeopt.cli import main

    full_judge(records).save(tmp_path / "judge.json")
    assert main(["show", str(tmp_path / "judge.json")]) == 0
    out = capsys.readouterr().out
    assert "[system]\nYou are a helpful assistant." in out and "## Example 3:" in out
    assert "{icl_examples}" not in out and "{autocot_steps}" not in out
    assert "# placeholders: {source}, {summary}, {metrics_questions}" in out
    assert main(["show", str(tmp_path / "judge.json"), "--template"]) == 0
    assert "{icl_examples}" in capsys.readouterr().out


def test_the_advice_on_an_edited_template_names_every_generated_key(records, tmp_path) -> None:
    """A user who edits the wording in both `template` and `messages`, then deletes what the
    error tells them to delete, gets a judge that loads (not a second refusal)."""
    judge = full_judge(records)
    path = tmp_path / "judge.json"
    judge.save(path)
    data = json.loads(path.read_text())
    msgs = json.loads(json.dumps(data["messages"]))
    msgs[-1]["content"] = msgs[-1]["content"].replace("impartial", "strict")
    edited = dict(data, template=data["template"].replace("impartial", "strict"), messages=msgs)
    assert edited["template"] != data["template"] and msgs != data["messages"]
    path.write_text(json.dumps(edited))
    with pytest.raises(ValueError) as e:
        JudgeProgram.load(path)
    advice = str(e.value).split("or delete", 1)[1]
    named = re.findall(r"`(\w+)`", advice)
    assert named == ["template", "messages", "placeholders"], str(e.value)
    path.write_text(json.dumps({k: v for k, v in edited.items() if k not in named}))
    assert JudgeProgram.load(path).export()["messages"] == data["messages"]
