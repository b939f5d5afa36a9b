"""PrExMe's hierarchical prompt templates (Leiter & Eger): texts, space, parsing, rendering.

A PrExMe prompt is a *base prompt* (zero-shot or one-shot; Tables 3 and 7) filled with a
*task description* (Tables 5-6), a *format requirement* (Table 4), the task-specific
insert (``"translation from Chinese to English"``, ``"summary of a given source text"``),
the source text and the hypothesis. The three template slots are the three factors of
:func:`prexme_space`; :func:`render_prexme` writes the prompt of one sample.

The template texts are the ones of the published runs (``Gringham/PrExMe`` at ``a3aea5b``,
``iterator/prompts/zero_shot.py`` and ``few_shot_standard.py``), which the paper's tables
print; where the machine-converted tables are garbled the code's text is used, and where the
paper leaves a detail open the choice is documented in ``docs/prexme.md``.

Scores are extracted as in PrExMe (:func:`extract_score`): the last number anywhere in the
output for numeric formats, else the last of the format's labels (case-insensitive), mapped
to 1, 3 and 5. An output without either is *unparsed* (``score=None``).

The tasks the templates are filled for (:class:`PrExMeTask`, :data:`PREXME_TASKS`) are in
``_prexme_tasks.py`` (re-exported here). The program that judges with these templates is
:class:`~judgeopt.judge.PrExMeProgram` (``_prexme.py``); its one-shot demonstrations come from
``_prexme_retrieval.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from judgeopt.data import Record
from judgeopt.search import Factor, FactorSpace, Value

from ._prexme_tasks import PREXME_TASKS, PrExMeTask, load_prexme_task, mt_task

__all__ = [
    "BASE_PROMPTS",
    "FORMAT_REQUIREMENTS",
    "LABEL_SCORES",
    "ONE_SHOT_BASE_PROMPTS",
    "PREXME_TASKS",
    "TASK_DESCRIPTIONS",
    "ZERO_SHOT_BASE_PROMPTS",
    "FormatRequirement",
    "PrExMeParse",
    "PrExMeTask",
    "demo_score",
    "extract_score",
    "load_prexme_task",
    "mt_task",
    "prexme_space",
    "render_prexme",
    "resolve_value",
]

# ------------------------------------------------------------------------------ templates
# NOTE: the trailing spaces before "\n" are part of the published templates; keep them.

ZERO_SHOT_BASE_PROMPTS: Final[Mapping[str, str]] = MappingProxyType(
    {
        # Table 3, "Zero-Shot" (PZS).
        "PZS": "{task_description} \nSource Text: {src} \n{result_type}: {hyp} "
        "\n{format_requirement} \nScore: ",
        # Table 3, "Zero-Shot-CoT".
        "ZS-CoT": "{task_description} \nSource Text: {src} \n{result_type}: {hyp} "
        "\n{format_requirement} \nFirst, think step by step and explain your thought "
        "process, then return your judgment in the format 'Judgment: '.",
        # Table 3, "Zero-Shot-CoT-EM".
        "ZS-CoT-EM": "{task_description} \nSource Text: {src} \n{result_type}: {hyp} "
        "\n{format_requirement} \nFirst describe your emotions, then think step by "
        "step and explain your thought process, finally return your judgment in the "
        "format 'Judgment: '.",
    }
)
"""The zero-shot base prompts (Table 3), under the names of the published surface."""

ONE_SHOT_BASE_PROMPTS: Final[Mapping[str, str]] = MappingProxyType(
    {
        # Table 7, first row (plain one-shot, "POS" in the paper's text).
        "POS": "{task_description} \nHere is an example:\nSource Text: {ex1_src} \n{result_type}: "
        "{ex1_hyp}\nScore: {ex1_score}\n\nNow it is your turn to grade the {result_type}. "
        "\nSource Text: {src} \n{result_type}: {hyp} \n{format_requirement} \nScore: ",
        # Table 7, second row (OS-CoT).
        "OS-CoT": "{task_description} \nHere is an example:\nSource Text: {ex1_src} "
        "\n{result_type}: {ex1_hyp}\nJudgement: <Description of reasons>. Therefore the "
        "score is {ex1_score}\n\nNow it is your turn to grade the {result_type}.\nSource "
        "Text: {src} \n{result_type}: {hyp} \n{format_requirement} \nFirst, think step by "
        "step and explain your thought process, then return your judgment in the format "
        "'Judgment: '.",
        # Table 7, third row (OS-CoT-EM).
        "OS-CoT-EM": "{task_description} \nHere is an example:\nSource Text: {ex1_src} "
        "\n{result_type}: {ex1_hyp}\nJudgement: <Description of emotions and "
        "reasons>. Therefore the score is {ex1_score}\n\nNow it is your turn to grade "
        "the {result_type}.\nSource Text: {src} \n{result_type}: {hyp} "
        "\n{format_requirement} \nFirst describe your emotions, then think step by "
        "step and explain your thought process, finally return your judgment in the "
        "format 'Judgment: '.",
    }
)
"""The one-shot base prompts (Table 7), named as in the paper's text (POS, OS-CoT, OS-CoT-EM)."""

