"""Task signatures: what is judged, how the inputs are shown, and the task-specific wording.

A :class:`JudgeTask` is loaded from a TOML file (``signatures/<name>.toml``; the format is
documented in ``docs/tasks.md``). It holds everything about a task that the HPSS prompt
templates (Tables 11-18 of the paper) need: the judged text and its context fields, the
aspects with their human-written criteria, the human score range, the baseline scale, the
correlation level, and the wording of the judge prompt and of the prompts that generate
references, AutoCoT steps, metrics questions and criteria.

Text templates use ``{name}`` placeholders. They are filled by :func:`substitute`, a single
pass that never re-reads inserted text, so input text containing braces is harmless.
``{{`` and ``}}`` stand for literal braces.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .._resources import shipped_dir
from ._factors import ARTIFACTS, SCALES
from ._task_defaults import fill_task_defaults

__all__ = [
    "Aspect",
    "GenerationSpec",
    "InputField",
    "JudgeTask",
    "PromptSpec",
    "available_tasks",
    "load_task",
    "placeholders",
    "signature_dirs",
    "substitute",
]

_PLACEHOLDER: Final = re.compile(r"\{\{|\}\}|( ?)\{([A-Za-z_][A-Za-z0-9_]*)\}")
_IDENTIFIER: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TASK_NAME: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")

COMMON_PLACEHOLDERS: Final[frozenset[str]] = frozenset({"aspect", "noun", "Noun", "target"})
"""Placeholders every prompt text may use: the aspect label and the task's nouns."""

SCALE_PLACEHOLDERS: Final[frozenset[str]] = frozenset({"min", "max"})
"""The rating bounds (pointwise only)."""

RESERVED: Final[frozenset[str]] = (
    COMMON_PLACEHOLDERS
    | SCALE_PLACEHOLDERS
    | frozenset(
        {
            "position",
            "criteria",
            "metrics",
            "reference",
            "autocot",
            "rating",
            "number",
            "examples",
            *ARTIFACTS,
        }
    )
)
"""Placeholder names judgeopt fills itself (and the artifact names that
:func:`~judgeopt.judge._render.render_template` leaves as placeholders); input fields may not
use them as names."""


# --------------------------------------------------------------------------------------
# Placeholders
# --------------------------------------------------------------------------------------
def _check_score_range(v: tuple[float, float] | None) -> tuple[float, float] | None:
    """Validator shared by tasks and aspects: ``score_range`` is ``[min, max]``, min < max."""
    if v is not None and not v[0] < v[1]:
        raise ValueError(f"score_range must be [min, max] with min < max; got {list(v)!r}")
    return v


def placeholders(template: str) -> frozenset[str]:
    """The placeholder names ``{name}`` used in ``template`` (``{{``/``}}`` are escapes)."""
    return frozenset(m.group(2) for m in _PLACEHOLDER.finditer(template) if m.group(2))


def substitute(
    template: str,
    values: Mapping[str, str],
    *,
    keep_unknown: bool = False,
    collapse_empty: bool = True,
) -> str:
    """Fill ``{name}`` placeholders in one pass; inserted text is never re-scanned.

    With ``collapse_empty``, a placeholder preceded by one space and filled with an empty
    string takes the space with it, so ``"of the summary. {criteria}"`` becomes
    ``"of the summary."`` when there are no criteria. ``{{`` and ``}}`` become ``{`` and
    ``}`` (with ``keep_unknown`` they are left as they are).

    Args:
        template: The template text.
        values: Placeholder name -> text.
        keep_unknown: Leave placeholders that ``values`` does not name, and ``{{``/``}}``,
            as they are (otherwise an unknown placeholder is an error).
        collapse_empty: Drop the space before a placeholder filled with ``""``.

    Returns:
        The filled text.

    Raises:
        ValueError: On a placeholder ``values`` does not name (unless ``keep_unknown``).
    """

    def fill(m: re.Match[str]) -> str:
        token = m.group(0)
        if token == "{{":
            return "{" if not keep_unknown else token
        if token == "}}":
            return "}" if not keep_unknown else token
        space, name = m.group(1), m.group(2)
        if name not in values:
            if keep_unknown:
                return token
            raise ValueError(
                f"Template placeholder {{{name}}} has no value. Known: {sorted(values)!r}."
            )
        value = values[name]
        if not value and space and collapse_empty:
            return ""
        return space + value

    return _PLACEHOLDER.sub(fill, template)


