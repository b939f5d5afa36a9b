"""What a run will cost before it starts: calls, tokens, time and money.

A :class:`CostPlan` is estimated from the prompts the run will send, rendered and counted
with the model's own tokenizer (:meth:`judgeopt.lm.JudgeLM.count_prompt_tokens`), and from
one real judgement timed on the endpoint (:func:`time_judgement`; it goes through the
response cache, so the run that follows does not pay for it again). The estimate's parts:

* **calls**: items x answers per item (5 for ``sc5``) for every judge the run evaluates;
* **prompt tokens**: counted on the rendered prompts; what a strategy generates during the
  run (its criteria, AutoCoT steps, metrics questions, a self-written reference) is not
  written yet and is stood in for by a text of about its length (the task's criteria, the
  judged text), and in-context examples by other items of the same data;
* **completion tokens**: a judge that stops at its rating writes a few tokens
  (:data:`RATING_TOKENS`); a judge that explains first writes about what the timed
  judgement wrote, scaled to its own ``max_tokens`` (at most ``max_tokens``);
* **time**: the timed judgement's seconds, scaled to each call by its tokens with prompt
  tokens :data:`PREFILL_SPEEDUP` times cheaper than written ones, summed as if one call ran
  at a time (a server or the embedded model judging several at once finishes sooner). On an
  endpoint reached over the network, the part of a call that does not depend on its tokens
  (round trip, queueing, the first token: a one-token call timed right after the timed
  judgement, :func:`one_token_call`) is added to every call unscaled, so a judge that stops
  at its rating is not counted as nearly free, and the time of reading a prompt token is
  measured (the judge's prompt asked for one token) instead of assumed;
* **money**: LiteLLM's price list for the tokens (``None`` when the model is not in it; 0
  for the embedded model).

The compile's summary prints the figures it spent beside the plan's, so the estimate is
checked on every run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from ._endpoint import one_token_call
from ._run import scoring_program

__all__ = [
    "PREFILL_SPEEDUP",
    "RATING_TOKENS",
    "CallCost",
    "CostPlan",
    "Timing",
    "artifact_tokens",
    "call_cost",
    "duration",
    "mean_cost",
    "plan_cost",
    "plan_sample",
    "recorded_timing",
    "time_judgement",
]

#: Tokens a judge that stops at its rating writes (``"[[4"`` and the stop: 2.5 a call on
#: average in benchmarks/results/stop_at_score.json).
RATING_TOKENS = 8

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
    the latency, per token). Both 0 / ``None`` when not measured (an in-process model, whose
    time is its tokens').
    """

    seconds: float
    prompt_tokens: int
    completion_tokens: int
    cap: int = 256
    in_flight: int = 1
    latency: float = 0.0
    prompt_seconds: float | None = None

    def per_call(self, prompt_tokens: float, completion_tokens: float) -> float:
        """Seconds of a call of these tokens, scaled from this one.

        With ``prompt_seconds`` measured: the latency, plus the prompt read at that rate,
        plus the answer written at the rate the timed judgement wrote its own (what is left
        of its seconds, per written token). Otherwise the latency (shared among the calls in
        flight) plus the rest of the timed seconds scaled by the tokens, a prompt token
        :data:`PREFILL_SPEEDUP` times cheaper than a written one.
        """
        fixed = min(max(self.latency, 0.0) / max(self.in_flight, 1), self.seconds)
        if self.prompt_seconds is not None and self.completion_tokens > 0:
            reading = min(self.prompt_seconds * self.prompt_tokens, self.seconds - fixed)
            writing = (self.seconds - fixed - reading) / self.completion_tokens
            per_prompt = reading / max(self.prompt_tokens, 1)
            return fixed + per_prompt * prompt_tokens + writing * completion_tokens
        mine = self.prompt_tokens / PREFILL_SPEEDUP + self.completion_tokens
        if mine <= 0:
            return self.seconds
        scaled = (prompt_tokens / PREFILL_SPEEDUP + completion_tokens) / mine
        return fixed + (self.seconds - fixed) * scaled


@dataclass(frozen=True)
class CallCost:
    """What judging one item costs: calls and tokens (over its calls; a mean over several
    judges may count fractions of a call)."""

    calls: float
    prompt_tokens: float
    completion_tokens: float
    #: The judge writes an explanation before it stops (its completion is an estimate).
    explains: bool = False


def plan_sample(records: Sequence[Any], k: int) -> list[Any]:
    """Up to ``k`` of ``records`` spread evenly over them (the first and the last among them):
    the items a plan renders its prompts on. The first ``k`` alone would be one group of a
    grouped dataset (SummEval keeps an article's summaries together) and measure that group's
    length, not the data's."""
    n = len(records)
    if k <= 0 or n == 0:
        return []
    if n <= k:
        return list(records)
    if k == 1:
        return [records[0]]
    return [records[round(i * (n - 1) / (k - 1))] for i in range(k)]