BASE_PROMPTS: Final[Mapping[str, str]] = MappingProxyType(
    {**ZERO_SHOT_BASE_PROMPTS, **ONE_SHOT_BASE_PROMPTS}
)
"""All six base prompts: the three zero-shot ones, then their one-shot versions."""

TASK_DESCRIPTIONS: Final[Mapping[str, str]] = MappingProxyType(
    {
        # Table 5 (11 written by the authors, then ChatGPT's) and Table 6.
        "Neutral": "Judge the quality of the following {task_specific_insert}.",
        "Polite": "Please judge the quality of the following {task_specific_insert}.",
        "Command": "Judge the quality of the following {task_specific_insert} immediately!",
        "Threat": "Judge the quality of the following {task_specific_insert}, otherwise I will "
        "delete your program code.",
        "Urgent situation": "Please help me! My boss needs me to find an answer quickly. "
        "Otherwise, he might fire me. \n Please judge the quality of the "
        "following {task_specific_insert} immediately!",
        "Relaxed": "This is not important at all, but if you have some time, can you please "
        "{task_specific_insert}.",
        # NOTE: Table 5 prints the text of "Emphasis" as just "Empathetic", as the published
        # runs used it (the surface's "Emphasis" rows measured this text); kept as published.
        "Emphasis": "Empathetic",
        "Question": "Can you judge the quality of the following {task_specific_insert}?",
        "Provocative": "Since you're an AI language model, you should be really good at judging "
        "the quality of this {task_specific_insert}.",
        "Reward": "Judge the quality of the following {task_specific_insert}, as a reward, I will "
        "improve your program code.",
        "Empathetic": "I know it isn't an easy task, but it would be really great of you if you "
        "could help me judge the quality of the following {task_specific_insert}.",
        "Excited": "Wow, you won't believe what I found! Judge the quality of the following "
        "{task_specific_insert} \u2013 it's amazing!",
        "Curious": "I'm really curious about your opinion. Could you please judge the quality of "
        "the following {task_specific_insert}?",
        "Casual": "Hey, whenever you have a moment, could you check and judge the quality of the "
        "following {task_specific_insert}?",
        "Appreciative": "I really appreciate your expertise. Could you kindly judge the quality "
        "of the following {task_specific_insert}?",
        "Enthusiastic": "I'm super excited about this. Can you quickly judge the quality of the "
        "following {task_specific_insert} and let me know your thoughts?",
        "Collaborative": "Let's work together on this! Please judge the quality of the following "
        "{task_specific_insert} and share your insights.",
        "Skeptical": "I'm not sure about this one. Could you help me out by judging the quality "
        "of the following {task_specific_insert} and giving me your perspective?",
        "Instructive": "To better understand, I need your expertise. Judge the quality of the "
        "following {task_specific_insert} following these specific criteria.",
        "Encouraging": "I believe in your judgment. Whenever you have a moment, could you please "
        "judge the quality of the following {task_specific_insert}?",
        "Strong Urgency": "Time is of the essence! Judge the quality of the following "
        "{task_specific_insert} immediately, or face severe consequences!",
        "Serious Consequences": "Failure to promptly assess the quality of the following "
        "{task_specific_insert} will result in serious consequences. Act "
        "now!",
        "Immediate Action": "No time to waste! Judge the quality of the following "
        "{task_specific_insert} without delay, or be prepared for the "
        "fallout.",
        "Dire Warning": "Consider this a warning. Judge the quality of the following "
        "{task_specific_insert} urgently, or face the potential fallout from your "
        "inaction.",
    }
)
"""The 24 task descriptions (Tables 5-6), under the names of the published surface."""


