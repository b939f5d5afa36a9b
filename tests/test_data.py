"""Tests for judgeopt.data: loading, validation, splitting (real shared data + error cases)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from judgeopt.data import (
    DataFormatError,
    Record,
    group_ids,
    load_records,
    split_records,
    validate_records,
)

SPLITS = [
    ("topical_chat", "valid"),
    ("summeval", "full"),
    ("llmbar", "natural"),
    ("autoj_eval_p", "test"),
]


def _manifest(shared_data: Path) -> dict[str, Any]:
    with (shared_data / "manifest.json").open(encoding="utf-8") as handle:
        manifest: dict[str, Any] = json.load(handle)
    return manifest


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _row(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": "r1",
        "group_id": "g1",
        "system_id": "s1",
        "inputs": {"source": "text", "summary": "sum"},
        "scores": {"coherence": 3.0},
        "meta": {},
    }
    row.update(overrides)
    return row


def _rec(rid: str, group: str | None = None, **scores: float) -> Record:
    return Record(id=rid, group_id=group, system_id=None, inputs={"x": rid}, scores=dict(scores))


# ---------------------------------------------------------------- real shared data


@pytest.mark.parametrize(("dataset", "split"), SPLITS)
def test_load_shared_split_matches_manifest(shared_data: Path, dataset: str, split: str) -> None:
    info = _manifest(shared_data)[dataset][split]
    records = load_records(shared_data / dataset / f"{split}.jsonl")
    assert len(records) == info["count"]
    assert len({r.id for r in records}) == len(records)
    assert {name for r in records for name in r.inputs} == set(info["input_fields"])
    if "groups" in info:
        assert len({r.group_id for r in records if r.group_id is not None}) == info["groups"]
    if "labels" in info:
        assert dict(Counter(r.label for r in records)) == info["labels"]
        validate_records(records, required_fields=info["input_fields"], pairwise=True)
    for aspect, bounds in info.get("aspects", {}).items():
        values = [r.scores[aspect] for r in records]
        assert min(values) == pytest.approx(bounds["min"])
        assert max(values) == pytest.approx(bounds["max"])
        validate_records(
            records,
            required_fields=info["input_fields"],
            aspect=aspect,
            score_range=(bounds["min"], bounds["max"]),
        )


def test_every_manifest_split_loads_with_its_count(shared_data: Path) -> None:
    manifest = _manifest(shared_data)
    checked = 0
    for dataset, splits in manifest.items():
        for split, info in splits.items():
            path = shared_data / dataset / f"{split}.jsonl"
            assert path.is_file(), path
            assert len(load_records(path)) == info["count"], path
            checked += 1
    assert checked >= 30


def test_load_limit_and_fields_record(shared_data: Path) -> None:
    records = load_records(shared_data / "topical_chat" / "valid.jsonl", limit=3)
    assert len(records) == 3
    first = records[0]
    assert first.id == "tc021" and first.group_id == "ctx03"
    assert set(first.inputs) == {"context", "fact", "response"}
    assert first.scores["naturalness"] == pytest.approx(2.6666666667)
    assert first.label is None
    assert load_records(shared_data / "topical_chat" / "valid.jsonl", limit=0) == []
    pairwise = load_records(shared_data / "llmbar" / "natural.jsonl", limit=1)[0]
    assert pairwise.label == "a" and pairwise.scores == {} and pairwise.group_id is None


def test_record_is_frozen_and_hashable() -> None:
    record = _rec("a", "g", coherence=1.0)
    with pytest.raises(AttributeError):
        record.id = "b"  # type: ignore[misc]
    assert len({record, _rec("a", "g", coherence=1.0)}) == 1


# ---------------------------------------------------------------- JSONL / list errors


def test_malformed_json_reports_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.jsonl", [json.dumps(_row()), "", '{"id": "r2", "inputs": '])
    with pytest.raises(DataFormatError, match=r"d\.jsonl, line 3: malformed JSON") as info:
        load_records(path)
    assert info.value.location.endswith("line 3")
    assert isinstance(info.value, ValueError)


def test_json_array_file_gets_a_hint(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.json", ["[", json.dumps(_row()), "]"])
    with pytest.raises(DataFormatError, match="JSON array"):
        load_records(path)


@pytest.mark.parametrize(
    ("row", "field", "expected"),
    [
        ({"inputs": {"a": "x"}}, "id", "missing; expected a non-empty string"),
        (_row(id=""), "id", "expected a non-empty string"),
        (_row(id=7), "id", r"expected a non-empty string, got 7 \(int\)"),
        ({"id": "r1"}, "inputs", "missing; expected an object of text fields"),
        (_row(inputs={}), "inputs", "expected a non-empty object"),
        (_row(inputs={"a": 1}), "inputs.a", r"expected a string, got 1 \(int\)"),
        (_row(scores={"coherence": "high"}), "scores.coherence", "expected a number, got 'high'"),
        (_row(scores={"coherence": True}), "scores.coherence", "expected a number"),
        (_row(scores={"coherence": float("nan")}), "scores.coherence", "expected a finite number"),
        (_row(scores=[1, 2]), "scores", "expected an object"),
        (_row(label="A"), "label", r"expected 'a', 'b', 'tie' or null, got 'A'"),
        (_row(label=1), "label", "expected 'a', 'b', 'tie' or null"),
        (_row(group_id=3), "group_id", "expected a string or null"),
        (_row(meta="x"), "meta", "expected an object"),
        (_row(score={"coherence": 1}), "score", "unknown field"),
    ],
)
def test_record_errors_name_line_field_and_expectation(
    tmp_path: Path, row: dict[str, Any], field: str, expected: str
) -> None:
    path = _write(tmp_path / "bad.jsonl", [json.dumps(_row(id="ok")), json.dumps(row)])
    with pytest.raises(DataFormatError, match=expected) as info:
        load_records(path)
    message = str(info.value)
    assert "bad.jsonl, line 2" in message
    assert f"field '{field}'" in message
    assert info.value.field == field


def test_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.jsonl", [json.dumps(_row()), json.dumps(_row())])
    with pytest.raises(DataFormatError, match=r"line 2: field 'id': duplicate id 'r1'.*line 1"):
        load_records(path)


def test_in_memory_records_and_their_errors() -> None:
    records = load_records([_row(id="a"), _row(id="b", label="tie", scores=None)])
    assert [r.id for r in records] == ["a", "b"]
    assert records[1].label == "tie" and records[1].scores == {}
    with pytest.raises(DataFormatError, match=r"records\[1\]: field 'scores.coherence'"):
        load_records([_row(id="a"), _row(id="b", scores={"coherence": "x"})])
    with pytest.raises(DataFormatError, match=r"records\[0\]: expected an object"):
        load_records(["not a dict"])  # type: ignore[list-item]


def test_load_argument_errors(tmp_path: Path) -> None:
    path = _write(tmp_path / "d.jsonl", [json.dumps(_row())])
    with pytest.raises(ValueError, match="limit"):
        load_records(path, limit=-1)
    with pytest.raises(ValueError, match=r"\['summary'\] are listed both in fields="):
        load_records(path, fields=["summary"], scores=["summary"])
    with pytest.raises(FileNotFoundError):
        load_records(tmp_path / "missing.jsonl")


# ------------------------------------------------------------------------------ CSV


def test_csv_layout(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text(
        "\ufeffid,group_id,system_id,inputs.source,response,scores.overall,scores.fluency,label,meta.note\n"
        'r1,g1,sysA,"multi\nline source",hi,4.5,3,,n1\n'
        "r2,,,src,there,2,,tie,\n",
        encoding="utf-8",
    )
    records = load_records(path, fields=["response"])
    assert [r.id for r in records] == ["r1", "r2"]
    first, second = records
    assert first.inputs == {"source": "multi\nline source", "response": "hi"}
    assert first.scores == {"overall": 4.5, "fluency": 3.0}
    assert first.group_id == "g1" and first.system_id == "sysA" and first.label is None
    assert first.meta == {"note": "n1"}
    assert second.group_id is None and second.system_id is None
    assert second.scores == {"overall": 2.0}  # empty cell = no score
    assert second.label == "tie" and second.meta == {}


def test_csv_non_numeric_score_reports_line_after_multiline_row(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text(
        'id,inputs.text,scores.overall\nr1,"two\nlines",3\nr2,ok,great\n', encoding="utf-8"
    )
    with pytest.raises(DataFormatError, match=r"d\.csv, line 4: field 'scores.overall': "):
        load_records(path)
    with pytest.raises(DataFormatError, match="expected a number, got 'great'"):
        load_records(path)
    # A multi-line row is located by its first line.
    path.write_text(
        'id,inputs.text,scores.overall\nr1,"two\nlines",3\nr2,"three\nmore\nlines",bad\n',
        encoding="utf-8",
    )
    with pytest.raises(DataFormatError, match=r"d\.csv, line 4: field 'scores.overall'"):
        load_records(path)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("id,text\nr1,x\n", r"line 1: field 'text': unknown column"),
        ("group_id,inputs.text\ng,x\n", r"field 'id': missing required column"),
        ("id,scores.a\nr1,1\n", "no input column"),
        ("id,inputs.t\nr1,x,extra\n", r"line 2: expected 2 columns"),
        ("id,inputs.t,label\nr1,x,c\n", r"line 2: field 'label': expected 'a', 'b', 'tie'"),
        ("id,inputs.t\n,x\n", r"line 2: field 'id': expected a non-empty string"),
        ("", "empty CSV file"),
    ],
)
def test_csv_errors(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "d.csv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataFormatError, match=expected):
        load_records(path)


# ------------------------------------------------------------------------ validation


def test_validate_missing_field_lists_present_fields() -> None:
    records = [_rec("a", coherence=1.0)]
    with pytest.raises(ValueError, match=r"record 'a': missing input field 'summary' \(has: x\)"):
        validate_records(records, required_fields=["x", "summary"])
    validate_records(records, required_fields=["x"])


def test_validate_score_range_and_aspect() -> None:
    records = [_rec("a", coherence=1.0), _rec("b", coherence=6.0, fluency=2.0)]
    with pytest.raises(
        ValueError, match=r"record 'b': score 'coherence' = 6 outside range \[1, 5\]"
    ):
        validate_records(records, required_fields=[], aspect="coherence", score_range=(1, 5))
    with pytest.raises(
        ValueError, match=r"record 'a': no score for aspect 'fluency' \(has: coherence\)"
    ):
        validate_records(records, required_fields=[], aspect="fluency")
    # Without an aspect the range applies to every score.
    with pytest.raises(ValueError, match="'coherence' = 6"):
        validate_records(records, required_fields=[], score_range=(1, 5))
    validate_records(records[:1], required_fields=["x"], aspect="coherence", score_range=(1, 5))


def test_validate_pairwise_labels() -> None:
    good = Record("a", None, None, {"x": "1"}, label="tie")
    missing = Record("b", None, None, {"x": "1"})
    bad = Record("c", None, None, {"x": "1"}, label="A")  # type: ignore[arg-type]
    validate_records([good], required_fields=["x"], pairwise=True)
    with pytest.raises(ValueError, match=r"record 'b': missing pairwise label None") as info:
        validate_records([good, missing, bad], required_fields=["x"], pairwise=True)
    assert "record 'c': invalid pairwise label 'A'" in str(info.value)


def test_validate_reports_count_of_further_problems_and_bad_arguments() -> None:
    records = [_rec(f"r{i}") for i in range(8)]
    with pytest.raises(ValueError, match=r"and 3 more problems"):
        validate_records(records, required_fields=["missing"])
    with pytest.raises(ValueError, match="no records"):
        validate_records([], required_fields=["x"])
    with pytest.raises(ValueError, match="duplicate id"):
        validate_records([_rec("a"), _rec("a")], required_fields=["x"])
    with pytest.raises(TypeError, match="single string"):
        validate_records(records, required_fields="x")
    with pytest.raises(ValueError, match="low < high"):
        validate_records(records, required_fields=["x"], score_range=(5, 1))


# ------------------------------------------------------------------------- splitting


def test_split_is_deterministic_and_keeps_groups_together(shared_data: Path) -> None:
    records = load_records(shared_data / "topical_chat" / "full.jsonl")
    first, second = split_records(records, fraction=0.5, seed=3)
    again = split_records(records, fraction=0.5, seed=3)
    assert (first, second) == again
    assert {r.id for r in first}.isdisjoint({r.id for r in second})
    assert len(first) + len(second) == len(records)
    assert {r.group_id for r in first}.isdisjoint({r.group_id for r in second})
    assert len(first) == 180  # 60 groups of 6 split exactly in half
    # Input order is preserved on each side, and the result ignores the input order.
    positions = {r.id: i for i, r in enumerate(records)}
    assert [positions[r.id] for r in first] == sorted(positions[r.id] for r in first)
    shuffled_first, _ = split_records(list(reversed(records)), fraction=0.5, seed=3)
    assert {r.id for r in shuffled_first} == {r.id for r in first}
    other, _ = split_records(records, fraction=0.5, seed=4)
    assert {r.id for r in other} != {r.id for r in first}


def test_split_fraction_by_record_and_ungrouped(shared_data: Path) -> None:
    records = load_records(shared_data / "llmbar" / "natural.jsonl")  # group_id is null
    first, second = split_records(records, fraction=0.3, seed=0)
    assert (len(first), len(second)) == (30, 70)
    topical = load_records(shared_data / "topical_chat" / "valid.jsonl")
    a, b = split_records(topical, fraction=0.25, seed=1, by_group=False)
    assert len(a) == 45
    assert {r.group_id for r in a} & {r.group_id for r in b}  # groups may straddle


def test_split_errors() -> None:
    records = [_rec("a", "g"), _rec("b", "g")]
    with pytest.raises(ValueError, match="only 1 group unit"):
        split_records(records, fraction=0.5, seed=0)
    for fraction in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="strictly between 0 and 1"):
            split_records(records, fraction=fraction, seed=0, by_group=False)
    with pytest.raises(ValueError, match="seed"):
        split_records(records, fraction=0.5, seed=-1, by_group=False)
    with pytest.raises(ValueError, match="unique"):
        split_records([_rec("a"), _rec("a")], fraction=0.5, seed=0, by_group=False)


def test_group_ids_fall_back_to_record_id() -> None:
    records = [_rec("a", "g1"), _rec("b"), _rec("c", "g1")]
    assert group_ids(records) == ["g1", "b", "g1"]


# ---------------------------------------------------------------------- plain layout


def test_plain_csv_layout_needs_the_task_to_name_columns(tmp_path: Path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text(
        "question,answer,helpfulness\nWhy?,Because.,4\nHow?,Somehow.,\n", encoding="utf-8"
    )
    with pytest.raises(DataFormatError, match=r"field 'question': unknown column.*docs/tasks.md"):
        load_records(path)
    records = load_records(path, fields=["question", "answer"], scores=["helpfulness"])
    assert [r.id for r in records] == ["mine.csv:2", "mine.csv:3"]
    assert records[0].inputs == {"question": "Why?", "answer": "Because."}
    assert records[0].scores == {"helpfulness": 4.0} and records[1].scores == {}
    with pytest.raises(DataFormatError, match=r"unknown column.*input columns are \['answer'\]"):
        load_records(path, fields=["answer"], scores=["helpfulness"])
    bad = tmp_path / "bad.csv"
    bad.write_text("question,answer,helpfulness\nWhy?,Because.,good\n", encoding="utf-8")
    with pytest.raises(DataFormatError, match=r"bad.csv, line 2: field 'scores.helpfulness'"):
        load_records(bad, fields=["question", "answer"], scores=["helpfulness"])


def test_a_missing_csv_column_names_the_file_and_the_field(tmp_path: Path) -> None:
    """Issue 34: a CSV without one of the task's input columns was refused later, naming the
    field but not the file. The loader names the file, the line, the field and the columns
    the file has; ``inputs.<name>`` counts as the column."""
    path = tmp_path / "mine.csv"
    path.write_text("question,helpfulness\nWhy?,4\n", encoding="utf-8")
    with pytest.raises(DataFormatError) as err:
        load_records(path, fields=["question", "answer"], scores=["helpfulness"])
    assert str(err.value).startswith(f"{path}, line 1: field 'answer': missing column")
    assert "the file's columns are question, helpfulness" in str(err.value)
    assert err.value.field == "answer" and err.value.location == f"{path}, line 1"
    schema = tmp_path / "schema.csv"
    schema.write_text("question,inputs.answer,helpfulness\nWhy?,So.,4\n", encoding="utf-8")
    records = load_records(schema, fields=["question", "answer"], scores=["helpfulness"])
    assert records[0].inputs == {"question": "Why?", "answer": "So."}


def test_plain_jsonl_layout_with_a_score_key(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "d.jsonl",
        [
            json.dumps({"question": "Why?", "answer": "Because.", "score": 4}),
            json.dumps(
                {"id": "x2", "question": "How?", "answer": "So.", "score": 2.5, "group_id": "g"}
            ),
        ],
    )
    with pytest.raises(DataFormatError, match=r"line 1: field 'question': unknown field"):
        load_records(path)
    records = load_records(path, fields=["question", "answer"], scores={"score": "helpful"})
    assert [r.id for r in records] == ["d.jsonl:1", "x2"]
    assert records[0].scores == {"helpful": 4.0} and records[1].group_id == "g"
    # The schema layout still loads unchanged when the plain names are given.
    schema = _write(tmp_path / "s.jsonl", [json.dumps(_row())])
    assert load_records(schema, fields=["question"], scores=["score"]) == load_records(schema)
    with pytest.raises(DataFormatError, match="expected a string"):
        load_records(
            [{"question": 3, "answer": "a", "score": 1}],
            fields=["question", "answer"],
            scores=["score"],
        )
