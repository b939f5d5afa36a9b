"""A judgement timed on the endpoint (:class:`Timing`), the measure a cost plan scales every
call's time from, and how it prices a call and a run's wait. It is made for the plan by
:mod:`judgeopt.evaluate._timed` (one call, or one round of the calls in flight); a resumed run
reads its own from the judgements already made (:mod:`judgeopt.evaluate._recorded_timing`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = [
    "PREFILL_SPEEDUP",
    "RATING_TOKENS",
    "REUSED_TOKEN_COST",
    "TAIL_ONCE",
    "Timing",
]


#: Tokens a judge that stops at its rating writes, at most (``"Rating: [[4"`` and the stop:
#: 5.0 a call with the embedded 1.5B in benchmarks/results/stop_at_score.json, 4.0 without an
#: explanation to stop before; 5.0-6.2 in the 100-label compile, by scale).
RATING_TOKENS = 8


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


#: Whether a timed batch read from the engine's clock prices a run's explaining calls at
#: full steps and its wait for the longest answers once per run (:meth:`Timing.tail_seconds`)
#: instead of at the timed batch's own rate, which pays that wait every ``in_flight`` calls.
#: See docs/benchmarks.md, "One wait per run" for the check that decided it.
TAIL_ONCE = True


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

    Read from the batch engine's clock (:func:`judgeopt.evaluate.engine_timing`), ``engine``
    holds what the engine spent on the timed batch (its steps, their seconds, the seconds of
    computing its prompts, its width), ``seconds`` is the engine's time per call, and the
    ``probe`` is the batch itself (its prompts' seconds, the tokens computed, all of their
    prompt tokens).
    ``tail_once``: a run's calls are timed at full steps and its wait for its longest
    answers once (:meth:`tail_seconds`); off, they are timed at the batch's own rate.
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
    engine: tuple[float, float, float, float] | None = None
    tail_once: bool = TAIL_ONCE

    def __post_init__(self) -> None:
        for name in ("probe", "engine"):  # read back from JSON as lists
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(float(v) for v in value))

    def with_reused_cost(self, cost: float) -> Timing:
        """This timing with a reused prompt token costing ``cost`` of a computed one: the
        rate of computing one taken again from the probe (unchanged without a probe)."""
        if self.probe is None:
            return replace(self, reused_cost=cost)
        seconds, computed, prompt = self.probe
        units = computed + cost * max(0.0, prompt - computed)
        return replace(self, reused_cost=cost, prompt_seconds=seconds / max(units, 1e-9))

    def _lockstep(self, writing: float) -> float:
        """Seconds per written token of a run's calls on the batch engine: a step's seconds
        shared among the calls in flight (at most the engine's width). A step costs the same
        however many slots are busy; in a run a new call takes a slot as soon as one is
        free, so its steps are full, while the timed batch waited, part-empty, for its
        longest answers (the batch's own rate, ``writing``, is the ceiling; that wait is a
        run's once, :meth:`tail_seconds`)."""
        stepping = self._stepping()
        if stepping is None:
            return writing
        _, step, busy = stepping
        return min(writing, step / busy)

    def _stepping(self) -> tuple[float, float, float] | None:
        """The timed batch's steps on the engine, the seconds of one, and the slots a step
        shares among (the calls in flight, at most the engine's width); ``None`` without
        the engine's clock or a step."""
        if self.engine is None:
            return None
        steps, step_seconds, _, width = self.engine
        busy = min(width, max(self.in_flight, 1))
        if steps <= 0 or busy <= 0:
            return None
        return steps, step_seconds / steps, busy

    def tail_seconds(self, completion_tokens: float) -> float:
        """Seconds a run of explaining calls waits at its end for its longest answers, once
        per run (0 without the batch engine's clock, or with ``tail_once`` off).

        The timed batch started its calls together and stepped until its longest answer
        ended: the steps beyond those its written tokens fill (``completion_tokens x
        in_flight / busy``) are that wait, a sample of a run's own (its last calls end one
        by one too). Scaled by the calls' written tokens against the timed ones (a judge
        with a smaller output cap waits less)."""
        stepping = self._stepping()
        if stepping is None or not self.tail_once or self.completion_tokens <= 0:
            return 0.0
        steps, step, busy = stepping
        waiting = max(0.0, steps - self.completion_tokens * self.in_flight / busy)
        scale = max(0.0, completion_tokens) / self.completion_tokens
        return waiting * step * scale

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

        Read from the batch engine's clock (``engine``), a call writes each token at a full
        step's share (:meth:`_lockstep`), not at the timed batch's rate; the batch's wait
        for its longest answers is a run's once (:meth:`tail_seconds`, added by the plan
        per run of explaining calls). With ``tail_once`` off (:data:`TAIL_ONCE`), only the
        calls that write a few tokens (at most twice :data:`RATING_TOKENS`: a judge stopped
        at its rating) do.
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
            few = completion_tokens <= 2 * RATING_TOKENS
            if self.engine is not None and (self.tail_once or few):
                writing = self._lockstep(writing)
            return fixed + per_prompt * theirs + writing * completion_tokens
        mine = self.prompt_tokens / PREFILL_SPEEDUP + self.completion_tokens
        if mine <= 0:
            return self.seconds
        scaled = (prompt_tokens / PREFILL_SPEEDUP + completion_tokens) / mine
        return fixed + (self.seconds - fixed) * scaled
