"""``benchmarks/bank_fixed.py``: one rule at fixed constants on the committed bank."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from _scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
bf = load_script("bank_fixed")


def test_a_short_fixed_replay_merges_into_the_json(tmp_path: Path, capsys) -> None:
    out = tmp_path / "fixed.json"
    setting = {"m": 0, "ridge": 10.0, "margin": 0.1, "nonneg": True}
    args = ["--splits", "3", "--n-valid", "100", "--out", str(out)]
    assert bf.main(["stack+guard", json.dumps(setting), *args]) == 0
    assert bf.main(["lcb", '{"alpha": 0.05}', *args]) == 0
    payload = json.loads(out.read_text())
    assert set(payload) == {bf.label("stack+guard", setting), bf.label("lcb", {"alpha": 0.05})}
    entry = payload[bf.label("stack+guard", setting)]
    assert entry["setting"] == setting and entry["settings"]["splits"] == 3
    assert "commit" in entry["provenance"]
    row = entry["n_valid"]["100"]
    assert len(row["per_pair"]) == len(entry["settings"]["pairs"]) >= 2
    assert "| 100 |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nope"], "rule 'nope' is not a registered rule"),
        (["lcb", "{alpha"], "is not JSON"),
        (["lcb", "[1]"], "must be a JSON object"),
        (["lcb", '{"beta": 1}'], r"\['beta'\] are not constants of lcb"),
        (["stack+guard", '{"m": 0}'], r"stack\+guard needs \['margin', 'nonneg', 'ridge'\] too"),
    ],
)
def test_bad_arguments_name_what_is_allowed(argv, message, capsys) -> None:
    with pytest.raises(SystemExit):
        bf.main(argv)
    assert re.search(message, capsys.readouterr().err)


def test_rate_first_and_named_pairs_are_their_own_entries(tmp_path: Path) -> None:
    out = tmp_path / "fixed.json"
    lcb = '{"alpha": 0.05}'
    base = ["lcb", lcb, "--splits", "2", "--n-valid", "100", "--out", str(out)]
    assert bf.main(base) == 0
    assert bf.main([*base, "--candidates", "rate_first", "--pairs", "sfres_naturalness"]) == 0
    payload = json.loads(out.read_text())
    every = payload[bf.label("lcb", {"alpha": 0.05})]
    cut = payload[bf.label("lcb", {"alpha": 0.05}, "rate_first", ["sfres_naturalness"])]
    assert cut["settings"]["pairs"] == ["sfres_naturalness"]
    assert cut["settings"]["candidates"] == "rate_first"
    # The cut keeps the baseline and the path's rate-first strategies only: fewer columns.
    n_all = every["settings"]["columns"]["sfres_naturalness"]
    assert 2 <= cut["settings"]["columns"]["sfres_naturalness"] < n_all
    assert set(cut["n_valid"]["100"]["per_pair"]) == {"sfres_naturalness"}


def test_a_named_pair_must_be_complete(capsys) -> None:
    from judgeopt_lab import load_bank

    bank = load_bank(ROOT / "bank_plan.json", ROOT / "runs" / "bank")
    unfinished = sorted(p for p, bp in bank.items() if not bp.complete)
    if not unfinished:
        pytest.skip("every pair of the bank is complete")
    with pytest.raises(SystemExit):
        bf.main(["lcb", '{"alpha": 0.05}', "--pairs", unfinished[0], "--splits", "2"])
    err = capsys.readouterr().err
    assert f"not complete in the bank: ['{unfinished[0]}']" in err and "bank.py status" in err


def test_a_named_pair_must_be_complete_on_the_rate_first_cut(monkeypatch, capsys) -> None:
    """A pair whose rate-first cut lacks a judgement is refused by a rate-first replay, with
    the command that records the cut (the committed bank with one cut judgement taken out)."""
    from dataclasses import replace

    import numpy as np

    from judgeopt_lab import load_bank, rate_first_k

    bank = load_bank(ROOT / "bank_plan.json", ROOT / "runs" / "bank")
    name = "sfres_naturalness"
    pair = bank[name]
    inside = rate_first_k(pair)[1][-1]
    judged = np.ones(len(pair.ids), dtype=bool)
    judged[0] = False
    cols = list(pair.columns)
    cols[inside] = replace(cols[inside], judged=judged)
    bank[name] = replace(pair, columns=tuple(cols), missing=1)
    monkeypatch.setattr(bf, "load_bank", lambda *a, **k: bank)
    argv = ["lcb", '{"alpha": 0.05}', "--pairs", name, "--splits", "2"]
    with pytest.raises(SystemExit):
        bf.main([*argv, "--candidates", "rate_first"])
    err = capsys.readouterr().err
    assert f"not complete in the bank: ['{name}']" in err
    assert "record --columns rate_first" in err


def test_a_pair_complete_on_its_cut_replays_as_when_whole() -> None:
    """A complete pair with judgements taken out of a column the rate-first cut does not
    read: no longer complete for every candidate, complete for the cut, and its cut's
    replay is the whole pair's to the digit."""
    from dataclasses import replace

    import numpy as np

    from judgeopt_lab import candidate_pairs, load_bank, rate_first_k, replay_fixed

    bank = load_bank(ROOT / "bank_plan.json", ROOT / "runs" / "bank", complete_only=True)
    name = "sfres_naturalness"
    pair = bank[name]
    _, rows = rate_first_k(pair)
    outside = next(i for i in range(len(pair.columns)) if i not in rows)
    judged = np.ones(len(pair.ids), dtype=bool)
    judged[:7] = False
    preds = pair.columns[outside].predictions.copy()
    preds[:7] = np.nan
    cols = list(pair.columns)
    cols[outside] = replace(cols[outside], predictions=preds, judged=judged)
    partial = replace(pair, columns=tuple(cols), missing=7)
    assert candidate_pairs({name: partial}, "all")[0] == {}
    usable, kept = candidate_pairs({name: partial}, "rate_first")
    whole, whole_kept = candidate_pairs({name: pair}, "rate_first")
    assert kept == whole_kept == {name: rows}
    setting = {"m": 5, "ridge": 10.0, "margin": 0.1, "nonneg": True}
    a = replay_fixed(usable, "stack+guard", setting, n_valids=[100], n_splits=8)
    b = replay_fixed(whole, "stack+guard", setting, n_valids=[100], n_splits=8)
    assert a == b


