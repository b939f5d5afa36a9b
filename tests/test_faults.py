"""Fault injection: what a compile or an evaluation does when things go wrong (issue 17).

A checkpoint of another run (data, model or settings changed), an endpoint that is down at
the start or dies in the middle of a compile and comes back, judgements that fail
transiently, searches that find nothing (every strategy NaN, answers without a rating,
constant human scores), and data of another task. The LMs are scripted (a Python backend, or
a real HTTP server on loopback): these tests check control flow and bookkeeping, never that a
judge is good.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import pytest

from judgeopt import CheckpointMismatchError
from judgeopt.cli import main
from judgeopt.data import Record, load_records
from judgeopt.evaluate import evaluate
from judgeopt.judge import JudgeProgram, load_task
from judgeopt.lm import LMUnavailable, make_lm
from judgeopt.teleprompt import HPSS
from judgeopt.testing import ScriptedLM, ScriptedServer

ASPECT = "naturalness"
SPACE = {
    "scale": [3, 10],
    "examples": [0],
    "criteria": ["none", "human"],
    "reference": ["none"],
    "cot": ["none", "prefix"],
    "autocot": ["off"],
    "metrics": ["off"],
    "order": ["TD-ER-IC", "IC-TD-ER"],
    "decoding": ["greedy"],
}


@pytest.fixture(scope="module")
def task():
    return load_task("topical_chat")


@pytest.fixture(scope="module")
def data_path(shared_data: Path) -> Path:
    return shared_data / "topical_chat" / "valid.jsonl"


@pytest.fixture(scope="module")
def records(data_path: Path) -> list[Record]:
    return load_records(data_path)[:12]


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # CLI runs build their LM with the default persistent cache: keep it per test.
    monkeypatch.setenv("JUDGEOPT_CACHE_DIR", str(tmp_path / "lm-cache"))


def rating(messages: list[dict[str, Any]]) -> str:
    """A deterministic judge: the rating follows the response's length (scale 10 agrees)."""
    text = str(messages[-1]["content"])
    if "## The Start of the Response" not in text:
        return "OK"
    response = text.split("## The Start of the Response")[-1].split("## The End")[0]
    m = re.search(r"scale of (\d+) to (\d+)", text)
    hi = int(m.group(2)) if m else 3
    return f"Rating: [[{1 + (len(response) // 20) % hi}]]"


def is_judge_call(body: dict[str, Any]) -> bool:
    return "## The Start of the Response" in str(body["messages"][-1]["content"])


def compile_argv(
    data_path: Path,
    api_base: str | None,
    *extra: str,
    budget: int = 2,
    limit: int | None = 10,
    aspect: str = ASPECT,
    model: str = "openai/x",
) -> list[str]:
    """``judgeopt compile`` of Topical-Chat ``aspect`` on ``data_path`` against the server at
    ``api_base`` (None: no ``--api-base``), without progress bars, then ``extra``."""
    return [
        "compile",
        "--task",
        "topical_chat",
        "--aspect",
        aspect,
        "--data",
        str(data_path),
        *(["--limit", str(limit)] if limit is not None else []),
        "--budget",
        str(budget),
        "--model",
        model,
        *(["--api-base", api_base] if api_base is not None else []),
        "--no-progress",
        *extra,
    ]


def hpss(**kw: Any) -> HPSS:
    return HPSS(
        budget=kw.pop("budget", 4),
        space=SPACE,
        progress=False,
        params={"k": 2},
        selection="best",
        **kw,
    )


# -- 1. a checkpoint knows what it belongs to ----------------------------------------------


