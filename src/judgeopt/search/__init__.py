"""The search core: factor spaces, strategies, the factor graph, and ask/tell searches.

Pure Python and numpy (networkx for the graph); no LLM and no DSPy is imported here. Every
search takes an explicit seed, is reproducible across processes, and can be saved and
resumed mid-run (:meth:`SearchStrategy.state_dict` / :meth:`SearchStrategy.from_state`).
"""

from __future__ import annotations

from ._auto import BUDGET_DEFAULTS, AutoSearch
from ._base import Kind, SearchStrategy, Trial
from ._baselines import Greedy, GridSearch, RandomSearch, StepwiseGreedy
from ._csv import read_csv_rows
from ._graph import Artifact, ArtifactRequest, Constraint, FactorGraph, sample_valid
from ._hpss import HPSS
from ._priors import FactorPriors
from ._registry import SEARCHES
from ._space import Factor, FactorSpace, Strategy, Value
from ._tpe import TPESearch

__all__ = [
    "sample_valid",
    "read_csv_rows",
    "BUDGET_DEFAULTS",
    "HPSS",
    "SEARCHES",
    "Artifact",
    "AutoSearch",
    "ArtifactRequest",
    "Constraint",
    "Factor",
    "FactorGraph",
    "FactorPriors",
    "FactorSpace",
    "Greedy",
    "GridSearch",
    "Kind",
    "RandomSearch",
    "SearchStrategy",
    "StepwiseGreedy",
    "Strategy",
    "TPESearch",
    "Trial",
    "Value",
]
