"""Issue 34, point 7: `judgeopt grid` and `judgeopt glassbox` read the plain CSV/JSONL layout
(`question,answer,helpfulness`) that compile and evaluate read, through the same loader
(``cli._common.load_data``), and a bad file is named with its field and what is allowed.

Each test drives the CLI as a user would, with a scripted LM or backend (no real model).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from judgeopt.cli import main
from judgeopt.data import load_records
from judgeopt.testing import ScriptedLM

ROWS = [
    ("How do I reset my password?", "Click 'Forgot password' on the login page.", 5),
    ("Where is my order?", "I don't know.", 1),
    ("Can I change my address?", "Yes, under Settings > Address, before it ships.", 4),
    ("Do you ship abroad?", "Sometimes.", 2),
    ("How do I cancel?", "Write to support and we cancel within a day.", 3),
    ("Is there a student discount?", "Yes: 20 % with a university e-mail address.", 4),
]


def _plain_csv(
    path: Path, header: tuple[str, str, str] = ("question", "answer", "helpfulness")
) -> Path:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(ROWS)
    return path


def _rate(messages: list[dict[str, Any]]) -> str:
    text = str(messages[-1]["content"])
    return f"Rating: [[{1 + len(text) % 5}]]"


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> ScriptedLM:
    fake = ScriptedLM(_rate)
    monkeypatch.setattr(
        "judgeopt.cli.load_lm",
        lambda args, default_model=None: (args.model or "local", fake.lm),
    )
    return fake


def _read_table(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


# ------------------------------------------------------------------------------------ grid

HPSS_FACTORS = [
    "--factors",
    "scale=5",
    "--factors",
    "examples=0",
    "--factors",
    "criteria=human",
    "--factors",
    "reference=none",
    "--factors",
    "cot=none",
    "--factors",
    "autocot=off",
    "--factors",
    "metrics=off",
    "--factors",
    "order=TD-ER-IC,IC-TD-ER",
    "--factors",
    "decoding=greedy",
]


def test_grid_reads_a_plain_csv_of_a_signature_task(
    support_task: str, tmp_path: Path, scripted: ScriptedLM, capsys: pytest.CaptureFixture[str]
) -> None:
    """`judgeopt grid --data my.csv --task my.toml --aspect helpfulness` with the README's
    `question,answer,helpfulness` file: before, grid asked for an `id` column."""
    task = tmp_path / "support.toml"
    task.write_text(support_task, encoding="utf-8")
    data = _plain_csv(tmp_path / "my.csv")
    out = tmp_path / "grid.csv"
    argv = ["grid", "--data", str(data), "--task", str(task), "--aspect", "helpfulness"]
    argv += [*HPSS_FACTORS, "--out", str(out), "--model", "fake", "--no-progress"]
    assert main(argv) == 0, capsys.readouterr().err
    rows = _read_table(out)
    assert len(rows) == 2 and {r["n"] for r in rows} == {"6"}
    assert {r["task"] for r in rows} == {"support:helpfulness"}
    assert len(scripted.judge_requests) == 12  # 2 strategies x 6 items, every one judged
    items = [json.loads(line) for line in (tmp_path / "grid.items.jsonl").read_text().splitlines()]
    assert sorted({i["human_score"] for i in items}) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert {i["id"] for i in items} >= {"my.csv:2", "my.csv:7"}  # ids from the lines


def test_grid_reads_a_plain_jsonl_with_score_for_the_aspect(
    support_task: str, tmp_path: Path, scripted: ScriptedLM
) -> None:
    """A bare ``score`` key is the judged aspect's score, as for compile and evaluate."""
    task = tmp_path / "support.toml"
    task.write_text(support_task, encoding="utf-8")
    data = tmp_path / "my.jsonl"
    data.write_text(
        "".join(json.dumps({"question": q, "answer": a, "score": s}) + "\n" for q, a, s in ROWS)
    )
    out = tmp_path / "grid.csv"
    argv = ["grid", "--data", str(data), "--task", str(task), "--aspect", "helpfulness"]
    assert main([*argv, *HPSS_FACTORS, "--out", str(out), "--no-progress"]) == 0
    assert {r["n"] for r in _read_table(out)} == {"6"}


def test_grid_reads_plain_prexme_data_like_the_schema(
    tmp_path: Path, shared_data: Path, scripted: ScriptedLM
) -> None:
    """A PrExMe task's plain columns (`source,translation,mqm`) give the same table as the
    shared JSONL schema (the task's one human score is its aspect)."""
    schema = shared_data / "eval4nlp2023" / "dev_zh_en.jsonl"
    plain = tmp_path / "zh_en.csv"
    with plain.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "source", "translation", "mqm"])
        for r in load_records(schema, limit=5):
            writer.writerow([r.id, r.inputs["source"], r.inputs["translation"], r.scores["mqm"]])
    common = ["--limit", "5", "--factors", "base_prompt=PZS", "--factors"]
    common += ["task_description=Neutral", "--factors", "format_requirement=0 to 100"]
    common += ["--task", "zh_en", "--dataset", "d", "--no-progress"]
    assert main(["grid", "--data", str(schema), "--out", str(tmp_path / "a.csv"), *common]) == 0
    assert main(["grid", "--data", str(plain), "--out", str(tmp_path / "b.csv"), *common]) == 0
    a, b = _read_table(tmp_path / "a.csv"), _read_table(tmp_path / "b.csv")
    assert len(a) == len(b) == 1 and a[0]["n"] == "5"
    assert {k: a[0][k] for k in ("kendall", "pearson", "n")} == {
        k: b[0][k] for k in ("kendall", "pearson", "n")
    }


