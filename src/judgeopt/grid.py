"""Grid runs: evaluate every strategy of a (sub)space on a dataset, resumably.

:func:`run_grid` judges a labelled sample with every strategy of a factor space (PrExMe's
templates, or any judge with a ``space`` and ``with_strategy``, such as
:class:`~judgeopt.judge.JudgeProgram`) and writes two files as it goes:

* the **table** (CSV), one row per (model, dataset, task, strategy): the factor values, the
  item counts (``n``, ``n_unparsed``, ``n_failed``), Kendall, tie-calibrated accuracy
  (``kendall_tie_corrected``, PrExMe's "tie-corrected Kendall"), Pearson, Spearman (or
  ``accuracy`` for pairwise judges), LM calls, cache hits, tokens and seconds. Its first
  columns match the published PrExMe surface (``model``, ``task``, the factors, ``kendall``
  ...), so the same analysis code reads both;
* the **items** (JSONL), one line per judged item and strategy: the judge's score (with the
  template-average fill-in for unparsed items), the human score and a ``parsed`` flag, for
  significance tests later.

A row is appended (and flushed to disk) only after its strategy's items are written, so a
killed run restarted with the same arguments skips every finished strategy; items of an
unfinished strategy and a half-written last line are dropped on restart. Judge calls already
made are also in the LM's persistent cache, so an interrupted strategy costs nothing twice.

A dead endpoint leaves no result: a check call before the first strategy, a circuit breaker,
and items failing transiently twice stop the run (:class:`judgeopt.lm.LMUnavailable`) without
a row for the strategy being judged, so a re-run judges it again.

Sub-spaces are chosen by factor values (:func:`select_subspace`), from ``name=v1,v2``
options (:func:`parse_factor_options`) or a TOML file (:func:`load_grid_config`).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
import os
import time
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from ._errors import JudgeoptError
from ._io import write_text_atomic
from .data import Record
from .evaluate import CHECK_TIMEOUT, EvalResult, check_endpoint, evaluate_retrying
from .metrics import tie_calibrated_accuracy
from .search import Factor, FactorSpace, Strategy, Value

__all__ = [
    "GridConfig",
    "GridError",
    "GridResult",
    "load_grid_config",
    "parse_factor_options",
    "run_grid",
    "select_subspace",
    "table_columns",
]

log = logging.getLogger(__name__)

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


class GridError(JudgeoptError, ValueError):
    """A grid run cannot start: bad selection, or an output file from another run."""


class GridProgram(Protocol):
    """What :func:`run_grid` needs of a judge (JudgeProgram and PrExMeProgram have it)."""

    space: FactorSpace
    aspect: str

    @property
    def task(self) -> Any: ...  # noqa: D102

    def with_strategy(self, strategy: Mapping[str, Value]) -> Any: ...  # noqa: D102

    def resolve_lm(self, lm: Any = None) -> Any: ...  # noqa: D102


# ------------------------------------------------------------------------------ selection


def _resolve(factor: Factor, text: Value) -> Value:
    if not isinstance(text, str):
        if text in factor:
            return text
        text = str(text)
    from .judge import resolve_prexme_value  # lazy: judgeopt.judge loads DSPy

    return resolve_prexme_value(factor, text)


def select_subspace(
    space: FactorSpace, selection: Mapping[str, Sequence[Value] | str]
) -> FactorSpace:
    """The sub-space keeping only the selected values of the named factors.

    A factor that ``selection`` does not name keeps all its values; ``"all"`` (or ``["all"]``)
    does the same explicitly. Values may be given as text (``"10"`` for the value ``10``) and,
    for PrExMe, by the paper's spellings (``"simple labels"``). The kept values stay in the
    space's order, so the grid order does not depend on how they were listed.

    Raises:
        GridError: On an unknown factor or value (naming the allowed ones), or an empty
            selection.
    """
    unknown = [name for name in selection if name not in space]
    if unknown:
        raise GridError(f"Unknown factor(s) {unknown!r}. Factors: {list(space.names)!r}.")
    factors = []
    for f in space.factors:
        wanted = selection.get(f.name, "all")
        if isinstance(wanted, str):
            wanted = [wanted]
        if not wanted:
            raise GridError(f"No value selected for factor `{f.name}`.")
        if any(isinstance(w, str) and w.strip().lower() == "all" for w in wanted):
            factors.append(f)
            continue
        try:
            keep = {f.index(_resolve(f, w)) for w in wanted}
        except ValueError as e:
            raise GridError(str(e)) from e
        factors.append(Factor(f.name, tuple(f.values[i] for i in sorted(keep)), f.description))
    return FactorSpace(factors)


def parse_factor_options(options: Iterable[str]) -> dict[str, list[str]]:
    """Turn ``["base_prompt=PZS,ZS-CoT", "format_requirement=0 to 100"]`` into a selection.

    Values are comma-separated; naming a factor twice adds to its values.

    Raises:
        GridError: On an option without ``=`` or without values.
    """
    out: dict[str, list[str]] = {}
    for option in options:
        name, sep, values = option.partition("=")
        name = name.strip()
        items = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not name or not items:
            raise GridError(f"--factors expects NAME=VALUE[,VALUE...]; got {option!r}.")
        out.setdefault(name, [])
        out[name].extend(v for v in items if v not in out[name])
    return out


class GridConfig(BaseModel):
    """A grid run described in TOML (every key optional; command-line options override).

    Example file::

        task = "zh_en"
        [factors]
        base_prompt = ["PZS", "ZS-CoT", "ZS-CoT-EM"]
        task_description = ["Neutral", "Polite", "Threat", "Curious"]
        format_requirement = ["0 to 100", "easy token labels", "complex token labels"]
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: str | None = None
    aspect: str | None = None
    factors: dict[str, list[str | int | float | bool] | str] = {}


