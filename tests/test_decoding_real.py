"""The `decoding` factor against a real local model (llama.cpp in process, two threads).

Marked slow: one tiny compile (4 SFRES items, budget 3) over greedy/expected decoding with
Qwen2.5-Coder-0.5B, then export, load in a fresh process and score with the chosen decoding;
and the stop at the score (a rating-first judge scored without its explanation) on
Topical-Chat items.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from judgeopt.data import load_records
from judgeopt.judge import JudgeProgram, baseline_strategy, load_task
from judgeopt.teleprompt import HPSS

pytestmark = pytest.mark.slow
llama_cpp = pytest.importorskip("llama_cpp")

MODEL = "local:qwen2.5-coder-0.5b"
N_CTX = 2048  # the SFRES prompts fit
SPACE = {
    "scale": [3],
    "examples": [0],
    "criteria": ["human"],
    "reference": ["none"],
    "cot": ["none"],
    "autocot": ["off"],
    "metrics": ["off"],
    "order": ["TD-ER-IC", "IC-TD-ER"],
    "decoding": ["greedy", "expected"],
}

SCORE_IN_FRESH_PROCESS = """
import json, sys
from judgeopt.judge import JudgeProgram
from judgeopt.lm import make_lm
lm = make_lm(sys.argv[1], n_threads=2, n_ctx=int(sys.argv[2]), cache=False)
out = []
for path, n in json.loads(sys.argv[3]):
    judge = JudgeProgram.load(path, lm=lm)
    recs = json.loads(open(sys.argv[4]).read())[:n]
    preds = [judge(**r) for r in recs]
    out.append({"decoding": judge.decoding.name, "scores": [p.score for p in preds],
                "tags": [p.decoding for p in preds],
                "distributions": [p.get("distribution") is not None for p in preds]})
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def items(shared_data: Path):
    # SFRES: real judge prompts of a few hundred tokens.
    return load_records(shared_data / "sfres" / "valid.jsonl")[:4]


def test_qwen_compile_with_decoding_export_load_fresh_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, items
) -> None:
    from judgeopt.lm import make_lm

    monkeypatch.setenv("JUDGEOPT_THREADS", "2")
    try:
        lm = make_lm(MODEL, n_threads=2, n_ctx=N_CTX, cache=tmp_path / "c")
    except Exception as e:  # noqa: BLE001 - the model packages are an optional install
        pytest.skip(f"{MODEL} is not installed: {e}")
    task = load_task("sfres")
    student = JudgeProgram(
        task, "naturalness", baseline_strategy(task).replace(cot="none", scale=3), lm=lm
    )
    best = HPSS(budget=3, space=SPACE, progress=False, params={"k": 2}).compile(
        student, trainset=items
    )
    result = best.search_result
    assert result.evaluations == 3
    # HPSS's initialisation tried the expected rating (no logprob problem at compile start).
    summaries = {s["strategy"]["decoding"]: s for s in result.evaluation_summaries}
    assert set(summaries) == {"greedy", "expected"}
    assert summaries["expected"]["parse_failures"] <= 1, summaries["expected"]
    chosen = best.strategy["decoding"]
    here = [best.judge(r.inputs, sample_id=r.id) for r in items]
    assert all(p.decoding == chosen for p in here)

    best = best.with_model_name(MODEL)
    files = [(str(tmp_path / "judge.json"), len(items))]
    best.save(files[0][0])
    exported = json.loads(Path(files[0][0]).read_text())
    assert exported["strategy"]["decoding"] == exported["scoring"]["decoding"] == chosen
    expected_variant = best.with_strategy(best.strategy.replace(decoding="expected"))
    if chosen != "expected":
        # Also ship the expected variant, so the fresh process always exercises logprobs.
        files.append((str(tmp_path / "expected.json"), 2))
        expected_variant.save(files[1][0])
    data = tmp_path / "items.json"
    data.write_text(json.dumps([r.inputs for r in items]))
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            SCORE_IN_FRESH_PROCESS,
            MODEL,
            str(N_CTX),
            json.dumps(files),
            str(data),
        ],
        text=True,
        capture_output=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    runs = json.loads(out.stdout.strip().splitlines()[-1])
    assert runs[0]["decoding"] == chosen and set(runs[0]["tags"]) == {chosen}
    # The same scores as in the compiling process (llama.cpp may differ in the last digits
    # when a prompt prefix is evaluated in another batch split).
    assert runs[0]["scores"] == pytest.approx([p.score for p in here], abs=0.05)
    expected_run = runs[-1]
    assert expected_run["decoding"] == "expected" and all(expected_run["distributions"])
    ref = [expected_variant.judge(r.inputs, sample_id=r.id).score for r in items[:2]]
    assert expected_run["scores"][:2] == pytest.approx(ref, abs=0.05)
    # Probability-weighted ratings lie inside the scale.
    assert all(1.0 <= s <= 3.0 for s in expected_run["scores"] if s is not None)


