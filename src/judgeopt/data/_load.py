"""Loading records from JSON Lines, CSV or a list of dicts.

A :class:`~._records.Record` is one judged item: pointwise (human ``scores`` per aspect) or
pairwise (a ``label`` saying which of ``output_a`` / ``output_b`` is better). The
loaders read the shared JSONL schema (``shared/data/README.md``) and a CSV layout.

JSON Lines (any file not ending in ``.csv``), one object per line, blank lines ignored::

    {"id": "tc021", "group_id": "ctx03", "system_id": "M1",
     "inputs": {"context": "...", "response": "..."},
     "scores": {"naturalness": 2.67}, "label": null, "meta": {}}

``id`` (non-empty string) and ``inputs`` (non-empty object of strings) are required;
``group_id`` / ``system_id`` (string or null), ``scores`` (object of finite numbers),
``label`` (``"a"``, ``"b"``, ``"tie"`` or null) and ``meta`` (object) are optional.
Any other key is an error, so a typo such as ``"score"`` does not pass silently.

CSV (``*.csv``, UTF-8, an Excel byte-order mark is tolerated), one record per row:

============================  ======================================================
column                        meaning
============================  ======================================================
``id``                        required, non-empty
``group_id``, ``system_id``   optional; an empty cell means ``None``
``label``                     optional; ``a``, ``b``, ``tie`` or empty (``None``)
``inputs.<name>``             an input text field ``<name>``
``<name>`` in ``fields=``     the same, for plain column names (``fields=["response"]``);
                              each name in ``fields=`` needs a column (plain or
                              ``inputs.<name>``)
``scores.<aspect>``           a number; an empty cell means "no score for this aspect"
``<column>`` in ``scores=``   the same, for plain column names (``scores=["helpfulness"]``
                              or ``scores={"score": "helpfulness"}``)
``meta.<key>``                a string stored in ``meta[<key>]`` (empty cells skipped)
============================  ======================================================

The plain layout: with ``fields=`` (input columns) and ``scores=`` (score columns), a file
may use bare column names, ``question,answer,helpfulness``, and then needs no ``id`` column
(a missing ``id`` becomes ``<file name>:<line>``). The same names work as top-level keys of
JSON Lines, e.g. ``{"question": "...", "answer": "...", "score": 4}`` with
``fields=["question", "answer"], scores={"score": "helpfulness"}``. The CLI passes the task's
input fields and aspect names (and ``score`` for the judged aspect).

Every other column is an error, and at least one input column is required. Errors
name the file, the line (for CSV the first physical line of the row), the field and
what was expected; in-memory lists of dicts are located as ``records[i]``.
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from .._validation import check_int
from ._records import LABELS, DataFormatError, Record, check_names

__all__ = ["iter_jsonl_rows", "load_records"]

_JSON_KEYS: Final[tuple[str, ...]] = (
    "id",
    "group_id",
    "system_id",
    "inputs",
    "scores",
    "label",
    "meta",
)


def load_records(
    source: str | os.PathLike[str] | Sequence[Mapping[str, Any]],
    *,
    limit: int | None = None,
    fields: Sequence[str] | None = None,
    scores: Sequence[str] | Mapping[str, str] | None = None,
) -> list[Record]:
    """Read records from a JSONL file, a CSV file or a list of dicts.

    Args:
        source: Path of a ``.csv`` file (CSV layout in the module docstring), of any
            other file (read as JSON Lines), or a sequence of dicts in the JSONL schema.
        limit: Read at most this many records (the file is not read further).
        fields: Plain column names (CSV) or top-level keys (JSONL, dicts) that hold input
            fields.
        scores: Plain column names / top-level keys that hold human scores: a list (the
            column is the aspect) or a mapping column -> aspect (``{"score": "quality"}``).
            With ``fields`` or ``scores``, a record without ``id`` gets its location as id.

    Returns:
        The records, in file order.

    Raises:
        DataFormatError: (a ``ValueError``) on malformed JSON, a missing or empty
            ``id`` / ``inputs``, a non-string input, a non-numeric or non-finite
            score, a bad label, an unknown key or column, or a duplicate id; the
            message names the file, line, field and what was expected.
        ValueError: If ``limit`` is negative, or ``fields`` / ``scores`` overlap.
        FileNotFoundError: If the file does not exist.
    """
    limit = check_int(limit, "limit", min_value=0, allow_none=True, owner="load_records")
    plain = check_names(fields, "fields")
    score_map = _score_map(scores)
    both = sorted(plain & set(score_map))
    if both:
        raise ValueError(f"columns {both!r} are listed both in fields= and in scores=")
    rows: Iterator[tuple[str, Any]]
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if path.suffix.lower() == ".csv":
            rows = _csv_rows(path, plain, score_map)
        else:
            rows = iter_jsonl_rows(path)
    else:
        rows = ((f"records[{i}]", item) for i, item in enumerate(source))
    if plain or score_map:
        rows = ((loc, _plain_row(row, loc, plain, score_map)) for loc, row in rows)

    records: list[Record] = []
    if limit == 0:
        return records
    first_seen: dict[str, str] = {}
    for location, row in rows:
        record = _to_record(row, location)
        if record.id in first_seen:
            raise DataFormatError(
                location,
                "id",
                f"duplicate id {record.id!r} (first seen at {first_seen[record.id]})",
            )
        first_seen[record.id] = location
        records.append(record)
        if limit is not None and len(records) >= limit:
            break
    return records


def iter_jsonl_rows(path: Path) -> Iterator[tuple[str, Any]]:
    """``(location, parsed object)`` for each non-blank line of a JSON Lines file.

    Raises:
        DataFormatError: On a line that is not valid JSON (naming the file, line and column).
    """
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            location = f"{path}, line {number}"
            try:
                yield location, json.loads(line)
            except json.JSONDecodeError as exc:
                hint = ""
                if line.lstrip().startswith("["):
                    hint = (
                        " (this looks like a JSON array; expected JSON Lines, one object per line)"
                    )
                raise DataFormatError(
                    location, None, f"malformed JSON at column {exc.colno}: {exc.msg}{hint}"
                ) from exc


def _score_map(scores: Sequence[str] | Mapping[str, str] | None) -> dict[str, str]:
    if scores is None:
        return {}
    if isinstance(scores, str):
        raise TypeError(
            f"scores must be a sequence of names or a mapping, not a single string {scores!r}"
        )
    if isinstance(scores, Mapping):
        return {str(k): str(v) for k, v in scores.items()}
    return {str(name): str(name) for name in scores}


def _plain_row(row: Any, location: str, plain: frozenset[str], score_map: Mapping[str, str]) -> Any:
    """A row of the plain layout (bare input and score keys) in the schema's shape."""
    if not isinstance(row, Mapping):
        return row
    out: dict[str, Any] = {}
    inputs = dict(row["inputs"]) if isinstance(row.get("inputs"), Mapping) else {}
    scores = dict(row["scores"]) if isinstance(row.get("scores"), Mapping) else {}
    for key, value in row.items():
        if key in plain and key not in _JSON_KEYS:
            inputs[key] = value
        elif key in score_map and key not in _JSON_KEYS:
            if value is not None and value != "":
                scores[score_map[key]] = value
        else:
            out[key] = value
    if inputs:
        out["inputs"] = inputs
    elif "inputs" in row:
        out["inputs"] = row["inputs"]  # malformed: reported by _to_record
    if scores:
        out["scores"] = scores
    elif "scores" in row:
        out["scores"] = row["scores"]
    if "id" not in out or out["id"] is None:
        out["id"] = location.replace(", line ", ":").rsplit("/", 1)[-1]
    return out