def mean_cost(costs: Sequence[CallCost]) -> CallCost:
    """The mean of several judges' costs per item (a run that judges one of them at a time,
    not known in advance which)."""
    n = max(1, len(costs))
    return CallCost(
        calls=sum(c.calls for c in costs) / n,
        prompt_tokens=sum(c.prompt_tokens for c in costs) / n,
        completion_tokens=sum(c.completion_tokens for c in costs) / n,
        explains=any(c.explains for c in costs),
    )


@dataclass(frozen=True)
class CostPlan:
    """A run's cost, estimated before its first judge call.

    Attributes:
        calls: Judge calls the run makes at most (racing and answers already in the cache
            or the checkpoint make fewer).
        prompt_tokens: Prompt tokens of those calls.
        completion_tokens: Tokens they write (an estimate; see the module docstring).
        seconds: Time on this endpoint with ``in_flight`` calls at once (``None``: not
            timed).
        dollars: Price by LiteLLM's list (``None``: the model is not in it).
        what: What the plan covers (``"120 items"``, ``"20 strategies on 100 items"``).
    """

    calls: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float | None
    dollars: float | None
    what: str = ""
    in_flight: int = 1

    def line(self) -> str:
        """The plan in one line, as the CLI prints it before judging."""
        parts = [
            f"about {self.calls:,} judge calls",
            f"about {self.prompt_tokens:,} prompt and {self.completion_tokens:,} completion tokens",
        ]
        if self.seconds is not None:
            at = (
                "one call at a time" if self.in_flight == 1 else f"{self.in_flight} calls in flight"
            )
            parts.append(f"about {duration(self.seconds)} {at}")
        if self.dollars is not None:
            parts.append(f"${self.dollars:,.2f}")
        head = f"plan ({self.what}): " if self.what else "plan: "
        return head + ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable figures."""
        out = asdict(self)
        if out["seconds"] is not None:
            out["seconds"] = round(out["seconds"], 1)
        return out


def duration(seconds: float) -> str:
    """``"45 s"``, ``"12 min"``, ``"2 h 05 min"``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def _programs(judge: Any) -> list[Any]:
    """The single judges an ensemble (or a judge) calls for each item."""
    members = getattr(judge, "members", None)
    return list(members) if members else [judge]


def _inputs(program: Any, record: Any) -> dict[str, str]:
    return {f: str(record.inputs[f]) for f in program.task.input_names}


def _cap(judge: Any) -> int:
    """The judge's ``max_tokens`` per call."""
    kwargs = getattr(judge, "lm_kwargs", None)
    if callable(kwargs):
        return int(kwargs().get("max_tokens") or 256)
    return int(getattr(judge, "max_tokens", None) or 256)


