"""The judge's DSPy predictor: what DSPy optimizers and ``set_lm`` see of a judge.

DSPy finds the parts of a program that hold an LM through ``named_predictors()`` (instances
of ``dspy.Predict`` among its attributes): ``program.set_lm(lm)`` assigns ``lm`` to each of
them, ``get_lm()`` reads them, ``reset_copy()`` resets them. A :class:`JudgeProgram` renders
its own prompt and parses its own verdict, so it needs no generic predictor; it holds one
:class:`JudgePredict` anyway, as the one place where its LM lives. ``judge.lm`` reads and
writes ``judge.predictor.lm``, so an outer ``set_lm`` reaches the judge.
"""

from __future__ import annotations

from typing import Any

import dspy

__all__ = ["JudgePredict"]


class JudgePredict(dspy.Predict):  # type: ignore[misc]  # dspy ships no type information
    """The predictor a :class:`~judgeopt.judge.JudgeProgram` exposes to DSPy.

    It carries the judge's signature (its input fields, ``score``, ``rationale``, ...) and
    its LM. Demonstrations that a DSPy optimizer sets on it (``demos``) are ignored: a judge's
    in-context examples are a factor of its strategy (``examples``), chosen by the search.

    Args:
        signature: The judge's DSPy signature.
        lm: The judge's LM, or ``None`` for DSPy's configured one.
    """

    def __init__(self, signature: Any, lm: dspy.BaseLM | None = None) -> None:
        super().__init__(signature)
        self.lm = lm

    def forward(self, **kwargs: Any) -> dspy.Prediction:
        """Refused: the judge renders its own prompt, so call the :class:`JudgeProgram`."""
        raise TypeError(
            "JudgePredict only holds a judge's LM and signature for DSPy (named_predictors, "
            "set_lm); call the JudgeProgram itself, e.g. judge(**fields)."
        )
