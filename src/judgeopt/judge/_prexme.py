"""PrExMe's hierarchical prompt templates (Leiter & Eger), as a judge family.

A PrExMe prompt is a *base prompt* (zero-shot or one-shot; Tables 3 and 7) filled with a
*task description* (Tables 5-6), a *format requirement* (Table 4), the task-specific
insert (``"translation from Chinese to English"``, ``"summary of a given source text"``),
the source text and the hypothesis. The three template slots are the three factors of
:func:`prexme_space`; :class:`PrExMeProgram` judges with one strategy of that space and has
:class:`~judgeopt.judge.JudgeProgram`'s calling convention, so
:func:`judgeopt.evaluate.evaluate`, the teleprompters and ``judgeopt grid`` run it unchanged.

The template texts are the ones of the published runs (``Gringham/PrExMe`` at ``a3aea5b``,
``iterator/prompts/zero_shot.py`` and ``few_shot_standard.py``), which the paper's tables
print; where the machine-converted tables are garbled the code's text is used, and where the
paper leaves a detail open the choice is documented in ``docs/prexme.md``.

Scores are extracted as in PrExMe (:func:`extract_score`): the last number anywhere in the
output for numeric formats, else the last of the format's labels (case-insensitive), mapped
to 1, 3 and 5. An output without either is *unparsed* (``score=None``); :func:`evaluate`
then gives it the template's average score over the evaluated items and counts it.

One-shot base prompts show the most similar labelled example of a pool
(:class:`DemoRetriever`: TF-IDF over character n-grams of the source and the hypothesis, as
PrExMe concatenates the two sentence embeddings), never one with the same source text.

This module holds the program (:class:`PrExMeProgram` and its adapter); the template texts,
tasks, space, score extraction and rendering are in ``_prexme_templates.py``, the
demonstration retrieval in ``_prexme_retrieval.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

import dspy

from judgeopt._validation import check_int
from judgeopt.data import Record
from judgeopt.search import FactorGraph, Strategy, Value

from ._adapter import choose_lm, predict_with
from ._artifacts import ArtifactStore
from ._compiled import CompiledViews, CompileReport
from ._prexme_retrieval import DemoRetriever
from ._prexme_templates import (
    BASE_PROMPTS,
    FORMAT_REQUIREMENTS,
    LABEL_SCORES,
    ONE_SHOT_BASE_PROMPTS,
    PREXME_TASKS,
    TASK_DESCRIPTIONS,
    ZERO_SHOT_BASE_PROMPTS,
    FormatRequirement,
    PrExMeParse,
    PrExMeTask,
    demo_score,
    extract_score,
    load_prexme_task,
    mt_task,
    prexme_space,
    render_prexme,
    resolve_value,
)

# The template names are re-exported here, where the judge package's face and older code
# import them from.
__all__ = [
    "BASE_PROMPTS",
    "FORMAT_REQUIREMENTS",
    "LABEL_SCORES",
    "ONE_SHOT_BASE_PROMPTS",
    "PREXME_TASKS",
    "TASK_DESCRIPTIONS",
    "ZERO_SHOT_BASE_PROMPTS",
    "DemoRetriever",
    "FormatRequirement",
    "PrExMeAdapter",
    "PrExMeParse",
    "PrExMeProgram",
    "PrExMeTask",
    "demo_score",
    "extract_score",
    "load_prexme_task",
    "mt_task",
    "prexme_space",
    "render_prexme",
    "resolve_value",
]

PROMPT_KEY = "__prexme_prompt__"


class PrExMeAdapter(dspy.Adapter):
    """Sends a PrExMe prompt as one user message and extracts the score as PrExMe does.

    ``parse`` never raises on model text: an output without a score gives ``score=None`` and
    a ``parse_error``.

    Args:
        program: The program whose format requirement is used.
    """

    def __init__(self, program: PrExMeProgram) -> None:
        super().__init__()
        self.program = program

    def format(
        self, signature: Any, demos: list[dict[str, Any]], inputs: dict[str, Any]
    ) -> list[dict[str, Any]]:
        return [{"role": "user", "content": str(inputs[PROMPT_KEY])}]

    def parse(self, signature: Any, completion: str) -> dict[str, Any]:
        fr = str(self.program.strategy["format_requirement"])
        r = extract_score(completion, fr)
        base = str(self.program.strategy["base_prompt"])
        rationale = completion.strip() if "CoT" in base else None
        return {
            "score": r.score,
            "rationale": rationale,
            "raw": completion,
            "parse_error": r.error,
            "parse_method": "prexme_last_match" if r.error is None else None,
        }


def _signature(task: PrExMeTask) -> type[dspy.Signature]:
    fields: dict[str, Any] = {name: (str, dspy.InputField()) for name in task.input_names}
    fields["score"] = (float, dspy.OutputField(desc="the extracted score"))
    fields["rationale"] = (str, dspy.OutputField(desc="the judge's reasoning, if any"))
    fields["raw"] = (str, dspy.OutputField(desc="the judge's output text"))
    fields["parse_error"] = (str, dspy.OutputField(desc="why no score was found, if so"))
    fields["parse_method"] = (str, dspy.OutputField(desc="which parsing rule matched"))
    signature: type[Any] = dspy.make_signature(fields, f"Judge the {task.result_type.lower()}.")
    return signature


class PrExMeProgram(CompiledViews, dspy.Module):
    """A PrExMe prompt template as a judge, with :class:`JudgeProgram`'s calling convention.

    ``judge(inputs, sample_id=..., lm=...)`` (or ``program(source=..., translation=...)``)
    returns a ``dspy.Prediction`` with ``score`` (``None`` when nothing could be extracted),
    ``raw``, ``rationale`` (the output of a CoT base prompt), ``parse_error``, ``parse_method``
    and ``demo_id`` (the demonstration's record id for one-shot base prompts).

    It provides the copy protocol of the teleprompters (:class:`~judgeopt.judge.JudgeStudent`),
    so ``HPSS().compile(PrExMeProgram("zh_en"), trainset=records)`` searches the PrExMe space
    (:func:`prexme_space`, one-shot base prompts included: the trainset is their example
    pool) and returns a ``PrExMeProgram`` carrying the compile's ``report_``.

    Args:
        task: A :class:`PrExMeTask` or its name (``"en_de"``, ``"zh_en"``, ``"summarization"``).
        strategy: ``base_prompt``, ``task_description`` and ``format_requirement``; default
            ``PZS`` / ``Neutral`` / ``0 to 100``.
        examples: Labelled records (or a :class:`DemoRetriever`) for the one-shot base prompts.
        lm: The LM to use instead of DSPy's configured one.
        max_tokens: Output token limit (PrExMe: 180).

    Raises:
        ValueError: On an unknown task or factor value, or a one-shot strategy without examples.

    Example:
        >>> p = PrExMeProgram("zh_en", {"base_prompt": "PZS", "task_description": "Polite",
        ...                             "format_requirement": "0 or 1"})
        >>> p.render({"source": "你好", "translation": "Hello"}).splitlines()[1:3]
        ['Source Text: 你好 ', 'Translation: Hello ']
    """

    DEFAULT_STRATEGY: Final[Mapping[str, str]] = MappingProxyType(
        {"base_prompt": "PZS", "task_description": "Neutral", "format_requirement": "0 to 100"}
    )

    def __init__(
        self,
        task: PrExMeTask | str,
        strategy: Mapping[str, Value] | None = None,
        *,
        examples: Sequence[Record] | DemoRetriever | None = None,
        lm: dspy.BaseLM | None = None,
        max_tokens: int = 180,
    ) -> None:
        super().__init__()
        self.task = load_prexme_task(task)
        self.aspect = self.task.score_key
        self.space = prexme_space()
        if examples is None or isinstance(examples, DemoRetriever):
            self.retriever = examples
        else:
            self.retriever = DemoRetriever(examples, self.task)
        self.strategy = self._check(
            self.space.strategy(dict(self.DEFAULT_STRATEGY if strategy is None else strategy))
        )
        self.lm = lm
        self.max_tokens = check_int(max_tokens, "max_tokens", min_value=1, owner="PrExMeProgram")
        self.adapter = PrExMeAdapter(self)
        self.signature = _signature(self.task)

    def _check(self, strategy: Strategy) -> Strategy:
        if strategy["base_prompt"] in ONE_SHOT_BASE_PROMPTS and self.retriever is None:
            raise ValueError(
                f"The one-shot base prompt `{strategy['base_prompt']}` needs "
                "labelled examples: pass examples=... (records with the task's "
                "inputs and human score)."
            )
        return strategy

    @property
    def one_shot(self) -> bool:
        """Whether the strategy's base prompt shows a demonstration."""
        return self.strategy["base_prompt"] in ONE_SHOT_BASE_PROMPTS

    # Copies (the protocol teleprompters compile through, :class:`JudgeStudent`) -----------
    def _copy(self) -> PrExMeProgram:
        """A shallow copy with its own adapter (sharing the examples and the LM)."""
        new = copy.copy(self)
        new.adapter = PrExMeAdapter(new)
        return new

    def with_strategy(self, strategy: Mapping[str, Value] | Strategy) -> PrExMeProgram:
        """A copy judging with another strategy (sharing the examples and the LM), without
        compile results (it keeps ``model_name``)."""
        new = self._copy()
        new.strategy = self._check(self.space.strategy(dict(strategy)))
        new.report_ = CompileReport(model_name=self.model_name)
        return new

    def fresh_copy(
        self,
        *,
        trainset: Sequence[Record] | None = None,
        artifacts: ArtifactStore | None = None,
        example_seed: int | None = None,
        lm: dspy.BaseLM | None = None,
    ) -> PrExMeProgram:
        """A new program with this one's task, strategy and settings, without compile
        results (what a teleprompter compiles; ``None`` keeps this program's own).

        Args:
            trainset: Labelled records the one-shot demonstrations are retrieved from,
                instead of this program's examples.
            artifacts: Ignored: a PrExMe prompt needs no generated artifact.
            example_seed: Ignored: the demonstration is the most similar example.
            lm: The LM to use.
        """
        examples = self.retriever if trainset is None else DemoRetriever(trainset, self.task)
        return type(self)(
            self.task,
            self.strategy,
            examples=examples,
            lm=self.lm if lm is None else lm,
            max_tokens=self.max_tokens,
        )

    def search_graph(self) -> FactorGraph:
        """A new factor graph of :func:`prexme_space` (no constraint, no artifact)."""
        return FactorGraph(self.space)

    def resolve_lm(self, lm: dspy.BaseLM | None = None) -> dspy.BaseLM:
        """The LM a call uses: ``lm``, else the program's, else DSPy's configured one."""
        return choose_lm(lm, self.lm, "PrExMeProgram")

    def demo_for(self, inputs: Mapping[str, Any]) -> Record | None:
        """The demonstration a one-shot strategy shows for ``inputs`` (``None`` otherwise)."""
        if not self.one_shot or self.retriever is None:
            return None
        t = self.task
        return self.retriever.nearest(str(inputs[t.source_field]), str(inputs[t.hypothesis_field]))

    def render(self, inputs: Mapping[str, Any]) -> str:
        """The prompt for one sample.

        Raises:
            ValueError: On a missing input field, or when no demonstration is available.
        """
        t = self.task
        missing = [f for f in t.input_names if f not in inputs]
        if missing:
            raise ValueError(
                f"Missing input field(s) {missing!r} for PrExMe task `{t.name}`; "
                f"got {sorted(inputs)!r}."
            )
        demo = self.demo_for(inputs)
        if self.one_shot and demo is None:
            raise ValueError("No demonstration with a different source text is available.")
        return render_prexme(
            t, self.strategy, str(inputs[t.source_field]), str(inputs[t.hypothesis_field]), demo
        )

    def judge(
        self,
        inputs: Mapping[str, Any],
        *,
        sample_id: str | None = None,
        lm: dspy.BaseLM | None = None,
    ) -> dspy.Prediction:
        """Judge one sample (``sample_id`` is accepted for the JudgeProgram convention).

        Raises:
            ValueError: On a missing input field.
            NoLMError: When no LM is configured.
            judgeopt.lm.LMError: When the LM call fails.
        """
        prompt = self.render(inputs)
        demo = self.demo_for(inputs)
        the_lm = self.resolve_lm(lm)
        fields = {f: str(inputs[f]) for f in self.task.input_names}
        return predict_with(
            self.adapter,
            the_lm,
            {"max_tokens": self.max_tokens},
            self.signature,
            {**fields, PROMPT_KEY: prompt},
            demo_id=demo.id if demo is not None else None,
        )

    def forward(self, **inputs: Any) -> dspy.Prediction:
        """Judge one sample given its input fields as keyword arguments."""
        sample_id = inputs.pop("sample_id", None)
        return self.judge(inputs, sample_id=sample_id)

    def __repr__(self) -> str:
        return f"PrExMeProgram({self.task.name}: {self.strategy})"
