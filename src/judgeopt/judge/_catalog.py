"""The shipped task signatures: where they are, their names, and loading one by name or path."""

from __future__ import annotations

import os
from pathlib import Path

from .._resources import shipped_dir
from ._task import JudgeTask

__all__ = ["available_tasks", "load_task", "signature_dirs"]


def signature_dirs() -> list[Path]:
    """Directories searched for shipped signatures: ``signatures/`` at the repository's top
    level, shipped in the wheel as ``judgeopt/signatures`` (see :mod:`judgeopt._resources`)."""
    folder = shipped_dir("signatures")
    return [folder] if folder is not None else []


def available_tasks() -> tuple[str, ...]:
    """Names of the shipped task signatures (``load_task(name)`` accepts them)."""
    names: set[str] = set()
    for d in signature_dirs():
        names.update(p.stem for p in d.glob("*.toml"))
    return tuple(sorted(names))


def load_task(name_or_path: str | os.PathLike[str]) -> JudgeTask:
    """Load a task signature by shipped name (``"summeval"``) or by file path.

    A value that names an existing file, ends in ``.toml`` or contains a path separator is a
    path; anything else is a shipped name looked up in :func:`signature_dirs`.

    Args:
        name_or_path: A shipped task name or the path of a TOML signature.

    Returns:
        The validated task.

    Raises:
        ValueError: On an unknown name (the message lists the shipped ones), an unreadable
            file, or an invalid signature.
    """
    text = os.fspath(name_or_path)
    looks_like_path = (
        isinstance(name_or_path, os.PathLike)
        or text.endswith(".toml")
        or "/" in text
        or os.sep in text
        or Path(text).is_file()
    )
    if looks_like_path:
        return JudgeTask.from_file(text)
    for d in signature_dirs():
        candidate = d / f"{text}.toml"
        if candidate.is_file():
            return JudgeTask.from_file(candidate)
    raise ValueError(
        f"Unknown task {text!r}. Shipped tasks: {list(available_tasks())!r}; or give the path "
        "of a .toml signature."
    )
