"""Judge and generation prompts against the HPSS templates (Tables 11-18)."""

from __future__ import annotations

import copy
import difflib
import random
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from judgeopt.judge._catalog import load_task
from judgeopt.judge._factors import ORDERS, SCALES, baseline_strategy, hpss_space
from judgeopt.judge._render import (
    criteria_for,
    fill_template,
    generation_prompt,
    render_components,
    render_messages,
    render_prompt,
    render_template,
)
from judgeopt.judge._task import JudgeTask
from judgeopt.search import Strategy

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------------------
# The tables, transcribed. [Aspect] -> {aspect}; the rating scale -> {max}.
# --------------------------------------------------------------------------------------
SUMMEVAL_COHERENCE = (
    "Coherence: Measure the quality of all sentences of the summary collectively, to fit "
    "together and sound naturally. Consider the quality of the summary as a whole."
)

TABLE_11 = {
    "instruction": (
        "Please act as an impartial judge and evaluate the quality of the summary of the news "
        "article displayed below on its {aspect}."
    ),
    "reference_1": (
        "You will be given the news article, the summary, and a high-quality reference summary."
    ),
    "reference_2": (
        "## The Start of Reference Summary\n{reference}\n## The End of Reference Summary"
    ),
    "dialectic": (
        "Please generate your own summary for the news article first and take into account "
        "your own summary to evaluate the quality of the given summary."
    ),
    "none": (
        "You must directly output your rating of the summary on a scale of 1 to {max} without "
        'any explanation by strictly following this format: "[[rating]]", for example: '
        '"Rating: [[{max}]]".'
    ),
    "prefix": (
        "Begin your evaluation by providing a short explanation. After providing your "
        "explanation, you must rate the summary on a scale of 1 to {max} by strictly following "
        'this format: "[[rating]]", for example: "Rating: [[{max}]]".'
    ),
    "suffix": (
        "You must rate the summary on a scale of 1 to {max} first by strictly following this "
        'format: "[[rating]]", for example: "Rating: [[{max}]]". And then provide your '
        "explanation."
    ),
    "rule_1": "1. Your evaluation should consider the {aspect} of the summary.",
    "rule_2": "2. Be as objective as possible.",
    "autocot": "Evaluation Steps:\n{steps}",
    "examples_intro": "Here are some examples and their corresponding ratings:",
    "examples_outro": (
        "Following these examples, evaluate the quality of the summary of the news article "
        "displayed below on its {aspect}:"
    ),
    "metrics": (
        "## Questions about Summary\nHere are some questions about the summary. You can do "
        "the evaluation based on thinking about all the questions.\n{metrics}"
    ),
}

TABLE_13 = {
    "instruction": (
        "Please act as an impartial judge and evaluate the quality of the response for the next "
        "turn in the conversation displayed below on its {aspect}. The response concerns an "
        "interesting fact, which will be provided as well."
    ),
    "reference_1": (
        "You will also be given a high-quality reference response with the conversation."
    ),
    "reference_2": (
        "## The Start of Reference Response\n{reference}\n## The End of Reference Response"
    ),
    "dialectic": (
        "Please generate your own response for the next turn in the conversation first and "
        "take into account your own response to evaluate the quality of the given response."
    ),
    "none": TABLE_11["none"].replace("summary", "response"),
    "prefix": TABLE_11["prefix"].replace("summary", "response"),
    "suffix": TABLE_11["suffix"].replace("summary", "response"),
    "rule_1": "1. Your evaluation should consider the {aspect} of the response.",
    "rule_2": "2. Be as objective as possible.",
    "autocot": "Evaluation Steps:\n{steps}",
    "examples_intro": "Here are some examples and their corresponding ratings:",
    "examples_outro": (
        "Following these examples, evaluate the quality of the response for the next turn in "
        "the conversation displayed below on its {aspect}:"
    ),
    "metrics": (
        "## Questions about Response\nHere are some questions about the response. You can do "
        "the evaluation based on thinking about all the questions.\n{metrics}"
    ),
}

ARTICLE = "( CNN ) The council met on Monday . It voted 7-2 to build a new bridge ."
SUMMARY = "The council voted to build a bridge ."
CONTEXT = "hello , do you like football ? \n i do ! do you ?"
FACT = "the university of iowa 's locker room for visiting teams is painted pink"
RESPONSE = "i do . did you know iowa paints the visitors ' locker room pink ?"

INPUTS = {
    "summeval": {"source": ARTICLE, "summary": SUMMARY, "reference": "ignored extra field"},
    "topical_chat": {"context": CONTEXT, "fact": FACT, "response": RESPONSE},
}

