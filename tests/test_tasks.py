"""Task signatures (signatures/*.toml), their validation, the HPSS factor space and graph."""

from __future__ import annotations

import copy
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from judgeopt.judge._catalog import available_tasks, load_task, signature_dirs
from judgeopt.judge._factors import (
    ARTIFACT_KINDS,
    ORDERS,
    SCALES,
    artifact_key,
    baseline_strategy,
    hpss_graph,
    hpss_space,
    order_components,
)
from judgeopt.judge._task import JudgeTask
from judgeopt.judge._template import placeholders, substitute

ROOT = Path(__file__).resolve().parents[1]
SIGNATURES = ROOT / "signatures"
SHIPPED = sorted(p.stem for p in SIGNATURES.glob("*.toml"))

POINTWISE = {
    # name: (baseline scale, correlation level, score range, aspects)
    "summeval": (5, "group", (1, 5), ("coherence", "consistency", "fluency", "relevance")),
    "topical_chat": (
        3,
        "dataset",
        (1, 3),
        ("coherence", "engagingness", "groundedness", "naturalness"),
    ),
    "sfhot": (5, "dataset", (1, 6), ("informativeness", "naturalness")),
    "sfres": (5, "dataset", (1, 6), ("informativeness", "naturalness")),
    "hanna": (
        5,
        "dataset",
        (1, 5),
        ("relevance", "coherence", "empathy", "surprise", "engagement", "complexity"),
    ),
}
PAIRWISE = ("llmbar", "autoj_eval_p", "mtbench_pairs")


def _raw(name: str = "summeval") -> dict[str, Any]:
    with (SIGNATURES / f"{name}.toml").open("rb") as f:
        return tomllib.load(f)


def _error(data: dict[str, Any]) -> str:
    with pytest.raises(ValueError) as info:
        JudgeTask.from_dict(data, source="test.toml")
    return str(info.value)


# --------------------------------------------------------------------------------------
# Shipped signatures
# --------------------------------------------------------------------------------------
def test_expected_signatures_are_shipped() -> None:
    assert set(SHIPPED) == set(POINTWISE) | set(PAIRWISE)
    assert set(available_tasks()) >= set(SHIPPED)
    assert SIGNATURES in signature_dirs()


@pytest.mark.parametrize("name", SHIPPED)
def test_signature_loads_and_validates(name: str) -> None:
    by_name = load_task(name)
    by_path = load_task(SIGNATURES / f"{name}.toml")
    by_str_path = load_task(str(SIGNATURES / f"{name}.toml"))
    assert by_name == by_path == by_str_path
    assert by_name.name == name
    assert by_name.aspect_names
    # Every aspect has criteria at every scale (pointwise) and a label.
    for aspect in by_name.aspect_names:
        assert by_name.aspect_label(aspect)
        if by_name.mode == "pointwise":
            for scale in SCALES:
                assert by_name.criteria_text(aspect, scale).strip()
                lo, hi = by_name.rating_bounds(aspect, scale)
                assert lo < hi
        else:
            assert by_name.criteria_text(aspect).strip()
    # Every shipped file is commented for users who copy it.
    text = (SIGNATURES / f"{name}.toml").read_text(encoding="utf-8")
    assert text.startswith("# judgeopt task signature")
    assert sum(line.startswith("#") for line in text.splitlines()) >= 10


@pytest.mark.parametrize("name", sorted(POINTWISE))
def test_pointwise_task_facts(name: str) -> None:
    task = load_task(name)
    scale, level, rng, aspects = POINTWISE[name]
    assert task.mode == "pointwise"
    assert task.baseline_scale == scale
    assert task.correlation_level == level
    assert task.score_range == rng
    assert task.aspect_names == aspects
    assert task.generation.criteria is not None
    assert task.criteria_per_scale is (name in ("topical_chat", "hanna"))


@pytest.mark.parametrize("name", PAIRWISE)
def test_pairwise_task_facts(name: str) -> None:
    task = load_task(name)
    assert task.mode == "pairwise"
    assert task.judged_fields == ("output_a", "output_b")
    assert [f.name for f in task.context_fields] == ["instruction"]
    assert task.score_range is None and task.baseline_scale is None
    assert task.correlation_level is None and task.generation.criteria is None
    with pytest.raises(ValueError, match="pairwise"):
        task.rating_bounds("overall", 5)


