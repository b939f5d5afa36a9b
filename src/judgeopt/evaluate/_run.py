"""Running a judge over labelled records: threads, progress, checkpoint hooks, a circuit breaker."""

from __future__ import annotations

import contextvars
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .._validation import check_int
from ..data import Record
from ._checks import check_records
from ._eval_result import EvalResult, ItemResult, merge_results, result_of
from ._pool import CallPool

if TYPE_CHECKING:
    from ..judge import JudgeProgram

__all__ = ["default_threads", "evaluate", "evaluate_retrying"]

log = logging.getLogger("judgeopt.evaluate")


def evaluate(
    program: JudgeProgram,
    records: Sequence[Record],
    *,
    lm: Any = None,
    threads: int | None = None,
    progress: bool = True,
    desc: str | None = None,
    on_item: Callable[[ItemResult], None] | None = None,
    max_consecutive_failures: int | None = None,
    explain: bool = False,
) -> EvalResult:
    """Judge every record and compare with the human labels.

    Failed calls and unparseable outputs are recorded and counted, never raised; only a
    streak of transient call failures (the endpoint is down) stops the run, when
    ``max_consecutive_failures`` is set.

    A judge that rates before it explains is scored without its explanation (its calls stop
    at the end of the rating; see ``explain`` of :class:`~judgeopt.judge.JudgeProgram`): the
    score is the same, the explanation is not paid for. ``explain=True`` keeps it.

    Args:
        program: The judge.
        records: Labelled records (the aspect's score, or a pairwise label).
        lm: The LM (default: the program's, else DSPy's configured one).
        threads: Judge calls in flight at once; ``None``: what the LM keeps busy
            (:func:`default_threads`: ``parallel`` for an embedded model, else 1).
        progress: Show a progress bar.
        desc: Progress bar label.
        on_item: Called with every judged item as it finishes (in the calling thread, in
            completion order), e.g. to checkpoint finished judgements.
        max_consecutive_failures: Stop after this many judge calls in a row (in completion
            order) failed transiently (connection, timeout, 5xx, rate limit after the LM's
            own retries); ``None``: never stop.
        explain: Let a judge that rates first write its explanation too (each item's
            ``raw`` then holds it); default: stop at the rating.

    Returns:
        An :class:`EvalResult` at the task's correlation level (group level for tasks whose
        ``correlation_level`` is ``"group"``, e.g. SummEval; else dataset level).

    Raises:
        ValueError: When there are no records, a record does not fit the judge's task (a
            missing input field, no score for the aspect or no pairwise label; naming the
            record), or ``threads < 1``.
        NoLMError: When no LM is configured.
        LMUnavailable: When ``max_consecutive_failures`` calls in a row failed
            transiently (the items judged before were passed to ``on_item``).
    """
    if not records:
        raise ValueError("evaluate() needs at least one record.")
    threads = check_int(threads, "threads", min_value=1, allow_none=True, owner="evaluate")
    breaker = _Breaker(max_consecutive_failures)
    check_records(program, records)
    program = scoring_program(program, explain=explain)
    the_lm = program.resolve_lm(lm)
    if threads is None:
        threads = default_threads(the_lm)
    before, reuse = _stats(the_lm), prompt_reuse_of(the_lm)
    t0 = time.perf_counter()
    items = _judge_all(program, records, the_lm, threads, progress, desc, on_item, breaker)
    seconds = time.perf_counter() - t0
    result = _evaluation(program, records, items, seconds, before, _stats(the_lm))
    computed = computed_between(reuse, prompt_reuse_of(the_lm))
    return result if computed is None else replace(result, computed_tokens=computed)


def scoring_program(program: Any, *, explain: bool = False) -> Any:
    """``program`` as measured: a copy that stops at its rating unless ``explain``.

    Programs without the switch (``with_explain``, e.g. PrExMe's) are returned unchanged.
    """
    switch = getattr(program, "with_explain", None)
    return switch(explain) if callable(switch) else program