# Acceptance: the MT-Bench baseline of Tables 11 and 13, sentence for sentence.
SUMMEVAL_BASELINE = f"""## Instruction
Please act as an impartial judge and evaluate the quality of the summary of the news article displayed below on its coherence. Begin your evaluation by providing a short explanation. After providing your explanation, you must rate the summary on a scale of 1 to 5 by strictly following this format: "[[rating]]", for example: "Rating: [[5]]".

Here are some rules of the evaluation:
1. Your evaluation should consider the coherence of the summary. Coherence: Measure the quality of all sentences of the summary collectively, to fit together and sound naturally. Consider the quality of the summary as a whole.
2. Be as objective as possible.

## Article
{ARTICLE}

## The Start of the Summary
{SUMMARY}
## The End of the Summary"""  # noqa: E501

TOPICAL_BASELINE = f"""## Instruction
Please act as an impartial judge and evaluate the quality of the response for the next turn in the conversation displayed below on its naturalness. The response concerns an interesting fact, which will be provided as well. Begin your evaluation by providing a short explanation. After providing your explanation, you must rate the response on a scale of 1 to 3 by strictly following this format: "[[rating]]", for example: "Rating: [[3]]".

Here are some rules of the evaluation:
1. Your evaluation should consider the naturalness of the response. Naturalness: Is the response naturally written?
- A score of 1 (bad) means that the response is unnatural.
- A score of 2 (ok) means the response is strange, but not entirely unnatural.
- A score of 3 (good) means that the response is natural.
2. Be as objective as possible.

## Conversation History
{CONTEXT}

## Corresponding Fact
{FACT}

## The Start of the Response
{RESPONSE}
## The End of the Response"""  # noqa: E501

PAIRWISE_BASELINE = """## Instruction
Please act as an impartial judge and evaluate the quality of the responses provided by two AI assistants to the user question displayed below. You should choose the assistant that follows the user's instructions and answers the user's question better. Begin your evaluation by comparing the two responses and provide a short explanation. After providing your explanation, output your final verdict by strictly following this format: "[[A]]" if assistant A is better, "[[B]]" if assistant B is better, and "[[C]]" for a tie.

Here are some rules of the evaluation:
1. Your evaluation should consider the overall quality of their responses. Overall quality: Consider factors such as the helpfulness, relevance, accuracy, depth, creativity, and level of detail of their responses.
2. Avoid any position biases and ensure that the order in which the responses were presented does not influence your decision.
3. Do not allow the length of the responses to influence your evaluation.
4. Do not favor certain names of the assistants.
5. Be as objective as possible.

## User Question
Write a haiku about rain.

## The Start of Assistant A's Answer
Rain taps on the roof
## The End of Assistant A's Answer

## The Start of Assistant B's Answer
It is raining.
## The End of Assistant B's Answer"""  # noqa: E501

PAIR_INPUTS = {
    "instruction": "Write a haiku about rain.",
    "output_a": "Rain taps on the roof",
    "output_b": "It is raining.",
}

ARTIFACTS: dict[str, Any] = {
    "criteria_text": "SELF-GENERATED CRITERIA",
    "autocot_steps": "1. Read it.\n2. Rate it.",
    "metrics": "1. Is it accurate?\n2. Is it fluent?",
    "reference": "A REFERENCE OUTPUT",
}


