"""Ctrl-C on a command with judge calls in flight prints one clean line and exits with 130.

Issue 34: about one interrupt in four printed an ``Exception ignored ... KeyboardInterrupt``
traceback from ``threading`` and eight "the batch engine was closed" warnings before the
"stopped (Ctrl-C)" line. The interpreter joined the judge threads at exit, so the process
waited for every call in flight after saying it had stopped; a second SIGINT in that wait
(Ctrl-C pressed again, or a signal sent to the process and to its group) broke the join with a
traceback, and the embedded model's batch engine, closed at exit, then failed the calls in
flight, each logged as a failed judgement.

Each run here is ``judgeopt evaluate --threads 8`` in a subprocess (the ``judgeopt`` program:
``main()`` on ``sys.argv``) with a fake LM that never answers (the scripted LM of
``judgeopt.testing``, or the embedded model's class over a batch engine that decodes nothing),
interrupted once eight calls are in flight, then once more (while the first is handled, or
after the line). Nothing loads a model.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from judgeopt.judge import JudgeProgram, baseline_strategy, load_task

SCRIPT = r"""
import signal, sys, threading, time

# A program started at a terminal, where Ctrl-C reaches it: Python's own SIGINT handler. A
# suite started in the background (`nohup ... &`, some CI runners) hands its children SIGINT
# ignored, so without this line the run never sees the interrupt and waits for its calls.
signal.signal(signal.SIGINT, signal.default_int_handler)
import judgeopt.lm

WHICH, IN_FLIGHT = sys.argv[1], 8
lock, started = threading.Lock(), [0]


def one_more() -> None:
    with lock:
        started[0] += 1
        if started[0] == IN_FLIGHT:
            print("in flight", flush=True)


if WHICH == "scripted":
    from judgeopt.testing import ScriptedLM

    def respond(messages):
        if messages[-1]["content"] == "Reply with OK.":  # the check call before judging
            return "OK"
        one_more()
        time.sleep(600)  # a server that takes its time: the exit must not wait for it
        return "Rating: [[2]]"

    lm = ScriptedLM(respond).lm
else:  # the embedded model's class over a batch engine that starts requests, never ends them
    from types import SimpleNamespace

    from judgeopt.lm import LlamaCppLM
    from judgeopt.lm._llama_batch import BatchEngine

    class Stalled(BatchEngine):
        def _start(self, slot, request):
            slot.request, slot.started = request, time.monotonic()
            one_more()

        def _step(self):
            time.sleep(0.01)

    class FakeLlama:
        def n_vocab(self):
            return 32

    lock_ = threading.Lock()
    handle = SimpleNamespace(llama=FakeLlama(), lock=lock_, n_ctx=4096, engines={})
    handle.engines[IN_FLIGHT] = Stalled(
        handle.llama, parallel=IN_FLIGHT, n_ctx=4096, n_threads=1, lock=lock_
    )
    lm = LlamaCppLM("smollm2-135m", cache=False, parallel=IN_FLIGHT)
    lm._get_handle = lambda: handle  # closed at exit by the engines' atexit hook

judgeopt.lm.make_lm = lambda model, **kw: lm
sys.argv = ["judgeopt", *sys.argv[2:]]
from judgeopt.cli import main