def test_checkpoint_of_another_run_is_refused_and_restart_discards_it(
    task, records, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ckpt = tmp_path / "ckpt"
    first = hpss(checkpoint_dir=ckpt).compile(
        JudgeProgram(task, ASPECT, lm=ScriptedLM(rating).lm), trainset=records[:10]
    )
    assert first.validation["n"] == 10
    fp = json.loads((ckpt / "fingerprint.json").read_text())
    assert fp["trainset"]["records"] == 10 and fp["model"] == "openai/scripted"

    # Fewer records (as with another --limit): refused, naming the data and the remedy.
    with pytest.raises(CheckpointMismatchError) as err:
        hpss(checkpoint_dir=ckpt).compile(
            JudgeProgram(task, ASPECT, lm=ScriptedLM(rating).lm), trainset=records[:6]
        )
    text = str(err.value)
    assert "trainset" in text and '"records": 10' in text and '"records": 6' in text
    assert "--restart" in text and "model" not in [d[0] for d in err.value.differences]
    # The same number of records with one changed label: refused too (content hash).
    changed = [
        *records[:9],
        Record(**{**records[9].__dict__, "scores": {**records[9].scores, ASPECT: 1.0}}),
    ]
    assert changed[9].scores[ASPECT] != records[9].scores[ASPECT]
    with pytest.raises(CheckpointMismatchError, match="trainset"):
        hpss(checkpoint_dir=ckpt).compile(
            JudgeProgram(task, ASPECT, lm=ScriptedLM(rating).lm), trainset=changed
        )
    # Another model, another search seed, another space, another decoding: refused, named.
    with pytest.raises(CheckpointMismatchError, match="model.*openai/scripted.*openai/other"):
        hpss(checkpoint_dir=ckpt).compile(
            JudgeProgram(task, ASPECT, lm=ScriptedLM(rating, model="openai/other").lm),
            trainset=records[:10],
        )
    with pytest.raises(CheckpointMismatchError, match="optimizer seed"):
        hpss(checkpoint_dir=ckpt, seed=1).compile(
            JudgeProgram(task, ASPECT, lm=ScriptedLM(rating).lm), trainset=records[:10]
        )
    with pytest.raises(CheckpointMismatchError, match="model decoding"):
        hpss(checkpoint_dir=ckpt).compile(
            JudgeProgram(task, ASPECT, lm=ScriptedLM(rating).lm, max_tokens=32),
            trainset=records[:10],
        )

    # The same run again resumes (a larger budget extends it) and says so.
    fake = ScriptedLM(rating)
    with caplog.at_level(logging.INFO, logger="judgeopt.progress"):
        again = hpss(checkpoint_dir=ckpt).compile(
            JudgeProgram(task, ASPECT, lm=fake.lm), trainset=records[:10]
        )
    assert "(4 of 4 strategies done)" in caplog.text and str(ckpt) in caplog.text
    assert fake.judge_requests == [] and again.strategy == first.strategy
    # The search's calls count every session; this run made none of them.
    res = again.search_result
    assert res.calls == first.search_result.calls == 4 * 10 and res.calls_this_run == 0
    assert first.search_result.calls_this_run == 4 * 10

    # restart=True discards it: the result is the new data's.
    fake = ScriptedLM(rating)
    fresh = hpss(checkpoint_dir=ckpt, restart=True).compile(
        JudgeProgram(task, ASPECT, lm=fake.lm), trainset=records[:6]
    )
    assert fresh.validation["n"] == 6 and len(fake.judge_requests) == 4 * 6
    assert json.loads((ckpt / "fingerprint.json").read_text())["trainset"]["records"] == 6


def test_cli_resume_says_where_and_a_changed_run_stops(
    data_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    def left_out() -> int:
        # The server gives no logprobs: `expected` is left out, said once per run.
        n = sum("left out of the search" in r.getMessage() for r in caplog.records)
        caplog.clear()
        return n

    out = tmp_path / "judge.json"
    with ScriptedServer(reply=lambda body: rating(body["messages"])) as srv:
        args = compile_argv(
            data_path, srv.api_base, "--selection", "best", "--out", str(out), budget=3, limit=None
        )
        assert main([*args, "--limit", "10"]) == 0
        err = capsys.readouterr().err
        # --no-progress: one line per strategy instead of the bars.
        assert len(re.findall(r"judgeopt: strategy \d of 3: spearman", err)) == 3
        assert left_out() == 1
        n = len(srv.requests)
        assert main([*args, "--limit", "10"]) == 0
        printed = capsys.readouterr()
        err = printed.err
        assert f"resuming from {out}.ckpt (3 of 3 strategies done)" in err
        # The calls are every session's; the seconds only this run's, and the summary says so.
        assert re.search(
            r"\(\d+ calls, 0 of them in this run, \d+ tokens, \d+ s in this run\)", printed.out
        )
        assert not any(is_judge_call(b) for b in srv.requests[n:])
        assert left_out() == 1
        # A larger budget extends the search (the budget is not part of the fingerprint).
        assert main([*args, "--limit", "10", "--budget", "4"]) == 0
        err = capsys.readouterr().err
        assert f"resuming from {out}.ckpt (3 of 4 strategies done)" in err
        assert "judgeopt: strategy 4 of 4" in err and left_out() == 1
        # --limit 6 instead of 10: the checkpoint is refused with what differs and --restart.
        assert main([*args, "--limit", "6"]) == 2
        err = capsys.readouterr().err
        assert "belongs to another run" in err and "trainset" in err and "--restart" in err
        assert json.loads(out.read_text())["validation"]["n"] == 10  # nothing overwritten
        assert main([*args, "--limit", "6", "--restart"]) == 0
        capsys.readouterr()
        assert json.loads(out.read_text())["validation"]["n"] == 6


# -- 2. dead endpoints ----------------------------------------------------------------------


def test_cli_dead_endpoint_stops_before_the_search(
    data_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "judge.json"
    t0 = time.monotonic()
    status = main(compile_argv(data_path, "http://127.0.0.1:9/v1", "--out", str(out), budget=3))
    err = capsys.readouterr().err
    # The check call stops it, not a retry schedule of minutes; the bound is loose because
    # LiteLLM's first import alone takes seconds on a loaded 2-core machine (it took 25 s
    # beside a running local model).
    assert status == 3 and time.monotonic() - t0 < 60
    assert "does not answer a check call" in err and "nothing was judged" in err
    assert "127.0.0.1:9" in err and "Traceback" not in err
    assert not out.exists() and not (tmp_path / "judge.json.ckpt" / "search_state.json").exists()
    # Nothing was judged, so fixing the model string is not "another run".
    with ScriptedServer(reply=lambda body: rating(body["messages"])) as srv:
        status = main(
            compile_argv(
                data_path,
                srv.api_base,
                "--selection",
                "best",
                "--out",
                str(out),
                model="openai/fixed",
            )
        )
    assert status == 0 and out.is_file()


def test_server_that_dies_mid_compile_and_comes_back(task, records, tmp_path: Path) -> None:
    ref_lm = ScriptedLM(rating)
    ref = hpss().compile(JudgeProgram(task, ASPECT, lm=ref_lm.lm), trainset=records)
    n_ref = len(ref_lm.judge_requests)  # 4 strategies x 12 items
    ckpt = tmp_path / "ckpt"
    answered = {"n": 0}

    def reply(body: dict[str, Any]) -> str:
        if is_judge_call(body):
            answered["n"] += 1
            if answered["n"] == 20:  # in the middle of the second strategy
                threading.Thread(target=srv.close, daemon=True).start()
        return rating(body["messages"])

    srv = ScriptedServer(reply=reply)
    port = srv.port
    try:
        lm = make_lm("openai/x", api_base=srv.api_base, cache=False, num_retries=0)
        with pytest.raises(LMUnavailable) as err:
            hpss(checkpoint_dir=ckpt, max_consecutive_failures=3).compile(
                JudgeProgram(task, ASPECT, lm=lm), trainset=records
            )
    finally:
        srv.close()
    text = str(err.value)
    assert "3 judge calls in a row failed" in text and "strategy 2 of 4" in text
    assert "1 finished strategies" in text and "run the same command again" in text
    # Nothing judged is lost, nothing failed is stored as a result.
    summaries = [json.loads(line) for line in (ckpt / "evaluations.jsonl").read_text().splitlines()]
    assert len(summaries) == 1 and summaries[0]["call_failures"] == 0
    judged_before = answered["n"]
    assert judged_before >= 20

    # The server comes back on the same endpoint: the re-run continues where it stopped.
    with ScriptedServer(reply=lambda body: rating(body["messages"]), port=port) as srv2:
        lm = make_lm("openai/x", api_base=srv2.api_base, cache=False, num_retries=0)
        best = hpss(checkpoint_dir=ckpt, max_consecutive_failures=3).compile(
            JudgeProgram(task, ASPECT, lm=lm), trainset=records
        )
        again = [b for b in srv2.requests if is_judge_call(b)]
    assert best.search_result.trace == ref.search_result.trace
    assert best.strategy == ref.strategy
    assert all(s["call_failures"] == 0 for s in best.search_result.evaluation_summaries)
    # Every judgement made before the failure was kept (the one answered as the server shut
    # down may not have reached the client).
    assert n_ref - judged_before <= len(again) <= n_ref - judged_before + 1


def test_transiently_failed_judgements_are_retried_never_scored(
    task, records, tmp_path: Path
) -> None:
    failing = {records[2].id, records[7].id}
    seen: dict[str, int] = {}

    def respond(messages: list[dict[str, Any]]) -> str | BaseException:
        text = str(messages[-1]["content"])
        key = next((r for r in failing if records_by_id[r].inputs["response"] in text), None)
        if key is not None:
            seen[key] = seen.get(key, 0) + 1
            if seen[key] == 1:  # the first call of each fails, its retry succeeds
                return ConnectionRefusedError("refused")
        return rating(messages)

    records_by_id = {r.id: r for r in records}
    fake = ScriptedLM(respond)
    judge = JudgeProgram(task, ASPECT, lm=fake.lm)
    best = hpss(budget=1).compile(judge, trainset=records)
    assert best.validation["call_failures"] == 0 and seen == {k: 2 for k in failing}

    # Failing twice: the strategy is not scored; the items judged are kept and a re-run
    # judges only the failed ones.
    def always_failing(messages: list[dict[str, Any]]) -> str | BaseException:
        text = str(messages[-1]["content"])
        if records_by_id[records[7].id].inputs["response"] in text:
            return ConnectionRefusedError("refused")
        return rating(messages)

    ckpt = tmp_path / "ckpt"
    with pytest.raises(LMUnavailable, match="1 of 12 judge calls failed twice"):
        hpss(budget=1, checkpoint_dir=ckpt).compile(
            JudgeProgram(task, ASPECT, lm=ScriptedLM(always_failing).lm), trainset=records
        )
    assert not (ckpt / "evaluations.jsonl").exists()
    fake = ScriptedLM(rating)
    done = hpss(budget=1, checkpoint_dir=ckpt).compile(
        JudgeProgram(task, ASPECT, lm=fake.lm), trainset=records
    )
    assert len(fake.judge_requests) == 1 and done.validation["call_failures"] == 0


def test_evaluate_circuit_breaker_counts_failures_in_a_row(task, records) -> None:
    calls = {"n": 0}

    def respond(messages: list[dict[str, Any]]) -> str | BaseException:
        calls["n"] += 1
        # Two failures, a success (the streak starts again), then the endpoint is gone.
        if calls["n"] in (1, 2) or calls["n"] >= 4:
            return ConnectionRefusedError("refused")
        return rating(messages)

    seen: list[Any] = []
    judge = JudgeProgram(task, ASPECT, lm=ScriptedLM(respond).lm)
    with pytest.raises(LMUnavailable, match="3 judge calls in a row failed"):
        evaluate(judge, records, progress=False, on_item=seen.append, max_consecutive_failures=3)
    assert calls["n"] == 6 and len(seen) == 6
    assert [i.error_kind for i in seen] == ["connection"] * 2 + [None] + ["connection"] * 3
    # Without a limit every item is judged and the failures are counted.
    calls["n"] = 0
    res = evaluate(judge, records, progress=False)
    assert res.n == 12 and res.call_failures == 11


# -- 3. bad judges do not leave with exit 0 ---------------------------------------------------


def test_cli_all_nan_search_and_unparsed_answers_exit_nonzero(
    data_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def unparsed_for(share: float):
        def reply(body: dict[str, Any]) -> str:
            if not is_judge_call(body):
                return "OK"
            text = str(body["messages"][-1]["content"])
            response = text.split("## The Start of the Response")[-1]
            if zlib.crc32(response.encode()) % 100 < share * 100:
                return "I cannot rate this."
            return rating(body["messages"])

        return reply

    common = compile_argv(data_path, None, "--selection", "best", budget=3)
    # No answer has a rating: every strategy is NaN.
    with ScriptedServer(reply=lambda body: "I cannot rate this.") as srv:
        out = tmp_path / "nan.json"
        assert main([*common, "--api-base", srv.api_base, "--out", str(out)]) == 1
    cap = capsys.readouterr()
    assert "every one of the 3 strategies scored NaN" in cap.err
    # Each problem is printed once (not also as a log warning).
    assert (cap.out + cap.err).count("every one of the 3 strategies scored NaN") == 1
    assert "not trustworthy" in cap.err and out.is_file()
    assert json.loads(out.read_text())["search"]["problems"]
    # Per strategy, the summary shows the unparsed answers.
    assert re.search(r"^\s+1\s+nan\s+10/10\s+0/10", cap.out, re.M)

    # About 7 of 10 answers unparsed: above the default threshold (0.25), not above 0.9.
    with ScriptedServer(reply=unparsed_for(0.7)) as srv:
        out = tmp_path / "unparsed.json"
        status = main([*common, "--api-base", srv.api_base, "--out", str(out)])
        cap = capsys.readouterr()
        assert status == 1 and "max_parse_failures=0.25" in cap.err
        assert re.search(r"gave no rating for \d+ of 10 validation items", cap.err)
        assert "chosen judge on the 10 search items:" in cap.out
        status = main(
            [*common, "--api-base", srv.api_base, "--out", str(out), "--max-parse-failures", "0.9"]
        )
        cap = capsys.readouterr()
        assert status == 0 and "problem" not in cap.err


def test_constant_human_scores_are_refused_before_any_call(task, records) -> None:
    constant = [Record(**{**r.__dict__, "scores": {**r.scores, ASPECT: 2.0}}) for r in records]
    fake = ScriptedLM(rating)
    with pytest.raises(ValueError, match=r"every one of its 12 human `naturalness` scores is 2"):
        hpss().compile(JudgeProgram(task, ASPECT, lm=fake.lm), trainset=constant)
    assert fake.requests == []
    # evaluate(): the correlations are undefined (None), never a fake 0.
    res = evaluate(JudgeProgram(task, ASPECT, lm=fake.lm), constant, progress=False)
    assert res.spearman is None and res.kendall is None and res.pearson is None
    summeval = load_task("summeval")
    group_constant = [
        Record(
            id=f"s{i}",
            group_id=f"g{i // 3}",
            system_id=None,
            inputs={"source": "a", "summary": "b"},
            scores={"coherence": float(i // 3 + 1)},
        )
        for i in range(9)
    ]
    with pytest.raises(ValueError, match="constant within every one of its 3 groups"):
        hpss().compile(JudgeProgram(summeval, "coherence", lm=fake.lm), trainset=group_constant)


def test_cli_evaluate_refuses_constant_labels_before_loading_a_model(
    task, records, tmp_path: Path, monkeypatch, capsys
) -> None:
    """`judgeopt evaluate` on labels that cannot score a judge: exit 2 and one message
    naming --data, the aspect and the value, before any model is made or call sent."""
    import judgeopt.lm

    made: list[Any] = []
    monkeypatch.setattr(judgeopt.lm, "make_lm", lambda m, **kw: made.append(m))
    data = tmp_path / "constant.jsonl"
    data.write_text(
        "".join(
            json.dumps({**r.__dict__, "scores": {**r.scores, ASPECT: 2.0}}) + "\n" for r in records
        )
    )
    judge = tmp_path / "judge.json"
    JudgeProgram(task, ASPECT).save(judge)
    for extra in ([], ["--baseline"]):
        assert (
            main(
                [
                    "evaluate",
                    str(judge),
                    "--data",
                    str(data),
                    "--model",
                    "openai/x",
                    "--no-progress",
                    *extra,
                ]
            )
            == 2
        )
        err = capsys.readouterr().err
        assert err.startswith(
            "judgeopt: error: `--data`: every one of its 12 human "
            f"`{ASPECT}` scores is 2, so the correlation"
        )
    assert made == []


# -- 4. data of another task ------------------------------------------------------------------


def test_cli_evaluate_on_another_tasks_data_stops_with_one_message(
    task, shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "judge.json"
    JudgeProgram(task, ASPECT).save(path)
    other = shared_data / "summeval" / "full.jsonl"
    with ScriptedServer(reply=lambda body: rating(body["messages"])) as srv:
        status = main(
            [
                "evaluate",
                str(path),
                "--data",
                str(other),
                "--limit",
                "8",
                "--model",
                "openai/x",
                "--api-base",
                srv.api_base,
                "--no-progress",
            ]
        )
        err = capsys.readouterr().err
        assert status == 2 and srv.requests == []
    assert "Traceback" not in err and "judging" not in err
    assert len(err.strip().splitlines()) == 1
    assert "do not fit the judge's task `topical_chat` (aspect `naturalness`)" in err
    assert "'context'" in err and "source" in err and "coherence" in err


def test_compile_on_another_tasks_data_names_the_fields(task, shared_data: Path) -> None:
    other = load_records(shared_data / "summeval" / "full.jsonl")[:6]
    with pytest.raises(ValueError, match=r"`trainset`: the 6 records do not fit"):
        hpss().compile(JudgeProgram(task, ASPECT, lm=ScriptedLM(rating).lm), trainset=other)


# -- 5. smaller ones ---------------------------------------------------------------------------


def test_cli_compile_errors_name_the_options_the_user_typed(
    task, records, shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 34: compile errors said `trainset` where the user typed `--data`. Through the CLI
    they name the option (and its file); the Python API keeps naming `trainset`
    (test_compile_on_another_tasks_data_names_the_fields). All before any call: the
    endpoint refuses connections, and the exit status is 2, not 3."""
    dead = ["--model", "openai/x", "--api-base", "http://127.0.0.1:9/v1", "--no-progress"]
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(r.__dict__) + "\n" for r in records))
    constant = tmp_path / "constant.jsonl"
    constant.write_text(
        "".join(
            json.dumps({**r.__dict__, "scores": {**r.scores, ASPECT: 2.0}}) + "\n" for r in records
        )
    )
    other = str(shared_data / "summeval" / "full.jsonl")

    def compile_(*extra: str) -> str:
        out = str(tmp_path / "judge.json")
        args = ["compile", "--task", "topical_chat", "--aspect", ASPECT, "--out", out]
        assert main([*args, *dead, *extra]) == 2
        err = capsys.readouterr().err
        assert "trainset" not in err and "valset" not in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1, err
        return err

    err = compile_("--data", other, "--limit", "6")
    assert err.startswith(f"judgeopt: error: --data {other}: the 6 records do not fit")
    err = compile_("--data", str(constant))
    assert err.startswith("judgeopt: error: `--data`: every one of its 12 human `naturalness`")
    err = compile_("--data", str(good), "--valid-data", str(constant))
    assert err.startswith("judgeopt: error: `--valid-data`: every one of its 12 human")
    # The test data are checked before the search, not after it.
    err = compile_("--data", str(good), "--test-data", other, "--test-limit", "4")
    assert err.startswith(f"judgeopt: error: --test-data {other}: the 4 records do not fit")
    missing = str(tmp_path / "nowhere.jsonl")
    err = compile_("--data", str(good), "--test-data", missing)
    assert err.startswith(f"judgeopt: error: --test-data {missing}: ")
    err = compile_("--data", str(good), "--ensemble", "2", "--ensemble-anchor", "1")
    assert err.startswith("judgeopt: error: --ensemble-anchor is the baseline's weight")
    stack = ("--ensemble", "2", "--ensemble-stack", "10", "--ensemble-anchor", "0.5")
    err = compile_("--data", str(good), *stack)
    assert err.startswith("judgeopt: error: --ensemble-stack and --ensemble-anchor cannot")
    err = compile_("--data", str(good), "--ensemble", "2", "--ensemble-stack=-1")
    assert err.startswith("judgeopt: error: --ensemble-stack is the stack's ridge penalty")


def test_cli_checkpoint_of_other_data_names_the_option(
    data_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "judge.json"
    with ScriptedServer(reply=lambda body: rating(body["messages"])) as srv:
        args = ["compile", "--task", "topical_chat", "--aspect", ASPECT, "--data", str(data_path)]
        args += ["--budget", "2", "--model", "openai/x", "--api-base", srv.api_base]
        args += ["--no-progress", "--selection", "best", "--no-report", "--out", str(out)]
        assert main([*args, "--limit", "8"]) == 0
        capsys.readouterr()
        assert main([*args, "--limit", "6"]) == 2
    err = capsys.readouterr().err
    assert "belongs to another run (--data (trainset): " in err and "--restart" in err


def test_cli_empty_data_file_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    status = main(
        [
            "compile",
            "--task",
            "topical_chat",
            "--aspect",
            ASPECT,
            "--data",
            str(empty),
            "--model",
            "openai/x",
            "--api-base",
            "http://127.0.0.1:9/v1",
            "--out",
            str(tmp_path / "j.json"),
        ]
    )
    err = capsys.readouterr().err
    assert status == 2 and str(empty) in err and "holds no records" in err


def test_unknown_factor_value_in_a_judge_file_names_the_file(task, tmp_path: Path) -> None:
    from judgeopt.judge import load_judge

    path = tmp_path / "judge.json"
    JudgeProgram(task, ASPECT).save(path)
    data = json.loads(path.read_text())
    data["strategy"]["cot"] = "sideways"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*sideways"):
        load_judge(path)
    with pytest.raises(ValueError, match=re.escape(str(path))):
        JudgeProgram.load(path)


def test_a_gguf_path_without_local_suggests_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'local:models/m\.gguf'"):
        make_lm("models/m.gguf")
    gguf = tmp_path / "model"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ValueError, match=f"'local:{re.escape(str(gguf))}'"):
        make_lm(str(gguf))


@pytest.mark.parametrize("command", ["bench-search", "analyze", "compile", "grid", "serve"])
def test_help_prints_no_doubled_percent(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    assert "%%" not in text and len(text) > 200
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "%%" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        # 10 items are too few to confirm: said once, in the summary.
        ("confirm", "winner's curse"),
        # the default rule compares every strategy with the baseline: said once.
        ("lcb", "selection: rule lcb"),
    ],
)
def test_cli_prints_each_selection_message_once(
    rule: str,
    message: str,
    data_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with ScriptedServer(reply=lambda body: rating(body["messages"])) as srv:
        status = main(
            compile_argv(
                data_path,
                srv.api_base,
                *("--no-report", "--selection", rule, "--out", str(tmp_path / "j.json")),
            )
        )
    cap = capsys.readouterr()
    assert status == 0
    assert (cap.out + cap.err).count(message) == 1


def test_cli_several_aspects_report_problems_per_aspect_and_exit_1(
    data_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "judges"
    with ScriptedServer(reply=lambda body: "I cannot rate this.") as srv:
        status = main(
            compile_argv(
                data_path,
                srv.api_base,
                *("--no-report", "--selection", "best", "--out", str(out)),
                aspect=f"{ASPECT},coherence",
            )
        )
    err = capsys.readouterr().err
    # Every aspect is compiled and written; the exit status says none can be trusted.
    assert status == 1 and (out / f"{ASPECT}.json").is_file()
    assert (out / "coherence.json").is_file() and (out / "index.json").is_file()
    assert f"problem ({ASPECT}): every one of the 2" in err
    assert "problem (coherence): every one of the 2" in err


class SilentServer:
    """A loopback server that accepts connections and never answers (a hung model server)."""

    def __init__(self) -> None:
        import socket

        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.held: list[Any] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.held.append(conn)  # read nothing, answer nothing

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        for conn in self.held:
            conn.close()
        self.sock.close()


def test_check_call_gives_up_after_its_own_short_timeout(
    data_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from judgeopt.evaluate import CHECK_TIMEOUT, check_endpoint

    assert CHECK_TIMEOUT == 30.0
    # Warm LiteLLM up (its first call imports the provider client) on a refused port.
    with pytest.raises(LMUnavailable):
        check_endpoint(make_lm("openai/x", api_base="http://127.0.0.1:9/v1", cache=False))
    server = SilentServer()
    try:
        # The judge calls keep their 120 s timeout and 3 retries; the check waits 2 s, once.
        lm = make_lm("openai/x", api_base=f"http://127.0.0.1:{server.port}/v1", cache=False)
        assert lm.timeout == 120.0 and lm.num_retries == 3
        t0 = time.monotonic()
        with pytest.raises(LMUnavailable, match="does not answer a check call") as err:
            check_endpoint(lm, timeout=2.0)
        elapsed = time.monotonic() - t0
        assert 1.5 < elapsed < 4.0, elapsed
        assert "timed out" in str(err.value).lower() or "timeout" in str(err.value).lower()
        # The same through the CLI: `grid --check-timeout 2` exits 3 in about 2 s.
        t0 = time.monotonic()
        status = main(
            [
                "grid",
                "--data",
                str(data_path),
                "--task",
                "topical_chat",
                "--aspect",
                ASPECT,
                "--limit",
                "4",
                "--factors",
                "scale=3",
                "--factors",
                "cot=none",
                "--factors",
                "criteria=none",
                "--factors",
                "order=TD-ER-IC",
                "--factors",
                "examples=0",
                "--factors",
                "reference=none",
                "--factors",
                "autocot=off",
                "--factors",
                "metrics=off",
                "--factors",
                "decoding=greedy",
                "--out",
                str(tmp_path / "g.csv"),
                "--model",
                "openai/x",
                "--api-base",
                f"http://127.0.0.1:{server.port}/v1",
                "--check-timeout",
                "2",
                "--no-progress",
            ]
        )
        elapsed = time.monotonic() - t0
        err_text = capsys.readouterr().err
        assert status == 3 and elapsed < 8.0, (status, elapsed, err_text)
        assert "does not answer a check call made before the grid" in err_text
        # A compile takes the same setting from its preset (check_timeout).
        with pytest.raises(LMUnavailable, match="check call made before the search"):
            t0 = time.monotonic()
            hpss(check_timeout=2.0).compile(
                JudgeProgram(load_task("topical_chat"), ASPECT, lm=lm),
                trainset=load_records(data_path)[:6],
            )
        assert time.monotonic() - t0 < 4.0
        # ... and from `compile --check-timeout 2` (not the judge calls' 2 x 120 s): exit 3.
        t0 = time.monotonic()
        status = main(
            [
                "compile",
                "--data",
                str(data_path),
                "--task",
                "topical_chat",
                "--aspect",
                ASPECT,
                "--limit",
                "6",
                "--optimizer",
                "quick",
                "--out",
                str(tmp_path / "judge.json"),
                "--model",
                "openai/x",
                "--api-base",
                f"http://127.0.0.1:{server.port}/v1",
                "--check-timeout",
                "2",
                "--no-progress",
                "--no-report",
            ]
        )
        elapsed = time.monotonic() - t0
        err_text = capsys.readouterr().err
        assert status == 3 and 1.5 < elapsed < 8.0, (status, elapsed, err_text)
        assert "does not answer a check call made before the search" in err_text
        assert not (tmp_path / "judge.json").exists()
        # ... and `evaluate --check-timeout 2` on an exported judge: exit 3, no item judged.
        exported = tmp_path / "exported.json"
        JudgeProgram(load_task("topical_chat"), ASPECT).save(exported)
        t0 = time.monotonic()
        status = main(
            [
                "evaluate",
                str(exported),
                "--data",
                str(data_path),
                "--limit",
                "4",
                "--model",
                "openai/x",
                "--api-base",
                f"http://127.0.0.1:{server.port}/v1",
                "--check-timeout",
                "2",
                "--no-progress",
            ]  # fmt: skip
        )
        elapsed = time.monotonic() - t0
        err_text = capsys.readouterr().err
        assert status == 3 and 1.5 < elapsed < 8.0, (status, elapsed, err_text)
        assert "does not answer a check call made before evaluating" in err_text
    finally:
        server.close()


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "soon"])
def test_compile_check_timeout_is_a_positive_number_of_seconds(
    value: str, data_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["compile", "--data", str(data_path), "--task", "topical_chat", "--aspect", ASPECT]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--out", str(tmp_path / "j.json"), "--check-timeout", value])
    assert exit_.value.code == 2
    assert "argument --check-timeout: expected a number of seconds" in capsys.readouterr().err
