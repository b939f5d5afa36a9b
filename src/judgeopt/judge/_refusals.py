"""Ratings a defence does not take: the ``checked`` echo check and the ``screened`` screen
(:mod:`._defences` holds their texts and rules)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dspy

from judgeopt.scoring import PreferenceParse, RatingParse, parse_preference, parse_rating

from ._decoding import output_text
from ._defences import (
    CHECKED_DEFENCES,
    REFUSED,
    SCREEN_THRESHOLD,
    echoed_rating,
    screen_probability,
)

__all__ = ["check_echo", "screen", "screen_kwargs"]


def check_echo(program: Any, pred: dspy.Prediction, fields: Mapping[str, str]) -> dspy.Prediction:
    """The ``checked`` defence: an answer whose rating (verdict) text the judged text holds
    verbatim is not taken (``score`` ``None``, a ``parse_error`` saying so, the rating it
    gave as ``echoed_score``)."""
    if program.strategy.get("defence") not in CHECKED_DEFENCES or pred.get("score") is None:
        return pred
    raw = str(pred.get("raw") or "")
    parsed: RatingParse | PreferenceParse
    if program.task.mode == "pairwise":
        parsed = parse_preference(raw)
    else:
        lo, hi = program.rating_bounds
        parsed = parse_rating(raw, scale=hi, rating_min=lo)
    judged = [fields[f] for f in program.task.judged_fields]
    echo = echoed_rating(parsed.matched, parsed.method, judged)
    if echo is None:
        return pred
    values = dict(pred.items())
    values.update(
        score=None,
        echoed_score=pred.get("score"),
        parse_error=f"{REFUSED} 'checked': the rating {echo!r} echoes the judged text",
    )
    return dspy.Prediction(**values)


def screen_kwargs(logprobs: bool) -> dict[str, Any]:
    """The screen call's LM arguments: one token, greedy, with its logprobs when the judge's
    decoding reads logprobs (so the LM is known to give them), else a few tokens of text."""
    if logprobs:
        return {"max_tokens": 1, "temperature": 0.0, "logprobs": True, "top_logprobs": 20}
    return {"max_tokens": 3, "temperature": 0.0}


def screen(
    pred: dspy.Prediction,
    messages: list[dict[str, str]],
    kwargs: Mapping[str, Any],
    lm: Any,
) -> dspy.Prediction:
    """The ``screened`` defence: one more call asks whether the judged text addresses its
    evaluator; when it does (probability of "Yes" at least
    :data:`~judgeopt.judge._defences.SCREEN_THRESHOLD`) the rating is not taken (``score``
    ``None``, ``flagged_score``, a ``parse_error`` saying why). The probability is kept as
    ``screen`` (``None``: the answer was unreadable, and the rating is taken)."""
    outputs = lm(messages=messages, **kwargs)
    text, logprobs = output_text(outputs[0] if outputs else "")
    p_yes = screen_probability(text, logprobs)
    values = dict(pred.items())
    values["screen"] = p_yes
    if p_yes is not None and p_yes >= SCREEN_THRESHOLD:
        values.update(
            score=None,
            flagged_score=pred.get("score"),
            parse_error=(
                f"{REFUSED} 'screened': the screen found the judged text addressing its "
                f"evaluator (P(yes) = {p_yes:.2f})"
            ),
        )
    return dspy.Prediction(**values)