sys.exit(main())
"""


def _start(which: str, argv: list[str], cwd: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, which, *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env=env,
    )


def _interrupt(proc: subprocess.Popen[str], second_after: float | None) -> tuple[int, str, float]:
    """SIGINT once eight calls are in flight, and again ``second_after`` s later; the exit
    status, stderr and the seconds from the first SIGINT to the exit."""
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = proc.stdout.readline().strip()
        assert line == "in flight", proc.stderr.read()
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        if second_after is not None:
            time.sleep(second_after)
            try:
                proc.send_signal(signal.SIGINT)
            except ProcessLookupError:  # already gone
                pass
        _, err = proc.communicate(timeout=180)
        return proc.returncode, err, time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


_PLAN = "judgeopt evaluate: plan ("


def test_an_interrupted_run_prints_only_the_stopped_line(shared_data: Path, tmp_path: Path) -> None:
    task = load_task("topical_chat")
    judge = tmp_path / "judge.json"
    JudgeProgram(task, "naturalness", baseline_strategy(task).replace(cot="none")).save(judge)
    data = str(shared_data / "topical_chat" / "valid.jsonl")
    # The second SIGINT while the first is handled, and after the line (where the exit used
    # to wait for the calls in flight: the report's traceback and warnings).
    runs = [("scripted", 0.05), ("engine", 0.3)]
    procs = []
    for k, (which, _) in enumerate(runs):  # started together: the imports take the time
        argv = ["evaluate", str(judge), "--data", data, "--limit", "24", "--threads", "8"]
        argv += ["--no-progress", "--model", "openai/x", "--items", str(tmp_path / f"{k}.jsonl")]
        procs.append(_start(which, argv, tmp_path))
    try:
        for k, ((which, second_after), proc) in enumerate(zip(runs, procs, strict=True)):
            status, err, elapsed = _interrupt(proc, second_after)
            what = (which, second_after, status, elapsed, err)
            assert status == 130, what
            # One line: no traceback, no "judging ... failed: ... the batch engine was closed".
            # (after the plan, when the run got as far as printing it)
            lines = [ln for ln in err.strip().splitlines() if not ln.startswith(_PLAN)]
            assert lines == ["judgeopt evaluate: stopped (Ctrl-C)"], what
            # The exit waits for none of the eight calls in flight (each would take 600 s, or
            # never end). It takes about a second; the bound is loose because a loaded
            # machine (a model decoding beside the suite) once took 19.9 s to tear down.
            assert elapsed < 90.0, what
            # Nothing was judged, so nothing is recorded as a judgement.
            items = tmp_path / f"{k}.jsonl"
            assert not items.exists() or not items.read_text().strip(), what
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def test_a_call_the_closed_engine_never_answered_is_no_failure_of_the_run(
    shared_data: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The embedded model's calls failed by its batch engine's closing are ``LMClosed``
    (kind ``closed``): transient (never kept as a judgement, made again by a re-run) and not
    logged as failed judgements."""
    import threading
    from types import SimpleNamespace

    from judgeopt.data import load_records
    from judgeopt.evaluate import evaluate
    from judgeopt.lm import LlamaCppLM, LMClosed
    from judgeopt.lm._llama_batch import BatchEngine, EngineClosed

    class FakeLlama:
        def n_vocab(self) -> int:
            return 32

    lock = threading.Lock()
    engine = BatchEngine(FakeLlama(), parallel=2, n_ctx=256, n_threads=1, lock=lock)
    engine.close()
    with pytest.raises(EngineClosed, match="the batch engine was closed"):
        engine.submit([{"role": "user", "content": "hi"}], max_tokens=4, top_logprobs=None)
    lm = LlamaCppLM("smollm2-135m", cache=False, parallel=2)
    handle = SimpleNamespace(llama=FakeLlama(), lock=lock, n_ctx=256, engines={2: engine})
    lm._get_handle = lambda: handle  # type: ignore[method-assign]
    task = load_task("topical_chat")
    judge = JudgeProgram(task, "naturalness", baseline_strategy(task).replace(cot="none"), lm=lm)
    records = load_records(shared_data / "topical_chat" / "valid.jsonl")[:4]
    kept: list[object] = []
    with caplog.at_level("DEBUG", logger="judgeopt.evaluate"):
        res = evaluate(judge, records, threads=2, progress=False, on_item=kept.append)
    assert [i.error_kind for i in res.items] == ["closed"] * 4
    assert all(i.transient and i.score is None for i in res.items)
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    assert isinstance(LMClosed("x"), Exception) and LMClosed.kind == "closed"
