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
from pathlib import Path
from typing import Any

from .data import iter_jsonl_rows

__all__ = ["starter_task"]

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


def starter_task(path: str | Path, *, name: str | None = None, max_rows: int = 1000) -> str:
    """The TOML text of a starting task signature for the data file ``path``.

    Args:
        path: A CSV or JSON Lines file (the shared schema or the plain layout).
        name: The task's name (default: the file's stem).
        max_rows: Rows read to tell text from numbers and find the score range.

    Raises:
        ValueError: When the file has fewer than two text columns, or no numeric score
            column and no ``label`` column (naming the columns it has).
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"Data file not found: {p}")
    order, values = _columns(p, max_rows)
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
    task_name = _NOT_IDENT.sub("_", name or p.stem) or "my_task"
    judged = texts[-2:] if pairwise else texts[-1:]
    lines = [
        f"# Task written by `judgeopt init --data {p.name}`: edit it (docs/tasks.md), then",
        f"#   judgeopt compile --task {task_name}.toml --aspect "
        f"{'overall' if pairwise else _ident(next(iter(numbers)))} --data {p.name} "
        "--out judge.json",
        '# Every key left out has a default (docs/tasks.md, "A minimal task").',
        f"name = {json.dumps(task_name)}",
        f'mode = "{"pairwise" if pairwise else "pointwise"}"',
        "# The judged input field(s); the other inputs are shown as context.",
        f"judged_fields = {json.dumps(judged)}",
    ]
    if not pairwise:
        all_scores = [x for xs in numbers.values() for x in xs]
        lo, hi = (math.floor(min(all_scores)), math.ceil(max(all_scores))) if all_scores else (1, 5)
        if hi <= lo:
            hi = lo + 1
        lines += [
            f"# The human scores in the data lie in {lo} .. {hi}.",
            f"score_range = [{lo}, {hi}]",
        ]
    lines.append("")
    lines.append("# The input fields, in prompt order (`label` is the heading the judge sees).")
    if reserved:
        lines.append(f"# Left out (a reserved name or not an identifier): {', '.join(reserved)}.")
    for column in texts:
        lines += [
            "[[inputs]]",
            f"name = {json.dumps(column)}",
            f"label = {json.dumps(column.replace('_', ' ').capitalize())}",
            "",
        ]
    aspects = ["overall"] if pairwise else [_ident(c) for c in numbers]
    lines.append(
        "# One aspect per score column. Edit the criteria: what makes a good "
        + ("response" if pairwise else judged[0].replace("_", " "))
        + " here."
    )
    for aspect, column in zip(aspects, ["label"] if pairwise else list(numbers), strict=True):
        lines += [f"[aspects.{aspect}]"]
        if not pairwise and aspect != column:
            lines.append(f"# scores from the column {column!r}")
        label = aspect.replace("_", " ")
        noun = "response" if pairwise else judged[0].replace("_", " ")
        text = (
            f"{label.capitalize()}: which response follows the instruction and answers it better."
            if pairwise
            else f"{label.capitalize()}: how good the {noun} is in {label}."
        )
        lines += [f"criteria = {json.dumps(text)}", ""]
    return "\n".join(lines)
