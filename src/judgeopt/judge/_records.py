"""A judge's labelled examples, in whichever form they are given, as records.

A judge draws its in-context examples from labelled data, and a teleprompter compiles on it;
either may be given as :class:`~judgeopt.data.Record` objects, as dicts of the JSONL schema,
or the DSPy way, as ``dspy.Example`` objects (or plain dicts) holding the input fields and the
human label. :func:`to_records` turns any of them into records; :func:`as_example_pool` makes
the pool a :class:`~judgeopt.judge.JudgeProgram` draws its examples from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import dspy

from judgeopt.data import Record, load_records

from ._artifacts import sample_id_of
from ._examples import ExamplePool
from ._task import JudgeTask

__all__ = ["as_example_pool", "to_records"]


def as_example_pool(
    data: Sequence[Record | Mapping[str, Any] | dspy.Example] | ExamplePool | None,
    task: JudgeTask,
    aspect: str,
) -> ExamplePool | None:
    """``data`` as an example pool (``None`` stays ``None``; a pool is returned as it is)."""
    if data is None:
        return None
    if isinstance(data, ExamplePool):
        return data
    return ExamplePool(to_records(data, task, aspect))


def to_records(
    data: Sequence[Record | Mapping[str, Any] | dspy.Example], task: JudgeTask, aspect: str
) -> list[Record]:
    """Convert records, dicts of the JSONL schema, or ``dspy.Example`` objects to records.

    A ``dspy.Example`` (or a plain dict without ``inputs``, e.g. ``{"question": ...,
    "answer": ..., "score": 4}``) carries the input fields plus the human label: the
    aspect's score under the aspect's name or ``score`` (pointwise), or ``label``
    (pairwise).

    Raises:
        ValueError: When an example lacks an input field or its human label.
    """
    out: list[Record] = []
    for i, item in enumerate(data):
        if isinstance(item, Record):
            out.append(item)
            continue
        if isinstance(item, dspy.Example) or (isinstance(item, Mapping) and "inputs" not in item):
            d = dict(item.items())
            if "inputs" not in d:
                missing = [f for f in task.input_names if f not in d]
                if missing:
                    raise ValueError(
                        f"Example {i} lacks input field(s) {missing!r}; it has {sorted(d)!r}."
                    )
                inputs = {f: str(d[f]) for f in task.input_names}
                label = d.get("label")
                scores = {}
                if task.mode == "pointwise":
                    value = d.get(aspect, d.get("score"))
                    if value is None:
                        raise ValueError(
                            f"Example {i} has no human score: give `{aspect}` or `score`."
                        )
                    scores = {aspect: float(value)}
                rid = str(d.get("id") or sample_id_of(inputs, task.input_names))
                out.append(
                    Record(
                        id=rid,
                        group_id=d.get("group_id"),
                        system_id=None,
                        inputs=inputs,
                        scores=scores,
                        label=label,
                    )
                )
                continue
        out.extend(load_records([dict(item)]))
    return out
