"""A compile's cost plan: what its search and its choice will cost, before the first judge
call (:class:`judgeopt.evaluate.CostPlan`).

The search's strategies are not known before it runs; their cost is the mean of
:data:`PLAN_STRATEGIES` strategies drawn from the search space with a generator of the plan's
own (the search's sequence is untouched), each rendered on the first :data:`PLAN_ITEMS`
search items. The search judges at most ``budget`` strategies on every search item (racing
drops some early); the choice after it judges about two judges on the confirmation items.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..evaluate import CostPlan, call_cost, mean_cost, plan_cost, time_judgement
from ..search import FactorGraph, Strategy, sample_valid

__all__ = ["PLAN_ITEMS", "PLAN_STRATEGIES", "compile_plan"]

#: Strategies drawn from the space to estimate what one costs.
PLAN_STRATEGIES = 24
#: Search items each drawn strategy's prompts are counted on.
PLAN_ITEMS = 8


def compile_plan(
    graph: FactorGraph,
    base: Any,
    baseline: Strategy,
    search_items: Sequence[Any],
    confirm_items: Sequence[Any] | None,
    *,
    strategies_left: int,
    lm: Any,
) -> CostPlan:
    """The plan of a compile that has ``strategies_left`` strategies to judge.

    One baseline judgement is made and timed first (:func:`judgeopt.evaluate.time_judgement`;
    the search reads it from the response cache).
    """
    items = list(search_items[:PLAN_ITEMS])
    timing = time_judgement(base.with_strategy(baseline), search_items, lm)
    drawn = sample_valid(graph, PLAN_STRATEGIES, np.random.default_rng(0))
    costs = [call_cost(base.with_strategy(s), items, lm, timing=timing) for s in drawn]
    per_item = mean_cost(costs)
    parts = [(per_item, strategies_left * len(search_items))]
    if confirm_items:
        parts.append((per_item, 2 * len(confirm_items)))
    what = f"{strategies_left} strategies on {len(search_items)} search items"
    if confirm_items:
        what += f", the choice on {len(confirm_items)} more"
    return plan_cost(parts, lm, timing=timing, what=what)
