"""A compile's cost plan: what its search and its choice will cost, before the first judge
call (:class:`judgeopt.evaluate.CostPlan`).

The search's strategies are not known before it runs. Every search starts from the baseline
and moves a factor or two at a time, so a strategy's cost is estimated as the mean over up to
:data:`PLAN_STRATEGIES` of the baseline's valid one-factor neighbours (drawn with a generator
of the plan's own; the search's sequence is untouched; a space without such neighbours falls
back to draws from the allowed values), each rendered on :data:`PLAN_ITEMS` search items
spread over them (:func:`judgeopt.evaluate.plan_sample`). The search judges at most
``budget`` strategies on every search item (racing drops some early); the choice after it
judges about two judges on the confirmation items. The
artifacts those strategies generate with the LM (criteria, AutoCoT steps, metrics questions,
references; in-context examples are chosen from the data, not generated) add one call per
artifact not stored yet, in the share of the drawn strategies the search has budget for,
each writing about as much as the text that stands in for the artifact when prompts are
counted (the LM's output limit, 1024 tokens, would overstate such a call many times over).
The time is one baseline judgement per call in flight, judged together as the search does
(on the embedded model, each call timed on the prompt tokens its prefix cache leaves to
compute, counted on the first :data:`judgeopt.evaluate.PLAN_WINDOW` search items in the
order the search judges them);
a resumed compile whose baseline answers are all in the response cache times its calls on
the judgements it has already made instead (:func:`judgeopt.evaluate.recorded_timing`).

The search's next strategy is known before it is judged (``Search.ask`` returns the pending
strategy until it is told): a resumed compile plans that one as itself, its prompts and the
artifacts it still needs, and only the strategies after it as drawn ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..evaluate import (
    PLAN_WINDOW,
    CallCost,
    CostPlan,
    artifact_tokens,
    call_cost,
    default_threads,
    mean_cost,
    plan_cost,
    plan_sample,
    recorded_timing,
    screen_cost,
    time_judgement,
)
from ..judge import artifact_key
from ..search import FactorGraph, Strategy, sample_valid

__all__ = ["GENERATED", "PLAN_ITEMS", "PLAN_STRATEGIES", "compile_plan", "plan_strategies"]

#: Strategies drawn to estimate what one costs.
PLAN_STRATEGIES = 24
#: Search items each drawn strategy's prompts are counted on (spread over the search items).
PLAN_ITEMS = 8
#: The artifacts a judge's LM writes (the others are chosen from the data).
GENERATED = ("self_criteria", "autocot_steps", "metrics_questions", "self_reference")


def plan_strategies(
    graph: FactorGraph, baseline: Strategy, n: int, rng: np.random.Generator
) -> list[Strategy]:
    """Up to ``n`` of the baseline's valid one-factor neighbours, drawn with ``rng`` (each
    the baseline with one factor's value changed); a space without any falls back to
    :func:`judgeopt.search.sample_valid`."""
    space = graph.space
    base = baseline.as_dict()
    neighbours = []
    for name in space.names:
        for v in space[name].values:
            if type(v) is type(base.get(name)) and v == base.get(name):
                continue
            s = space.strategy({**base, name: v})
            if graph.is_valid(s):
                neighbours.append(s)
    if not neighbours:
        return sample_valid(graph, n, rng)
    if len(neighbours) <= n:
        return neighbours
    return [neighbours[int(i)] for i in sorted(rng.choice(len(neighbours), n, replace=False))]


def _generation_cost(
    graph: FactorGraph,
    base: Any,
    drawn: Sequence[Strategy],
    items: Sequence[Any],
    share: float,
    prompt_tokens: float,
    lm: Any,
) -> CallCost:
    """The artifact calls of ``share`` of the ``drawn`` strategies on ``items``: one per
    artifact the store does not hold yet (a per-item artifact once per item), each about as
    long a prompt as a judgement's, writing about as much as the text that stands in for the
    artifact when prompts are counted (:func:`judgeopt.evaluate.artifact_tokens`)."""
    store = getattr(getattr(base, "maker", None), "store", None)
    keys: dict[str, float] = {}
    written: dict[str, float] = {}
    for strategy in drawn:
        for req in graph.artifacts_for(strategy):
            if req.name not in GENERATED:
                continue
            if req.name not in written:
                judge = base.with_strategy(strategy)
                written[req.name] = artifact_tokens(
                    judge, req.name, plan_sample(items, PLAN_ITEMS), lm
                )
            ids = [r.id for r in items] if req.per_sample else [None]
            for sid in ids:
                key = artifact_key(base.task, base.aspect, req, sid)
                if store is None or key not in store:
                    keys[key] = written[req.name]
    calls = share * len(keys)
    completion = share * sum(keys.values())
    return CallCost(calls, calls * prompt_tokens, completion, explains=True)


def compile_plan(
    graph: FactorGraph,
    base: Any,
    baseline: Strategy,
    search_items: Sequence[Any],
    confirm_items: Sequence[Any] | None,
    *,
    strategies_left: int,
    lm: Any,
    threads: int | None = None,
    baseline_left: bool = False,
    judged: Sequence[Mapping[str, Any]] = (),
    judged_items: int = 0,
    next_strategy: Strategy | None = None,
    screen_calibration: bool = False,
) -> CostPlan:
    """The plan of a compile that has ``strategies_left`` strategies to judge on
    ``search_items`` (in the order the search judges them), ``threads`` calls in flight
    (``None``: what ``lm`` keeps busy); ``baseline_left``: the baseline is one of them (a
    compile that starts: every search judges it first), counted as itself (it may explain
    first while the others rate first) rather than as a drawn strategy.

    The baseline is judged and timed first on as many search items as calls in flight
    (:func:`judgeopt.evaluate.time_judgement`; the search reads them from the response
    cache). When every one of them is in the cache already (a resumed compile), the
    evaluation summaries of the strategies ``judged`` so far time the calls instead
    (:func:`judgeopt.evaluate.recorded_timing`). ``judged_items``: items of the next
    strategy judged before an interruption (kept in the checkpoint: not judged again).
    ``next_strategy``: the strategy the search judges next (``search.ask()``), planned as
    itself (ignored when ``baseline_left``: the baseline is judged first).
    ``screen_calibration``: the compile calibrates the ``screened`` defence's threshold
    first (one screen call per search and confirmation item, counted as such).
    """
    in_flight = threads or default_threads(lm)
    items = plan_sample(search_items, PLAN_ITEMS)
    judge = base.with_strategy(baseline)
    timing = time_judgement(judge, search_items, lm, threads=in_flight)
    if timing is None and judged:
        timing = recorded_timing(judge, judged, in_flight=in_flight)
    drawn = plan_strategies(graph, baseline, PLAN_STRATEGIES, np.random.default_rng(0))
    window = list(search_items[:PLAN_WINDOW])
    costs = [
        call_cost(base.with_strategy(s), items, lm, timing=timing, window=window) for s in drawn
    ]
    per_item = mean_cost(costs)
    prompt = per_item.prompt_tokens / max(per_item.calls, 1e-9)
    others = strategies_left - 1 if baseline_left else strategies_left
    kept = max(0, int(judged_items))
    known = None if baseline_left else next_strategy
    first = baseline if baseline_left else known
    parts: list[tuple[CallCost, int]] = []
    if first is not None:  # the strategy judged next, as itself
        own = call_cost(base.with_strategy(first), items, lm, timing=timing, window=window)
        parts.append((own, max(0, len(search_items) - kept)))
        if known is not None:
            others -= 1
            own_made = _generation_cost(graph, base, [known], search_items, 1.0, prompt, lm)
            if own_made.calls:
                parts.append((own_made, 1))
    kept_left = 0 if first is not None else kept
    parts.append((per_item, max(0, others * len(search_items) - kept_left)))
    share = min(1.0, others / max(1, len(drawn)))
    made = _generation_cost(graph, base, drawn, search_items, share, prompt, lm)
    if made.calls:
        parts.append((made, 1))
    if confirm_items:
        parts.append((per_item, 2 * len(confirm_items)))
    if screen_calibration:
        screened = base.with_strategy({**baseline.as_dict(), "defence": "screened"})
        parts.append(
            (screen_cost(screened, items, lm), len(search_items) + len(confirm_items or ()))
        )
    what = f"{strategies_left} strategies on {len(search_items)} search items"
    if confirm_items:
        what += f", the choice on {len(confirm_items)} more"
    return plan_cost(parts, lm, timing=timing, what=what)