def test_grid_names_the_file_and_the_allowed_columns_of_bad_plain_data(
    support_task: str, tmp_path: Path, scripted: ScriptedLM, capsys: pytest.CaptureFixture[str]
) -> None:
    task = tmp_path / "support.toml"
    task.write_text(support_task, encoding="utf-8")
    typo = _plain_csv(tmp_path / "typo.csv", ("question", "answr", "helpfulness"))
    out = str(tmp_path / "g.csv")
    argv = ["grid", "--task", str(task), "--aspect", "helpfulness", "--out", out]
    assert main([*argv, "--data", str(typo), *HPSS_FACTORS]) == 2
    err = capsys.readouterr().err
    assert f"--data {typo}: {typo}, line 1: field 'answr': unknown column" in err
    assert "input columns are ['answer', 'question']" in err and "['helpfulness', 'score']" in err
    bad = tmp_path / "bad.csv"
    bad.write_text("question,answer,helpfulness\nWhy?,Because.,good\n", encoding="utf-8")
    assert main([*argv, "--data", str(bad), *HPSS_FACTORS]) == 2
    err = capsys.readouterr().err
    assert f"{bad}, line 2: field 'scores.helpfulness': expected a number, got 'good'" in err
    assert not scripted.requests  # refused before any call
    examples = _plain_csv(tmp_path / "ex.csv", ("question", "answer", "quality"))
    data = _plain_csv(tmp_path / "ok.csv")
    assert main([*argv, "--data", str(data), "--examples", str(examples), *HPSS_FACTORS]) == 2
    assert f"--examples {examples}: {examples}, line 1: field 'quality'" in capsys.readouterr().err


# -------------------------------------------------------------------------------- glassbox


@pytest.fixture
def fake_backend(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    from judgeopt import glassbox as gb
    from test_glassbox import FakeBackend

    made: list[Any] = []

    def make_backend(model: str, **kwargs: Any) -> Any:
        made.append(FakeBackend())
        return made[-1]

    monkeypatch.setattr(gb, "make_backend", make_backend)
    return made


def _glassbox(data: Path, *extra: str) -> int:
    return main(
        [
            "glassbox",
            "--data",
            str(data),
            "--instruction-field",
            "question",
            "--field",
            "answer",
            "--features",
            "sentprob,softmax_ent",
            "--no-progress",
            *extra,
        ]
    )


def test_glassbox_reads_a_plain_jsonl(
    tmp_path: Path, fake_backend: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """`judgeopt glassbox --data my.jsonl --instruction-field question --field answer
    --scores helpfulness` on `{"question", "answer", "helpfulness"}` lines: before, glassbox
    refused the file for its missing `id`."""
    data = tmp_path / "my.jsonl"
    data.write_text(
        "".join(
            json.dumps({"question": q, "answer": a, "helpfulness": s}) + "\n" for q, a, s in ROWS
        )
    )
    out = tmp_path / "gb.json"
    assert _glassbox(data, "--scores", "helpfulness", "--json", str(out)) == 0
    assert "6 items, 0 failed" in capsys.readouterr().out
    payload = json.loads(out.read_text())
    assert payload["n_items"] == 6 and payload["items"][0]["id"] == "my.jsonl:1"
    assert payload["items"][0]["human"] == {"helpfulness": 5.0}
    assert set(payload["correlations"]["correlations"]["sentprob"]) == {"helpfulness"}
    # The plain CSV and an instruction template's fields work the same way.
    csv_data = _plain_csv(tmp_path / "my.csv")
    argv = ["--scores", "helpfulness", "--json", str(tmp_path / "t.json")]
    assert (
        main(
            [
                "glassbox",
                "--data",
                str(csv_data),
                "--instruction-template",
                "Answer the customer: {question}",
                "--field",
                "answer",
                "--features",
                "sentprob",
                "--no-progress",
                *argv,
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "t.json").read_text())["n_items"] == 6


def test_glassbox_plain_data_errors_name_the_file_the_column_and_the_options(
    tmp_path: Path, fake_backend: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    data = _plain_csv(tmp_path / "my.csv")
    assert _glassbox(data) == 2  # a score column not named by --scores
    err = capsys.readouterr().err
    assert f"--data {data}: {data}, line 1: field 'helpfulness': unknown column" in err
    assert "the human scores of --scores (e.g. --scores helpfulness)" in err
    jsonl = tmp_path / "my.jsonl"
    jsonl.write_text(json.dumps({"question": "q", "answr": "a", "helpfulness": 3}) + "\n")
    assert _glassbox(jsonl, "--scores", "helpfulness") == 2
    err = capsys.readouterr().err
    assert f"{jsonl}, line 1: field 'answr': unknown field" in err and "--field" in err
    assert _glassbox(data, "--scores", "answer") == 2
    assert "--scores answer: answer is an input field" in capsys.readouterr().err
    assert not fake_backend  # refused before the model is loaded
