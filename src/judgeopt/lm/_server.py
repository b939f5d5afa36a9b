"""Start and stop llama-cpp-python's OpenAI-compatible server for a GGUF, on loopback only."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from ._errors import LocalModelError
from ._local import check_gguf, default_threads, effective_n_ctx
from ._models import LOCAL_MODELS, ensure_local_model

__all__ = ["LlamaServer", "start_llama_server"]

logger = logging.getLogger(__name__)

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _stop_process(
    process: subprocess.Popen[bytes], log_path: Path, keep_log: bool, grace: float
) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            logger.warning("llama.cpp server pid %d ignored SIGTERM; killing it", process.pid)
            process.kill()
            process.wait(timeout=grace)
    if not keep_log:
        log_path.unlink(missing_ok=True)


class LlamaServer:
    """A running ``llama_cpp.server`` process; a context manager that stops it on exit.

    Attributes:
        api_base: ``http://HOST:PORT/v1``, for ``make_lm(server.model, api_base=server.api_base)``.
        model: ``"openai/ALIAS"``, the LiteLLM model string that reaches it.
        alias: The served model name.
        port: The TCP port.
        pid: The server's process id.
        log_path: The file receiving the server's stdout and stderr.
    """

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        *,
        host: str,
        port: int,
        alias: str,
        log_path: Path,
        model_path: Path,
    ) -> None:
        self._process = process
        self.host = host
        self.port = port
        self.alias = alias
        self.log_path = log_path
        self.model_path = model_path
        url_host = f"[{host}]" if ":" in host else host
        self.api_base = f"http://{url_host}:{port}/v1"
        self.model = f"openai/{alias}"
        # Stop the process even if the caller forgets to (garbage collection, interpreter exit).
        self._finalizer = weakref.finalize(self, _stop_process, process, log_path, False, 10.0)

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self._process.pid

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"LlamaServer({self.model!r}, api_base={self.api_base!r}, pid={self.pid}, {state})"

    def is_running(self) -> bool:
        """Whether the server process is still alive."""
        return self._process.poll() is None

    def stderr_tail(self, lines: int = 20) -> str:
        """Return the last ``lines`` lines the server wrote (stdout and stderr together)."""
        return _tail(self.log_path, lines)

    def stop(self, grace: float = 10.0) -> None:
        """Stop the server: SIGTERM, then SIGKILL after ``grace`` seconds. Idempotent."""
        if self._finalizer.alive:
            self._finalizer.detach()
            _stop_process(self._process, self.log_path, False, grace)

    def __enter__(self) -> LlamaServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# Loopback only: never route the readiness probe through an HTTP proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _ready(api_base: str) -> bool:
    try:
        with _OPENER.open(f"{api_base}/models", timeout=2.0) as reply:
            json.loads(reply.read().decode("utf-8"))
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def start_llama_server(
    model_path: str | os.PathLike[str],
    *,
    port: int | None = None,
    alias: str = "local",
    n_ctx: int = 4096,
    n_threads: int | None = None,
    host: str = "127.0.0.1",
    logits_all: bool = True,
    startup_timeout: float = 120.0,
    extra_args: Sequence[str] = (),
) -> LlamaServer:
    """Start ``python -m llama_cpp.server`` for a GGUF and wait until it answers.

    Args:
        model_path: A GGUF file, or a registry name (joined and verified first).
        port: TCP port; ``None`` picks a free one.
        alias: The served model name (``model`` of the requests: ``"openai/" + alias``).
        n_ctx: Context window in tokens (rounded up to a multiple of 256, as llama.cpp does).
        n_threads: CPU threads for generation and prompt processing; ``None`` reads
            ``$JUDGEOPT_THREADS`` (default 2).
        host: Listen address; loopback only, since the server has no authentication.
        logits_all: Keep every position's logits (the server's default; needed for
            ``logprobs``; costs ``n_ctx`` x vocabulary floats of memory).
        startup_timeout: Seconds to wait for ``/v1/models`` to answer.
        extra_args: Further command-line arguments for ``llama_cpp.server``.

    Returns:
        The running :class:`LlamaServer` (use it as a context manager).

    Raises:
        ValueError: If ``host`` is not a loopback address or an argument is out of range.
        LocalModelError: If the model is missing, llama-cpp-python is not installed, or the
            server exits or does not answer in time (the message has its log's tail).
    """
    if host not in _LOOPBACK:
        raise ValueError(
            f"The `host` argument must be a loopback address, one of {sorted(_LOOPBACK)}; the "
            f"server has no authentication. Got {host!r} instead."
        )
    if not alias or any(c.isspace() for c in alias) or "/" in alias:
        raise ValueError(
            "The `alias` argument must be a non-empty name without spaces or '/'. "
            f"Got {alias!r} instead."
        )
    if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 16:
        raise ValueError(f"The `n_ctx` argument must be an int >= 16. Got {n_ctx!r} instead.")
    threads = default_threads() if n_threads is None else n_threads
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(
            f"The `n_threads` argument must be an int >= 1. Got {n_threads!r} instead."
        )
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("uvicorn") is None:
        raise LocalModelError(
            "llama-cpp-python's server is not installed: pip install 'judgeopt[local]' "
            "(or pip install 'llama-cpp-python[server]==0.3.36')."
        )
    if isinstance(model_path, str) and model_path in LOCAL_MODELS:
        path = ensure_local_model(model_path)
    else:
        path = check_gguf(model_path)
    chosen = port if port is not None else _free_port(host)

    fd, log_name = tempfile.mkstemp(prefix="judgeopt-llama-server-", suffix=".log")
    log_path = Path(log_name)
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(path),
        "--model_alias", alias,
        "--host", host,
        "--port", str(chosen),
        "--n_ctx", str(effective_n_ctx(n_ctx)),
        "--n_threads", str(threads),
        "--n_threads_batch", str(threads),
        "--logits_all", str(logits_all),
        *extra_args,
    ]  # fmt: skip
    logger.info("starting llama.cpp server: %s", " ".join(command))
    with os.fdopen(fd, "wb") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    server = LlamaServer(
        process, host=host, port=chosen, alias=alias, log_path=log_path, model_path=path
    )

    deadline = time.monotonic() + startup_timeout
    while True:
        if not server.is_running():
            tail = server.stderr_tail()
            server.stop()
            raise LocalModelError(
                f"the llama.cpp server for {path.name} exited with code {process.returncode} "
                f"before answering on {server.api_base}. Its last output:\n{tail}"
            )
        if _ready(server.api_base):
            logger.info("llama.cpp server ready at %s (pid %d)", server.api_base, server.pid)
            return server
        if time.monotonic() > deadline:
            tail = server.stderr_tail()
            server.stop()
            raise LocalModelError(
                f"the llama.cpp server for {path.name} did not answer on {server.api_base}/models "
                f"within {startup_timeout:g} s. Its last output:\n{tail}"
            )
        time.sleep(0.2)
