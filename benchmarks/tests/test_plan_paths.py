"""``benchmarks/plan_paths.py``: real searches against the plan's simulated paths. The
statistics, the rebuild check and the simulation on a small search whose paths are known."""

from __future__ import annotations

import numpy as np
from _scripts import load_script

from judgeopt.search import AutoSearch, FactorSpace

pp = load_script("plan_paths")

BASE = {"cot": "prefix", "decoding": "greedy", "examples": 0, "metrics": "off", "scale": 5}


def test_free_twins_count_a_rate_first_strategy_after_its_decoding_twin() -> None:
    path = [
        BASE,  # explains first: no twin
        {**BASE, "cot": "suffix"},
        {**BASE, "cot": "suffix", "decoding": "expected"},  # its greedy twin came before
        {**BASE, "decoding": "expected"},  # explains first: the call is not shared
        {**BASE, "cot": "none", "decoding": "expected"},
        {**BASE, "cot": "none", "decoding": "sc5"},  # sampled: no twin
        {**BASE, "cot": "none"},  # its expected twin came before
    ]
    assert pp.free_twins(path) == 2


def test_statistics_count_costly_kinds_once_per_strategy() -> None:
    path = [
        BASE,
        {**BASE, "examples": 3, "metrics": "on"},  # two kinds, one costly strategy
        {**BASE, "decoding": "sc5"},
        {**BASE, "scale": 10},
    ]
    stats = pp.statistics(path)
    assert stats["costly"] == 2
    assert (stats["examples"], stats["metrics"], stats["sc5"], stats["autocot"]) == (1, 1, 1, 0)
    assert stats["twins"] == 0


def test_mid_rank() -> None:
    assert pp.mid_rank(2, [0, 1, 2, 3]) == 0.625  # 2 of 4 below, half of 1 equal
    assert pp.mid_rank(1.5, [0, 1, 2, 3]) == 0.5
    assert pp.mid_rank(-1, [0, 1]) == 0.0
    assert pp.mid_rank(5, [0, 1]) == 1.0


def _search() -> AutoSearch:
    space = FactorSpace({"a": [0, 1, 2], "b": [0, 1, 2], "c": [0, 1]})
    return AutoSearch(space, budget=6, seed=0)


def test_reproduces_accepts_the_recorded_trace_and_refuses_another() -> None:
    search = _search()
    copy = AutoSearch.from_state(search.state_dict())
    trace = []
    while (s := copy.ask()) is not None:
        score = (s["a"] + s["b"]) / 4
        trace.append({"strategy": s.as_dict(), "score": score})
        copy.tell(s, score)
    assert pp.reproduces(search, trace)
    assert not pp.reproduces(search, trace[:-1])  # the search asks for one more
    other = [dict(r) for r in trace]
    other[1] = {
        **other[1],
        "strategy": {**other[1]["strategy"], "c": 1 - other[1]["strategy"]["c"]},
    }
    assert not pp.reproduces(search, other)
    assert search.n_evaluations == 0  # the search itself untouched


def test_simulate_is_reproducible_and_leaves_the_search_untouched() -> None:
    search = _search()
    first = pp.simulate(search, 5, pp.iid(0.12), seed=3)
    again = pp.simulate(search, 5, pp.iid(0.12), seed=3)
    assert first == again
    assert all(len(p) == 6 for p in first)
    assert search.n_evaluations == 0


def test_additive_scores_are_the_sum_of_effects_fixed_within_a_path() -> None:
    score = pp.additive(1.0, 0.0, {"a": 0, "b": 0, "c": 0})(np.random.default_rng(0))
    space = FactorSpace({"a": [0, 1, 2], "b": [0, 1, 2], "c": [0, 1]})
    assert score(space.strategy({"a": 0, "b": 0, "c": 0})) == 0.0
    a1 = score(space.strategy({"a": 1, "b": 0, "c": 0}))
    b2 = score(space.strategy({"a": 0, "b": 2, "c": 0}))
    assert a1 != 0.0 and b2 != 0.0
    assert np.isclose(score(space.strategy({"a": 1, "b": 2, "c": 0})), a1 + b2)


def test_summarise_reads_differences_and_ranks_by_group() -> None:
    def row(scored: bool, real: int, sim: float, rank: float) -> dict:
        cell = {"real": real, "simulated_mean": sim, "mid_rank": rank}
        models = {"m": {"costly": cell, "twins": cell}}
        return {"scored": scored, "candidates": "rate_first", "models": models}

    rows = [row(True, 3, 2.0, 0.75), row(True, 1, 2.0, 0.25), row(False, 0, 1.0, 0.1), {"x": 1}]
    out = pp.summarise(rows)
    assert "scored, every candidate, budget 20" not in out["m"]  # no such search
    assert out["m"]["rate-first, both budgets"]["costly"]["n"] == 3
    scored = out["m"]["scored, rate-first, budget 20"]["costly"]
    assert scored["n"] == 2 and scored["real_minus_simulated"] == 0.0
    assert scored["mean_mid_rank"] == 0.5
    counts = out["m"]["counts only, rate-first, budget 10"]["twins"]
    assert counts["n"] == 1 and counts["se"] is None and counts["real_minus_simulated"] == -1.0
