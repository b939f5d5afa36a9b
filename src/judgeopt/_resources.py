"""The shipped TOML files: task signatures (``signatures/``) and optimizer presets
(``optimizers/``).

Both folders live at the repository's top level and are mapped into the wheel as the data
packages ``judgeopt.signatures`` and ``judgeopt.optimizers`` (``setup.py``). A folder of data files
without an ``__init__.py`` is a namespace package, so one lookup through the import system finds
it in an editable checkout (setuptools maps it to the top-level folder) and in an installed
wheel alike.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Literal

__all__ = ["Shipped", "shipped_dir", "shipped_file", "shipped_names"]

Shipped = Literal["signatures", "optimizers"]


def shipped_dir(kind: Shipped) -> Path | None:
    """The folder of shipped ``kind`` files, or ``None`` if this installation has none."""
    try:
        spec = importlib.util.find_spec(f"judgeopt.{kind}")
    except ImportError:
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        if Path(location).is_dir():
            return Path(location)
    # Run from a source tree that was never installed (PYTHONPATH=src): the folder beside src/.
    beside = Path(__file__).resolve().parents[2] / kind
    return beside if beside.is_dir() else None


def shipped_names(kind: Shipped) -> tuple[str, ...]:
    """Names (file stems) of the shipped ``kind`` files, sorted."""
    folder = shipped_dir(kind)
    return tuple(sorted(p.stem for p in folder.glob("*.toml"))) if folder else ()


def shipped_file(kind: Shipped, name: str) -> Path | None:
    """The shipped file ``<kind>/<name>.toml``, or ``None`` if there is none."""
    folder = shipped_dir(kind)
    path = folder / f"{name}.toml" if folder else None
    return path if path is not None and path.is_file() else None
