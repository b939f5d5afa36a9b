"""Reading a results table (CSV with a header row) for the search core and the benchmark."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path


def read_csv_rows(path: Path, columns: Iterable[str], what: str) -> list[dict[str, str]]:
    """The rows of ``path`` as dicts, after checking that it has every one of ``columns``.

    Args:
        path: The CSV file (with a header row).
        columns: Columns that must be in the header.
        what: What the file is, for the error message (e.g. ``"Surface CSV"``).

    Raises:
        ValueError: If the file does not exist or a column is missing (naming the columns
            the file has).
    """
    if not path.is_file():
        raise ValueError(f"{what} not found: {path}")
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        for col in columns:
            if col not in header:
                raise ValueError(f"Column `{col}` is not in {path.name}. Columns: {header!r}.")
        return list(reader)
