"""The search core: factor spaces, strategies, the factor graph, and ask/tell searches.

Pure Python and numpy (networkx for the graph); no LLM and no DSPy is imported here. Every
search takes an explicit seed, is reproducible across processes, and can be saved and
resumed mid-run (:meth:`Search.state_dict` / :meth:`Search.from_state`).

Every search algorithm's class ends in ``Search`` (:class:`HPSSSearch`, :class:`AutoSearch`, ...):
the DSPy teleprompters of :mod:`judgeopt.teleprompt` that run them have the short names.
The names before that rule (``HPSS``, ``Greedy``, ``StepwiseGreedy``, ``SearchStrategy``) still
work, with a ``DeprecationWarning``.
"""

from __future__ import annotations

from .._renamed import renamed_names as _renamed_names
from ._auto import BUDGET_DEFAULTS, AutoSearch
from ._base import Kind, Search, Trial
from ._baselines import GreedySearch, GridSearch, RandomSearch, StepwiseGreedySearch
from ._csv import read_csv_rows
from ._factor_priors import FactorPriors
from ._graph import Artifact, ArtifactRequest, Constraint, FactorGraph, sample_valid
from ._hpss import HPSSSearch
from ._registry import SEARCHES
from ._space import Factor, FactorSpace, Strategy, Value
from ._tpe import TPESearch

__all__ = [
    "sample_valid",
    "read_csv_rows",
    "BUDGET_DEFAULTS",
    "HPSSSearch",
    "SEARCHES",
    "Artifact",
    "AutoSearch",
    "ArtifactRequest",
    "Constraint",
    "Factor",
    "FactorGraph",
    "FactorPriors",
    "FactorSpace",
    "GreedySearch",
    "GridSearch",
    "Kind",
    "RandomSearch",
    "Search",
    "StepwiseGreedySearch",
    "Strategy",
    "TPESearch",
    "Trial",
    "Value",
]

__getattr__ = _renamed_names(
    __name__,
    {
        "HPSS": "HPSSSearch",
        "Greedy": "GreedySearch",
        "StepwiseGreedy": "StepwiseGreedySearch",
        "SearchStrategy": "Search",
    },
    globals(),
)
