"""Checks made before any judge call: do the records fit the judge's task, can they score it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..data import Record, validate_records

__all__ = ["check_label_spread", "check_records"]


def check_records(program: Any, records: Sequence[Record]) -> None:
    """Check that ``records`` fit the judge's task before any call is made.

    Every record needs the task's input fields and the judged aspect's score (pointwise,
    within the task's human range) or a pairwise label. Data of another task (no record has
    a needed field or score) gets one message naming what is missing and what the records
    have. Judges without a signature task (PrExMe programs) are not checked here.

    Raises:
        ValueError: Naming the task, the aspect, the missing fields or scores and what the
            records have instead (or, for a few bad records, up to five of them).
    """
    task: Any = getattr(program, "task", None)
    names = getattr(task, "input_names", None)
    if task is None or names is None or not hasattr(task, "human_range") or not records:
        return
    pairwise = task.mode == "pairwise"
    aspect = program.aspect
    what = f"the judge's task `{task.name}`" + ("" if pairwise else f" (aspect `{aspect}`)")
    n = len(records)
    absent = [f for f in names if all(f not in r.inputs for r in records)]
    problems = []
    if absent:
        has = sorted({k for r in records for k in r.inputs})
        problems.append(
            f"no record has the input field(s) {absent!r} (the records have: "
            f"{', '.join(has) or 'none'}; the task needs: {', '.join(names)})"
        )
    if pairwise and all(r.label is None for r in records):
        problems.append("no record has a pairwise label ('a', 'b' or 'tie')")
    if not pairwise and all(aspect not in r.scores for r in records):
        has = sorted({k for r in records for k in r.scores})
        problems.append(
            f"no record has a score for `{aspect}` (the records have scores "
            f"for: {', '.join(has) or 'nothing'})"
        )
    if problems:
        raise ValueError(
            f"the {n} records do not fit {what}: "
            + "; ".join(problems)
            + ". Is this the data of another task?"
        )
    # NOTE: repeated ids are the caller's business here (the same item judged twice).
    unique = list({r.id: r for r in records}.values())
    try:
        validate_records(
            unique,
            required_fields=names,
            aspect=None if pairwise else aspect,
            score_range=None if pairwise else task.human_range(aspect),
            pairwise=pairwise,
        )
    except ValueError as e:
        raise ValueError(f"records that do not fit {what}:\n{e}") from None


def check_label_spread(records: Sequence[Record], task: Any, aspect: str, name: str) -> None:
    """Refuse records whose human scores cannot be correlated with any judge.

    Pointwise tasks only (a pairwise verdict is scored by accuracy). At dataset level the
    scores must take two values or more; at group level they must vary within at least one
    group. Called before any judge call, so a hopeless run costs nothing.

    Args:
        records: The labelled records to score a judge on.
        task: The task (its ``mode`` and ``correlation_level`` decide the check).
        aspect: The human score to correlate with.
        name: How the records are named in the message (``trainset``, ``--data``).

    Raises:
        ValueError: Naming ``name``, the aspect, and the constant value or the group count.
    """
    if task.mode == "pairwise":
        return
    level = task.correlation_level or "dataset"
    humans = [r.scores[aspect] for r in records]
    if level == "group":
        by: dict[str, set[float]] = {}
        for r in records:
            by.setdefault(r.group_id or r.id, set()).add(r.scores[aspect])
        if all(len(v) < 2 for v in by.values()):
            raise ValueError(
                f"`{name}`: the human `{aspect}` scores are constant within every one of its "
                f"{len(by)} groups, so the group-level correlation that scores a judge is "
                "undefined for any judge; use records whose scores vary within groups"
            )
        return
    if len(set(humans)) < 2:
        raise ValueError(
            f"`{name}`: every one of its {len(humans)} human `{aspect}` scores is "
            f"{humans[0]:g}, so the correlation that scores a judge is undefined for any "
            "judge; use records whose human scores vary"
        )
