"""A compile's cost plan: what its search and its choice will cost, before the first judge
call (:class:`judgeopt.evaluate.CostPlan`).

The search's strategies are not known before it runs: they depend on the scores it will be
told. The plan runs the search itself, from where it stands, :data:`PLAN_PATHS` times
(fewer for a large budget: :data:`PLAN_VISITS`) on copies told made-up scores
(:func:`simulated_paths`: independent normal scores around the scores told so far, with the
spread of real compiles' strategies, :data:`PLAN_SCORE_SD`; a generator of the plan's own,
the search's own sequence untouched). The strategies those paths visit are the ones a
search of this budget in this space reaches: the one-factor neighbours of the baseline at a
small budget, farther ones (self-consistency two factors away, in-context examples,
artifacts) at a larger one. A strategy's cost is the mean over the paths' visits (a
strategy visited on several paths counted as often; a few hundred visits of some dozens of
strategies, every one priced: a sample of them would miss or overweight the rare costly
ones, self-consistency's five calls per item), each rendered on :data:`PLAN_ITEMS` search
items spread over them (:func:`judgeopt.evaluate.plan_sample`); the number of strategies is
the paths' mean length (shorter than the budget when the space runs out). Without the
search (a plan made outside a compile), the baseline's valid one-factor neighbours stand in
for the visits (:func:`plan_strategies`). The search judges every visited strategy on every
search item (racing drops some early); the choice after it judges about two judges on the
confirmation items. The artifacts the visited strategies generate with the LM (criteria,
AutoCoT steps, metrics questions, references; in-context examples are chosen from the data,
not generated) add one call per artifact not stored yet, counted path by path and averaged,
each writing about as much as the text that stands in for the artifact when prompts are
counted (the LM's output limit, 1024 tokens, would overstate such a call many times over).
The time is the baseline judged on :data:`judgeopt.evaluate.TIMED_ROUNDS` round of the calls
in flight, as the search judges it (on the embedded model, each call timed on the prompt
tokens its prefix cache leaves to compute, counted on the first
:data:`judgeopt.evaluate.PLAN_WINDOW` search items in the order the search judges them); a
resumed compile whose baseline answers are all in the response cache times its calls on the
judgements it has already made instead
(:func:`judgeopt.evaluate.recorded_timing`).

A strategy whose decoding twin was judged before it on the same path (greedy and
``expected``, each stopped at its rating, on an LM known to return logprobs) costs no call:
both make the same request (:meth:`judgeopt.judge.JudgeProgram.twin_read`), and the second
reads the first one's answers from the response cache.

The search's next strategy is known before it is judged (``Search.ask`` returns the pending
strategy until it is told): a resumed compile plans that one as itself, its prompts and the
artifacts it still needs, and only the strategies after it as drawn ones.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from ..evaluate import (
    PLAN_WINDOW,
    CallCost,
    CostPlan,
    Timing,
    artifact_tokens,
    call_cost,
    default_threads,
    mean_cost,
    plan_cost,
    plan_sample,
    recorded_timing,
    screen_cost,
    time_judgement,
    timed_runs,
)
from ..judge import artifact_key
from ..search import FactorGraph, Search, Strategy, sample_valid

__all__ = [
    "CRAMPED_PATHS",
    "GENERATED",
    "PLAN_ITEMS",
    "PLAN_PATHS",
    "PLAN_SCORE_SD",
    "PLAN_STRATEGIES",
    "PLAN_VISITS",
    "compile_plan",
    "plan_strategies",
    "simulated_paths",
]

log = logging.getLogger("judgeopt.teleprompt")

#: Neighbours of the baseline drawn to estimate what a strategy costs, without a search.
PLAN_STRATEGIES = 24
#: Searches run on made-up scores to find which strategies the search reaches.
PLAN_PATHS = 16
#: Paths run at most when the first one needed an exploitation pick (:func:`simulated_paths`).
CRAMPED_PATHS = 2
#: At most this many strategies visited over all paths (a large budget runs fewer paths, at
#: least two, so that the plan renders at most a few hundred strategies' prompts).
PLAN_VISITS = 400
#: The spread (standard deviation, Spearman) of the made-up scores: the median, over the 13
#: real budget-20 compiles at about 100 validation items in benchmarks/results/e2e*.json, of
#: the standard deviation of their strategies' validation scores (0.081-0.256; median 0.120).
PLAN_SCORE_SD = 0.12
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


def simulated_paths(
    search: Search,
    n_paths: int,
    rng: np.random.Generator,
    *,
    score_sd: float = PLAN_SCORE_SD,
) -> list[list[Strategy]]:
    """The strategies ``search`` would judge from where it stands, ``n_paths`` times: each
    path is a copy of the search (:meth:`judgeopt.search.Search.from_state`, the same seed
    and history) told independent normal scores with standard deviation ``score_sd`` around
    the mean score told so far (0 before any), drawn from ``rng``, until its budget is
    spent or its space runs out. A path starts with the strategy ``search.ask()`` returns;
    ``search`` itself is not touched.

    When the first path proposes a strategy by exploitation (for ``auto``, only once every
    neighbourhood of its population is exhausted: a cramped space, where paths differ little
    and each such pick walks much of the space), :data:`CRAMPED_PATHS` paths are run at
    most. HPSS's own exploitation picks (``rho``) count too: its plans run that many."""
    state = search.state_dict()
    told = [t.score for t in search.trials if not t.failed]
    centre = float(np.mean(told)) if told else 0.0
    history = search.n_evaluations
    paths: list[list[Strategy]] = []
    while len(paths) < n_paths:
        copy = Search.from_state(state)
        path: list[Strategy] = []
        while (strategy := copy.ask()) is not None:
            path.append(strategy)
            copy.tell(strategy, centre + score_sd * float(rng.standard_normal()))
        paths.append(path)
        if len(paths) == 1 and any(t.kind == "exploit" for t in copy.trials[history:]):
            n_paths = min(n_paths, CRAMPED_PATHS)
    return paths


