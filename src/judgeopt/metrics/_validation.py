"""Input validation shared by every metric in :mod:`judgeopt.metrics`.

All user-facing checks live here so that every public function reports the same
problem with the same message. Nothing in this module uses ``assert``: bad input
always raises :class:`ValueError` (or :class:`TypeError` for a wrong type).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Final, Literal, TypeAlias, cast

import numpy as np
import numpy.typing as npt

__all__ = [
    "CONSTANT_GROUPS",
    "METHODS",
    "ConstantGroups",
    "FloatArray",
    "Groups",
    "Method",
    "Scores",
    "as_scores",
    "check_constant_groups",
    "check_method",
    "check_n_resamples",
    "group_indices",
    "validate_groups",
    "validate_pair",
]

FloatArray: TypeAlias = npt.NDArray[np.float64]
"""A one- or two-dimensional array of ``float64``."""

Scores: TypeAlias = Sequence[float] | npt.NDArray[Any]
"""Scores accepted by the metrics: any sequence of real numbers or a 1-D array."""

Groups: TypeAlias = Sequence[Hashable] | npt.NDArray[Any]
"""One hashable group id per item (e.g. the source document or the query id)."""

Method: TypeAlias = Literal["spearman", "kendall", "pearson"]
"""Name of a correlation coefficient."""

METHODS: Final[tuple[str, ...]] = ("spearman", "kendall", "pearson")
"""Allowed values of the ``method`` argument, in documentation order."""

ConstantGroups: TypeAlias = Literal["zero", "skip"]
"""How a group-level correlation counts a group in which the judge's scores are constant
and the human scores vary: ``"zero"`` (the judge ranks nothing there) or ``"skip"``."""

CONSTANT_GROUPS: Final[tuple[str, ...]] = ("zero", "skip")
"""Allowed values of the ``constant_groups`` argument, the default first."""


def as_scores(values: Scores, name: str) -> FloatArray:
    """Convert ``values`` to a 1-D ``float64`` array and check that it is finite.

    Args:
        values: A sequence of real numbers or a numpy array.
        name: Argument name used in error messages (e.g. ``"human"``).

    Returns:
        A new 1-D ``float64`` array holding the values.

    Raises:
        ValueError: If the values are not numeric, not one-dimensional, or contain
            NaN or infinite values (the message gives the argument and the count).
    """
    try:
        array = np.array(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must contain only real numbers: {exc}") from exc
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got an array of shape {array.shape}")
    n_bad = int(np.count_nonzero(~np.isfinite(array)))
    if n_bad:
        raise ValueError(
            f"{name} contains {n_bad} NaN/inf value{'s' if n_bad != 1 else ''} "
            f"out of {array.size}; remove or impute them first"
        )
    return array


def validate_pair(
    x: Scores,
    y: Scores,
    names: tuple[str, str] = ("human", "predicted"),
    *,
    min_items: int = 3,
    allow_constant: bool = False,
) -> tuple[FloatArray, FloatArray]:
    """Validate two paired score vectors.

    Args:
        x: First score vector (usually the human scores).
        y: Second score vector (usually the judge's scores).
        names: Argument names of ``x`` and ``y`` used in error messages.
        min_items: Minimum number of items required.
        allow_constant: If False, a vector whose values are all equal is rejected.

    Returns:
        The two vectors as 1-D ``float64`` arrays.

    Raises:
        ValueError: If the lengths differ (both lengths are reported), a vector
            holds NaN/inf, there are fewer than ``min_items`` items, or (unless
            ``allow_constant``) a vector is constant.
    """
    a = as_scores(x, names[0])
    b = as_scores(y, names[1])
    if a.size != b.size:
        raise ValueError(
            f"lengths differ: {names[0]} has {a.size} items but {names[1]} has {b.size}"
        )
    if a.size < min_items:
        raise ValueError(f"need at least {min_items} items, got {a.size}")
    if not allow_constant:
        for array, name in ((a, names[0]), (b, names[1])):
            if array.max() == array.min():
                raise ValueError(
                    f"{name} is constant (every value is {array[0]:g}); a correlation is undefined"
                )
    return a, b


def validate_groups(groups: Groups, n_items: int) -> list[Hashable]:
    """Check that there is exactly one group id per item.

    Args:
        groups: One hashable group id per item.
        n_items: Number of items the ids must cover.

    Returns:
        The group ids as a list.

    Raises:
        ValueError: If the number of group ids differs from ``n_items`` or
            ``groups`` is a multi-dimensional array.
        TypeError: If a group id is not hashable.
    """
    if isinstance(groups, np.ndarray):
        if groups.ndim != 1:
            raise ValueError(f"groups must be one-dimensional, got shape {groups.shape}")
        ids: list[Hashable] = groups.tolist()
    else:
        ids = list(groups)
    if len(ids) != n_items:
        raise ValueError(f"groups has {len(ids)} ids but there are {n_items} items")
    for gid in ids:
        if not isinstance(gid, Hashable):
            raise TypeError(f"group ids must be hashable, got {type(gid).__name__}")
    return ids


def group_indices(ids: Sequence[Hashable]) -> dict[Hashable, npt.NDArray[np.intp]]:
    """Map every group id to the positions of its items, in first-seen order.

    Args:
        ids: One group id per item (already validated).

    Returns:
        An insertion-ordered dict from group id to an integer index array.
    """
    positions: dict[Hashable, list[int]] = {}
    for i, gid in enumerate(ids):
        positions.setdefault(gid, []).append(i)
    return {gid: np.asarray(idx, dtype=np.intp) for gid, idx in positions.items()}


def check_method(method: str) -> Method:
    """Check a correlation method name.

    Args:
        method: One of ``"spearman"``, ``"kendall"`` or ``"pearson"``.

    Returns:
        The same name, typed as :data:`Method`.

    Raises:
        ValueError: If ``method`` is not one of the allowed names (they are listed).
    """
    if method in METHODS:
        return cast(Method, method)
    raise ValueError(f"unknown method {method!r}; allowed: {', '.join(METHODS)}")


def check_constant_groups(constant_groups: str) -> ConstantGroups:
    """Check the ``constant_groups`` argument of the group-level metrics.

    Args:
        constant_groups: ``"zero"`` or ``"skip"``.

    Returns:
        The same value, typed as :data:`ConstantGroups`.

    Raises:
        ValueError: Naming the value and the allowed ones.
    """
    if constant_groups in CONSTANT_GROUPS:
        return cast(ConstantGroups, constant_groups)
    raise ValueError(
        f"constant_groups must be one of {', '.join(map(repr, CONSTANT_GROUPS))}, "
        f"got {constant_groups!r}"
    )


def check_n_resamples(n_resamples: int) -> int:
    """Check a resample count.

    Args:
        n_resamples: Requested number of resamples.

    Returns:
        The count as an ``int``.

    Raises:
        ValueError: If ``n_resamples`` is not a positive integer.
    """
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, int | np.integer):
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples}")
    return int(n_resamples)
