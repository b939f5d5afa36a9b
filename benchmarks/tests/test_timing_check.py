"""benchmarks/timing_check.py without a model: the replay of the recorded compiles' time
model rows, and the summary of a run's rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import timing_check as tc

RESULTS = Path(tc.__file__).with_name("results")


def test_the_replay_at_cost_zero_is_the_time_model_the_compiles_recorded() -> None:
    """The rows' tokens are got back from their two recorded predictions: at a reused-token
    cost of 0 the replay gives each compile's recorded error again."""
    replay = tc.recorded_replay(RESULTS, costs=(0.0, 0.1))
    assert len(replay["rows"]) == len(tc.RECORDED)
    for row, (name, keys) in zip(replay["rows"], tc.RECORDED, strict=True):
        node = json.loads((RESULTS / name).read_text(encoding="utf-8"))
        for key in keys:
            node = node[key]
        assert row["mean_abs_error"]["0.0"] == pytest.approx(node["computed_error"], abs=1e-4)
        assert row["mean_abs_error"]["0.1"] != row["mean_abs_error"]["0.0"]


def _row(actual: float, *errors: float) -> dict[str, object]:
    arms = ("one_batch", "rounds", "rounds_reused")
    return {
        "actual": actual,
        **{
            a: {"predicted": actual * (1 + e), "error": e}
            for a, e in zip(arms, errors, strict=True)
        },
    }


def test_the_summary_pairs_the_arms_row_by_row() -> None:
    pairs = [
        {"strategies": [_row(3.0, 0.5, 0.1, 0.1), _row(1.0, -0.2, -0.1, 0.0)]},
        {"strategies": [_row(2.0, 0.0, 0.2, 0.2), _row(1.0, 0.3, 0.3, -0.1)]},
    ]
    summary = tc.summarise(pairs)
    assert summary["all"]["rows"] == 4
    assert summary["all"]["one_batch_mean_abs_error"] == pytest.approx(0.25)
    assert summary["all"]["rounds_mean_abs_error"] == pytest.approx(0.175)
    assert summary["all"]["difference"] == pytest.approx(-0.075)
    assert summary["all"]["rounds_better_rows"] == 2
    assert summary["baseline"]["rows"] == 2 and summary["rate_first"]["rows"] == 2
    assert summary["all_reused"]["rounds_reused_mean_abs_error"] == pytest.approx(0.1)
    assert summary["all_reused"]["rounds_reused_better_rows"] == 2


def test_the_engine_summary_pairs_the_arms_and_adds_each_pairs_totals() -> None:
    def row(actual: float, old: float, new: float) -> dict[str, object]:
        return {
            "actual": actual,
            "one_batch": {"predicted": actual * (1 + old), "error": old},
            "engine": {"predicted": actual * (1 + new), "error": new},
        }

    pairs = [
        {"pair": "a:x", "strategies": [row(3.0, 0.5, 0.1), row(1.0, -0.2, -0.1)], "totals": {}},
        {"pair": "b:y", "strategies": [row(2.0, 0.0, 0.2), row(1.0, 0.3, 0.1)], "totals": {}},
    ]
    summary = tc.summarise_engine(pairs)
    assert summary["all"]["rows"] == 4
    assert summary["all"]["one_batch_mean_abs_error"] == pytest.approx(0.25)
    assert summary["all"]["engine_mean_abs_error"] == pytest.approx(0.125)
    assert summary["all"]["difference"] == pytest.approx(-0.125)
    assert summary["all"]["engine_better_rows"] == 3
    assert summary["baseline"]["rows"] == 2 and summary["rate_first"]["rows"] == 2
    assert summary["rate_first"]["engine_mean_abs_error"] == pytest.approx(0.1)
    assert set(summary["totals"]) == {"a:x", "b:y"}
