"""HPSS follows Algorithms 1-2 and Eq. 2-7 of the paper."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from judgeopt.search import FactorGraph, FactorSpace, HPSSSearch, Strategy
from judgeopt.testing._search_suite import drive, toy_objective, toy_space


def test_initialisation_is_baseline_then_every_one_factor_change() -> None:
    space = toy_space()
    base = space.strategy(scale=5, examples=0, cot=True, order="TD-ER-IC")
    search = HPSSSearch(space, budget=100, seed=0, baseline=base)
    asked = drive(search, 1 + sum(len(f.values) - 1 for f in space.factors))
    assert asked[0] == base
    assert asked[1:] == space.neighbours(base)
    assert all(t.kind == "init" for t in search.trials)
    assert search.trials[-1].advantages is not None  # advantages exist after the init pass


def test_initial_advantages_are_score_minus_factor_mean() -> None:
    space = toy_space()
    search = HPSSSearch(space, budget=100, seed=0)
    n_init = 1 + sum(len(f.values) - 1 for f in space.factors)
    drive(search, n_init)
    adv = search.advantages()
    assert adv is not None
    base = space.default()
    for f in space.factors:
        scores = [100 * toy_objective(base.replace(**{f.name: v})) for v in f.values]
        expected = np.asarray(scores) - np.mean(scores)
        got = [adv[f.name][str(v)] for v in f.values]
        np.testing.assert_allclose(got, expected, atol=1e-9)
        assert abs(sum(got)) < 1e-9


def test_population_is_top_k_of_initialisation() -> None:
    space = toy_space()
    search = HPSSSearch(space, budget=100, seed=0, k=4)
    n_init = 1 + sum(len(f.values) - 1 for f in space.factors)
    drive(search, n_init)
    search.ask()  # runs the generator to its first iterative-search proposal
    ranked = sorted(search.trials, key=lambda t: (-t.score, t.number))[:4]
    assert search.population == [t.strategy for t in ranked]


def test_budget_counts_initialisation() -> None:
    space = toy_space()  # 1 + 2 + 3 + 1 + 2 = 9 initialisation evaluations
    search = HPSSSearch(space, budget=9, seed=0)
    drive(search)
    assert search.n_evaluations == 9
    assert {t.kind for t in search.trials} == {"init"}
    search = HPSSSearch(space, budget=5, seed=0)
    assert len(drive(search)) == 5


def test_neighbour_distribution_is_softmax_of_eq3() -> None:
    space = toy_space()
    search = HPSSSearch(space, budget=100, seed=0, tau=5.0, lambda_=4.0)
    drive(search, 9)
    c = space.default().replace(cot=True)
    t = 3
    options, p = search.neighbour_distribution(c, t)
    adv = search.advantages()
    assert adv is not None
    expected = []
    for _s, i, j in options:
        f = space.factors[i]
        b = adv[f.name][str(f.values[j])] - adv[f.name][str(c[f.name])]
        b += 4.0 * math.sqrt(math.log(t) / 1)  # M starts at 1 for every value
        expected.append(b / 5.0)
    e = np.exp(np.asarray(expected) - max(expected))
    np.testing.assert_allclose(p, e / e.sum(), rtol=1e-12)
    assert [s for s, _, _ in options] == space.neighbours(c)


def test_no_heuristic_is_uniform_and_no_explore_term_drops_ucb() -> None:
    space = toy_space()
    uni = HPSSSearch(space, budget=100, seed=0, heuristic=False)
    drive(uni, 9)
    _, p = uni.neighbour_distribution(space.default(), 5)
    np.testing.assert_allclose(p, np.full(len(p), 1 / len(p)))
    plain = HPSSSearch(space, budget=100, seed=0, exploration_term=False)
    full = HPSSSearch(space, budget=100, seed=0)
    drive(plain, 9)
    drive(full, 9)
    _, p_plain = plain.neighbour_distribution(space.default(), 5)
    _, p_full = full.neighbour_distribution(space.default(), 5)
    # With M = 1 everywhere the UCB bonus is a constant shift: same softmax.
    np.testing.assert_allclose(p_plain, p_full)


def test_no_explore_term_is_softmax_of_advantages_alone() -> None:
    # Once the iterative search has counted some values more than others (M differs), the
    # UCB bonus is no longer a constant shift: without the exploration term the distribution
    # must be the softmax of the advantage differences alone (Eq. 3 with lambda = 0).
    space = toy_space()
    plain = HPSSSearch(space, budget=100, seed=0, tau=5.0, lambda_=4.0, exploration_term=False)
    full = HPSSSearch(space, budget=100, seed=0, tau=5.0, lambda_=4.0)
    drive(plain, 30)
    drive(full, 30)
    c, t = space.default(), 30
    options, p_plain = plain.neighbour_distribution(c, t)
    counts = {int(plain._M[i][j]) for _s, i, j in options}
    assert len(counts) > 1, "the test needs values counted a different number of times"
    adv = plain.advantages()
    assert adv is not None
    expected = []
    for _s, i, j in options:
        f = space.factors[i]
        expected.append((adv[f.name][str(f.values[j])] - adv[f.name][str(c[f.name])]) / 5.0)
    e = np.exp(np.asarray(expected) - max(expected))
    np.testing.assert_allclose(p_plain, e / e.sum(), rtol=1e-12)
    _, p_full = full.neighbour_distribution(c, t)
    assert not np.allclose(p_plain, p_full)


def test_advantage_update_is_running_mean_then_recentred() -> None:
    space = FactorSpace({"a": ["x", "y", "z"], "b": [0, 1]})
    search = HPSSSearch(space, budget=100, seed=0)
    scores = {"x": 0.1, "y": 0.3, "z": 0.2}
    drive(search, 4, objective=lambda s: scores[str(s["a"])] + 0.05 * int(s["b"]))
    A_before = {k: dict(v) for k, v in (search.advantages() or {}).items()}
    parent = space.strategy(a="y", b=1)
    # Simulate Eq. 5-6 on factor `a`, value `z`, parent (a=y): r_new = 40 (percent).
    # The update is internal: feed it known numbers directly.
    search._scores[parent] = 0.35
    search._update_advantage(0, 2, parent, 40.0)
    A = search.advantages()
    assert A is not None
    gain = 40.0 - (35.0 - A_before["a"]["y"])
    n = 1
    raw = dict(A_before["a"])
    raw["z"] = (raw["z"] * n + gain) / (n + 1)
    mean = sum(raw.values()) / 3
    for v in "xyz":
        assert A["a"][v] == pytest.approx(raw[v] - mean)
    assert A["b"] == A_before["b"]


def test_exploitation_picks_unexplored_max_of_summed_advantages() -> None:
    space = toy_space()
    rng = np.random.default_rng(5)
    for trial in range(20):
        search = HPSSSearch(space, budget=500, seed=trial)
        drive(search, 9 + trial)
        for i in range(len(space.factors)):
            search._A[i] = rng.normal(size=len(space.factors[i].values)).round(1)
        best = search._argmax_unexplored()
        candidates = [s for s in space.strategies() if not search.is_explored(s)]

        def total(s: Strategy, search: HPSSSearch = search) -> float:
            return sum(float(search._A[i][f.index(s[f.name])]) for i, f in enumerate(space.factors))

        top = max(total(s) for s in candidates)
        assert best is not None and total(best) == pytest.approx(top)


def test_exploitation_respects_constraints() -> None:
    space = toy_space()
    graph = FactorGraph(space)
    graph.forbid({"cot": True, "scale": 10})
    search = HPSSSearch(space, budget=500, seed=0, graph=graph)
    drive(search, 9)
    for i, f in enumerate(space.factors):
        search._A[i] = np.zeros(len(f.values))
    search._A[0][2] = 5.0  # scale=10 is the best value
    search._A[2][1] = 5.0  # cot=True is the best value, but not together with scale=10
    best = search._argmax_unexplored()
    assert best is not None and graph.is_valid(best)
    assert best["scale"] == 10 or best["cot"] is True


def test_kinds_and_switches() -> None:
    space = toy_space()
    full = HPSSSearch(space, budget=60, seed=1, rho=0.5)
    drive(full)
    kinds = {t.kind for t in full.trials}
    assert {"init", "explore", "exploit"} <= kinds
    no_exploit = HPSSSearch(space, budget=60, seed=1, exploitation=False)
    drive(no_exploit)
    assert "exploit" not in {t.kind for t in no_exploit.trials}
    always = HPSSSearch(space, budget=30, seed=1, rho=1.0)
    drive(always)
    assert {t.kind for t in always.trials[9:]} == {"exploit"}


def test_advantages_stay_centred_through_search() -> None:
    search = HPSSSearch(toy_space(), budget=50, seed=3)
    drive(search)
    for t in search.trials[9:]:
        assert t.advantages is not None
        for values in t.advantages.values():
            assert abs(sum(values.values())) < 1e-9


def test_hyperparameter_validation_names_the_parameter() -> None:
    space = toy_space()
    for kwargs, name in [
        ({"k": 0}, "k"),
        ({"g": 1.5}, "g"),
        ({"rho": 2}, "rho"),
        ({"tau": 0}, "tau"),
        ({"lambda_": -1}, "lambda_"),
        ({"budget": 0}, "budget"),
        ({"seed": -3}, "seed"),
    ]:
        with pytest.raises(ValueError, match=f"`{name}`"):
            HPSSSearch(space, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a value of factor `scale`"):
        HPSSSearch(space, baseline={"scale": 7, "examples": 0, "cot": False, "order": "TD-ER-IC"})
    graph = FactorGraph(space)
    graph.forbid({"scale": 3})
    with pytest.raises(ValueError, match="violates"):
        HPSSSearch(space, graph=graph)


def test_finds_optimum_of_toy_space_with_enough_budget() -> None:
    space = toy_space()
    best = max(space.strategies(), key=toy_objective)
    hits = 0
    for seed in range(10):
        search = HPSSSearch(space, budget=40, seed=seed)
        drive(search)
        hits += search.best_strategy == best
    assert hits >= 7


def test_stall_fallback_explores_whole_space() -> None:
    # A 2 x 2 space: the population's neighbours run out quickly; the search must still
    # end (not loop) and never repeat.
    space = FactorSpace({"a": [0, 1], "b": [0, 1]})
    search = HPSSSearch(space, budget=50, seed=0, k=1, g=1)
    asked = drive(search, objective=lambda s: float(s["a"] * 2 + s["b"]))
    assert sorted(s.key for s in asked) == sorted(s.key for s in space.strategies())


def test_reproducible_trace_including_advantages() -> None:
    a, b = HPSSSearch(toy_space(), budget=40, seed=9), HPSSSearch(toy_space(), budget=40, seed=9)
    drive(a)
    drive(b)
    assert [t.to_dict() for t in a.trials] == [t.to_dict() for t in b.trials]
    c = HPSSSearch(toy_space(), budget=40, seed=10)
    drive(c)
    assert [t.strategy for t in a.trials] != [t.strategy for t in c.trials]


def test_all_strategies_of_product() -> None:
    # Sanity for the helper used above: the toy space enumerates its product.
    space = toy_space()
    assert (
        len(list(space.strategies()))
        == space.size
        == len(list(itertools.product(*(f.values for f in space.factors))))
    )
