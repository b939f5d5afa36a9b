"""Judgements timed on the endpoint, the measure a cost plan scales every call's time from
(:class:`Timing`): made for the plan (:func:`time_judgement`: one, or one round of the calls
in flight) or read from the judgements a resumed run already made (:func:`recorded_timing`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ._endpoint import _quiet_copy, one_token_call
from ._plan_prompts import cap_of, counts_computed, inputs_of, judges_of, plan_messages
from ._run import evaluate, prompt_reuse_of, scoring_program

__all__ = [
    "PREFILL_SPEEDUP",
    "RATING_TOKENS",
    "REUSED_TOKEN_COST",
    "TIMED_ROUNDS",
    "Timing",
    "recorded_timing",
    "time_judgement",
]


#: Tokens a judge that stops at its rating writes (``"[[4"`` and the stop: 2.5 a call on
#: average in benchmarks/results/stop_at_score.json).
RATING_TOKENS = 8


#: Rounds of calls in flight the plan's timed judgement makes on a model that judges several
#: at once: ``threads x TIMED_ROUNDS`` items, judged as a run judges them (a new call starts
#: as one ends); the run reads them back from the response cache. One round: three rounds
#: were checked against it (benchmarks/timing_check.py, pre-registered: 3 pairs x 5
#: strategies, the embedded model) and predicted the baseline's seconds per call better
#: (mean |error| 16 % against 30 %) but the rate-first judges' worse (25 % against 13 %),
#: 23 % against 16 % over all: not adopted.
TIMED_ROUNDS = 1


#: What a prompt token the embedded model's prefix cache reuses costs, as a share of one it
#: computes (its block is copied into the call's sequence, and the tokens computed after it
#: attend over it). 0: reused tokens are free. The least-squares ratio over the 19 strategies
#: of the 100-label default compile of SFRES naturalness is 0.1 (0.0011 against 0.0110 s per
#: token), and 0.1 lowered the time model's error on two other recorded compiles (SummEval
#: 14 % to 10 %, Topical-Chat coherence 27 % to 15 %), but not on the pre-registered check
#: (benchmarks/timing_check.py: 23.1 % to 22.8 %, s.e. of the difference 2.3 points; with
#: the one-round timing 16.3 % to 18.4 %, read afterwards), where in-context examples were
#: planned slower with it and item-first orders faster: left at 0. ``Timing.probe`` keeps
#: the figures to replay another value (:meth:`Timing.with_reused_cost`).
REUSED_TOKEN_COST = 0.0


#: How many prompt tokens cost the time of one written token. On the embedded 1.5B on two
#: CPU cores, stopping at the rating saved 2.54 s for 36 fewer written tokens per item and
#: the remaining 1.89 s read about 500 prompt tokens: about 15 (benchmarks section 14).
PREFILL_SPEEDUP = 15.0


@dataclass(frozen=True)
class Timing:
    """Judgements timed on the endpoint: wall seconds per judgement, the tokens one used and
    the ``max_tokens`` it was given, and how many were judged together (``in_flight``: the
    seconds are the wall time of the batch shared among them).

    On an endpoint reached over the network two one-token calls are timed as well
    (:func:`one_token_call`): ``latency``, the seconds of a call that neither reads nor
    writes much (every call pays it, whatever its length), and ``prompt_seconds``, the
    seconds of reading one prompt token (the judge's own prompt asked for one token, less
    the latency, per token). Both 0 / ``None`` when not measured.

    On a model that reports the prompt tokens it computes (the embedded one, whose prefix
    cache reuses the rest), ``computed_tokens`` is what the timed judgement computed per call
    and ``prompt_seconds`` the seconds of computing one (a one-token call of another item's
    prompt, the ``probe``: its seconds, the prompt tokens it computed and all of its prompt
    tokens): calls are then timed on the tokens they compute, a reused one costing
    ``reused_cost`` of a computed one (:meth:`per_call`).
    """

    seconds: float
    prompt_tokens: int
    completion_tokens: int
    cap: int = 256
    in_flight: int = 1
    latency: float = 0.0
    prompt_seconds: float | None = None
    computed_tokens: float | None = None
    reused_cost: float = 0.0
    probe: tuple[float, float, float] | None = None

    def __post_init__(self) -> None:
        if self.probe is not None:  # read back from JSON as a list
            object.__setattr__(self, "probe", tuple(float(v) for v in self.probe))

    def with_reused_cost(self, cost: float) -> Timing:
        """This timing with a reused prompt token costing ``cost`` of a computed one: the
        rate of computing one taken again from the probe (unchanged without a probe)."""
        if self.probe is None:
            return replace(self, reused_cost=cost)
        seconds, computed, prompt = self.probe
        units = computed + cost * max(0.0, prompt - computed)
        return replace(self, reused_cost=cost, prompt_seconds=seconds / max(units, 1e-9))

    def _read(self, prompt: float, computed: float) -> float:
        """Prompt tokens in computed-token units: those computed, and the reused ones at
        :attr:`reused_cost` each."""
        return computed + self.reused_cost * max(0.0, prompt - computed)

    def per_call(
        self, prompt_tokens: float, completion_tokens: float, computed: float | None = None
    ) -> float:
        """Seconds of a call of these tokens, scaled from this one.

        With ``prompt_seconds`` measured: the latency, plus the prompt read at that rate,
        plus the answer written at the rate the timed judgement wrote its own (what is left
        of its seconds, per written token); the prompt read is the tokens computed when both
        this timing and the call know them (``computed_tokens``, ``computed``), the reused
        ones at :attr:`reused_cost` each, else all of them. Otherwise the latency (shared
        among the calls in flight) plus the rest of the timed seconds scaled by the tokens,
        a prompt token :data:`PREFILL_SPEEDUP` times cheaper than a written one.
        """
        fixed = min(max(self.latency, 0.0) / max(self.in_flight, 1), self.seconds)
        if self.prompt_seconds is not None and self.completion_tokens > 0:
            mine, theirs = float(self.prompt_tokens), float(prompt_tokens)
            if self.computed_tokens is not None:
                mine = self._read(self.prompt_tokens, self.computed_tokens)
                theirs = prompt_tokens if computed is None else self._read(prompt_tokens, computed)
            reading = min(self.prompt_seconds * mine, self.seconds - fixed)
            writing = (self.seconds - fixed - reading) / self.completion_tokens
            per_prompt = reading / max(mine, 1.0)
            return fixed + per_prompt * theirs + writing * completion_tokens
        mine = self.prompt_tokens / PREFILL_SPEEDUP + self.completion_tokens
        if mine <= 0:
            return self.seconds
        scaled = (prompt_tokens / PREFILL_SPEEDUP + completion_tokens) / mine
        return fixed + (self.seconds - fixed) * scaled


def time_judgement(
    program: Any,
    records: Iterable[Any],
    lm: Any,
    *,
    tries: int = 3,
    explain: bool = False,
    threads: int = 1,
    rounds: int = TIMED_ROUNDS,
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

    The answers go into the response cache, so the run that judges the items next reads
    them. An ensemble is timed on its first member.
    """
    if getattr(lm, "response_cache", None) is None:
        return None  # the run would pay for the timed judgement a second time
    judge = scoring_program(judges_of(program)[0], explain=explain)
    # The embedded model loads on first use: loaded here, its loading is not timed.
    lm.count_prompt_tokens([{"role": "user", "content": "OK"}])
    records = list(records)
    batch = records[: threads * max(1, rounds)]
    if threads > 1 and len(batch) > 1:
        reuse = prompt_reuse_of(lm)
        together = _timed_run(judge, batch, lm, threads, explain)
        if together is None:
            return None
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
        if after is not None:
            done = float(after["evaluated"] - (reuse or {}).get("evaluated", 0))
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


