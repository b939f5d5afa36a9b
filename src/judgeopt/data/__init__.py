"""Human-labelled meta-evaluation records: the record, loading, validation and splitting.

A :class:`Record` is one judged item: pointwise (human ``scores`` per aspect) or pairwise (a
``label`` saying which of ``output_a`` / ``output_b`` is better). :func:`load_records` reads
the shared JSONL schema and a CSV layout (the formats are documented in
:mod:`judgeopt.data._load`); :func:`validate_records` checks records against a task's needs;
:func:`split_records` / :func:`split_holdout` split them reproducibly.
"""

from __future__ import annotations

from ._load import iter_jsonl_rows, load_records
from ._records import LABELS, DataFormatError, Label, Record, validate_records
from ._split import group_ids, split_holdout, split_records

__all__ = [
    "LABELS",
    "DataFormatError",
    "Label",
    "Record",
    "group_ids",
    "iter_jsonl_rows",
    "load_records",
    "split_holdout",
    "split_records",
    "validate_records",
]
