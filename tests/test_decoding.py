"""The `decoding` factor: greedy, expected rating from logprobs, self-consistency; the
capability check at compile start; export and load. Scripted LMs only (plumbing, never
evidence that a decoding helps): the real-model test is in test_decoding_real.py."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import litellm
import pytest

from judgeopt.data import load_records
from judgeopt.evaluate import evaluate
from judgeopt.judge import (
    DECODING_PARAMS,
    Decoding,
    JudgeProgram,
    LogprobsUnavailableError,
    baseline_strategy,
    check_decodings,
    decoding_for,
    hpss_graph,
    hpss_space,
    hpss_strategy,
    load_task,
    logprob_support,
    render_prompt,
)
from judgeopt.teleprompt import HPSS, GridJudgeSearch
from judgeopt.testing import ScriptedLM, logprob_content

ASPECT = "naturalness"
# Everything fixed but `decoding` (and the scale, for multi-token ratings).
ONLY_DECODING = {
    "scale": [3],
    "examples": [0],
    "criteria": ["human"],
    "reference": ["none"],
    "cot": ["none"],
    "autocot": ["off"],
    "metrics": ["off"],
    "order": ["TD-ER-IC"],
}


@pytest.fixture(scope="module")
def task():
    return load_task("topical_chat")


@pytest.fixture(scope="module")
def records(shared_data: Path):
    return load_records(shared_data / "topical_chat" / "valid.jsonl")[:6]


def no_cot(task, **changes: Any):
    return baseline_strategy(task).replace(cot="none", **changes)


def scripted(
    tokens: list[str], alternatives: dict[int, dict[str, float]] | None = None, **kw: Any
) -> ScriptedLM:
    """A judge LM that always answers ``"".join(tokens)`` with those logprobs."""
    return ScriptedLM(
        lambda m: "".join(tokens),
        logprobs=lambda reply, request: logprob_content(tokens, alternatives),
        **kw,
    )


# ------------------------------------------------------------------------------ the factor


def test_space_has_decoding_pointwise_only_and_baseline_is_greedy(task) -> None:
    space = hpss_space(task)
    assert space.names[-1] == "decoding"
    assert space["decoding"].values == ("greedy", "expected", "sc5")
    assert space.size == 12960 * 3
    assert baseline_strategy(task)["decoding"] == "greedy"
    pairwise = load_task("llmbar")
    assert "decoding" not in hpss_space(pairwise)
    # Strategies saved before the factor existed decode greedily.
    old = {k: v for k, v in baseline_strategy(task).as_dict().items() if k != "decoding"}
    assert hpss_strategy(task, old) == baseline_strategy(task)
    assert JudgeProgram(task, ASPECT, old).decoding == DECODING_PARAMS["greedy"]
    # No artifact and no constraint comes with it.
    graph = hpss_graph(task)
    assert graph.artifacts_for(baseline_strategy(task).replace(decoding="sc5")) == []


def test_decoding_never_changes_the_prompt(task, records) -> None:
    inputs = records[0].inputs
    prompts = {
        render_prompt(task, ASPECT, baseline_strategy(task).replace(decoding=d), inputs)
        for d in ("greedy", "expected", "sc5")
    }
    assert len(prompts) == 1


def test_decoding_parameters_are_validated() -> None:
    assert decoding_for("sc5") == Decoding("sc5", samples=5, temperature=1.0)
    assert decoding_for({"decoding": "expected"}).top_logprobs == 20
    assert decoding_for(None).name == "greedy"
    assert decoding_for("sc5", {"samples": 3}).samples == 3
    with pytest.raises(ValueError, match="Unknown decoding 'beam'"):
        decoding_for("beam")
    with pytest.raises(ValueError, match="Unknown decoding parameter"):
        decoding_for("sc5", {"n": 3})
    with pytest.raises(ValueError, match="needs a `temperature` > 0"):
        Decoding("sc5", samples=5, temperature=0.0)
    with pytest.raises(ValueError, match="`top_logprobs` field"):
        Decoding("expected", top_logprobs=0)
    with pytest.raises(ValueError, match="must have `samples` == 1"):
        Decoding("greedy", samples=3, temperature=1.0)


def test_decoding_params_follow_the_decoding_through_with_strategy(task) -> None:
    judge = JudgeProgram(task, ASPECT, no_cot(task, decoding="sc5"), decoding_params={"samples": 3})
    assert judge.with_strategy(judge.strategy.replace(cot="prefix")).decoding.samples == 3
    other = judge.with_strategy(judge.strategy.replace(decoding="expected"))
    assert other.decoding == DECODING_PARAMS["expected"]
    with pytest.raises(ValueError, match="must have `samples` > 1"):
        JudgeProgram(task, ASPECT, no_cot(task, decoding="sc5"), decoding_params={"samples": 1})


# ----------------------------------------------------------------------------------- greedy


def test_greedy_requests_are_unchanged(task, records) -> None:
    fake = ScriptedLM(lambda m: "[[2]]")
    pred = JudgeProgram(task, ASPECT, no_cot(task), lm=fake.lm)(**records[0].inputs)
    assert pred.score == 2.0 and pred.decoding == "greedy"
    [req] = fake.requests
    assert "logprobs" not in req and "seed" not in req and req["temperature"] == 0.0


# --------------------------------------------------------------------------------- expected


def test_expected_rating_single_token(task, records) -> None:
    fake = scripted(["Rating", ":", " [[", "2", "]]"], {3: {"2": 0.5, "3": 0.3, "1": 0.2}})
    judge = JudgeProgram(task, ASPECT, no_cot(task, decoding="expected"), lm=fake.lm)
    pred = judge(**records[0].inputs)
    assert pred.score == pytest.approx(0.2 * 1 + 0.5 * 2 + 0.3 * 3)
    assert pred.greedy_score == 2.0 and pred.decoding == "expected"
    assert pred.parse_error is None and pred.raw == "Rating: [[2]]"
    assert pred.distribution["probs"] == pytest.approx({"1": 0.2, "2": 0.5, "3": 0.3})
    [req] = fake.requests
    assert (req["logprobs"], req["top_logprobs"], req["temperature"]) == (True, 20, 0.0)


def test_expected_rating_ignores_the_stop_token_vllm_lists(task, records) -> None:
    # vLLM lists the end-of-turn token it stopped on in logprobs.content (bytes included) but
    # not in the message; "[3]<|im_end|>" would hide the lone rating from the parser.
    tokens = ["[", "3", "]", "<|im_end|>"]
    fake = ScriptedLM(
        lambda m: "[3]",
        logprobs=lambda reply, request: logprob_content(
            tokens, {1: {"3": 0.6, "2": 0.3, "1": 0.1}}
        ),
    )
    judge = JudgeProgram(task, ASPECT, no_cot(task, decoding="expected"), lm=fake.lm)
    pred = judge(**records[0].inputs)
    assert pred.parse_error is None and pred.greedy_score == 3.0
    assert pred.score == pytest.approx(0.1 * 1 + 0.3 * 2 + 0.6 * 3)


def test_expected_rating_multi_token_with_chain_rule(task, records) -> None:
    # Scale 10: "10" is "1" then "0". P(10)=0.5*0.9, P(1)=0.5*0.1 (no digit follows),
    # P(8)=0.3, P(9)=0.1; the rest (0.1, non-digits) is renormalised away.
    tokens = ["[[", "1", "0", "]]"]
    alts = {1: {"1": 0.5, "8": 0.3, "9": 0.1, "x": 0.1}, 2: {"0": 0.9, "]]": 0.1}}
    judge = JudgeProgram(
        task, ASPECT, no_cot(task, scale=10, decoding="expected"), lm=scripted(tokens, alts).lm
    )
    pred = judge(**records[0].inputs)
    want = (10 * 0.45 + 1 * 0.05 + 8 * 0.3 + 9 * 0.1) / 0.9
    assert pred.score == pytest.approx(want)
    assert pred.greedy_score == 10.0
    assert pred.distribution["mass"] == pytest.approx(0.9)


def test_expected_rating_with_digits_missing_from_top_k(task, records) -> None:
    # Only "3" of the valid ratings is in the top-k: the others count as 0, and the
    # renormalised distribution puts everything on 3.
    fake = scripted(["[[", "3", "]]"], {1: {"3": 0.4, "a": 0.3, "b": 0.3}})
    judge = JudgeProgram(task, ASPECT, no_cot(task, decoding="expected"), lm=fake.lm)
    pred = judge(**records[0].inputs)
    assert pred.score == pytest.approx(3.0)
    assert pred.distribution["mass"] == pytest.approx(0.4)


def test_expected_rating_with_cot_reads_the_last_rating(task, records) -> None:
    tokens = [
        "Unlike",
        " a",
        " [[",
        "1",
        "]]",
        " reply",
        ", this",
        " one",
        " is",
        " fine",
        ".",
        " Rating",
        ": [[",
        "3",
        "]]",
    ]
    alts = {3: {"1": 1.0}, 13: {"3": 0.6, "2": 0.4}}
    judge = JudgeProgram(
        task,
        ASPECT,
        baseline_strategy(task).replace(decoding="expected"),
        lm=scripted(tokens, alts).lm,
    )
    pred = judge(**records[0].inputs)
    assert pred.score == pytest.approx(0.6 * 3 + 0.4 * 2)
    assert pred.rationale.startswith("Unlike a [[1]]")


def test_expected_failures_are_recorded_and_counted(task, records) -> None:
    s = no_cot(task, decoding="expected")
    # No rating in the answer.
    pred = JudgeProgram(task, ASPECT, s, lm=scripted(["I", " cannot", " rate"]).lm)(
        **records[0].inputs
    )
    assert pred.score is None and pred.parse_error == "no rating found"
    # The provider ignored logprobs=True.
    silent = ScriptedLM(lambda m: "[[2]]")
    pred = JudgeProgram(task, ASPECT, s, lm=silent.lm)(**records[0].inputs)
    assert pred.score is None and "no logprobs" in pred.parse_error
    assert pred.greedy_score == 2.0 and pred.distribution is None
    # The rating token is glued to other text: its distribution cannot be read.
    glued = scripted(["Rating: [[2", "]]"])
    pred = JudgeProgram(task, ASPECT, s, lm=glued.lm)(**records[0].inputs)
    assert pred.score is None and pred.parse_error.startswith("expected rating:")
    # evaluate() counts them as parse failures, never raises.
    res = evaluate(JudgeProgram(task, ASPECT, s, lm=silent.lm), records, progress=False)
    assert res.parse_failures == len(records) and res.call_failures == 0


def test_expected_calls_are_cached_with_the_logprob_request(task, records, tmp_path) -> None:
    tokens, alts = ["[[", "2", "]]"], {1: {"2": 0.7, "1": 0.3}}
    fake = scripted(tokens, alts, cache=tmp_path / "cache")
    greedy = JudgeProgram(task, ASPECT, no_cot(task), lm=fake.lm)
    expected = greedy.with_strategy(no_cot(task, decoding="expected"))
    first = expected(**records[0].inputs).score
    greedy(**records[0].inputs)  # another request: no logprobs in its key
    assert len(fake.requests) == 2
    again = scripted(tokens, alts, cache=tmp_path / "cache")
    reloaded = JudgeProgram(task, ASPECT, no_cot(task, decoding="expected"), lm=again.lm)
    assert reloaded(**records[0].inputs).score == pytest.approx(first)
    assert again.requests == []  # the logprobs came back from the cache
    stats = again.lm.stats()
    assert stats.cache_hits == 1 and stats.calls == 0


# ------------------------------------------------------------------------- self-consistency


def test_self_consistency_averages_samples_and_counts_failures(task, records) -> None:
    replies = iter(["[[1]]", "[[2]]", "none", "[[3]]", "[[3]]"])
    fake = ScriptedLM(lambda m: next(replies))
    judge = JudgeProgram(task, ASPECT, no_cot(task, decoding="sc5"), lm=fake.lm)
    pred = judge(**records[0].inputs)
    assert pred.score == pytest.approx(9 / 4) and pred.decoding == "sc5"
    assert pred.samples == [1.0, 2.0, None, 3.0, 3.0]
    assert pred.parse_method == "self-consistency 4/5" and pred.raw == "[[1]]"
    assert [r["seed"] for r in fake.requests] == [0, 1, 2, 3, 4]
    assert {r["temperature"] for r in fake.requests} == {1.0}
    assert fake.lm.stats().calls == 5
    # No sample with a rating: a recorded failure.
    pred = JudgeProgram(
        task, ASPECT, no_cot(task, decoding="sc5"), lm=ScriptedLM(lambda m: "hmm").lm
    )(**records[0].inputs)
    assert pred.score is None and pred.parse_error.startswith("no sample had a rating (5/5")


# ------------------------------------------------------------------------ capability check


def test_logprob_support_flags_probe_and_litellm_table() -> None:
    from judgeopt.lm import LlamaCppLM

    # The embedded model gives greedy logprobs with or without logits_all (not loaded here).
    assert logprob_support(LlamaCppLM("smollm2-135m", logits_all=False, cache=False))[0]
    assert logprob_support(LlamaCppLM("smollm2-135m", logits_all=True, cache=False))[0]
    # A LiteLLM model behind a server: one probe request of one token.
    good = scripted(["7"])
    assert logprob_support(good.lm) == (True, "a probe request returned logprobs")
    assert len(good.requests) == 1 and good.requests[0]["max_tokens"] == 1
    logprob_support(good.lm)
    assert len(good.requests) == 1  # remembered per LM
    silent = ScriptedLM(lambda m: "7")
    assert not logprob_support(silent.lm)[0]
    refusing = ScriptedLM(
        lambda m: "7",
        logprobs=lambda r, q: litellm.exceptions.BadRequestError(
            "logprobs not supported", model="o3", llm_provider="openai"
        ),
    )
    ok, why = logprob_support(refusing.lm)
    assert not ok and "logprobs not supported" in why
    # The flag wins over the probe.
    flagged = ScriptedLM(lambda m: "7")
    flagged.lm.supports_logprobs = False
    assert not logprob_support(flagged.lm)[0] and flagged.requests == []


def test_check_decodings_raises_only_when_asked_explicitly(caplog) -> None:
    silent = ScriptedLM(lambda m: "7")
    with caplog.at_level(logging.WARNING, logger="judgeopt.judge._decoding"):
        assert check_decodings(silent.lm, ["greedy", "expected", "sc5"]) == ["expected"]
    assert "left out of the search" in caplog.text
    with pytest.raises(LogprobsUnavailableError, match=r"\['expected'\] need token log-prob"):
        check_decodings(silent.lm, ["greedy", "expected"], explicit=["expected"])
    assert check_decodings(silent.lm, ["greedy", "sc5"], explicit=["sc5"]) == []


def test_compile_errors_at_start_when_expected_is_asked_without_logprobs(task, records) -> None:
    fake = ScriptedLM(lambda m: "[[2]]")  # never returns logprobs
    judge = JudgeProgram(task, ASPECT, no_cot(task), lm=fake.lm)
    opt = GridJudgeSearch(
        budget=3, space={**ONLY_DECODING, "decoding": ["greedy", "expected"]}, progress=False
    )
    with pytest.raises(LogprobsUnavailableError, match="openai/scripted"):
        opt.compile(judge, trainset=records)
    # The logprob probe only (after the endpoint check).
    assert len(fake.judge_requests) == 1 and fake.judge_requests[0]["max_tokens"] == 1
    assert fake.judge_requests[0]["logprobs"] is True
    # A student that decodes with `expected` asks for it too.
    student = JudgeProgram(
        task, ASPECT, no_cot(task, decoding="expected"), lm=ScriptedLM(lambda m: "[[2]]").lm
    )
    with pytest.raises(LogprobsUnavailableError):
        GridJudgeSearch(budget=3, space=ONLY_DECODING, progress=False).compile(
            student, trainset=records
        )


def test_compile_leaves_expected_out_when_the_lm_has_no_logprobs(task, records, caplog) -> None:
    fake = ScriptedLM(lambda m: "[[2]]")
    judge = JudgeProgram(task, ASPECT, no_cot(task), lm=fake.lm)
    with caplog.at_level(logging.WARNING):
        best = GridJudgeSearch(budget=10, space=ONLY_DECODING, progress=False).compile(
            judge, trainset=records
        )
    tried = [t["strategy"]["decoding"] for t in best.search_result.trace]
    assert sorted(tried) == ["greedy", "sc5"]
    assert "left out of the search" in caplog.text
    # HPSS never proposes it either.
    best = HPSS(
        budget=4,
        space={**ONLY_DECODING, "cot": ["none", "prefix"]},
        progress=False,
        params={"k": 2},
    ).compile(JudgeProgram(task, ASPECT, no_cot(task), lm=fake.lm), trainset=records)
    assert all(t["strategy"]["decoding"] != "expected" for t in best.search_result.trace)


def length_tokens(messages: list[dict[str, Any]]) -> list[str]:
    """A rating tied to the response length, with a distribution that leans towards it."""
    text = str(messages[-1]["content"])
    response = text.split("## The Start of the Response")[-1].split("## The End")[0]
    return ["Rating", ": [[", str(1 + (len(response) // 20) % 3), "]]"]


def length_judge(**kw: Any) -> ScriptedLM:
    def logprobs(reply: str, request: dict[str, Any]) -> list[dict[str, Any]]:
        digit = reply[reply.index("[[") + 2]
        others = [d for d in "123" if d != digit]
        alts = {2: {digit: 0.6, others[0]: 0.25, others[1]: 0.15}}
        return logprob_content(["Rating", ": [[", digit, "]]"], alts)

    return ScriptedLM(lambda m: "".join(length_tokens(m)), logprobs=logprobs, **kw)


def test_compile_with_decoding_exports_and_loads_the_chosen_decoding(
    task, records, tmp_path
) -> None:
    fake = length_judge()
    judge = JudgeProgram(task, ASPECT, no_cot(task), lm=fake.lm)
    best = GridJudgeSearch(
        budget=3, space={**ONLY_DECODING, "decoding": ["greedy", "expected"]}, progress=False
    ).compile(judge, trainset=records)
    tried = sorted(t["strategy"]["decoding"] for t in best.search_result.trace)
    assert tried == ["expected", "greedy"]
    # The expected rating keeps the ranking of the greedy one, plus a tie-breaking spread.
    best = best.with_strategy(best.strategy.replace(decoding="expected"))
    scores = [best.judge(r.inputs, sample_id=r.id).score for r in records]
    path = tmp_path / "judge.json"
    best.save(path)
    data = json.loads(path.read_text())
    assert data["strategy"]["decoding"] == "expected"
    scoring = data["scoring"]
    assert (scoring["decoding"], scoring["top_logprobs"], scoring["samples"]) == ("expected", 20, 1)
    assert "probability-weighted" in scoring["parser"]
    again = length_judge()
    loaded = JudgeProgram.load(path, lm=again.lm)
    assert loaded.decoding == best.decoding
    assert [loaded.judge(r.inputs, sample_id=r.id).score for r in records] == pytest.approx(scores)
    assert all(q["logprobs"] is True for q in again.requests)


def test_export_records_sc_parameters_and_load_applies_them(task, records, tmp_path) -> None:
    judge = JudgeProgram(
        task,
        ASPECT,
        no_cot(task, decoding="sc5"),
        lm=ScriptedLM(lambda m: "[[2]]").lm,
        decoding_params={"samples": 3},
    )
    path = tmp_path / "judge.json"
    judge.save(path)
    scoring = json.loads(path.read_text())["scoring"]
    assert (scoring["decoding"], scoring["samples"], scoring["temperature"]) == ("sc5", 3, 1.0)
    fake = ScriptedLM(lambda m: "[[2]]")
    loaded = JudgeProgram.load(path, lm=fake.lm)
    assert loaded(**records[0].inputs).score == 2.0 and len(fake.requests) == 3


def test_old_exported_judges_without_decoding_load_as_greedy(task, records, tmp_path) -> None:
    judge = JudgeProgram(task, ASPECT, no_cot(task), lm=ScriptedLM(lambda m: "[[2]]").lm)
    data = judge.export()
    del data["strategy"]["decoding"]
    for key in ("samples", "temperature", "top_logprobs", "seed"):
        del data["scoring"][key]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    loaded = JudgeProgram.load(path, lm=ScriptedLM(lambda m: "[[3]]").lm)
    assert loaded.strategy["decoding"] == "greedy"
    assert loaded(**records[0].inputs).score == 3.0
    data["scoring"]["decoding"] = "expected"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="`scoring.decoding` is 'expected'"):
        JudgeProgram.load(path)


def test_checkpoint_from_before_the_decoding_factor_resumes(task, records, tmp_path) -> None:
    from judgeopt.search import FactorSpace
    from judgeopt.search import GridSearch as GridStrategy

    space = {k: v for k, v in ONLY_DECODING.items()} | {"cot": ["none", "prefix"]}
    full = hpss_space(task)
    old_space = FactorSpace(
        {n: (space.get(n) or list(full[n].values)) for n in full.names if n != "decoding"}
    )
    # A checkpoint as the compile wrote it before `decoding` existed: one evaluation done.
    search = GridStrategy(old_space, budget=2, seed=0)
    first = search.ask()
    search.tell(first, 0.5)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "search_state.json").write_text(json.dumps(search.state_dict()))
    (ckpt / "evaluations.jsonl").write_text(
        json.dumps({"number": 0, "strategy": first.as_dict(), "spearman": 0.5}) + "\n"
    )
    fake = ScriptedLM(lambda m: "[[2]]")
    best = GridJudgeSearch(budget=2, space=space, progress=False, checkpoint_dir=ckpt).compile(
        JudgeProgram(task, ASPECT, no_cot(task), lm=fake.lm), trainset=records
    )
    assert best.search_result.evaluations == 2
    assert best.strategy["decoding"] == "greedy"
    assert not math.isnan(best.search_result.best_score)