def recorded_timing(
    program: Any, evaluations: Iterable[Mapping[str, Any]], *, in_flight: int = 1
) -> Timing | None:
    """A :class:`Timing` from judgements a run has already made, with no new call: what a
    resumed run plans with when the judge it would time is all in the response cache.

    ``evaluations`` are evaluation summaries (``EvalResult.summary()``: ``calls``,
    ``cache_hits``, ``prompt_tokens``, ``completion_tokens``, ``seconds``, and on the
    embedded model ``computed_tokens``; the model calls made, the answers read from the
    cache are not counted in ``calls``). Every call is timed as the recorded ones ran,
    ``in_flight`` at once:

    * when every summary counts its computed prompt tokens and they tell the two rates apart
      (:func:`_fitted_rates`: seconds = a rate per computed prompt token x those tokens + a
      rate per written token x those tokens, both positive), calls are timed on the tokens
      they compute, at those rates;
    * otherwise the seconds are pooled into one cost per token unit (a prompt token
      :data:`PREFILL_SPEEDUP` times cheaper than a written one).

    The judgement written by an explaining judge (``program``'s ``max_tokens`` its cap, as
    :func:`time_judgement` reads it) is the mean written by the recorded calls that wrote
    more than twice :data:`RATING_TOKENS` per call (those that explained), or by all of them
    when none did. ``None`` when nothing was recorded (no call, or no time).
    """
    rows = []  # calls, prompt, written, computed (None: not counted), seconds
    for e in evaluations:
        n = float(e.get("calls") or 0)
        took = float(e.get("seconds") or 0.0)
        if n <= 0 or took <= 0:
            continue
        c = e.get("computed_tokens")
        rows.append(
            (
                n,
                float(e.get("prompt_tokens") or 0),
                float(e.get("completion_tokens") or 0),
                None if c is None else float(c),
                took,
            )
        )
    calls = sum(r[0] for r in rows)
    prompt = sum(r[1] for r in rows)
    written = sum(r[2] for r in rows)
    seconds = sum(r[4] for r in rows)
    explaining = [r for r in rows if r[2] / r[0] > 2 * RATING_TOKENS]
    units = prompt / PREFILL_SPEEDUP + written
    if calls <= 0 or units <= 0:
        return None
    mean_prompt = round(prompt / calls)
    if explaining:
        mean_written = sum(r[2] for r in explaining) / sum(r[0] for r in explaining)
    else:
        mean_written = written / calls
    mean_written = max(1, round(mean_written))
    fitted = _fitted_rates(rows)
    if fitted is not None:
        reading, writing = fitted
        mean_computed = sum(r[3] or 0.0 for r in rows) / calls
        read = mean_computed + REUSED_TOKEN_COST * max(0.0, mean_prompt - mean_computed)
        return Timing(
            seconds=reading * read + writing * mean_written,
            prompt_tokens=mean_prompt,
            completion_tokens=mean_written,
            cap=cap_of(program),
            in_flight=in_flight,
            prompt_seconds=reading,
            computed_tokens=mean_computed,
            reused_cost=REUSED_TOKEN_COST,
        )
    per_unit = seconds / units  # wall seconds per token unit, in_flight calls at once
    return Timing(
        seconds=per_unit * (mean_prompt / PREFILL_SPEEDUP + mean_written),
        prompt_tokens=mean_prompt,
        completion_tokens=mean_written,
        cap=cap_of(program),
        in_flight=in_flight,
    )