def test_qwen_stop_at_score_changes_no_rating_and_no_distribution(shared_data: Path) -> None:
    """A judge that rates first, scored without its explanation (``explain=False``: the call
    stops at ``]]``), gives the same greedy rating, expected rating and distribution on every
    item as the same judge writing its explanation after the rating, for fewer generated
    tokens (``benchmarks/stop_at_score.py`` measures it on more items with the 1.5B)."""
    from judgeopt.lm import make_lm

    try:
        # The batched engine, as compiles use it: every response a function of its request.
        lm = make_lm(MODEL, n_threads=2, n_ctx=4096, parallel=4, cache=False)
    except Exception as e:  # noqa: BLE001 - the model packages are an optional install
        pytest.skip(f"{MODEL} is not installed: {e}")
    task = load_task("topical_chat")
    # The second of these items is one the 0.5B explains after its rating.
    items = load_records(shared_data / "topical_chat" / "valid.jsonl")[3:6]
    strategy = baseline_strategy(task).replace(cot="suffix", decoding="expected")
    # 48 tokens of explanation are enough to show the stop; the rating comes before them.
    explaining = JudgeProgram(task, "naturalness", strategy, lm=lm, max_tokens=48)
    scoring = explaining.with_explain(False)
    assert scoring.stops_at_score and not explaining.stops_at_score
    assert scoring.lm_kwargs() == {"max_tokens": 48, "stop": ["]]"]}
    assert explaining.lm_kwargs() == {"max_tokens": 48}
    tokens = {True: 0, False: 0}
    stopped = 0
    for record in items:
        preds = {}
        for explain, judge in ((True, explaining), (False, scoring)):
            before = lm.stats().completion_tokens
            preds[explain] = judge.judge(record.inputs, sample_id=record.id)
            tokens[explain] += lm.stats().completion_tokens - before
        full, short = preds[True], preds[False]
        assert short.score == full.score and short.greedy_score == full.greedy_score
        assert short.distribution == full.distribution
        if short.raw != full.raw:
            stopped += 1
            # The stopped answer is where the whole one begins, its ``]]`` put back.
            assert full.raw.startswith(short.raw) and short.raw.endswith("]]")
            assert short.rationale is None and full.rationale
    assert stopped >= 1  # the model wrote past its rating, and the stop cut that off
    assert tokens[False] < tokens[True]


def test_qwen_greedy_twin_read_changes_no_rating_and_serves_the_expected_twin(
    tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A greedy judge stopped at its rating asks its call for logprobs on the embedded model
    (:meth:`JudgeProgram.twin_read`): the answer and the rating are those of the call without
    them on every item, and the ``expected`` twin of the judge then makes no call (its
    answers are in the response cache) and reads the same expected rating."""
    from judgeopt.lm import make_lm

    try:
        lm = make_lm(MODEL, n_threads=2, n_ctx=4096, parallel=4, cache=tmp_path / "c")
    except Exception as e:  # noqa: BLE001 - the model packages are an optional install
        pytest.skip(f"{MODEL} is not installed: {e}")
    task = load_task("sfres")
    items = load_records(shared_data / "sfres" / "valid.jsonl")[:6]
    strategy = baseline_strategy(task).replace(cot="suffix")
    greedy = JudgeProgram(task, "naturalness", strategy, lm=lm).with_explain(False)
    twin = greedy.with_strategy(strategy.replace(decoding="expected"))
    assert greedy.twin_read(lm) is not None
    read = [greedy.judge(r.inputs, sample_id=r.id) for r in items]
    with monkeypatch.context() as m:
        m.setattr(JudgeProgram, "twin_read", lambda self, lm: None)
        plain = [greedy.judge(r.inputs, sample_id=r.id) for r in items]
    assert [p.raw for p in read] == [p.raw for p in plain]
    assert [p.score for p in read] == [p.score for p in plain]
    assert all(p.get("expected_score") is None for p in plain)
    # The 0.5B sometimes writes "[5]" and explains on (no "]]" to stop at, no rating parsed).
    assert sum(p.score is not None for p in read) >= 3
    assert all(p.expected_score is not None for p in read if p.score is not None)
    calls = lm.stats().calls
    twins = [twin.judge(r.inputs, sample_id=r.id) for r in items]
    assert lm.stats().calls == calls  # every twin answer from the cache
    assert [t.score for t in twins] == [p.expected_score for p in read]
    assert [t.greedy_score for t in twins] == [p.score for p in read]
