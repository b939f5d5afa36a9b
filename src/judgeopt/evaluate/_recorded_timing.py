"""A :class:`~judgeopt.evaluate._timing.Timing` read from the judgements a run has already
made, with no new call (:func:`recorded_timing`): what a resumed run plans with when the
judge it would time is all in the response cache."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ._plan_prompts import cap_of
from ._timing import PREFILL_SPEEDUP, RATING_TOKENS, REUSED_TOKEN_COST, Timing

__all__ = ["recorded_timing"]


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

    * when the summaries that count their computed prompt tokens tell the two rates apart
      (:func:`_fitted_rates`: seconds = a rate per computed prompt token x those tokens + a
      rate per written token x those tokens, both positive), calls are timed on the tokens
      they compute, at those rates. Summaries without the count are left out of the fit
      (an evaluation that made no batched call; in checkpoints written before ``evaluate``
      counted from a newly started engine's zero, a resumed run's first evaluation), so one
      of them does not send a run whose prompts share most of their tokens back to timing
      every prompt token as computed;
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
    counted = [r for r in rows if r[3] is not None]
    fitted = _fitted_rates(counted)
    if fitted is not None:
        reading, writing = fitted
        counted_calls = sum(r[0] for r in counted)
        mean_computed = sum(r[3] or 0.0 for r in counted) / counted_calls
        counted_prompt = round(sum(r[1] for r in counted) / counted_calls)
        read = mean_computed + REUSED_TOKEN_COST * max(0.0, counted_prompt - mean_computed)
        return Timing(
            seconds=reading * read + writing * mean_written,
            prompt_tokens=counted_prompt,
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
    ``None`` unless every row counts its computed tokens (:func:`recorded_timing` passes
    those that do), there are at least two, and both rates come out positive (rows whose
    computed and written tokens are in the same proportion cannot tell the rates apart)."""
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
