"""``benchmarks/rating_recovery.py``: the follow-up call for an answer without a rating (its
messages, its parsed and expected rating, a failed call recorded) and the report's figures on
a small pair whose every number is known. A scripted LM stands in for the model: these test
the control flow and the arithmetic, not what the model answers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from _scripts import load_script

from judgeopt.judge import JudgeProgram, load_task
from judgeopt_lab import BankColumn, BankPair, strategy_json

rr = load_script("rating_recovery")


class ScriptedLM:
    """Answers every call with ``text``; the rating token's top logprobs put ``probs`` on
    the ratings 1..5. Keeps the messages it was sent."""

    def __init__(self, text: str, probs: dict[str, float] | None = None, fail: bool = False):
        self.text, self.probs, self.fail = text, probs or {}, fail
        self.sent: list[list[dict[str, str]]] = []

    def forward(self, messages: list[dict[str, str]], **kwargs: Any) -> dict[str, Any]:
        self.sent.append(messages)
        if self.fail:
            raise RuntimeError("the server went away")
        pieces = ["Rating", ":", " [[", "2", "]]"]
        content = []
        for tok in pieces:
            top = [{"token": tok, "logprob": 0.0}]
            if tok == "2" and self.probs:
                top = [{"token": t, "logprob": math.log(p)} for t, p in self.probs.items()]
            lp = next(x["logprob"] for x in top if x["token"] == tok)
            content.append({"token": tok, "logprob": lp, "top_logprobs": top})
        return {
            "choices": [
                {
                    "message": {"role": "assistant", "content": self.text},
                    "logprobs": {"content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 300, "completion_tokens": 5},
        }


def _recorder(lm: ScriptedLM) -> Any:
    record = SimpleNamespace(
        id="sfres0001",
        inputs={"source": "inform(name=x)", "output": "x is nice place"},
    )
    return SimpleNamespace(records={"sfres0001": record}, lm=lm)


def _program() -> JudgeProgram:
    task = load_task("sfres")
    return JudgeProgram(task, "naturalness")


def test_follow_up_continues_the_judges_own_conversation() -> None:
    lm = ScriptedLM("Rating: [[2]]", {"1": 0.2, "2": 0.6, "3": 0.2})
    line = rr.follow_up(_recorder(lm), _program(), "sfres0001", "The sentence is not natural.")
    sent = lm.sent[0]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert "x is nice place" in sent[1]["content"]
    assert sent[2]["content"] == "The sentence is not natural."
    assert sent[3]["content"] == rr.follow_up_text(1, 5)
    assert line["greedy"] == 2.0 and line["error"] is None
    assert line["expected"] == pytest.approx(2.0)  # 0.2 * 1 + 0.6 * 2 + 0.2 * 3
    assert line["prompt_tokens"] == 300


def test_follow_up_records_a_failed_call_and_an_unparsed_answer() -> None:
    failed = rr.follow_up(_recorder(ScriptedLM("", fail=True)), _program(), "sfres0001", "x")
    assert failed["error"].startswith("RuntimeError") and "greedy" not in failed
    words = rr.follow_up(_recorder(ScriptedLM("I cannot rate it.")), _program(), "sfres0001", "x")
    assert words["greedy"] is None and words["expected"] is None and words["parse_error"]


def test_column_report_scores_imputed_against_recovered() -> None:
    strategy = {"scale": 5, "cot": "prefix", "reference": "none", "decoding": "greedy"}
    human = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 5.0])
    preds = np.array([np.nan, 2.0, 3.0, 4.0, 5.0, np.nan])
    pair = BankPair(
        name="p",
        task="sfres",
        aspect="naturalness",
        level="dataset",
        ids=("a", "b", "c", "d", "e", "f"),
        human=human,
        groups=np.array(list("abcdef")),
        columns=(BankColumn("C01", strategy, ("baseline",), preds),),
    )
    key = strategy_json({k: v for k, v in strategy.items() if k != "decoding"})
    done = {
        (key, "a"): {"greedy": 1.0, "expected": 1.5, "error": None, "seconds": 2.0},
        (key, "f"): {"greedy": None, "expected": None, "error": None, "seconds": 1.0},
    }
    r = rr.column_report(pair, pair.columns[0], done)
    assert (r["unparsed"], r["asked"], r["recovered"]) == (2, 2, 1)
    assert r["recovered_ratings"] == {"1": 1}
    assert r["human_mean_unparsed"] == 3.0 and r["follow_up_seconds"] == 3.0
    # Imputed: a and f get the mean 3.5; recovered: a gets 1, f still 3.5 (now the mean of
    # 1..5 is 3.0, so f gets 3.0).
    assert r["spearman_recovered"] > r["spearman_imputed"]
    assert r["gain"] == pytest.approx(r["spearman_recovered"] - r["spearman_imputed"], abs=1e-4)
    lo, hi = r["gain_interval"]
    assert lo <= r["gain"] <= hi


def test_run_lines_give_the_wall_time_and_are_no_follow_ups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rr, "RUNS", tmp_path)
    strategy = {"scale": 5, "cot": "prefix"}
    lines = [
        {"kind": "recovery", "strategy": strategy, "id": "a", "greedy": None, "error": "boom"},
        {"kind": "recovery", "strategy": strategy, "id": "a", "greedy": 2.0, "error": None},
        {"kind": "recovery", "strategy": strategy, "id": "b", "greedy": 4.0, "error": None},
        {"kind": "run", "columns": "baseline", "calls": 3, "wall_seconds": 10.5},
        {"kind": "run", "columns": "explain_first", "calls": 9, "wall_seconds": 99.0},
        {"kind": "run", "columns": "baseline", "calls": 1, "wall_seconds": 2.0},
    ]
    (tmp_path / "p.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert rr.wall_seconds("p", "baseline") == 12.5
    assert rr.wall_seconds("missing", "baseline") == 0.0
    done = rr.done_lines("p")
    key = strategy_json(strategy)
    assert sorted(done) == [(key, "a"), (key, "b")]
    assert done[(key, "a")]["greedy"] == 2.0  # the successful call replaces the failed one
