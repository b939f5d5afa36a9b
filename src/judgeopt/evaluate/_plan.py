"""What a run will cost before it starts: calls, tokens, time and money.

A :class:`CostPlan` is estimated from the prompts the run will send, rendered and counted
with the model's own tokenizer (:meth:`judgeopt.lm.JudgeLM.count_prompt_tokens`), and from
real judgements timed on the endpoint (:func:`time_judgement`: one, or one of each call in
flight; they go through the response cache, so the run that follows does not pay for them
again). The estimate's parts:

* **calls**: items x answers per item (5 for ``sc5``) for every judge the run evaluates;
* **prompt tokens**: counted on the rendered prompts; what a strategy generates during the
  run (its criteria, AutoCoT steps, metrics questions, a self-written reference) is not
  written yet and is stood in for by a text of about its length (the task's criteria, the
  judged text); in-context examples are the judge's own (selected without an LM call), or
  other items of the same data for a judge without a labelled pool;
* **completion tokens**: a judge that stops at its rating writes a few tokens
  (:data:`RATING_TOKENS`); a judge that explains first writes about what the timed
  judgement wrote, scaled to its own ``max_tokens`` (at most ``max_tokens``);
* **time**: the timed judgement's seconds, scaled to each call by its tokens with prompt
  tokens :data:`PREFILL_SPEEDUP` times cheaper than written ones, summed as if one call ran
  at a time (a server or the embedded model judging several at once finishes sooner). On the
  embedded model, whose prefix cache reads a prompt's shared prefix once (the instructions
  once per strategy, a grouped item's shared input once per group), a call is timed on the
  prompt tokens it computes (:meth:`judgeopt.lm.LlamaCppLM.computed_prompt_tokens`, counted
  on the first :data:`PLAN_WINDOW` items in judging order), read at the rate the batch
  engine's clock gives for the timed batch (:func:`~judgeopt.evaluate.engine_timing`; with
  no engine, a one-token call of the next item's prompt timed after the judgement; a reused
  prompt token costs :data:`~judgeopt.evaluate.REUSED_TOKEN_COST` of a computed one, 0): a
  strategy that puts the item before its instructions shares little and is timed so. On an
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

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ._plan_prompts import (
    cap_of,
    computed_share,
    counts_computed,
    inputs_of,
    judges_of,
    prompt_tokens_of,
)
from ._run import default_threads, scoring_program
from ._timing import RATING_TOKENS, Timing

__all__ = [
    "CallCost",
    "CostPlan",
    "call_cost",
    "duration",
    "mean_cost",
    "plan_cost",
    "screen_cost",
    "timed_runs",
]


@dataclass(frozen=True)
class CallCost:
    """What judging one item costs: calls and tokens (over its calls; a mean over several
    judges may count fractions of a call)."""

    calls: float
    prompt_tokens: float
    completion_tokens: float
    #: The judge writes an explanation before it stops (its completion is an estimate).
    explains: bool = False
    #: Of ``prompt_tokens``, those the model computes (its prefix cache reuses the rest);
    #: ``None``: not counted (every prompt token is read).
    computed_tokens: float | None = None
    #: The tokens a call of the judge writes when it explains first (0: it stops at its
    #: rating; a mean over judges: their mean, 0 for those that stop): what a run's wait for
    #: its longest answers scales with (:meth:`Timing.tail_seconds`).
    tail_tokens: float = 0.0


def mean_cost(costs: Sequence[CallCost]) -> CallCost:
    """The mean of several judges' costs per item (a run that judges one of them at a time,
    not known in advance which)."""
    n = max(1, len(costs))
    counted = bool(costs) and all(c.computed_tokens is not None for c in costs)
    return CallCost(
        calls=sum(c.calls for c in costs) / n,
        prompt_tokens=sum(c.prompt_tokens for c in costs) / n,
        completion_tokens=sum(c.completion_tokens for c in costs) / n,
        explains=any(c.explains for c in costs),
        computed_tokens=sum(c.computed_tokens or 0.0 for c in costs) / n if counted else None,
        tail_tokens=sum(c.tail_tokens for c in costs) / n,
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
        timing: The judgement the time was scaled from (``None``: not timed).
        spread: For a run whose path is not known in advance (a compile's search), the
            10th and 90th percentiles of ``calls``, ``tokens``, ``seconds`` and
            ``dollars`` over the paths it was planned on (``None``: one path, or not
            estimated; a figure not estimated is left out).
    """

    calls: int
    prompt_tokens: int
    completion_tokens: int
    seconds: float | None
    dollars: float | None
    what: str = ""
    in_flight: int = 1
    timing: Timing | None = None
    spread: Mapping[str, tuple[float, float]] | None = None

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
        return head + ", ".join(parts) + self._spread_text()

    def _spread_text(self) -> str:
        """`` (8 in 10 of the search's simulated paths: 600-1,050 calls, ...)`` or ``""``."""
        if not self.spread:
            return ""
        shown = []
        if "calls" in self.spread:
            lo, hi = self.spread["calls"]
            shown.append(f"{round(lo):,}-{round(hi):,} calls")
        if "seconds" in self.spread:
            lo, hi = self.spread["seconds"]
            shown.append(f"{duration(lo)} to {duration(hi)}")
        if "dollars" in self.spread and self.spread["dollars"][1] > 0:  # not a free model's
            lo, hi = self.spread["dollars"]
            shown.append(f"${lo:,.2f}-{hi:,.2f}")
        return f" (8 in 10 of the search's simulated paths: {', '.join(shown)})" if shown else ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable figures."""
        out = asdict(self)
        if out["seconds"] is not None:
            out["seconds"] = round(out["seconds"], 1)
        if out["timing"] is not None:
            out["timing"] = {
                k: round(v, 6) if isinstance(v, float) else v for k, v in out["timing"].items()
            }
        if self.spread is not None:
            out["spread"] = {k: [round(lo, 4), round(hi, 4)] for k, (lo, hi) in self.spread.items()}
        return out


def duration(seconds: float) -> str:
    """``"45 s"``, ``"12 min"``, ``"2 h 05 min"``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def call_cost(
    program: Any,
    records: Sequence[Any],
    lm: Any,
    *,
    timing: Timing | None = None,
    explain: bool = False,
    window: Sequence[Any] = (),
) -> CallCost:
    """The mean cost of judging one of ``records`` with ``program`` as it is measured (a
    judge stopped at its rating when it rates first; an ensemble: its members' costs
    added), its prompts rendered and counted on ``lm``; ``explain``: as judged with its
    explanation written (``evaluate(..., explain=True)``).

    ``window``: records the run judges one after another (the start of its judging order).
    On an LM that counts the prompt tokens its prefix cache leaves to compute
    (``computed_prompt_tokens``: the embedded model), the share of prompt tokens the judge's
    prompts compute on them (:func:`computed_share`) gives :attr:`CallCost.computed_tokens`;
    a judge that samples several answers per item (``sc5``) sends each item's prompt that
    many times in a row, and all but the first read it from the cache.
    """
    calls, prompt, completion, explains, tail = 0.0, 0.0, 0.0, False, 0.0
    computed: float | None = 0.0 if len(window) > 1 and counts_computed(lm) else None
    for member in judges_of(program):
        judge = scoring_program(member, explain=explain)
        judged = unvetted(judge, records)  # defence 'vetted': a forged rating costs no call
        if records and not judged:
            continue
        weight = len(judged) / len(records) if records else 1.0
        prompts = [prompt_tokens_of(judge, judged, i, lm) for i in range(len(judged))]
        pointwise = judge.task.mode != "pairwise"
        decoding = getattr(judge, "decoding", None) if pointwise else None
        samples = weight * (int(decoding.samples) if decoding is not None else 1)
        cap = cap_of(judge)
        if pointwise and getattr(judge, "stops_at_score", False):
            written = float(min(cap, RATING_TOKENS))
        else:
            explains = True
            written = float(cap)
            if timing is not None and timing.completion_tokens > 0:
                written = min(float(cap), timing.completion_tokens * cap / max(1, timing.cap))
            tail = max(tail, written)  # an ensemble's run waits for its longest writer
        mean_prompt = sum(prompts) / max(1, len(prompts))
        calls += samples
        prompt += samples * mean_prompt
        completion += samples * written
        if computed is not None:
            held = timing.in_flight if timing is not None else default_threads(lm)
            try:
                # A sampled judge's calls on one item send one prompt several times: the
                # engine reuses its blocks for all but the first (one run of them in order).
                repeats = int(decoding.samples) if decoding is not None else 1
                judged_window = [r for r in window for _ in range(max(1, repeats))]
                share = computed_share(judge, judged_window, lm, in_flight=held)
            except Exception:  # noqa: BLE001 - no token ids (a chat handler without them)
                computed = None
            else:
                computed += samples * share * mean_prompt
        if getattr(judge, "screens", False):
            screen = screen_cost(judge, judged, lm)
            calls += weight * screen.calls
            prompt += weight * screen.prompt_tokens
            completion += weight * screen.completion_tokens
            if computed is not None:
                computed += weight * screen.prompt_tokens
    return CallCost(calls, prompt, completion, explains, computed, tail)


