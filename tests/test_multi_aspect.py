"""`judgeopt compile --aspect a,b` / `--aspects all`: one command, one judge per aspect."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import judgeopt
from judgeopt.cli import main
from judgeopt.testing import ScriptedLM


def rate(messages: list[dict[str, Any]]) -> str:
    text = str(messages[-1]["content"])
    m = re.search(r"scale of (\d+) to (\d+)", text)
    hi = int(m.group(2)) if m else 5
    return f"[[{1 + len(text) % hi}]]"


@pytest.fixture
def fake_lm(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    import judgeopt.lm

    made: list[Any] = []

    def make(model: str, **kw: Any) -> Any:
        made.append(ScriptedLM(rate))
        return made[-1].lm

    monkeypatch.setattr(judgeopt.lm, "make_lm", make)
    return made


def _compile(data: Path, out: Path, *which: str) -> int:
    return main(
        [
            "compile",
            "--task",
            "summeval",
            *which,
            "--data",
            str(data),
            "--limit",
            "12",
            "--optimizer",
            "quick",
            "--budget",
            "2",
            "--selection",
            "best",
            "--out",
            str(out),
            "--no-progress",
            "--model",
            "openai/x",
        ]
    )


def test_several_aspects_one_judge_each_plus_index(
    shared_data: Path, tmp_path: Path, fake_lm, capsys
) -> None:
    data = shared_data / "summeval" / "full.jsonl"
    out = tmp_path / "judges"
    assert _compile(data, out, "--aspect", "coherence,fluency") == 0
    assert len(fake_lm) == 1  # one LM (one model load, one cache)
    index = json.loads((out / "index.json").read_text())
    assert index["format"] == "judgeopt-index" and index["task"] == "summeval"
    assert index["judges"] == {"coherence": "coherence.json", "fluency": "fluency.json"}
    assert (out / "coherence.json.ckpt").is_dir() and (out / "fluency.json.ckpt").is_dir()
    judges = judgeopt.load_judges(out / "index.json")
    assert list(judges) == ["coherence", "fluency"]
    assert (
        judges["fluency"].aspect == "fluency" and judgeopt.load_judges(out).keys() == judges.keys()
    )
    printed = capsys.readouterr().out
    assert "== summeval / coherence" in printed and "wrote " + str(out / "index.json") in printed


def test_aspects_all_and_mistakes(shared_data: Path, tmp_path: Path, fake_lm, capsys) -> None:
    data = shared_data / "summeval" / "full.jsonl"
    assert _compile(data, tmp_path / "all", "--aspects", "all") == 0
    assert sorted(json.loads((tmp_path / "all" / "index.json").read_text())["judges"]) == [
        "coherence",
        "consistency",
        "fluency",
        "relevance",
    ]
    capsys.readouterr()
    assert _compile(data, tmp_path / "j.json", "--aspect", "coherence,fluency") == 2
    assert "--out names a directory" in capsys.readouterr().err
    assert _compile(data, tmp_path / "x", "--aspect", "coherence,fluenc") == 2
    assert "Unknown aspect 'fluenc'" in capsys.readouterr().err
    assert _compile(data, tmp_path / "y", "--aspect", "coherence,coherence") == 2
    assert "more than once" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _compile(data, tmp_path / "z", "--aspect", "coherence", "--aspects", "all")
    # One aspect into a directory: --aspects writes the index; --aspect needs a .json file,
    # refused before any call (and no checkpoint left to block the next run).
    calls_before = len(fake_lm)
    assert _compile(data, tmp_path / "one", "--aspect", "coherence") == 2
    assert "a file ending in .json" in capsys.readouterr().err
    assert len(fake_lm) == calls_before and not (tmp_path / "one.ckpt").exists()
    assert _compile(data, tmp_path / "one", "--aspects", "coherence") == 0
    assert json.loads((tmp_path / "one" / "index.json").read_text())["judges"] == {
        "coherence": "coherence.json"
    }
    bad = tmp_path / "index.json"
    bad.write_text(json.dumps({"format": "judgeopt-index", "judges": {}}))
    with pytest.raises(ValueError, match="`judges` must be a non-empty object"):
        judgeopt.load_judges(bad)
    with pytest.raises(ValueError, match="not a judge index"):
        judgeopt.load_judges(tmp_path / "all" / "coherence.json")


def test_recompiling_two_aspects_keeps_the_other_judges_in_the_index(
    shared_data: Path, tmp_path: Path, fake_lm, capsys
) -> None:
    """`--aspects all`, then `--aspect coherence,fluency` into the same folder: the index
    still lists all four judges, and `load_judges` returns all four."""
    data = shared_data / "summeval" / "full.jsonl"
    out = tmp_path / "judges"
    assert _compile(data, out, "--aspects", "all") == 0
    four = ["coherence", "consistency", "fluency", "relevance"]
    assert list(json.loads((out / "index.json").read_text())["judges"]) == four
    capsys.readouterr()
    assert _compile(data, out, "--aspect", "fluency,coherence") == 0
    index = json.loads((out / "index.json").read_text())
    assert index["judges"] == {a: f"{a}.json" for a in four} and index["model"] == "openai/x"
    assert list(judgeopt.load_judges(out)) == four
    printed = capsys.readouterr().out
    assert "4 judges of summeval" in printed
    assert "kept from the earlier index: consistency, relevance" in printed


def test_index_merge_drops_missing_files_other_tasks_and_mixed_models(tmp_path: Path) -> None:
    from judgeopt.judge import write_judge_index

    index = tmp_path / "index.json"
    for a in ("a", "b", "c"):
        (tmp_path / f"{a}.json").write_text("{}")
    write_judge_index(index, "t", {"a": "a.json", "b": "b.json", "c": "c.json"}, model="m1")
    (tmp_path / "b.json").unlink()
    write_judge_index(index, "t", {"c": "c2.json", "d": "d.json"}, model="m1", merge=True)
    raw = json.loads(index.read_text())
    # b's file is gone: its entry goes; c is replaced in place; d comes last.
    assert raw["judges"] == {"a": "a.json", "c": "c2.json", "d": "d.json"}
    assert raw["model"] == "m1"
    write_judge_index(index, "t", {"d": "d.json"}, model="m2", merge=True)
    assert json.loads(index.read_text())["model"] is None  # a's judge came from m1
    write_judge_index(index, "other", {"x": "x.json"}, model="m2", merge=True)
    assert json.loads(index.read_text())["judges"] == {"x": "x.json"}  # another task: replaced
    write_judge_index(index, "other", {"y": "y.json"}, model="m2")  # no merge: as before
    assert json.loads(index.read_text())["judges"] == {"y": "y.json"}
    index.write_text("not json")
    write_judge_index(index, "other", {"z": "z.json"}, merge=True)
    assert json.loads(index.read_text())["judges"] == {"z": "z.json"}
