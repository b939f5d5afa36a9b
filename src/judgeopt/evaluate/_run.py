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
    alongside: Sequence[Record] = (),
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
        alongside: More records judged in the same run, for a later evaluation to read from
            the LM's response cache (a compile judges the baseline on the held-out items
            this way: one wait for a run's slowest answers instead of two). They are not in
            the result and ``on_item`` never sees them; the run's calls, tokens and seconds
            are shared out by item count. Their failed calls are the later evaluation's to
            make again (they do count towards the circuit breaker).

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
    extra = _alongside(records, alongside)
    if extra:
        check_records(program, extra)
    aside = _aside_recorder() if extra else None
    before, reuse = _stats(the_lm), prompt_reuse_of(the_lm)
    t0 = time.perf_counter()
    items = _judge_all(
        program,
        [*records, *extra],
        the_lm,
        threads,
        progress,
        desc,
        on_item,
        breaker,
        None if aside is None else (len(records), aside),
    )
    seconds = time.perf_counter() - t0
    after, computed = _stats(the_lm), computed_between(reuse, prompt_reuse_of(the_lm))
    kept = items[: len(records)]
    if aside is not None:
        share = _Share(before, after, aside.snapshot(), len(records) / len(items))
        result = _evaluation(program, records, kept, seconds * share.seconds, before, after)
        result = share.without_aside(result)
        computed = None if computed is None else round(computed * share.prompt)
    else:
        result = _evaluation(program, records, kept, seconds, before, after)
    return result if computed is None else replace(result, computed_tokens=computed)


def _alongside(records: Sequence[Record], alongside: Sequence[Record]) -> list[Record]:
    """The records of ``alongside`` to judge beside ``records`` (those not among them).

    Raises:
        ValueError: When two of them share an id (their answers could not be told apart).
    """
    ids = {r.id for r in records}
    extra = [r for r in alongside if r.id not in ids]
    if len({r.id for r in extra}) != len(extra):
        raise ValueError("evaluate(): `alongside` holds two records with the same id.")
    return extra


def _aside_recorder() -> Any:
    """A recorder for the calls judged ``alongside`` (:func:`judgeopt.lm.counted_aside`)."""
    from ..lm import StatsRecorder  # lazy: judgeopt.lm's face loads on first use

    return StatsRecorder()


class _Share:
    """An evaluation's part of a run that also judged records ``alongside``.

    The calls, cache hits and tokens of those records were counted aside (exact); the run's
    wall seconds and the prompt tokens its engine computed are not per call, so they are
    shared out: the seconds by the backend seconds of the two parts' requests, the computed
    tokens by their prompt tokens (each by item count when the run made no backend call).
    """

    def __init__(self, before: Any, after: Any, aside: Any, by_items: float) -> None:
        self.aside = aside
        self.seconds = self.prompt = by_items
        if before is None or after is None:
            return
        busy = after.seconds - before.seconds
        if busy > 0:
            self.seconds = max(0.0, 1.0 - aside.seconds / busy)
        sent = after.prompt_tokens - before.prompt_tokens
        if sent > 0:
            self.prompt = max(0.0, 1.0 - aside.prompt_tokens / sent)

    def without_aside(self, result: EvalResult) -> EvalResult:
        """``result`` without the calls, cache hits and tokens counted aside."""
        a = self.aside
        return replace(
            result,
            calls=result.calls - a.calls,
            cache_hits=result.cache_hits - a.cache_hits,
            prompt_tokens=result.prompt_tokens - a.prompt_tokens,
            completion_tokens=result.completion_tokens - a.completion_tokens,
        )


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
    kw.pop("alongside", None)  # judged once, for a later evaluation's cache
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
    aside: tuple[int, Any] | None = None,
) -> list[ItemResult]:
    """Every record's judgement, in input order (:func:`evaluate`'s arguments).

    ``aside``: ``(n, recorder)``: the records after the first ``n`` are judged with their
    calls counted in ``recorder`` too (:func:`judgeopt.lm.counted_aside`), and ``on_item``
    never sees them.
    """
    aspect = program.aspect
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(records), desc=desc or f"judging {aspect}", unit="item", leave=False)
    # NOTE: judging the members of a group one after another lets a server or llama.cpp reuse
    # the shared prompt prefix (the same article or dialogue); results keep the input order.
    order = sorted(range(len(records)), key=lambda i: (records[i].group_id or "", i))
    jobs: list[Callable[[], ItemResult]] = [
        functools.partial(_judge_one, program, record, lm, aspect) for record in records
    ]
    if aside is not None:
        n, recorder = aside
        jobs[n:] = [functools.partial(_counted_aside, recorder, job) for job in jobs[n:]]
        if on_item is not None:
            on_item = _only(on_item, {r.id for r in records[:n]})
    if threads == 1:
        results = _judge_serially(jobs, order, on_item, bar, breaker)
    else:
        results = _judge_pooled(jobs, order, threads, on_item, bar, breaker)
    if bar is not None:
        bar.close()
    return [r for r in results if r is not None]


def _counted_aside(recorder: Any, job: Callable[[], ItemResult]) -> ItemResult:
    """``job()``, its calls counted in ``recorder`` too."""
    from ..lm import counted_aside  # lazy: judgeopt.lm's face loads on first use

    with counted_aside(recorder):
        return job()


def _only(on_item: Callable[[ItemResult], None], ids: set[str]) -> Callable[[ItemResult], None]:
    """``on_item`` for the items whose id is in ``ids``; the others pass unseen."""

    def call(item: ItemResult) -> None:
        if item.id in ids:
            on_item(item)

    return call


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
