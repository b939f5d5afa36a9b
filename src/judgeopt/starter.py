"""``judgeopt init``: a starting task signature written from a labelled data file.

The columns of a CSV file (or the keys of JSON Lines) become the task: text columns its input
fields, in file order, the last of them the judged field; numeric columns its aspects, with
the human score range seen in the data; a ``label`` column of ``a`` / ``b`` / ``tie`` makes a
pairwise task whose last two text columns are the judged outputs. The user then edits the
criteria (and anything else; ``docs/tasks.md``).
"""

from __future__ import annotations

import csv
import json
import math
import re
import warnings
from pathlib import Path
from typing import Any

from .data import iter_jsonl_rows

__all__ = ["ConstantScoresWarning", "starter_task"]


class ConstantScoresWarning(UserWarning):
    """A score column whose human scores do not vary: compile refuses that aspect.

    Attributes:
        aspect: The aspect the task names after that column.
    """

    def __init__(self, message: str, aspect: str) -> None:
        super().__init__(message)
        self.aspect = aspect


_SKIP = {"id", "group_id", "system_id", "meta"}
_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")


def _ident(name: str) -> str:
    out = _NOT_IDENT.sub("_", name.strip())
    return out if out and not out[0].isdigit() else f"f_{out}"


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and value.strip():
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _columns(path: Path, max_rows: int) -> tuple[list[str], dict[str, list[Any]]]:
    """Column names in file order and their values (schema prefixes removed)."""
    values: dict[str, list[Any]] = {}
    rows: list[dict[str, Any]] = []
    if path.suffix.lower() == ".csv":
        with path.open(encoding="utf-8-sig", newline="") as fh:
            for i, row in enumerate(csv.DictReader(fh)):
                if i >= max_rows:
                    break
                rows.append(dict(row))
    else:
        for location, obj in iter_jsonl_rows(path):
            if len(rows) >= max_rows:
                break
            if not isinstance(obj, dict):
                raise ValueError(f"{location}: expected a JSON object")
            flat: dict[str, Any] = {}
            for key, value in obj.items():
                if key in ("inputs", "scores") and isinstance(value, dict):
                    flat.update({f"{key}.{k}": v for k, v in value.items()})
                else:
                    flat[key] = value
            rows.append(flat)
    if not rows:
        raise ValueError(f"{path}: no data rows to read the columns from")
    for row in rows:
        for key, value in row.items():
            values.setdefault(key, []).append(value)
    return list(values), values


def _no_spread(column: str, xs: list[float]) -> str | None:
    """Why the human scores ``xs`` of ``column`` cannot be correlated with, or ``None``."""
    if not xs:
        return f"the column `{column}` holds no numeric human score"
    if len(set(xs)) < 2:
        return f"every one of the {len(xs)} human `{column}` scores is {xs[0]:g}"
    return None