def _diff(a: str, b: str) -> tuple[list[str], list[str]]:
    """Lines removed from ``a`` and lines added in ``b`` (difflib, line level)."""
    al, bl = a.splitlines(), b.splitlines()
    removed: list[str] = []
    added: list[str] = []
    matcher = difflib.SequenceMatcher(a=al, b=bl, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            removed += al[i1:i2]
        if tag in ("replace", "insert"):
            added += bl[j1:j2]
    return removed, added


def _examples(task: JudgeTask, n: int, scale: int) -> list[tuple[dict[str, str], int | float]]:
    base = INPUTS[task.name]
    ratings = [1, scale, 2.5, 2, scale - 1, 1.5, 1, 2, 3, scale]
    return [({k: f"{v} #{i}" for k, v in base.items()}, ratings[i]) for i in range(n)]


def _example_block(task: JudgeTask, table: dict[str, str], examples: list[Any]) -> str:
    """The In-Context Example template of Tables 11/13, filled."""
    parts = []
    for i, (inp, rating) in enumerate(examples, start=1):
        shown = str(int(rating)) if float(rating).is_integer() else str(rating)
        if task.name == "summeval":
            body = (
                f"## Example {i}:\n## Article\n{inp['source']}\n\n"
                f"## The Start of the Summary\n{inp['summary']}\n## The End of the Summary"
            )
        else:
            body = (
                f"## Example {i}:\n## Conversation History\n{inp['context']}\n\n"
                f"## Corresponding Fact\n{inp['fact']}\n\n"
                f"## The Start of the Response\n{inp['response']}\n## The End of the Response"
            )
        parts.append(f"{body}\n\n## Rating\n{shown}")
    return (
        table["examples_intro"]
        + "\n"
        + "\n\n".join(parts)
        + "\n\n"
        + table["examples_outro"].format(aspect="coherence")
    )


# --------------------------------------------------------------------------------------
# Acceptance: the baseline is the MT-Bench prompt of Tables 11 and 13
# --------------------------------------------------------------------------------------
def test_summeval_baseline_is_table_11() -> None:
    task = load_task("summeval")
    got = render_prompt(task, "coherence", baseline_strategy(task), INPUTS["summeval"])
    assert got == SUMMEVAL_BASELINE


def test_topical_chat_baseline_is_table_13() -> None:
    task = load_task("topical_chat")
    got = render_prompt(task, "naturalness", baseline_strategy(task), INPUTS["topical_chat"])
    assert got == TOPICAL_BASELINE


def test_pairwise_baseline_is_the_mt_bench_pairwise_prompt() -> None:
    for name in ("llmbar", "autoj_eval_p", "mtbench_pairs"):
        task = load_task(name)
        got = render_prompt(task, "overall", baseline_strategy(task), PAIR_INPUTS)
        assert got == PAIRWISE_BASELINE


def test_baseline_sentences_of_other_tables() -> None:
    sfhot = load_task("sfhot")
    text = render_prompt(
        sfhot,
        "naturalness",
        baseline_strategy(sfhot),
        {"source": "inform(name='x')", "output": "x is a hotel ."},
    )
    assert text.startswith(
        "## Instruction\nPlease act as an impartial judge and evaluate the quality of a natural "
        "language sentence generated according to a structured data expression displayed below "
        "on its naturalness. Begin your evaluation"
    )
    assert (
        "## Structured Data Expression\ninform(name='x')\n\n## The Start of the Natural "
        "Language Sentence\nx is a hotel .\n## The End of the Natural Language Sentence" in text
    )
    assert (
        "1. Your evaluation should consider the naturalness of the sentence. Naturalness: "
        "Is the sentence naturally written?\n" in text
    )
    hanna = load_task("hanna")
    s = baseline_strategy(hanna).replace(examples=3)
    ex = [({"prompt": "p", "story": "s"}, r) for r in (1, 3, 5)]
    text = render_prompt(hanna, "surprise", s, {"prompt": "P", "story": "S"}, examples=ex)
    assert (
        "\nFollowing these examples, evaluate the story generated according to a prompt "
        "displayed below on its surprise:\n## Prompt\nP\n" in text
    )


# --------------------------------------------------------------------------------------
# Each factor value changes exactly the text its table row names
# --------------------------------------------------------------------------------------
def _cases(task: JudgeTask, table: dict[str, str]) -> list[tuple[str, Any, Callable[..., Any]]]:
    """(factor, value, expectation) where expectation(baseline, crit, crit_at) -> text."""
    aspect = "coherence"
    instr = table["instruction"].format(aspect=aspect)
    base_scale = task.baseline_scale
    assert base_scale is not None
    prefix = table["prefix"].format(max=base_scale)
    rule_1 = table["rule_1"].format(aspect=aspect)
    first_field = task.context_fields[0]
    first_block = first_field.block(INPUTS[task.name][first_field.name])
    judged_head = task.judged[0].block("")[: task.judged[0].block("").index("\n")]

    def scale(v: int) -> Callable[[str], str]:
        def expect(base: str) -> str:
            out = base.replace(prefix, table["prefix"].format(max=v))
            return out.replace(
                task.criteria_text(aspect, base_scale), task.criteria_text(aspect, v)
            )

        return expect

    def examples(n: int) -> Callable[[str], str]:
        def expect(base: str) -> str:
            block = _example_block(task, table, _examples(task, n, base_scale))
            head = first_block.split("\n")[0]
            return base.replace("\n\n" + head + "\n", "\n\n" + block + "\n" + head + "\n", 1)

        return expect

    crit = task.criteria_text(aspect, base_scale)
    cases: list[tuple[str, Any, Callable[..., Any]]] = []
    cases += [("scale", v, scale(v)) for v in SCALES if v != base_scale]
    cases += [("examples", n, examples(n)) for n in (3, 5, 10)]
    cases += [
        ("criteria", "none", lambda b: b.replace(f"{rule_1} {crit}\n", f"{rule_1}\n")),
        (
            "criteria",
            "self",
            lambda b: b.replace(f"{rule_1} {crit}\n", f"{rule_1} {ARTIFACTS['criteria_text']}\n"),
        ),
        (
            "reference",
            "self",
            lambda b: b.replace(instr, f"{instr} {table['reference_1']}").replace(
                "\n\n" + judged_head + "\n",
                "\n\n"
                + table["reference_2"].format(reference=ARTIFACTS["reference"])
                + "\n\n"
                + judged_head
                + "\n",
            ),
        ),
        ("reference", "dialectic", lambda b: b.replace(instr, f"{instr} {table['dialectic']}")),
        ("cot", "none", lambda b: b.replace(prefix, table["none"].format(max=base_scale))),
        ("cot", "suffix", lambda b: b.replace(prefix, table["suffix"].format(max=base_scale))),
        (
            "autocot",
            "on",
            lambda b: b.replace(
                table["rule_2"] + "\n",
                table["rule_2"]
                + "\n\n"
                + table["autocot"].format(steps=ARTIFACTS["autocot_steps"])
                + "\n",
            ),
        ),
        (
            "metrics",
            "on",
            lambda b: b.replace(
                first_block + "\n",
                first_block + "\n\n" + table["metrics"].format(metrics=ARTIFACTS["metrics"]) + "\n",
                1,
            ),
        ),
    ]
    return cases


# Which lines each factor may touch (difflib), besides producing the exact text above.
def _allowed_changes(factor: str, removed: list[str], added: list[str], base: str) -> None:
    td_line = base.splitlines()[1]
    if factor in ("cot", "reference") and removed:
        assert removed == [td_line]
    if factor in ("examples", "autocot", "metrics"):
        assert removed == []  # pure insertions
        assert added
    if factor == "criteria":  # rule 1 and, for multi-line criteria, its "- A score" lines
        assert removed[0].startswith("1. Your evaluation") and len(added) == 1
        assert added[0].startswith("1. Your evaluation")
        assert all(line.startswith("- A score") for line in removed[1:])
    if factor == "scale":
        assert removed[0] == td_line and added[0] != td_line


@pytest.mark.parametrize("name", ["summeval", "topical_chat"])
def test_each_factor_value_changes_exactly_its_table_row(name: str) -> None:
    task = load_task(name)
    table = TABLE_11 if name == "summeval" else TABLE_13
    base_s = baseline_strategy(task)
    inputs = INPUTS[name]
    baseline = render_prompt(task, "coherence", base_s, inputs)
    seen: set[tuple[str, Any]] = set()
    for factor, value, expect in _cases(task, table):
        s = base_s.replace(**{factor: value})
        kwargs = dict(ARTIFACTS)
        if factor == "examples":
            kwargs["examples"] = _examples(task, int(value), int(s["scale"]))
        got = render_prompt(task, "coherence", s, inputs, **kwargs)
        assert got == expect(baseline), f"{factor}={value}"
        removed, added = _diff(baseline, got)
        assert removed or added, f"{factor}={value} changed nothing"
        _allowed_changes(factor, removed, added, baseline)
        seen.add((factor, value))
    # Every non-baseline value of every factor but `order` is covered above.
    space = hpss_space(task)
    expected = {
        (f.name, v)
        for f in space.factors
        for v in f.values
        # `decoding` never changes the prompt (test_decoding.py checks that).
        if f.name not in ("order", "decoding") and v != base_s[f.name]
    }
    assert seen == expected


@pytest.mark.parametrize("name", ["summeval", "topical_chat"])
def test_scale_changes_only_the_output_format_and_scale_named_criteria(name: str) -> None:
    task = load_task(name)
    base_s = baseline_strategy(task)
    baseline = render_prompt(task, "coherence", base_s, INPUTS[name])
    for v in SCALES:
        if v == base_s["scale"]:
            continue
        got = render_prompt(task, "coherence", base_s.replace(scale=v), INPUTS[name])
        removed, added = _diff(baseline, got)
        td_line = baseline.splitlines()[1]
        assert removed[0] == td_line
        assert f"on a scale of 1 to {v} " in added[0] and f"[[{v}]]" in added[0]
        if name == "summeval":
            assert removed == [td_line] and len(added) == 1
        else:  # Topical-Chat's criteria name the ratings of the scale: those lines change too
            assert len(removed) == len(added) == 3
            assert all(line.startswith("- A score of ") for line in removed[1:] + added[1:])
            assert f"- A score of {v} (yes)" in added[2]


@pytest.mark.parametrize("name", ["summeval", "topical_chat"])
def test_order_permutes_the_same_three_components(name: str) -> None:
    task = load_task(name)
    base_s = baseline_strategy(task).replace(
        reference="self", metrics="on", autocot="on", examples=3
    )
    kwargs = dict(ARTIFACTS, examples=_examples(task, 3, int(base_s["scale"])))
    ref = render_components(task, "coherence", base_s, INPUTS[name], **kwargs)
    assert ref["TD"].startswith("## Instruction\n")
    assert ref["ER"].startswith("Here are some rules of the evaluation:\n")
    assert ref["IC"].startswith("Here are some examples and their corresponding ratings:\n")
    lines = sorted(render_prompt(task, "coherence", base_s, INPUTS[name], **kwargs).splitlines())
    for order in ORDERS:
        s = base_s.replace(order=order)
        parts = render_components(task, "coherence", s, INPUTS[name], **kwargs)
        text = render_prompt(task, "coherence", s, INPUTS[name], **kwargs)
        comps = order.split("-")
        assert text == "\n\n".join(parts[c] for c in comps)
        ic_first = comps.index("IC") < comps.index("TD")
        assert parts["ER"] == ref["ER"] and parts["IC"] == ref["IC"]
        if ic_first:  # the authors' code says "displayed above" once the inputs come first
            assert parts["TD"] == ref["TD"].replace("displayed below", "displayed above", 1)
        else:
            assert parts["TD"] == ref["TD"]
        normal = text.replace("displayed above on", "displayed below on")
        assert sorted(normal.splitlines()) == lines


def test_examples_are_rendered_with_their_ratings() -> None:
    task = load_task("summeval")
    s = baseline_strategy(task).replace(examples=3, scale=10)
    ex = [
        ({"source": "A1", "summary": "S1"}, 1),
        ({"source": "A2", "summary": "S2"}, 7.5),
        ({"source": "A3", "summary": "S3"}, 10.0),
    ]
    text = render_prompt(task, "fluency", s, INPUTS["summeval"], examples=ex)
    assert (
        "\n\nHere are some examples and their corresponding ratings:\n"
        "## Example 1:\n## Article\nA1\n\n## The Start of the Summary\nS1\n"
        "## The End of the Summary\n\n## Rating\n1\n\n"
        "## Example 2:\n## Article\nA2\n\n## The Start of the Summary\nS2\n"
        "## The End of the Summary\n\n## Rating\n7.5\n\n"
        "## Example 3:\n## Article\nA3\n\n## The Start of the Summary\nS3\n"
        "## The End of the Summary\n\n## Rating\n10\n\n"
        "Following these examples, evaluate the quality of the summary of the news article "
        "displayed below on its fluency:\n## Article\n" + ARTICLE
    ) in text
    with pytest.raises(ValueError, match="exactly 3"):
        render_prompt(task, "fluency", s, INPUTS["summeval"], examples=ex[:2])
    with pytest.raises(ValueError, match="outside the strategy's scale 1..10"):
        render_prompt(task, "fluency", s, INPUTS["summeval"], examples=[*ex[:2], (ex[2][0], 11)])
    with pytest.raises(ValueError, match="examples\\[0\\] inputs lack"):
        render_prompt(
            task, "fluency", s, INPUTS["summeval"], examples=[({"source": "x"}, 1), *ex[1:]]
        )
    with pytest.raises(ValueError, match="finite number"):
        render_prompt(
            task,
            "fluency",
            s,
            INPUTS["summeval"],
            examples=[({"source": "x", "summary": "y"}, True), *ex[1:]],
        )


def test_pairwise_examples_show_verdicts() -> None:
    task = load_task("autoj_eval_p")
    s = baseline_strategy(task).replace(examples=3)
    ex = [(PAIR_INPUTS, "a"), (PAIR_INPUTS, "tie"), (PAIR_INPUTS, "B")]
    text = render_prompt(task, "overall", s, PAIR_INPUTS, examples=ex)
    assert text.count("## Verdict\n") == 3
    assert "## Verdict\n[[A]]\n\n## Example 2:" in text
    assert "## Verdict\n[[C]]\n\n## Example 3:" in text
    assert (
        "## Verdict\n[[B]]\n\nFollowing these examples, evaluate the quality of the "
        "responses provided by two AI assistants to the user question displayed below:\n"
        "## User Question\n" in text
    )
    with pytest.raises(ValueError, match="not a pairwise label"):
        render_prompt(task, "overall", s, PAIR_INPUTS, examples=[(PAIR_INPUTS, 1)] * 3)


@pytest.mark.parametrize(
    ("cot", "sentence"),
    [
        (
            "none",
            "You must directly output your final verdict without any explanation by "
            'strictly following this format: "[[A]]" if assistant A is better, "[[B]]" if '
            'assistant B is better, and "[[C]]" for a tie.',
        ),
        (
            "suffix",
            "You must output your final verdict first by strictly following this format: "
            '"[[A]]" if assistant A is better, "[[B]]" if assistant B is better, and '
            '"[[C]]" for a tie. And then provide your explanation.',
        ),
    ],
)
def test_pairwise_cot_values(cot: str, sentence: str) -> None:
    task = load_task("llmbar")
    text = render_prompt(task, "overall", baseline_strategy(task).replace(cot=cot), PAIR_INPUTS)
    removed, added = _diff(PAIRWISE_BASELINE, text)
    assert len(removed) == len(added) == 1
    assert added[0].endswith("answers the user's question better. " + sentence)


def test_pairwise_reference_and_metrics_placement() -> None:
    task = load_task("mtbench_pairs")
    s = baseline_strategy(task).replace(reference="self", metrics="on")
    text = render_prompt(task, "overall", s, PAIR_INPUTS, **ARTIFACTS)
    assert (
        "## User Question\nWrite a haiku about rain.\n\n## Questions about Answers\n"
        "Here are some questions about the answers. You can do the evaluation based on thinking "
        "about all the questions.\n1. Is it accurate?\n2. Is it fluent?\n\n"
        "## The Start of Reference Answer\nA REFERENCE OUTPUT\n## The End of Reference Answer\n\n"
        "## The Start of Assistant A's Answer\n"
    ) in text
    assert (
        "better. You will also be given a high-quality reference answer to the user "
        "question. Begin your evaluation" in text
    )


# --------------------------------------------------------------------------------------
# Errors and robustness
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "drop", "artifact"),
    [
        ({"criteria": "self"}, "criteria_text", "self_criteria"),
        ({"autocot": "on"}, "autocot_steps", "autocot_steps"),
        ({"metrics": "on"}, "metrics", "metrics_questions"),
        ({"reference": "self"}, "reference", "self_reference"),
        ({"examples": 5}, "examples", "icl_examples"),
    ],
)
def test_missing_artifact_is_named(change: dict[str, Any], drop: str, artifact: str) -> None:
    task = load_task("summeval")
    s = baseline_strategy(task).replace(**change)
    kwargs = {k: v for k, v in ARTIFACTS.items() if k != drop}
    with pytest.raises(ValueError, match=artifact):
        render_prompt(task, "coherence", s, INPUTS["summeval"], **kwargs)


