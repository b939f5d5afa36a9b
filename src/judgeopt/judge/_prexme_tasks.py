"""The tasks PrExMe judges (Leiter & Eger): what a PrExMe prompt needs to know about one.

A :class:`PrExMeTask` names what is graded (``"Translation"``, ``"Summary"``), the
task-specific insert of the task descriptions (``"translation from Chinese to English"``),
the record fields holding the source and the hypothesis, and the human score with its range.
:data:`PREXME_TASKS` holds PrExMe's language pairs and summarization (the Eval4NLP 2023 data);
:func:`mt_task` builds other translation tasks, :func:`load_prexme_task` finds one by name.

The templates these tasks fill are in ``_prexme_templates.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

__all__ = ["PREXME_TASKS", "PrExMeTask", "load_prexme_task", "mt_task"]


@dataclass(frozen=True)
class PrExMeTask:
    """What a PrExMe prompt needs to know about a task.

    Attributes:
        name: The task name (``"zh_en"``, ``"summarization"``).
        result_type: What is graded, capitalised as in the base prompts (``"Translation"``).
        insert: The task-specific insert of the task descriptions.
        hypothesis_field: The record input that is graded (``"translation"``, ``"summary"``).
        source_field: The record input holding the source text.
        score_key: The human score in a record's ``scores`` (``"mqm"``, ``"avg_aspect"``).
        score_range: ``(worst, best)`` human score, to express a demonstration's human score
            in a format's range (MQM is capped at -25 as in PrExMe).
    """

    name: str
    result_type: str
    insert: str
    hypothesis_field: str
    score_key: str
    score_range: tuple[float, float]
    source_field: str = "source"

    # The JudgeTask attributes that evaluate() reads.
    @property
    def mode(self) -> str:
        """Always ``"pointwise"``."""
        return "pointwise"

    @property
    def correlation_level(self) -> str:
        """Always ``"dataset"``: PrExMe correlates at the segment level, without grouping."""
        return "dataset"

    @property
    def input_names(self) -> tuple[str, ...]:
        """``(source_field, hypothesis_field)``."""
        return (self.source_field, self.hypothesis_field)

    @property
    def aspect_names(self) -> tuple[str, ...]:
        """``(score_key,)``: the one human score, so that plain data (a bare ``mqm`` or
        ``score`` column) is read as for a signature's aspects."""
        return (self.score_key,)

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        """The task as plain data, as ``JudgeTask.model_dump`` gives it (a compile's
        checkpoint fingerprint hashes it)."""
        data = dataclasses.asdict(self)
        if mode == "json":
            data["score_range"] = list(self.score_range)
        return data


_MQM_RANGE: Final[tuple[float, float]] = (-25.0, 0.0)


def mt_task(
    source_language: str,
    target_language: str,
    *,
    name: str | None = None,
    score_key: str = "mqm",
    score_range: tuple[float, float] = _MQM_RANGE,
) -> PrExMeTask:
    """A machine-translation task between two languages (named in English).

    Example:
        >>> mt_task("Chinese", "English").insert
        'translation from Chinese to English'
    """
    return PrExMeTask(
        name=name or f"{source_language[:2].lower()}_{target_language[:2].lower()}",
        result_type="Translation",
        insert=f"translation from {source_language} to {target_language}",
        hypothesis_field="translation",
        score_key=score_key,
        score_range=score_range,
    )


PREXME_TASKS: Final[Mapping[str, PrExMeTask]] = MappingProxyType(
    {
        "en_de": mt_task("English", "German", name="en_de"),
        "zh_en": mt_task("Chinese", "English", name="zh_en"),
        "en_es": mt_task("English", "Spanish", name="en_es"),
        "en_zh": mt_task("English", "Chinese", name="en_zh"),
        "he_en": mt_task("Hebrew", "English", name="he_en"),
        "summarization": PrExMeTask(
            name="summarization",
            result_type="Summary",
            insert="summary of a given source text",
            hypothesis_field="summary",
            score_key="avg_aspect",
            score_range=(1.0, 5.0),
        ),
    }
)
"""PrExMe's tasks: its language pairs and summarization (the Eval4NLP 2023 data)."""


def load_prexme_task(task: PrExMeTask | str) -> PrExMeTask:
    """A task by name (``"zh_en"``, ``"zh-en"``, ``"summarization"``), or the task itself.

    Raises:
        ValueError: On an unknown name (the message lists the known ones).
    """
    if isinstance(task, PrExMeTask):
        return task
    key = str(task).strip().lower().replace("-", "_")
    if key in ("summ", "sum"):
        key = "summarization"
    if key not in PREXME_TASKS:
        raise ValueError(
            f"Unknown PrExMe task {task!r}. Known tasks: {sorted(PREXME_TASKS)!r}; "
            "build others with mt_task(source_language, target_language)."
        )
    return PREXME_TASKS[key]
