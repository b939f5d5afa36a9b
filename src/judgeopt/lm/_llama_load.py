"""Loading a GGUF into llama.cpp once per process, and the checks around it, without DSPy.

:func:`load_llama` is the one loader of the process: :class:`judgeopt.lm.LlamaCppLM` and the
glass-box :class:`judgeopt.glassbox.LlamaCppBackend` share a loaded model (and its lock) when
they ask for the same file, ``n_ctx``, ``n_threads`` and ``logits_all``.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._llama_batch import BatchEngine, close_engines, engines_running
from ._models import LOCAL_MODELS, local_model_error

__all__ = [
    "LlamaHandle",
    "check_gguf",
    "default_threads",
    "effective_n_ctx",
    "gguf_identity",
    "load_llama",
]

logger = logging.getLogger(__name__)

_LLAMA_INSTALL = "pip install 'judgeopt[local]' (or pip install 'llama-cpp-python[server]==0.3.36')"


def effective_n_ctx(n_ctx: int) -> int:
    """Round a context size up to a multiple of 256, as llama.cpp does when it loads a model.

    llama-cpp-python sizes its token buffer by the requested ``n_ctx`` while llama.cpp rounds
    the context up; a prompt between the two sizes then crashes with a numpy broadcast error
    instead of the context-window error. Asking for the rounded size avoids that.
    """
    return -(-n_ctx // 256) * 256


def default_threads() -> int:
    """Return the thread count for llama.cpp: ``$JUDGEOPT_THREADS`` or 2.

    Raises:
        ValueError: If ``JUDGEOPT_THREADS`` is not a positive integer.
    """
    raw = os.environ.get("JUDGEOPT_THREADS")
    if raw is None or raw.strip() == "":
        return 2
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(
            "The JUDGEOPT_THREADS environment variable must be an integer >= 1. "
            f"Got {raw!r} instead."
        )
    return value


def gguf_identity(model: str | os.PathLike[str]) -> str:
    """Return what a GGUF is, for cache keys: ``gguf-sha256:<hash>`` for a registry model
    (its verified hash), ``gguf:<path>:<size>:<mtime_ns>`` for another file."""
    if isinstance(model, str) and model in LOCAL_MODELS:
        return f"gguf-sha256:{LOCAL_MODELS[model].sha256}"
    path = Path(model).expanduser().resolve()
    stat = path.stat()
    return f"gguf:{path}:{stat.st_size}:{stat.st_mtime_ns}"


def check_gguf(path: str | os.PathLike[str]) -> Path:
    """Check that ``path`` is an existing GGUF file (by its magic bytes) and return it resolved.

    Raises:
        LocalModelError: If the file does not exist or is not a GGUF.
    """
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file():
        raise local_model_error(
            f"the model file {resolved} does not exist (expected a .gguf file)."
        )
    with open(resolved, "rb") as handle:
        magic = handle.read(4)
    if magic != b"GGUF":
        raise local_model_error(
            f"the model file {resolved} is not a GGUF file (its first bytes are {magic!r}, "
            "not b'GGUF'); "
            "llama.cpp only loads GGUF models."
        )
    return resolved


@dataclass
class LlamaHandle:
    """A loaded model: the ``llama_cpp.Llama``, the lock that serialises its use, its context
    size, and the batch engines decoding over it (by width)."""

    llama: Any
    lock: threading.Lock
    n_ctx: int
    # Batch engines over this model, by the number of sequences they decode together.
    engines: dict[int, BatchEngine] = field(default_factory=dict)


_handles_guard = threading.Lock()
_handles: dict[tuple[str, int, int, bool], LlamaHandle] = {}
# Every model this process loaded and still holds, with the lock that serialises its use.
_loaded: weakref.WeakKeyDictionary[Any, threading.Lock] = weakref.WeakKeyDictionary()


def _free_models_at_exit() -> None:
    """Free the models still loaded before the interpreter tears down its modules.

    Left to the garbage collector at shutdown, a ``Llama`` is freed after llama-cpp-python's
    module globals are gone and prints ``Exception ignored in: Llama.__del__ ... TypeError``.
    The batch workers are stopped first (their contexts use the model); a model still in use
    (its lock held by a call, or a worker that did not stop) is left alone.
    """
    close_engines()
    for llama, lock in list(_loaded.items()):
        if engines_running(llama) or not lock.acquire(timeout=2.0):
            continue
        try:
            llama.close()
        except Exception:  # noqa: BLE001 - best effort at exit
            pass
        finally:
            lock.release()


# Registered after the batch module's own exit hook, so it runs first (atexit is LIFO).
atexit.register(_free_models_at_exit)


def load_llama(path: Path, n_ctx: int, n_threads: int, logits_all: bool) -> LlamaHandle:
    """Load (once per process) the Llama for ``(path, n_ctx, n_threads, logits_all)``.

    Raises:
        LocalModelError: If llama-cpp-python is not installed or cannot load the file.
    """
    key = (str(path), n_ctx, n_threads, logits_all)
    with _handles_guard:
        handle = _handles.get(key)
        if handle is not None:
            return handle
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise local_model_error(
                f"llama-cpp-python is not installed: {_LLAMA_INSTALL}."
            ) from exc
        started = time.monotonic()
        try:
            llama = Llama(
                model_path=str(path),
                n_ctx=n_ctx,
                n_threads=n_threads,
                n_threads_batch=n_threads,
                logits_all=logits_all,
                verbose=False,
            )
        except (ValueError, RuntimeError, OSError) as exc:
            raise local_model_error(f"llama.cpp could not load {path}: {exc}") from exc
        logger.info(
            "loaded %s (n_ctx=%d, n_threads=%d) in %.1f s",
            path.name,
            n_ctx,
            n_threads,
            time.monotonic() - started,
        )
        handle = LlamaHandle(llama, threading.Lock(), n_ctx)
        _handles[key] = handle
        _loaded[llama] = handle.lock
        return handle