def test_an_unknown_pair_is_named(capsys) -> None:
    with pytest.raises(SystemExit):
        bf.main(["lcb", '{"alpha": 0.05}', "--pairs", "nope", "--splits", "2"])
    assert "unknown pair(s) ['nope']" in capsys.readouterr().err


def test_a_scored_pair_keeps_the_prior_learnt_from_every_other_pair() -> None:
    from judgeopt_lab import load_bank, replay_fixed

    bank = load_bank(ROOT / "bank_plan.json", ROOT / "runs" / "bank", complete_only=True)
    one = sorted(bank)[0]
    kw = {"n_valids": (100,), "n_splits": 3, "seed": 0}
    every = replay_fixed(bank, "shrink+prior", {"margin": 0.0}, **kw)
    alone = replay_fixed(bank, "shrink+prior", {"margin": 0.0}, scored=[one], **kw)
    assert list(alone["n_valid"]["100"]["per_pair"]) == [one]
    assert alone["n_valid"]["100"]["per_pair"][one] == every["n_valid"]["100"]["per_pair"][one]
    with pytest.raises(ValueError, match=r"scored: \['nope'\] are not pairs of the bank"):
        replay_fixed(bank, "lcb", {"alpha": 0.05}, scored=["nope"], **kw)


def test_seconds_price_the_shipped_judge_by_its_members(tmp_path: Path) -> None:
    """``--seconds``: the baseline costs its own column's seconds on every split, a shipped
    stack its members' sum, and the prompts per item count its members."""
    out = tmp_path / "fixed.json"
    args = ["--splits", "3", "--n-valid", "100", "--out", str(out), "--candidates", "rate_first"]
    stack = {"m": 5, "ridge": 10.0, "margin": 0.1, "nonneg": True}
    assert bf.main(["baseline", "{}", *args, "--seconds"]) == 0
    assert bf.main(["stack+guard", json.dumps(stack), *args, "--seconds"]) == 0
    assert bf.main(["lcb", '{"alpha": 0.05}', *args]) == 0  # without: no seconds
    payload = json.loads(out.read_text())
    base = payload[bf.label("baseline", {}, "rate_first")]["n_valid"]["100"]
    got = payload[bf.label("stack+guard", stack, "rate_first")]["n_valid"]["100"]
    assert base["mean_members"] == 1.0 and base["mean_seconds"] > 0
    assert got["mean_seconds"] > 0 and got["mean_members"] >= 1
    for name, v in got["per_pair"].items():
        b = base["per_pair"][name]["seconds"]
        assert v["members"] >= 1
        if v["baseline_share"] == 1.0:  # kept the baseline on every split: its seconds
            assert v["members"] == 1 and v["seconds"] == pytest.approx(b)
    assert any(v["members"] > 1 for v in got["per_pair"].values())  # a stack was shipped
    lcb = payload[bf.label("lcb", {"alpha": 0.05}, "rate_first")]["n_valid"]["100"]
    assert "mean_seconds" not in lcb and lcb["mean_members"] == 1.0


def test_candidate_pairs_names_the_allowed_sets() -> None:
    from judgeopt_lab import candidate_pairs

    with pytest.raises(ValueError, match=r"candidates: 'some'; allowed: \['all', 'rate_first'\]"):
        candidate_pairs({}, "some")


def test_bank_rules_refuses_a_cut_of_a_partial_replay(capsys) -> None:
    script = load_script("bank_rules", "bank_rules_cut")
    with pytest.raises(SystemExit):
        script.main(["--candidates", "rate_first", "--partial"])
    assert "--candidates rate_first replays complete cuts" in capsys.readouterr().err