def _check_placeholders(
    where: str,
    template: str,
    allowed: Iterable[str],
    required: Iterable[str] = (),
) -> None:
    used = placeholders(template)
    allowed_s = frozenset(allowed) | frozenset(required)
    unknown = sorted(used - allowed_s)
    if unknown:
        raise ValueError(
            f"`{where}` uses unknown placeholder(s) "
            + ", ".join("{" + u + "}" for u in unknown)
            + f"; allowed here: {', '.join('{' + a + '}' for a in sorted(allowed_s))}."
        )
    missing = sorted(frozenset(required) - used)
    if missing:
        raise ValueError(
            f"`{where}` must contain the placeholder(s) "
            + ", ".join("{" + m + "}" for m in missing)
            + f". Got {template!r}."
        )


# --------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------
class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class InputField(_Model):
    """One input text field of a sample and how the prompt shows it.

    Attributes:
        name: The field's name in the data (``inputs`` of a record), e.g. ``"source"``.
        label: The field's heading in the prompt, e.g. ``"Article"``.
        style: ``"heading"`` shows ``## <label>`` then the text; ``"markers"`` wraps the
            text in ``## The Start of the <label>`` / ``## The End of the <label>``.
        start: Replaces the start marker line (``"markers"`` only).
        end: Replaces the end marker line (``"markers"`` only).
    """

    name: str
    label: str = Field(min_length=1)
    style: Literal["heading", "markers"] = "heading"
    start: str | None = None
    end: str | None = None

    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not _IDENTIFIER.match(v):
            raise ValueError(
                f"input field name {v!r} must be an identifier (letters, digits, _; not "
                "starting with a digit)"
            )
        if v in RESERVED:
            raise ValueError(
                f"input field name {v!r} is reserved for a placeholder; reserved names: "
                f"{sorted(RESERVED)!r}"
            )
        return v

    @model_validator(mode="after")
    def _markers_only(self) -> InputField:
        if self.style != "markers" and (self.start is not None or self.end is not None):
            raise ValueError(
                f"input `{self.name}`: `start`/`end` are only allowed with style = "
                f'"markers" (style is {self.style!r})'
            )
        return self

    def block(self, text: str) -> str:
        """The field as shown in the prompt, with ``text`` inserted verbatim."""
        if self.style == "heading":
            return f"## {self.label}\n{text}"
        start = self.start if self.start is not None else f"## The Start of the {self.label}"
        end = self.end if self.end is not None else f"## The End of the {self.label}"
        return f"{start}\n{text}\n{end}"