def _generation_cost(
    graph: FactorGraph,
    base: Any,
    path: Sequence[Strategy],
    items: Sequence[Any],
    prompt_tokens: float,
    lm: Any,
    written: dict[str, float],
) -> CallCost:
    """The artifact calls of the strategies of ``path`` on ``items``: one per artifact the
    store does not hold yet (a per-item artifact once per item), each about as long a prompt
    as a judgement's, writing about as much as the text that stands in for the artifact when
    prompts are counted (:func:`judgeopt.evaluate.artifact_tokens`, kept in ``written`` by
    artifact name for the next path)."""
    store = getattr(getattr(base, "maker", None), "store", None)
    keys: dict[str, float] = {}
    for strategy in path:
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
    calls = float(len(keys))
    return CallCost(calls, calls * prompt_tokens, sum(keys.values()), explains=True)


def _twin_key(base: Any, strategy: Strategy, lm: Any) -> frozenset[tuple[str, Any]] | None:
    """The factor values of the decoding twin whose call ``strategy`` shares, or ``None``.

    A greedy judge stopped at its rating on an LM known to return logprobs makes its
    ``expected`` twin's call (:meth:`judgeopt.judge.JudgeProgram.twin_read`): whichever of
    the two is judged second reads the first one's answers from the response cache."""
    values = strategy.as_dict()
    decoding = values.get("decoding")
    if decoding not in ("greedy", "expected"):
        return None
    greedy = base.with_strategy({**values, "decoding": "greedy"})
    read = getattr(greedy.with_explain(False), "twin_read", None)
    if read is None or read(lm) is None:
        return None
    other = "expected" if decoding == "greedy" else "greedy"
    return frozenset({**values, "decoding": other}.items())


def _priced(
    base: Any,
    lm: Any,
    paths: Sequence[Sequence[Strategy]],
    rendered: Mapping[Strategy, CallCost],
    before: Sequence[Strategy],
    twins: bool,
) -> list[list[CallCost]]:
    """Per visit of ``paths``, its cost: ``rendered``, or none when ``twins`` (the paths are
    the search's) and its decoding twin came before it, on its path or in ``before``, and
    answered for it (:func:`_twin_key`)."""
    keys: dict[Strategy, frozenset[tuple[str, Any]] | None] = {}
    done = {frozenset(s.as_dict().items()) for s in before}
    out = []
    for path in paths:
        seen, costs = set(done), []
        for s in path:
            if twins and s not in keys:
                keys[s] = _twin_key(base, s, lm)
            twin = keys.get(s)
            cost = rendered[s]
            if twin is not None and twin in seen:
                zero = None if cost.computed_tokens is None else 0.0
                cost = replace(cost, calls=0.0, prompt_tokens=0.0, completion_tokens=0.0)
                cost = replace(cost, computed_tokens=zero, tail_tokens=0.0)
            costs.append(cost)
            seen.add(frozenset(s.as_dict().items()))
        out.append(costs)
    return out