def starter_task(path: str | Path, *, name: str | None = None, max_rows: int = 1000) -> str:
    """The TOML text of a starting task signature for the data file ``path``.

    Args:
        path: A CSV or JSON Lines file (the shared schema or the plain layout).
        name: The task's name (default: the file's stem).
        max_rows: Rows read to tell text from numbers and find the score range.

    Raises:
        ValueError: When the file has fewer than two text columns, no numeric score
            column and no ``label`` column (naming the columns it has), or human scores that
            do not vary in any score column (naming each column and its value).

    Warns:
        ConstantScoresWarning: For each score column whose scores do not vary while another
            column's do (the task keeps its aspect, with a comment; compile refuses it).
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"Data file not found: {p}")
    order, values = _columns(p, max_rows)
    texts, reserved, numbers, pairwise = _sort_columns(order, values)
    _check_columns(p, order, texts, numbers, pairwise)
    flat: dict[str, str] = {}
    read = ""
    if not pairwise:
        n_rows = max(len(v) for v in values.values())
        read = f" (in the first {n_rows} rows read)" if n_rows >= max_rows else ""
        flat = _constant_columns(p, numbers, read)
    task_name = _NOT_IDENT.sub("_", name or p.stem) or "my_task"
    judged = texts[-2:] if pairwise else texts[-1:]
    lines = [
        f"# Task written by `judgeopt init --data {p.name}`: edit it (docs/tasks.md), then",
        f"#   judgeopt compile --task {task_name}.toml --aspect "
        f"{'overall' if pairwise else _ident(next(c for c in numbers if c not in flat))} "
        f"--data {p.name} "
        "--out judge.json",
        '# Every key left out has a default (docs/tasks.md, "A minimal task").',
        f"name = {json.dumps(task_name)}",
        f'mode = "{"pairwise" if pairwise else "pointwise"}"',
        "# The judged input field(s); the other inputs are shown as context.",
        f"judged_fields = {json.dumps(judged)}",
    ]
    if not pairwise:
        # Some column varies (else refused above), so lo < hi and the comment holds.
        all_scores = [x for xs in numbers.values() for x in xs]
        lo, hi = math.floor(min(all_scores)), math.ceil(max(all_scores))
        lines += [
            f"# The human scores in the data{read} lie in {lo} .. {hi}.",
            f"score_range = [{lo}, {hi}]",
        ]
    lines.append("")
    lines += _input_lines(texts, reserved)
    lines += _aspect_lines(numbers, flat, judged[0], pairwise)
    return "\n".join(lines)


def _sort_columns(
    order: list[str], values: dict[str, list[Any]]
) -> tuple[list[str], list[str], dict[str, list[float]], bool]:
    """The text columns, the left-out ones, the score columns' numbers, and whether a
    ``label`` column makes the task pairwise."""
    from .judge import RESERVED_FIELDS as RESERVED  # lazy: judgeopt.judge loads DSPy

    texts: list[str] = []
    reserved: list[str] = []
    numbers: dict[str, list[float]] = {}
    pairwise = False
    for column in order:
        base = column.split(".", 1)[-1] if column.startswith(("inputs.", "scores.")) else column
        if column in _SKIP or column.startswith("meta."):
            continue
        if column == "label":
            pairwise = any(str(v) in ("a", "b", "tie") for v in values[column])
            continue
        cells = [v for v in values[column] if v is not None and v != ""]
        parsed = [_number(v) for v in cells]
        if column.startswith("scores.") or (cells and all(x is not None for x in parsed)):
            numbers[base] = [x for x in parsed if x is not None and math.isfinite(x)]
        elif base in RESERVED or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", base):
            reserved.append(base)  # cannot be an input field's name: left out
        else:
            texts.append(base)
    return texts, reserved, numbers, pairwise


def _check_columns(
    p: Path, order: list[str], texts: list[str], numbers: dict[str, list[float]], pairwise: bool
) -> None:
    if len(texts) < (3 if pairwise else 2):
        raise ValueError(
            f"{p}: a task needs at least {3 if pairwise else 2} text columns (the context and "
            f"the judged {'outputs' if pairwise else 'field'}); found {texts!r} among the "
            f"columns {order!r}"
        )
    if not pairwise and not numbers:
        raise ValueError(
            f"{p}: no numeric score column (the human scores) and no pairwise "
            f"`label` column among {order!r}"
        )


def _constant_columns(p: Path, numbers: dict[str, list[float]], read: str) -> dict[str, str]:
    """Score column -> why its scores cannot be correlated with, for each one whose scores do
    not vary (warned about); raises when no column varies."""
    flat = {c: why for c, xs in numbers.items() if (why := _no_spread(c, xs)) is not None}
    if len(flat) == len(numbers):
        raise ValueError(
            f"{p}: {'; '.join(flat.values())}{read}, so the correlation that scores a "
            "judge is undefined for any judge (judgeopt compile refuses such data); use "
            "data whose human scores vary"
        )
    for column, why in flat.items():
        aspect = _ident(column)
        message = (
            f"{p}: {why}{read}, so judgeopt compile refuses the aspect `{aspect}` (a "
            "correlation with constant scores is undefined); the task keeps it for data "
            "whose scores vary"
        )
        # The warning points at the caller of starter_task.
        warnings.warn(ConstantScoresWarning(message, aspect), stacklevel=3)
    return flat


def _input_lines(texts: list[str], reserved: list[str]) -> list[str]:
    lines = ["# The input fields, in prompt order (`label` is the heading the judge sees)."]
    if reserved:
        lines.append(f"# Left out (a reserved name or not an identifier): {', '.join(reserved)}.")
    for column in texts:
        lines += [
            "[[inputs]]",
            f"name = {json.dumps(column)}",
            f"label = {json.dumps(column.replace('_', ' ').capitalize())}",
            "",
        ]
    return lines


def _aspect_lines(
    numbers: dict[str, list[float]], flat: dict[str, str], judged: str, pairwise: bool
) -> list[str]:
    aspects = ["overall"] if pairwise else [_ident(c) for c in numbers]
    lines = [
        "# One aspect per score column. Edit the criteria: what makes a good "
        + ("response" if pairwise else judged.replace("_", " "))
        + " here."
    ]
    for aspect, column in zip(aspects, ["label"] if pairwise else list(numbers), strict=True):
        lines += [f"[aspects.{aspect}]"]
        if not pairwise and aspect != column:
            lines.append(f"# scores from the column {column!r}")
        if column in flat:
            lines += [
                f"# Not compilable on this data: {flat[column]},",
                "# and a judge cannot be correlated with constant human scores.",
            ]
        label = aspect.replace("_", " ")
        noun = "response" if pairwise else judged.replace("_", " ")
        text = (
            f"{label.capitalize()}: which response follows the instruction and answers it better."
            if pairwise
            else f"{label.capitalize()}: how good the {noun} is in {label}."
        )
        lines += [f"criteria = {json.dumps(text)}", ""]
    return lines
