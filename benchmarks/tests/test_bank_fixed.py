"""``benchmarks/bank_fixed.py``: one rule at fixed constants on the committed bank."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bank_fixed", ROOT / "bank_fixed.py")
assert _spec is not None and _spec.loader is not None
bf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bf)


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
