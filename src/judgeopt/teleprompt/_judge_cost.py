"""What a compiled judge costs per item it judges, measured on the compile's own calls.

A judge's cost per item has two parts. How many calls it makes follows from its strategies:
every member of an ensemble is called (``samples`` answers each: 5 for ``sc5``), a
``screened`` defence adds its screen call, and an artifact written for each item (metrics
questions, a self-written reference) adds one call per item; artifacts written once per
judge (criteria, AutoCoT steps) cost nothing more per item. What one call costs (wall
seconds, prompt and completion tokens) is measured: the search judged every member on the
search items, and each strategy's evaluation summary holds the calls it made, their tokens
and its wall time, so a call's mean is read there. The seconds are wall time at the
compile's concurrency (several calls in flight on the embedded model), the time a user waits
per item when judging as the compile did; a call answered from the response cache counts
nothing, so a strategy whose every answer came from the cache (for example judged already by
an earlier compile) has no measured time and the judge's seconds are then unknown
(``None``).

The compile records the cost of the baseline, the chosen judge and the ensemble in its
``selection`` record (``cost_per_item``), and the CLI prints it beside the gain: a judge that
calls six prompts per item and gains as much as one that calls one is the worse buy.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._summary import StrategySummary

__all__ = ["GENERATED_PER_ITEM", "JudgeCost", "calls_per_item", "judge_cost", "cost_record"]

#: Artifacts the judge's LM writes for every item (one call each per judged item).
GENERATED_PER_ITEM = ("metrics_questions", "self_reference")


@dataclass(frozen=True)
class JudgeCost:
    """A judge's cost per judged item.

    Attributes:
        calls: LM calls per item (artifacts written per item and screen calls included).
        prompt_tokens: Prompt tokens per item (``None``: no call of a member was measured).
        completion_tokens: Completion tokens per item (``None`` likewise).
        seconds: Wall seconds per item at the compile's concurrency (``None`` likewise).
        members: Prompts the judge combines (1 for a single judge).
    """

    calls: float
    prompt_tokens: float | None
    completion_tokens: float | None
    seconds: float | None
    members: int = 1

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form (rounded)."""

        def r(x: float | None, digits: int) -> float | None:
            return None if x is None else round(x, digits)

        return {
            "calls": r(self.calls, 3),
            "prompt_tokens": r(self.prompt_tokens, 1),
            "completion_tokens": r(self.completion_tokens, 1),
            "seconds": r(self.seconds, 3),
            "members": self.members,
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> JudgeCost:
        """Read :meth:`to_dict` output."""
        return cls(
            float(raw["calls"]),
            raw.get("prompt_tokens"),
            raw.get("completion_tokens"),
            raw.get("seconds"),
            int(raw.get("members", 1)),
        )

    def phrase(self) -> str:
        """``"6 calls, about 3,900 prompt and 40 completion tokens, about 14.2 s"``."""
        calls = f"{self.calls:g} call{'' if self.calls == 1 else 's'}"
        parts = [calls]
        if self.prompt_tokens is not None and self.completion_tokens is not None:
            parts.append(
                f"about {self.prompt_tokens:,.0f} prompt and "
                f"{self.completion_tokens:,.0f} completion tokens"
            )
        parts.append("time not measured" if self.seconds is None else f"about {self.seconds:.1f} s")
        return ", ".join(parts)


def calls_per_item(judge: Any, graph: Any) -> int:
    """The calls one member judge makes per item: its answers (``samples``), one per
    artifact :data:`GENERATED_PER_ITEM` its strategy needs, one screen call when it screens.
    """
    decoding = getattr(judge, "decoding", None)
    calls = int(getattr(decoding, "samples", 1) or 1)
    strategy = getattr(judge, "strategy", None)
    if strategy is not None and graph is not None:
        calls += sum(
            1
            for req in graph.artifacts_for(strategy)
            if req.per_sample and req.name in GENERATED_PER_ITEM
        )
    if getattr(judge, "screens", False):
        calls += 1
    return calls


def _measured(
    strategy: Any, summaries: Iterable[tuple[Any, StrategySummary]]
) -> tuple[int, float, float, float] | None:
    """Calls, seconds, prompt and completion tokens the search spent judging ``strategy``
    (over every summary of it that made a call; ``summaries``: each with its strategy read
    through the judge's space); ``None`` when none did."""
    calls, seconds, prompt, completion = 0, 0.0, 0.0, 0.0
    for spaced, s in summaries:
        if spaced != strategy or s.count("calls") <= 0:
            continue
        calls += s.count("calls")
        seconds += float(s.evaluation.get("seconds") or 0.0)
        prompt += s.count("prompt_tokens")
        completion += s.count("completion_tokens")
    return None if calls == 0 else (calls, seconds, prompt, completion)


def judge_cost(
    base: Any,
    members: Sequence[Any],
    summaries: Sequence[StrategySummary | Mapping[str, Any]],
    *,
    graph: Any = None,
) -> JudgeCost:
    """The cost per item of a judge whose members have the strategies ``members`` (one for a
    single judge), each made from ``base`` (``base.with_strategy``), measured on the
    search's ``summaries``: :class:`StrategySummary` objects or their plain form (a line of
    a checkpoint's ``evaluations.jsonl``, an entry of an exported judge's
    ``search.evaluation_summaries``).

    ``graph``: the factor graph that says which artifacts a strategy needs
    (:func:`judgeopt.judge.hpss_graph` of the task when ``None``).

    Example::

        cost = judge_cost(JudgeProgram(task, "coherence"), [strategy], summaries)
        cost.calls, cost.seconds   # per judged item
    """
    read = [
        s if isinstance(s, StrategySummary) else StrategySummary.from_dict(s) for s in summaries
    ]
    if graph is None:
        from ..judge import hpss_graph  # lazy: judgeopt.judge loads DSPy

        graph = hpss_graph(base.task)
    calls = 0.0
    prompt: float | None = 0.0
    completion: float | None = 0.0
    seconds: float | None = 0.0

    # Through the judge's space, as the compile matches its summaries (a checkpoint written
    # before a factor existed holds strategies without it).
    spaced = [(base.with_strategy(s.strategy).strategy, s) for s in read]
    for strategy in members:
        judge = base.with_strategy(strategy)
        n = calls_per_item(judge, graph)
        calls += n
        got = _measured(judge.strategy, spaced)
        if got is None:
            prompt = completion = seconds = None
            continue
        made, secs, p, c = got
        if seconds is not None and prompt is not None and completion is not None:
            seconds += n * secs / made
            prompt += n * p / made
            completion += n * c / made
    return JudgeCost(calls, prompt, completion, seconds, len(members))


def cost_record(
    base: Any,
    summaries: Sequence[StrategySummary | Mapping[str, Any]],
    *,
    baseline: Any,
    chosen: Any,
    ensemble: Sequence[Any] | None = None,
    graph: Any = None,
) -> dict[str, Any]:
    """``{"baseline", "chosen", "ensemble"}``: each judge's :meth:`JudgeCost.to_dict`
    (``ensemble`` ``None`` when there is none): the selection record's ``cost_per_item``.
    ``graph``: as :func:`judge_cost`'s."""
    if graph is None:
        from ..judge import hpss_graph  # lazy: judgeopt.judge loads DSPy

        graph = hpss_graph(base.task)

    def one(members: Sequence[Any]) -> dict[str, Any]:
        return judge_cost(base, members, summaries, graph=graph).to_dict()

    return {
        "baseline": one([baseline]),
        "chosen": one([chosen]),
        "ensemble": None if not ensemble else one(list(ensemble)),
    }
