"""A grid's two files: the table (a CSV row per finished strategy) and its items (JSONL).

A strategy's row is appended, and flushed to disk, only after its items are written, so the
table says which strategies are finished; on restart a half-written last line and the items
of unfinished strategies are dropped.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._io import write_text_atomic
from ..data import Record
from ..evaluate import EvalResult
from ..metrics import tie_calibrated_accuracy
from ..search import FactorSpace, Strategy
from ._config import GridError

__all__ = [
    "METRIC_COLUMNS",
    "Output",
    "finished_rows",
    "fmt",
    "output_for",
    "table_columns",
    "write_row",
    "write_strategy",
]

log = logging.getLogger("judgeopt.grid")

METRIC_COLUMNS: tuple[str, ...] = (
    "n",
    "n_unparsed",
    "n_failed",
    "kendall",
    "kendall_tie_corrected",
    "pearson",
    "spearman",
    "accuracy",
    "calls",
    "cache_hits",
    "prompt_tokens",
    "completion_tokens",
    "seconds",
    "sample",
    "strategy",
)
"""The columns after the factor columns (``sample`` fingerprints the judged item ids)."""


def table_columns(space: FactorSpace) -> list[str]:
    """The table's header for a space: model, dataset, task, the factors, the metrics."""
    return ["model", "dataset", "task", *space.names, *METRIC_COLUMNS]


@dataclass(frozen=True)
class Output:
    """Where a grid run writes, and what names its rows: (model, dataset, task) and the sample."""

    table: Path
    items: Path
    header: list[str]
    key: tuple[str, str, str]
    sample: str
    keep_outputs: bool


def output_for(
    table: str | os.PathLike[str],
    items: str | os.PathLike[str] | None,
    space: FactorSpace,
    key: tuple[str, str, str],
    records: Sequence[Record],
    keep_outputs: bool,
) -> Output:
    table_path = Path(table)
    items_path = Path(items) if items is not None else table_path.with_suffix(".items.jsonl")
    header = table_columns(space)
    return Output(table_path, items_path, header, key, _sample_fingerprint(records), keep_outputs)


def finished_rows(out: Output) -> dict[str, dict[str, str]]:
    """The table's rows of this run by strategy key (after dropping the items of every
    unfinished strategy)."""
    (model, dataset, task), sample = out.key, out.sample
    existing = _read_table(out.table, out.header)
    done: dict[str, dict[str, str]] = {}
    for row in existing:
        if (row["model"], row["dataset"], row["task"]) != out.key:
            continue
        if row["sample"] != sample:
            raise GridError(
                f"{out.table} already has results of {model} on {dataset} ({task}) for another "
                f"sample of items (fingerprint {row['sample']}, this run {sample}: a different "
                "--limit or data file?). Use another --out, the same sample, or --overwrite."
            )
        done[row["strategy"]] = row
    finished_keys = {(r["model"], r["dataset"], r["task"], r["strategy"]) for r in existing}
    _clean_items(out.items, finished_keys)
    return done


def write_strategy(
    out: Output, tfh: io.TextIOBase, ifh: Any, s: Strategy, res: EvalResult
) -> dict[str, str]:
    """Write the items of strategy ``s``, then its table row (which marks it as finished)."""
    model, dataset, task = out.key
    base = {"model": model, "dataset": dataset, "task": task, **s.as_dict(), "strategy": s.key}
    ifh.writelines(_item_lines(res, base, out.keep_outputs))
    _sync(ifh)
    cells: dict[str, Any] = {
        "model": model,
        "dataset": dataset,
        "task": task,
        **s.as_dict(),
        "n": res.n,
        "n_unparsed": res.parse_failures,
        "n_failed": res.call_failures,
        "kendall": res.kendall,
        "kendall_tie_corrected": _tie_calibrated(res),
        "pearson": res.pearson,
        "spearman": res.spearman,
        "accuracy": res.accuracy,
        "calls": res.calls,
        "cache_hits": res.cache_hits,
        "prompt_tokens": res.prompt_tokens,
        "completion_tokens": res.completion_tokens,
        "seconds": round(res.seconds, 3),
        "sample": out.sample,
        "strategy": s.key,
    }
    write_row(tfh, [fmt(cells[c]) for c in out.header])
    _sync(tfh)
    return {c: fmt(cells[c]) for c in out.header}


def _repair(path: Path) -> None:
    """Drop a half-written last line (a run killed while writing)."""
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        log.warning("%s: dropping a half-written last line", path)
        with path.open("r+b") as fh:
            fh.truncate(cut)


def _read_table(path: Path, header: list[str]) -> list[dict[str, str]]:
    if not path.exists() or path.stat().st_size == 0:
        return []
    _repair(path)
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames != header:
            raise GridError(
                f"{path} has the columns {reader.fieldnames!r}, but this run writes {header!r}: "
                "it holds another kind of grid. Use another --out (or --overwrite)."
            )
        return list(reader)


def fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _sample_fingerprint(records: Sequence[Record]) -> str:
    digest = hashlib.sha1("\n".join(r.id for r in records).encode("utf-8")).hexdigest()
    return digest[:12]


def _item_lines(result: EvalResult, base: dict[str, Any], keep_outputs: bool) -> list[str]:
    parsed = [
        float(i.score) for i in result.items if i.score is not None and not isinstance(i.score, str)
    ]
    fill = sum(parsed) / len(parsed) if parsed else None
    lines = []
    for i in result.items:
        if isinstance(i.score, str) or isinstance(i.human, str):  # pairwise verdicts
            judge: Any = i.score
        else:
            judge = float(i.score) if i.score is not None else fill
        row = {
            **base,
            "id": i.id,
            "judge_score": judge,
            "human_score": i.human,
            "parsed": i.score is not None,
            "error": i.error,
        }
        if keep_outputs:
            row["output"] = i.raw
        lines.append(json.dumps(row, ensure_ascii=False) + "\n")
    return lines


def _tie_calibrated(result: EvalResult) -> float | None:
    items = result.items
    if result.accuracy is not None or len(items) < 2:
        return None
    parsed = [float(i.score) for i in items if i.score is not None]
    if len(parsed) < 3:
        return None
    fill = sum(parsed) / len(parsed)
    pred = [fill if i.score is None else float(i.score) for i in items]
    try:
        return tie_calibrated_accuracy(
            [float(i.human) for i in items],  # type: ignore[arg-type]
            pred,
        ).accuracy
    except ValueError:
        return None


def write_row(fh: io.TextIOBase, cells: Sequence[str]) -> None:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    fh.write(buf.getvalue())


def _sync(fh: Any) -> None:
    fh.flush()
    try:
        os.fsync(fh.fileno())
    except OSError:  # pragma: no cover - e.g. a pipe
        pass


def _clean_items(path: Path, finished: set[tuple[str, str, str, str]]) -> None:
    """Keep only the item lines of finished strategies (and no half-written line)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    _repair(path)
    kept, dropped = [], 0
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                d = json.loads(line)
                key = (d["model"], d["dataset"], d["task"], d["strategy"])
            except (json.JSONDecodeError, KeyError, TypeError):
                dropped += 1
                continue
            if key in finished:
                kept.append(line)
            else:
                dropped += 1
    if dropped:
        log.warning("%s: dropping %d item line(s) of unfinished strategies", path, dropped)
        write_text_atomic(path, "".join(kept))