def test_unused_artifacts_are_ignored() -> None:
    task = load_task("summeval")
    text = render_prompt(
        task, "coherence", baseline_strategy(task), INPUTS["summeval"], **ARTIFACTS
    )
    assert text == SUMMEVAL_BASELINE


def test_bad_inputs_aspect_and_strategy() -> None:
    task = load_task("summeval")
    base = baseline_strategy(task)
    with pytest.raises(ValueError, match=r"lack the field\(s\) \['summary'\]"):
        render_prompt(task, "coherence", base, {"source": "x"})
    with pytest.raises(TypeError, match=r"inputs\['summary'\] must be a string"):
        render_prompt(task, "coherence", base, {"source": "x", "summary": 3})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="Unknown aspect 'helpfulness'"):
        render_prompt(task, "helpfulness", base, INPUTS["summeval"])
    with pytest.raises(ValueError, match="7 is not a value of factor `scale`"):
        render_prompt(task, "coherence", {**base.as_dict(), "scale": 7}, INPUTS["summeval"])
    with pytest.raises(ValueError, match="Unknown factor"):
        render_prompt(load_task("llmbar"), "overall", base, PAIR_INPUTS)


def test_braces_in_inputs_are_harmless() -> None:
    task = load_task("summeval")
    nasty = "def f(x): return {'a': x} {summary} {aspect} {{source}} {0} }{ {"
    inputs = {"source": nasty, "summary": "{criteria} and {max}"}
    s = baseline_strategy(task).replace(metrics="on", reference="self", autocot="on")
    arts = {"metrics": "{metrics}", "reference": "{reference} {", "autocot_steps": "{autocot}"}
    text = render_prompt(task, "coherence", s, inputs, **arts)
    assert f"## Article\n{nasty}\n" in text
    assert "## The Start of the Summary\n{criteria} and {max}\n" in text
    assert "\n{metrics}\n" in text and "\n{reference} {\n" in text and "\n{autocot}\n" in text
    gen = generation_prompt(task, "coherence", "metrics", inputs=inputs, criteria_text="{x}")
    assert f"## Article:\n{nasty}\n" in gen and "summary. {x}\n" in gen


