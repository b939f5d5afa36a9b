"""Render HPSS judge prompts and artifact generation prompts (Tables 11-18 of the paper).

A judge prompt has three components, placed by the ``order`` factor and separated by one
blank line:

* **TD** (Task Description): ``## Instruction``, then one paragraph: the instruction, the
  reference sentence (``reference=self``) or the dialectic sentence
  (``reference=dialectic``), and the chain-of-thought / output-format sentence (``cot``,
  with the ``scale``).
* **ER** (Evaluation Rules): the numbered rules, the first naming the aspect and holding
  the criteria (``criteria``); then ``Evaluation Steps:`` (``autocot=on``).
* **IC** (Input Content): the in-context examples (``examples``), then the input fields in
  task order, the metrics questions after the ``metrics_after`` field (``metrics=on``) and
  the self-generated reference just before the judged field (``reference=self``).

A defended strategy (``defence`` ``tagged`` or ``sandwich``, :mod:`._defences`) adds one
last evaluation rule and tags the judged field(s); ``sandwich`` ends the prompt with a
reminder after the three components.

Inputs and artifacts are inserted verbatim and never parsed as templates, so text with
braces (code, JSON) is harmless.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final, Literal, TypeAlias

from judgeopt.search import Strategy, Value

from ._defences import defence_reminder, defence_rule, defended_text
from ._factors import hpss_strategy
from ._task import JudgeTask
from ._template import placeholders, substitute
from ._vocabulary import SCALES, order_components

__all__ = [
    "GENERATION_KINDS",
    "VERDICTS",
    "Example",
    "criteria_for",
    "fill_template",
    "generation_prompt",
    "render_components",
    "render_messages",
    "render_prompt",
    "render_template",
]

GenerationKind: TypeAlias = Literal["criteria", "autocot", "metrics", "reference"]

GENERATION_KINDS: Final[tuple[str, ...]] = ("criteria", "autocot", "metrics", "reference")
"""The ``kind`` values of :func:`generation_prompt`."""

VERDICTS: Final[Mapping[str, str]] = {
    "a": "[[A]]",
    "b": "[[B]]",
    "tie": "[[C]]",
    "A": "[[A]]",
    "B": "[[B]]",
    "C": "[[C]]",
}
"""Pairwise example labels (data labels ``a``/``b``/``tie`` or verdict letters) -> verdict."""

Example: TypeAlias = tuple[Mapping[str, str], int | float | str]
"""One in-context example: its inputs and its human rating (pairwise: its label)."""


# --------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------
def criteria_for(
    task: JudgeTask,
    aspect: str,
    strategy: Mapping[str, Value],
    self_criteria: str | None = None,
) -> str:
    """The criteria text a strategy shows: ``""``, the human criteria, or the generated ones.

    Use it both to render the judge prompt and to fill ``{criteria}`` in the AutoCoT and
    metrics generation prompts, so that both see the same criteria.

    Args:
        task: The task.
        aspect: The aspect name.
        strategy: The strategy (a :class:`Strategy` or a mapping of factor values).
        self_criteria: The ``self_criteria`` artifact; required when ``criteria=self``.

    Raises:
        ValueError: On an unknown aspect, an invalid strategy, or ``criteria=self`` without
            ``self_criteria``.
    """
    s = _strategy(task, strategy)
    task.aspect(aspect)
    mode = s["criteria"]
    if mode == "none":
        return ""
    if mode == "human":
        return task.criteria_text(aspect, _scale(task, s))
    if self_criteria is None:
        raise ValueError(
            "criteria=self needs the `self_criteria` artifact (pass criteria_text=... / "
            "self_criteria=...)."
        )
    return self_criteria


def render_components(
    task: JudgeTask,
    aspect: str,
    strategy: Mapping[str, Value],
    inputs: Mapping[str, str],
    *,
    criteria_text: str | None = None,
    autocot_steps: str | None = None,
    metrics: str | None = None,
    reference: str | None = None,
    examples: Sequence[Example] = (),
) -> dict[str, str]:
    """The three prompt components ``{"TD": ..., "ER": ..., "IC": ...}`` of a judge prompt.

    Same arguments as :func:`render_prompt`; the prompt is the components joined with a
    blank line in the strategy's ``order``.
    """
    s = _strategy(task, strategy)
    task.aspect(aspect)
    _check_inputs(task, inputs, "inputs")
    return _components(
        task,
        aspect,
        s,
        inputs,
        criteria_text=criteria_text,
        autocot_steps=autocot_steps,
        metrics=metrics,
        reference=reference,
        examples_text=_examples_text(task, aspect, s, examples),
    )


def render_prompt(
    task: JudgeTask,
    aspect: str,
    strategy: Mapping[str, Value],
    inputs: Mapping[str, str],
    *,
    criteria_text: str | None = None,
    autocot_steps: str | None = None,
    metrics: str | None = None,
    reference: str | None = None,
    examples: Sequence[Example] = (),
) -> str:
    """The judge's user prompt for one sample under a strategy.

    Args:
        task: The task.
        aspect: The aspect to judge (one of ``task.aspects``).
        strategy: The strategy: a :class:`Strategy` of :func:`hpss_space` or a mapping with
            one value per factor.
        inputs: The sample's input texts by field name (extra keys are ignored).
        criteria_text: The ``self_criteria`` artifact; required when ``criteria=self``.
        autocot_steps: The ``autocot_steps`` artifact; required when ``autocot=on``.
        metrics: The sample's ``metrics_questions`` artifact; required when ``metrics=on``.
        reference: The sample's ``self_reference`` artifact; required when
            ``reference=self``.
        examples: The ``icl_examples`` artifact: exactly ``strategy["examples"]`` pairs
            ``(inputs, rating)``, the rating on the strategy's scale (pairwise: the label
            ``"a"``/``"b"``/``"tie"``). Artifacts the strategy does not use are ignored.

    Returns:
        The prompt text.

    Raises:
        ValueError: On an unknown aspect, an invalid strategy, a missing input field, a
            missing artifact (the message names it), a wrong number of examples or an
            example rating outside the scale.
        TypeError: If an input text is not a string.
    """
    parts = render_components(
        task,
        aspect,
        strategy,
        inputs,
        criteria_text=criteria_text,
        autocot_steps=autocot_steps,
        metrics=metrics,
        reference=reference,
        examples=examples,
    )
    return _join(task, aspect, parts, _strategy(task, strategy))


def render_messages(
    task: JudgeTask,
    aspect: str,
    strategy: Mapping[str, Value],
    inputs: Mapping[str, str],
    *,
    criteria_text: str | None = None,
    autocot_steps: str | None = None,
    metrics: str | None = None,
    reference: str | None = None,
    examples: Sequence[Example] = (),
) -> list[dict[str, str]]:
    """The chat messages for one sample: the task's system message, then the user prompt.

    The HPSS authors' inference code sends ``{"role": "system", "content": "You are a
    helpful assistant."}`` before the prompt; that is the default ``system`` of a task.
    A task with ``system = ""`` gets the user message only. Same arguments as
    :func:`render_prompt`.

    Returns:
        ``[{"role": "system", "content": ...}, {"role": "user", "content": prompt}]``.
    """
    prompt = render_prompt(
        task,
        aspect,
        strategy,
        inputs,
        criteria_text=criteria_text,
        autocot_steps=autocot_steps,
        metrics=metrics,
        reference=reference,
        examples=examples,
    )
    messages = [{"role": "system", "content": task.system}] if task.system else []
    messages.append({"role": "user", "content": prompt})
    return messages


def render_template(
    task: JudgeTask,
    aspect: str,
    strategy: Mapping[str, Value],
    *,
    criteria_text: str | None = None,
    autocot_steps: str | None = None,
    metrics: str | None = None,
    reference: str | None = None,
    examples: Sequence[Example] | None = None,
) -> str:
    """The judge prompt with placeholders for the sample: ``{source}``, ``{summary}``...

    For ``judgeopt show`` and exported programs. Input fields become ``{<field>}``;
    artifacts not given become placeholders named after the artifact: ``{self_criteria}``,
    ``{autocot_steps}``, ``{metrics_questions}``, ``{self_reference}``, ``{icl_examples}``
    (only where the strategy uses them). Fill the result with :func:`fill_template`, never
    with ``str.format`` (criteria and artifacts may contain braces).

    Raises:
        ValueError: On an unknown aspect, an invalid strategy or invalid examples.
    """
    s = _strategy(task, strategy)
    task.aspect(aspect)
    fields = {f.name: "{" + f.name + "}" for f in task.inputs}
    examples_text: str | None
    if examples is None and int(s["examples"]) > 0:
        examples_text = _examples_block(task, aspect, _scale(task, s), "{icl_examples}")
    else:
        examples_text = _examples_text(task, aspect, s, examples or ())
    parts = _components(
        task,
        aspect,
        s,
        fields,
        criteria_text="{self_criteria}" if criteria_text is None else criteria_text,
        autocot_steps="{autocot_steps}" if autocot_steps is None else autocot_steps,
        metrics="{metrics_questions}" if metrics is None else metrics,
        reference="{self_reference}" if reference is None else reference,
        examples_text=examples_text,
    )
    return _join(task, aspect, parts, s)


def fill_template(template: str, values: Mapping[str, str]) -> str:
    """Fill the placeholders of a :func:`render_template` result in one safe pass.

    Only ``{name}`` placeholders whose name is in ``values`` are replaced; inserted text is
    never re-scanned, and every other brace is left alone.

    Args:
        template: A template from :func:`render_template`.
        values: Field or artifact name -> text.

    Returns:
        The filled prompt.
    """
    for k, v in values.items():
        if not isinstance(v, str):
            raise TypeError(f"Value of {k!r} must be a string; got {type(v).__name__}.")
    return substitute(template, values, keep_unknown=True, collapse_empty=False)


def generation_prompt(
    task: JudgeTask,
    aspect: str,
    kind: str,
    *,
    scale: int | None = None,
    criteria_text: str | None = None,
    inputs: Mapping[str, str] | None = None,
) -> str:
    """The prompt that generates an artifact (Tables 12, 14, 16, 18).

    ``kind`` is ``"criteria"`` (artifact ``self_criteria``; pointwise only), ``"autocot"``
    (``autocot_steps``), ``"metrics"`` (``metrics_questions``) or ``"reference"``
    (``self_reference``); :data:`judgeopt.judge._factors.ARTIFACT_KINDS` maps artifact
    names to kinds.

    Args:
        task: The task.
        aspect: The aspect name.
        kind: What to generate.
        scale: The strategy's scale; required when the template shows the rating scale
            (pointwise AutoCoT, and criteria of tasks whose criteria name the scale).
        criteria_text: The criteria shown in the prompt (``{criteria}``): use
            :func:`criteria_for` so that it matches the judge prompt. ``None`` or ``""``
            shows no criteria.
        inputs: The sample's input texts; required for ``"metrics"`` and ``"reference"``.

    Returns:
        The prompt text (send it as the user message; the task's ``system`` message applies
        as for the judge).

    Raises:
        ValueError: On an unknown kind or aspect, ``"criteria"`` for a pairwise task, a
            missing or unknown scale, or missing input fields.
    """
    if kind not in GENERATION_KINDS:
        raise ValueError(f"Unknown generation kind {kind!r}. Allowed: {list(GENERATION_KINDS)!r}.")
    task.aspect(aspect)
    template = getattr(task.generation, kind)
    if template is None:
        raise ValueError(
            f"Task `{task.name}` is {task.mode}: it has no self-generated criteria "
            "(generation kind 'criteria' is pointwise only)."
        )
    used = placeholders(template)
    if scale is not None:
        if task.mode != "pointwise":
            raise ValueError(f"Task `{task.name}` is pairwise: it has no scale (got {scale!r}).")
        if isinstance(scale, bool) or scale not in SCALES:
            raise ValueError(f"scale {scale!r} is not a scale value; allowed: {list(SCALES)!r}.")
    needs_scale = bool(used & {"min", "max"})
    if needs_scale and scale is None:
        raise ValueError(
            f"The {kind!r} generation prompt of `{task.name}` shows the rating scale: give "
            f"scale=, one of {list(SCALES)!r}."
        )
    values = task.text_values(aspect, scale if needs_scale else None)
    values["criteria"] = criteria_text or ""
    fields = [f.name for f in task.inputs if f.name in used]
    if fields:
        if inputs is None:
            raise ValueError(
                f"The {kind!r} generation prompt of `{task.name}` shows the input field(s) "
                f"{fields!r}: give inputs=."
            )
        _check_inputs(task, inputs, "inputs", names=fields)
        values.update({f: inputs[f] for f in fields})
    return substitute(template, values)


# --------------------------------------------------------------------------------------
# Internals
# --------------------------------------------------------------------------------------
def _strategy(task: JudgeTask, strategy: Mapping[str, Value]) -> Strategy:
    if not isinstance(strategy, Mapping):
        raise TypeError(
            f"strategy must be a Strategy or a mapping of factor values; got "
            f"{type(strategy).__name__}."
        )
    return hpss_strategy(task, strategy)


def _scale(task: JudgeTask, s: Strategy) -> int | None:
    if task.mode != "pointwise":
        return None
    value = s["scale"]
    if not isinstance(value, int):  # pragma: no cover - the space only has ints
        raise TypeError(f"scale must be an int; got {value!r}.")
    return value


def _check_inputs(
    task: JudgeTask,
    inputs: Mapping[str, str],
    what: str,
    names: Sequence[str] | None = None,
) -> None:
    if not isinstance(inputs, Mapping):
        raise TypeError(f"{what} must be a mapping field -> text; got {type(inputs).__name__}.")
    wanted = list(task.input_names) if names is None else list(names)
    missing = [n for n in wanted if n not in inputs]
    if missing:
        raise ValueError(
            f"{what} lack the field(s) {missing!r} of task `{task.name}`; its fields are "
            f"{list(task.input_names)!r} (given: {sorted(inputs)!r})."
        )
    for n in wanted:
        if not isinstance(inputs[n], str):
            raise TypeError(f"{what}[{n!r}] must be a string; got {type(inputs[n]).__name__}.")


def _components(
    task: JudgeTask,
    aspect: str,
    s: Strategy,
    inputs: Mapping[str, str],
    *,
    criteria_text: str | None,
    autocot_steps: str | None,
    metrics: str | None,
    reference: str | None,
    examples_text: str | None,
) -> dict[str, str]:
    p = task.prompt
    scale = _scale(task, s)
    values = task.text_values(aspect, scale)
    td_first = _td_before_ic(str(s["order"]))
    values["position"] = "below" if td_first else "above"

    # TD: instruction, reference / dialectic sentence, CoT sentence in one paragraph.
    sentences = [substitute(p.instruction, values)]
    if s["reference"] == "self":
        sentences.append(substitute(p.reference_intro, values))
    elif s["reference"] == "dialectic":
        sentences.append(substitute(p.dialectic, values))
    sentences.append(substitute(getattr(p, f"cot_{s['cot']}"), values))
    td = substitute(p.instruction_heading, values) + "\n" + " ".join(x for x in sentences if x)

    # ER: numbered rules (one holds the criteria), then the AutoCoT steps.
    crit = criteria_for(task, aspect, s, criteria_text)
    rule_values = {**values, "criteria": crit}
    rule_texts = [substitute(r, rule_values) for r in p.rules]
    guard = defence_rule(_defence(s), values)
    if guard is not None:
        rule_texts.append(guard)
    rules = [f"{i}. {text}" for i, text in enumerate(rule_texts, start=1)]
    er = substitute(p.rules_heading, values) + "\n" + "\n".join(rules)
    if s["autocot"] == "on":
        if autocot_steps is None:
            raise ValueError("autocot=on needs the `autocot_steps` artifact (autocot_steps=...).")
        er += "\n\n" + substitute(p.autocot_block, {**values, "autocot": autocot_steps})

    # IC: examples, then the fields with the metrics and reference blocks.
    metrics_block = None
    if s["metrics"] == "on":
        if metrics is None:
            raise ValueError("metrics=on needs the `metrics_questions` artifact (metrics=...).")
        metrics_block = substitute(p.metrics_block, {**values, "metrics": metrics})
    reference_block = None
    if s["reference"] == "self":
        if reference is None:
            raise ValueError("reference=self needs the `self_reference` artifact (reference=...).")
        reference_block = substitute(p.reference_block, {**values, "reference": reference})
    blocks: list[str] = []
    first_judged = task.judged_fields[0]
    for f in task.inputs:
        if f.name == first_judged and reference_block is not None:
            blocks.append(reference_block)
        text = inputs[f.name]
        blocks.append(
            f.block(defended_text(text, _defence(s)) if f.name in task.judged_fields else text)
        )
        if f.name == p.metrics_after and metrics_block is not None:
            blocks.append(metrics_block)
    ic = "\n\n".join(blocks)
    if int(s["examples"]) > 0:
        if examples_text is None:  # pragma: no cover - callers always pass it
            raise ValueError("examples > 0 needs the `icl_examples` artifact (examples=...).")
        ic = examples_text + "\n" + ic
    return {"TD": td, "ER": er, "IC": ic}


def _join(task: JudgeTask, aspect: str, parts: Mapping[str, str], s: Strategy) -> str:
    prompt = "\n\n".join(parts[c] for c in order_components(str(s["order"])))
    reminder = defence_reminder(_defence(s), task.text_values(aspect, _scale(task, s)))
    return prompt if reminder is None else prompt + "\n\n" + reminder


def _defence(s: Strategy) -> str:
    return str(s["defence"]) if "defence" in s else "none"


def _td_before_ic(order: str) -> bool:
    comps = order_components(order)
    return comps.index("TD") < comps.index("IC")


def _examples_block(task: JudgeTask, aspect: str, scale: int | None, body: str) -> str:
    p = task.prompt
    values = task.text_values(aspect, scale)
    return (
        substitute(p.examples_intro, values)
        + "\n"
        + body
        + "\n\n"
        + substitute(p.examples_outro, values)
    )


def _examples_text(
    task: JudgeTask, aspect: str, s: Strategy, examples: Sequence[Example]
) -> str | None:
    k = int(s["examples"])
    if k == 0:
        return None
    if isinstance(examples, str | bytes) or not isinstance(examples, Sequence):
        raise TypeError("examples must be a sequence of (inputs, rating) pairs.")
    if len(examples) != k:
        if not examples:
            raise ValueError(
                f"examples={k} needs the `icl_examples` artifact: {k} (inputs, rating) pairs "
                "(examples=...)."
            )
        raise ValueError(
            f"examples={k} needs exactly {k} in-context examples; got {len(examples)}."
        )
    p = task.prompt
    scale = _scale(task, s)
    values = task.text_values(aspect, scale)
    rendered = []
    for i, item in enumerate(examples, start=1):
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise TypeError(f"examples[{i - 1}] must be a pair (inputs, rating); got {item!r}.")
        ex_inputs, rating = item
        _check_inputs(task, ex_inputs, f"examples[{i - 1}] inputs")
        head = substitute(p.example_heading, {**values, "number": str(i)})
        fields = "\n\n".join(f.block(ex_inputs[f.name]) for f in task.inputs)
        shown = _rating_text(task, aspect, scale, rating, i - 1)
        tail = substitute(p.example_rating, {**values, "rating": shown})
        rendered.append(f"{head}\n{fields}\n\n{tail}")
    return _examples_block(task, aspect, scale, "\n\n".join(rendered))


def _rating_text(
    task: JudgeTask, aspect: str, scale: int | None, rating: object, index: int
) -> str:
    if task.mode == "pairwise":
        if not isinstance(rating, str) or rating not in VERDICTS:
            raise ValueError(
                f"examples[{index}] label {rating!r} is not a pairwise label; allowed: "
                f"{sorted(VERDICTS)!r}."
            )
        return VERDICTS[rating]
    if isinstance(rating, bool) or not isinstance(rating, int | float) or not math.isfinite(rating):
        raise ValueError(f"examples[{index}] rating {rating!r} must be a finite number.")
    if scale is None:  # pragma: no cover - pointwise strategies have a scale
        raise ValueError("pointwise examples need a scale.")
    lo, hi = task.rating_bounds(aspect, scale)
    if not lo <= rating <= hi:
        raise ValueError(
            f"examples[{index}] rating {rating!r} is outside the strategy's scale {lo}..{hi}; "
            "rescale the human rating to the strategy's scale first."
        )
    if float(rating).is_integer():
        return str(int(rating))
    return f"{float(rating):g}"
