"""Start several local inference servers on loopback and write the router config for them.

This is ``judgeopt serve``: N replicas of one model (llama.cpp or vLLM servers, see
:data:`ENGINES`), one router config file listing them as one model group, and a clean stop
of every server by its PID.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

from .._validation import check_int
from ._llama_load import gguf_identity
from ._models import LOCAL_MODELS
from ._router_config import ROUTER_PREFIX, SERVE_ENGINES, write_router_config
from ._server import start_llama_server
from ._vllm import start_vllm_server

__all__ = ["ENGINES", "DEFAULT_SERVE_SETTINGS", "Engine", "ServerGroup", "start_servers"]

logger = logging.getLogger(__name__)


class Server(Protocol):
    """What an engine's start function returns (``LlamaServer`` is one)."""

    api_base: str
    model: str
    alias: str
    port: int

    @property
    def pid(self) -> int: ...

    def is_running(self) -> bool: ...

    def stop(self) -> None: ...


@dataclass(frozen=True)
class Engine:
    """An inference runtime ``judgeopt serve`` can start.

    Attributes:
        name: The ``--engine`` value.
        start: ``start(model, *, port, alias, n_ctx, n_threads, logits_all) -> server``;
            the server has ``api_base``, ``model``, ``alias``, ``port``, ``pid``,
            ``is_running()`` and ``stop()`` (like :class:`judgeopt.lm.LlamaServer`).
        model_id: What a replica serves, for the router's cache identity
            (``model_info.judgeopt_model_id``): the same model on the same engine gives the
            same id, so replicas (and later ``serve`` runs on other ports) share entries.
    """

    name: str
    start: Callable[..., Server]
    model_id: Callable[[str], str]


def _llama_model_id(model: str) -> str:
    return f"llama.cpp-server:{gguf_identity(model)}"


def _start_llama(
    model: str, *, port: int | None, alias: str, n_ctx: int, n_threads: int | None, logits_all: bool
) -> Server:
    return start_llama_server(
        model, port=port, alias=alias, n_ctx=n_ctx, n_threads=n_threads, logits_all=logits_all
    )


def _vllm_model_id(model: str) -> str:
    """``vllm:`` and what the replicas load: a GGUF's identity (registry models and GGUF
    files, converted once), a model folder's resolved path, or a hub id."""
    path = Path(model).expanduser()
    if model in LOCAL_MODELS or model.endswith(".gguf") or path.is_file():
        return f"vllm:{gguf_identity(model)}"
    if path.is_dir():
        return f"vllm:folder:{path.resolve()}"
    return f"vllm:hub:{model}"


def _start_vllm(
    model: str, *, port: int | None, alias: str, n_ctx: int, n_threads: int | None, logits_all: bool
) -> Server:
    # vLLM always returns logprobs when asked: ``logits_all`` has no counterpart there.
    return start_vllm_server(
        model, port=port, alias=alias, max_model_len=n_ctx, n_threads=n_threads
    )


#: Engines by ``--engine`` name: llama.cpp servers (llama-cpp-python, in this environment)
#: and vLLM (its own environment, ``$JUDGEOPT_VLLM_PYTHON``; see :func:`start_vllm_server`).
ENGINES: dict[str, Engine] = {
    "llama.cpp": Engine("llama.cpp", _start_llama, _llama_model_id),
    "vllm": Engine("vllm", _start_vllm, _vllm_model_id),
}
assert tuple(ENGINES) == SERVE_ENGINES  # the names the command line lists

#: Router settings written for local replicas: spread requests by the fewest in flight,
#: retry a failed request on another replica, and take a replica that failed out of the
#: rotation for 30 s (a dead local server fails every request).
DEFAULT_SERVE_SETTINGS: Mapping[str, Any] = {
    "routing_strategy": "least-busy",
    "num_retries": 2,
    "allowed_fails": 0,
    "cooldown_time": 30,
    "timeout": 600,
}


def default_alias(model: str) -> str:
    """The served model name: a registry name as is, a GGUF path's file stem, or the last
    part of a model folder or hub id (``Qwen/Qwen2.5-0.5B-Instruct`` ->
    ``Qwen2.5-0.5B-Instruct``)."""
    if model in LOCAL_MODELS:
        name = model
    elif model.lower().endswith(".gguf"):
        name = Path(model).stem
    else:
        name = Path(model.rstrip("/")).name
    alias = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-")
    return alias or "local"


class ServerGroup:
    """Running servers of one model and the router config that lists them.

    A context manager: leaving it stops every server (:meth:`stop`).

    Attributes:
        servers: The running servers, in start order.
        config_path: The router config file written for them.
        engine: The engine name.
        model_name: The model group of the config.
    """

    def __init__(
        self, servers: Sequence[Server], *, config_path: Path, engine: str, model_name: str
    ) -> None:
        self.servers = list(servers)
        self.config_path = config_path
        self.engine = engine
        self.model_name = model_name

    @property
    def spec(self) -> str:
        """The model string of a RouterLM over these servers: ``"router:FILE"``."""
        return f"{ROUTER_PREFIX}{self.config_path}"

    @property
    def pids(self) -> list[int]:
        """The servers' process ids."""
        return [s.pid for s in self.servers]

    def dead(self) -> list[Server]:
        """The servers whose process has exited."""
        return [s for s in self.servers if not s.is_running()]

    def stop(self) -> None:
        """Stop every server by its PID (SIGTERM, then SIGKILL). Idempotent."""
        _stop_all(self.servers)

    def __enter__(self) -> ServerGroup:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (
            f"ServerGroup({self.engine}, {len(self.servers)} servers, "
            f"config={str(self.config_path)!r}, pids={self.pids})"
        )