def _csv_rows(
    path: Path, plain: frozenset[str], score_map: Mapping[str, str]
) -> Iterator[tuple[str, Any]]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise DataFormatError(f"{path}, line 1", None, "empty CSV file, expected a header row")
        columns = _csv_columns(header, plain, score_map, f"{path}, line 1")
        end_line = reader.line_num
        for row in reader:
            location = f"{path}, line {end_line + 1}"
            end_line = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if len(row) != len(header):
                raise DataFormatError(
                    location,
                    None,
                    f"expected {len(header)} columns as in the header, got {len(row)}",
                )
            yield location, _csv_record(row, columns)


def _csv_columns(
    header: list[str], plain: frozenset[str], score_map: Mapping[str, str], location: str
) -> list[tuple[str, str | None]]:
    """Map each header cell to ``(section, key)``; section is a top-level JSON key."""
    columns: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    for raw in header:
        name = raw.strip()
        if name in seen:
            raise DataFormatError(location, name, "duplicate column")
        seen.add(name)
        prefix, dot, key = name.partition(".")
        if name in ("id", "group_id", "system_id", "label"):
            columns.append((name, None))
        elif dot and prefix in ("inputs", "scores", "meta") and key:
            columns.append((prefix, key))
        elif name in plain:
            columns.append(("inputs", name))
        elif name in score_map:
            columns.append(("scores", score_map[name]))
        else:
            known = ""
            if plain or score_map:
                known = (
                    f"; the task's input columns are {sorted(plain)!r} and its score "
                    f"columns {sorted(score_map)!r}"
                )
            raise DataFormatError(
                location,
                name,
                "unknown column; expected id, group_id, system_id, label, inputs.<name>, "
                "scores.<aspect>, meta.<key>, or a plain input or score column named by the "
                f"task (fields= / scores= in Python){known}. See docs/tasks.md, 'The data layout'",
            )
    if "id" not in seen and not (plain or score_map):
        raise DataFormatError(location, "id", "missing required column")
    given = {key for section, key in columns if section == "inputs"}
    missing = sorted(plain - given)
    if missing:
        raise DataFormatError(
            location,
            missing[0],
            f"missing column; the input fields named (the task's, or fields= in Python) are "
            f"{', '.join(sorted(plain))}, each a column <name> or inputs.<name>; the file's "
            f"columns are {', '.join(h.strip() for h in header)}",
        )
    if not any(section == "inputs" for section, _ in columns):
        raise DataFormatError(
            location, "inputs", "no input column; name them inputs.<name> or list them in fields="
        )
    return columns


