"""``benchmarks/bank_distributions.py``: the rating distributions' features, the guarded
stacks with and without them, and a short replay on the committed bank."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from _scripts import load_script

from judgeopt.selection import RuleInput

bd = load_script("bank_distributions")


def test_the_features_of_a_known_distribution() -> None:
    values = np.arange(1.0, 6.0)
    sure = np.array([0.0, 0.0, 1.0, 0.0, 0.0])
    flat = np.full(5, 0.2)
    assert bd.FEATURES["spread"](sure, values) == 0.0
    assert bd.FEATURES["entropy"](sure, values) == 0.0
    assert bd.FEATURES["spread"](flat, values) == pytest.approx(math.sqrt(2.0))
    assert bd.FEATURES["entropy"](flat, values) == pytest.approx(1.0)
    half = np.array([0.5, 0.0, 0.0, 0.0, 0.5])
    assert bd.FEATURES["spread"](half, values) == pytest.approx(2.0)


def _input(seed: int = 0) -> RuleInput:
    """Row 0 the baseline, rows 1-6 judges (1, 2 rate first), rows 7-8 the entropy of
    rows 1 and 2; row 7 carries the humans' signal that row 1's rating misses."""
    rng = np.random.default_rng(seed)
    n = 150
    human = rng.normal(size=n)
    hidden = rng.normal(size=n)
    preds = rng.normal(size=(9, n))
    preds[0] = human + hidden + rng.normal(size=n)
    for i in range(1, 7):
        preds[i] = human + hidden + 1.5 * rng.normal(size=n)
    preds[7] = -hidden + 0.1 * rng.normal(size=n)
    strategies: list[dict[str, object]] = [{"cot": "prefix", "n": 0}]
    strategies += [{"cot": "none" if i < 3 else "prefix", "n": i} for i in range(1, 7)]
    of = [bd.strategy_json(s) for s in strategies[1:3]]
    strategies += [{"feature": "entropy", "of": of[0]}, {"feature": "entropy", "of": of[1]}]
    return RuleInput(human=human, preds=preds, baseline=0, strategies=strategies, seed=seed)


def test_the_stack_takes_a_feature_only_with_its_member_and_maps_rows_back() -> None:
    data = _input()
    plain = bd._stack(data, feature=None)
    assert plain.members[0] == 0 and len(plain.members) == 1 + bd.M
    assert not {7, 8} & set(plain.members)  # feature columns are not judges
    with_entropy = bd._stack(data, feature="entropy")
    members = set(with_entropy.members)
    assert set(plain.members) <= members and members - set(plain.members) <= {7, 8}
    # The feature that carries the missing signal gets a real weight and helps.
    assert 7 in members or 1 not in plain.members
    assert with_entropy.score(data) >= plain.score(data) - 1e-9
    rules = bd.arms()
    assert set(rules) == {"ratings", "+ spread", "+ entropy"}
    assert rules["ratings"].fn(data).members[0] == 0


def test_a_short_replay_on_the_committed_bank(tmp_path: Path) -> None:
    out = tmp_path / "dist.json"
    assert bd.main(["--splits", "3", "--n-valid", "100", "--out", str(out)]) == 0
    payload = json.loads(out.read_text())
    assert set(payload["arms"]) == {"ratings", "+ spread", "+ entropy"}
    assert set(payload["difference"]) == {"+ spread", "+ entropy"}
    for name, f in payload["features"].items():
        assert 0 <= f["with_distribution"] <= f["rating_first_strategies"], name
    d = payload["difference"]["+ entropy"]["100"]
    assert len(d["per_pair"]) == len(payload["features"]) and math.isfinite(d["mean"])
