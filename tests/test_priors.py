"""FactorPriors: estimation, validation, serialisation, and HPSS / auto seeded with priors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from judgeopt.bench import leave_one_out_priors, load_surfaces, run_search_benchmark
from judgeopt.search import AutoSearch, FactorGraph, FactorPriors, FactorSpace, HPSSSearch, Search
from judgeopt.testing import SearchConformance
from judgeopt.testing._search_suite import drive, toy_objective, toy_space

DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "prexme_surface" / "dev.csv"
FACTORS = ["base_prompt", "task_description", "format_requirement"]
BASELINE = {"base_prompt": "PZS", "task_description": "Neutral", "format_requirement": "0 to 100"}


def _grid(scores: dict[tuple[str, str], float]) -> list[tuple[dict[str, str], float]]:
    return [({"fmt": f, "cot": c}, v) for (f, c), v in scores.items()]


# A 3 x 2 table: fmt "a" is best, cot "yes" helps, one failure.
ONE = _grid(
    {
        ("a", "no"): 0.30,
        ("a", "yes"): 0.40,
        ("b", "no"): 0.10,
        ("b", "yes"): 0.20,
        ("c", "no"): 0.20,
        ("c", "yes"): math.nan,
    }
)


def test_estimate_one_setting_median() -> None:
    p = FactorPriors.estimate(ONE)  # median, percent
    # fmt medians: a 35, b 15, c 20 (the NaN row is left out) -> mean 70/3.
    assert p.advantage("fmt", "a") == pytest.approx(35 - 70 / 3)
    assert p.advantage("fmt", "b") == pytest.approx(15 - 70 / 3)
    assert p.advantage("fmt", "c") == pytest.approx(20 - 70 / 3)
    # cot medians: no median(30, 10, 20) = 20, yes median(40, 20) = 30.
    assert p.advantage("cot", "yes") == pytest.approx(5.0)
    assert p.advantage("cot", "no") == pytest.approx(-5.0)
    assert p.settings == ("results",) and p.aggregation == "median"
    for f in ("fmt", "cot"):
        assert sum(a for _, a in p.advantages[f]) == pytest.approx(0.0, abs=1e-12)


def test_estimate_mean_and_score_scale() -> None:
    p = FactorPriors.estimate(ONE, aggregation="mean", score_scale=1.0)
    # cot means: no 0.2, yes 0.3.
    assert p.advantage("cot", "yes") == pytest.approx(0.05)
    assert p.score_scale == 1.0


def test_several_settings_are_averaged_per_setting() -> None:
    wide = _grid({("a", "no"): 0.9, ("a", "yes"): 0.9, ("b", "no"): -0.9, ("b", "yes"): -0.9})
    narrow = _grid(
        {
            ("a", "no"): 0.0,
            ("a", "yes"): 0.0,
            ("b", "no"): 0.2,
            ("b", "yes"): 0.2,
            ("c", "no"): 0.1,
            ("c", "yes"): 0.1,
        }
    )
    p = FactorPriors.estimate({"wide": wide, "narrow": narrow})
    # wide: a +90, b -90; narrow: a -10, b +10, c 0. Averages: a 40, b -40, c 0 -> centred.
    assert p.advantage("fmt", "a") == pytest.approx(40.0)
    assert p.advantage("fmt", "b") == pytest.approx(-40.0)
    assert p.advantage("fmt", "c") == pytest.approx(0.0)
    assert p.settings == ("wide", "narrow")
    s = FactorPriors.estimate({"wide": wide, "narrow": narrow}, normalise="std")
    # With std normalisation the narrow setting gets its say: b's sign flips towards it.
    assert s.advantage("fmt", "a") < p.advantage("fmt", "a")
    assert abs(s.advantage("fmt", "a")) < 40


def test_estimate_errors() -> None:
    with pytest.raises(ValueError, match="aggregation"):
        FactorPriors.estimate(ONE, aggregation="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="normalise"):
        FactorPriors.estimate(ONE, normalise="rank")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no row with a finite score"):
        FactorPriors.estimate({"x": [({"fmt": "a"}, math.nan)]})
    with pytest.raises(ValueError, match="same factors"):
        FactorPriors.estimate([({"fmt": "a"}, 0.1), ({"cot": "no"}, 0.2)])
    with pytest.raises(ValueError, match="at least one setting"):
        FactorPriors.estimate({})


def test_validation_against_a_space_names_the_culprits() -> None:
    p = FactorPriors.estimate(ONE)
    with pytest.raises(ValueError, match=r"factor\(s\) \['cot'\]"):
        p.check(FactorSpace({"fmt": ["a", "b", "c"]}))
    with pytest.raises(ValueError, match=r"`fmt` has no value\(s\) \['c'\]"):
        p.check(FactorSpace({"fmt": ["a", "b"], "cot": ["no", "yes"]}))
    with pytest.raises(ValueError, match="does not have|no value"):
        HPSSSearch(FactorSpace({"fmt": ["a", "b"], "cot": ["no", "yes"]}), budget=5, priors=p)


def test_values_and_factors_missing_from_the_priors_get_zero() -> None:
    p = FactorPriors.estimate(ONE)
    space = FactorSpace({"fmt": ["a", "b", "c", "d"], "cot": ["no", "yes"], "scale": [5, 10]})
    (fmt, known_f), (cot, _), (scale, known_s) = p.vectors(space)
    assert fmt[3] == 0.0 and list(known_f) == [True, True, True, False]
    assert fmt[0] == pytest.approx(p.advantage("fmt", "a"))
    assert fmt.sum() == pytest.approx(0.0, abs=1e-12)
    assert list(scale) == [0.0, 0.0] and not known_s.any()
    assert p.vectors(space, score_scale=1.0)[1][0][1] == pytest.approx(0.05)


def test_values_compare_by_type() -> None:
    p = FactorPriors({"scale": ((5, 1.0), (10, -1.0))})
    with pytest.raises(ValueError, match="no value"):
        p.check(FactorSpace({"scale": ["5", "10"]}))
    p.check(FactorSpace({"scale": [5, 10, 50]}))


def test_json_round_trip_keeps_value_types() -> None:
    p = FactorPriors(
        {"scale": ((5, 1.5), (10, -1.5)), "cot": ((True, 0.5), (False, -0.5))},
        aggregation="mean",
        settings=("m1/t1",),
    )
    q = FactorPriors.from_json(json.dumps(json.loads(p.to_json())))
    assert q == p
    assert q.advantages["scale"][0][0] == 5 and isinstance(q.advantages["cot"][0][0], bool)
    with pytest.raises(ValueError, match="Not a judgeopt priors"):
        FactorPriors.from_dict({"advantages": {}})
    with pytest.raises(ValueError, match="malformed"):
        FactorPriors.from_json("{")
    with pytest.raises(ValueError, match="listed|twice"):
        FactorPriors({"scale": ((5, 1.0), (5, 2.0))})
    with pytest.raises(ValueError, match="finite"):
        FactorPriors({"scale": ((5, math.nan),)})


def test_save_load(tmp_path: Path) -> None:
    p = FactorPriors.estimate(ONE)
    p.save(tmp_path / "p.json")
    assert FactorPriors.load(tmp_path / "p.json") == p


def test_from_csv_with_where(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    lines = ["model,fmt,cot,kendall"]
    for model, shift in (("m1", 0.0), ("m2", 0.5)):
        for s, v in ONE:
            lines.append(f"{model},{s['fmt']},{s['cot']},{'' if math.isnan(v) else v + shift}")
    path.write_text("\n".join(lines) + "\n")
    p = FactorPriors.from_csv(
        path, factors=["fmt", "cot"], objective="kendall", group=["model"], where={"model": ["m1"]}
    )
    assert p.settings == ("m1",)
    assert p.advantage("cot", "yes") == pytest.approx(5.0)
    both = FactorPriors.from_csv(path, factors=["fmt", "cot"], objective="kendall", group=["model"])
    assert both.settings == ("m1", "m2")
    assert both.advantage("cot", "yes") == pytest.approx(5.0)  # a shift changes nothing
    with pytest.raises(ValueError, match="Column `nope`"):
        FactorPriors.from_csv(path, factors=["nope"], objective="kendall")
    with pytest.raises(ValueError, match="No row"):
        FactorPriors.from_csv(path, factors=["fmt"], objective="kendall", where={"model": ["m9"]})


# The searches -----------------------------------------------------------------------------


def _toy_priors(space: FactorSpace) -> FactorPriors:
    rows = [(s, toy_objective(s)) for s in space.strategies()]
    return FactorPriors.estimate(rows)


def test_priors_none_keeps_the_state_and_sequence_of_hpss() -> None:
    space = toy_space()
    plain = HPSSSearch(space, budget=30, seed=4, k=3)
    explicit = HPSSSearch(
        space, budget=30, seed=4, k=3, priors=None, prior_weight=2.0, prior_start=3
    )
    assert drive(plain) == drive(explicit)
    assert "priors" not in plain.state_dict()["params"]
    assert [t.kind for t in plain.trials[:9]] == ["init"] * 9  # 1 + 2 + 3 + 1 + 2


def test_hpss_with_priors_skips_the_initialisation_pass() -> None:
    space = toy_space()
    priors = _toy_priors(space)
    search = HPSSSearch(space, budget=30, seed=0, k=3, priors=priors)
    asked = drive(search)
    kinds = [t.kind for t in search.trials]
    assert kinds[:2] == ["init", "init"] and "init" not in kinds[2:]
    assert asked[0] == space.default()
    # The second is the strategy the priors rank best (the separable optimum of toy_objective).
    assert asked[1] == space.strategy(scale=10, examples=10, cot=True, order="TD-IC-ER")
    assert search.trials[0].advantages is not None
    assert search.trials[0].advantages["cot"]["True"] == pytest.approx(
        priors.advantage("cot", True)
    )
    assert (
        HPSSSearch(space, budget=5, seed=0, priors=priors, prior_start=0).ask() == space.default()
    )


def test_auto_with_priors_starts_at_the_priors_then_runs_its_plan() -> None:
    space = FactorSpace({"bp": list(range(3)), "td": list(range(24)), "fr": list(range(10))})
    rows = [(s, (s["bp"] + s["td"] / 4 + s["fr"]) / 100) for s in space.strategies()]
    priors = FactorPriors.estimate(rows)
    search = AutoSearch(space, budget=50, seed=0, priors=priors, prior_start=1)
    asked = drive(search, 13, lambda s: (float(s["bp"]) + float(s["fr"])) / 100)
    base = space.default()
    assert asked[0] == base and asked[1] == space.strategy(bp=2, td=23, fr=9)
    # Then auto's plan at budget 50 (bp and fr, 11 one-factor changes), all kind "init".
    assert asked[2:] == [base.replace(bp=v) for v in (1, 2)] + [
        base.replace(fr=v) for v in range(1, 10)
    ]
    assert [t.kind for t in search.trials] == ["init"] * 13
    # Advantages start at prior_weight / (prior_weight + kappa) of the priors.
    adv = AutoSearch(space, budget=50, seed=0, priors=priors, kappa=1.0)
    drive(adv, 1, lambda s: 0.0)
    a = adv.trials[0].advantages
    assert a is not None
    assert a["fr"]["9"] == pytest.approx(priors.advantage("fr", 9) * 4 / 5)


def test_priors_are_rescaled_to_the_search_score_scale() -> None:
    space = toy_space()
    priors = _toy_priors(space)
    s1 = HPSSSearch(space, budget=5, seed=0, priors=priors, score_scale=1.0)
    drive(s1, 1)
    adv = s1.trials[0].advantages
    assert adv is not None
    assert adv["cot"]["True"] == pytest.approx(priors.advantage("cot", True) / 100)


def test_state_holds_the_priors_and_restores_from_a_dict(tmp_path: Path) -> None:
    space = toy_space()
    search = AutoSearch(
        space,
        budget=25,
        seed=2,
        priors=_toy_priors(space).to_dict(),
        prior_weight=2.5,
        prior_start=2,
    )
    drive(search, 9)
    state = json.loads(search.to_json())
    assert state["params"]["priors"]["format"] == "judgeopt.priors"
    restored = Search.from_state(state)
    assert isinstance(restored, AutoSearch) and restored.prior_weight == 2.5
    assert drive(restored) == drive(search)


@pytest.mark.parametrize(
    "bad",
    [{"prior_weight": -1.0}, {"prior_weight": math.inf}, {"prior_start": -1}, {"prior_start": 1.5}],
)
def test_prior_hyperparameters_are_validated(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="prior_"):
        HPSSSearch(toy_space(), budget=5, priors=_toy_priors(toy_space()), **bad)  # type: ignore[arg-type]


class TestHPSSPriors(SearchConformance):
    @pytest.fixture
    def make_search(self):
        def make(space: FactorSpace, budget: int, seed: int, graph: FactorGraph | None) -> Search:
            return HPSSSearch(
                space,
                budget=budget,
                seed=seed,
                graph=graph,
                k=3,
                priors=_toy_priors(space) if space == toy_space() else None,
            )

        return make


class TestHPSSPriorsEverywhere(SearchConformance):
    """Priors that cover only part of the space (one factor, some values)."""

    @pytest.fixture
    def make_search(self):
        def make(space: FactorSpace, budget: int, seed: int, graph: FactorGraph | None) -> Search:
            f = space.factors[0]
            partial = FactorPriors({f.name: ((f.values[-1], 2.0), (f.values[0], -2.0))})
            return HPSSSearch(
                space, budget=budget, seed=seed, graph=graph, priors=partial, prior_start=2
            )

        return make


class TestAutoPriors(SearchConformance):
    @pytest.fixture
    def make_search(self):
        def make(space: FactorSpace, budget: int, seed: int, graph: FactorGraph | None) -> Search:
            f = space.factors[-1]
            partial = FactorPriors({f.name: ((f.values[-1], 3.0), (f.values[0], -3.0))})
            return AutoSearch(
                space, budget=budget, seed=seed, graph=graph, k=3, priors=partial, prior_start=1
            )

        return make


# The benchmark ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def surfaces():
    if not DEV.is_file():
        pytest.skip(f"{DEV} not available")
    return load_surfaces(DEV, group=["model", "task"], factors=FACTORS, objective="kendall")


def test_leave_one_out_priors_use_only_other_models(surfaces) -> None:
    pr = leave_one_out_priors(surfaces, "model")
    assert set(pr) == {s.name for s in surfaces}
    srcs = pr["LLaMA3-8B/en_de"].settings
    assert len(srcs) == 6 and not any(s.startswith("LLaMA3-8B") for s in srcs)
    same = leave_one_out_priors(surfaces, "model", match=["task"])
    assert set(same["LLaMA3-8B/en_de"].settings) == {"Mixtral-8x7B/en_de", "NousHermes-13B/en_de"}
    with pytest.raises(ValueError, match="not a group column"):
        leave_one_out_priors(surfaces, "judge")
    with pytest.raises(ValueError, match="need priors"):
        run_search_benchmark(surfaces, ["hpss+priors"], budget=5, seeds=1)


def test_priors_from_other_models_help_hpss_and_auto_at_budget_20(surfaces) -> None:
    """The measured direction (docs/benchmarks.md): at budget 20 leave-one-model-out priors
    lower the mean regret of HPSS (0.420 -> 0.18) and of auto (0.230 -> 0.18)."""
    pr = leave_one_out_priors(surfaces, "model")
    res = run_search_benchmark(
        surfaces,
        ["hpss", "hpss+priors", "auto", "auto+priors"],
        budget=20,
        seeds=20,
        baseline=BASELINE,
        priors=pr,
    )
    m = {k: v.norm_regret for k, v in res.methods.items()}
    assert m["hpss+priors"] < m["hpss"] - 0.15
    assert m["auto+priors"] < m["auto"] - 0.02
    paired = np.array(
        [
            a.norm_regret - b.norm_regret
            for a, b in zip(
                [r for r in res.runs if r.method == "auto+priors"],
                [r for r in res.runs if r.method == "auto"],
                strict=True,
            )
        ]
    )
    assert paired.mean() + 2 * paired.std(ddof=1) / math.sqrt(paired.size) < 0
