"""benchmarks/injection.py: the target's figures for a pair, and the merge of runs, on
hand-made robustness reports whose every number is known."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import injection
from judgeopt.data import Record


def _records(n_groups: int = 6, per: int = 4) -> list[Record]:
    return [
        Record(
            id=f"g{g}i{i}",
            group_id=f"g{g}",
            system_id=f"s{i}",
            inputs={"summary": f"text {g} {i}"},
            scores={"coherence": float(i + 1)},
        )
        for g in range(n_groups)
        for i in range(per)
    ]


def _report(records: list[Record], success: float, noisy: bool) -> dict[str, Any]:
    scores = {
        r.id: r.scores["coherence"] + (1.5 * (sum(map(ord, r.id)) % 3 - 1) if noisy else 0.0)
        for r in records
    }
    return {
        "metric": "spearman",
        "clean": {"spearman": 0.5 if noisy else 1.0, "level": "group"},
        "mean_success": success,
        "clean_scores": scores,
        "attacks": [],
    }


@pytest.mark.parametrize(
    ("base_success", "defended_success", "defended_noisy", "met"),
    [(0.8, 0.1, False, True), (0.8, 0.3, False, False), (0.8, 0.1, True, False)],
)
def test_the_target_needs_both_a_quarter_of_the_attacks_and_the_clean_agreement(
    base_success: float, defended_success: float, defended_noisy: bool, met: bool
) -> None:
    records = _records()
    row = {
        "aspect": "coherence",
        "judges": {
            "baseline": _report(records, base_success, noisy=False),
            injection.DEFENDED: _report(records, defended_success, noisy=defended_noisy),
        },
    }
    out = injection.pair_summary(row, records, "local", seed=0)
    assert out["met"] is met
    assert out["baseline"] == {
        "attack_success": base_success,
        "attack_success_up": None,
        "clean_corr": 1.0,
    }
    assert out["defended"]["strategy"] == injection.DEFENDED
    assert out["n_paired"] == len(records) and out["clean_corr_diff_se"] >= 0
    assert out["n_units"] == 6
    if not defended_noisy:
        assert out["clean_corr_diff"] == pytest.approx(0.0)
    else:
        assert out["clean_corr_diff"] < -out["clean_corr_diff_se"]


def test_too_few_groups_decide_nothing() -> None:
    records = _records(n_groups=2)
    row = {
        "aspect": "coherence",
        "judges": {
            "baseline": _report(records, 0.8, noisy=False),
            injection.DEFENDED: _report(records, 0.0, noisy=False),
        },
    }
    out = injection.pair_summary(row, records, "local", seed=0)
    assert out["met"] is None and "2 group(s)" in out["met_note"]


def test_a_pair_without_both_judges_has_no_target_row() -> None:
    records = _records()
    row = {"aspect": "coherence", "judges": {"baseline": _report(records, 0.5, False)}}
    assert injection.pair_summary(row, records, "local", seed=0) == {}


def test_runs_merge_into_the_target_file(tmp_path: Path) -> None:
    """The merge redraws each pair's items (as the run did) and computes the figures again."""
    records = injection.pair_records("summeval", 24, 0)
    runs = []
    for model in ("local", "local:qwen2.5-coder-0.5b"):
        row: dict[str, Any] = {"task": "summeval", "aspect": "coherence", "n": len(records)}
        row["judges"] = {
            "baseline": _report(records, 0.8, False),
            injection.DEFENDED: _report(records, 0.1, False),
        }
        row.update(injection.pair_summary(row, records, model, seed=0))
        path = tmp_path / f"{model.replace(':', '_')}.json"
        payload = {"suite_version": "injection-1", "model": model, "settings": {}}
        path.write_text(json.dumps({**payload, "pairs": [row]}))
        runs.append(str(path))
    out = tmp_path / "injection.json"
    assert injection.main(["--merge", *runs, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["suite_version"] == "injection-1" and data["met"] == "0 of 2 pair-model rows"
    # 24 SummEval summaries are two articles' worth: too few groups to decide the target.
    assert all(p["met"] is None and p["n_units"] == 2 for p in data["pairs"])
    assert [p["model"] for p in data["pairs"]] == ["local", "local:qwen2.5-coder-0.5b"]
    for p in data["pairs"]:
        assert {"task", "aspect", "model", "baseline", "defended"} <= set(p)
        assert {"clean_corr_diff", "clean_corr_diff_se"} <= set(p)
    assert "provenance" in data


def test_other_defended_judges_are_reported_beside_the_registered_one() -> None:
    records = _records()
    row = {
        "aspect": "coherence",
        "judges": {
            "baseline": _report(records, 0.8, noisy=False),
            injection.DEFENDED: _report(records, 0.3, noisy=False),
            "rate_first_datamarked": _report(records, 0.1, noisy=False),
            "rate_first": _report(records, 0.0, noisy=False),  # undefended: not a defence
        },
    }
    out = injection.pair_summary(row, records, "local", seed=0)
    # The registered judge decides the target; the other is beside it, never in its place.
    assert out["defended"]["strategy"] == injection.DEFENDED and out["met"] is False
    other = out["other_defended"]
    assert list(other) == ["rate_first_datamarked"]
    assert other["rate_first_datamarked"]["met"] is True
    assert other["rate_first_datamarked"]["defended"]["attack_success"] == 0.1
    assert "other_defended" not in other["rate_first_datamarked"]


def test_a_run_for_one_more_judge_keeps_the_judges_already_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _records()
    judged: list[str] = []

    class Report:
        def __init__(self, name: str) -> None:
            self.name = name

        def to_dict(self) -> dict[str, Any]:
            return _report(records, 0.1, noisy=False)

        def lines(self) -> list[str]:
            return [self.name]

    def fake_robustness(judge: str, recs: Any, **kw: Any) -> Report:
        judged.append(judge)
        return Report(judge)

    monkeypatch.setattr(injection, "make_lm", lambda *a, **k: None)
    monkeypatch.setattr(injection, "pair_records", lambda *a, **k: records)
    monkeypatch.setattr(injection, "judges", lambda t, a, names, lm, *rest: {n: n for n in names})
    monkeypatch.setattr(injection, "robustness", fake_robustness)
    out = tmp_path / "run.json"
    old = {"baseline": _report(records, 0.8, noisy=False)}
    old[injection.DEFENDED] = _report(records, 0.3, noisy=False)
    out.write_text(
        json.dumps(
            {
                "suite_version": "injection-1",
                "model": "local",
                "pairs": [{"task": "t", "aspect": "coherence", "n": len(records), "judges": old}],
            }
        )
    )
    args = ["--pairs", "t:coherence", "--judges", "rate_first_datamarked", "--json", str(out)]
    assert injection.main(args) == 0
    assert judged == ["rate_first_datamarked"]
    row = json.loads(out.read_text())["pairs"][0]
    assert set(row["judges"]) == {"baseline", injection.DEFENDED, "rate_first_datamarked"}
    assert row["other_defended"]["rate_first_datamarked"]["met"] is True


def test_the_pushes_up_are_averaged_apart() -> None:
    report = {
        "attacks": [
            {"attack": "a", "direction": 1, "success": 0.5},
            {"attack": "b", "direction": 1, "success": None},  # nothing left a rating
            {"attack": "c", "direction": 1, "success": 0.1},
            {"attack": "d", "direction": -1, "success": 1.0},
        ]
    }
    assert injection.up_success(report) == pytest.approx(0.3)
    assert injection.up_success({"attacks": []}) is None


def test_the_calibration_items_are_clean_items_of_other_groups() -> None:
    """The calibrated screen's threshold is set on items none of which is attacked: SummEval
    (one file) gives other articles; a pair with a split gives its validation file."""
    for task in ("summeval", "topical_chat"):
        attacked = injection.pair_records(task, 24, 0)
        calib = injection.calibration_records(task, attacked, injection.CALIBRATION_ITEMS, 0)
        assert len(calib) == injection.CALIBRATION_ITEMS
        groups = {r.group_id or r.id for r in attacked}
        assert not groups & {r.group_id or r.id for r in calib}
        assert not {r.id for r in attacked} & {r.id for r in calib}


def test_held_out_items_touch_no_group_of_the_items_read_before() -> None:
    """``--avoid-seed 0``: the held-out items come from groups the seed-0 items (at the same
    limit) do not touch; the draw is the same every time."""
    for task, n in injection.HELD_OUT["limits"].items():
        seen = injection.pair_records(task, n, 0)
        fresh = injection.pair_records(task, n, 1, avoid_seed=0)
        assert len(fresh) == n
        assert not {r.group_id or r.id for r in seen} & {r.group_id or r.id for r in fresh}
        assert [r.id for r in fresh] == [r.id for r in injection.pair_records(task, n, 1, 0)]
    assert {p.split(":")[0] for p in injection.HELD_OUT["pairs"].split(",")} == set(
        injection.HELD_OUT["limits"]
    )


def test_held_out_runs_merge_apart(tmp_path: Path) -> None:
    records = injection.pair_records("topical_chat", 16, 0)
    fresh = injection.pair_records("topical_chat", 16, 1, avoid_seed=0)
    runs = []
    for name, recs, settings in (
        ("seen", records, {"seed": 0}),
        ("fresh", fresh, {"seed": 1, "avoid_seed": 0}),
    ):
        row: dict[str, Any] = {"task": "topical_chat", "aspect": "naturalness", "n": len(recs)}
        row["judges"] = {
            "baseline": _report(recs, 0.8, False),
            injection.DEFENDED: _report(recs, 0.1, False),
            "rate_first_vetted_calibrated": _report(recs, 0.1, False),
        }
        path = tmp_path / f"{name}.json"
        payload = {"suite_version": "injection-1", "model": "local", "settings": settings}
        path.write_text(json.dumps({**payload, "pairs": [row]}))
        runs.append(str(path))
    out = tmp_path / "injection.json"
    assert injection.main(["--merge", *runs, "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["pairs"]) == 1 and len(data["held_out_pairs"]) == 1
    assert data["held_out_pairs"][0]["settings"]["avoid_seed"] == 0
    assert data["met_held_out"] == "1 of 1 pair-model rows"
    assert data["met_beside_held_out"] == {"rate_first_vetted_calibrated": "1 of 1 pair-model rows"}
    assert data["held_out"] == injection.HELD_OUT


def test_a_row_without_the_registered_judge_is_kept_for_the_judges_beside_it(
    tmp_path: Path,
) -> None:
    """A held-out pair judged by the baseline and a judge beside the registered one only (the
    registered judge not run there): the merge keeps the row, its registered figures empty and
    undecided, and counts it for the judge beside it, not for the registered one."""
    recs = injection.pair_records("topical_chat", 16, 1, avoid_seed=0)
    row: dict[str, Any] = {"task": "topical_chat", "aspect": "naturalness", "n": len(recs)}
    row["judges"] = {
        "baseline": _report(recs, 0.8, False),
        "rate_first_vetted_calibrated": _report(recs, 0.1, False),
    }
    summary = injection.pair_summary(row, recs, "local", seed=1)
    assert summary["defended"] is None and summary["met"] is None
    assert injection.DEFENDED in summary["met_note"]
    beside = summary["other_defended"]["rate_first_vetted_calibrated"]
    assert summary["baseline"] == beside["baseline"]
    path = tmp_path / "fresh.json"
    payload = {"suite_version": "injection-1", "model": "local"}
    path.write_text(
        json.dumps({**payload, "settings": {"seed": 1, "avoid_seed": 0}, "pairs": [row]})
    )
    out = tmp_path / "injection.json"
    assert injection.main(["--merge", str(path), "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["held_out_pairs"]) == 1 and data["met_held_out"] == "0 of 0 pair-model rows"
    assert data["met_beside_held_out"] == {"rate_first_vetted_calibrated": "1 of 1 pair-model rows"}
