"""One JSON file per judge: the exported form of a :class:`JudgeProgram`.

The file holds everything needed to rebuild the judge without the signature TOML and
without pickle: the full task definition, the aspect, the strategy, the artifacts it uses
(self-generated criteria, AutoCoT steps, in-context examples with their ratings and a spare
per slot), the rendered message template with placeholders for the input fields, the scoring
settings, the model it was compiled for, the validation/test results and a search summary.
It never holds an API key or endpoint credentials.

This module knows the file, not the program class: :func:`export_judge` reads any judge with
the attributes of :class:`ExportableJudge`, and :func:`build_judge` / :func:`read_judge` are
given the class to build (``JudgeProgram`` passes itself; :mod:`._load` binds it for
:func:`~judgeopt.judge.load_program`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from judgeopt import __version__
from judgeopt._io import write_text_atomic
from judgeopt.search import Strategy

from ._artifacts import ArtifactMaker, ArtifactStore
from ._compiled import CompileReport
from ._decoding import Decoding
from ._defences import SCREEN_THRESHOLD, SCREENED_DEFENCES, VETTED_DEFENCES
from ._factors import artifact_key, hpss_graph
from ._render import render_template
from ._task import JudgeTask

__all__ = [
    "ENSEMBLE_FORMAT",
    "FORMAT_VERSION",
    "ExportableJudge",
    "ExportedJudge",
    "build_judge",
    "export_judge",
    "read_judge",
    "read_judge_file",
    "save_judge",
]

FORMAT_VERSION = 1
#: The ``format`` field of an exported ensemble (:class:`judgeopt.judge.JudgeEnsemble`).
ENSEMBLE_FORMAT = "judgeopt-ensemble"


class ExportableJudge(Protocol):
    """What :func:`export_judge` reads of a judge (:class:`~judgeopt.judge.JudgeProgram` has
    it). ``selection``, ``comparisons`` and ``test_items`` are read when present."""

    @property
    def task(self) -> JudgeTask: ...
    @property
    def aspect(self) -> str: ...
    @property
    def strategy(self) -> Strategy: ...
    @property
    def store(self) -> ArtifactStore: ...
    @property
    def maker(self) -> ArtifactMaker: ...
    @property
    def rating_bounds(self) -> tuple[int, int]: ...
    @property
    def decoding(self) -> Decoding: ...
    @property
    def search_result(self) -> Any: ...
    @property
    def model_name(self) -> str | None: ...
    @property
    def example_seed(self) -> int: ...
    @property
    def validation(self) -> dict[str, Any] | None: ...
    @property
    def test(self) -> dict[str, Any] | None: ...
    def lm_kwargs(self) -> dict[str, Any]: ...


_J = TypeVar("_J", bound=ExportableJudge)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ExportedArtifacts(_Model):
    """Artifacts of the exported strategy.

    Attributes:
        texts: Generated texts by cache key (self-generated criteria, AutoCoT steps).
        examples: In-context examples by cache key: ``[{"id", "inputs", "rating",
            "spare"}]`` (the spare replaces an example when the judged item is that example).
    """

    texts: dict[str, str] = {}
    examples: dict[str, list[dict[str, Any]]] = {}


class Scoring(_Model):
    """How the output becomes a score.

    ``decoding`` repeats the strategy's ``decoding`` factor (``"greedy"`` for pairwise
    judges and for files written before the factor existed) with its parameters: answers per
    item (``samples``), their ``temperature`` and first ``seed``, and the ``top_logprobs``
    asked of the LM (``expected`` only). ``JudgeProgram.load`` scores with these parameters.
    ``screen_threshold`` (defence ``screened`` only): a text whose screen's probability of
    "Yes" is above it is refused; ``screen_calibration`` records how it was set on clean items
    (:func:`judgeopt.judge.calibrate_screen`; ``None``: the fixed default).
    """

    parser: str
    scale: int | None = None
    rating_min: int | None = None
    rating_max: int | None = None
    decoding: Literal["greedy", "expected", "sc5"] = "greedy"
    samples: int = 1
    temperature: float = 0.0
    top_logprobs: int | None = None
    seed: int = 0
    max_tokens: int | None = None
    screen_threshold: float | None = None
    screen_calibration: dict[str, Any] | None = None


class ExportedJudge(_Model):
    """The exported judge (``format_version`` 1)."""

    format_version: Literal[1]
    judgeopt_version: str
    task_name: str
    mode: Literal["pointwise", "pairwise"]
    fields: list[str]
    task: dict[str, Any]
    aspect: str
    strategy: dict[str, Any]
    artifacts: ExportedArtifacts
    template: str | None = None
    messages: list[dict[str, str]] | None = None
    placeholders: list[str] | None = None
    scoring: Scoring
    model: str | None = None
    example_seed: int = 0
    validation: dict[str, Any] | None = None
    test: dict[str, Any] | None = None
    search: dict[str, Any] | None = None
    selection: dict[str, Any] | None = None
    comparisons: dict[str, dict[str, Any]] | None = None
    test_items: list[dict[str, Any]] | None = None


def export_judge(program: ExportableJudge) -> ExportedJudge:
    """The exported form of ``program`` (see the module docstring)."""
    task = program.task
    graph = hpss_graph(task)
    texts: dict[str, str] = {}
    criteria_text = autocot = None
    for req in graph.artifacts_for(program.strategy):
        if req.per_sample or req.name == "icl_examples":
            continue
        key = artifact_key(task, program.aspect, req)
        value = program.store.get(key)
        if value is not None:
            texts[key] = value
            if req.name == "self_criteria":
                criteria_text = value
            elif req.name == "autocot_steps":
                autocot = value
    examples = (
        program.maker.examples_for_export(program.strategy)
        if int(program.strategy["examples"]) > 0
        else {}
    )
    template = render_template(
        task, program.aspect, program.strategy, criteria_text=criteria_text, autocot_steps=autocot
    )
    messages, placeholders = rendered_messages(program, criteria_text, autocot, examples)
    pairwise = task.mode == "pairwise"
    lo, hi = (None, None) if pairwise else program.rating_bounds
    search = program.search_result.to_dict() if program.search_result is not None else None
    decoding = program.decoding.to_dict()
    screened = program.strategy.get("defence") in SCREENED_DEFENCES
    threshold = float(getattr(program, "screen_threshold", SCREEN_THRESHOLD))
    calibration = getattr(program, "screen_calibration", None) if screened else None
    vetted = program.strategy.get("defence") in VETTED_DEFENCES
    parser = _parser_text(
        pairwise, decoding, threshold if screened else None, calibration, vetted=vetted
    )
    return ExportedJudge(
        format_version=FORMAT_VERSION,
        judgeopt_version=__version__,
        task_name=task.name,
        mode=task.mode,
        fields=list(task.input_names),
        task=task.model_dump(mode="json"),
        aspect=program.aspect,
        strategy=program.strategy.as_dict(),
        artifacts=ExportedArtifacts(texts=texts, examples=examples),
        template=template,
        messages=messages,
        placeholders=placeholders,
        scoring=Scoring(
            parser=parser,
            scale=None if pairwise else int(program.strategy["scale"]),
            rating_min=lo,
            rating_max=hi,
            decoding=decoding["name"],
            samples=decoding["samples"],
            temperature=decoding["temperature"],
            top_logprobs=decoding["top_logprobs"],
            seed=decoding["seed"],
            max_tokens=program.lm_kwargs().get("max_tokens"),
            screen_threshold=threshold if screened else None,
            screen_calibration=calibration,
        ),
        model=program.model_name,
        example_seed=program.example_seed,
        validation=program.validation,
        test=program.test,
        search=search,
        selection=getattr(program, "selection", None),
        comparisons=getattr(program, "comparisons", None),
        test_items=_test_items(getattr(program, "test_items", None)),
    )


def _parser_text(
    pairwise: bool,
    decoding: dict[str, Any],
    threshold: float | None,
    calibration: Any,
    *,
    vetted: bool = False,
) -> str:
    """``scoring.parser``: how the answer becomes a score, in words (``threshold``: the
    ``screened`` defence's, ``None`` without a screen; ``vetted``: the format check
    first)."""
    parser = (
        "last [[A]]/[[B]]/[[C]] verdict"
        if pairwise
        else "last [[n]] rating, then the fallbacks of docs/parsing.md"
    )
    if decoding["name"] == "expected":
        parser = (
            "probability-weighted rating at the position of the greedy answer's last "
            "[[n]] rating (ratings of several tokens chained, renormalised over the "
            "valid ratings)"
        )
    elif decoding["samples"] > 1:
        parser = f"mean of the ratings parsed from {decoding['samples']} samples ({parser})"
    if threshold is not None:
        parser += (
            "; then the screen of defence 'screened' or 'vetted' (one more call, "
            "judgeopt.judge.screen_messages): the rating is refused when the screen's "
            f"probability of 'Yes' is above {threshold:.4g}"
            + (" (calibrated on clean items)" if calibration else "")
        )
    if vetted:
        parser = (
            "a judged text holding a rating in the answer format is refused before any call "
            "(judgeopt.judge.forged_rating); else " + parser
        )
    return parser


def _test_items(items: Any) -> list[dict[str, Any]] | None:
    """``[{"id", "human", "score"}]`` of the test items (ItemResults or such dicts)."""
    if not items:
        return None
    out = []
    for item in items:
        get = item.get if isinstance(item, dict) else lambda k, i=item: getattr(i, k, None)
        out.append({"id": get("id"), "human": get("human"), "score": get("score")})
    return out


def rendered_messages(
    program: ExportableJudge,
    criteria_text: str | None,
    autocot: str | None,
    examples: dict[str, list[dict[str, Any]]],
) -> tuple[list[dict[str, str]], list[str]]:
    """The judge's chat messages with every artifact it can fill, and what is left open.

    The system message (when the task has one) and the user prompt, with the criteria,
    AutoCoT steps and in-context examples written in; only the item's input fields remain
    as ``{field}`` placeholders, plus the per-item artifacts (``{metrics_questions}``,
    ``{self_reference}``), which the judge generates for each item, and any artifact the
    judge has not generated yet (``{self_criteria}``, ``{autocot_steps}`` of a judge that
    never ran). Returns ``(messages, placeholders)``.
    """
    task = program.task
    pairs = [(item["inputs"], item["rating"]) for items in examples.values() for item in items]
    strategy = program.strategy
    n_examples = int(strategy["examples"])
    user = render_template(
        task,
        program.aspect,
        strategy,
        criteria_text=criteria_text,
        autocot_steps=autocot,
        examples=pairs if n_examples > 0 and len(pairs) == n_examples else None,
    )
    messages = ([{"role": "system", "content": task.system}] if task.system else []) + [
        {"role": "user", "content": user}
    ]
    graph = hpss_graph(task)
    given = {
        "self_criteria": criteria_text,
        "autocot_steps": autocot,
        "icl_examples": pairs if len(pairs) == n_examples else None,
    }
    open_artifacts = [
        req.name
        for req in graph.artifacts_for(strategy)
        if req.per_sample or given.get(req.name) is None
    ]
    return messages, [*task.input_names, *open_artifacts]


def _check_rendered(program: ExportableJudge, data: ExportedJudge, source: str) -> None:
    """Refuse a file whose ``template`` or ``messages`` no longer match its judge."""
    fresh = export_judge(program)
    for name in ("template", "messages"):
        stored = getattr(data, name)
        if stored is not None and stored != getattr(fresh, name):
            raise ValueError(
                f"{source}: `{name}` does not match the judge's task, strategy and artifacts. "
                f"`{name}` is generated from them on export and is never read back, so an "
                "edit there would be ignored: change `task` (its prompt wording), `strategy` "
                "or `artifacts` instead, or delete all three generated keys, `template`, "
                "`messages` and `placeholders`, from the file to load it as it is (they are "
                "written again on the next export)."
            )


def save_judge(program: ExportableJudge, path: str | os.PathLike[str]) -> Path:
    """Write ``program`` as one JSON file (atomically). Returns the path."""
    data = export_judge(program).model_dump(mode="json")
    return write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def read_judge(program_type: Callable[..., _J], path: str | os.PathLike[str], **kwargs: Any) -> _J:
    """Validate an exported judge and rebuild it as a ``program_type`` (no pickle).

    Args:
        program_type: The judge class (``JudgeProgram``), called like its constructor.
        path: The JSON file.
        **kwargs: Passed to ``program_type`` (e.g. ``lm=``).

    Raises:
        ValueError: On a missing file, malformed JSON, an unsupported ``format_version`` or
            an invalid field (naming it).
    """
    p = Path(path)
    raw = read_judge_file(p)
    if raw.get("format") == ENSEMBLE_FORMAT:
        raise ValueError(
            f"{p} is a judge ensemble: load it with judgeopt.load_judge() or "
            "judgeopt.JudgeEnsemble.load()."
        )
    return build_judge(program_type, raw, source=str(p), **kwargs)


def read_judge_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object of an exported judge or ensemble file.

    Raises:
        ValueError: On a missing file, malformed JSON or a non-object.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"Judge file not found: {p}")
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not valid JSON: {e}") from e
    if not isinstance(raw, dict):
        raise ValueError(f"{p}: an exported judge is a JSON object; got {type(raw).__name__}.")
    return raw


def build_judge(
    program_type: Callable[..., _J], raw: dict[str, Any], *, source: str = "<dict>", **kwargs: Any
) -> _J:
    """Validate the exported form of one judge and rebuild it as a ``program_type`` (see
    :func:`read_judge`; ``source`` names the origin in error messages)."""
    p = source
    if isinstance(raw, dict) and raw.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{p}: format_version {raw.get('format_version')!r} is not supported "
            f"(this judgeopt reads {FORMAT_VERSION})."
        )
    try:
        data = ExportedJudge.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(
            f"`{'.'.join(str(x) for x in err['loc'])}`: {err['msg']}" for err in e.errors()
        )
        raise ValueError(f"{p}: invalid exported judge: {problems}") from None
    task = JudgeTask.from_dict(data.task, source=str(p))
    scoring = data.scoring
    decoding = data.strategy.get("decoding", "greedy")
    if scoring.decoding != decoding:
        raise ValueError(
            f"{p}: invalid exported judge: `scoring.decoding` is "
            f"{scoring.decoding!r} but the strategy's decoding is {decoding!r}."
        )
    try:
        program = program_type(
            task,
            data.aspect,
            data.strategy,
            artifacts=ArtifactStore(data=data.artifacts.texts),
            example_seed=data.example_seed,
            fixed_examples=data.artifacts.examples,
            max_tokens=kwargs.pop("max_tokens", data.scoring.max_tokens),
            decoding_params=kwargs.pop(
                "decoding_params",
                {
                    "samples": scoring.samples,
                    "temperature": scoring.temperature,
                    "top_logprobs": scoring.top_logprobs,
                    "seed": scoring.seed,
                },
            ),
            **kwargs,
        )
    except ValueError as e:
        # An unknown aspect, factor or value (a hand-edited file, or one of another version).
        raise ValueError(f"{p}: invalid exported judge: {e}") from None
    if scoring.screen_threshold is not None and hasattr(program, "with_screen_threshold"):
        program = program.with_screen_threshold(
            scoring.screen_threshold, scoring.screen_calibration
        )
    program = _restore_results(program, data)
    _check_rendered(program, data, p)
    return program


def _restore_results(program: Any, data: ExportedJudge) -> Any:
    """The rebuilt judge, carrying the results its file records (one compile report)."""
    program = program.with_report(
        CompileReport(
            validation=data.validation,
            test=data.test,
            selection=data.selection,
            comparisons=data.comparisons,
            test_items=data.test_items,
            model_name=data.model,
        )
    )
    program.exported_search = data.search
    return program
