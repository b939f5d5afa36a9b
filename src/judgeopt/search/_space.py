"""Categorical factor spaces and the strategies (points) in them."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

Value: TypeAlias = str | int | float | bool
"""A factor value: any JSON scalar (``"prefix"``, ``10``, ``True``)."""

_SCALAR_TYPES = (str, int, float, bool)


def _check_value(factor: str, value: object) -> Value:
    if not isinstance(value, _SCALAR_TYPES) or (
        isinstance(value, float) and not math.isfinite(value)
    ):
        raise TypeError(
            f"The values of factor `{factor}` must be JSON scalars (str, int, finite float or "
            f"bool). Got {value!r} of type {type(value).__name__} instead."
        )
    return value


def _same_value(a: Value, b: Value) -> bool:
    # NOTE: 1 == True and 10 == 10.0 in Python; factor values compare by type as well so that
    # the JSON round trip is exact and `"10"`, `10` and `10.0` stay different values.
    return type(a) is type(b) and a == b


@dataclass(frozen=True)
class Factor:
    """A named categorical factor with an ordered tuple of distinct values.

    Args:
        name: The factor's name, e.g. ``"scale"``.
        values: The values in their natural order (the order is used for grid
            enumeration and deterministic tie-breaking).
        description: Free text shown in docs and reports.

    Raises:
        ValueError: If the name is empty, there are no values, or a value repeats.
        TypeError: If a value is not a JSON scalar.
    """

    name: str
    values: tuple[Value, ...]
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"A factor name must be a non-empty string. Got {self.name!r}.")
        values = tuple(_check_value(self.name, v) for v in self.values)
        if not values:
            raise ValueError(f"Factor `{self.name}` must have at least one value.")
        for i, v in enumerate(values):
            if any(_same_value(v, w) for w in values[:i]):
                raise ValueError(f"Factor `{self.name}` lists the value {v!r} twice.")
        object.__setattr__(self, "values", values)

    def index(self, value: Value) -> int:
        """Position of ``value`` in :attr:`values`.

        Raises:
            ValueError: If ``value`` is not one of the factor's values (the message lists them).
        """
        for i, v in enumerate(self.values):
            if _same_value(v, value):
                return i
        raise ValueError(
            f"{value!r} is not a value of factor `{self.name}`. "
            f"Allowed values: {list(self.values)!r}."
        )

    def __contains__(self, value: object) -> bool:
        return isinstance(value, _SCALAR_TYPES) and any(_same_value(v, value) for v in self.values)


class Strategy(Mapping[str, Value]):
    """An immutable, hashable assignment of one value to each factor of a space.

    A strategy behaves like a read-only mapping ``factor -> value`` whose key order is the
    factor order of its space. Its :attr:`key` (canonical JSON) is stable across processes
    and versions, and :meth:`to_json` / :meth:`from_json` round-trip exactly.

    Build strategies through :meth:`FactorSpace.strategy`, which validates names and values.

    Example:
        >>> space = FactorSpace({"cot": ["none", "prefix"], "scale": [5, 10]})
        >>> s = space.strategy(cot="prefix", scale=10)
        >>> s["scale"], str(s)
        (10, 'cot=prefix, scale=10')
        >>> s.replace(scale=5).key
        '{"cot":"prefix","scale":5}'
    """

    __slots__ = ("_names", "_values", "_hash")

    def __init__(self, names: Sequence[str], values: Sequence[Value]) -> None:
        names_t, values_t = tuple(names), tuple(values)
        if len(names_t) != len(values_t):
            raise ValueError("A strategy needs exactly one value per factor name.")
        self._names: tuple[str, ...] = names_t
        self._values: tuple[Value, ...] = values_t
        self._hash = hash((names_t, tuple((type(v).__name__, v) for v in values_t)))

    def __setattr__(self, name: str, value: object) -> None:
        if hasattr(self, "_hash"):
            raise AttributeError("Strategy is immutable; use replace().")
        object.__setattr__(self, name, value)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Strategy, (self._names, self._values))

    @property
    def names(self) -> tuple[str, ...]:
        """The factor names, in order."""
        return self._names

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Strategy):
            return NotImplemented
        return (
            self._hash == other._hash
            and self._names == other._names
            and all(_same_value(a, b) for a, b in zip(self._values, other._values, strict=True))
        )

    def __hash__(self) -> int:
        return self._hash

    # Mapping interface -------------------------------------------------------------------
    def __getitem__(self, name: str) -> Value:
        try:
            return self._values[self._names.index(name)]
        except ValueError:
            raise KeyError(
                f"Strategy has no factor `{name}`. Factors: {list(self._names)!r}."
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    # Derived forms ------------------------------------------------------------------------
    def as_dict(self) -> dict[str, Value]:
        """The strategy as a plain ``dict`` in factor order."""
        return dict(zip(self._names, self._values, strict=True))

    @property
    def key(self) -> str:
        """Canonical compact JSON form, e.g. ``'{"cot":"prefix","scale":10}'``."""
        return json.dumps(self.as_dict(), separators=(",", ":"), ensure_ascii=False)

    def to_json(self) -> str:
        """Serialise to JSON (same text as :attr:`key`)."""
        return self.key

    @classmethod
    def from_json(cls, text: str | Mapping[str, Any], space: FactorSpace | None = None) -> Strategy:
        """Parse a strategy from JSON text or a mapping.

        Args:
            text: JSON object text or an already parsed mapping.
            space: When given, names and values are validated against it and the factor
                order is the space's.

        Raises:
            ValueError: On malformed JSON or, with ``space``, unknown or missing factors and
                values outside a factor's range.
        """
        if isinstance(text, str):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"Strategy JSON is malformed: {e}") from e
        else:
            data = dict(text)
        if not isinstance(data, dict):
            raise ValueError(f"Strategy JSON must be an object. Got {type(data).__name__}.")
        if space is not None:
            return space.strategy(data)
        return cls(tuple(data), tuple(_check_value(k, v) for k, v in data.items()))

    def replace(self, **changes: Value) -> Strategy:
        """A copy with some factor values changed (factor names must exist)."""
        unknown = [k for k in changes if k not in self._names]
        if unknown:
            raise KeyError(f"Unknown factor(s) {unknown!r}. Factors: {list(self._names)!r}.")
        return Strategy(
            self._names,
            tuple(
                _check_value(n, changes[n]) if n in changes else v
                for n, v in zip(self._names, self._values, strict=True)
            ),
        )

    def __str__(self) -> str:
        return ", ".join(f"{n}={v}" for n, v in zip(self._names, self._values, strict=True))

    def __repr__(self) -> str:
        return f"Strategy({self.key})"


class FactorSpace:
    """The product space of named categorical factors.

    Args:
        factors: Either a sequence of :class:`Factor` or a mapping ``name -> values``. The
            order given is the factor order (used by grid enumeration, stepwise search and
            string forms).

    Raises:
        ValueError: If no factor is given or a name repeats.

    Example:
        >>> space = FactorSpace({"cot": ["none", "prefix", "suffix"], "scale": [3, 5, 10]})
        >>> space.size, len(space.neighbours(space.default()))
        (9, 4)
    """

    def __init__(self, factors: Sequence[Factor] | Mapping[str, Sequence[Value]]) -> None:
        if isinstance(factors, Mapping):
            items = [Factor(name, tuple(values)) for name, values in factors.items()]
        else:
            items = list(factors)
        if not items:
            raise ValueError("A FactorSpace needs at least one factor.")
        names = [f.name for f in items]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"Factor names must be unique; repeated: {dupes!r}.")
        self._factors: tuple[Factor, ...] = tuple(items)
        self._by_name = {f.name: f for f in items}
        self.names: tuple[str, ...] = tuple(names)

    @property
    def factors(self) -> tuple[Factor, ...]:
        """The factors, in order."""
        return self._factors

    def __getitem__(self, name: str) -> Factor:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"Unknown factor `{name}`. Factors: {list(self.names)!r}.") from None

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self._factors)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FactorSpace) and self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def __repr__(self) -> str:
        inner = ", ".join(f"{f.name}: {len(f.values)}" for f in self._factors)
        return f"FactorSpace({inner}; size={self.size})"

    @property
    def size(self) -> int:
        """Number of strategies in the space (the product of the factor sizes)."""
        return math.prod(len(f.values) for f in self._factors)

    def strategy(self, values: Mapping[str, Value] | None = None, /, **kwargs: Value) -> Strategy:
        """Build a validated strategy from a mapping and/or keyword arguments.

        Raises:
            ValueError: On an unknown factor, a missing factor, or a value outside a factor's
                range; the message names the factor, the value and the allowed values.
        """
        data: dict[str, Any] = dict(values or {})
        data.update(kwargs)
        unknown = [k for k in data if k not in self._by_name]
        if unknown:
            raise ValueError(f"Unknown factor(s) {unknown!r}. Factors: {list(self.names)!r}.")
        missing = [n for n in self.names if n not in data]
        if missing:
            raise ValueError(f"Strategy is missing factor(s) {missing!r}.")
        out = []
        for f in self._factors:
            out.append(f.values[f.index(data[f.name])])
        return Strategy(self.names, tuple(out))

    def default(self) -> Strategy:
        """The strategy made of every factor's first value."""
        return Strategy(self.names, tuple(f.values[0] for f in self._factors))

    def validate(self, strategy: Strategy) -> Strategy:
        """Check that ``strategy`` belongs to this space and return it in this space's order."""
        return self.strategy(strategy.as_dict())

    def strategies(self) -> Iterator[Strategy]:
        """Every strategy, in grid order (the last factor varies fastest)."""
        for combo in itertools.product(*(f.values for f in self._factors)):
            yield Strategy(self.names, combo)

    def index(self, strategy: Strategy) -> int:
        """Position of ``strategy`` in :meth:`strategies` order."""
        idx = 0
        for f in self._factors:
            idx = idx * len(f.values) + f.index(strategy[f.name])
        return idx

    def from_index(self, index: int) -> Strategy:
        """The strategy at position ``index`` of :meth:`strategies` order."""
        if not 0 <= index < self.size:
            raise IndexError(f"index must be in [0, {self.size}). Got {index}.")
        out: list[Value] = []
        for f in reversed(self._factors):
            index, r = divmod(index, len(f.values))
            out.append(f.values[r])
        return Strategy(self.names, tuple(reversed(out)))

    def neighbours(self, strategy: Strategy) -> list[Strategy]:
        """All strategies that differ from ``strategy`` in exactly one factor.

        Ordered by factor, then by value order.
        """
        out = []
        for f in self._factors:
            current = strategy[f.name]
            for v in f.values:
                if not _same_value(v, current):
                    out.append(strategy.replace(**{f.name: v}))
        return out

    def to_dict(self) -> dict[str, list[Value]]:
        """``{factor: [values...]}`` in order; JSON-serialisable."""
        return {f.name: list(f.values) for f in self._factors}

    @classmethod
    def from_dict(cls, data: Mapping[str, Iterable[Value]]) -> FactorSpace:
        """Inverse of :meth:`to_dict`."""
        return cls({k: list(v) for k, v in data.items()})
