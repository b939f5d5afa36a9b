"""Defaults of a task signature's boilerplate: the prompt wording, and what its fields imply.

The judge prompt's wording defaults to the HPSS templates (Tables 11, 13, 15, 17) of the
task's mode, written with the task's nouns.

A new pointwise task needs only its name, its inputs, the judged field, the aspects with
their criteria and the human score range (``docs/tasks.md``, "A minimal task"). Everything
else gets a default here, written from what the file does say: the judged field's name is the
noun, the context fields' labels name what the judge is given, and the generation prompts
(references, AutoCoT steps, metrics questions, self-generated criteria) follow the wording
of the shipped SummEval signature (HPSS Table 12) with the task's own nouns.

Defaults are filled into the raw TOML data before validation; anything the file gives wins,
and malformed data is left alone for the validator to report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ._vocabulary import SCALES

__all__ = ["fill_defaults", "fill_task_defaults"]

# --------------------------------------------------------------------------------------
# The default wording of the judge prompt (HPSS Tables 11, 13, 15, 17)
# --------------------------------------------------------------------------------------
_POINTWISE_COT: Final[Mapping[str, str]] = {
    "cot_none": (
        "You must directly output your rating of the {noun} on a scale of {min} to {max} "
        'without any explanation by strictly following this format: "[[rating]]", for '
        'example: "Rating: [[{max}]]".'
    ),
    "cot_prefix": (
        "Begin your evaluation by providing a short explanation. After providing your "
        "explanation, you must rate the {noun} on a scale of {min} to {max} by strictly "
        'following this format: "[[rating]]", for example: "Rating: [[{max}]]".'
    ),
    "cot_suffix": (
        "You must rate the {noun} on a scale of {min} to {max} first by strictly following "
        'this format: "[[rating]]", for example: "Rating: [[{max}]]". And then provide your '
        "explanation."
    ),
}

_VERDICT_FORMAT: Final = (
    'by strictly following this format: "[[A]]" if assistant A is better, "[[B]]" if '
    'assistant B is better, and "[[C]]" for a tie.'
)

_PAIRWISE_COT: Final[Mapping[str, str]] = {
    "cot_none": (
        "You must directly output your final verdict without any explanation " + _VERDICT_FORMAT
    ),
    "cot_prefix": (
        "Begin your evaluation by comparing the two responses and provide a short "
        "explanation. After providing your explanation, output your final verdict "
        + _VERDICT_FORMAT
    ),
    "cot_suffix": (
        "You must output your final verdict first "
        + _VERDICT_FORMAT
        + " And then provide your explanation."
    ),
}

_COMMON_DEFAULTS: Final[Mapping[str, Any]] = {
    "instruction_heading": "## Instruction",
    "instruction": (
        "Please act as an impartial judge and evaluate the quality of {target} displayed "
        "{position} on its {aspect}."
    ),
    "rules_heading": "Here are some rules of the evaluation:",
    "autocot_block": "Evaluation Steps:\n{autocot}",
    "example_heading": "## Example {number}:",
    "metrics_block": (
        "## Questions about {Noun}\nHere are some questions about the {noun}. You can do "
        "the evaluation based on thinking about all the questions.\n{metrics}"
    ),
    "reference_block": (
        "## The Start of Reference {Noun}\n{reference}\n## The End of Reference {Noun}"
    ),
}

_MODE_DEFAULTS: Final[Mapping[str, Mapping[str, Any]]] = {
    "pointwise": {
        **_POINTWISE_COT,
        "rules": (
            "Your evaluation should consider the {aspect} of the {noun}. {criteria}",
            "Be as objective as possible.",
        ),
        "examples_intro": "Here are some examples and their corresponding ratings:",
        "examples_outro": (
            "Following these examples, evaluate the quality of {target} displayed below on "
            "its {aspect}:"
        ),
        "example_rating": "## Rating\n{rating}",
    },
    "pairwise": {
        **_PAIRWISE_COT,
        "rules": (
            "Your evaluation should consider the {aspect} of their responses. {criteria}",
            "Avoid any position biases and ensure that the order in which the responses were "
            "presented does not influence your decision.",
            "Do not allow the length of the responses to influence your evaluation.",
            "Do not favor certain names of the assistants.",
            "Be as objective as possible.",
        ),
        "examples_intro": "Here are some examples and their corresponding verdicts:",
        "examples_outro": "Following these examples, evaluate the quality of {target} "
        "displayed below:",
        "example_rating": "## Verdict\n{rating}",
    },
}


def fill_defaults(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a parsed signature) with every default filled in: the derived fields of
    :func:`fill_task_defaults`, the noun in headings, and the prompt wording of the mode."""
    out = fill_task_defaults(data)
    noun = out.get("noun")
    if "noun_title" not in out and isinstance(noun, str) and noun:
        out["noun_title"] = noun[:1].upper() + noun[1:]
    mode = out.get("mode")
    # An invalid mode is reported by its own field; the pointwise defaults then keep the
    # prompt section from adding "Field required" noise.
    defaults = (
        _MODE_DEFAULTS.get(mode, _MODE_DEFAULTS["pointwise"])
        if isinstance(mode, str)
        else _MODE_DEFAULTS["pointwise"]
    )
    prompt = out.get("prompt", {})
    if isinstance(prompt, Mapping):
        merged = {**_COMMON_DEFAULTS, **defaults}
        if "metrics_after" not in prompt:
            default_after = _default_metrics_after(out)
            if default_after is not None:
                merged["metrics_after"] = default_after
        merged.update(prompt)
        out["prompt"] = merged
    return out