def evaluate_retrying(
    program: JudgeProgram,
    records: Sequence[Record],
    *,
    desc: str | None = None,
    max_consecutive_failures: int | None = 5,
    **kwargs: Any,
) -> EvalResult:
    """:func:`evaluate`, then the items whose call failed transiently judged once more.

    A result never holds a judgement missing because the endpoint failed: items still
    failing transiently after the second try raise, so the caller stores nothing for them
    and a re-run judges them again (``judgeopt grid`` does so).

    Args:
        program: The judge.
        records: Labelled records.
        desc: Progress bar label.
        max_consecutive_failures: The circuit breaker of both passes (``None``: none).
        **kwargs: Further arguments of :func:`evaluate` (``lm``, ``threads``,
            ``progress``, ``on_item``).

    Raises:
        LMUnavailable: When the circuit breaker trips, or items fail transiently twice.
    """
    kw = {**kwargs, "max_consecutive_failures": max_consecutive_failures}
    res = evaluate(program, records, desc=desc, **kw)
    failed = {i.id for i in res.items if i.transient}
    if not failed:
        return res
    log.info("%s: %d judge call(s) failed transiently; trying them once more", desc, len(failed))
    retry = f"{desc} (retry)" if desc else "judging once more"
    again = evaluate(program, [r for r in records if r.id in failed], desc=retry, **kw)
    still = [i for i in again.items if i.transient]
    if still:
        from ..lm import LMUnavailable  # lazy: lm's errors derive from DSPy's

        raise LMUnavailable(
            f"{len(still)} of {len(records)} judge calls failed twice ({still[-1].error})",
            last=None,
        )
    pairwise = program.task.mode == "pairwise"
    return merge_results([res, again], records, pairwise=pairwise, level=res.level)


def default_threads(lm: Any) -> int:
    """Judge calls to keep in flight for ``lm`` when the caller does not say: its
    ``preferred_threads`` (an embedded model's ``parallel``: the requests it decodes
    together), else 1."""
    value = getattr(lm, "preferred_threads", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else 1


def _judge_all(
    program: JudgeProgram,
    records: Sequence[Record],
    lm: Any,
    threads: int,
    progress: bool,
    desc: str | None,
    on_item: Callable[[ItemResult], None] | None,
    breaker: _Breaker,
) -> list[ItemResult]:
    """Every record's judgement, in input order (:func:`evaluate`'s arguments)."""
    aspect = program.aspect
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(records), desc=desc or f"judging {aspect}", unit="item", leave=False)
    # NOTE: judging the members of a group one after another lets a server or llama.cpp reuse
    # the shared prompt prefix (the same article or dialogue); results keep the input order.
    order = sorted(range(len(records)), key=lambda i: (records[i].group_id or "", i))
    jobs = [functools.partial(_judge_one, program, record, lm, aspect) for record in records]
    if threads == 1:
        results = _judge_serially(jobs, order, on_item, bar, breaker)
    else:
        results = _judge_pooled(jobs, order, threads, on_item, bar, breaker)
    if bar is not None:
        bar.close()
    return [r for r in results if r is not None]


def _judge_serially(
    jobs: Sequence[Callable[[], ItemResult]],
    order: Sequence[int],
    on_item: Callable[[ItemResult], None] | None,
    bar: Any,
    breaker: _Breaker,
) -> list[ItemResult | None]:
    """Run ``jobs`` one after another in ``order``; their results at their indices."""
    results: list[ItemResult | None] = [None] * len(jobs)
    for i in order:
        results[i] = item = jobs[i]()
        if on_item is not None:
            on_item(item)
        if bar is not None:
            bar.update(1)
        try:
            breaker.see(item)
        except BaseException:
            if bar is not None:
                bar.close()
            raise
    return results


def _judge_pooled(
    jobs: Sequence[Callable[[], ItemResult]],
    order: Sequence[int],
    threads: int,
    on_item: Callable[[ItemResult], None] | None,
    bar: Any,
    breaker: _Breaker,
) -> list[ItemResult | None]:
    """Run ``jobs`` on ``threads`` threads, started in ``order``; their results at their indices."""
    results: list[ItemResult | None] = [None] * len(jobs)
    # NOTE: each call runs in a copy of the caller's context, so DSPy settings made
    # with dspy.context(...) (usage tracking, callbacks, adapter) reach the workers.
    pool: CallPool[ItemResult] = CallPool(
        [functools.partial(contextvars.copy_context().run, jobs[i]) for i in order],
        threads,
        name="judgeopt-judge",
    )
    try:
        # Taken as they finish: the bar and on_item follow real completion (a slow item
        # holds nothing up); results keep the input order.
        for k, item in pool:
            results[order[k]] = item
            if on_item is not None:
                on_item(item)
            if bar is not None:
                bar.update(1)
            breaker.see(item)
    except BaseException as e:
        # Interrupted (Ctrl-C, a failing on_item): the queued calls are dropped; calls in
        # flight finish in the background, and the process does not wait for them.
        finished = pool.stop()
        if isinstance(e, KeyboardInterrupt) and on_item is not None:
            _record_finished([item for _, item in finished], on_item)
        if bar is not None:
            bar.close()
        raise
    return results


