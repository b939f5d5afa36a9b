"""Start and stop model servers on loopback: llama-cpp-python's OpenAI-compatible server for a
GGUF here, and the process handling (free port, readiness, stopping by PID) shared with
:mod:`judgeopt.lm._vllm`."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self, TypeVar

from .._validation import check_int
from ._errors import LocalModelError
from ._llama_load import check_gguf, default_threads, effective_n_ctx
from ._models import LOCAL_MODELS, ensure_local_model

__all__ = ["LlamaServer", "ServerProcess", "start_llama_server"]

logger = logging.getLogger(__name__)

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

S = TypeVar("S", bound="ServerProcess")


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
    process: subprocess.Popen[bytes],
    log_path: Path,
    keep_log: bool,
    grace: float,
    group: bool = False,
) -> None:
    """SIGTERM ``process``, SIGKILL it after ``grace`` seconds.

    With ``group`` (the server was started as a session leader, so its process group id is
    its pid and holds only the server and what it spawned), whatever is left of the group
    once the server exited gets SIGTERM, then SIGKILL after ``grace`` seconds.
    """
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            logger.warning("server pid %d ignored SIGTERM; killing it", process.pid)
            if group:
                _kill_group(process.pid)
            process.kill()
            process.wait(timeout=grace)
    if group:
        _reap_group(process.pid, grace)
    if not keep_log:
        log_path.unlink(missing_ok=True)


def _signal_group(pgid: int, sig: signal.Signals | int) -> bool:
    """Send ``sig`` to a process group; whether any member was there to get it."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _kill_group(pgid: int) -> None:
    _signal_group(pgid, signal.SIGKILL)


def _reap_group(pgid: int, grace: float) -> None:
    """SIGTERM what is left of a stopped leader's group, SIGKILL it after ``grace`` seconds."""
    if not _signal_group(pgid, signal.SIGTERM):
        return
    deadline = time.monotonic() + grace
    while _signal_group(pgid, 0):
        if time.monotonic() > deadline:
            logger.warning("children of server pid %d ignored SIGTERM; killing them", pgid)
            _kill_group(pgid)
            return
        time.sleep(0.1)


class ServerProcess:
    """A model server process started by judgeopt; a context manager that stops it on exit.

    The common part of :class:`LlamaServer` and :class:`judgeopt.lm.VLLMServer`.

    Attributes:
        api_base: ``http://HOST:PORT/v1``, for ``make_lm(server.model, api_base=server.api_base)``.
        model: ``"openai/ALIAS"``, the LiteLLM model string that reaches it.
        alias: The served model name.
        host: The listen address (loopback).
        port: The TCP port.
        pid: The server's process id.
        log_path: The file receiving the server's stdout and stderr (deleted by :meth:`stop`).
        model_path: What the server loaded.
    """

    #: The engine's name, for messages.
    engine = "model"
    #: Seconds :meth:`stop` waits after SIGTERM before SIGKILL.
    stop_grace = 10.0

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        *,
        host: str,
        port: int,
        alias: str,
        log_path: Path,
        model_path: Path | str,
        group: bool = False,
    ) -> None:
        self._process = process
        self._group = group
        self.host = host
        self.port = port
        self.alias = alias
        self.log_path = log_path
        self.model_path = model_path
        url_host = f"[{host}]" if ":" in host else host
        self.api_base = f"http://{url_host}:{port}/v1"
        self.model = f"openai/{alias}"
        # Stop the process even if the caller forgets to (garbage collection, interpreter exit).
        self._finalizer = weakref.finalize(
            self, _stop_process, process, log_path, False, self.stop_grace, group
        )

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self._process.pid

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return (
            f"{type(self).__name__}({self.model!r}, api_base={self.api_base!r}, "
            f"pid={self.pid}, {state})"
        )

    def is_running(self) -> bool:
        """Whether the server process is still alive."""
        return self._process.poll() is None

    def stderr_tail(self, lines: int = 20) -> str:
        """Return the last ``lines`` lines the server wrote (stdout and stderr together)."""
        return _tail(self.log_path, lines)

    def stop(self, grace: float | None = None) -> None:
        """Stop the server: SIGTERM, then SIGKILL after ``grace`` seconds (default
        :attr:`stop_grace`). Idempotent."""
        if self._finalizer.alive:
            self._finalizer.detach()
            wait = self.stop_grace if grace is None else grace
            _stop_process(self._process, self.log_path, False, wait, self._group)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class LlamaServer(ServerProcess):
    """A running ``llama_cpp.server`` process; a context manager that stops it on exit.

    Attributes:
        api_base: ``http://HOST:PORT/v1``, for ``make_lm(server.model, api_base=server.api_base)``.
        model: ``"openai/ALIAS"``, the LiteLLM model string that reaches it.
        alias: The served model name.
        port: The TCP port.
        pid: The server's process id.
        log_path: The file receiving the server's stdout and stderr.
        model_path: The GGUF file.
    """

    engine = "llama.cpp"


