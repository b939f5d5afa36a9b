"""The record: one human-labelled item, its pairwise labels, the loader's error, and the check
that records fit a judging task."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeAlias

from .._errors import JudgeoptError

__all__ = [
    "LABELS",
    "DataFormatError",
    "Label",
    "Record",
    "check_names",
    "validate_records",
]

Label: TypeAlias = Literal["a", "b", "tie"]
"""Pairwise gold label: ``output_a`` better, ``output_b`` better, or a tie."""

LABELS: Final[tuple[Label, ...]] = ("a", "b", "tie")
"""Allowed pairwise labels."""

_MAX_REPORTED: Final[int] = 5


@dataclass(frozen=True)
class Record:
    """One human-labelled item.

    Attributes:
        id: Unique id within its dataset.
        group_id: The shared source item (article, dialogue context, prompt), or
            ``None`` when the dataset has no grouping.
        system_id: The system that produced the judged text, when known.
        inputs: Named text fields, e.g. ``{"source": ..., "summary": ...}``.
        scores: Aspect name to human score, as published (not rescaled).
        label: Pairwise gold label, ``None`` for pointwise records.
        meta: Extras that scoring does not need.

    Records compare by value and hash by ``(id, group_id, system_id)``.
    """

    id: str
    group_id: str | None
    system_id: str | None
    inputs: dict[str, str]
    scores: dict[str, float] = field(default_factory=dict)
    label: Label | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __hash__(self) -> int:
        return hash((self.id, self.group_id, self.system_id))


class DataFormatError(JudgeoptError, ValueError):
    """A record could not be read.

    Attributes:
        location: Where the problem is, e.g. ``"data.jsonl, line 3"`` or ``"records[2]"``.
        field: The offending field (``"scores.coherence"``), or ``None`` for the whole line.
    """

    def __init__(self, location: str, field_name: str | None, problem: str) -> None:
        self.location = location
        self.field = field_name
        where = f"{location}: field '{field_name}'" if field_name else location
        super().__init__(f"{where}: {problem}")


def check_names(names: Sequence[str] | None, argument: str) -> frozenset[str]:
    if names is None:
        return frozenset()
    if isinstance(names, str):
        raise TypeError(f"{argument} must be a sequence of names, not a single string {names!r}")
    return frozenset(names)


# ------------------------------------------------------------------------- validation


def validate_records(
    records: Sequence[Record],
    *,
    required_fields: Sequence[str],
    aspect: str | None = None,
    score_range: tuple[float, float] | None = None,
    pairwise: bool = False,
) -> None:
    """Check that records are usable for one judging task.

    Args:
        records: The records to check.
        required_fields: Input fields every record must have (e.g. ``["source", "summary"]``).
        aspect: If given, every record must have a score for this aspect.
        score_range: Inclusive ``(low, high)``. Checked for the ``aspect`` score, or
            for every score of a record when ``aspect`` is ``None``.
        pairwise: If true, every record must have a label ``"a"``, ``"b"`` or ``"tie"``.

    Raises:
        ValueError: If ``records`` is empty, ids repeat, or any record fails a check.
            The message lists up to five problems, each naming the record id (missing
            field with the fields it has; out-of-range score with value and range;
            missing aspect with the aspects present; missing or invalid label), and
            the number of further problems.
        TypeError: If ``required_fields`` is a single string.
    """
    required = check_names(required_fields, "required_fields")
    if score_range is not None:
        low, high = _check_range(score_range, "score_range")
    if not records:
        raise ValueError("no records to validate")
    problems: list[str] = []
    seen: set[str] = set()
    for record in records:
        prefix = f"record {record.id!r}"
        if record.id in seen:
            problems.append(f"{prefix}: duplicate id")
        seen.add(record.id)
        missing = sorted(required.difference(record.inputs))
        if missing:
            has = ", ".join(sorted(record.inputs)) or "none"
            problems.append(f"{prefix}: missing input field {missing[0]!r} (has: {has})")
        if aspect is not None and aspect not in record.scores:
            present = ", ".join(sorted(record.scores)) or "no scores"
            problems.append(f"{prefix}: no score for aspect {aspect!r} (has: {present})")
        if score_range is not None:
            names = [aspect] if aspect is not None else sorted(record.scores)
            for name in names:
                value = record.scores.get(name)
                if value is not None and not low <= value <= high:
                    problems.append(
                        f"{prefix}: score {name!r} = {value:g} outside range [{low:g}, {high:g}]"
                    )
        if pairwise and record.label not in LABELS:
            what = "missing pairwise label" if record.label is None else "invalid pairwise label"
            problems.append(f"{prefix}: {what} {record.label!r} (expected 'a', 'b' or 'tie')")
    if problems:
        shown = problems[:_MAX_REPORTED]
        more = len(problems) - len(shown)
        tail = f"\n... and {more} more problem{'s' if more != 1 else ''}" if more else ""
        raise ValueError("\n".join(shown) + tail)


def _check_range(value: tuple[float, float], name: str) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a (low, high) pair of numbers, got {value!r}") from exc
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"{name} must be finite with low < high, got {value!r}")
    return low, high
