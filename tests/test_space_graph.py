"""FactorSpace, Strategy and FactorGraph."""

from __future__ import annotations

import json
import pickle

import pytest

from judgeopt.search import Factor, FactorGraph, FactorSpace, Strategy


@pytest.fixture
def space() -> FactorSpace:
    return FactorSpace(
        {
            "scale": [3, 5, 10],
            "criteria": ["none", "human", "self"],
            "autocot": ["off", "on"],
            "metrics": ["off", "on"],
        }
    )


def test_strategy_mapping_hash_and_json_round_trip(space: FactorSpace) -> None:
    s = space.strategy(scale=10, criteria="self", autocot="on", metrics="off")
    assert dict(s) == {"scale": 10, "criteria": "self", "autocot": "on", "metrics": "off"}
    assert list(s.values()) == [10, "self", "on", "off"]
    assert s.key == '{"scale":10,"criteria":"self","autocot":"on","metrics":"off"}'
    assert Strategy.from_json(s.to_json()) == s
    assert Strategy.from_json(s.to_json(), space) == s
    assert hash(Strategy.from_json(s.key)) == hash(s)
    assert pickle.loads(pickle.dumps(s)) == s
    assert str(s) == "scale=10, criteria=self, autocot=on, metrics=off"
    with pytest.raises(AttributeError):
        s._values = ()  # type: ignore[misc]
    assert len({s, space.strategy(dict(s))}) == 1


def test_values_compare_by_type() -> None:
    space = FactorSpace({"x": [10, "10", 10.5, True]})
    assert space.strategy(x=10) != space.strategy(x="10")
    assert space.strategy(x=True) != space.strategy(x=10)
    assert Strategy.from_json(space.strategy(x="10").key, space)["x"] == "10"


def test_space_errors_name_factor_value_and_allowed(space: FactorSpace) -> None:
    with pytest.raises(ValueError, match=r"7 is not a value of factor `scale`.*\[3, 5, 10\]"):
        space.strategy(scale=7, criteria="none", autocot="off", metrics="off")
    with pytest.raises(ValueError, match=r"Unknown factor\(s\) \['tone'\]"):
        space.strategy(scale=3, criteria="none", autocot="off", metrics="off", tone="x")
    with pytest.raises(ValueError, match=r"missing factor\(s\) \['metrics'\]"):
        space.strategy(scale=3, criteria="none", autocot="off")
    with pytest.raises(ValueError, match="twice"):
        Factor("a", (1, 1))
    with pytest.raises(ValueError, match="at least one value"):
        Factor("a", ())
    with pytest.raises(TypeError, match="JSON scalars"):
        Factor("a", ([1],))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unique"):
        FactorSpace([Factor("a", (1,)), Factor("a", (2,))])
    with pytest.raises(ValueError, match="malformed"):
        Strategy.from_json("{not json")


def test_enumeration_index_and_neighbours(space: FactorSpace) -> None:
    all_s = list(space.strategies())
    assert len(all_s) == space.size == 36
    assert [space.index(s) for s in all_s] == list(range(36))
    assert all(space.from_index(i) == s for i, s in enumerate(all_s))
    nb = space.neighbours(space.default())
    assert len(nb) == sum(len(f.values) - 1 for f in space.factors)
    assert all(
        sum(a != b for a, b in zip(n.values(), space.default().values(), strict=True)) == 1
        for n in nb
    )
    assert FactorSpace.from_dict(json.loads(json.dumps(space.to_dict()))) == space


def test_constraints(space: FactorSpace) -> None:
    g = FactorGraph(space)
    g.forbid({"criteria": "none", "autocot": "on"}, reason="AutoCoT steps need criteria")
    g.require(when={"metrics": "on"}, then={"criteria": ["human", "self"]})
    bad = space.strategy(scale=3, criteria="none", autocot="on", metrics="on")
    assert not g.is_valid(bad)
    assert len(g.violations(bad)) == 2
    with pytest.raises(ValueError, match="AutoCoT steps need criteria"):
        g.check(bad)
    ok = space.strategy(scale=3, criteria="human", autocot="on", metrics="on")
    assert g.is_valid(ok)
    valid = [s for s in space.strategies() if g.is_valid(s)]
    assert len(valid) == 36 - 6 - 6 + 3  # 6 + 6 invalid, 3 of them by both constraints
    assert g.conflicts.has_edge(("value", "criteria", '"none"'), ("value", "autocot", '"on"'))
    with pytest.raises(ValueError, match="not a value of factor `criteria`"):
        g.forbid({"criteria": "other"})
    with pytest.raises(ValueError, match="Unknown factor `tone`"):
        g.forbid({"tone": "x"})


def test_artifacts_order_keys_and_sharing(space: FactorSpace) -> None:
    g = FactorGraph(space)
    g.add_artifact("criteria_text", inputs=["scale"], needed_when={"criteria": ["self"]})
    g.add_artifact(
        "autocot_steps",
        inputs=["criteria", "criteria_text", "scale"],
        needed_when={"autocot": ["on"]},
    )
    g.add_artifact(
        "metrics_questions",
        inputs=["criteria", "criteria_text"],
        needed_when={"metrics": ["on"]},
        per_sample=True,
    )
    s = space.strategy(scale=10, criteria="self", autocot="on", metrics="on")
    reqs = g.artifacts_for(s)
    assert [r.name for r in reqs] == ["criteria_text", "autocot_steps", "metrics_questions"]
    assert reqs[1].key == "autocot_steps[scale=10,criteria=self]"
    assert reqs[2].sample_key("item-7") == "metrics_questions[scale=10,criteria=self]@item-7"
    # Strategies that agree on an artifact's ancestors share its cache key.
    s2 = s.replace(metrics="off")
    assert [r.key for r in g.artifacts_for(s2)] == [reqs[0].key, reqs[1].key]
    assert g.artifacts_for(s.replace(criteria="human", autocot="off", metrics="off")) == []
    assert g.ancestor_factors("metrics_questions") == ("scale", "criteria")
    rebuilt = FactorGraph.from_dict(json.loads(json.dumps(g.to_dict())))
    assert rebuilt.to_dict() == g.to_dict()
    with pytest.raises(ValueError, match="neither a factor nor an artifact"):
        g.add_artifact("x", inputs=["nope"])
    with pytest.raises(ValueError, match="already used"):
        g.add_artifact("scale")
