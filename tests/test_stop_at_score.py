"""A judge that rates before it explains is measured without its explanation: its calls stop at
the end of the rating (``]]``), which the judge puts back before parsing. Scripted LMs that
honour ``stop`` as a server does; the real-model check is in tests/test_decoding_real.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from judgeopt.cli import main
from judgeopt.data import Record
from judgeopt.evaluate import evaluate
from judgeopt.judge import (
    SCORE_STOP,
    JudgeEnsemble,
    JudgeProgram,
    baseline_strategy,
    close_score,
    load_task,
)
from judgeopt.testing import ScriptedLM, logprob_content

TASK = load_task("sfres")
ASPECT = "naturalness"


def records(n: int = 6) -> list[Record]:
    return [
        Record(
            id=f"r{i}",
            group_id=None,
            system_id=None,
            inputs={"source": f"inform(name=place {i})", "output": f"place {i} is nice"},
            scores={ASPECT: float(1 + i % 5)},
        )
        for i in range(n)
    ]


def _rating(messages: list[dict[str, str]]) -> int:
    """A rating that follows the item (so a correlation exists)."""
    m = re.search(r"place (\d+)", str(messages[-1]["content"]))
    return 1 + int(m.group(1)) % 5 if m else 3


def rating_then_explanation(messages: list[dict[str, str]]) -> str:
    return f"Rating: [[{_rating(messages)}]]\n\nExplanation: it reads [[well]] enough."


@pytest.mark.parametrize(
    ("text", "closed"),
    [
        ("Rating: [[4", "Rating: [[4]]"),
        ("[[A", "[[A]]"),
        ("Rating: [[4]]", "Rating: [[4]]"),  # not cut: unchanged
        ("no rating at all", "no rating at all"),
        ("[[3]] then [[5", "[[3]] then [[5]]"),
        ("", ""),
    ],
)
def test_close_score_puts_back_only_the_cut_off_end(text: str, closed: str) -> None:
    assert close_score(text) == closed


@pytest.mark.parametrize(
    ("changes", "stops"),
    [
        ({"cot": "none"}, True),
        ({"cot": "suffix"}, True),
        ({"cot": "prefix"}, False),  # explains first: the rating comes at the end
        ({"cot": "suffix", "reference": "dialectic"}, False),  # writes a reference first
    ],
)
def test_only_a_judge_that_rates_first_and_is_not_asked_to_explain_stops(
    changes: dict[str, str], stops: bool
) -> None:
    judge = JudgeProgram(TASK, ASPECT, baseline_strategy(TASK).replace(**changes))
    assert judge.explain and not judge.stops_at_score and "stop" not in judge.lm_kwargs()
    scoring = judge.with_explain(False)
    assert scoring is not judge and judge.explain  # a copy; the judge itself is unchanged
    assert scoring.stops_at_score is stops
    assert (scoring.lm_kwargs().get("stop") == [SCORE_STOP]) is stops
    assert scoring.with_explain(False) is scoring
    # Copies keep the switch: the ones a compile judges with, and fresh ones.
    assert scoring.with_strategy(scoring.strategy).explain is False
    assert scoring.fresh_copy().explain is False
    with pytest.raises(TypeError, match="`explain` argument must be a bool"):
        JudgeProgram(TASK, ASPECT, explain="no")  # type: ignore[arg-type]


def test_evaluate_stops_at_the_rating_unless_asked_to_explain() -> None:
    fake = ScriptedLM(rating_then_explanation)
    judge = JudgeProgram(TASK, ASPECT, baseline_strategy(TASK).replace(cot="suffix"), lm=fake.lm)
    data = records()
    scored = evaluate(judge, data, progress=False)
    assert [r["stop"] for r in fake.requests] == [[SCORE_STOP]] * len(data)
    assert all(i.raw.endswith("]]") and "Explanation" not in i.raw for i in scored.items)
    explained = evaluate(judge, data, progress=False, explain=True)
    assert all("stop" not in r for r in fake.requests[len(data) :])
    assert all("Explanation" in i.raw for i in explained.items)
    # The same ratings either way; the judge itself still explains when called.
    assert [i.score for i in scored.items] == [i.score for i in explained.items]
    assert [i.score for i in scored.items] == [
        float(_rating([{"content": r.inputs["output"]}])) for r in data
    ]
    pred = judge(**data[0].inputs)
    assert pred.rationale and "Explanation" in pred.rationale


def test_the_expected_rating_reads_the_same_distribution_from_the_stopped_answer() -> None:
    alternatives = {2: {"4": 0.5, "5": 0.3, "3": 0.2}}

    def content(generated: str, request: dict[str, object]) -> list[dict[str, object]]:
        # Tokens of whatever was generated: "Rating: ", "[[", "4", "]]", then the rest.
        head = ["Rating: ", "[[", "4", "]]"]
        rest = generated[len("".join(head)) :]
        return logprob_content(head + ([rest] if rest else []), alternatives)

    fake = ScriptedLM(lambda m: "Rating: [[4]]\nExplanation: fine.", logprobs=content)
    strategy = baseline_strategy(TASK).replace(cot="suffix", decoding="expected")
    judge = JudgeProgram(TASK, ASPECT, strategy, lm=fake.lm)
    item = records(1)[0]
    full = judge.judge(item.inputs)
    short = judge.with_explain(False).judge(item.inputs)
    assert fake.requests[-1]["stop"] == [SCORE_STOP] and "stop" not in fake.requests[0]
    assert short.raw == "Rating: [[4]]" and short.rationale is None
    assert full.rationale == "Rating: [[4]]\nExplanation: fine."
    assert short.score == full.score == pytest.approx(4 * 0.5 + 5 * 0.3 + 3 * 0.2)
    assert short.distribution == full.distribution and short.greedy_score == 4.0


def test_pairwise_verdicts_stop_at_their_end_too() -> None:
    task = load_task("llmbar")
    fake = ScriptedLM(lambda m: "[[B]] Output (b) follows the instruction.")
    judge = JudgeProgram(task, "overall", baseline_strategy(task).replace(cot="suffix"))
    pred = judge.with_explain(False).judge({f: "x" for f in task.input_names}, lm=fake.lm)
    assert fake.requests[-1]["stop"] == [SCORE_STOP]
    assert pred.score == "b" and pred.raw == "[[B]]"


def test_an_ensemble_passes_the_switch_to_its_members() -> None:
    fake = ScriptedLM(rating_then_explanation)
    members = [
        JudgeProgram(TASK, ASPECT, baseline_strategy(TASK).replace(cot=c), lm=fake.lm)
        for c in ("suffix", "none")
    ]
    ensemble = JudgeEnsemble(members, [3.0, 3.0], [1.0, 1.0], lm=fake.lm)
    assert ensemble.with_explain(True) is ensemble
    scoring = ensemble.with_explain(False)
    assert all(m.explain is False for m in scoring.members)
    assert all(m.explain for m in ensemble.members)
    result = evaluate(ensemble, records(), progress=False)
    assert result.parse_failures == 0
    assert all(r.get("stop") == [SCORE_STOP] for r in fake.requests)


def test_cli_evaluate_explanations_flag(tmp_path: Path, monkeypatch, capsys) -> None:
    from judgeopt.lm import JudgeLM

    fake = ScriptedLM(rating_then_explanation)
    judge = JudgeProgram(TASK, ASPECT, baseline_strategy(TASK).replace(cot="suffix"))
    judge.save(tmp_path / "judge.json")
    data = tmp_path / "data.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": r.id, "inputs": r.inputs, "scores": r.scores}) + "\n"
            for r in records()
        )
    )
    import judgeopt.lm

    monkeypatch.setattr(judgeopt.lm, "make_lm", lambda model, **kw: fake.lm)
    assert isinstance(fake.lm, JudgeLM)
    for flag, explained in (([], False), (["--explanations"], True)):
        items = tmp_path / f"items{len(flag)}.jsonl"
        rc = main(
            [
                "evaluate",
                str(tmp_path / "judge.json"),
                "--data",
                str(data),
                "--items",
                str(items),
                "--no-progress",
                *flag,
            ]
        )
        capsys.readouterr()
        assert rc == 0
        rows = [json.loads(line) for line in items.read_text().splitlines()]
        assert all(("Explanation" in row["raw"]) is explained for row in rows), rows[0]


def _scripted_with_logprobs(tmp_path: Path) -> ScriptedLM:
    alternatives = {2: {"4": 0.5, "5": 0.3, "3": 0.2}}

    def content(generated: str, request: dict[str, object]) -> list[dict[str, object]]:
        head = ["Rating: ", "[[", "4", "]]"]
        rest = generated[len("".join(head)) :]
        return logprob_content(head + ([rest] if rest else []), alternatives)

    return ScriptedLM(
        lambda m: "Rating: [[4]]\nExplanation: fine.", logprobs=content, cache=tmp_path / "c"
    )


def test_a_greedy_judge_stopped_at_its_rating_makes_its_expected_twins_call(
    tmp_path: Path,
) -> None:
    """On an LM known to return logprobs, a greedy judge scored without its explanation asks
    its call for them: the request is its ``expected`` twin's, so the twin reads the answer
    from the cache (no call), and the greedy prediction carries the distribution too."""
    fake = _scripted_with_logprobs(tmp_path)
    fake.lm.supports_logprobs = True
    strategy = baseline_strategy(TASK).replace(cot="suffix")
    greedy = JudgeProgram(TASK, ASPECT, strategy, lm=fake.lm).with_explain(False)
    twin = greedy.with_strategy(strategy.replace(decoding="expected"))
    assert greedy.twin_read(fake.lm) is not None and twin.twin_read(fake.lm) is None
    item = records(1)[0]
    pred = greedy.judge(item.inputs)
    assert len(fake.requests) == 1
    asked = fake.requests[0]
    assert asked["logprobs"] is True and asked["top_logprobs"] == 20
    assert asked["temperature"] == 0.0 and asked["stop"] == [SCORE_STOP]
    assert pred.decoding == "greedy" and pred.score == 4.0 and pred.raw == "Rating: [[4]]"
    assert pred.rationale is None and pred.parse_error is None
    assert pred.expected_score == pytest.approx(4 * 0.5 + 5 * 0.3 + 3 * 0.2)
    read = twin.judge(item.inputs)
    assert len(fake.requests) == 1  # the twin's answer came from the cache
    assert read.score == pred.expected_score and read.greedy_score == pred.score
    assert read.distribution == pred.distribution


@pytest.mark.parametrize("case", ["unknown", "explains", "explains_first", "pairwise"])
def test_a_greedy_judge_asks_for_no_logprobs_where_it_cannot_share_them(
    tmp_path: Path, case: str
) -> None:
    """Nothing is asked of an LM whose logprobs are unknown (no probe either), nor of a
    judge that writes its explanation, explains first, or compares two texts."""
    fake = _scripted_with_logprobs(tmp_path)
    fake.lm.supports_logprobs = None if case == "unknown" else True
    task, aspect = (load_task("llmbar"), "overall") if case == "pairwise" else (TASK, ASPECT)
    cot = "prefix" if case == "explains_first" else "suffix"
    judge = JudgeProgram(task, aspect, baseline_strategy(task).replace(cot=cot), lm=fake.lm)
    judge = judge.with_explain(case == "explains")
    assert judge.twin_read(fake.lm) is None
    judge.judge({f: "x" for f in task.input_names})
    assert len(fake.requests) == 1 and "logprobs" not in fake.requests[0]
