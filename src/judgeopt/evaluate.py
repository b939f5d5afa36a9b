"""Run a judge over a labelled dataset and measure its agreement with the human labels."""

from __future__ import annotations

import contextvars
import logging
import math
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .data import Record
from .metrics import correlation

if TYPE_CHECKING:
    from .judge import JudgeProgram

__all__ = ["EvalResult", "ItemResult", "evaluate", "merge_results", "score_items"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ItemResult:
    """One judged item.

    Attributes:
        id: The record id.
        human: The human score (pointwise) or label (pairwise).
        score: The judge's rating or verdict; ``None`` when the call failed or the output
            could not be parsed.
        parse_error: Why the output could not be parsed.
        error: Why the call failed (LM error, artifact error).
        raw: The judge's output text.
    """

    id: str
    human: float | str | None
    score: float | str | None
    parse_error: str | None = None
    error: str | None = None
    raw: str | None = None


@dataclass(frozen=True)
class EvalResult:
    """The outcome of :func:`evaluate`.

    Correlations (pointwise) are computed with unparsed or failed items imputed by the
    mean of the parsed ratings (PrExMe's "template average" fallback), so that a judge is
    not rewarded for failing on hard items; a judge whose ratings are all equal gets 0.
    ``accuracy`` (pairwise) counts unparsed verdicts as wrong.
    """

    n: int
    parse_failures: int
    call_failures: int
    level: str
    spearman: float | None = None
    kendall: float | None = None
    pearson: float | None = None
    accuracy: float | None = None
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    items: list[ItemResult] = field(default_factory=list, repr=False)

    def metric(self, name: str) -> float:
        """A metric by name (``spearman``, ``kendall``, ``pearson``, ``accuracy``); NaN if none."""
        value = getattr(self, name, None)
        if name not in ("spearman", "kendall", "pearson", "accuracy"):
            raise ValueError(f"Unknown metric {name!r}. Allowed: spearman, kendall, pearson, "
                             "accuracy.")
        return math.nan if value is None else float(value)

    def summary(self) -> dict[str, Any]:
        """The JSON summary printed by ``judgeopt evaluate``."""
        out: dict[str, Any] = {"n": self.n, "parse_failures": self.parse_failures,
                               "call_failures": self.call_failures}
        if self.accuracy is not None:
            out["accuracy"] = self.accuracy
        else:
            out.update(spearman=self.spearman, kendall=self.kendall, pearson=self.pearson)
        out.update(level=self.level, calls=self.calls, cache_hits=self.cache_hits,
                   prompt_tokens=self.prompt_tokens, completion_tokens=self.completion_tokens,
                   seconds=round(self.seconds, 3))
        return out

    def to_dict(self) -> dict[str, Any]:
        """Summary plus every item."""
        return {**self.summary(), "items": [asdict(i) for i in self.items]}


def _stats(lm: Any) -> Any:
    fn = getattr(lm, "stats", None)
    return fn() if callable(fn) else None


def _judge_one(program: JudgeProgram, record: Record, lm: Any, aspect: str) -> ItemResult:
    human: float | str | None
    if program.task.mode == "pairwise":
        human = record.label
    else:
        human = record.scores.get(aspect)
    try:
        pred = program.judge(record.inputs, sample_id=record.id, lm=lm)
    except Exception as e:  # noqa: BLE001 - a failed call is recorded, never fatal
        log.warning("judging %s failed: %s", record.id, e)
        return ItemResult(record.id, human, None, error=f"{type(e).__name__}: {e}")
    return ItemResult(record.id, human, pred.score, parse_error=pred.parse_error, raw=pred.raw)


def score_items(items: Sequence[ItemResult], *, pairwise: bool, level: str,
                groups: Sequence[Any] | None = None) -> dict[str, float | None]:
    """Correlations (pointwise) or accuracy (pairwise) of judged items with the humans."""
    if pairwise:
        # An unparsed verdict counts as wrong.
        correct = sum(i.score is not None and str(i.score) == str(i.human) for i in items)
        return {"accuracy": correct / len(items) if items else None}
    human = np.asarray([float(i.human) for i in items], dtype=float)  # type: ignore[arg-type]
    parsed = [float(i.score) for i in items if i.score is not None]  # type: ignore[arg-type]
    out: dict[str, float | None] = {"spearman": None, "kendall": None, "pearson": None}
    if len(parsed) < 3 or len(items) < 3:
        return out
    fill = float(np.mean(parsed))
    pred = np.asarray([fill if i.score is None else float(i.score) for i in items])  # type: ignore[arg-type]
    use_groups = list(groups) if level == "group" and groups is not None else None
    for method in ("spearman", "kendall", "pearson"):
        try:
            out[method] = correlation(human, pred, method=method, groups=use_groups)
        except ValueError as e:
            # A judge that gives one rating to every item cannot rank anything: 0.
            out[method] = 0.0 if "constant" in str(e).lower() else None
    return out


def evaluate(
    program: JudgeProgram,
    records: Sequence[Record],
    *,
    lm: Any = None,
    threads: int = 1,
    progress: bool = True,
    desc: str | None = None,
    on_item: Callable[[ItemResult], None] | None = None,
) -> EvalResult:
    """Judge every record and compare with the human labels.

    Failed calls and unparseable outputs are recorded and counted, never raised.

    Args:
        program: The judge.
        records: Labelled records (the aspect's score, or a pairwise label).
        lm: The LM (default: the program's, else DSPy's configured one).
        threads: Judge calls in flight at once.
        progress: Show a progress bar.
        desc: Progress bar label.
        on_item: Called with every judged item as it finishes (in the calling thread, in
            completion order), e.g. to checkpoint finished judgements.

    Returns:
        An :class:`EvalResult` at the task's correlation level (group level for tasks whose
        ``correlation_level`` is ``"group"``, e.g. SummEval; else dataset level).

    Raises:
        ValueError: When there are no records or ``threads < 1``.
        NoLMError: When no LM is configured.
    """
    if not records:
        raise ValueError("evaluate() needs at least one record.")
    if threads < 1:
        raise ValueError(f"`threads` must be >= 1. Got {threads}.")
    the_lm = program.resolve_lm(lm)
    before = _stats(the_lm)
    t0 = time.perf_counter()
    aspect = program.aspect
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(records), desc=desc or f"judging {aspect}", unit="item",
                   leave=False)
    results: list[ItemResult | None] = [None] * len(records)
    # NOTE: judging the members of a group one after another lets a server or llama.cpp reuse
    # the shared prompt prefix (the same article or dialogue); results keep the input order.
    order = sorted(range(len(records)), key=lambda i: (records[i].group_id or "", i))
    if threads == 1:
        for i in order:
            results[i] = _judge_one(program, records[i], the_lm, aspect)
            if on_item is not None:
                on_item(results[i])  # type: ignore[arg-type]
            if bar is not None:
                bar.update(1)
    else:
        pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="judgeopt-judge")
        try:
            # NOTE: each call runs in a copy of the caller's context, so DSPy settings made
            # with dspy.context(...) (usage tracking, callbacks, adapter) reach the workers.
            futures = {pool.submit(contextvars.copy_context().run, _judge_one, program,
                                   records[i], the_lm, aspect): i for i in order}
            # Collected as they finish: the bar and on_item follow real completion (a slow
            # item holds nothing up); results keep the input order.
            for fut in as_completed(futures):
                item = results[futures[fut]] = fut.result()
                if on_item is not None:
                    on_item(item)
                if bar is not None:
                    bar.update(1)
        except BaseException:
            # Interrupted (Ctrl-C, a failing on_item): drop the queued calls instead of
            # running them all before re-raising; calls in flight finish in the background.
            pool.shutdown(wait=False, cancel_futures=True)
            if bar is not None:
                bar.close()
            raise
        pool.shutdown(wait=True)
    if bar is not None:
        bar.close()
    items = [r for r in results if r is not None]
    seconds = time.perf_counter() - t0
    after = _stats(the_lm)
    pairwise = program.task.mode == "pairwise"
    level = "dataset" if pairwise else (program.task.correlation_level or "dataset")
    kw: dict[str, Any] = {}
    if before is not None and after is not None:
        kw = {"calls": after.calls - before.calls,
              "cache_hits": after.cache_hits - before.cache_hits,
              "prompt_tokens": after.prompt_tokens - before.prompt_tokens,
              "completion_tokens": after.completion_tokens - before.completion_tokens}
    return _result(items, records, pairwise=pairwise, level=level, seconds=seconds, **kw)