def test_input_fields_match_the_data_fields() -> None:
    fields = {name: load_task(name).input_names for name in SHIPPED}
    assert fields["summeval"] == ("source", "summary")
    assert fields["topical_chat"] == ("context", "fact", "response")
    assert fields["sfhot"] == fields["sfres"] == ("source", "output")
    assert fields["hanna"] == ("prompt", "story")
    for name in PAIRWISE:
        assert fields[name] == ("instruction", "output_a", "output_b")


@pytest.mark.parametrize("name", sorted(POINTWISE))
def test_criteria_are_the_hpss_human_criteria(name: str, shared_data: Path) -> None:
    folder = shared_data / "hpss_auxiliary" / name / "criteria"
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    task = load_task(name)
    if task.criteria_per_scale:
        for scale in SCALES:
            human = json.loads((folder / f"criteria_human_scale_{scale}.json").read_text("utf-8"))
            assert set(human) == set(task.aspect_names)
            for aspect, text in human.items():
                assert task.criteria_text(aspect, scale) == text
    else:
        human = json.loads((folder / "criteria_human.json").read_text("utf-8"))
        assert set(human) == set(task.aspect_names)
        for aspect, text in human.items():
            for scale in SCALES:
                assert task.criteria_text(aspect, scale) == text


def test_topical_chat_groundedness_uses_its_native_range() -> None:
    task = load_task("topical_chat")
    assert task.human_range("groundedness") == (0, 1)
    assert task.human_range("coherence") == (1, 3)
    assert task.rating_bounds("groundedness", 3) == (0, 1)
    assert task.rating_bounds("groundedness", 10) == (0, 10)
    assert task.rating_bounds("coherence", 3) == (1, 3)


def test_unknown_task_name_lists_the_shipped_ones() -> None:
    with pytest.raises(ValueError, match="Unknown task 'nope'") as info:
        load_task("nope")
    assert "summeval" in str(info.value)
    with pytest.raises(ValueError, match="Cannot read"):
        load_task("missing/file.toml")


def test_aspect_lookup_names_the_allowed_ones() -> None:
    task = load_task("summeval")
    assert task.aspect("fluency").criteria.startswith("Fluency:")
    with pytest.raises(ValueError) as info:
        task.aspect("helpfulness")
    msg = str(info.value)
    assert "'helpfulness'" in msg
    for name in ("coherence", "consistency", "fluency", "relevance"):
        assert name in msg


def test_task_is_frozen_and_hashable() -> None:
    task = load_task("summeval")
    with pytest.raises(ValueError):
        task.name = "other"  # type: ignore[misc]
    assert hash(task) == hash(load_task("summeval"))
    assert task.fingerprint != load_task("sfhot").fingerprint


# --------------------------------------------------------------------------------------
# Validation errors name the field, the value and what is allowed
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("where", "expected_loc"),
    [
        ((), "colour"),
        (("inputs", 0), "inputs.0.colour"),
        (("prompt",), "prompt.colour"),
        (("generation",), "generation.colour"),
        (("aspects", "coherence"), "aspects.coherence.colour"),
    ],
)
def test_unknown_keys_are_errors(where: tuple[Any, ...], expected_loc: str) -> None:
    data = _raw()
    node: Any = data
    for key in where:
        node = node[key]
    node["colour"] = "blue"
    msg = _error(data)
    assert "test.toml" in msg
    assert expected_loc in msg
    assert "unknown key" in msg


def test_bad_mode_names_field_value_and_allowed() -> None:
    data = _raw()
    data["mode"] = "listwise"
    msg = _error(data)
    assert "mode" in msg and "'listwise'" in msg
    assert "'pointwise'" in msg and "'pairwise'" in msg


def test_bad_baseline_scale_names_field_value_and_allowed() -> None:
    data = _raw()
    data["baseline_scale"] = 7
    msg = _error(data)
    assert "baseline_scale" in msg and "7" in msg and "[3, 5, 10, 50, 100]" in msg