def _stop_all(servers: Sequence[Server]) -> None:
    for server in servers:
        try:
            server.stop()
        except Exception as exc:  # noqa: BLE001 - stop the others whatever happens
            logger.warning("stopping server pid %s failed: %s", getattr(server, "pid", "?"), exc)


def start_servers(
    model: str | os.PathLike[str],
    *,
    replicas: int = 2,
    engine: str = "llama.cpp",
    config_path: str | os.PathLike[str] = "servers.yaml",
    n_threads: int | None = None,
    n_ctx: int = 4096,
    ports: Sequence[int] | None = None,
    alias: str | None = None,
    logits_all: bool = True,
    model_name: str = "judge",
    router_settings: Mapping[str, Any] | None = None,
) -> ServerGroup:
    """Start ``replicas`` servers of one model on 127.0.0.1 and write their router config.

    Servers start one after another (each waits until it answers); if one fails, the ones
    already started are stopped before the error is raised.

    Args:
        model: A registry name (``qwen2.5-coder-0.5b``...) or a GGUF path; with
            ``engine="vllm"`` also a Hugging Face model folder or hub id (GGUFs are converted
            once, see :func:`judgeopt.lm.convert_gguf_to_hf`).
        replicas: How many servers.
        engine: A key of :data:`ENGINES`: ``"llama.cpp"`` or ``"vllm"`` (needs a vLLM
            environment, ``$JUDGEOPT_VLLM_PYTHON``; ``n_ctx`` is its ``--max-model-len``).
        config_path: Where the router config (YAML) is written.
        n_threads: CPU threads per server (default ``$JUDGEOPT_THREADS`` or 2).
        n_ctx: Context window per server.
        ports: One port per replica; ``None`` picks free ports.
        alias: The served model name (default: the registry name or the file stem).
        logits_all: Keep the logits needed for ``logprobs`` (llama.cpp; vLLM ignores it).
        model_name: The model group of the config.
        router_settings: ``litellm.Router`` settings written to the config (default
            :data:`DEFAULT_SERVE_SETTINGS`).

    Returns:
        A :class:`ServerGroup` (use it as a context manager).

    Raises:
        ValueError: On an unknown engine, a bad replica count or a port list of the wrong
            length.
        LocalModelError: If a server cannot start (the message has its log's tail).
    """
    _check_serve_args(engine, replicas, ports)
    chosen = ENGINES[engine]
    name = str(model)
    served_as = alias or default_alias(name)
    servers: list[Server] = []
    try:
        for i in range(replicas):
            port = ports[i] if ports is not None else None
            logger.info("starting %s server %d of %d for %s", engine, i + 1, replicas, name)
            servers.append(
                chosen.start(
                    name,
                    port=port,
                    alias=served_as,
                    n_ctx=n_ctx,
                    n_threads=n_threads,
                    logits_all=logits_all,
                )
            )
        path = _write_config(
            config_path, servers, engine, name, chosen.model_id(name), model_name, router_settings
        )
    except BaseException:
        _stop_all(servers)
        raise
    return ServerGroup(servers, config_path=path, engine=engine, model_name=model_name)


def _check_serve_args(engine: str, replicas: int, ports: Sequence[int] | None) -> None:
    if engine not in ENGINES:
        raise ValueError(
            f"The `engine` argument must be one of {sorted(ENGINES)}. Got {engine!r} instead."
        )
    check_int(replicas, "replicas", min_value=1)
    if ports is not None and len(ports) != replicas:
        raise ValueError(
            f"The `ports` argument must give one port per replica ({replicas}). "
            f"Got {list(ports)!r} instead."
        )
    if ports is not None and len(set(ports)) != len(ports):
        raise ValueError(f"The `ports` argument must not repeat a port. Got {list(ports)!r}.")


def _write_config(
    config_path: str | os.PathLike[str],
    servers: Sequence[Server],
    engine: str,
    model: str,
    model_id: str,
    model_name: str,
    settings: Mapping[str, Any] | None,
) -> Path:
    return write_router_config(
        config_path,
        [
            {
                "model": s.model,
                "api_base": s.api_base,
                "model_id": model_id,
                "id": f"{engine}-{i + 1}:{s.port}",
            }
            for i, s in enumerate(servers)
        ],
        model_name=model_name,
        router_settings=dict(DEFAULT_SERVE_SETTINGS if settings is None else settings),
        header=(
            f"Written by `judgeopt serve`: {len(servers)} {engine} server(s) of {model} "
            f"on 127.0.0.1\n(pids {', '.join(str(s.pid) for s in servers)}). Use it "
            f"with --router {config_path} or make_lm('router:{config_path}').\n"
            "A LiteLLM Router config: model_list, router_settings "
            "(see docs/lm.md, 'Several servers')."
        ),
    )