def test_template_filled_equals_rendered_prompt() -> None:
    rng = random.Random(7)
    for name in ("summeval", "topical_chat", "llmbar"):
        task = load_task(name)
        space = hpss_space(task)
        inputs = INPUTS.get(name, PAIR_INPUTS)
        for _ in range(60):
            s = space.from_index(rng.randrange(space.size))
            scale = int(s["scale"]) if "scale" in s else 0
            ex: list[Any] = (
                _examples(task, int(s["examples"]), scale)
                if task.mode == "pointwise"
                else [(PAIR_INPUTS, "a")] * int(s["examples"])
            )
            arts = dict(ARTIFACTS, examples=ex)
            aspect = task.aspect_names[0]
            want = render_prompt(task, aspect, s, inputs, **arts)
            template = render_template(task, aspect, s, **arts)
            assert fill_template(template, inputs) == want
            bare = render_template(task, aspect, s)
            for f in task.input_names:
                assert "{" + f + "}" in bare
            values = {
                **inputs,
                "self_criteria": ARTIFACTS["criteria_text"],
                "autocot_steps": ARTIFACTS["autocot_steps"],
                "metrics_questions": ARTIFACTS["metrics"],
                "self_reference": ARTIFACTS["reference"],
            }
            if int(s["examples"]) == 0:
                assert fill_template(bare, values) == want
            else:
                assert "{icl_examples}" in bare


