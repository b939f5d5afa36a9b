"""The plan's timed judgement (:func:`time_judgement`): a real judgement of the baseline on the
endpoint, one call, or one round of the calls in flight read from the batch engine's clock
(:func:`engine_timing`), giving the :class:`~judgeopt.evaluate.Timing` a cost plan scales
every call's time from. The answers go into the response cache for the run that follows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ._endpoint import _quiet_copy, one_token_call
from ._plan_prompts import cap_of, counts_computed, inputs_of, judges_of, plan_messages
from ._run import computed_between, evaluate, prompt_reuse_of, scoring_program
from ._timing import REUSED_TOKEN_COST, Timing

__all__ = [
    "ENGINE_TIMING",
    "TIMED_ROUNDS",
    "batch_work_of",
    "engine_timing",
    "time_judgement",
    "work_since",
]


#: Rounds of calls in flight the plan's timed judgement makes on a model that judges several
#: at once: ``threads x TIMED_ROUNDS`` items, judged as a run judges them (a new call starts
#: as one ends); the run reads them back from the response cache. One round: three rounds
#: were checked against it (benchmarks/timing_check.py, pre-registered: 3 pairs x 5
#: strategies, the embedded model) and predicted the baseline's seconds per call better
#: (mean |error| 16 % against 30 %) but the rate-first judges' worse (25 % against 13 %),
#: 23 % against 16 % over all: not adopted.
TIMED_ROUNDS = 1


#: Whether a batch timed on the embedded model's batch engine is read from the engine's own
#: clock (:func:`engine_timing`): the seconds it spent computing the batch's prompts per
#: computed token, and in its steps per written token, instead of the batch's wall time and a
#: one-token probe of the next item's prompt. Decided by its pre-registered check
#: (``benchmarks/timing_check.py`` with ``timing_engine_prereg.json``: 3 pairs never timed
#: before x 5 strategies, 48 items, 16 in flight): mean absolute error of the seconds per
#: call 20.2 % against 20.7 %, better by the rule registered but within noise (difference
#: -0.5 points, s.e. 1.1); it also saves the probe's call.
ENGINE_TIMING = True


def time_judgement(
    program: Any,
    records: Iterable[Any],
    lm: Any,
    *,
    tries: int = 3,
    explain: bool = False,
    threads: int = 1,
    rounds: int = TIMED_ROUNDS,
    from_engine: bool | None = None,
) -> Timing | None:
    """Judge one item for real and time it: the first of ``records`` whose answer is not in
    the response cache (at most ``tries``); ``None`` when every one was (nothing to time),
    when ``lm`` has no response cache (the run would make the call again) or the call failed.
    With ``threads`` above 1, the first ``threads x rounds`` (:data:`TIMED_ROUNDS`) records
    are judged as a run with that many calls in flight judges them (:func:`evaluate`), and
    the wall time is shared among the calls made. On an endpoint
    reached over the network, one-token calls are timed after the judgement
    (:attr:`Timing.latency`; judged one at a time, also :attr:`Timing.prompt_seconds`): two
    uncached calls of one written token.

    On an in-process model that counts the prompt tokens it computes (the embedded one:
    its prefix cache reuses the rest), the timing also holds the tokens the judgement
    computed per call and the seconds of computing one: a one-token call of the judge's
    prompt for the next record, uncached, timed after the judgement (:func:`_computing`).

    With several calls in flight on the embedded model's batch engine and ``from_engine``
    (``None``: :data:`ENGINE_TIMING`), the batch is read from the engine's clock instead
    (:func:`engine_timing`: no probe).

    The answers go into the response cache, so the run that judges the items next reads
    them. An ensemble is timed on its first member.
    """
    if from_engine is None:
        from_engine = ENGINE_TIMING
    if getattr(lm, "response_cache", None) is None:
        return None  # the run would pay for the timed judgement a second time
    judge = scoring_program(judges_of(program)[0], explain=explain)
    # The embedded model loads on first use: loaded here, its loading is not timed.
    lm.count_prompt_tokens([{"role": "user", "content": "OK"}])
    records = list(records)
    batch = records[: threads * max(1, rounds)]
    if threads > 1 and len(batch) > 1:
        reuse, work = prompt_reuse_of(lm), batch_work_of(lm)
        timed = _timed_run(judge, batch, lm, threads, explain)
        if timed is None:
            return None
        together, calls = timed
        if from_engine:
            clocked = engine_timing(together, work_since(lm, work), calls)
            if clocked is not None:
                return clocked
        following = records[len(batch)] if len(records) > len(batch) else None
        return _computing(_probed(together, lm), judge, batch, following, lm, reuse)
    for index, record in enumerate(records[:tries]):
        reuse = prompt_reuse_of(lm)
        before = lm.stats()
        started = time.perf_counter()
        if not _judged(judge, record, lm):
            return None
        seconds = time.perf_counter() - started
        after = lm.stats()
        if after.calls == before.calls:
            continue  # from the cache: no time measured
        timing = Timing(
            seconds=seconds,
            prompt_tokens=after.prompt_tokens - before.prompt_tokens,
            completion_tokens=after.completion_tokens - before.completion_tokens,
            cap=cap_of(judge),
        )
        timing = _probed(timing, lm, plan_messages(judge, [record], 0))
        following = records[index + 1] if len(records) > index + 1 else None
        return _computing(timing, judge, [record], following, lm, reuse)
    return None


def batch_work_of(lm: Any) -> dict[str, float] | None:
    """What the LM's batch engine has spent so far (``LlamaCppLM.batch_work``: steps, their
    seconds, the seconds of computing prompts, the prompt tokens computed, its width);
    ``None`` for an LM without one."""
    fn = getattr(lm, "batch_work", None)
    return fn() if callable(fn) else None


def work_since(lm: Any, before: Mapping[str, float] | None) -> dict[str, float] | None:
    """What the LM's batch engine has spent since ``before`` (:func:`batch_work_of`), its
    width as it is; ``None`` without an engine. An engine started after ``before`` was
    read (``before`` ``None``) counts from its start."""
    after = batch_work_of(lm)
    if after is None:
        return None
    spent = {k: v - (before or {}).get(k, 0.0) for k, v in after.items()}
    spent["width"] = after["width"]
    return spent


def engine_timing(timing: Timing, spent: Mapping[str, float] | None, calls: int) -> Timing | None:
    """``timing`` (a batch of ``calls`` judged together) read from the batch engine's clock:
    ``spent`` is what the engine spent on the batch (:func:`work_since`).

    The engine computes one request's prompt at a time and steps every slot together (a
    step of ``width`` columns costs the same however many are busy), so a call of a run
    costs its computed prompt tokens at the batch's seconds per computed token plus its
    written tokens at the batch's step seconds per written token. The batch's wall time
    beyond the engine's (threads starting, the first prompts built) is a run's start, not
    its calls', and is left out; so is the one-token probe :func:`time_judgement` makes
    otherwise, a single call whose own overheads set the rate of every prompt token.
    ``None`` when the engine did not compute or write anything in the batch."""
    if spent is None or calls <= 0:
        return None
    prompt_s, step_s = spent.get("prompt_seconds", 0.0), spent.get("step_seconds", 0.0)
    evaluated = spent.get("evaluated", 0.0)
    if prompt_s <= 0 or step_s <= 0 or evaluated <= 0 or timing.completion_tokens <= 0:
        return None
    clocked = replace(
        timing,
        seconds=(prompt_s + step_s) / calls,
        computed_tokens=evaluated / calls,
        probe=(prompt_s, evaluated, float(timing.prompt_tokens * calls)),
        engine=(spent.get("steps", 0.0), step_s, prompt_s, spent.get("width", 0.0)),
    )
    return clocked.with_reused_cost(REUSED_TOKEN_COST)


def _computing(
    timing: Timing,
    judge: Any,
    timed: Sequence[Any],
    following: Any,
    lm: Any,
    reuse: dict[str, int] | None,
) -> Timing:
    """``timing`` with the prompt tokens the timed calls computed (per call) and the seconds
    of computing one, on an in-process LM that counts them (:func:`counts_computed`).

    The timed calls' tokens come from the batch engine's count (``reuse``: its count before
    them) or, without an engine, from ``lm.computed_prompt_tokens`` over their prompts. The
    rate comes from a one-token call of ``judge``'s prompt for ``following``, uncached:
    its seconds over the tokens it computed. Unchanged when it cannot be measured (no
    following record, the call failed, nothing computed)."""
    if following is None or not getattr(lm, "runs_in_process", False):
        return timing
    if not counts_computed(lm):
        return timing
    try:
        ids = [lm.prompt_token_ids(plan_messages(judge, [r], 0)) for r in timed]
        probe = plan_messages(judge, [following], 0)
        after = prompt_reuse_of(lm)
        counted = computed_between(reuse, after)
        if counted is not None:
            done = float(counted)
        else:
            done = float(sum(lm.computed_prompt_tokens(ids, in_flight=len(ids))))
        probe_ids = lm.prompt_token_ids(probe)
        started = time.perf_counter()
        _quiet_copy(lm).forward(messages=probe, max_tokens=1, cache=False)
        seconds = time.perf_counter() - started
        last = prompt_reuse_of(lm)
        if last is not None and after is not None:
            probe_done = float(last["evaluated"] - after["evaluated"])
        else:
            probe_done = float(lm.computed_prompt_tokens([*ids, probe_ids], in_flight=1)[-1])
    except Exception:  # noqa: BLE001 - no rate measured: the plan times on all prompt tokens
        return timing
    if probe_done <= 0 or done <= 0:
        return timing
    measured = replace(
        timing,
        computed_tokens=done / max(1, len(timed)),
        probe=(seconds, probe_done, float(len(probe_ids))),
    )
    return measured.with_reused_cost(REUSED_TOKEN_COST)


def _probed(timing: Timing, lm: Any, messages: Sequence[Any] | None = None) -> Timing:
    """``timing`` with the endpoint's latency measured, and with ``messages`` (the timed
    judgement's prompt) the time of reading a prompt token; unchanged for in-process
    models or when a probe fails."""
    alone = one_token_call(lm)
    if alone is None:
        return timing
    latency, tokens = alone
    timing = replace(timing, latency=latency)
    if messages is None:
        return timing
    reading = one_token_call(lm, messages)
    if reading is None or reading[1] <= tokens:
        return timing
    per_token = max(0.0, reading[0] - latency) / (reading[1] - tokens)
    return replace(timing, prompt_seconds=per_token)


def _timed_run(
    judge: Any, records: Sequence[Any], lm: Any, threads: int, explain: bool
) -> tuple[Timing, int] | None:
    """Judge ``records`` with ``judge`` (as measured: :func:`scoring_program` with
    ``explain``) as a run does, ``threads`` calls in flight (:func:`evaluate`), and time
    them: the timing and the calls made; ``None`` when every answer came from the cache or
    every call failed."""
    before = lm.stats()
    try:
        result = evaluate(judge, records, lm=lm, threads=threads, progress=False, explain=explain)
    except Exception:  # noqa: BLE001 - records the run cannot judge: the plan has no time
        return None
    after = lm.stats()
    calls = after.calls - before.calls
    if calls <= 0 or result.call_failures >= len(records):
        return None
    timing = Timing(
        seconds=result.seconds / calls,
        prompt_tokens=round((after.prompt_tokens - before.prompt_tokens) / calls),
        completion_tokens=round((after.completion_tokens - before.completion_tokens) / calls),
        cap=cap_of(judge),
        in_flight=threads,
    )
    return timing, calls


def _judged(judge: Any, record: Any, lm: Any) -> bool:
    """Judge ``record`` in a worker thread, waiting in short steps so that Ctrl-C stops the
    caller at once (a call in flight is left to its daemon thread, as :func:`evaluate`
    leaves its calls); whether the call succeeded."""
    failed: list[BaseException] = []

    def work() -> None:
        try:
            judge.judge(inputs_of(judge, record), sample_id=record.id, lm=lm)
        except Exception as e:  # noqa: BLE001 - a failed call leaves the plan without a time
            failed.append(e)

    worker = threading.Thread(target=work, name="judgeopt-plan", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    return not failed