class Aspect(_Model):
    """One evaluation aspect of a task.

    Attributes:
        criteria: The human-written criteria: one text, or one text per scale value
            (``{3 = "...", 5 = "...", 10 = "...", 50 = "...", 100 = "..."}``) when the
            text names the scale's ratings.
        label: How the aspect is named in the prompt (``[Aspect]``); default: its key.
        score_range: The human score range ``[min, max]`` when it differs from the task's.
        rating_min: The lowest rating the judge may give (``on a scale of <min> to <max>``).
        scale_max: The highest rating per scale value when it is not the scale itself,
            e.g. ``{3 = 1}`` for a 0/1 aspect judged on its native scale.
    """

    criteria: str | dict[int, str]
    label: str | None = Field(default=None, min_length=1)
    score_range: tuple[float, float] | None = None
    rating_min: int = 1
    scale_max: dict[int, int] = Field(default_factory=dict)

    @field_validator("criteria")
    @classmethod
    def _criteria_ok(cls, v: str | dict[int, str]) -> str | dict[int, str]:
        if isinstance(v, str):
            if not v.strip():
                raise ValueError("criteria must not be empty")
            return v
        keys = set(v)
        if keys != set(SCALES):
            missing = sorted(set(SCALES) - keys)
            extra = sorted(keys - set(SCALES))
            raise ValueError(
                "per-scale criteria need exactly one text per scale value "
                f"{list(SCALES)!r}; missing {missing!r}, not allowed {extra!r}"
            )
        empty = sorted(k for k, t in v.items() if not t.strip())
        if empty:
            raise ValueError(f"per-scale criteria for scale(s) {empty!r} are empty")
        return {s: v[s] for s in SCALES}

    _range_ok = field_validator("score_range")(_check_score_range)

    @field_validator("scale_max")
    @classmethod
    def _scale_max_ok(cls, v: dict[int, int]) -> dict[int, int]:
        bad = sorted(k for k in v if k not in SCALES)
        if bad:
            raise ValueError(f"scale_max keys must be scale values {list(SCALES)!r}; got {bad!r}")
        return v

    @model_validator(mode="after")
    def _bounds_ok(self) -> Aspect:
        for s in SCALES:
            hi = self.scale_max.get(s, s)
            if not self.rating_min < hi:
                raise ValueError(
                    f"rating_min ({self.rating_min}) must be below the highest rating "
                    f"({hi}) at scale {s}"
                )
        return self


class PromptSpec(_Model):
    """The task-specific wording of the judge prompt (Tables 11, 13, 15, 17).

    Keys left out of the TOML file get the defaults documented in ``docs/tasks.md``
    (derived from ``noun`` / ``target`` and the mode).
    """

    instruction_heading: str
    instruction: str
    reference_intro: str
    dialectic: str
    cot_none: str
    cot_prefix: str
    cot_suffix: str
    rules_heading: str
    rules: tuple[str, ...] = Field(min_length=1)
    autocot_block: str
    examples_intro: str
    examples_outro: str
    example_heading: str
    example_rating: str
    metrics_block: str
    reference_block: str
    metrics_after: str


class GenerationSpec(_Model):
    """Templates of the prompts that generate artifacts (Tables 12, 14, 16, 18).

    Attributes:
        reference: Generates a reference output for a sample (``reference=self``).
        autocot: Generates evaluation steps (``autocot=on``).
        metrics: Generates sample-specific questions (``metrics=on``).
        criteria: Generates evaluation criteria (``criteria=self``; pointwise only).
    """

    reference: str
    autocot: str
    metrics: str
    criteria: str | None = None


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