def test_custom_wording_uses_every_placeholder_where_allowed() -> None:
    raw = tomllib.loads((ROOT / "signatures" / "summeval.toml").read_text(encoding="utf-8"))
    raw["prompt"].update(
        rules_heading="Rules ({position}, {min}-{max}):",
        rules=["Judge the {aspect} of the {Noun}. {criteria}", "Scale is {min}..{max}."],
        examples_intro="Examples for {target} ({max}):",
        examples_outro="Now the {noun}, {aspect}:",
        example_heading="### {Noun} example {number} of {max}",
        example_rating="Score: {rating}/{max}",
        autocot_block="Steps for {aspect}:\n{autocot}",
    )
    task = JudgeTask.from_dict(raw)
    s = baseline_strategy(task).replace(examples=3, autocot="on", scale=10, order="IC-ER-TD")
    ex = [({"source": "a", "summary": "b"}, r) for r in (1, 5, 10)]
    text = render_prompt(task, "coherence", s, INPUTS["summeval"], examples=ex, **ARTIFACTS)
    assert text.startswith("Examples for the summary of the news article (10):\n### Summary ")
    assert "### Summary example 2 of 10\n" in text and "Score: 10/10\n\nNow the summary, " in text
    assert "Rules (above, 1-10):\n1. Judge the coherence of the Summary. Coherence:" in text
    assert "\n2. Scale is 1..10.\n\nSteps for coherence:\n1. Read it." in text
    assert "displayed above on its coherence" in text
    bad = copy.deepcopy(raw)
    bad["prompt"]["examples_outro"] = "Now {position}:"
    with pytest.raises(ValueError, match="prompt.examples_outro"):
        JudgeTask.from_dict(bad)


