"""A judge as a DSPy metric: ratings mapped to [0, 1], pass/fail, unparsed answers.

DSPy calls a metric as ``metric(example, pred, trace=None)`` (``dspy.Evaluate``, the
optimizers' ``metric=``) and a reward function as ``reward_fn(args, pred)``
(``dspy.Refine``, ``dspy.BestOfN``). A judge's raw rating (1..N) makes ``Evaluate``'s
percentage meaningless and its ``None`` for an unparsed answer crashes the sum, so
:class:`JudgeMetric` maps the rating onto [0, 1] over the judge's own rating range and gives
unparsed answers a documented value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .._errors import JudgeoptError
from ._task import JudgeTask

__all__ = ["JudgeMetric", "MetricJudge", "UnparsedJudgement"]

_PAIRWISE_VALUE = {"win": 1.0, "tie": 0.5, "loss": 0.0}


class UnparsedJudgement(JudgeoptError, ValueError):
    """The judge's answer held no rating (``on_unparsed="raise"``).

    Attributes:
        prediction: The judge's prediction (``raw`` and ``parse_error`` say why).
    """

    def __init__(self, message: str, prediction: Any) -> None:
        super().__init__(message)
        self.prediction = prediction


def _get(obj: Any, name: str) -> Any:
    """``obj[name]`` or ``obj.name`` (dicts, ``dspy.Example``, ``dspy.Prediction``)."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    try:
        return obj[name]
    except (KeyError, TypeError, IndexError, AttributeError):
        return getattr(obj, name, None)


def _names(obj: Any) -> list[str]:
    if obj is None:
        return []
    if isinstance(obj, Mapping):
        return sorted(str(k) for k in obj)
    keys = getattr(obj, "keys", None)
    if callable(keys):
        try:
            return sorted(str(k) for k in keys())
        except TypeError:
            pass
    return sorted(k for k in vars(obj) if not k.startswith("_")) if hasattr(obj, "__dict__") else []


class MetricJudge(Protocol):
    """What :class:`JudgeMetric` needs of a judge (:class:`~judgeopt.judge.JudgeProgram` has
    it): its task, its rating range, and a call on the input fields returning a prediction
    with ``score``, ``raw`` and ``parse_error``."""

    @property
    def task(self) -> JudgeTask: ...
    @property
    def rating_bounds(self) -> tuple[int, int]: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...