def test_bad_style_and_correlation_level() -> None:
    data = _raw()
    data["inputs"][0]["style"] = "bold"
    data["correlation_level"] = "sample"
    msg = _error(data)
    assert "inputs.0.style" in msg and "'bold'" in msg and "'markers'" in msg
    assert "correlation_level" in msg and "'sample'" in msg and "'group'" in msg


def test_per_scale_criteria_must_cover_every_scale() -> None:
    data = _raw("topical_chat")
    del data["aspects"]["coherence"]["criteria"]["50"]
    msg = _error(data)
    assert "aspects.coherence.criteria" in msg and "missing [50]" in msg


def test_mixed_per_scale_and_single_criteria_rejected() -> None:
    data = _raw("topical_chat")
    data["aspects"]["coherence"]["criteria"] = "Coherence: one text."
    msg = _error(data)
    assert "per scale" in msg and "coherence" in msg


@pytest.mark.parametrize(
    ("mutate", "needles"),
    [
        (lambda d: d.update(judged_fields=["summmary"]), ["judged_fields", "summmary", "source"]),
        (lambda d: d.update(judged_fields=["source", "summary"]), ["exactly 1", "judged_fields"]),
        (
            lambda d: d["prompt"].update(metrics_after="summary"),
            ["prompt.metrics_after", "'summary'", "['source']"],
        ),
        (lambda d: d["inputs"].append(dict(d["inputs"][0])), ["more than once", "source"]),
        (lambda d: d["inputs"][0].update(name="criteria"), ["reserved", "'criteria'"]),
        (lambda d: d["inputs"][0].update(start="## S"), ["start", "markers"]),
        (lambda d: d.pop("score_range"), ["pointwise task needs", "score_range"]),
        (
            lambda d: d["generation"].update(criteria="Criteria of {source}:"),
            ["generation.criteria", "{source}"],
        ),
        (
            lambda d: d["prompt"].update(instruction="Judge {aspec} now."),
            ["prompt.instruction", "{aspec}", "{aspect}"],
        ),
        (
            lambda d: d["prompt"].update(rules=["Be as objective as possible."]),
            ["prompt.rules", "{criteria}"],
        ),
        (lambda d: d["prompt"].update(cot_prefix="Rate it."), ["prompt.cot_prefix", "{max}"]),
        (
            lambda d: d["generation"].update(criteria="Criteria on 1 to {max}:"),
            ["generation.criteria", "{max}"],
        ),
        (
            lambda d: d["generation"].update(reference="Summarize: {summary}"),
            ["generation.reference", "{summary}"],
        ),
        (lambda d: d["aspects"]["fluency"].update(criteria="  "), ["aspects.fluency", "empty"]),
        (lambda d: d.update(name="bad name"), ["name", "'bad name'"]),
        (lambda d: d.update(score_range=[5, 1]), ["score_range", "[5.0, 1.0]"]),
    ],
)
def test_invalid_values_are_reported_with_their_field(mutate: Any, needles: list[str]) -> None:
    data = _raw()
    mutate(data)
    msg = _error(data)
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_pairwise_rejects_pointwise_only_fields() -> None:
    data = _raw("llmbar")
    data["score_range"] = [1, 5]
    assert "score_range" in _error(data) and "pointwise" in _error(data)
    data = _raw("llmbar")
    data["generation"]["criteria"] = "Write criteria for {aspect}."
    assert "generation.criteria" in _error(data)
    data = _raw("llmbar")
    data["aspects"]["overall"]["rating_min"] = 0
    assert "rating_min" in _error(data)
    data = _raw("llmbar")
    data["prompt"]["cot_prefix"] = "Rate 1 to {max}."
    assert "{max}" in _error(data)
    data = _raw("llmbar")
    data["judged_fields"] = ["output_a"]
    assert "exactly 2" in _error(data)