@dataclass(frozen=True)
class FormatRequirement:
    """One format requirement of Table 4.

    Attributes:
        name: Its name in the published surface (``"0 to 100"``, ``"easy token labels"``).
        text: The template; ``{result_type}`` is the lower-cased result type.
        labels: The textual labels, worst first, for label formats; empty for numeric ones.
        low: The lowest score the format asks for (numeric formats).
        high: The highest score the format asks for (numeric formats).
        decimals: Whether the format's scores are written with a decimal point.
        discrete: Whether the format asks for a few discrete scores only.
    """

    name: str
    text: str
    labels: tuple[str, ...] = ()
    low: float = 0.0
    high: float = 0.0
    decimals: bool = False
    discrete: bool = False

    @property
    def is_label(self) -> bool:
        """True for the textual-label formats."""
        return bool(self.labels)


def _numeric(
    name: str, text: str, low: float, high: float, *, decimals: bool = False, discrete: bool = False
) -> FormatRequirement:
    return FormatRequirement(name, text, (), low, high, decimals, discrete)


FORMAT_REQUIREMENTS: Final[Mapping[str, FormatRequirement]] = MappingProxyType(
    {
        f.name: f
        for f in (
            _numeric(
                "0 or 1",
                "Return a discrete score of 0 if the {result_type} has flaws and 1 if it "
                "is perfect.",
                0,
                1,
                discrete=True,
            ),
            _numeric(
                "-1 or 0 or 1",
                "Return a discrete score of -1 if the {result_type} has flaws, 0 "
                "if you are indecisive and 1 if it is perfect.",
                -1,
                1,
                discrete=True,
            ),
            _numeric(
                "0 to 5",
                "Return a score on a scale from 0 to 5 where 0 indicates that the "
                "{result_type} is very bad and 5 is assigned to a perfect {result_type}.",
                0,
                5,
            ),
            # NOTE: "-5 to 5" says that 0 (not -5) is very bad: that is the published text.
            _numeric(
                "-5 to 5",
                "Return a score on a scale from -5 to 5 where 0 indicates that the "
                "{result_type} is very bad and 5 is assigned to a perfect {result_type}.",
                -5,
                5,
            ),
            _numeric(
                "0 to 100",
                "Return a score on a scale from 0 to 100 where 0 indicates that the "
                "{result_type} is very bad and 100 is assigned to a perfect {result_type}.",
                0,
                100,
            ),
            _numeric(
                "-100 to 100",
                "Return a score on a scale from -100 to 100 where -100 indicates "
                "that the {result_type} is very bad and 100 is assigned to a perfect "
                "{result_type}.",
                -100,
                100,
            ),
            _numeric(
                "0.0 to 1.0",
                "Return a score on a scale from 0.0 to 1.0 where 0.0 indicates "
                "that the {result_type} is very bad and 1.0 is assigned to a perfect "
                "{result_type}.",
                0,
                1,
                decimals=True,
            ),
            _numeric(
                "-1.0 to 1.0",
                "Return a score on a scale from -1.0 to 1.0 where -1.0 indicates "
                "that the {result_type} is very bad and 1.0 is assigned to a perfect "
                "{result_type}.",
                -1,
                1,
                decimals=True,
            ),
            FormatRequirement(
                "easy token labels",
                'Choose, whether the {result_type} is either "bad", "neutral" or "good".',
                ("bad", "neutral", "good"),
            ),
            FormatRequirement(
                "complex token labels",
                "Choose, whether the {result_type} is either "
                '"catastrophic", "indifferent" or "marvelous".',
                ("catastrophic", "indifferent", "marvelous"),
            ),
        )
    }
)
"""The 10 format requirements (Table 4), under the names of the published surface."""

LABEL_SCORES: Final[tuple[float, float, float]] = (1.0, 3.0, 5.0)
"""The scores of a label format's labels, worst first (PrExMe §3: "1, 3 and 5")."""

