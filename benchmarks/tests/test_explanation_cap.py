"""``benchmarks/explanation_cap.py``: answers cut at a token cap and parsed again, the bank's
explanation-first columns cut, the held-out tally and the choice of the cap. A word-level
cutter stands in for the tokenizer, so every number is known."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _scripts import load_script

from judgeopt_lab import BankColumn, BankPair

ec = load_script("explanation_cap")

PREFIX = {"scale": 5, "cot": "prefix", "reference": "none"}
NONE = {"scale": 5, "cot": "none", "reference": "none"}


class WordCutter:
    """Tokens are words: ``cut(text, c)`` keeps the first ``c`` words."""

    model = "words"

    def length(self, text: str) -> int:
        return len(text.split())

    def cut(self, text: str, cap: int) -> str:
        return " ".join(text.split()[:cap])


def test_which_strategies_are_capped() -> None:
    assert ec.capped(PREFIX)
    assert not ec.capped(NONE) and not ec.capped({**NONE, "cot": "suffix"})
    assert not ec.capped({**PREFIX, "reference": "dialectic"})  # its own, larger cap


def test_tally_counts_same_lost_changed_and_tokens() -> None:
    t = ec.Tally()
    t.add(5.0, 5.0, 10, 8)  # same, 2 tokens past the cap
    t.add(None, None, 20, 8)  # a loop: unparsed either way
    t.add(3.0, None, 12, 8)  # its rating past the cap: lost, 4 tokens saved
    t.add(4.0, 2.0, 8, 8)
    d = t.as_dict()
    assert (d["judgements"], d["same"], d["lost"], d["changed"]) == (4, 2, 1, 1)
    assert d["tokens"] == 50 and d["tokens_saved"] == 18
    assert d["agreement"] == 0.5


def _pair(preds: dict[str, list[float]]) -> BankPair:
    ids = ("a", "b", "c")
    columns = (
        BankColumn("base", {**PREFIX, "decoding": "greedy"}, ("baseline",), np.array(preds["g"])),
        BankColumn("exp", {**PREFIX, "decoding": "expected"}, (), np.array(preds["e"])),
        BankColumn("none", {**NONE, "decoding": "greedy"}, (), np.array(preds["n"])),
    )
    return BankPair(
        name="sfres_naturalness",
        task="sfres",
        aspect="naturalness",
        level="dataset",
        ids=ids,
        human=np.array([1.0, 2.0, 3.0]),
        groups=np.array(ids, dtype=object),
        columns=columns,
    )


def test_cut_pair_cuts_only_explanation_first_columns() -> None:
    pair = _pair({"g": [5.0, 2.0, 4.0], "e": [4.6, 2.2, 3.9], "n": [1.0, 2.0, 3.0]})
    key = ec.strategy_json(PREFIX)
    lines = {
        f"{key}\ta": {"raw": "short. Rating: [[5]]", "error": None},  # 3 words: kept
        f"{key}\tb": {"raw": "one two three four five six [[2]]", "error": None},  # cut off
        f"{key}\tc": {"raw": "I would say [[3]] first then more words and [[4]]", "error": None},
    }
    cut, tally, approximated = ec.cut_pair(pair, lines, WordCutter(), 5)
    g, e, n = (c.predictions for c in cut.columns)
    assert g[0] == 5.0 and np.isnan(g[1]) and g[2] == 3.0  # an earlier rating stands
    assert e[0] == 4.6 and np.isnan(e[1]) and e[2] == 3.0  # ... approximated for expected
    assert approximated == 1
    np.testing.assert_array_equal(n, [1.0, 2.0, 3.0])  # rates first: untouched
    d = tally.as_dict()  # greedy columns only
    assert (d["judgements"], d["same"], d["lost"], d["changed"]) == (3, 1, 1, 1)
    assert pair.columns[0].predictions[1] == 2.0  # the input is not modified


def test_choose_takes_the_smallest_cap_meeting_every_condition() -> None:
    def cap(agreement: float, gain_ok: bool, ship_ok: bool) -> dict[str, Any]:
        return {
            "agreement": {"p": {"agreement": agreement}, "q": {"agreement": 1.0}},
            "replay": {"gain_within_one_se": gain_ok, "shipped_within_one_se": ship_ok},
        }

    caps = {
        96: cap(0.90, True, True),  # too many ratings lost on one pair
        128: cap(0.99, True, False),  # the shipped judge worse
        160: cap(0.99, True, True),
        192: cap(1.0, True, True),
    }
    assert ec.choose(caps, 0.98) == 160
    assert ec.choose({96: caps[96]}, 0.98) is None


def test_compare_pairs_gain_and_shipped_score() -> None:
    def row(gains: list[float], bases: list[float], se: float = 0.02) -> dict[str, Any]:
        return {
            "mean_gain": float(np.mean(gains)),
            "se": se,
            "worse_share": 0.0,
            "max_pair_worse_share": 0.0,
            "per_pair": {
                p: {"mean_gain": g, "baseline": b, "worse_share": 0.0}
                for p, g, b in zip("xy", gains, bases, strict=True)
            },
        }

    ref = row([0.10, 0.00], [0.30, 0.20])
    worse_base = row([0.14, 0.04], [0.20, 0.10])  # gains up, because the baseline fell
    c = ec.compare(worse_base, ref)
    assert c["gain_within_one_se"] is True
    assert c["shipped_difference"]["mean"] == pytest.approx(-0.06)
    assert c["shipped_within_one_se"] is False
    assert c["baseline_difference"]["per_pair"]["x"] == pytest.approx(-0.10)


def test_held_out_reads_the_e2e_answers(tmp_path: Path, monkeypatch) -> None:
    d = tmp_path / "sfres_informativeness" / "ckpt"
    d.mkdir(parents=True)
    rows = [
        (PREFIX, "fine [[4]]"),
        (PREFIX, "a b c d e f g [[2]]"),
        (NONE, "[[3]]"),  # rates first: not counted
    ]
    d.joinpath("items.jsonl").write_text(
        "".join(
            json.dumps({"strategy": json.dumps(s), "item": {"raw": r, "error": None}}) + "\n"
            for s, r in rows
        )
    )
    monkeypatch.setattr(ec, "E2E_DIR", tmp_path)
    out = ec.held_out(["sfres_informativeness"], WordCutter(), [3, 10])
    assert out["sfres_informativeness"]["3"]["same"] == 1
    assert out["sfres_informativeness"]["3"]["lost"] == 1
    assert out["sfres_informativeness"]["10"]["agreement"] == 1.0
