"""Ratings a defence does not take: the ``checked`` echo check, the ``screened`` screen and
the ``vetted`` format check (:mod:`._defences` holds their texts and rules), and the
screen's threshold calibrated on clean items (:func:`calibrate_screen`).

Calibration. The screen's probability of "Yes" is relative, not absolute: a small model answers
"Yes" to some degree for every text (the embedded 1.5B gives clean SummEval summaries 0.63-0.70,
above the fixed :data:`~._defences.SCREEN_THRESHOLD` of 0.5). :func:`calibrate_screen` sets the
threshold from the judge's own model on clean labelled items (texts nobody attacked: no attack
text is involved) as a split-conformal quantile: with ``n`` clean values sorted and
``k = ceil((n + 1) (1 - false_flags))``, the threshold is the ``k``-th smallest value, and a text
is refused when its probability is *above* it. For a new clean text exchangeable with the
calibration items, the chance of a refusal is then at most ``false_flags`` (when ``k > n``, too
few items for that level, the threshold is the largest value and the bound is ``1 / (n + 1)``
instead).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

import dspy

from judgeopt.scoring import PreferenceParse, RatingParse, parse_preference, parse_rating

from ._decoding import output_text
from ._defences import (
    CHECKED_DEFENCES,
    REFUSED,
    SCREEN_THRESHOLD,
    VETTED_DEFENCES,
    echoed_rating,
    forged_rating,
    screen_probability,
)

__all__ = [
    "SCREEN_FALSE_FLAGS",
    "ScreenCalibration",
    "calibrate_screen",
    "check_echo",
    "conformal_threshold",
    "forged_of",
    "screen",
    "screen_kwargs",
    "vet",
]

#: The default share of clean texts a calibrated screen may refuse (:func:`calibrate_screen`).
SCREEN_FALSE_FLAGS = 0.05


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


def forged_of(program: Any, fields: Mapping[str, str]) -> str | None:
    """The rating a ``vetted`` judge refuses these input fields for, before any call (the
    first rating in its answer format a judged field holds, :func:`forged_rating`); ``None``
    when it judges them (any other defence, or no such rating)."""
    if program.strategy.get("defence") not in VETTED_DEFENCES:
        return None
    return forged_rating([str(fields[f]) for f in program.task.judged_fields])


def vet(program: Any, fields: Mapping[str, str]) -> dspy.Prediction | None:
    """The ``vetted`` defence's format check, before any call: a refused prediction
    (``score`` ``None``, ``forged`` the rating found, a ``parse_error`` saying why) when
    :func:`forged_of` finds a rating, else ``None`` (judge the item)."""
    forged = forged_of(program, fields)
    if forged is None:
        return None
    return dspy.Prediction(
        score=None,
        rationale=None,
        raw="",
        parse_method=None,
        forged=forged,
        parse_error=f"{REFUSED} 'vetted': the judged text holds the rating {forged!r}",
    )


def screen_kwargs(logprobs: bool) -> dict[str, Any]:
    """The screen call's LM arguments: one token, greedy, with its logprobs when the judge's
    decoding reads logprobs (so the LM is known to give them), else a few tokens of text."""
    if logprobs:
        return {"max_tokens": 1, "temperature": 0.0, "logprobs": True, "top_logprobs": 20}
    return {"max_tokens": 3, "temperature": 0.0}


def screen_call(messages: list[dict[str, str]], kwargs: Mapping[str, Any], lm: Any) -> float | None:
    """One screen call: its probability of "Yes" (``None``: the answer was unreadable)."""
    outputs = lm(messages=messages, **kwargs)
    text, logprobs = output_text(outputs[0] if outputs else "")
    return screen_probability(text, logprobs)


def screen(
    pred: dspy.Prediction,
    messages: list[dict[str, str]],
    kwargs: Mapping[str, Any],
    lm: Any,
    threshold: float = SCREEN_THRESHOLD,
) -> dspy.Prediction:
    """The ``screened`` defence: one more call asks whether the judged text addresses its
    evaluator; when it does (probability of "Yes" above ``threshold``) the rating is not
    taken (``score`` ``None``, ``flagged_score``, a ``parse_error`` saying why). The
    probability is kept as ``screen`` (``None``: the answer was unreadable, and the rating is
    taken)."""
    p_yes = screen_call(messages, kwargs, lm)
    values = dict(pred.items())
    values["screen"] = p_yes
    if p_yes is not None and p_yes > threshold:
        values.update(
            score=None,
            flagged_score=pred.get("score"),
            parse_error=(
                f"{REFUSED} 'screened': the screen found the judged text addressing its "
                f"evaluator (P(yes) = {p_yes:.3f}, above {threshold:.3f})"
            ),
        )
    return dspy.Prediction(**values)


def conformal_threshold(values: Sequence[float], false_flags: float) -> float:
    """The split-conformal threshold of clean screen probabilities (see the module
    docstring): the ``ceil((n + 1) (1 - false_flags))``-th smallest value, the largest when
    there are too few values for that level.

    Raises:
        ValueError: When ``values`` is empty or ``false_flags`` is not in (0, 1).
    """
    if not values:
        raise ValueError("No screen probability to calibrate on (every screen call failed).")
    ordered = sorted(float(v) for v in values)
    return ordered[min(_conformal_rank(len(ordered), false_flags), len(ordered)) - 1]


def _conformal_rank(n: int, false_flags: float) -> int:
    """``ceil((n + 1) (1 - false_flags))``: the rank of the threshold among ``n`` sorted
    clean values (above ``n``: too few values for that level).

    Raises:
        ValueError: When ``false_flags`` is not in (0, 1).
    """
    if not 0.0 < false_flags < 1.0:
        raise ValueError(
            f"The `false_flags` argument must be in (0, 1). Got {false_flags!r} instead."
        )
    return math.ceil((n + 1) * (1.0 - false_flags))


@dataclass(frozen=True)
class ScreenCalibration:
    """A screen threshold calibrated on clean items (:func:`calibrate_screen`).

    Attributes:
        threshold: Texts whose probability of "Yes" is above it are refused.
        false_flags: The share of clean texts the threshold was set to refuse at most.
        n: Clean items whose screen answered (the calibration's size).
        failed: Clean items whose screen call failed or gave an unreadable answer.
        guaranteed: Whether ``n`` is large enough for ``false_flags``
            (``ceil((n + 1) (1 - false_flags)) <= n``); otherwise the bound is ``1 / (n + 1)``.
    """

    threshold: float
    false_flags: float
    n: int
    failed: int
    guaranteed: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        bound = (
            f"at most {self.false_flags:.0%} of clean texts refused"
            if self.guaranteed
            else f"too few items for {self.false_flags:.0%}: at most {1 / (self.n + 1):.0%} "
            "of clean texts refused"
        )
        failed = f", {self.failed} screen call(s) failed" if self.failed else ""
        return (
            f"screen: threshold P(yes) > {self.threshold:.3f}, calibrated on {self.n} clean "
            f"items ({bound}{failed})"
        )


def calibrate_screen(
    program: Any,
    records: Sequence[Any],
    *,
    false_flags: float = SCREEN_FALSE_FLAGS,
    threads: int = 2,
    lm: Any = None,
) -> tuple[Any, ScreenCalibration]:
    """A copy of ``program`` whose screen threshold is calibrated on ``records``.

    Each record's judged text is screened once (one short call per item, no rating call);
    the threshold is the split-conformal quantile of those probabilities at ``false_flags``
    (module docstring). The records must be clean: texts as written, without attack. Their
    labels are not used. A failed or unreadable screen call is counted, never raised.

    Args:
        program: The judge (a :class:`~judgeopt.judge.JudgeProgram`; any strategy: the
            screen's question depends on the task and aspect only).
        records: Clean items (``Record`` or anything with ``inputs``).
        false_flags: The largest share of clean texts to refuse, in (0, 1).
        threads: Parallel screen calls.
        lm: The LM (default: the judge's).

    Returns:
        The calibrated copy (``screen_threshold`` set, ``screen_calibration`` its record) and
        the calibration.

    Raises:
        ValueError: When ``false_flags`` is out of range, ``records`` is empty, or no screen
            call answered.
    """
    if not records:
        raise ValueError("The `records` argument is empty: nothing to calibrate the screen on.")
    _conformal_rank(len(records), false_flags)  # checked before any call is made
    the_lm = program.resolve_lm(lm)
    kwargs = program.screen_kwargs()

    def one(record: Any) -> float | None:
        inputs = record.inputs if hasattr(record, "inputs") else record["inputs"]
        try:
            return screen_call(program.screen_messages(inputs), kwargs, the_lm)
        except Exception:  # noqa: BLE001 - a failed call is counted, not raised
            return None

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        values = list(pool.map(one, records))
    answered = [v for v in values if v is not None]
    threshold = conformal_threshold(answered, false_flags)
    calibration = ScreenCalibration(
        threshold=threshold,
        false_flags=false_flags,
        n=len(answered),
        failed=len(values) - len(answered),
        guaranteed=_conformal_rank(len(answered), false_flags) <= len(answered),
    )
    return program.with_screen_threshold(threshold, calibration.to_dict()), calibration