class JudgeTask(_Model):
    """A judging task: inputs, aspects, scales and the wording of every HPSS prompt.

    Load one with :func:`load_task`. Every model rejects unknown keys; validation errors
    name the field, the value and what is allowed.

    Attributes:
        name: Short identifier, e.g. ``"summeval"``.
        mode: ``"pointwise"`` (rate one output) or ``"pairwise"`` (compare two outputs).
        description: Free text.
        target: What is judged, as a noun phrase: ``"the summary of the news article"``.
        noun: The short noun for the judged text: ``"summary"``.
        noun_title: The noun in headings (default: ``noun`` with a capital first letter).
        inputs: The input fields in prompt order (context fields and judged fields).
        judged_fields: The judged field(s): one for pointwise, two (A, B) for pairwise.
        score_range: Human score range ``[min, max]`` (pointwise).
        baseline_scale: The ``scale`` of the MT-Bench baseline strategy (pointwise).
        correlation_level: ``"group"`` (per-source correlation averaged over sources) or
            ``"dataset"`` (pointwise; HPSS Appendix A).
        system: The system message (``""`` for none).
        aspects: Aspect name -> :class:`Aspect`, in file order.
        prompt: The judge prompt wording (:class:`PromptSpec`).
        generation: The artifact generation prompts (:class:`GenerationSpec`).
    """

    name: str
    mode: Literal["pointwise", "pairwise"]
    description: str = ""
    target: str = Field(min_length=1)
    noun: str = Field(min_length=1)
    noun_title: str = Field(min_length=1)
    inputs: tuple[InputField, ...]
    judged_fields: tuple[str, ...] = Field(min_length=1)
    score_range: tuple[float, float] | None = None
    baseline_scale: int | None = None
    correlation_level: Literal["group", "dataset"] | None = None
    system: str = "You are a helpful assistant."
    aspects: dict[str, Aspect] = Field(min_length=1)
    prompt: PromptSpec
    generation: GenerationSpec

    # -- defaults ------------------------------------------------------------------------
    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
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

    # -- field checks --------------------------------------------------------------------
    @field_validator("name")
    @classmethod
    def _name_ok(cls, v: str) -> str:
        if not _TASK_NAME.match(v):
            raise ValueError(
                f"task name {v!r} may contain letters, digits, '_', '.', '-' and must not "
                "start with '.' or '-'"
            )
        return v

    @field_validator("aspects")
    @classmethod
    def _aspect_names_ok(cls, v: dict[str, Aspect]) -> dict[str, Aspect]:
        bad = [k for k in v if not _IDENTIFIER.match(k)]
        if bad:
            raise ValueError(f"aspect names must be identifiers (letters, digits, _); got {bad!r}")
        return v

    _range_ok = field_validator("score_range")(_check_score_range)

    @field_validator("baseline_scale")
    @classmethod
    def _baseline_ok(cls, v: int | None) -> int | None:
        if v is not None and v not in SCALES:
            raise ValueError(
                f"baseline_scale {v!r} is not a scale value; allowed: {list(SCALES)!r}"
            )
        return v

    # -- cross-field checks --------------------------------------------------------------
    @model_validator(mode="after")
    def _consistent(self) -> JudgeTask:
        names = [f.name for f in self.inputs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"`inputs` lists the field name(s) {dupes!r} more than once")
        unknown = [j for j in self.judged_fields if j not in names]
        if unknown:
            raise ValueError(
                f"`judged_fields` names {unknown!r}, which are not input fields; input "
                f"fields: {names!r}"
            )
        if len(set(self.judged_fields)) != len(self.judged_fields):
            raise ValueError(f"`judged_fields` repeats a field: {list(self.judged_fields)!r}")
        want = 1 if self.mode == "pointwise" else 2
        if len(self.judged_fields) != want:
            raise ValueError(
                f"a {self.mode} task judges exactly {want} field(s); `judged_fields` is "
                f"{list(self.judged_fields)!r}"
            )
        context = [n for n in names if n not in self.judged_fields]
        if not context:
            raise ValueError("`inputs` needs at least one context field besides the judged one(s)")
        if self.prompt.metrics_after not in context:
            raise ValueError(
                f"`prompt.metrics_after` is {self.prompt.metrics_after!r}; allowed: a context "
                f"input field, one of {context!r}"
            )
        self._check_mode_fields()
        self._check_aspects()
        self._check_templates(context)
        return self

    def _check_mode_fields(self) -> None:
        pointwise_only = {
            "score_range": self.score_range,
            "baseline_scale": self.baseline_scale,
            "correlation_level": self.correlation_level,
        }
        if self.mode == "pointwise":
            missing = [k for k, v in pointwise_only.items() if v is None]
            if missing:
                raise ValueError(f"a pointwise task needs {missing!r}")
            if self.generation.criteria is None:
                raise ValueError(
                    "a pointwise task needs `generation.criteria` (the prompt that writes "
                    "self-generated criteria)"
                )
        else:
            present = [k for k, v in pointwise_only.items() if v is not None]
            if present:
                raise ValueError(
                    f"{present!r} only apply to pointwise tasks; remove them from the pairwise "
                    f"task `{self.name}`"
                )
            if self.generation.criteria is not None:
                raise ValueError(
                    "`generation.criteria` only applies to pointwise tasks (pairwise tasks have "
                    "no self-generated criteria, HPSS Appendix G)"
                )

    def _check_aspects(self) -> None:
        per_scale = sorted(k for k, a in self.aspects.items() if isinstance(a.criteria, dict))
        single = sorted(k for k, a in self.aspects.items() if isinstance(a.criteria, str))
        if self.mode == "pairwise":
            if per_scale:
                raise ValueError(
                    f"aspects {per_scale!r}: per-scale criteria need a scale; pairwise tasks "
                    "have none, give one criteria text"
                )
            for k, a in self.aspects.items():
                # NOTE: by value, not by `model_fields_set`: an exported task (model_dump)
                # lists every field with its default, and must load again.
                defaults = {"score_range": None, "rating_min": 1, "scale_max": {}}
                extra = sorted(f for f, d in defaults.items() if getattr(a, f) != d)
                if extra:
                    raise ValueError(f"aspects.{k}: {extra!r} only apply to pointwise tasks")
            return
        if per_scale and single:
            raise ValueError(
                "either every aspect's criteria are per scale or none are (the self-generated "
                f"criteria then depend on the scale or not); per scale: {per_scale!r}, one "
                f"text: {single!r}"
            )

    def _check_templates(self, context: list[str]) -> None:
        pointwise = self.mode == "pointwise"
        scale_ph = SCALE_PLACEHOLDERS if pointwise else frozenset()
        base = COMMON_PLACEHOLDERS | scale_ph
        p = self.prompt
        for key in (
            "instruction",
            "reference_intro",
            "dialectic",
            "instruction_heading",
            "rules_heading",
        ):
            _check_placeholders(f"prompt.{key}", getattr(p, key), base | {"position"})
        for key in ("examples_intro", "examples_outro"):  # always before the inputs
            _check_placeholders(f"prompt.{key}", getattr(p, key), base)
        for key in ("cot_none", "cot_prefix", "cot_suffix"):
            _check_placeholders(
                f"prompt.{key}",
                getattr(p, key),
                base | {"position"},
                required={"max"} if pointwise else (),
            )
        with_criteria = [i for i, r in enumerate(p.rules) if "criteria" in placeholders(r)]
        if len(with_criteria) != 1:
            raise ValueError(
                "exactly one of `prompt.rules` must contain {criteria} (where the criteria "
                f"go); {len(with_criteria)} do: {list(p.rules)!r}"
            )
        for i, rule in enumerate(p.rules):
            _check_placeholders(f"prompt.rules[{i}]", rule, base | {"criteria"})
        _check_placeholders("prompt.autocot_block", p.autocot_block, base, {"autocot"})
        _check_placeholders("prompt.example_heading", p.example_heading, base, {"number"})
        _check_placeholders("prompt.example_rating", p.example_rating, base, {"rating"})
        _check_placeholders("prompt.metrics_block", p.metrics_block, base, {"metrics"})
        _check_placeholders("prompt.reference_block", p.reference_block, base, {"reference"})

        g = self.generation
        ctx = frozenset(context)
        # Cache keys follow hpss_graph(): a template may only use what its key depends on.
        _check_placeholders("generation.reference", g.reference, COMMON_PLACEHOLDERS | ctx)
        if not placeholders(g.reference) & ctx:
            raise ValueError(
                f"`generation.reference` must show at least one context field {sorted(ctx)!r}"
            )
        _check_placeholders("generation.autocot", g.autocot, base | {"criteria"})
        metrics_scale = scale_ph if self.criteria_per_scale else frozenset()
        _check_placeholders(
            "generation.metrics",
            g.metrics,
            COMMON_PLACEHOLDERS | {"criteria"} | ctx | metrics_scale,
        )
        if g.criteria is not None:
            if self.criteria_per_scale:
                _check_placeholders(
                    "generation.criteria",
                    g.criteria,
                    COMMON_PLACEHOLDERS | scale_ph,
                    required={"max"},
                )
            else:
                _check_placeholders("generation.criteria", g.criteria, COMMON_PLACEHOLDERS)

    # -- accessors -----------------------------------------------------------------------
    def __hash__(self) -> int:
        return hash(self.fingerprint)

    @property
    def fingerprint(self) -> str:
        """A short hash of the whole signature (changes when any wording changes)."""
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]

    @property
    def aspect_names(self) -> tuple[str, ...]:
        """The aspect names, in file order."""
        return tuple(self.aspects)

    @property
    def criteria_per_scale(self) -> bool:
        """True when the human criteria name the scale's ratings (one text per scale)."""
        return any(isinstance(a.criteria, dict) for a in self.aspects.values())

    @property
    def context_fields(self) -> tuple[InputField, ...]:
        """The input fields that are not judged, in prompt order."""
        return tuple(f for f in self.inputs if f.name not in self.judged_fields)

    @property
    def judged(self) -> tuple[InputField, ...]:
        """The judged input field(s), in ``judged_fields`` order."""
        return tuple(self.field(n) for n in self.judged_fields)

    @property
    def input_names(self) -> tuple[str, ...]:
        """All input field names, in prompt order."""
        return tuple(f.name for f in self.inputs)

    def field(self, name: str) -> InputField:
        """The input field called ``name``.

        Raises:
            ValueError: If there is none (the message lists the fields).
        """
        for f in self.inputs:
            if f.name == name:
                return f
        raise ValueError(
            f"Task `{self.name}` has no input field {name!r}. Fields: {list(self.input_names)!r}."
        )

    def aspect(self, name: str) -> Aspect:
        """The aspect called ``name``.

        Raises:
            ValueError: If the task has no such aspect (the message lists the allowed ones).
        """
        try:
            return self.aspects[name]
        except (KeyError, TypeError):
            raise ValueError(
                f"Unknown aspect {name!r} for task `{self.name}`. Allowed aspects: "
                f"{list(self.aspects)!r}."
            ) from None

    def aspect_label(self, name: str) -> str:
        """How aspect ``name`` is named in prompts (``[Aspect]``): its label or its key."""
        a = self.aspect(name)
        return a.label if a.label is not None else name

    def human_range(self, aspect: str) -> tuple[float, float]:
        """The human score range of an aspect (pointwise).

        Raises:
            ValueError: On an unknown aspect or a pairwise task.
        """
        a = self.aspect(aspect)
        if a.score_range is not None:
            return a.score_range
        if self.score_range is None:
            raise ValueError(f"Task `{self.name}` is {self.mode}: it has no score range.")
        return self.score_range

    def rating_bounds(self, aspect: str, scale: int) -> tuple[int, int]:
        """The ``(min, max)`` rating the judge is asked for at a scale value (pointwise).

        Raises:
            ValueError: On an unknown aspect, a scale outside :data:`SCALES`, or a pairwise
                task.
        """
        a = self.aspect(aspect)
        if self.mode != "pointwise":
            raise ValueError(f"Task `{self.name}` is pairwise: it has no rating scale.")
        _check_scale(scale)
        return a.rating_min, a.scale_max.get(scale, scale)

    def criteria_text(self, aspect: str, scale: int | None = None) -> str:
        """The human-written criteria of an aspect, for a scale value when they name it.

        Args:
            aspect: The aspect name.
            scale: The scale value; required when the criteria are per scale.

        Raises:
            ValueError: On an unknown aspect, a missing or unknown scale.
        """
        crit = self.aspect(aspect).criteria
        if isinstance(crit, str):
            return crit
        if scale is None:
            raise ValueError(
                f"The criteria of `{self.name}`/{aspect} are per scale: give a scale, one of "
                f"{list(SCALES)!r}."
            )
        _check_scale(scale)
        return crit[scale]

    def text_values(self, aspect: str, scale: int | None = None) -> dict[str, str]:
        """The common placeholder values for an aspect (and the rating bounds at ``scale``)."""
        values = {
            "aspect": self.aspect_label(aspect),
            "noun": self.noun,
            "Noun": self.noun_title,
            "target": self.target,
        }
        if scale is not None:
            lo, hi = self.rating_bounds(aspect, scale)
            values["min"], values["max"] = str(lo), str(hi)
        return values

    # -- construction --------------------------------------------------------------------
    @classmethod
    def from_toml(cls, text: str, *, source: str = "<string>") -> JudgeTask:
        """Parse and validate a signature from TOML text.

        Raises:
            ValueError: On a TOML syntax error or an invalid signature; the message names
                ``source``, each offending field, its value and what is allowed.
        """
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"{source}: not valid TOML: {e}") from None
        return cls.from_dict(data, source=source)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "<dict>") -> JudgeTask:
        """Validate a signature given as a mapping (the parsed TOML).

        Raises:
            ValueError: On an invalid signature (see :meth:`from_toml`).
        """
        try:
            return cls.model_validate(dict(data))
        except ValidationError as e:
            raise ValueError(_format_errors(source, e)) from None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> JudgeTask:
        """Load and validate a signature file.

        Raises:
            ValueError: If the file cannot be read or is invalid.
        """
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise ValueError(f"Cannot read task signature {str(p)!r}: {e.strerror}.") from None
        return cls.from_toml(text, source=str(p))


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