class JudgeMetric:
    """A :class:`~judgeopt.judge.JudgeProgram` as a DSPy metric or reward function.

    Called as ``metric(example, pred, trace=None)`` or ``reward_fn(args, pred)``, it judges
    the judge's input fields taken from ``pred`` and ``example`` and returns:

    * pointwise: ``(rating - min) / (max - min)``, the rating mapped onto [0, 1] over the
      judge's rating range at its scale (a 4 on 1-5 gives 0.75); an expected (probability
      weighted) rating maps the same way;
    * pairwise: the verdict for the side named by ``prefer`` (the program's output, by
      default ``output_b``): 1.0 if it wins, 0.5 for a tie, 0.0 if it loses;
    * with ``threshold``: when DSPy passes a ``trace`` (optimizers bootstrapping
      demonstrations do), ``score >= threshold`` as a bool, DSPy's pass/fail convention;
      without a trace (``dspy.Evaluate``, reward functions) the float score.

    Where the fields come from: each judged field (``task.judged_fields``) is read from
    ``pred`` first, then ``example``; each context field from ``example`` first, then
    ``pred``. ``fields`` overrides that per judge field: ``"pred.answer"``,
    ``"example.question"`` (or a bare name, looked up as above), or a callable
    ``(example, pred) -> str``.

    Args:
        judge: The judge.
        threshold: Pass mark in [0, 1] for pass/fail under a trace (``None``: always a float).
        on_unparsed: The score of an answer the judge's parser could not read, a float in
            [0, 1] (default 0.0: an unreadable verdict never passes), or ``"raise"`` to raise
            :class:`UnparsedJudgement`. LM call errors are raised either way (``dspy.Evaluate``
            counts them as errors).
        fields: Judge input field -> where its text comes from (see above).
        prefer: Pairwise only: which judged side is the output being scored, ``"a"`` or
            ``"b"`` (default).

    Raises:
        ValueError: On a threshold or ``on_unparsed`` outside [0, 1], an unknown
            ``on_unparsed`` string, a ``fields`` key that is not an input field of the task,
            or a bad ``prefer`` (each naming the value and what is allowed).
    """

    def __init__(
        self,
        judge: MetricJudge,
        *,
        threshold: float | None = None,
        on_unparsed: float | str = 0.0,
        fields: Mapping[str, str | Callable[[Any, Any], Any]] | None = None,
        prefer: str = "b",
    ) -> None:
        if threshold is not None and (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not 0.0 <= float(threshold) <= 1.0
        ):
            raise ValueError(
                f"The `threshold` of a judge metric must be a number in [0, 1] "
                f"(scores are mapped onto [0, 1]). Got {threshold!r} instead."
            )
        if isinstance(on_unparsed, str):
            if on_unparsed != "raise":
                raise ValueError(
                    f"The `on_unparsed` of a judge metric must be a number in "
                    f"[0, 1] or 'raise'. Got {on_unparsed!r} instead."
                )
        elif (
            isinstance(on_unparsed, bool)
            or not isinstance(on_unparsed, int | float)
            or not 0.0 <= float(on_unparsed) <= 1.0
        ):
            raise ValueError(
                f"The `on_unparsed` of a judge metric must be a number in [0, 1] "
                f"or 'raise'. Got {on_unparsed!r} instead."
            )
        task = judge.task
        unknown = sorted(set(fields or {}) - set(task.input_names))
        if unknown:
            raise ValueError(
                f"The `fields` of a judge metric name {unknown!r}, which are not "
                f"input fields of task `{task.name}`; allowed: "
                f"{list(task.input_names)!r}."
            )
        if prefer not in ("a", "b"):
            raise ValueError(
                f"The `prefer` of a pairwise judge metric must be 'a' or 'b'. "
                f"Got {prefer!r} instead."
            )
        self.judge = judge
        self.threshold = None if threshold is None else float(threshold)
        self.on_unparsed = on_unparsed
        self.fields = dict(fields or {})
        self.prefer = prefer
        #: The last prediction of the judge, the last value returned and the number of
        #: calls (for inspection).
        self.last: Any = None
        self.last_value: float | bool | None = None
        self.calls = 0

    def __repr__(self) -> str:
        return (
            f"JudgeMetric({self.judge!r}, threshold={self.threshold}, "
            f"on_unparsed={self.on_unparsed!r})"
        )

    # ---------------------------------------------------------------------------------------
    def inputs(self, example: Any, pred: Any) -> dict[str, str]:
        """The judge's input fields for one (example, prediction) pair.

        Raises:
            ValueError: When a field is found in neither (naming it and what each has).
        """
        task = self.judge.task
        out: dict[str, str] = {}
        for name in task.input_names:
            source = self.fields.get(name)
            value: Any
            if callable(source):
                value = source(example, pred)
            elif isinstance(source, str):
                where, dot, key = source.partition(".")
                if dot and where in ("example", "pred"):
                    value = _get(example if where == "example" else pred, key)
                else:
                    value = self._lookup(source, name, example, pred)
            else:
                value = self._lookup(name, name, example, pred)
            if value is None:
                raise ValueError(
                    f"The judge metric of task `{task.name}` needs the input field {name!r}"
                    + (f" (from {source!r})" if isinstance(source, str) else "")
                    + f"; the example has {_names(example)!r} and the prediction has "
                    f"{_names(pred)!r}. Map it with as_metric(fields={{{name!r}: "
                    "'pred.<field>' or 'example.<field>'})."
                )
            out[name] = str(value)
        return out

    def _lookup(self, key: str, name: str, example: Any, pred: Any) -> Any:
        judged = name in self.judge.task.judged_fields
        first, second = (pred, example) if judged else (example, pred)
        value = _get(first, key)
        return _get(second, key) if value is None else value

    def score(self, example: Any, pred: Any) -> float:
        """The judge's verdict on one pair, mapped onto [0, 1] (``on_unparsed`` if none)."""
        prediction = self.judge(**self.inputs(example, pred))
        self.last = prediction
        raw = prediction.score
        if raw is None:
            if self.on_unparsed == "raise":
                raise UnparsedJudgement(
                    f"The judge's answer has no rating ({prediction.parse_error}): "
                    f"{str(prediction.raw)[:200]!r}",
                    prediction,
                )
            return float(self.on_unparsed)
        if self.judge.task.mode == "pairwise":
            verdict = str(raw)
            if verdict == "tie":
                return _PAIRWISE_VALUE["tie"]
            return _PAIRWISE_VALUE["win" if verdict == self.prefer else "loss"]
        lo, hi = self.judge.rating_bounds
        value = (float(raw) - lo) / (hi - lo)
        return min(1.0, max(0.0, value))

    def __call__(self, example: Any, pred: Any, trace: Any = None) -> float | bool:
        """Score one pair; pass/fail (bool) under a ``trace`` when a threshold is set."""
        value = self.score(example, pred)
        result: float | bool = value
        if self.threshold is not None and trace is not None:
            result = value >= self.threshold
        self.calls += 1
        self.last_value = result
        return result
