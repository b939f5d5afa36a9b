"""Test helpers for users and contributors: the search conformance suite.

Subclass :class:`SearchConformance` in a pytest module and give it a ``make_search``
fixture (``(space, budget, seed, graph) -> SearchStrategy``); every contract of
:class:`judgeopt.search.SearchStrategy` is then checked for your search. Needs pytest.
"""

from __future__ import annotations

from ._fake_lm import ScriptedLM, logprob_content
from ._search_suite import SearchConformance, toy_objective, toy_space

__all__ = ["ScriptedLM", "SearchConformance", "logprob_content", "toy_objective", "toy_space"]
