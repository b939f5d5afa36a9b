"""Argument checks shared by every package (in the spirit of scikit-learn's ``check_scalar``).

One message format for one kind of mistake: ``The `budget` argument of HPSS must be an int >= 1.
Got 0 instead.`` Booleans are refused where a number is expected (``True`` is an ``int`` to
Python, never a budget to a user), numpy integers and floats are accepted.
"""

from __future__ import annotations

import math
import numbers
from typing import Literal, overload

__all__ = ["check_int", "check_number"]


def _where(name: str, kind: str, owner: str | None) -> str:
    return f"The `{name}` {kind}" + (f" of {owner}" if owner else "")


def _bounds(
    low: float | None, high: float | None, *, low_open: bool = False, high_open: bool = False
) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low}")
    if high is not None:
        parts.append(f"{'<' if high_open else '<='} {high}")
    return " and ".join(parts)


@overload
def check_int(
    value: object,
    name: str,
    *,
    min_value: int | None = ...,
    max_value: int | None = ...,
    allow_none: Literal[False] = ...,
    kind: str = ...,
    owner: str | None = ...,
) -> int: ...
@overload
def check_int(
    value: object,
    name: str,
    *,
    min_value: int | None = ...,
    max_value: int | None = ...,
    allow_none: bool,
    kind: str = ...,
    owner: str | None = ...,
) -> int | None: ...


def check_int(
    value: object,
    name: str,
    *,
    min_value: int | None = None,
    max_value: int | None = None,
    allow_none: bool = False,
    kind: str = "argument",
    owner: str | None = None,
) -> int | None:
    """Return ``value`` as an ``int`` if it is an integer within the bounds, else raise.

    Args:
        value: What the user passed.
        name: The parameter's name, as the user spells it.
        min_value, max_value: Inclusive bounds (``None``: unbounded).
        allow_none: Accept ``None`` (returned as is).
        kind: What ``name`` is ("argument", "field", "option").
        owner: Whose parameter it is (a class or function name), for the message.

    Raises:
        ValueError: Naming the parameter, what is allowed and the value given.
    """
    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if ok:
        number: int = int(value)  # type: ignore[call-overload]
        ok = (min_value is None or number >= min_value) and (
            max_value is None or number <= max_value
        )
    if not ok:
        bounds = _bounds(min_value, max_value)
        allowed = ("None or " if allow_none else "") + "an int" + (f" {bounds}" if bounds else "")
        raise ValueError(f"{_where(name, kind, owner)} must be {allowed}. Got {value!r} instead.")
    return number


@overload
def check_number(
    value: object,
    name: str,
    *,
    min_value: float | None = ...,
    max_value: float | None = ...,
    min_open: bool = ...,
    max_open: bool = ...,
    allow_none: Literal[False] = ...,
    kind: str = ...,
    owner: str | None = ...,
) -> float: ...
@overload
def check_number(
    value: object,
    name: str,
    *,
    min_value: float | None = ...,
    max_value: float | None = ...,
    min_open: bool = ...,
    max_open: bool = ...,
    allow_none: bool,
    kind: str = ...,
    owner: str | None = ...,
) -> float | None: ...


def check_number(
    value: object,
    name: str,
    *,
    min_value: float | None = None,
    max_value: float | None = None,
    min_open: bool = False,
    max_open: bool = False,
    allow_none: bool = False,
    kind: str = "argument",
    owner: str | None = None,
) -> float | None:
    """Return ``value`` as a finite ``float`` within the bounds, else raise.

    ``min_open`` / ``max_open`` make a bound exclusive. Integers are accepted, booleans, NaN and
    infinities are not.

    Raises:
        ValueError: Naming the parameter, what is allowed and the value given.
    """
    if value is None and allow_none:
        return None
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if ok:
        number = float(value)  # type: ignore[arg-type]
        ok = math.isfinite(number)
        if ok and min_value is not None:
            ok = number > min_value if min_open else number >= min_value
        if ok and max_value is not None:
            ok = number < max_value if max_open else number <= max_value
    if not ok:
        bounds = _bounds(min_value, max_value, low_open=min_open, high_open=max_open)
        allowed = (
            ("None or " if allow_none else "")
            + "a finite number"
            + (f" {bounds}" if bounds else "")
        )
        raise ValueError(f"{_where(name, kind, owner)} must be {allowed}. Got {value!r} instead.")
    return number
