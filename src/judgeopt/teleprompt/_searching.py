"""Setting up a compile's search: its data, its space, and the search itself.

The space is the student's (:meth:`JudgeStudent.search_graph`) restricted by the preset's
``space`` and ``forbid`` and by the decodings the LM can serve; the search starts from the
student's strategy when it takes a baseline.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from ..data import Record
from ..evaluate import check_records
from ..judge import EXPLAINS_FIRST, JudgeStudent, check_decodings, to_records
from ..search import SEARCHES, FactorGraph, Search, Strategy
from ._config import OptimizerConfig

__all__ = [
    "build_graph",
    "compile_metric",
    "make_search",
    "student_records",
    "with_optional_factors",
]

#: Factors a student's space holds only when asked for (:func:`judgeopt.judge.hpss_space`),
#: with the value that leaves the prompt as it was.
OPTIONAL_FACTORS = {"defence": "none"}


def compile_metric(config: OptimizerConfig, mode: str) -> str:
    """What the search maximises for a task of ``mode`` (``pointwise`` / ``pairwise``).

    Raises:
        ValueError: When the preset's metric does not fit the task.
    """
    metric = config.metric or ("accuracy" if mode == "pairwise" else "spearman")
    if (metric == "accuracy") != (mode == "pairwise"):
        raise ValueError(f"metric {metric!r} does not fit a {mode} task.")
    return metric


#: What a teleprompter reads and calls on its student (:class:`~judgeopt.judge.JudgeStudent`).
STUDENT_PROTOCOL = (
    "task",
    "aspect",
    "strategy",
    "max_tokens",
    "report_",
    "resolve_lm",
    "search_graph",
    "fresh_copy",
    "with_strategy",
    "with_report",
)


def check_student(student: object) -> None:
    """Refuse, before anything is read or called, a student that is not a judge program.

    Raises:
        TypeError: Naming the student's type and what of the copy protocol it lacks.
    """
    if isinstance(student, JudgeStudent):
        return
    missing = [name for name in STUDENT_PROTOCOL if not hasattr(student, name)]
    raise TypeError(
        f"compile(student=...): a {type(student).__name__} is not a judge program; it lacks "
        f"{', '.join(missing)} of the copy protocol (judgeopt.judge.JudgeStudent). Compile a "
        "judgeopt.JudgeProgram (or a PrExMeProgram), e.g. JudgeProgram('summeval', "
        "aspect='coherence')."
    )


def student_records(data: Sequence[Any], student: JudgeStudent, name: str) -> list[Record]:
    """``data`` (records, dicts or ``dspy.Example``) as records the student can be scored on.

    Raises:
        ValueError: When ``data`` is empty or does not fit the student's task (naming
            ``name``).
    """
    records = to_records(data, student.task, student.aspect)
    if not records:
        raise ValueError(f"`{name}` is empty.")
    try:
        check_records(student, records)
    except ValueError as e:
        raise ValueError(f"`{name}`: {e}") from None
    return records


def with_optional_factors(config: OptimizerConfig, student: JudgeStudent) -> JudgeStudent:
    """The student, with the optional factors the preset's ``space`` names added to its
    strategy at their neutral value (``defence``: ``none``), so that its search graph holds
    them; the student itself when the preset names none.

    Raises:
        ValueError: When the student's program has no such factor (a PrExMe program).
    """
    wanted = {
        name: value
        for name, value in OPTIONAL_FACTORS.items()
        if name in config.space and name not in student.strategy
    }
    if not wanted:
        return student
    try:
        widened: JudgeStudent = student.with_strategy({**student.strategy.as_dict(), **wanted})
    except (KeyError, ValueError) as e:
        raise ValueError(
            f"The optimizer's `space` names {sorted(wanted)!r}, which a "
            f"{type(student).__name__} cannot search: {e}"
        ) from None
    return widened


def build_graph(config: OptimizerConfig, student: JudgeStudent, lm: Any) -> FactorGraph:
    """The student's factor graph restricted to the preset's ``space`` and ``forbid``, and
    to the decodings ``lm`` serves.

    Raises:
        ValueError: On an unknown factor or value, or a forbidden combination that names
            none of the space's values.
        LogprobsUnavailableError: When the preset's ``space`` or the student's strategy asks
            for a decoding that needs logprobs and the LM gives none.
    """
    graph: FactorGraph = student.search_graph()
    space = graph.space
    for name, allowed in config.space.items():
        if name not in space:
            raise ValueError(
                f"The optimizer's `space` names unknown factor `{name}`. "
                f"Factors of task `{student.task.name}`: {list(space.names)!r}."
            )
        factor = space[name]
        for v in allowed:
            factor.index(v)
        for v in factor.values:
            if not any(type(v) is type(a) and v == a for a in allowed):
                graph.forbid({name: v}, reason="outside the optimizer's space")
    for i, assignment in enumerate(config.forbid):
        try:
            graph.forbid(assignment, reason="the optimizer's `forbid`")
        except ValueError as e:
            raise ValueError(
                f"The optimizer's `forbid` entry {i + 1} ({assignment!r}): {e}"
            ) from None
    if config.candidates == "rate_first":
        _forbid_explaining_first(graph, student.strategy)
    _forbid_missing_decodings(config, student, graph, lm)
    return graph


def _forbid_explaining_first(graph: FactorGraph, baseline: Strategy) -> None:
    """Forbid every strategy that writes before its rating (:data:`judgeopt.judge.
    EXPLAINS_FIRST`) except ``baseline`` itself: an explaining-first value the baseline does
    not hold is forbidden alone, the baseline's own with each value it does not hold."""
    space = graph.space
    reason = "candidates = 'rate_first'"
    for name, values in EXPLAINS_FIRST.items():
        if name not in space:
            continue
        for v in (v for v in space[name].values if v in values):
            if baseline.get(name) != v:
                graph.forbid({name: v}, reason=reason)
                continue
            for other in space.names:
                if other == name:
                    continue
                for w in space[other].values:
                    if not (type(w) is type(baseline.get(other)) and w == baseline.get(other)):
                        graph.forbid({name: v, other: w}, reason=reason)