def _csv_record(row: list[str], columns: list[tuple[str, str | None]]) -> dict[str, Any]:
    record: dict[str, Any] = {"inputs": {}, "scores": {}, "meta": {}}
    if not any(section == "id" for section, _ in columns):
        record["id"] = None  # the plain layout: _plain_row names it by its location
    for (section, key), cell in zip(columns, row, strict=True):
        if key is None:
            record[section] = cell if cell.strip() or section == "id" else None
        elif section == "inputs":
            record["inputs"][key] = cell
        elif cell.strip():
            record[section][key] = _csv_number(cell) if section == "scores" else cell
    return record


def _csv_number(cell: str) -> float | str:
    try:
        return float(cell)
    except ValueError:
        return cell  # reported with its location by _to_record


def _to_record(row: Any, location: str) -> Record:
    if not isinstance(row, Mapping):
        raise DataFormatError(location, None, f"expected an object, got {_describe(row)}")
    unknown = [key for key in row if key not in _JSON_KEYS]
    if unknown:
        raise DataFormatError(
            location,
            str(unknown[0]),
            f"unknown field; expected only {', '.join(_JSON_KEYS)}, "
            "or the plain layout's input and score keys named by the task (fields= / scores= "
            "in Python; see docs/tasks.md, 'The data layout')",
        )
    if "id" not in row:
        raise DataFormatError(location, "id", "missing; expected a non-empty string")
    record_id = row["id"]
    if not isinstance(record_id, str) or not record_id.strip():
        raise DataFormatError(
            location, "id", f"expected a non-empty string, got {_describe(record_id)}"
        )
    group_id = _optional_str(row.get("group_id"), location, "group_id")
    system_id = _optional_str(row.get("system_id"), location, "system_id")
    inputs = _inputs(row, location)
    clean_scores = _scores(row, location)
    label = row.get("label")
    if label is not None and label not in LABELS:
        raise DataFormatError(
            location, "label", f"expected 'a', 'b', 'tie' or null, got {_describe(label)}"
        )
    meta = row.get("meta")
    if meta is None:
        meta = {}
    if not isinstance(meta, Mapping):
        raise DataFormatError(location, "meta", f"expected an object, got {_describe(meta)}")
    return Record(
        id=record_id,
        group_id=group_id,
        system_id=system_id,
        inputs={str(name): value for name, value in inputs.items()},
        scores=clean_scores,
        label=label,
        meta=dict(meta),
    )


def _inputs(row: Mapping[str, Any], location: str) -> Mapping[str, str]:
    """A record's ``inputs``: a non-empty object of text fields."""
    if "inputs" not in row:
        raise DataFormatError(location, "inputs", "missing; expected an object of text fields")
    inputs = row["inputs"]
    if not isinstance(inputs, Mapping) or not inputs:
        raise DataFormatError(
            location,
            "inputs",
            f"expected a non-empty object of text fields, got {_describe(inputs)}",
        )
    for name, value in inputs.items():
        if not isinstance(value, str):
            raise DataFormatError(
                location, f"inputs.{name}", f"expected a string, got {_describe(value)}"
            )
    return inputs


def _scores(row: Mapping[str, Any], location: str) -> dict[str, float]:
    """A record's ``scores``: aspect -> finite number (none: ``{}``)."""
    scores = row.get("scores")
    if scores is None:
        scores = {}
    if not isinstance(scores, Mapping):
        raise DataFormatError(location, "scores", f"expected an object, got {_describe(scores)}")
    clean_scores: dict[str, float] = {}
    for aspect, value in scores.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise DataFormatError(
                location, f"scores.{aspect}", f"expected a number, got {_describe(value)}"
            )
        if not math.isfinite(value):
            raise DataFormatError(
                location, f"scores.{aspect}", f"expected a finite number, got {value}"
            )
        clean_scores[str(aspect)] = float(value)
    return clean_scores


def _optional_str(value: Any, location: str, name: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise DataFormatError(location, name, f"expected a string or null, got {_describe(value)}")


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{text} ({type(value).__name__})"