def load_grid_config(path: str | os.PathLike[str]) -> GridConfig:
    """Read and validate a grid TOML file.

    Raises:
        GridError: On malformed TOML or unknown keys (naming the file and the key).
    """
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
        return GridConfig.model_validate(data)
    except tomllib.TOMLDecodeError as e:
        raise GridError(f"{p}: malformed TOML: {e}") from e
    except ValidationError as e:
        problems = "; ".join(
            f"`{'.'.join(str(x) for x in err['loc'])}`: {err['msg']}" for err in e.errors()
        )
        raise GridError(f"{p}: {problems}") from e


# ---------------------------------------------------------------------------------- files


def table_columns(space: FactorSpace) -> list[str]:
    """The table's header for a space: model, dataset, task, the factors, the metrics."""
    return ["model", "dataset", "task", *space.names, *METRIC_COLUMNS]


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


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _sample_fingerprint(records: Sequence[Record]) -> str:
    digest = hashlib.sha1("\n".join(r.id for r in records).encode("utf-8")).hexdigest()
    return digest[:12]


# ---------------------------------------------------------------------------------- run


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


def _task_name(program: GridProgram) -> str:
    name = str(getattr(program.task, "name", "task"))
    # PrExMe's tasks have one human score; a JudgeProgram judges one aspect of its task.
    if getattr(program.task, "score_key", None) == program.aspect:
        return name
    return f"{name}:{program.aspect}"


def _check_subspace(space: FactorSpace, full: FactorSpace) -> None:
    if space.names != full.names:
        raise GridError(
            f"The grid's factors {list(space.names)!r} are not the judge's {list(full.names)!r}."
        )
    for f in space.factors:
        outside = [v for v in f.values if v not in full[f.name]]
        if outside:
            raise GridError(
                f"Values {outside!r} are not values of factor `{f.name}`. Allowed "
                f"values: {list(full[f.name].values)!r}."
            )


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
    out = _output(table, items, space, (model, dataset, _task_name(program)), records, keep_outputs)
    if overwrite:
        for p in (out.table, out.items):
            p.unlink(missing_ok=True)
    done = _finished_rows(out)
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


@dataclass(frozen=True)
class _Output:
    """Where a grid run writes, and what names its rows: (model, dataset, task) and the sample."""

    table: Path
    items: Path
    header: list[str]
    key: tuple[str, str, str]
    sample: str
    keep_outputs: bool


def _output(
    table: str | os.PathLike[str],
    items: str | os.PathLike[str] | None,
    space: FactorSpace,
    key: tuple[str, str, str],
    records: Sequence[Record],
    keep_outputs: bool,
) -> _Output:
    table_path = Path(table)
    items_path = Path(items) if items is not None else table_path.with_suffix(".items.jsonl")
    header = table_columns(space)
    return _Output(table_path, items_path, header, key, _sample_fingerprint(records), keep_outputs)


def _check_records(program: GridProgram, records: Sequence[Record], space: FactorSpace) -> None:
    if not records:
        raise GridError("A grid run needs at least one record.")
    _check_subspace(space, program.space)
    pairwise = getattr(program.task, "mode", "pointwise") == "pairwise"
    missing = [
        r.id for r in records if (r.label is None if pairwise else program.aspect not in r.scores)
    ]
    if missing:
        what = "a pairwise label" if pairwise else f"the human score `{program.aspect}`"
        raise GridError(f"{len(missing)} record(s) lack {what}, e.g. {missing[:3]!r}.")


def _finished_rows(out: _Output) -> dict[str, dict[str, str]]:
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


def _judges(program: GridProgram, todo: list[Strategy]) -> list[Any]:
    try:  # every judge is built before the first call, so a bad strategy fails early
        return [program.with_strategy(s) for s in todo]
    except ValueError as e:
        raise GridError(str(e)) from e


def _judge_strategies(
    out: _Output,
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
    from .lm import LMUnavailable  # lazy: lm's errors derive from DSPy's

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
                _write_row(tfh, out.header)
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
                done[s.key] = _write_strategy(out, tfh, ifh, s, res)
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
                    bar.set_postfix(kendall=_fmt(res.kendall) or "-", unparsed=res.parse_failures)
    finally:
        if bar is not None:
            bar.close()
    return calls


def _write_strategy(
    out: _Output, tfh: io.TextIOBase, ifh: Any, s: Strategy, res: EvalResult
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
    _write_row(tfh, [_fmt(cells[c]) for c in out.header])
    _sync(tfh)
    return {c: _fmt(cells[c]) for c in out.header}


def _short(strategy: Strategy) -> str:
    return "/".join(str(v) for v in strategy.values())


def _write_row(fh: io.TextIOBase, cells: Sequence[str]) -> None:
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
