"""``benchmarks/bank_bound.py``: the guard's lower bound on the committed bank and on the
fresh pairs' compile tables."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _scripts import load_script

import judgeopt_lab
from judgeopt.selection import Pick, RuleInput

bb = load_script("bank_bound")


def test_a_short_replay_writes_every_setting_beside_the_candidate(tmp_path: Path, capsys) -> None:
    out = tmp_path / "bound.json"
    assert bb.main(["--splits", "3", "--n-valid", "100", "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    labels = [label for label, _, _ in bb.settings()]
    assert list(payload["bank"]) == labels and len(labels) == 1 + len(
        bb.RULES["stack+bound"].settings()
    ) + len(bb.RULES["stack+repeat"].settings())
    candidate = payload["bank"][labels[0]]["100"]
    assert candidate["diff"] == 0.0 and candidate["diff_se"] == 0.0
    assert len(candidate["per_pair"]) == len(payload["pairs"]) >= 5
    for row in payload["bank"].values():  # a significant loss is a loss
        for v in row["100"]["per_pair"].values():
            assert 0.0 <= v["sig_worse_share"] <= v["worse_share"]
        assert row["100"]["max_pair_sig_worse_share"] <= row["100"]["max_pair_worse_share"]
    chosen = {v["chosen"] for v in payload["left_out"]["100"]["per_pair"].values()}
    assert chosen <= set(labels)
    assert "| guard |" in capsys.readouterr().out
    # The fresh pairs' tables are the compiles' own: the compile's cross-fitted gain again.
    assert payload["fresh"], "the committed pre-registered compiles are read"
    for name, row in payload["fresh"].items():
        assert row["crossfit_gain"] == pytest.approx(row["compile_crossfit_gain"], abs=1e-9), name
        point = row["settings"][labels[0]]
        assert point["guard_value"] == pytest.approx(row["crossfit_gain"])
        for label, rule, _ in bb.settings()[1:]:
            value = row["settings"][label]["guard_value"]
            if rule == "stack+bound":  # a lower bound is below the point it bounds
                assert value < row["crossfit_gain"]
            else:  # the mean over halvings: another split's estimate of the same gain
                assert abs(value - row["crossfit_gain"]) < 0.2
        # frugal: the candidate or its single best judge, at every tolerance of its grid
        tolerances = {str(s["tolerance"]) for s in bb.RULES["stack+guard+frugal"].settings()}
        assert set(row["frugal"]) == tolerances, name
        for v in row["frugal"].values():
            assert v["ships"] in {"stack", "single", "baseline"}
            assert v["prompts"] >= 1 and (v["ships"] == "stack" or v["prompts"] == 1)
            if v["ships"] == "stack" and row["compile_shipped"] == "ensemble":
                assert v["test_gain"] == row["stack_test_gain"]
            if v["ships"] == "baseline":
                assert v["test_gain"] == 0.0
    # --fresh-only reads the fresh compiles again and keeps the replay as it was
    assert bb.main(["--fresh-only", "--out", str(out)]) == 0
    again = json.loads(out.read_text())
    assert again["bank"] == payload["bank"] and again["fresh"] == payload["fresh"]
    with pytest.raises(SystemExit, match="does not exist"):
        bb.main(["--fresh-only", "--out", str(tmp_path / "none.json")])


def test_left_out_chooses_by_the_worst_of_the_other_pairs() -> None:
    def row(gains: dict[str, float], worse: dict[str, float]) -> dict:
        return {
            "100": {
                "per_pair": {
                    p: {"mean_gain": gains[p], "worse_share": worse[p], "baseline_share": 0.5}
                    for p in gains
                }
            }
        }

    pairs = ["a", "b", "c"]
    rows = {
        "bold": row(dict.fromkeys(pairs, 0.10), {"a": 0.0, "b": 0.3, "c": 0.0}),
        "safe": row(dict.fromkeys(pairs, 0.02), dict.fromkeys(pairs, 0.05)),
    }
    got = bb.left_out(rows, "100")["per_pair"]
    # Left out b, the bold setting is safe on a and c and gains more; otherwise b's 30 % rules
    # it out.
    assert got["b"]["chosen"] == "bold" and got["b"]["worse_share"] == 0.3
    assert got["a"]["chosen"] == got["c"]["chosen"] == "safe"


def test_one_split_is_refused(capsys) -> None:
    with pytest.raises(SystemExit):
        bb.main(["--splits", "1"])
    assert "--splits 1: at least 2" in capsys.readouterr().err


def _test_table(n: int, rho_pick: float, seed: int = 0) -> tuple[RuleInput, Pick]:
    """Test items where the baseline (row 0) correlates 0.6 with the humans and row 1
    ``rho_pick``; the pick is row 1."""
    rng = np.random.default_rng(seed)
    h = rng.standard_normal(n)
    rows = [r * h + np.sqrt(1 - r**2) * rng.standard_normal(n) for r in (0.6, rho_pick)]
    data = RuleInput(human=h, preds=np.asarray(rows), baseline=0, seed=seed)
    return data, Pick((1,))


def test_significantly_worse_counts_only_losses_the_items_can_tell() -> None:
    big, pick = _test_table(400, 0.0)
    assert judgeopt_lab.significantly_worse(pick, big)  # 0.0 against 0.6 on 400 items
    small, pick = _test_table(30, 0.5, seed=1)
    assert not judgeopt_lab.significantly_worse(pick, small)  # a few hundredths on 30 items
    assert not judgeopt_lab.significantly_worse(Pick((0,)), big)  # the baseline never is
    with pytest.raises(ValueError, match="significance=1.5"):
        judgeopt_lab.significantly_worse(pick, small, 1.5)
