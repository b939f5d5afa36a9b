"""The pre-registered default (``benchmarks/default_prereg.json``) and its verdict."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from _scripts import load_script

from judgeopt.selection import RULES
from judgeopt.teleprompt import load_optimizer
from judgeopt_lab import MAX_WORSE_SHARE, fixed_label, prereg_verdict

ROOT = Path(__file__).resolve().parents[1]
PLAN = json.loads((ROOT / "default_prereg.json").read_text(encoding="utf-8"))
CAND = PLAN["candidate"]
PAIRS = sorted(PLAN["stage_1_bank"]["pairs"])

pc = load_script("prereg_check")


def test_the_registered_preset_is_the_registered_rule() -> None:
    preset = load_optimizer(ROOT.parent / CAND["preset"])
    made = RULES[CAND["rule"]].config(CAND["setting"])
    assert made is not None
    assert preset.ensemble == made["ensemble"]
    assert preset.ensemble_stack == made["ensemble_stack"]
    for k, v in made["selection"].items():
        assert getattr(preset.selection, k) == v
    assert preset.candidates == CAND["candidates"]
    assert preset.budget == CAND["budget"]


def test_the_registered_commands_name_the_registered_pairs_and_preset() -> None:
    for cmd in PLAN["stage_1_bank"]["commands"]:
        assert f"--pairs {','.join(PAIRS)}" in cmd
    assert CAND["preset"] in PLAN["stage_2_fresh"]["command"]
    assert ",".join(PLAN["stage_2_fresh"]["pairs"]) in PLAN["stage_2_fresh"]["command"]


def _bank(worse: dict[str, float], gain: float, lcb: float | None) -> dict[str, Any]:
    def entry(g: float, per_pair: dict[str, Any]) -> dict[str, Any]:
        return {"n_valid": {"100": {"mean_gain": g, "per_pair": per_pair}}}

    out = {
        fixed_label(CAND["rule"], CAND["setting"], CAND["candidates"], PAIRS): entry(
            gain, {p: {"worse_share": w, "mean_gain": gain} for p, w in worse.items()}
        )
    }
    if lcb is not None:
        out[fixed_label("lcb", {"alpha": 0.05}, "all", PAIRS)] = entry(lcb, {})
    return out


def _e2e(gains: list[float], worse: list[bool]) -> dict[str, Any]:
    pairs = [p.split(":") for p in PLAN["stage_2_fresh"]["pairs"]]
    return {
        "pairs": [
            {"task": t, "aspect": a, "shipped_gain": g, "shipped_significantly_worse": w}
            for (t, a), g, w in zip(pairs, gains, worse, strict=False)
        ]
    }


def test_nothing_run_leaves_every_criterion_pending() -> None:
    v = prereg_verdict(PLAN, {}, {})
    assert {c["status"] for c in v["criteria"].values()} == {"pending"}
    assert set(v["criteria"]) == {"S1", "S2", "S3", "F1", "F2"}
    assert v["decision"] == "open"


def test_every_criterion_met_adopts_the_candidate() -> None:
    bank = _bank({p: MAX_WORSE_SHARE for p in PAIRS}, 0.03, 0.01)
    v = prereg_verdict(PLAN, bank, _e2e([0.05, 0.0, -0.01], [False] * 3))
    assert {k: c["status"] for k, c in v["criteria"].items()} == dict.fromkeys(v["criteria"], "met")
    assert v["criteria"]["F2"]["value"]["mean"] == pytest.approx(0.04 / 3)
    assert v["decision"] == "adopt"


@pytest.mark.parametrize(
    ("bank_args", "e2e_args", "failed"),
    [
        (({PAIRS[0]: 0.105, PAIRS[1]: 0.0}, 0.03, 0.01), ([0.1] * 3, [False] * 3), "S1"),
        (({p: 0.0 for p in PAIRS}, 0.0, -0.01), ([0.1] * 3, [False] * 3), "S2"),
        (({p: 0.0 for p in PAIRS}, 0.02, 0.021), ([0.1] * 3, [False] * 3), "S3"),
        (({p: 0.0 for p in PAIRS}, 0.02, 0.0), ([0.1, 0.1, -0.15], [False, False, True]), "F1"),
        (({p: 0.0 for p in PAIRS}, 0.02, 0.0), ([0.01, 0.0, -0.02], [False] * 3), "F2"),
    ],
)
def test_one_failed_criterion_keeps_the_shipped_default(bank_args, e2e_args, failed) -> None:
    v = prereg_verdict(PLAN, _bank(*bank_args), _e2e(*e2e_args))
    assert v["criteria"][failed]["status"] == "not met"
    assert [k for k, c in v["criteria"].items() if c["status"] != "met"] == [failed]
    assert v["decision"] == "keep the shipped default"


def test_a_harmful_pair_decides_before_the_others_are_tested() -> None:
    v = prereg_verdict(PLAN, {}, _e2e([-0.2], [True]))
    assert v["criteria"]["F1"]["status"] == "not met"
    assert v["criteria"]["F2"]["status"] == "pending"
    assert v["decision"] == "keep the shipped default"


def test_a_pair_missing_from_the_bank_row_fails_s1() -> None:
    bank = _bank({PAIRS[0]: 0.0}, 0.05, 0.0)
    v = prereg_verdict(PLAN, bank, {})
    assert v["criteria"]["S1"]["status"] == "not met"


def test_the_script_writes_the_verdict(tmp_path: Path, capsys) -> None:
    bank, e2e = tmp_path / "bank.json", tmp_path / "e2e.json"
    bank.write_text(json.dumps(_bank({p: 0.0 for p in PAIRS}, 0.02, 0.0)))
    e2e.write_text(json.dumps(_e2e([0.1, 0.1], [False, False])))
    out = tmp_path / "verdict.json"
    assert pc.main(["--bank", str(bank), "--e2e", str(e2e), "--out", str(out)]) == 0
    got = json.loads(out.read_text())
    assert got["decision"] == "open" and got["criteria"]["F2"]["status"] == "pending"
    assert got["plan"] == "default_prereg.json" and "commit" in got["provenance"]
    assert "decision: open" in capsys.readouterr().out


def test_a_plan_that_is_not_there_is_named(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        pc.main(["--plan", str(tmp_path / "nope.json"), "--out", str(tmp_path / "v.json")])
    assert "nope.json" in capsys.readouterr().err


def test_the_plan_is_not_changed_by_a_verdict() -> None:
    plan = copy.deepcopy(PLAN)
    prereg_verdict(plan, {}, _e2e([0.1] * 3, [False] * 3))
    assert plan == PLAN


def test_beside_reports_the_gain_where_the_baseline_rated_and_the_cost() -> None:
    e2e = _e2e([0.4, 0.1], [False, False])
    first = e2e["pairs"][0]
    first |= {
        "shipped": "ensemble",
        "shipped_gain_ci": [0.2, 0.5],
        "rated_by_baseline": {
            "n_items": 159,
            "n_test": 200,
            "chosen": {"gain": 0.37, "gain_ci": [0.22, 0.51]},
            "ensemble": {"gain": 0.36, "gain_ci": [0.25, 0.46]},
        },
        "cost_per_item": {"shipped": {"calls": 6.0, "seconds": 36.4}},
    }
    beside = pc.stage_2_beside(PLAN, e2e)
    names = PLAN["stage_2_fresh"]["pairs"]
    assert list(beside) == names[:2]  # the untested third pair is not there
    got = beside[names[0]]
    # The shipped judge is the ensemble: its rated-items gain, not the chosen single judge's.
    assert got["rated_by_baseline"] == {
        "n_items": 159,
        "n_test": 200,
        "gain": 0.36,
        "gain_ci": [0.25, 0.46],
    }
    assert (got["calls_per_item"], got["seconds_per_item"]) == (6.0, 36.4)
    assert beside[names[1]]["rated_by_baseline"] is None
    rows = pc._beside_rows(beside)
    assert rows[0][3] == "+0.360 [+0.250, +0.460] on 159 of 200"
    # No criterion reads it: the verdict is the same with or without these fields.
    assert prereg_verdict(PLAN, {}, e2e) == prereg_verdict(PLAN, {}, _e2e([0.4, 0.1], [False] * 2))