def _check_scale(scale: object) -> None:
    if isinstance(scale, bool) or scale not in SCALES:
        raise ValueError(f"scale {scale!r} is not a scale value; allowed: {list(SCALES)!r}.")


def _format_errors(source: str, error: ValidationError) -> str:
    lines = [f"{source}: invalid task signature ({error.error_count()} problem(s)):"]
    for err in error.errors(include_url=False):
        loc = ".".join(str(x) for x in err["loc"]) or "<top level>"
        msg = err["msg"]
        kind = err["type"]
        if kind == "extra_forbidden":
            msg = "unknown key (not allowed; see docs/tasks.md for the keys)"
        if kind == "value_error":
            # Our own messages already name the value and what is allowed.
            msg = msg.removeprefix("Value error, ")
            lines.append(f"  - {loc}: {msg}")
        elif kind == "missing":
            lines.append(f"  - {loc}: {msg}")
        else:
            shown = repr(err.get("input"))
            if len(shown) > 120:
                shown = shown[:117] + "..."
            lines.append(f"  - {loc}: {msg} (got {shown})")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Shipped signatures
# --------------------------------------------------------------------------------------
def signature_dirs() -> list[Path]:
    """Directories searched for shipped signatures: ``signatures/`` at the repository's top
    level, shipped in the wheel as ``judgeopt/signatures`` (see :mod:`judgeopt._resources`)."""
    folder = shipped_dir("signatures")
    return [folder] if folder is not None else []