def _stand_ins(judge: Any, records: Sequence[Any], index: int) -> dict[str, Any]:
    """Artifacts of a realistic length for rendering a prompt before the run makes them:
    the task's human criteria for generated criteria, AutoCoT steps and metrics questions;
    the judged text for a self-written reference; the next records as in-context examples."""
    from ..judge import ARTIFACTS_KEY, Artifacts  # lazy: judgeopt.judge loads DSPy

    strategy = judge.strategy.as_dict()
    task, aspect = judge.task, judge.aspect
    try:
        criteria = task.criteria_text(aspect, int(strategy.get("scale", 5)))
    except (TypeError, ValueError):
        criteria = ""
    record = records[index]
    shots = int(strategy.get("examples", 0) or 0)
    others = [records[(index + 1 + k) % len(records)] for k in range(shots)]
    lo, hi = getattr(judge, "rating_bounds", (1, 5))
    names = task.input_names
    return {
        ARTIFACTS_KEY: Artifacts(
            criteria_text=criteria,
            autocot_steps=criteria,
            metrics=criteria,
            reference=str(record.inputs[names[-1]]),
            examples=[({f: str(r.inputs[f]) for f in names}, (lo + hi) // 2) for r in others],
        )
    }


def artifact_tokens(judge: Any, name: str, records: Sequence[Any], lm: Any) -> float:
    """Tokens the LM is expected to write for the generated artifact ``name`` of ``judge``
    (``self_criteria``, ``autocot_steps``, ``metrics_questions``, ``self_reference``): the
    length on ``lm`` of the text that stands in for it when prompts are rendered before it
    exists (:func:`_stand_ins`: the task's criteria; the judged text, averaged over
    ``records``, for a reference), at most the LM's ``max_tokens``."""
    if not records:
        raise ValueError("artifact_tokens() needs at least one record to stand in for it.")
    cap = int(getattr(lm, "kwargs", {}).get("max_tokens") or 1024)

    def stand_in(index: int) -> Any:  # the Artifacts of _stand_ins' one entry
        return next(iter(_stand_ins(judge, records, index).values()))

    if name == "self_reference":
        texts = [stand_in(i).reference for i in range(len(records))]
    else:  # the criteria are the same for every record
        texts = [stand_in(0).criteria_text]
    counts = [lm.count_prompt_tokens([{"role": "user", "content": str(t or "")}]) for t in texts]
    return float(min(cap, sum(counts) / len(counts)))


def _messages(judge: Any, records: Sequence[Any], index: int) -> list[dict[str, Any]]:
    """The messages of the call judging ``records[index]``, artifacts not made yet stood in
    for by texts of about their length (:func:`_stand_ins`)."""
    fields = _inputs(judge, records[index])
    render = getattr(judge, "render", None)  # a PrExMe judge renders one user prompt
    if callable(render):
        return [{"role": "user", "content": str(render(fields))}]
    inputs = {**fields, **_stand_ins(judge, records, index)}
    return list(judge.adapter.format(judge.signature, [], inputs))


def _prompt_tokens(judge: Any, records: Sequence[Any], index: int, lm: Any) -> int:
    """Prompt tokens of the call judging ``records[index]`` (:func:`_messages`)."""
    return int(lm.count_prompt_tokens(_messages(judge, records, index)))


def call_cost(
    program: Any,
    records: Sequence[Any],
    lm: Any,
    *,
    timing: Timing | None = None,
    explain: bool = False,
) -> CallCost:
    """The mean cost of judging one of ``records`` with ``program`` as it is measured (a
    judge stopped at its rating when it rates first; an ensemble: its members' costs
    added), its prompts rendered and counted on ``lm``; ``explain``: as judged with its
    explanation written (``evaluate(..., explain=True)``)."""
    calls, prompt, completion, explains = 0.0, 0.0, 0.0, False
    for member in _programs(program):
        judge = scoring_program(member, explain=explain)
        prompts = [_prompt_tokens(judge, records, i, lm) for i in range(len(records))]
        pointwise = judge.task.mode != "pairwise"
        decoding = getattr(judge, "decoding", None) if pointwise else None
        samples = int(decoding.samples) if decoding is not None else 1
        cap = _cap(judge)
        if pointwise and getattr(judge, "stops_at_score", False):
            written = float(min(cap, RATING_TOKENS))
        else:
            explains = True
            written = float(cap)
            if timing is not None and timing.completion_tokens > 0:
                written = min(float(cap), timing.completion_tokens * cap / max(1, timing.cap))
        calls += samples
        prompt += samples * (sum(prompts) / max(1, len(prompts)))
        completion += samples * written
    return CallCost(calls, prompt, completion, explains)


def time_judgement(
    program: Any,
    records: Iterable[Any],
    lm: Any,
    *,
    tries: int = 3,
    explain: bool = False,
    threads: int = 1,
) -> Timing | None:
    """Judge one item for real and time it: the first of ``records`` whose answer is not in
    the response cache (at most ``tries``); ``None`` when every one was (nothing to time),
    when ``lm`` has no response cache (the run would make the call again) or the call failed.
    With ``threads`` above 1, the first ``threads`` records are judged together, as a run
    with that many calls in flight judges them, and the batch's wall time is shared among
    the calls it made. On an endpoint reached over the network, one-token calls are timed
    after the judgement (:attr:`Timing.latency`; judged one at a time, also
    :attr:`Timing.prompt_seconds`): two uncached calls of one written token.

    The answers go into the response cache, so the run that judges the items next reads
    them. An ensemble is timed on its first member.
    """
    if getattr(lm, "response_cache", None) is None:
        return None  # the run would pay for the timed judgement a second time
    judge = scoring_program(_programs(program)[0], explain=explain)
    # The embedded model loads on first use: loaded here, its loading is not timed.
    lm.count_prompt_tokens([{"role": "user", "content": "OK"}])
    batch = list(records)[:threads]
    if threads > 1 and len(batch) > 1:
        together = _timed_together(judge, batch, lm)
        return together if together is None else _probed(together, lm)
    for record in list(records)[:tries]:
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
            cap=_cap(judge),
        )
        return _probed(timing, lm, _messages(judge, [record], 0))
    return None


def recorded_timing(
    program: Any, evaluations: Iterable[Mapping[str, Any]], *, in_flight: int = 1
) -> Timing | None:
    """A :class:`Timing` from judgements a run has already made, with no new call: what a
        resumed run plans with when the judge it would time is all in the response cache.

        ``evaluations`` are evaluation summaries (``EvalResult.summary()``: ``calls``,
        ``cache_hits``, ``prompt_tokens``, ``completion_tokens``, ``seconds``; the model calls
        made, the answers read from the cache are not counted in ``calls``). Their seconds are
        pooled into one cost per token unit (a prompt token :data:`PREFILL_SPEEDUP` times
        cheaper than a written one), so every call is timed as the recorded ones ran, ``in_flight``
        at once. The judgement written by an explaining judge (``program``'s ``max_tokens`` its
    cap, as :func:`time_judgement` reads it) is
        the mean written by the recorded calls that wrote more than twice :data:`RATING_TOKENS`
        per call (those that explained), or by all of them when none did. ``None`` when nothing
        was recorded (no call, or no time).
    """
    calls = prompt = written = seconds = 0.0
    explaining_calls = explaining_written = 0.0
    for e in evaluations:
        n = float(e.get("calls") or 0)
        took = float(e.get("seconds") or 0.0)
        if n <= 0 or took <= 0:
            continue
        p, w = float(e.get("prompt_tokens") or 0), float(e.get("completion_tokens") or 0)
        calls, prompt, written, seconds = calls + n, prompt + p, written + w, seconds + took
        if w / n > 2 * RATING_TOKENS:
            explaining_calls, explaining_written = explaining_calls + n, explaining_written + w
    units = prompt / PREFILL_SPEEDUP + written
    if calls <= 0 or units <= 0:
        return None
    per_unit = seconds / units  # wall seconds per token unit, in_flight calls at once
    mean_prompt = round(prompt / calls)
    mean_written = max(
        1, round(explaining_written / explaining_calls if explaining_calls else written / calls)
    )
    return Timing(
        seconds=per_unit * (mean_prompt / PREFILL_SPEEDUP + mean_written),
        prompt_tokens=mean_prompt,
        completion_tokens=mean_written,
        cap=_cap(program),
        in_flight=in_flight,
    )


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


def _timed_together(judge: Any, records: Sequence[Any], lm: Any) -> Timing | None:
    """Judge ``records`` at once (one call each in flight) and time the batch; ``None``
    when every answer came from the cache or every call failed."""
    before = lm.stats()
    started = time.perf_counter()
    done = _judged_all(judge, records, lm)
    seconds = time.perf_counter() - started
    after = lm.stats()
    calls = after.calls - before.calls
    if calls <= 0 or not done:
        return None
    return Timing(
        seconds=seconds / calls,
        prompt_tokens=round((after.prompt_tokens - before.prompt_tokens) / calls),
        completion_tokens=round((after.completion_tokens - before.completion_tokens) / calls),
        cap=_cap(judge),
        in_flight=len(records),
    )


def _judged_all(judge: Any, records: Sequence[Any], lm: Any) -> int:
    """:func:`_judged` for every record at once, each in its own thread; how many
    succeeded."""
    ok: list[bool] = []

    def work(record: Any) -> None:
        ok.append(_judged(judge, record, lm))

    workers = [
        threading.Thread(target=work, args=(r,), name="judgeopt-plan", daemon=True) for r in records
    ]
    for w in workers:
        w.start()
    for w in workers:
        while w.is_alive():
            w.join(0.1)
    return sum(ok)


def _judged(judge: Any, record: Any, lm: Any) -> bool:
    """Judge ``record`` in a worker thread, waiting in short steps so that Ctrl-C stops the
    caller at once (a call in flight is left to its daemon thread, as :func:`evaluate`
    leaves its calls); whether the call succeeded."""
    failed: list[BaseException] = []

    def work() -> None:
        try:
            judge.judge(_inputs(judge, record), sample_id=record.id, lm=lm)
        except Exception as e:  # noqa: BLE001 - a failed call leaves the plan without a time
            failed.append(e)

    worker = threading.Thread(target=work, name="judgeopt-plan", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    return not failed


def plan_cost(
    costs: Sequence[tuple[CallCost, int]],
    lm: Any,
    *,
    timing: Timing | None,
    what: str = "",
) -> CostPlan:
    """Add up ``(cost of one item, items)`` pairs into a plan on ``lm``."""
    from ..lm import price_of  # lazy: judgeopt.lm loads DSPy and LiteLLM

    calls = sum(c.calls * n for c, n in costs)
    prompt = sum(c.prompt_tokens * n for c, n in costs)
    completion = sum(c.completion_tokens * n for c, n in costs)
    seconds = None
    if timing is not None:
        seconds = sum(
            n * c.calls * timing.per_call(c.prompt_tokens / c.calls, c.completion_tokens / c.calls)
            for c, n in costs
            if c.calls
        )
    if getattr(lm, "runs_in_process", False):
        dollars: float | None = 0.0
    else:
        model = lm.priced_model() if hasattr(lm, "priced_model") else None
        dollars = price_of(model, int(prompt), int(completion)) if model else None
    return CostPlan(
        calls=round(calls),
        prompt_tokens=int(round(prompt)),
        completion_tokens=int(round(completion)),
        seconds=seconds,
        dollars=dollars,
        what=what,
        in_flight=1 if timing is None else timing.in_flight,
    )