def _fitted_rates(
    rows: Sequence[tuple[float, float, float, float | None, float]],
) -> tuple[float, float] | None:
    """Seconds per computed prompt token and per written token that best explain the rows'
    seconds (least squares, no intercept; a row: calls, prompt, written, computed, seconds;
    a reused prompt token counted as :data:`REUSED_TOKEN_COST` of a computed one).
    ``None`` unless every row counts its computed tokens, there are at least two, and both
    rates come out positive (rows whose computed and written tokens are in the same
    proportion cannot tell the rates apart)."""
    if len(rows) < 2 or any(r[3] is None for r in rows):
        return None
    read = [(r[3] or 0.0) + REUSED_TOKEN_COST * max(0.0, r[1] - (r[3] or 0.0)) for r in rows]
    design = np.array([[units, r[2]] for units, r in zip(read, rows, strict=True)], dtype=float)
    target = np.array([r[4] for r in rows], dtype=float)
    (reading, writing), _, rank, _ = np.linalg.lstsq(design, target, rcond=None)
    if rank < 2 or not (np.isfinite(reading) and np.isfinite(writing)):
        return None
    if reading <= 0 or writing <= 0:
        return None
    return float(reading), float(writing)


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
) -> Timing | None:
    """Judge ``records`` with ``judge`` (as measured: :func:`scoring_program` with
    ``explain``) as a run does, ``threads`` calls in flight (:func:`evaluate`), and time
    them; ``None`` when every answer came from the cache or every call failed."""
    before = lm.stats()
    try:
        result = evaluate(judge, records, lm=lm, threads=threads, progress=False, explain=explain)
    except Exception:  # noqa: BLE001 - records the run cannot judge: the plan has no time
        return None
    after = lm.stats()
    calls = after.calls - before.calls
    if calls <= 0 or result.call_failures >= len(records):
        return None
    return Timing(
        seconds=result.seconds / calls,
        prompt_tokens=round((after.prompt_tokens - before.prompt_tokens) / calls),
        completion_tokens=round((after.completion_tokens - before.completion_tokens) / calls),
        cap=cap_of(judge),
        in_flight=threads,
    )


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
