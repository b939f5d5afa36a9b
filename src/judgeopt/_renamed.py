"""Old public names that still work for a release, with a ``DeprecationWarning``.

A package that renamed a public name keeps the old one reachable through its module
``__getattr__``: ``__getattr__ = renamed_names(__name__, {"Old": "New"}, globals())``. The old
name is not in ``__all__`` (nor in ``dir()``), so no new code picks it up, and the warning
names the new one.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["renamed_names"]


def renamed_names(
    module: str,
    renamed: Mapping[str, str],
    namespace: Mapping[str, Any] | Callable[[str], Any],
    *,
    stacklevel: int = 2,
) -> Callable[[str], Any]:
    """A module ``__getattr__`` that answers each old name of ``renamed`` (old -> new) with
    the new name's object, warning once per use. ``namespace`` holds the new names (the
    module's ``globals()``), or is a function that finds one (a lazy module's loader).
    ``stacklevel`` points the warning at the caller (3 when the module's own ``__getattr__``
    calls this one)."""
    table = dict(renamed)
    find = namespace if callable(namespace) else namespace.__getitem__

    def __getattr__(name: str) -> Any:
        new = table.get(name)
        if new is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        warnings.warn(
            f"{module}.{name} is deprecated and will be removed in a later release; "
            f"it is now {module}.{new}",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
        return find(new)

    return __getattr__