def _result(items: Sequence[ItemResult], records: Sequence[Record], *, pairwise: bool,
            level: str, seconds: float, **counters: int) -> EvalResult:
    metrics = score_items(items, pairwise=pairwise, level=level,
                          groups=[r.group_id or r.id for r in records])
    return EvalResult(
        n=len(items),
        parse_failures=sum(i.error is None and i.score is None for i in items),
        call_failures=sum(i.error is not None for i in items),
        level="dataset" if pairwise else level,
        seconds=seconds,
        items=list(items),
        **metrics,  # type: ignore[arg-type]
        **counters,
    )


def merge_results(parts: Sequence[EvalResult], records: Sequence[Record], *, pairwise: bool,
                  level: str) -> EvalResult:
    """One :class:`EvalResult` from evaluations of disjoint parts of ``records``.

    Items are put in the order of ``records`` (matched by id; every record must have been
    judged in exactly one part); the correlations are computed over all of them and the
    counters (calls, tokens, seconds) are summed.

    Raises:
        ValueError: When a record has no judged item.
    """
    by_id = {i.id: i for p in parts for i in p.items}
    missing = [r.id for r in records if r.id not in by_id]
    if missing:
        raise ValueError(f"merge_results: no judged item for records {missing[:5]!r}.")
    items = [by_id[r.id] for r in records]
    counters = {k: sum(getattr(p, k) for p in parts)
                for k in ("calls", "cache_hits", "prompt_tokens", "completion_tokens")}
    return _result(items, records, pairwise=pairwise, level=level,
                   seconds=sum(p.seconds for p in parts), **counters)
