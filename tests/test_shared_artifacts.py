"""Issue 34, point 7: one `judgeopt compile` over several aspects makes each aspect-independent
artifact once and shares it across the aspects; what depends on the aspect is made per aspect.

Which artifacts are aspect-independent (docs/judge.md, "Artifacts shared across aspects"):

* the self-generated reference (``reference=self``): its prompt ("write a high-quality answer
  for this input") shows only the sample's inputs, so it is the same text for every aspect
  and is made once per sample for the whole compile;
* not the self-generated criteria: their prompt asks for the criteria *of* the aspect;
* not AutoCoT steps or metrics questions: their prompts name the aspect and show its criteria;
* not the in-context examples: they carry the aspect's human rating and are stratified by it.

The rule is the prompt, not the artifact's name: a generated artifact is shared when its
generation template uses none of ``{aspect}``, ``{criteria}``, ``{min}``, ``{max}`` (a task
whose reference prompt names the aspect keeps one reference per aspect).

The LM calls that make artifacts are counted with the scripted LM (no real model).
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

import pytest

from judgeopt.cli import main
from judgeopt.judge import (
    JudgeTask,
    artifact_key,
    baseline_strategy,
    hpss_graph,
    hpss_strategy,
    load_task,
)
from judgeopt.testing import ScriptedLM

#: The minimal support task (conftest's ``support_task``) with a second aspect.
POLITENESS = """
[aspects.politeness]
criteria = "Politeness: is the answer courteous?"
"""

OPTIMIZER = """search = "random"
budget = 2
seed = 0

[space]
scale = [5]
examples = [0]
criteria = ["self"]
reference = ["self"]
cot = ["none"]
autocot = ["off"]
metrics = ["off"]
order = ["TD-ER-IC", "IC-TD-ER"]
decoding = ["greedy"]
"""

REFERENCE = "Please write a high-quality answer for the following input."
CRITERIA = "Please generate the evaluation criteria of "


def _rate(messages: list[dict[str, Any]]) -> str:
    text = str(messages[-1]["content"])
    if text.startswith(REFERENCE):
        return "A reference answer."
    if CRITERIA in text:
        return "Criteria: be good."
    m = re.search(r"scale of (\d+) to (\d+)", text)
    hi = int(m.group(2)) if m else 5
    return f"[[{1 + len(text) % hi}]]"


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> list[ScriptedLM]:
    import judgeopt.lm

    made: list[ScriptedLM] = []

    def make(model: str, **kw: Any) -> Any:
        made.append(ScriptedLM(_rate))
        return made[-1].lm

    monkeypatch.setattr(judgeopt.lm, "make_lm", make)
    return made


def _files(tmp_path: Path, support_task: str) -> tuple[Path, Path, Path]:
    task = tmp_path / "support.toml"
    task.write_text(support_task + POLITENESS, encoding="utf-8")
    optimizer = tmp_path / "opt.toml"
    optimizer.write_text(OPTIMIZER, encoding="utf-8")
    data = tmp_path / "my.csv"
    with data.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["question", "answer", "helpfulness", "politeness"])
        for i in range(16):
            writer.writerow(
                [f"Question {i}: how do I do thing {i}?", "x" * (i + 1), 1 + i % 5, 5 - i % 4]
            )
    return task, optimizer, data


def _compile(task: Path, optimizer: Path, data: Path, out: Path, aspects: str) -> int:
    return main(
        [
            "compile",
            "--task",
            str(task),
            "--aspect",
            aspects,
            "--data",
            str(data),
            "--optimizer",
            str(optimizer),
            "--selection",
            "best",
            "--out",
            str(out),
            "--no-progress",
            "--no-report",
            "--model",
            "openai/x",
        ]
    )


def _made(lm: ScriptedLM) -> tuple[list[str], list[str]]:
    """The prompts of the calls that made references and criteria."""
    prompts = [str(r["messages"][-1]["content"]) for r in lm.judge_requests]
    return [p for p in prompts if p.startswith(REFERENCE)], [p for p in prompts if CRITERIA in p]


def test_two_aspects_make_each_reference_once_and_criteria_per_aspect(
    tmp_path: Path,
    scripted: list[ScriptedLM],
    capsys: pytest.CaptureFixture[str],
    support_task: str,
) -> None:
    task, optimizer, data = _files(tmp_path, support_task)
    assert _compile(task, optimizer, data, tmp_path / "one.json", "helpfulness") == 0
    one_refs, one_criteria = _made(scripted[-1])
    assert one_refs and len(one_criteria) == 1  # the compile judged with reference=self

    assert _compile(task, optimizer, data, tmp_path / "two", "helpfulness,politeness") == 0, (
        capsys.readouterr().err
    )
    refs, criteria = _made(scripted[-1])
    # The references (aspect-independent) are made once for both aspects: as many calls as
    # for one aspect, each prompt once; before, the second aspect made them all again.
    assert len(refs) == len(one_refs) and len(set(refs)) == len(refs)
    # The criteria are the aspect's own: one call per aspect, each naming its aspect.
    assert len(criteria) == 2
    assert [("helpfulness" in c, "politeness" in c) for c in criteria] == [
        (True, False),
        (False, True),
    ]
    # Both aspects' checkpoints hold the same references, under aspect-free keys.
    stores = [
        json.loads((tmp_path / "two" / f"{a}.json.ckpt" / "artifacts.json").read_text())
        for a in ("helpfulness", "politeness")
    ]
    shared = [{k for k in s if "self_reference" in k} for s in stores]
    assert shared[0] == shared[1] and len(shared[0]) == len(refs)
    assert all(k.startswith("support/*/self_reference") for k in shared[0])
    assert [sorted(k for k in s if "self_criteria" in k) for s in stores] == [
        ["support/helpfulness/self_criteria[]"],
        ["support/politeness/self_criteria[]"],
    ]


def test_only_prompts_without_the_aspect_are_shared() -> None:
    """The keys: a reference is aspect-free; criteria, AutoCoT steps, metrics questions and
    in-context examples name the aspect; a reference prompt that names the aspect too."""
    task = load_task("summeval")
    graph = hpss_graph(task)
    changes = {"examples": 3, "criteria": "self", "reference": "self", "autocot": "on"}
    strategy = hpss_strategy(
        task, {**baseline_strategy(task).as_dict(), **changes, "metrics": "on"}
    )
    keys = {r.name: artifact_key(task, "coherence", r, "s1") for r in graph.artifacts_for(strategy)}
    assert keys["self_reference"] == "summeval/*/self_reference[]@s1"
    for name in ("self_criteria", "autocot_steps", "metrics_questions", "icl_examples"):
        assert keys[name].startswith("summeval/coherence/"), name
    data = task.model_dump(mode="json")
    data["generation"]["reference"] = "Write a summary good in {aspect}: {source}\nSummary:"
    aspect_reference = JudgeTask.from_dict(data)
    ref = next(r for r in graph.artifacts_for(strategy) if r.name == "self_reference")
    assert artifact_key(aspect_reference, "coherence", ref, "s1").startswith("summeval/coherence/")
