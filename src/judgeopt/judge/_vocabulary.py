"""The words judge prompts and tasks share: factor values, artifact names, placeholder names.

The values of the HPSS factors (Table 1, plus ``decoding``), the names of the artifacts
strategies need, and the placeholders judgeopt fills itself. The task schema
(:mod:`._task`), the factor space (:mod:`._factors`) and the renderer (:mod:`._render`) all
read them from here, so none of them has to import another for its vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

__all__ = [
    "ARTIFACTS",
    "ARTIFACT_KINDS",
    "AUTOCOT",
    "COMMON_PLACEHOLDERS",
    "COT",
    "CRITERIA",
    "DECODINGS",
    "EXAMPLES",
    "FACTOR_DEFAULTS",
    "FACTOR_NAMES",
    "METRICS",
    "ORDERS",
    "REFERENCE",
    "RESERVED",
    "SCALES",
    "SCALE_PLACEHOLDERS",
    "order_components",
]

# --------------------------------------------------------------------------------------
# Factor values and artifact names
# --------------------------------------------------------------------------------------
SCALES: Final[tuple[int, ...]] = (3, 5, 10, 50, 100)
"""Values of the ``scale`` factor: the judge rates on 1..scale."""

EXAMPLES: Final[tuple[int, ...]] = (0, 3, 5, 10)
"""Values of the ``examples`` factor: how many in-context examples the prompt shows."""

CRITERIA: Final[tuple[str, ...]] = ("none", "human", "self")
"""Values of the ``criteria`` factor (``"self"`` is pointwise only)."""

REFERENCE: Final[tuple[str, ...]] = ("none", "self", "dialectic")
"""Values of the ``reference`` factor."""

COT: Final[tuple[str, ...]] = ("none", "prefix", "suffix")
"""Values of the ``cot`` factor."""

AUTOCOT: Final[tuple[str, ...]] = ("off", "on")
"""Values of the ``autocot`` factor."""

METRICS: Final[tuple[str, ...]] = ("off", "on")
"""Values of the ``metrics`` factor."""

ORDERS: Final[tuple[str, ...]] = (
    "TD-ER-IC",
    "TD-IC-ER",
    "ER-TD-IC",
    "ER-IC-TD",
    "IC-TD-ER",
    "IC-ER-TD",
)
"""Values of the ``order`` factor: the order of Task Description, Evaluation Rules and
Input Content in the prompt (Table 1's order)."""

DECODINGS: Final[tuple[str, ...]] = ("greedy", "expected", "sc5")
"""Values of the ``decoding`` factor (pointwise only): parse one greedy answer, the
probability-weighted expected rating, or self-consistency over 5 samples."""

FACTOR_DEFAULTS: Final[Mapping[str, str]] = MappingProxyType({"decoding": "greedy"})
"""Values assumed for factors added after strategies were first saved: a strategy (exported
judge, checkpoint, CLI argument) that does not name ``decoding`` decodes greedily."""

FACTOR_NAMES: Final[tuple[str, ...]] = (
    "scale",
    "examples",
    "criteria",
    "reference",
    "cot",
    "autocot",
    "metrics",
    "order",
    "decoding",
)
"""All factor names: Table 1's order, then ``decoding`` (pairwise spaces leave out ``scale``
and ``decoding``)."""

ARTIFACTS: Final[tuple[str, ...]] = (
    "self_criteria",
    "autocot_steps",
    "metrics_questions",
    "self_reference",
    "icl_examples",
)
"""Artifact names of :func:`hpss_graph`."""

ARTIFACT_KINDS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "self_criteria": "criteria",
        "autocot_steps": "autocot",
        "metrics_questions": "metrics",
        "self_reference": "reference",
    }
)
"""Artifact name -> ``kind`` argument of :func:`~judgeopt.judge._render.generation_prompt`
for the artifacts an LLM generates (``icl_examples`` are selected from data instead)."""


def order_components(order: str) -> tuple[str, str, str]:
    """The three components of an ``order`` value, e.g. ``("TD", "ER", "IC")``.

    Raises:
        ValueError: If ``order`` is not one of :data:`ORDERS` (the message lists them).
    """
    if order not in ORDERS:
        raise ValueError(f"Unknown order {order!r}. Allowed: {list(ORDERS)!r}.")
    a, b, c = order.split("-")
    return a, b, c


# --------------------------------------------------------------------------------------
# Placeholder names
# --------------------------------------------------------------------------------------
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
:func:`~judgeopt.judge.render_template` leaves as placeholders); input fields may not
use them as names."""
