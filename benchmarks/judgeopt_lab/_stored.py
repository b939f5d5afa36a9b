"""Judged items kept in a JSONL file, so that a resumed benchmark run (even in a fresh checkout
without the LM cache) repeats no judge call."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from judgeopt.data import Record
from judgeopt.evaluate import EvalResult, ItemResult, evaluate, merge_results

__all__ = ["evaluate_stored", "strategy_key", "stored_items", "stored_result"]


def stored_items(path: Path) -> dict[str, ItemResult]:
    """The judged items kept in ``path`` (JSONL) by id, failed calls left out; {} if none."""
    done: dict[str, ItemResult] = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                item = ItemResult(**json.loads(line))
            except (ValueError, TypeError):
                continue  # a line cut by an interruption
            if item.error is None:
                done[item.id] = item
    return done


def evaluate_stored(
    program: Any, records: list[Record], path: Path, *, desc: str, progress: bool
) -> EvalResult:
    """Evaluate ``program`` on ``records``, keeping every judged item in ``path`` (JSONL), so
    that a resumed run (even in a fresh checkout without the LM cache) repeats no call."""
    done = stored_items(path)
    level = program.task.correlation_level or "dataset"
    parts = []
    if done:
        parts.append(
            EvalResult(
                n=len(done),
                parse_failures=0,
                call_failures=0,
                level=level,
                items=[done[r.id] for r in records if r.id in done],
            )
        )
    todo = [r for r in records if r.id not in done]
    if todo:
        with path.open("a", encoding="utf-8") as fh:

            def keep(item: ItemResult) -> None:
                if item.error is None:
                    fh.write(json.dumps(asdict(item), ensure_ascii=False) + "\n")
                    fh.flush()

            parts.append(evaluate(program, todo, progress=progress, desc=desc, on_item=keep))
    return merge_results(parts, records, pairwise=False, level=level)


def stored_result(path: Path, records: list[Record], level: str) -> EvalResult | None:
    """The evaluation kept in ``path`` (every record judged), without any call; else None."""
    done = stored_items(path)
    if any(r.id not in done for r in records):
        return None
    return merge_results(
        [
            EvalResult(
                n=len(done),
                parse_failures=0,
                call_failures=0,
                level=level,
                items=[done[r.id] for r in records],
            )
        ],
        records,
        pairwise=False,
        level=level,
    )


def strategy_key(strategy: Mapping[str, Any]) -> str:
    """A short file-name key of a strategy's plain-data form (``test_<key>.jsonl``)."""
    return hashlib.sha256(json.dumps(strategy, sort_keys=True, default=str).encode()).hexdigest()[
        :16
    ]