def _visits(
    graph: FactorGraph,
    baseline: Strategy,
    search: Search | None,
    others: int,
    rng: np.random.Generator,
) -> tuple[list[Strategy], list[list[Strategy]], float, float, bool]:
    """The strategies whose mean cost stands for one judged after the next (repeated as
    often as they are visited), the paths whose artifacts are counted, how many strategies
    follow the next one, the artifacts' share, and whether the paths are the search's: every
    visit of the search's simulated paths (:func:`simulated_paths`, their first strategy
    left out: it is planned as itself), or, without a search (or one whose copies fail), the
    baseline's neighbours."""
    paths: list[list[Strategy]] | None = None
    if search is not None:
        n_paths = max(2, min(PLAN_PATHS, PLAN_VISITS // max(1, others + 1)))
        try:
            paths = [p[1:] for p in simulated_paths(search, n_paths, rng)]
        except Exception as e:  # noqa: BLE001 - a search that cannot be copied: neighbours
            log.warning("the plan prices the baseline's neighbours: no simulated path (%s)", e)
    if paths is None:
        drawn = plan_strategies(graph, baseline, PLAN_STRATEGIES, rng)
        return drawn, [drawn], float(others), min(1.0, others / max(1, len(drawn))), False
    visits = [s for p in paths for s in p]
    return visits, paths, float(np.mean([len(p) for p in paths])), 1.0, True


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
    search: Search | None = None,
    timing: Timing | None = None,
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
    ``search``: the compile's search, whose paths on made-up scores choose the strategies
    the plan prices (:func:`simulated_paths`; ``None``: the baseline's one-factor
    neighbours, as many as the strategies left allow). ``timing``: a timing made before
    (a plan replayed on a recorded compile); ``None``: the baseline is judged and timed now.
    """
    in_flight = threads or default_threads(lm)
    items = plan_sample(search_items, PLAN_ITEMS)
    judge = base.with_strategy(baseline)
    if timing is None:
        timing = time_judgement(judge, search_items, lm, threads=in_flight)
    if timing is None and judged:
        timing = recorded_timing(judge, judged, in_flight=in_flight)
    window = list(search_items[:PLAN_WINDOW])
    others = strategies_left - 1 if baseline_left else strategies_left
    kept = max(0, int(judged_items))
    known = None if baseline_left else next_strategy
    first = baseline if baseline_left else known
    if known is not None:
        others -= 1
    drawn, paths, others_left, share, simulated = _visits(
        graph, baseline, search if first is not None else None, others, np.random.default_rng(0)
    )
    rendered = {
        s: call_cost(base.with_strategy(s), items, lm, timing=timing, window=window)
        for s in dict.fromkeys(drawn)
    }
    before = [t.strategy for t in search.trials] if search is not None else []
    priced = _priced(base, lm, paths, rendered, before + ([first] if first else []), simulated)
    per_item = mean_cost([c for path in priced for c in path])
    prompt = per_item.prompt_tokens / max(per_item.calls, 1e-9)
    written: dict[str, float] = {}  # artifact tokens by artifact name, for every path
    common: list[tuple[CallCost, float] | tuple[CallCost, float, float]] = []
    if first is not None:  # the strategy judged next, as itself
        own = call_cost(base.with_strategy(first), items, lm, timing=timing, window=window)
        own = _priced(base, lm, [[first]], {first: own}, before, True)[0][0]
        left = max(0, len(search_items) - kept)
        # The plan's timed batch is the baseline's first run; the search judges the rest.
        common.append((own, left, timed_runs(timing, left) if baseline_left else 1.0))
        if known is not None:
            made = _generation_cost(graph, base, [known], search_items, prompt, lm, written)
            common.append((made, 1.0))
    if confirm_items:
        common.append((per_item, 2 * len(confirm_items), 2.0))
    if screen_calibration:
        screened = base.with_strategy({**baseline.as_dict(), "defence": "screened"})
        common.append(
            (screen_cost(screened, items, lm), len(search_items) + len(confirm_items or ()))
        )
    kept_left = 0 if first is not None else kept
    n_items = float(len(search_items))
    generated = [
        _generation_cost(graph, base, path, search_items, prompt, lm, written) for path in paths
    ]
    searched: list[tuple[CallCost, float] | tuple[CallCost, float, float]] = [
        (per_item, max(0.0, others_left * n_items - kept_left), float(others_left)),
        (mean_cost(generated), share),
    ]
    what = f"{strategies_left} strategies on {len(search_items)} search items"
    if confirm_items:
        what += f", the choice on {len(confirm_items)} more"
    plan = plan_cost(common + searched, lm, timing=timing, what=what)
    if len(paths) > 1:  # the search's simulated paths: how much its path may change it
        per_path = [
            plan_cost([*common, *[(c, n_items) for c in path], (gen, 1.0)], lm, timing=timing)
            for path, gen in zip(priced, generated, strict=True)
        ]
        plan = replace(plan, spread=_spread(per_path))
    return plan


def _spread(plans: Sequence[CostPlan]) -> dict[str, tuple[float, float]]:
    """The 10th and 90th percentiles of the ``plans`` (one per simulated path) calls,
    tokens, seconds and dollars (the last two when every plan has them)."""
    figures: dict[str, list[float]] = {
        "calls": [float(p.calls) for p in plans],
        "tokens": [float(p.prompt_tokens + p.completion_tokens) for p in plans],
    }
    seconds = [p.seconds for p in plans]
    if all(v is not None for v in seconds):
        figures["seconds"] = [float(v) for v in seconds if v is not None]
    dollars = [p.dollars for p in plans]
    if all(v is not None for v in dollars):
        figures["dollars"] = [float(v) for v in dollars if v is not None]
    return {
        k: (float(np.percentile(v, 10)), float(np.percentile(v, 90))) for k, v in figures.items()
    }
