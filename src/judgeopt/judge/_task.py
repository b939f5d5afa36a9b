"""The task schema: :class:`JudgeTask`, what is judged and the wording of every HPSS prompt.

A :class:`JudgeTask` is loaded from a TOML file (``signatures/<name>.toml``; the format is
documented in ``docs/tasks.md``; :mod:`._catalog` finds the shipped ones). It holds everything
about a task that the HPSS prompt templates (Tables 11-18 of the paper) need: the judged text
and its context fields, the aspects with their human-written criteria, the human score range,
the baseline scale, the correlation level, and the wording of the judge prompt and of the
prompts that generate references, AutoCoT steps, metrics questions and criteria.

Its parts are the models of :mod:`._task_parts`; keys a file leaves out get the defaults of
:mod:`._task_defaults`; its texts are templates (:mod:`._template`) whose placeholders are
checked here against the vocabulary of :mod:`._vocabulary`.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from ._task_defaults import fill_defaults
from ._task_parts import (
    IDENTIFIER,
    Aspect,
    GenerationSpec,
    InputField,
    PromptSpec,
    TaskModel,
    check_score_range,
)
from ._template import check_placeholders, placeholders
from ._vocabulary import COMMON_PLACEHOLDERS, SCALE_PLACEHOLDERS, SCALES

__all__ = ["JudgeTask"]

_TASK_NAME: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


class JudgeTask(TaskModel):
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
        return fill_defaults(data)

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
        bad = [k for k in v if not IDENTIFIER.match(k)]
        if bad:
            raise ValueError(f"aspect names must be identifiers (letters, digits, _); got {bad!r}")
        return v

    _range_ok = field_validator("score_range")(check_score_range)

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
                defaults: dict[str, Any] = {"score_range": None, "rating_min": 1, "scale_max": {}}
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
            check_placeholders(f"prompt.{key}", getattr(p, key), base | {"position"})
        for key in ("examples_intro", "examples_outro"):  # always before the inputs
            check_placeholders(f"prompt.{key}", getattr(p, key), base)
        for key in ("cot_none", "cot_prefix", "cot_suffix"):
            check_placeholders(
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
            check_placeholders(f"prompt.rules[{i}]", rule, base | {"criteria"})
        check_placeholders("prompt.autocot_block", p.autocot_block, base, {"autocot"})
        check_placeholders("prompt.example_heading", p.example_heading, base, {"number"})
        check_placeholders("prompt.example_rating", p.example_rating, base, {"rating"})
        check_placeholders("prompt.metrics_block", p.metrics_block, base, {"metrics"})
        check_placeholders("prompt.reference_block", p.reference_block, base, {"reference"})

        g = self.generation
        ctx = frozenset(context)
        # Cache keys follow hpss_graph(): a template may only use what its key depends on.
        check_placeholders("generation.reference", g.reference, COMMON_PLACEHOLDERS | ctx)
        if not placeholders(g.reference) & ctx:
            raise ValueError(
                f"`generation.reference` must show at least one context field {sorted(ctx)!r}"
            )
        check_placeholders("generation.autocot", g.autocot, base | {"criteria"})
        metrics_scale = scale_ph if self.criteria_per_scale else frozenset()
        check_placeholders(
            "generation.metrics",
            g.metrics,
            COMMON_PLACEHOLDERS | {"criteria"} | ctx | metrics_scale,
        )
        if g.criteria is not None:
            if self.criteria_per_scale:
                check_placeholders(
                    "generation.criteria",
                    g.criteria,
                    COMMON_PLACEHOLDERS | scale_ph,
                    required={"max"},
                )
            else:
                check_placeholders("generation.criteria", g.criteria, COMMON_PLACEHOLDERS)

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
