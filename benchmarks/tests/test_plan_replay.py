"""benchmarks/plan_replay.py on compiles benchmarks/compile_cost.py ran with scripted models:
the replay rebuilds each compile up to its plan and makes the printed plan again (the
simulated paths), the neighbours' plan beside it, the errors and the spread (no model is
loaded)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import compile_cost as cc
import plan_replay as pr


def test_the_replay_makes_the_printed_plan_again(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    made: list[str] = []

    def fake_make_lm(model: str, *, cache: Any = None, **kw: Any) -> Any:
        made.append(Path(cache).name)
        return cc.ScriptedLM(cc.hosted_answer, cache=cache, logprobs=cc.hosted_logprobs).lm

    monkeypatch.setattr(cc, "make_lm", fake_make_lm)
    source = tmp_path / "cc.json"
    args = ["--n-items", "8", "--budget", "4", "--hosted-time-scale", "0", "--no-progress"]
    assert cc.main([*args, "--parts", "estimate", "--out", str(source)]) == 0
    out = tmp_path / "pr.json"
    assert pr.main(["--entries", "estimate", "--source", str(source), "--out", str(out)]) == 0
    entry = json.loads(out.read_text())["entries"]["estimate"]
    printed, paths = entry["plans"]["printed"], entry["plans"]["paths"]
    # The compile planned on its search's paths: the replay makes the same plan.
    assert (paths["calls"], paths["tokens"]) == (printed["calls"], printed["tokens"])
    assert entry["plans"]["neighbours"]["calls"] == 4 * 8  # one call per item and strategy
    assert entry["n_items"] == 8 and entry["budget"] == 4
    for how in ("printed", "neighbours", "paths"):
        assert set(entry["errors"][how]) == {"calls", "tokens", "seconds"}
    assert entry["errors"]["paths"]["calls"] == pytest.approx(
        (paths["calls"] - entry["actual"]["calls"]) / entry["actual"]["calls"], abs=1e-4
    )
    lo, hi = paths["spread"]["calls"]
    assert lo <= paths["calls"] <= hi
    assert paths["within_spread"]["calls"] == (lo <= entry["actual"]["calls"] <= hi)
    assert "actual within the spread" in capsys.readouterr().out
    # The held-out file's hosted entries are replayed with the scripted hosted model and kept
    # beside the first replay.
    assert cc.main([*args, "--parts", "estimate_hosted", "--out", str(source)]) == 0
    monkeypatch.setattr(pr, "HELDOUT", source)
    assert pr.main(["--heldout", "--out", str(out)]) == 0
    kept = json.loads(out.read_text())
    assert set(kept) >= {"entries", "heldout"}
    hosted = [k for k in kept["heldout"] if k.startswith("hosted ")]
    assert "hosted sfres:naturalness" in hosted and len(hosted) == 4
    with pytest.raises(SystemExit):
        pr.main(["--entries", "nope", "--source", str(source), "--out", str(out)])
