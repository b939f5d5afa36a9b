"""The parts of a task signature: input fields, aspects, prompt wording, generation prompts.

:class:`~._task.JudgeTask` is made of these models; each validates itself (names, criteria,
bounds) and the task checks how they fit together.
"""

from __future__ import annotations

import re
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._vocabulary import RESERVED, SCALES

__all__ = [
    "IDENTIFIER",
    "Aspect",
    "GenerationSpec",
    "InputField",
    "PromptSpec",
    "TaskModel",
    "check_score_range",
]

IDENTIFIER: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""Input field and aspect names: letters, digits and ``_``, not starting with a digit."""


def check_score_range(v: tuple[float, float] | None) -> tuple[float, float] | None:
    """Validator shared by tasks and aspects: ``score_range`` is ``[min, max]``, min < max."""
    if v is not None and not v[0] < v[1]:
        raise ValueError(f"score_range must be [min, max] with min < max; got {list(v)!r}")
    return v


class TaskModel(BaseModel):
    """Base of the task models: frozen, unknown keys refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class InputField(TaskModel):
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
        if not IDENTIFIER.match(v):
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


class Aspect(TaskModel):
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

    _range_ok = field_validator("score_range")(check_score_range)

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


class PromptSpec(TaskModel):
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


class GenerationSpec(TaskModel):
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