def _default_metrics_after(data: Mapping[str, Any]) -> str | None:
    """The last context field before the first judged field (raw TOML data)."""
    inputs = data.get("inputs")
    judged = data.get("judged_fields")
    if not isinstance(inputs, list | tuple) or not isinstance(judged, list | tuple):
        return None
    last: str | None = None
    for item in inputs:
        name = item.get("name") if isinstance(item, Mapping) else None
        if not isinstance(name, str):
            return None
        if name in judged:
            break
        last = name
    return last


# --------------------------------------------------------------------------------------
# Defaults derived from the task's own fields
# --------------------------------------------------------------------------------------


def _words(name: str) -> str:
    return name.replace("_", " ").strip()


def _label(name: str) -> str:
    words = _words(name)
    return words[:1].upper() + words[1:]


def _inputs(data: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The raw ``inputs`` with default labels, or ``None`` when malformed."""
    raw = data.get("inputs")
    if not isinstance(raw, list | tuple) or not raw:
        return None
    out = []
    for item in raw:
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            return None
        item = dict(item)
        item.setdefault("label", _label(item["name"]))
        out.append(item)
    return out


def _baseline_scale(score_range: Any) -> int | None:
    """The smallest scale value that holds the human range's maximum (else the largest)."""
    try:
        hi = float(score_range[1])
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    return next((s for s in SCALES if s >= hi), SCALES[-1])


def _list(names: list[str]) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def fill_task_defaults(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a parsed signature) with the defaults of the keys it leaves out."""
    out = dict(data)
    out.setdefault("mode", "pointwise")
    mode = out["mode"]
    inputs = _inputs(out)
    if inputs is None or mode not in ("pointwise", "pairwise"):
        return out
    out["inputs"] = inputs
    names = [f["name"] for f in inputs]
    pairwise = mode == "pairwise"
    if "judged_fields" not in out:
        out["judged_fields"] = names[-2:] if pairwise else names[-1:]
    judged = out["judged_fields"]
    if not isinstance(judged, list | tuple) or not all(isinstance(j, str) for j in judged):
        return out
    context = [f for f in inputs if f["name"] not in judged]
    if not context:
        return out
    labels = {f["name"]: str(f["label"]) for f in inputs}
    if "noun" not in out:
        out["noun"] = "response" if pairwise else _words(judged[0]).lower()
    noun = out["noun"]
    if not isinstance(noun, str) or not noun:
        return out
    ctx_phrase = _list([f"the {labels[f['name']].lower()}" for f in context])
    if "target" not in out:
        out["target"] = (
            f"the responses of two AI assistants to {ctx_phrase}"
            if pairwise
            else f"the {noun} to {ctx_phrase}"
        )
    if not pairwise:
        out.setdefault("correlation_level", "dataset")
        if "baseline_scale" not in out:
            scale = _baseline_scale(out.get("score_range"))
            if scale is not None:
                out["baseline_scale"] = scale
    prompt = dict(out["prompt"]) if isinstance(out.get("prompt"), Mapping) else None
    if prompt is not None or "prompt" not in out:
        prompt = prompt or {}
        if pairwise:
            prompt.setdefault(
                "reference_intro",
                f"You will also be given a high-quality reference {noun} to {ctx_phrase}.",
            )
            prompt.setdefault(
                "dialectic",
                f"Please generate your own {noun} to {ctx_phrase} "
                f"first and take into account your own {noun} to "
                f"evaluate the quality of the two given {noun}s.",
            )
        else:
            prompt.setdefault(
                "reference_intro",
                f"You will be given {ctx_phrase}, the {{noun}}, "
                "and a high-quality reference {noun}.",
            )
            prompt.setdefault(
                "dialectic",
                f"Please generate your own {{noun}} to {ctx_phrase} "
                "first and take into account your own {noun} to "
                "evaluate the quality of the given {noun}.",
            )
        out["prompt"] = prompt
    generation = dict(out["generation"]) if isinstance(out.get("generation"), Mapping) else None
    if generation is not None or "generation" not in out:
        out["generation"] = _generation(generation or {}, context, labels, pairwise)
    return out


def _generation(
    gen: dict[str, Any], context: list[dict[str, Any]], labels: dict[str, str], pairwise: bool
) -> dict[str, Any]:
    shown = "\n\n".join(f"## {labels[f['name']]}\n{{{f['name']}}}" for f in context)
    gen.setdefault(
        "reference",
        f"Please write a high-quality {{noun}} for the following input.\n\n{shown}\n\n{{Noun}}:",
    )
    if pairwise:
        rate, rules = (
            "on their {aspect} and choose the better response",
            "1. Your evaluation should consider the {aspect} of their responses. "
            "{criteria}\n2. Avoid any position biases.\n3. Be as objective as "
            "possible.",
        )
    else:
        rate, rules = (
            "on its {aspect} and rate the {noun} on a scale of {min} to {max}",
            "1. Your evaluation should consider the {aspect} of the {noun}. "
            "{criteria}\n2. Be as objective as possible.",
        )
    gen.setdefault(
        "autocot",
        "## Instruction\nPlease act as an impartial judge and evaluate "
        f"the quality of {{target}} {rate}.\n\nHere are some rules of the "
        f"evaluation:\n{rules}\n\nPlease generate the evaluation steps "
        "for this task without other explanation.\nEvaluation Steps:",
    )
    gen.setdefault(
        "metrics",
        "## Instruction\nPlease act as an impartial judge and evaluate "
        "the quality of {target} displayed below on its {aspect}. Please "
        "propose at most three concise questions about whether a "
        "potential {noun} is a good {noun} for the given input on its "
        "{aspect}. Another assistant will evaluate the aspect of the "
        "{noun} by answering all the questions.\nHere are some rules of "
        "the evaluation:\n(1) Your evaluation should consider the "
        "{aspect} of the {noun}. {criteria}\n(2) Outputs should NOT "
        "contain more/less than what the instruction asks for, as such "
        f"outputs do NOT precisely execute the instruction.\n{shown}\n"
        "## Requirements for Your Output:\n(1) The questions should "
        "**specifically** target the given input instead of some general "
        "standards.\n(2) You should directly give the questions without "
        "any other words.\n(3) Questions are presented from most "
        "important to least important.",
    )
    if not pairwise:
        gen.setdefault(
            "criteria",
            "## Instruction\nPlease act as an impartial judge and "
            "evaluate the quality of {target} on its {aspect}.\n\n"
            "Please generate the evaluation criteria of {aspect} for "
            "this task without other explanation: one concise "
            "definition of the {aspect} of the {noun}, starting with "
            '"{aspect}:".\nEvaluation Criteria:',
        )
    return gen
