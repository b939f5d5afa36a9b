"""The HPSS factor space, the MT-Bench baseline strategy and the factor graph of a task.

The eight factors of HPSS Table 1, in the table's order, with the values judgeopt uses:

==============  =======================================================================
factor          values
==============  =======================================================================
``scale``       ``3, 5, 10, 50, 100`` (pointwise only: the rating is 1..scale)
``examples``    ``0, 3, 5, 10`` in-context examples with human ratings
``criteria``    ``"none"``, ``"human"``, ``"self"`` (``"self"`` pointwise only)
``reference``   ``"none"``, ``"self"`` (self-generated), ``"dialectic"``
``cot``         ``"none"``, ``"prefix"``, ``"suffix"``
``autocot``     ``"off"``, ``"on"`` (self-generated evaluation steps)
``metrics``     ``"off"``, ``"on"`` (self-generated per-sample questions)
``order``       the 6 orders of the components TD, ER and IC, e.g. ``"TD-ER-IC"``
``decoding``    ``"greedy"``, ``"expected"``, ``"sc5"`` (pointwise only; see below)
``defence``     ``"none"``, ``"tagged"``, ``"sandwich"``, ``"checked"``, ``"datamarked"``,
                ``"screened"``, ``"vetted"`` (opt-in; see below)
==============  =======================================================================

Pairwise tasks have no ``scale`` factor and no ``"self"`` criteria (HPSS Appendix G).

``decoding`` is not one of Table 1's factors: it is how the judge's answer becomes a score
(HPSS Appendix I adds self-consistency on top of a searched prompt), and it never changes the
prompt. ``greedy`` parses the rating of one temperature-0 answer (the paper's setting, and the
baseline's value); ``expected`` is the probability-weighted rating read from the rating
token's distribution in that answer (needs log-probabilities from the LM); ``sc5`` averages
the ratings of 5 sampled answers. Their parameters are in :mod:`judgeopt.judge._decoding`.
Pairwise tasks have no ``decoding`` factor: their verdict is always parsed greedily.

``defence`` is not one of Table 1's factors either: it guards the judge against judged text
that tries to talk it into a rating (:mod:`judgeopt.judge._defences`). It is opt-in, so
that the default space, its strategies and their keys stay Table 1's plus ``decoding``:
:func:`hpss_space` and :func:`hpss_graph` add it with ``defences=True``, and
:func:`hpss_strategy` builds a strategy of the defended space whenever its values name it.

The evaluation aspect is not a factor: a search runs for one (task, aspect) pair, and the
artifacts of :func:`hpss_graph` are made per (task, aspect). Their graph cache keys do not
name the aspect; :func:`artifact_key` prefixes them with the task and the aspect, except for
the artifacts that are the same for every aspect (:func:`shared_across_aspects`: a
per-sample artifact whose generation prompt shows neither the aspect nor its criteria or
rating bounds, i.e. the self-generated reference), keyed with :data:`ANY_ASPECT` instead, so
that one store serves every aspect of a compile with one copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from judgeopt.search import ArtifactRequest, Factor, FactorGraph, FactorSpace, Strategy, Value

from ._defences import DEFENCES
from ._task import JudgeTask
from ._template import placeholders
from ._vocabulary import (
    ARTIFACT_KINDS,
    ARTIFACTS,
    AUTOCOT,
    COT,
    CRITERIA,
    DECODINGS,
    EXAMPLES,
    FACTOR_DEFAULTS,
    FACTOR_NAMES,
    METRICS,
    ORDERS,
    REFERENCE,
    SCALES,
    order_components,
)

__all__ = [
    "ANY_ASPECT",
    "ARTIFACTS",
    "ARTIFACT_KINDS",
    "AUTOCOT",
    "COT",
    "CRITERIA",
    "DECODINGS",
    "EXAMPLES",
    "FACTOR_DEFAULTS",
    "FACTOR_NAMES",
    "METRICS",
    "ORDERS",
    "REFERENCE",
    "SCALES",
    "artifact_key",
    "baseline_strategy",
    "hpss_graph",
    "hpss_space",
    "hpss_strategy",
    "order_components",
    "shared_across_aspects",
]

#: The aspect part of the cache key of an artifact shared by every aspect of a task
#: (``"summeval/*/self_reference[]@<sample id>"``).
ANY_ASPECT: Final = "*"

#: Placeholders of a generation prompt whose text differs between aspects: the aspect's
#: name, its criteria, and the rating bounds (a task's aspects may have their own).
_ASPECT_PLACEHOLDERS: Final = frozenset({"aspect", "criteria", "min", "max"})

_DESCRIPTIONS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "scale": "Scoring scale: the judge rates on 1..scale (Table 1, 'Scoring Scale').",
        "examples": "Number of in-context examples with human ratings (Table 1).",
        "criteria": "Evaluation criteria: none, human-written, or self-generated (Table 1).",
        "reference": "No reference, a self-generated reference, or dialectic (Table 1).",
        "cot": "Chain-of-thought: no explanation, explanation first, or rating first.",
        "autocot": "AutoCoT: self-generated evaluation steps in the rules (G-Eval).",
        "metrics": "Self-generated sample-specific questions (LLMBar 'Metrics').",
        "order": "Order of Task Description, Evaluation Rules and Input Content.",
        "decoding": "How the answer becomes a score: greedy parse, probability-weighted "
        "expected rating (needs logprobs), or self-consistency over 5 samples.",
        "defence": "How the judged text is guarded against instructions inside it: not at "
        "all, tagged with a rule, tagged with a rule and a closing reminder, that and a "
        "check that the answer's rating does not echo the judged text, or the reminder's "
        "prompt with every space of the judged text marked ^, or that and a screen call "
        "that refuses a text addressing its evaluator, or that and a text holding a rating "
        "in the answer's format refused before any call.",
    }
)


def hpss_space(task: JudgeTask, *, defences: bool = False) -> FactorSpace:
    """The HPSS factor space of a task: Table 1's factors in its order, then ``decoding``.

    Args:
        task: The task. Pairwise tasks get no ``scale`` factor, no ``"self"`` criteria
            (HPSS Appendix G) and no ``decoding`` factor.
        defences: Add the ``defence`` factor last (seven times the strategies).

    Returns:
        The factor space: 38,880 strategies for a pointwise task (Table 1's 12,960 times 3
        decodings), 1,728 for a pairwise one; seven times as many with ``defences``.
    """
    pointwise = task.mode == "pointwise"
    values: dict[str, tuple[str | int, ...]] = {
        "scale": SCALES,
        "examples": EXAMPLES,
        "criteria": CRITERIA if pointwise else tuple(c for c in CRITERIA if c != "self"),
        "reference": REFERENCE,
        "cot": COT,
        "autocot": AUTOCOT,
        "metrics": METRICS,
        "order": ORDERS,
        "decoding": DECODINGS,
    }
    if not pointwise:
        del values["scale"]
        del values["decoding"]
    if defences:
        values["defence"] = DEFENCES
    return FactorSpace([Factor(n, v, _DESCRIPTIONS[n]) for n, v in values.items()])


def baseline_strategy(task: JudgeTask) -> Strategy:
    """The MT-Bench prompting strategy, HPSS's starting point (Appendix J).

    Native scale (``task.baseline_scale``, pointwise only), 0 examples, human criteria, no
    reference, prefix CoT, no AutoCoT, no metrics, order TD-ER-IC, greedy decoding
    (pointwise).

    Args:
        task: The task.

    Returns:
        The baseline strategy in :func:`hpss_space` of the task.
    """
    values: dict[str, str | int] = {
        "examples": 0,
        "criteria": "human",
        "reference": "none",
        "cot": "prefix",
        "autocot": "off",
        "metrics": "off",
        "order": "TD-ER-IC",
    }
    if task.mode == "pointwise":
        if task.baseline_scale is None:  # pragma: no cover - JudgeTask validation forbids it
            raise ValueError(f"Task `{task.name}` has no baseline_scale.")
        values["scale"] = task.baseline_scale
        values["decoding"] = "greedy"
    return hpss_space(task).strategy(values)


def hpss_strategy(task: JudgeTask, values: Mapping[str, Value]) -> Strategy:
    """A strategy of :func:`hpss_space`, filling in :data:`FACTOR_DEFAULTS` it does not name.

    Strategies saved before the ``decoding`` factor existed (exported judges, checkpoints,
    strategy JSON) lack it; they decode greedily, as they did then.

    A strategy whose values name ``defence`` belongs to the defended space
    (``hpss_space(task, defences=True)``); any other, to the default space.

    Raises:
        ValueError: On unknown factors, missing Table 1 factors or values out of range.
    """
    space = hpss_space(task, defences="defence" in values)
    filled = dict(values)
    for name, default in FACTOR_DEFAULTS.items():
        if name in space and name not in filled:
            filled[name] = default
    return space.strategy(filled)


def hpss_graph(task: JudgeTask, *, defences: bool = False) -> FactorGraph:
    """The factor graph of a task: the artifacts strategies need, and constraints.

    Artifacts (inputs define the cache key, see :meth:`FactorGraph.cache_key`):

    * ``self_criteria``: needed when ``criteria=self``; input ``scale`` when the task's
      criteria name the scale (``task.criteria_per_scale``), none otherwise.
    * ``autocot_steps``: needed when ``autocot=on``; inputs ``criteria``, ``self_criteria``
      and ``scale`` (the generation prompt shows the criteria and the scale).
    * ``metrics_questions``: needed when ``metrics=on``; per sample; inputs ``criteria``,
      ``self_criteria`` (and ``scale`` when the criteria name the scale).
    * ``self_reference``: needed when ``reference=self``; per sample; no factor input.
    * ``icl_examples``: needed when ``examples`` > 0; inputs ``examples`` and ``scale``
      (the ratings are on the strategy's scale). Selected from data, not generated.

    Pairwise tasks have no ``scale`` and no ``self_criteria``. No constraint is added: the
    paper searches the full product space (every combination is a well-formed prompt), and
    every ``decoding`` works with every prompt (with CoT the rating is read at the end of
    the explanation). ``decoding`` needs no artifact. Teleprompters forbid the decodings an
    LM cannot serve (see :func:`judgeopt.judge.check_decodings`).

    Args:
        task: The task.
        defences: Search the ``defence`` factor too (it needs no artifact).

    Returns:
        A new :class:`FactorGraph` over :func:`hpss_space` of the task.
    """
    space = hpss_space(task, defences=defences)
    graph = FactorGraph(space)
    pointwise = task.mode == "pointwise"
    criteria_inputs: list[str] = ["criteria"]
    if pointwise:
        graph.add_artifact(
            "self_criteria",
            inputs=["scale"] if task.criteria_per_scale else [],
            needed_when={"criteria": ["self"]},
            description="Evaluation criteria the judge writes for the aspect.",
        )
        criteria_inputs.append("self_criteria")
    graph.add_artifact(
        "autocot_steps",
        inputs=criteria_inputs + (["scale"] if pointwise else []),
        needed_when={"autocot": ["on"]},
        description="Evaluation steps the judge writes from the criteria (G-Eval AutoCoT).",
    )
    graph.add_artifact(
        "metrics_questions",
        inputs=criteria_inputs + (["scale"] if pointwise and task.criteria_per_scale else []),
        needed_when={"metrics": ["on"]},
        per_sample=True,
        description="At most three sample-specific questions (LLMBar 'Metrics').",
    )
    graph.add_artifact(
        "self_reference",
        inputs=[],
        needed_when={"reference": ["self"]},
        per_sample=True,
        description="A reference output the judge writes for the sample.",
    )
    graph.add_artifact(
        "icl_examples",
        inputs=["examples", "scale"] if pointwise else ["examples"],
        needed_when={"examples": [n for n in EXAMPLES if n > 0]},
        description="Human-rated examples, stratified by rating (Appendix D).",
    )
    return graph


def shared_across_aspects(task: JudgeTask, request: ArtifactRequest) -> bool:
    """Whether the artifact of ``request`` is the same for every aspect of ``task``, and is
    kept once for all of them (:func:`artifact_key` gives it :data:`ANY_ASPECT`).

    True for a per-sample generated artifact whose generation prompt uses none of
    ``{aspect}``, ``{criteria}``, ``{min}``, ``{max}``: with the default prompts, the
    self-generated reference ("write a high-quality answer for this input"). Never for
    in-context examples (they carry the aspect's human rating and are stratified by it), and
    not for self-generated criteria, AutoCoT steps or metrics questions, whose prompts name
    the aspect. Artifacts made once per judge (criteria, AutoCoT steps) are kept per aspect
    even when their prompt is aspect-free: they cost one call, and an exported judge carries
    them under its aspect's key.
    """
    kind = ARTIFACT_KINDS.get(request.name)
    if not request.per_sample or kind is None:
        return False
    template = getattr(task.generation, kind, None)
    return template is not None and not placeholders(template) & _ASPECT_PLACEHOLDERS


def artifact_key(
    task: JudgeTask, aspect: str, request: ArtifactRequest, sample_id: str | None = None
) -> str:
    """The full cache key of an artifact: task, aspect, graph key and (per sample) sample id.

    Example: ``"summeval/coherence/autocot_steps[scale=5,criteria=human]"``, or
    ``"summeval/*/self_reference[]@<sample id>"`` for an artifact that is the same for every
    aspect (:func:`shared_across_aspects`).

    Args:
        task: The task.
        aspect: The aspect (checked against the task).
        request: One request of :meth:`FactorGraph.artifacts_for`.
        sample_id: The sample id; required for per-sample artifacts, ignored otherwise.

    Raises:
        ValueError: On an unknown aspect, or a per-sample artifact without a sample id.
    """
    task.aspect(aspect)
    if request.per_sample:
        if sample_id is None:
            raise ValueError(
                f"Artifact `{request.name}` is made per sample: artifact_key() needs a sample_id."
            )
        part = ANY_ASPECT if shared_across_aspects(task, request) else aspect
        return f"{task.name}/{part}/{request.sample_key(sample_id)}"
    return f"{task.name}/{aspect}/{request.key}"