def available_tasks() -> tuple[str, ...]:
    """Names of the shipped task signatures (``load_task(name)`` accepts them)."""
    names: set[str] = set()
    for d in signature_dirs():
        names.update(p.stem for p in d.glob("*.toml"))
    return tuple(sorted(names))


def load_task(name_or_path: str | os.PathLike[str]) -> JudgeTask:
    """Load a task signature by shipped name (``"summeval"``) or by file path.

    A value that names an existing file, ends in ``.toml`` or contains a path separator is a
    path; anything else is a shipped name looked up in :func:`signature_dirs`.

    Args:
        name_or_path: A shipped task name or the path of a TOML signature.

    Returns:
        The validated task.

    Raises:
        ValueError: On an unknown name (the message lists the shipped ones), an unreadable
            file, or an invalid signature.
    """
    text = os.fspath(name_or_path)
    looks_like_path = (
        isinstance(name_or_path, os.PathLike)
        or text.endswith(".toml")
        or "/" in text
        or os.sep in text
        or Path(text).is_file()
    )
    if looks_like_path:
        return JudgeTask.from_file(text)
    for d in signature_dirs():
        candidate = d / f"{text}.toml"
        if candidate.is_file():
            return JudgeTask.from_file(candidate)
    raise ValueError(
        f"Unknown task {text!r}. Shipped tasks: {list(available_tasks())!r}; or give the path "
        "of a .toml signature."
    )