def test_render_messages_has_the_authors_system_message() -> None:
    task = load_task("summeval")
    msgs = render_messages(task, "coherence", baseline_strategy(task), INPUTS["summeval"])
    assert msgs == [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": SUMMEVAL_BASELINE},
    ]
    silent = task.model_copy(update={"system": ""})
    assert [
        m["role"]
        for m in render_messages(silent, "coherence", baseline_strategy(task), INPUTS["summeval"])
    ] == ["user"]


def test_criteria_for() -> None:
    task = load_task("topical_chat")
    base = baseline_strategy(task)
    assert criteria_for(task, "coherence", base.replace(criteria="none")) == ""
    assert criteria_for(task, "coherence", base.replace(scale=50)) == task.criteria_text(
        "coherence", 50
    )
    assert criteria_for(task, "coherence", base.replace(criteria="self"), "X") == "X"
    with pytest.raises(ValueError, match="self_criteria"):
        criteria_for(task, "coherence", base.replace(criteria="self"))


# --------------------------------------------------------------------------------------
# Generation prompts (Tables 12, 14, 16, 18)
# --------------------------------------------------------------------------------------
TABLE_12_AUTOCOT = """## Instruction
Please act as an impartial judge and evaluate the quality of the summary of the news article on its coherence and rate the summary on a scale of 1 to 10.

Here are some rules of the evaluation:
1. Your evaluation should consider the coherence of the summary. {criteria}
2. Be as objective as possible.

Please generate the evaluation steps for this task without other explanation.
Evaluation Steps:"""  # noqa: E501

TABLE_12_METRICS = """## Instruction
Please act as an impartial judge and evaluate the quality of the summary of the news article displayed below on its coherence. Please propose at most three concise questions about whether a potential summary is a good summary for a given news article on its coherence. Another assistant will evaluate the aspect of the summary by answering all the questions.
Here are some rules of the evaluation:
(1) Your evaluation should consider the coherence of the summary. {criteria}
(2) Outputs should NOT contain more/less than what the instruction asks for, as such outputs do NOT precisely execute the instruction.
## Article:
{article}
## Requirements for Your Output:
(1) The questions should **specifically** target the given news article instead of some general standards so that the questions may revolve around key points of the news article.
(2) You should directly give the questions without any other words.
(3) Questions are presented from most important to least important."""  # noqa: E501