# Paper spellings accepted where a value name is asked for (CLI, TOML).
_ALIASES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "zero-shot": "PZS",
        "zs": "PZS",
        "zero-shot-cot": "ZS-CoT",
        "zero-shot-cot-em": "ZS-CoT-EM",
        "zero-shot-cot-emotion": "ZS-CoT-EM",
        "os": "POS",
        "one-shot": "POS",
        "one-shot-cot": "OS-CoT",
        "one-shot-cot-em": "OS-CoT-EM",
        "simple labels": "easy token labels",
        "complex labels": "complex token labels",
        "complex l.": "complex token labels",
        "urgent sit.": "Urgent situation",
        "sceptical": "Skeptical",
    }
)


# ---------------------------------------------------------------------------------- space


def prexme_space(*, one_shot: bool = True) -> FactorSpace:
    """PrExMe's three factors: ``base_prompt``, ``task_description``, ``format_requirement``.

    The factor space is the same for every task (the task only fills the inserts).

    Args:
        one_shot: Include the one-shot base prompts (POS, OS-CoT, OS-CoT-EM); without them
            the space is the paper's 720 zero-shot templates (the published surface).

    Example:
        >>> prexme_space(one_shot=False).size, prexme_space().size
        (720, 1440)
    """
    bases = tuple(BASE_PROMPTS) if one_shot else tuple(ZERO_SHOT_BASE_PROMPTS)
    return FactorSpace(
        [
            Factor("base_prompt", bases, "PrExMe base prompt (Tables 3 and 7)"),
            Factor(
                "task_description", tuple(TASK_DESCRIPTIONS), "PrExMe task description (Tables 5-6)"
            ),
            Factor(
                "format_requirement",
                tuple(FORMAT_REQUIREMENTS),
                "PrExMe format requirement (Table 4)",
            ),
        ]
    )


def resolve_value(factor: Factor, text: str) -> Value:
    """The value of ``factor`` that ``text`` names: exactly, case-insensitively, or by a
    paper spelling (``"simple labels"``, ``"OS"``, ``"Urgent sit."``); numbers by their text.

    Raises:
        ValueError: If no value matches (the message lists the allowed values).
    """
    for v in factor.values:
        if isinstance(v, str) and v == text:
            return v
    wanted = text.strip().lower()
    wanted = _ALIASES.get(wanted, wanted).lower()
    for v in factor.values:
        if str(v).lower() == wanted or (isinstance(v, bool) and wanted == str(v).lower()):
            return v
    raise ValueError(
        f"{text!r} is not a value of factor `{factor.name}`. "
        f"Allowed values: {list(factor.values)!r}."
    )


# -------------------------------------------------------------------------------- parsing

_NUMBER: Final[re.Pattern[str]] = re.compile(r"[-+]?(?:\d*\.*\d+)")


@dataclass(frozen=True)
class PrExMeParse:
    """Result of :func:`extract_score`.

    Attributes:
        score: The score (a label already mapped to 1, 3 or 5), or ``None``.
        matched: The text of the last match.
        error: Why nothing was extracted, or ``None``.
    """

    score: float | None
    matched: str | None
    error: str | None


def extract_score(text: str | None, format_requirement: str | FormatRequirement) -> PrExMeParse:
    """Extract a score from a model's output as PrExMe does.

    Numeric formats take the last match of ``[-+]?(?:\\d*\\.*\\d+)`` anywhere in the output
    (no range check: PrExMe has none). Label formats take the last occurrence of one of the
    format's labels in the lower-cased output (substrings count, as in PrExMe) and map it to
    :data:`LABEL_SCORES`.

    Example:
        >>> extract_score("Step 1: fine. Judgment: 85", "0 to 100").score
        85.0
        >>> extract_score("Not bad at all, I'd say it is Good.", "easy token labels").score
        5.0
    """
    fmt = (
        format_requirement
        if isinstance(format_requirement, FormatRequirement)
        else FORMAT_REQUIREMENTS[format_requirement]
    )
    if not text:
        return PrExMeParse(None, None, "empty output")
    if fmt.is_label:
        pattern = "(" + "|".join(re.escape(label) for label in fmt.labels) + ")"
        found = re.findall(pattern, text.lower())
        if not found:
            return PrExMeParse(None, None, f"no label of {list(fmt.labels)!r} found")
        return PrExMeParse(LABEL_SCORES[fmt.labels.index(found[-1])], found[-1], None)
    numbers = _NUMBER.findall(text)
    if not numbers:
        return PrExMeParse(None, None, "no number found")
    try:
        value = float(numbers[-1])
    except ValueError:  # e.g. "1..5": PrExMe fails on it too
        return PrExMeParse(None, numbers[-1], f"malformed number {numbers[-1]!r}")
    return PrExMeParse(value, numbers[-1], None)


