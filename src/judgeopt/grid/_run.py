"""Judging every strategy of a (sub)space, resumably: :func:`run_grid`."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..data import Record
from ..evaluate import CHECK_TIMEOUT, check_endpoint, evaluate_retrying
from ..search import FactorSpace, Strategy, Value
from ._config import GridError, check_subspace
from ._files import Output, finished_rows, fmt, output_for, write_row, write_strategy

__all__ = ["GridProgram", "GridResult", "run_grid"]

log = logging.getLogger("judgeopt.grid")


class GridProgram(Protocol):
    """What :func:`run_grid` needs of a judge (JudgeProgram and PrExMeProgram have it)."""

    space: FactorSpace
    aspect: str

    @property
    def task(self) -> Any: ...  # noqa: D102

    def with_strategy(self, strategy: Mapping[str, Value]) -> Any: ...  # noqa: D102

    def resolve_lm(self, lm: Any = None) -> Any: ...  # noqa: D102


@dataclass(frozen=True)
class GridResult:
    """What :func:`run_grid` did.

    Attributes:
        table: The CSV table.
        items: The per-item JSONL file.
        rows: The table rows of this (model, dataset, task), finished earlier or now, in grid
            order.
        evaluated: Strategies evaluated by this call.
        skipped: Strategies skipped because the table already had them.
        calls: LM calls made by this call (cache hits excluded).
        seconds: Wall time of this call.
    """

    table: Path
    items: Path
    rows: list[dict[str, str]] = field(repr=False)
    evaluated: int
    skipped: int
    calls: int
    seconds: float

    def best(self, metric: str = "kendall", k: int = 5) -> list[dict[str, str]]:
        """The ``k`` rows with the highest ``metric`` (empty cells last)."""

        def key(row: dict[str, str]) -> float:
            v = row.get(metric, "")
            return float(v) if v not in ("", None) else -math.inf

        return sorted(self.rows, key=key, reverse=True)[:k]


def run_grid(
    program: GridProgram,
    records: Sequence[Record],
    *,
    table: str | os.PathLike[str],
    items: str | os.PathLike[str] | None = None,
    space: FactorSpace | None = None,
    dataset: str,
    model: str,
    lm: Any = None,
    threads: int | None = None,
    progress: bool = True,
    keep_outputs: bool = False,
    overwrite: bool = False,
    check: bool = True,
    check_timeout: float | None = CHECK_TIMEOUT,
    max_consecutive_failures: int | None = 5,
) -> GridResult:
    """Evaluate every strategy of ``space`` on ``records``; resume a run that stopped.

    Args:
        program: The judge; each strategy is judged by ``program.with_strategy(strategy)``.
        records: The labelled sample (all of it is judged by every strategy).
        table: The CSV table (created, or appended to).
        items: The per-item JSONL file; default: the table's path with ``.items.jsonl``.
        space: The (sub)space to run; default ``program.space``.
        dataset: The dataset's name in the table (e.g. ``"dev_zh_en"``).
        model: The model's name in the table (e.g. ``"local:qwen2.5-coder-0.5b"``).
        lm: The LM (default: the program's, else DSPy's configured one).
        threads: Judge calls in flight at once (``None``: what the LM keeps busy).
        progress: Show progress bars (strategies, and items within a strategy).
        keep_outputs: Also store each item's raw output in the items file.
        overwrite: Start afresh, deleting the table and items file first.
        check: Make one short call first, so a dead endpoint stops the run at once.
        check_timeout: Seconds that call waits (apart from the LM's per-call timeout).
        max_consecutive_failures: Circuit breaker: stop after this many judge calls in a
            row failed transiently (``None``: never).

    Returns:
        A :class:`GridResult`.

    Raises:
        GridError: When ``records`` is empty or lacks human scores, a strategy is outside the
            program's space, or the table belongs to another kind of run or another sample.
        NoLMError: When no LM is configured.
        LMUnavailable: When the endpoint fails the check call, the breaker trips, or items
            fail transiently twice; a re-run with the same arguments judges the rest.
    """
    space = space or program.space
    _check_records(program, records, space)
    the_lm = program.resolve_lm(lm)
    out = output_for(
        table, items, space, (model, dataset, _task_name(program)), records, keep_outputs
    )
    if overwrite:
        for p in (out.table, out.items):
            p.unlink(missing_ok=True)
    done = finished_rows(out)
    strategies = list(space.strategies())
    todo = [s for s in strategies if s.key not in done]
    judges = _judges(program, todo)
    skipped = len(strategies) - len(todo)
    if skipped:
        log.info("resuming: %d of %d strategies already in %s", skipped, len(strategies), out.table)
    if check and todo:
        check_endpoint(the_lm, timeout=check_timeout, before="the grid")
    t0 = time.perf_counter()
    judging = dict(lm=the_lm, threads=threads, max_consecutive_failures=max_consecutive_failures)
    calls = _judge_strategies(out, records, todo, judges, done, len(strategies), progress, judging)
    rows = [done[s.key] for s in strategies if s.key in done]
    seconds = time.perf_counter() - t0
    return GridResult(out.table, out.items, rows, len(todo), skipped, calls, seconds)


def _task_name(program: GridProgram) -> str:
    name = str(getattr(program.task, "name", "task"))
    # PrExMe's tasks have one human score; a JudgeProgram judges one aspect of its task.
    if getattr(program.task, "score_key", None) == program.aspect:
        return name
    return f"{name}:{program.aspect}"


def _check_records(program: GridProgram, records: Sequence[Record], space: FactorSpace) -> None:
    if not records:
        raise GridError("A grid run needs at least one record.")
    check_subspace(space, program.space)
    pairwise = getattr(program.task, "mode", "pointwise") == "pairwise"
    missing = [
        r.id for r in records if (r.label is None if pairwise else program.aspect not in r.scores)
    ]
    if missing:
        what = "a pairwise label" if pairwise else f"the human score `{program.aspect}`"
        raise GridError(f"{len(missing)} record(s) lack {what}, e.g. {missing[:3]!r}.")


def _judges(program: GridProgram, todo: list[Strategy]) -> list[Any]:
    try:  # every judge is built before the first call, so a bad strategy fails early
        return [program.with_strategy(s) for s in todo]
    except ValueError as e:
        raise GridError(str(e)) from e


def _judge_strategies(
    out: Output,
    records: Sequence[Record],
    todo: list[Strategy],
    judges: list[Any],
    done: dict[str, dict[str, str]],
    total: int,
    progress: bool,
    judging: dict[str, Any],
) -> int:
    """Judge ``records`` with each strategy of ``todo`` and write its items, then its row (also
    put in ``done``); the LM calls made. ``judging``: the rest of :func:`evaluate_retrying`'s
    arguments."""
    from ..lm import LMUnavailable  # lazy: lm's errors derive from DSPy's

    out.table.parent.mkdir(parents=True, exist_ok=True)
    out.items.parent.mkdir(parents=True, exist_ok=True)
    new_table = not out.table.exists() or out.table.stat().st_size == 0
    calls = 0
    bar = None
    if progress:
        from tqdm import tqdm

        desc = f"grid {out.key[1]}"
        bar = tqdm(total=total, initial=total - len(todo), desc=desc, unit="strategy")
    try:
        with (
            out.table.open("a", encoding="utf-8", newline="") as tfh,
            out.items.open("a", encoding="utf-8") as ifh,
        ):
            if new_table:
                write_row(tfh, out.header)
            for s, judge in zip(todo, judges, strict=True):
                try:
                    res = evaluate_retrying(
                        judge, records, progress=progress, desc=_short(s), **judging
                    )
                except LMUnavailable as e:
                    raise LMUnavailable(
                        f"the grid stopped at strategy {_short(s)} ({len(done)} of "
                        f"{total} finished): {e}. No row is written for a strategy "
                        f"with missing judgements; the finished strategies are in "
                        f"{out.table}: run the same command again to judge the others.",
                        model=e.model,
                        endpoint=e.endpoint,
                        last=e,
                    ) from e
                calls += res.calls
                done[s.key] = write_strategy(out, tfh, ifh, s, res)
                log.info(
                    "%s: kendall=%s unparsed=%d calls=%d %.1fs",
                    s,
                    res.kendall,
                    res.parse_failures,
                    res.calls,
                    res.seconds,
                )
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(kendall=fmt(res.kendall) or "-", unparsed=res.parse_failures)
    finally:
        if bar is not None:
            bar.close()
    return calls


def _short(strategy: Strategy) -> str:
    return "/".join(str(v) for v in strategy.values())
