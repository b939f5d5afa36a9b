"""The benchmark scripts' plumbing (``judgeopt_lab``): whole-group samples, intervals,
tables, atomic JSON, interruptible runs and the judged-item files a resumed run reads."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest


def _records(groups: dict[str, int]) -> list:
    from judgeopt.data import Record

    return [
        Record(id=f"{g}-{i}", group_id=g, system_id=None, inputs={}, scores={"a": float(i)})
        for g, n in groups.items()
        for i in range(n)
    ]


def test_sample_groups_takes_whole_groups_in_file_order() -> None:
    from judgeopt_lab import sample_groups

    records = _records({"g1": 3, "g2": 2, "g3": 4, "g4": 1})
    picked = sample_groups(records, 4, seed=0)
    assert len(picked) >= 4 and picked == [r for r in records if r in picked]
    for g in {r.group_id for r in picked}:  # whole groups only
        assert sum(r.group_id == g for r in picked) == sum(r.group_id == g for r in records)
    assert sample_groups(records, 4, seed=0) == picked  # seeded
    cut = sample_groups(records, 4, seed=0, cut=True)
    assert len(cut) == 4 and {r.id for r in cut} <= {r.id for r in picked}
    # Without a group id, a record is a group of its own.
    from judgeopt.data import Record

    loose = [Record(id=str(i), group_id=None, system_id=None, inputs={}) for i in range(5)]
    assert len(sample_groups(loose, 3, seed=1)) == 3


def test_normal_interval_and_markdown_table() -> None:
    from judgeopt_lab import markdown_table, normal_interval

    lo, hi = normal_interval([1.0, 2.0, 3.0])
    half = 1.96 * 1.0 / math.sqrt(3)
    assert lo == pytest.approx(2.0 - half) and hi == pytest.approx(2.0 + half)
    assert all(math.isnan(x) for x in normal_interval([1.0]))
    assert markdown_table(["a", "b"], [[1, "x"], [None, 2.5]]) == (
        "| a | b |\n|---|---|\n| 1 | x |\n| None | 2.5 |"
    )


def test_write_json_creates_the_folder_and_leaves_no_temporary(tmp_path: Path) -> None:
    from judgeopt_lab import write_json

    out = write_json(tmp_path / "a" / "b.json", {"x": 1}, indent=None, provenance_key=None)
    assert out.read_text(encoding="utf-8") == '{"x": 1}\n'
    assert [p.name for p in out.parent.iterdir()] == ["b.json"]


def test_a_result_records_the_commit_and_the_command_that_made_it(tmp_path: Path) -> None:
    import re
    import sys

    from judgeopt_lab import write_json

    data = json.loads(write_json(tmp_path / "r.json", {"x": 1}).read_text(encoding="utf-8"))
    made = data.pop("provenance")
    assert data == {"x": 1}
    assert made["command"][1:] == sys.argv[1:]
    # The project is a git checkout in development and in CI (a fresh clone).
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", made["commit"]), made
    stated = {"x": 1, "provenance": "kept"}
    again = json.loads(write_json(tmp_path / "s.json", stated).read_text(encoding="utf-8"))
    assert again == stated
    assert json.loads(write_json(tmp_path / "l.json", [1]).read_text(encoding="utf-8")) == [1]


def test_run_interruptible_returns_130_on_ctrl_c_and_sigterm() -> None:
    import os
    import signal

    from judgeopt_lab import EXIT_INTERRUPTED, run_interruptible

    stops: list[str] = []
    assert run_interruptible(lambda: 7, on_stop=lambda: stops.append("x")) == 7 and not stops

    def ctrl_c() -> int:
        raise KeyboardInterrupt

    assert run_interruptible(ctrl_c, on_stop=lambda: stops.append("int")) == EXIT_INTERRUPTED

    def sigterm() -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        return 0

    before = signal.getsignal(signal.SIGTERM)
    assert run_interruptible(sigterm, on_stop=lambda: stops.append("term")) == 130
    assert stops == ["int", "term"] and signal.getsignal(signal.SIGTERM) is before


def test_stored_items_skip_cut_lines_and_failed_calls(tmp_path: Path) -> None:
    from dataclasses import asdict

    from judgeopt.evaluate import ItemResult
    from judgeopt_lab import stored_items, stored_result, strategy_key

    records = _records({"g1": 2, "g2": 2})
    path = tmp_path / "items.jsonl"
    assert stored_items(path) == {} and stored_result(path, records, "dataset") is None
    items = [ItemResult(r.id, r.scores["a"], float(k)) for k, r in enumerate(records)]
    lines = [json.dumps(asdict(i)) for i in items[:3]]
    lines.append(json.dumps(asdict(ItemResult(records[3].id, 1.0, None, error="timeout"))))
    path.write_text("\n".join(lines) + '\n{"id": "cut', encoding="utf-8")
    assert set(stored_items(path)) == {r.id for r in records[:3]}
    assert stored_result(path, records, "dataset") is None  # one record not judged
    with path.open("a", encoding="utf-8") as fh:
        fh.write("\n" + json.dumps(asdict(items[3])) + "\n")
    res = stored_result(path, records, "dataset")
    assert res is not None and [i.id for i in res.items] == [r.id for r in records]
    key = strategy_key({"scale": 10, "cot": "none"})
    assert key == strategy_key({"cot": "none", "scale": 10}) and len(key) == 16
