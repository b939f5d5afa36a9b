"""The nested cross-validation protocol for searches (judgeopt_lab.cross_validate_searches)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judgeopt.bench import load_surfaces
from judgeopt.search import GridSearch, Search
from judgeopt_lab import RunCache, cross_validate_searches


def _surfaces(tmp_path: Path):
    """Four 2x2 surfaces (models m1, m2 x tasks t1, t2). Grid order is (x,p), (x,q), (y,p),
    (y,q); the optimum is (y,q) on m1 surfaces and (x,p) on m2 surfaces."""
    rows = []
    for m, best in (("m1", ("y", "q")), ("m2", ("x", "p"))):
        for t in ("t1", "t2"):
            for a in ("x", "y"):
                for b in ("p", "q"):
                    v = 1.0 if (a, b) == best else {"x": 0.2, "y": 0.1}[a] + (b == "q") * 0.05
                    rows.append(f"{m},{t},{a},{b},{v}")
    p = tmp_path / "s.csv"
    p.write_text("model,task,a,b,obj\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return load_surfaces(p, group=["model", "task"], factors=["a", "b"], objective="obj")


class _Reverse(GridSearch):
    """The grid backwards (a deterministic second configuration)."""

    name = "grid"

    def _run(self):  # type: ignore[override]
        for s in reversed(list(self.space.strategies())):
            yield s, "grid"


def _grid(sp, b, s, base) -> Search:
    return GridSearch(sp, budget=b, seed=s)


def _reverse(sp, b, s, base) -> Search:
    return _Reverse(sp, budget=b, seed=s)


def test_selection_uses_only_training_surfaces(tmp_path: Path) -> None:
    surfaces = _surfaces(tmp_path)
    fams = {"fixed": {"grid": _grid}, "tuned": {"grid": _grid, "reverse": _reverse}}
    res = cross_validate_searches(surfaces, fams, hold_out="model", budgets=[1], seeds=2)
    r = res.results[1]
    # Held-out m1 is tuned on m2, where the first strategy is optimal: grid; and vice versa.
    assert r["tuned"].picks == {"m1": "grid", "m2": "reverse"}
    # So the tuned family is wrong on every held-out surface, with regret > 0.
    assert r["tuned"].per_surface["m1/t1"] > 0 and r["tuned"].per_surface["m2/t1"] > 0
    assert r["fixed"].per_surface["m2/t1"] == 0.0 and r["fixed"].per_surface["m1/t1"] > 0
    assert r["tuned"].p_top1 == 0.0 and r["fixed"].p_top1 == 0.5
    assert len(r["fixed"].regrets) == 4 * 2
    mean, se = res.paired(1, "tuned", "fixed")
    assert mean > 0 and se >= 0
    d = json.loads(json.dumps(res.to_dict()))
    assert d["budgets"]["1"]["tuned"]["picks"] == {"m1": "grid", "m2": "reverse"}
    assert "tuned-fixed" not in d["budgets"]["1"]["paired"]
    assert "fixed-tuned" in d["budgets"]["1"]["paired"]
    assert res.verdict(1, "fixed", ["tuned"]) in {"win", "tie"}
    assert "| budget | fixed | tuned |" in res.table()


def test_every_budget_and_task_fold(tmp_path: Path) -> None:
    surfaces = _surfaces(tmp_path)
    res = cross_validate_searches(
        surfaces, {"g": {"grid": _grid}}, hold_out="task", budgets=[1, 4], seeds=1
    )
    assert res.results[4]["g"].norm_regret == 0.0 and res.results[4]["g"].p_top1 == 1.0
    assert set(res.results[1]["g"].picks) == {"t1", "t2"}


def test_cache_resumes_without_rerunning(tmp_path: Path) -> None:
    surfaces = _surfaces(tmp_path)
    path = tmp_path / "cache.json"
    calls = []

    def counted(sp, b, s, base) -> Search:
        calls.append(s)
        return GridSearch(sp, budget=b, seed=s)

    cross_validate_searches(
        surfaces,
        {"g": {"g": counted}},
        hold_out="model",
        budgets=[2],
        seeds=2,
        cache=RunCache(path),
    )
    n = len(calls)
    assert n == 4 * 2 and path.exists()
    again = cross_validate_searches(
        surfaces,
        {"g": {"g": counted}},
        hold_out="model",
        budgets=[2],
        seeds=2,
        cache=RunCache(path),
    )
    assert len(calls) == n and again.results[2]["g"].norm_regret >= 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hold_out": "nope"}, "not a group column"),
        ({"hold_out": "model", "seeds": 0}, "`seeds` must be >= 1"),
    ],
)
def test_errors(tmp_path: Path, kwargs, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cross_validate_searches(_surfaces(tmp_path), {"g": {"g": _grid}}, budgets=[1], **kwargs)


def test_single_fold_and_empty_family(tmp_path: Path) -> None:
    surfaces = [s for s in _surfaces(tmp_path) if s.group["model"] == "m1"]
    with pytest.raises(ValueError, match="single value"):
        cross_validate_searches(surfaces, {"g": {"g": _grid}}, hold_out="model", budgets=[1])
    with pytest.raises(ValueError, match="no configuration"):
        cross_validate_searches(surfaces, {"g": {}}, hold_out="task", budgets=[1])


def test_single_configuration_equals_the_plain_benchmark(shared_data: Path) -> None:
    """A family with one configuration is scored on every surface as the plain benchmark."""
    from judgeopt.bench import run_search_benchmark
    from judgeopt.search import HPSSSearch

    factors = ["base_prompt", "task_description", "format_requirement"]
    base = {"base_prompt": "PZS", "task_description": "Neutral", "format_requirement": "0 to 100"}
    surfaces = load_surfaces(
        shared_data / "prexme_surface" / "dev.csv",
        group=["model", "task"],
        factors=factors,
        objective="kendall",
    )
    fams = {"hpss": {"hpss": lambda sp, b, s, bl: HPSSSearch(sp, budget=b, seed=s, baseline=bl)}}
    cv = cross_validate_searches(
        surfaces, fams, hold_out="model", budgets=[35], seeds=2, baseline=base
    )
    plain = run_search_benchmark(surfaces, ["hpss"], budget=35, seeds=2, baseline=base)
    assert cv.results[35]["hpss"].norm_regret == pytest.approx(plain.methods["hpss"].norm_regret)
    assert cv.results[35]["hpss"].p_top1 == pytest.approx(plain.methods["hpss"].p_top1)
    assert set(cv.results[35]["hpss"].picks) == {"LLaMA3-8B", "Mixtral-8x7B", "NousHermes-13B"}