# Loopback only: never route the readiness probe through an HTTP proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _ready(api_base: str) -> bool:
    try:
        with _OPENER.open(f"{api_base}/models", timeout=2.0) as reply:
            json.loads(reply.read().decode("utf-8"))
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def check_host(host: str) -> None:
    """Refuse a listen address other than loopback: the servers have no authentication."""
    if host not in _LOOPBACK:
        raise ValueError(
            f"The `host` argument must be a loopback address, one of {sorted(_LOOPBACK)}; the "
            f"server has no authentication. Got {host!r} instead."
        )


def check_alias(alias: str) -> None:
    """A served model name must be a non-empty word without '/' (it follows ``openai/``)."""
    if not isinstance(alias, str) or not alias or any(c.isspace() for c in alias) or "/" in alias:
        raise ValueError(
            "The `alias` argument must be a non-empty name without spaces or '/'. "
            f"Got {alias!r} instead."
        )


def launch_server(
    cls: type[S],
    command: Sequence[str],
    *,
    host: str,
    port: int,
    alias: str,
    model_path: Path | str,
    startup_timeout: float,
    env: Mapping[str, str] | None = None,
    group: bool = False,
) -> S:
    """Start ``command`` with its output in a temporary log and wait for ``/v1/models``.

    Args:
        cls: The :class:`ServerProcess` subclass to return.
        command: The server's command line.
        host: The listen address the command was given.
        port: The port the command was given.
        alias: The served model name the command was given.
        model_path: What the server loads (for messages and the returned object).
        startup_timeout: Seconds to wait for the server to answer.
        env: The process environment (default: this process's).
        group: Start the server as a session leader and, when stopping it, kill what is left
            of its process group (for servers that spawn workers, like vLLM).

    Returns:
        The running server.

    Raises:
        LocalModelError: If the process exits or does not answer within ``startup_timeout``
            (it is stopped first; the message has the tail of its log).
    """
    name = model_path.name if isinstance(model_path, Path) else model_path
    tag = cls.engine.lower().replace(".", "")
    fd, log_name = tempfile.mkstemp(prefix=f"judgeopt-{tag}-server-", suffix=".log")
    log_path = Path(log_name)
    logger.info("starting %s server: %s", cls.engine, " ".join(command))
    with os.fdopen(fd, "wb") as log:
        process = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            start_new_session=group,
        )
    server = cls(
        process,
        host=host,
        port=port,
        alias=alias,
        log_path=log_path,
        model_path=model_path,
        group=group,
    )
    _await_ready(server, name, startup_timeout)
    return server


def _await_ready(server: ServerProcess, name: str, startup_timeout: float) -> None:
    engine = server.engine
    started = time.monotonic()
    while True:
        if not server.is_running():
            tail = server.stderr_tail(40)
            server.stop()
            raise LocalModelError(
                f"the {engine} server for {name} exited with code {server._process.returncode} "
                f"before answering on {server.api_base}. Its last output:\n{tail}"
            )
        if _ready(server.api_base):
            logger.info(
                "%s server ready at %s (pid %d) after %.1f s",
                engine,
                server.api_base,
                server.pid,
                time.monotonic() - started,
            )
            return
        if time.monotonic() - started > startup_timeout:
            tail = server.stderr_tail(40)
            server.stop()
            raise LocalModelError(
                f"the {engine} server for {name} did not answer on {server.api_base}/models "
                f"within {startup_timeout:g} s. Its last output:\n{tail}"
            )
        time.sleep(0.2)


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
    check_host(host)
    check_alias(alias)
    check_int(n_ctx, "n_ctx", min_value=16)
    threads = check_int(
        default_threads() if n_threads is None else n_threads, "n_threads", min_value=1
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
    return launch_server(
        LlamaServer,
        command,
        host=host,
        port=chosen,
        alias=alias,
        model_path=path,
        startup_timeout=startup_timeout,
    )