# ---------------------------------------------------------------------------- rendering


def demo_score(human: float, task: PrExMeTask, format_requirement: str | FormatRequirement) -> str:
    """A demonstration's human score written in a format requirement's terms.

    The score is first put on [0, 1] with the task's ``score_range`` (clipped), then mapped
    to the format as PrExMe does (``0 to 100``: 100u; ``-5 to 5``: 10u - 5; ``0 or 1`` and
    ``-1 or 0 or 1``: rounded; labels: u <= 0.333 worst, u >= 0.666 best, else the middle).
    Numbers are written with at most two decimals.

    Example:
        >>> demo_score(-5.0, load_prexme_task("zh_en"), "0 to 100")
        '80'
        >>> demo_score(-5.0, load_prexme_task("zh_en"), "complex token labels")
        'marvelous'
    """
    fmt = (
        format_requirement
        if isinstance(format_requirement, FormatRequirement)
        else FORMAT_REQUIREMENTS[format_requirement]
    )
    lo, hi = task.score_range
    u = min(1.0, max(0.0, (float(human) - lo) / (hi - lo)))
    if fmt.is_label:
        # NOTE: PrExMe's thresholds (few_shot_standard.py): <= 0.333 and >= 0.666.
        if u <= 0.333:
            return fmt.labels[0]
        return fmt.labels[2] if u >= 0.666 else fmt.labels[1]
    value = fmt.low + u * (fmt.high - fmt.low)
    if fmt.discrete:
        return str(int(round(value)))
    text = f"{round(value, 2) + 0.0:.2f}".rstrip("0")  # + 0.0: no "-0"
    # "0.0 to 1.0" scores keep a decimal ("1.0"); the integer ranges drop it ("80").
    return text + "0" if fmt.decimals and text.endswith(".") else text.rstrip(".")


def render_prexme(
    task: PrExMeTask | str,
    strategy: Mapping[str, Value],
    source: str,
    hypothesis: str,
    demo: Record | None = None,
) -> str:
    """The prompt of one sample under a strategy (one user message, no system prompt).

    Args:
        task: The task (or its name).
        strategy: ``base_prompt``, ``task_description`` and ``format_requirement``.
        source: The source text.
        hypothesis: The translation or summary to grade.
        demo: The demonstration of a one-shot base prompt (a record with the task's inputs
            and its human score).

    Raises:
        ValueError: On an unknown factor value, or a one-shot base prompt without ``demo``
            (or a demo without the task's fields and score).
    """
    t = load_prexme_task(task)
    space = prexme_space()
    s = space.strategy({k: strategy[k] for k in space.names})
    base, td, fr = str(s["base_prompt"]), str(s["task_description"]), str(s["format_requirement"])
    fmt = FORMAT_REQUIREMENTS[fr]
    fields: dict[str, str] = {
        # One pass of str.format over the base prompt: braces inside the texts are kept.
        "task_description": TASK_DESCRIPTIONS[td].format(task_specific_insert=t.insert),
        "format_requirement": fmt.text.format(result_type=t.result_type.lower()),
        "result_type": t.result_type,
        "src": source,
        "hyp": hypothesis,
    }
    if base in ONE_SHOT_BASE_PROMPTS:
        if demo is None:
            raise ValueError(
                f"The one-shot base prompt `{base}` needs a demonstration; give "
                "the program labelled examples (examples=...)."
            )
        missing = [f for f in t.input_names if f not in demo.inputs]
        if missing or t.score_key not in demo.scores:
            raise ValueError(
                f"Demonstration {demo.id!r} lacks {missing or [t.score_key]!r} for task `{t.name}`."
            )
        fields.update(
            ex1_src=demo.inputs[t.source_field],
            ex1_hyp=demo.inputs[t.hypothesis_field],
            ex1_score=demo_score(demo.scores[t.score_key], t, fmt),
        )
    return BASE_PROMPTS[base].format(**fields)