def timed_runs(timing: Timing | None, items: float) -> float:
    """The runs in which a judge timed for a plan judges its ``items``: two when ``timing``
    is a batch of calls in flight read from the engine's clock (that batch, the judge's
    first ``in_flight`` items, is one run; the rest are another), each waiting once for its
    longest answer (:meth:`Timing.tail_seconds`); else one."""
    if timing is None or timing.engine is None or timing.in_flight <= 1:
        return 1.0
    return 2.0 if items > timing.in_flight else 1.0


def unvetted(judge: Any, records: Sequence[Any]) -> list[Any]:
    """The ``records`` a judge makes calls for: all of them, except, for a ``vetted`` judge,
    those whose judged text holds a forged rating (refused before any call)."""
    from ..judge import forged_of  # lazy: judgeopt.judge loads DSPy

    if getattr(judge, "strategy", None) is None:
        return list(records)
    return [r for r in records if forged_of(judge, inputs_of(judge, r)) is None]


def screen_cost(judge: Any, records: Sequence[Any], lm: Any) -> CallCost:
    """One ``screened`` judge's screen call per item: its prompt tokens the mean over
    ``records``, all of them computed (the screen's prompt shares no prefix with the rating
    call's)."""
    tokens = [lm.count_prompt_tokens(judge.screen_messages(inputs_of(judge, r))) for r in records]
    prompt = sum(tokens) / max(1, len(tokens))
    written = float(judge.screen_kwargs()["max_tokens"])
    return CallCost(1, prompt, written, computed_tokens=prompt)


