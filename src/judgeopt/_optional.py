"""Optional dependencies: one import helper with one install hint.

``import_optional("optuna", extra="tpe", purpose="TPESearch")`` returns the module or raises
:class:`MissingDependencyError` (an ``ImportError``) saying what needs it and how to install it:
``TPESearch needs the optional package 'optuna': pip install 'judgeopt[tpe]'``.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from ._errors import JudgeoptError

__all__ = ["MissingDependencyError", "import_optional", "install_hint", "is_installed"]


class MissingDependencyError(JudgeoptError, ModuleNotFoundError):
    """An optional package that a feature needs is not installed."""


def install_hint(extra: str) -> str:
    """The pip command that installs one of judgeopt's extras."""
    return f"pip install 'judgeopt[{extra}]'"


def is_installed(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def import_optional(module: str, *, extra: str, purpose: str) -> ModuleType:
    """Import an optional dependency, or explain how to install it.

    Args:
        module: The module to import (``"optuna"``, ``"matplotlib.pyplot"``).
        extra: judgeopt's extra that installs it (``"tpe"``, ``"report"``).
        purpose: What needs it, for the message (``"TPESearch"``).

    Raises:
        MissingDependencyError: When the module (or its top-level package) is not installed.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        if e.name not in (module, top):
            raise  # the package is there but one of its own imports failed: not ours to hide
        raise MissingDependencyError(
            f"{purpose} needs the optional package {top!r}: {install_hint(extra)}", name=e.name
        ) from e