def test_generation_prompts_are_table_12() -> None:
    task = load_task("summeval")
    crit = criteria_for(task, "coherence", baseline_strategy(task))
    assert crit == SUMMEVAL_COHERENCE
    got = generation_prompt(task, "coherence", "autocot", scale=10, criteria_text=crit)
    assert got == TABLE_12_AUTOCOT.replace("{criteria}", crit)
    got = generation_prompt(
        task, "coherence", "metrics", criteria_text=crit, inputs=INPUTS["summeval"]
    )
    assert got == TABLE_12_METRICS.replace("{criteria}", crit).replace("{article}", ARTICLE)
    got = generation_prompt(task, "coherence", "reference", inputs=INPUTS["summeval"])
    assert got == f"Please summarize the following text: {ARTICLE}\nSummary:"
    # No criteria: the rule ends after the aspect (the "-" of the table: empty string).
    got = generation_prompt(task, "coherence", "autocot", scale=10)
    assert "1. Your evaluation should consider the coherence of the summary.\n" in got


def test_generation_prompts_of_tables_14_16_18() -> None:
    tc = load_task("topical_chat")
    assert generation_prompt(tc, "coherence", "reference", inputs=INPUTS["topical_chat"]) == (
        "Please output the response for the next turn in the conversation. Conversation "
        f"History: {CONTEXT}\nResponse:"
    )
    sf = load_task("sfres")
    assert generation_prompt(
        sf, "naturalness", "reference", inputs={"source": "inform(food=thai)", "output": "o"}
    ) == (
        "Please generate a natural language sentence generated according to a structured data "
        "expression. Expression: inform(food=thai)\nSentence:"
    )
    auto = generation_prompt(sf, "naturalness", "autocot", scale=5, criteria_text="C")
    assert auto.startswith(
        "## Instruction\nPlease act as an impartial judge and evaluate the quality of a natural "
        "language sentence generated according to a structured data expression displayed below "
        "on its naturalness and rate the sentence on a scale of 1 to 5.\n\n"
    )
    hanna = load_task("hanna")
    assert generation_prompt(
        hanna, "empathy", "reference", inputs={"prompt": "A dragon.", "story": "s"}
    ) == ("Please generate a story according to the given prompt: A dragon.\nStory:")
    metrics = generation_prompt(hanna, "empathy", "metrics", inputs={"prompt": "A dragon."})
    assert "## Prompt:\nA dragon.\n## Requirements for Your Output:\n" in metrics
    assert "(1) Your evaluation should consider the empathy of the story.\n" in metrics


def test_criteria_generation_prompt() -> None:
    tc = load_task("topical_chat")
    got = generation_prompt(tc, "groundedness", "criteria", scale=3)
    assert "rate the response on a scale of 0 to 1." in got
    assert got.endswith("Evaluation Criteria:")
    se = load_task("summeval")
    got = generation_prompt(se, "fluency", "criteria")
    assert "fluency" in got and "scale" not in got
    with pytest.raises(ValueError, match="shows the rating scale"):
        generation_prompt(tc, "coherence", "criteria")
    with pytest.raises(ValueError, match="pointwise only"):
        generation_prompt(load_task("llmbar"), "overall", "criteria")


def test_generation_prompt_errors() -> None:
    task = load_task("summeval")
    with pytest.raises(ValueError, match="Allowed"):
        generation_prompt(task, "coherence", "rubric")
    with pytest.raises(ValueError, match="give inputs="):
        generation_prompt(task, "coherence", "metrics")
    with pytest.raises(ValueError, match="lack the field"):
        generation_prompt(task, "coherence", "reference", inputs={"summary": "s"})
    with pytest.raises(ValueError, match="not a scale value"):
        generation_prompt(task, "coherence", "autocot", scale=7)
    with pytest.raises(ValueError, match="has no scale"):
        generation_prompt(load_task("llmbar"), "overall", "autocot", scale=5)
    pair = generation_prompt(
        load_task("llmbar"), "overall", "metrics", criteria_text="C", inputs=PAIR_INPUTS
    )
    assert "## User Question:\nWrite a haiku about rain.\n" in pair


def test_strategy_objects_and_mappings_are_accepted() -> None:
    task = load_task("summeval")
    s = baseline_strategy(task)
    assert isinstance(s, Strategy)
    assert render_prompt(task, "coherence", s.as_dict(), INPUTS["summeval"]) == SUMMEVAL_BASELINE
