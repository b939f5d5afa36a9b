"""The judge's DSPy adapter and its one-call helpers: render the prompt, call, parse.

:class:`JudgeAdapter` renders a judge's HPSS prompt for its strategy and reads the rating
(or pairwise verdict) from the answer; :func:`predict_with` makes one call through it and
turns an empty output into a recorded parse failure; :func:`close_score` restores the
``]]`` that a judge stopped at its rating leaves out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import dspy

from judgeopt.scoring import parse_preference, parse_rating

from .._errors import JudgeoptError
from ._artifacts import Artifacts
from ._decoding import output_text
from ._render import render_messages
from ._task import JudgeTask

__all__ = [
    "ARTIFACTS_KEY",
    "SCORE_STOP",
    "AdaptedJudge",
    "JudgeAdapter",
    "NoLMError",
    "answers",
    "choose_lm",
    "close_score",
    "empty_output",
    "predict_with",
]


class AdaptedJudge(Protocol):
    """What :class:`JudgeAdapter` reads of its judge (:class:`~judgeopt.judge.JudgeProgram`)."""

    task: JudgeTask
    aspect: str

    @property
    def strategy(self) -> Mapping[str, Any]: ...  # noqa: D102

    @property
    def stops_at_score(self) -> bool: ...  # noqa: D102

    @property
    def writes_explanation(self) -> bool: ...  # noqa: D102

    @property
    def rating_bounds(self) -> tuple[int, int]: ...  # noqa: D102


ARTIFACTS_KEY = "__judge_artifacts__"

#: Where a judge that rates first stops when it is only scored (``explain=False``): the end
#: of its ``[[rating]]`` (or pairwise ``[[A]]``). The LM stops before it (OpenAI semantics);
#: :func:`close_score` puts it back.
SCORE_STOP = "]]"


def close_score(text: str) -> str:
    """``text`` with its last ``[[`` closed by :data:`SCORE_STOP` when the stop cut it off.

    A judge scored without its explanation asks the LM to stop at ``]]``, which the LM leaves
    out of its answer: ``"Rating: [[4"`` becomes ``"Rating: [[4]]"`` again, the answer the
    judge would have begun with. Text whose last ``[[`` is already closed (or that has none)
    is returned unchanged.
    """
    opened = text.rfind("[[")
    if opened < 0 or text.rfind(SCORE_STOP) > opened:
        return text
    return text + SCORE_STOP


class NoLMError(JudgeoptError, RuntimeError):
    """No language model is configured for a judge."""


def predict_with(
    adapter: Any,
    lm: dspy.BaseLM,
    lm_kwargs: dict[str, Any],
    signature: Any,
    inputs: dict[str, Any],
    **extra: Any,
) -> dspy.Prediction:
    """One judge call through ``adapter``, as a ``dspy.Prediction``.

    An empty output (DSPy's ``AdapterParseError``) becomes a recorded parse failure, never an
    exception. ``extra`` fields are added to the prediction.
    """
    try:
        values = adapter(lm, lm_kwargs, signature, [], inputs)
    except dspy.utils.exceptions.AdapterParseError as e:  # empty output
        values = [empty_output(str(e.lm_response or ""))]
    v = values[0]
    return dspy.Prediction(
        score=v["score"],
        rationale=v.get("rationale"),
        raw=v.get("raw"),
        parse_error=v.get("parse_error"),
        parse_method=v.get("parse_method"),
        **extra,
    )


def empty_output(raw: str) -> dict[str, Any]:
    """The parsed fields of an answer with nothing in it: no score, a recorded failure."""
    return {
        "score": None,
        "rationale": None,
        "raw": raw,
        "parse_error": "empty output",
        "parse_method": None,
    }


def answers(
    adapter: JudgeAdapter,
    lm: dspy.BaseLM,
    lm_kwargs: dict[str, Any],
    signature: Any,
    inputs: dict[str, Any],
) -> list[tuple[str, Any]]:
    """``(text, logprobs)`` of each choice of one LM call on the adapter's messages.

    The decodings other than greedy need the raw answers (and their logprobs), so they call
    the LM on the adapter's messages themselves; DSPy's callbacks and history still see the
    call (``lm(...)``, not ``lm.forward``).
    """
    messages = adapter.format(signature, [], inputs)
    outputs = lm(messages=messages, **lm_kwargs)
    return [output_text(o) for o in outputs] or [("", None)]


def choose_lm(lm: dspy.BaseLM | None, own: dspy.BaseLM | None, program: str) -> dspy.BaseLM:
    """``lm``, else the program's own LM, else DSPy's configured one.

    Raises:
        NoLMError: When none is set (the message says how to set one).
    """
    chosen = lm or own or dspy.settings.lm
    if chosen is None:
        raise NoLMError(
            f"No language model: pass lm= to {program}, or configure one the DSPy way, "
            "e.g. dspy.configure(lm=judgeopt.make_lm('local'))."
        )
    return chosen


class JudgeAdapter(dspy.Adapter):
    """Formats a judge's rendered HPSS prompt and parses its verdict.

    ``format`` ignores DSPy's generic field formatting: it renders the task's template for
    the program's strategy (Tables 11-18 of the HPSS paper) from the input fields and the
    prepared artifacts. ``parse`` reads the rating (pointwise: the last ``[[n]]``, then the
    documented fallbacks of ``docs/parsing.md``) or the verdict (pairwise: ``[[A]]``,
    ``[[B]]`` or ``[[C]]`` for a tie); an unparseable output gives ``score=None`` and a
    ``parse_error``, never an exception.

    Args:
        program: The judge whose task, aspect and strategy are used.
    """

    def __init__(self, program: AdaptedJudge) -> None:
        super().__init__()
        self.program = program

    def format(
        self, signature: Any, demos: list[dict[str, Any]], inputs: dict[str, Any]
    ) -> list[dict[str, Any]]:
        p = self.program
        artifacts: Artifacts = inputs.get(ARTIFACTS_KEY) or Artifacts()
        fields = {n: inputs[n] for n in p.task.input_names if n in inputs}
        return render_messages(p.task, p.aspect, p.strategy, fields, **artifacts.render_kwargs())

    def parse(self, signature: Any, completion: str) -> dict[str, Any]:
        p = self.program
        if p.stops_at_score:
            completion = close_score(completion)
        rationale = completion.strip() if p.writes_explanation else None
        score: Any
        if p.task.mode == "pairwise":
            pref = parse_preference(completion)
            score, error, method = pref.choice, pref.error, pref.method
        else:
            r = parse_rating(completion, scale=p.rating_bounds[1], rating_min=p.rating_bounds[0])
            score, error, method = r.score, r.error, r.method
        return dict(
            score=score, rationale=rationale, raw=completion, parse_error=error, parse_method=method
        )