def _evaluation(
    program: JudgeProgram,
    records: Sequence[Record],
    items: list[ItemResult],
    seconds: float,
    before: Any,
    after: Any,
) -> EvalResult:
    """The result of ``items``, with the LM's usage between its stats ``before`` and ``after``."""
    pairwise = program.task.mode == "pairwise"
    level = "dataset" if pairwise else (program.task.correlation_level or "dataset")
    kw: dict[str, Any] = {}
    if before is not None and after is not None:
        kw = {
            "calls": after.calls - before.calls,
            "cache_hits": after.cache_hits - before.cache_hits,
            "prompt_tokens": after.prompt_tokens - before.prompt_tokens,
            "completion_tokens": after.completion_tokens - before.completion_tokens,
        }
    return result_of(items, records, pairwise=pairwise, level=level, seconds=seconds, **kw)


def _judge_one(program: JudgeProgram, record: Record, lm: Any, aspect: str) -> ItemResult:
    human: float | str | None
    if program.task.mode == "pairwise":
        human = record.label
    else:
        human = record.scores.get(aspect)
    try:
        pred = program.judge(record.inputs, sample_id=record.id, lm=lm)
    except Exception as e:  # noqa: BLE001 - a failed call is recorded, never fatal
        kind = _error_kind(e)
        # A call the LM never answered because it was closed (at exit, after an interrupt)
        # is no failure of the run: nothing to warn about (and never kept as a judgement).
        (log.debug if kind == "closed" else log.warning)("judging %s failed: %s", record.id, e)
        return ItemResult(record.id, human, None, error=f"{type(e).__name__}: {e}", error_kind=kind)
    return ItemResult(record.id, human, pred.score, parse_error=pred.parse_error, raw=pred.raw)


def _error_kind(exc: BaseException) -> str:
    """The ``kind`` of the first :class:`judgeopt.lm.LMError` in ``exc``'s chain, else
    ``"error"`` (an artifact or adapter failure wraps the LM's error)."""
    from ..lm import LMError  # lazy: lm's errors derive from DSPy's (evaluate loads without it)

    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(seen) < 10 and all(current is not e for e in seen):
        if isinstance(current, LMError):
            return current.kind
        seen.append(current)
        current = current.__cause__ or current.__context__
    return "error"


class _Breaker:
    """Counts judge calls that failed transiently in a row; trips at ``limit``."""

    def __init__(self, limit: int | None) -> None:
        self.limit = check_int(
            limit, "max_consecutive_failures", min_value=1, allow_none=True, owner="evaluate"
        )
        self.streak = 0

    def see(self, item: ItemResult) -> None:
        """Record one finished item; raise :class:`judgeopt.lm.LMUnavailable` on a trip."""
        if self.limit is None:
            return
        self.streak = self.streak + 1 if item.transient else 0
        if self.streak >= self.limit:
            from ..lm import LMUnavailable  # lazy: lm's errors derive from DSPy's

            raise LMUnavailable(
                f"{self.streak} judge calls in a row failed ({item.error}); the model "
                "endpoint looks down, so judging stopped (circuit breaker, "
                f"max_consecutive_failures={self.limit})"
            )


def _stats(lm: Any) -> Any:
    fn = getattr(lm, "stats", None)
    return fn() if callable(fn) else None


def computed_between(
    before: Mapping[str, int] | None, after: Mapping[str, int] | None
) -> int | None:
    """The prompt tokens a batch engine computed between two :func:`prompt_reuse_of` counts;
    ``before`` ``None``: the engine started in between, so it counts from its zero. ``None``
    when ``after`` is (the LM has no engine, or none has started yet)."""
    if after is None:
        return None
    return after["evaluated"] - (0 if before is None else before["evaluated"])


def prompt_reuse_of(lm: Any) -> dict[str, int] | None:
    """The prompt tokens the LM's batch engine has computed and reused so far
    (``LlamaCppLM.prompt_reuse``); ``None`` for an LM without that count."""
    fn = getattr(lm, "prompt_reuse", None)
    return fn() if callable(fn) else None


def _record_finished(items: Sequence[ItemResult], on_item: Callable[[ItemResult], Any]) -> None:
    """Hand ``on_item`` the calls that finished while an interrupt waited to be handled.

    A signal reaches Python's main thread only when it runs again, and the workers go on
    meanwhile; their finished items would otherwise be lost to a checkpoint. A call the LM
    never answered because it was closed (``closed``: the process is stopping) is no finished
    judgement and is left out. Best effort: a failing ``on_item`` stops the recording, never
    hides the interrupt.
    """
    for item in items:
        if item.error_kind == "closed":
            continue
        try:
            on_item(item)
        except Exception:  # the interrupt is what gets reported
            return