def plan_cost(
    costs: Sequence[tuple[CallCost, float] | tuple[CallCost, float, float]],
    lm: Any,
    *,
    timing: Timing | None,
    what: str = "",
) -> CostPlan:
    """Add up ``(cost of one item, items)`` pairs into a plan on ``lm``; a third element
    counts the runs the items are judged in (default: one), each of which waits once for
    its longest explanations (:meth:`Timing.tail_seconds`)."""
    from ..lm import price_of  # lazy: judgeopt.lm loads DSPy and LiteLLM

    entries = [(e[0], float(e[1]), float(e[2]) if len(e) > 2 else 1.0) for e in costs]
    calls = sum(c.calls * n for c, n, _ in entries)
    prompt = sum(c.prompt_tokens * n for c, n, _ in entries)
    completion = sum(c.completion_tokens * n for c, n, _ in entries)
    seconds = None
    if timing is not None:
        seconds = sum(
            n
            * c.calls
            * timing.per_call(
                c.prompt_tokens / c.calls,
                c.completion_tokens / c.calls,
                None if c.computed_tokens is None else c.computed_tokens / c.calls,
            )
            + (runs * timing.tail_seconds(c.tail_tokens) if n > 0 else 0.0)
            for c, n, runs in entries
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
        timing=timing,
    )