def _forbid_missing_decodings(
    config: OptimizerConfig, student: JudgeStudent, graph: FactorGraph, lm: Any
) -> None:
    """Forbid the decodings the LM cannot serve; raise if the user asked for one.

    A decoding is asked for explicitly when the optimizer's ``space`` lists it or the
    student's strategy uses it.
    """
    if "decoding" not in graph.space:
        return
    explicit = [str(v) for v in config.space.get("decoding", [])]
    explicit.append(str(student.strategy["decoding"]))
    values = (
        explicit if "decoding" in config.space else [str(v) for v in graph.space["decoding"].values]
    )
    for v in check_decodings(lm, values, explicit=explicit):
        graph.forbid({"decoding": v}, reason="the LM gives no logprobs")


def make_search(config: OptimizerConfig, student: JudgeStudent, graph: FactorGraph) -> Search:
    """The preset's search over ``graph``, starting from the student's strategy.

    Raises:
        ValueError: When the student's strategy (the search's baseline) is outside the
            preset's space or forbidden.
    """
    cls = SEARCHES[config.search]
    kwargs: dict[str, Any] = dict(config.params)
    if "baseline" in inspect.signature(cls).parameters:
        # The search starts from the student's strategy: the MT-Bench baseline unless the
        # student was built with another one.
        base = student.strategy
        if not graph.is_valid(base):
            outside = [
                f"{name}={base[name]!r} (the space allows {list(config.space[name])!r})"
                for name in config.space
                if name in base
                and not any(
                    type(base[name]) is type(a) and base[name] == a for a in config.space[name]
                )
            ]
            what = "; ".join(outside) if outside else "a forbidden combination"
            raise ValueError(
                f"The student's strategy {base} (the search's baseline) is outside the "
                f"optimizer's `space`: {what}. The {config.search} search starts "
                "from it, so add its values to the preset's [space] (e.g. the task's "
                "baseline_scale to `scale`), or build the student with a strategy inside "
                "the space."
            )
        kwargs.update(baseline=base)
    return cls(graph.space, budget=config.budget, seed=config.seed, graph=graph, **kwargs)