def test_toml_syntax_error_names_the_source(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\nmode = \n', encoding="utf-8")
    with pytest.raises(ValueError, match="bad.toml: not valid TOML"):
        load_task(bad)


def test_a_copied_signature_loads_from_a_path(tmp_path: Path) -> None:
    text = (SIGNATURES / "sfhot.toml").read_text(encoding="utf-8")
    mine = tmp_path / "my_task.toml"
    mine.write_text(text.replace('name = "sfhot"', 'name = "my_task"'), encoding="utf-8")
    task = load_task(mine)
    assert task.name == "my_task"
    assert task.aspect_names == ("informativeness", "naturalness")


def test_the_documented_example_signature_is_valid() -> None:
    doc = (ROOT / "docs" / "tasks.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", doc, re.S)
    minimal = JudgeTask.from_toml(blocks[0], source="docs/tasks.md (minimal)")
    assert minimal.name == "support" and minimal.baseline_scale == 5
    assert len([line for line in blocks[0].splitlines() if line.strip()]) <= 10
    task = JudgeTask.from_toml(blocks[1], source="docs/tasks.md")
    assert task.name == "support_answers"
    assert task.aspect_names == ("helpfulness", "politeness")
    assert task.prompt.instruction == (
        "Please act as an impartial judge and evaluate the quality of {target} displayed "
        "{position} on its {aspect}."
    )


def test_defaults_fill_the_prompt_wording() -> None:
    data = _raw()
    task = JudgeTask.from_dict(data)
    assert task.noun_title == "Summary"
    assert task.prompt.rules == (
        "Your evaluation should consider the {aspect} of the {noun}. {criteria}",
        "Be as objective as possible.",
    )
    data["prompt"]["rules"] = ["Consider {aspect}. {criteria}", "Be fair.", "Be brief."]
    assert JudgeTask.from_dict(data).prompt.rules[2] == "Be brief."


# --------------------------------------------------------------------------------------
# Placeholders
# --------------------------------------------------------------------------------------
def test_substitute_is_single_pass_and_collapses_empty_values() -> None:
    values = {"a": "{b}", "b": "B", "c": ""}
    assert substitute("x {a} y", values) == "x {b} y"
    assert substitute("end. {c}", values) == "end."
    assert substitute("{{literal}} {b}", values) == "{literal} B"
    assert placeholders("{a} {{b}} {c_1}") == {"a", "c_1"}
    with pytest.raises(ValueError, match="placeholder {z}"):
        substitute("{z}", values)
    assert substitute("{z} {b}", values, keep_unknown=True) == "{z} B"


# --------------------------------------------------------------------------------------
# Factor space, baseline and graph
# --------------------------------------------------------------------------------------
def test_pointwise_space_is_table_1() -> None:
    space = hpss_space(load_task("summeval"))
    assert space.to_dict() == {
        "scale": [3, 5, 10, 50, 100],
        "examples": [0, 3, 5, 10],
        "criteria": ["none", "human", "self"],
        "reference": ["none", "self", "dialectic"],
        "cot": ["none", "prefix", "suffix"],
        "autocot": ["off", "on"],
        "metrics": ["off", "on"],
        "order": ["TD-ER-IC", "TD-IC-ER", "ER-TD-IC", "ER-IC-TD", "IC-TD-ER", "IC-ER-TD"],
        "decoding": ["greedy", "expected", "sc5"],
    }
    assert space.size == 12960 * 3  # Section 3.2's 12,960 prompts, times 3 decodings
    assert all(isinstance(v, int) for v in space["scale"].values)


def test_pairwise_space_has_no_scale_and_no_self_criteria() -> None:
    space = hpss_space(load_task("llmbar"))
    assert "scale" not in space
    assert space["criteria"].values == ("none", "human")
    assert space.names == (
        "examples",
        "criteria",
        "reference",
        "cot",
        "autocot",
        "metrics",
        "order",
    )


@pytest.mark.parametrize("name", SHIPPED)
def test_baseline_is_mt_bench(name: str) -> None:
    task = load_task(name)
    base = baseline_strategy(task).as_dict()
    expected: dict[str, Any] = {
        "examples": 0,
        "criteria": "human",
        "reference": "none",
        "cot": "prefix",
        "autocot": "off",
        "metrics": "off",
        "order": "TD-ER-IC",
    }
    if task.mode == "pointwise":
        expected = {"scale": POINTWISE[name][0], **expected, "decoding": "greedy"}
    assert base == expected
    graph = hpss_graph(task)
    assert graph.is_valid(baseline_strategy(task))
    assert graph.artifacts_for(baseline_strategy(task)) == []
    assert graph.constraints == ()


def test_graph_artifacts_and_keys_summeval() -> None:
    task = load_task("summeval")
    graph = hpss_graph(task)
    names = {a.name for a in graph.artifacts}
    assert names == {
        "self_criteria",
        "autocot_steps",
        "metrics_questions",
        "self_reference",
        "icl_examples",
    }
    s = baseline_strategy(task).replace(
        criteria="self", autocot="on", metrics="on", reference="self", examples=3, scale=10
    )
    reqs = {r.name: r for r in graph.artifacts_for(s)}
    assert reqs["self_criteria"].key == "self_criteria[]"  # SummEval criteria name no scale
    assert reqs["autocot_steps"].key == "autocot_steps[scale=10,criteria=self]"
    assert reqs["metrics_questions"].key == "metrics_questions[criteria=self]"
    assert reqs["self_reference"].key == "self_reference[]"
    assert reqs["icl_examples"].key == "icl_examples[scale=10,examples=3]"
    assert reqs["metrics_questions"].per_sample and reqs["self_reference"].per_sample
    assert not reqs["autocot_steps"].per_sample and not reqs["icl_examples"].per_sample
    order = [r.name for r in graph.artifacts_for(s)]
    assert order.index("self_criteria") < order.index("autocot_steps")
    assert order.index("self_criteria") < order.index("metrics_questions")
    # Only what the strategy uses is requested.
    only = graph.artifacts_for(baseline_strategy(task).replace(metrics="on"))
    assert [r.name for r in only] == ["metrics_questions"]
    assert only[0].key == "metrics_questions[criteria=human]"
    assert set(ARTIFACT_KINDS) == names - {"icl_examples"}


def test_graph_keys_follow_the_scale_when_criteria_name_it() -> None:
    task = load_task("topical_chat")
    graph = hpss_graph(task)
    s = baseline_strategy(task).replace(criteria="self", metrics="on", scale=50)
    reqs = {r.name: r for r in graph.artifacts_for(s)}
    assert reqs["self_criteria"].key == "self_criteria[scale=50]"
    assert reqs["metrics_questions"].key == "metrics_questions[scale=50,criteria=self]"


def test_pairwise_graph() -> None:
    task = load_task("autoj_eval_p")
    graph = hpss_graph(task)
    assert {a.name for a in graph.artifacts} == {
        "autocot_steps",
        "metrics_questions",
        "self_reference",
        "icl_examples",
    }
    s = baseline_strategy(task).replace(autocot="on", examples=5, metrics="on")
    keys = {r.name: r.key for r in graph.artifacts_for(s)}
    assert keys == {
        "autocot_steps": "autocot_steps[criteria=human]",
        "metrics_questions": "metrics_questions[criteria=human]",
        "icl_examples": "icl_examples[examples=5]",
    }


def test_artifact_key_is_prefixed_by_task_and_aspect() -> None:
    task = load_task("summeval")
    graph = hpss_graph(task)
    s = baseline_strategy(task).replace(autocot="on", reference="self")
    reqs = {r.name: r for r in graph.artifacts_for(s)}
    assert artifact_key(task, "coherence", reqs["autocot_steps"]) == (
        "summeval/coherence/autocot_steps[scale=5,criteria=human]"
    )
    # The reference's prompt names no aspect: one key for every aspect (issue 34, point 7).
    assert artifact_key(task, "fluency", reqs["self_reference"], "d1/M0") == (
        "summeval/*/self_reference[]@d1/M0"
    )
    with pytest.raises(ValueError, match="sample_id"):
        artifact_key(task, "fluency", reqs["self_reference"])
    with pytest.raises(ValueError, match="Unknown aspect"):
        artifact_key(task, "nope", reqs["autocot_steps"])


def test_graph_roundtrips_through_dict() -> None:
    from judgeopt.search import FactorGraph

    graph = hpss_graph(load_task("hanna"))
    again = FactorGraph.from_dict(copy.deepcopy(graph.to_dict()))
    assert again.to_dict() == graph.to_dict()


def test_order_components() -> None:
    assert [order_components(o) for o in ORDERS][:2] == [("TD", "ER", "IC"), ("TD", "IC", "ER")]
    assert {frozenset(order_components(o)) for o in ORDERS} == {frozenset({"TD", "ER", "IC"})}
    with pytest.raises(ValueError, match="Allowed"):
        order_components("TD-IC")
