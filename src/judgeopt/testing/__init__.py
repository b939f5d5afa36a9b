"""Test helpers for users and contributors: the search conformance suite, a scripted LM and a
scripted OpenAI-compatible server.

Subclass :class:`SearchConformance` in a pytest module and give it a ``make_search``
fixture (``(space, budget, seed, graph) -> Search``); every contract of
:class:`judgeopt.search.Search` is then checked for your search. Needs pytest.
:class:`ScriptedServer` answers chat completions on 127.0.0.1 as scripted (statuses,
replies, delays), so a client's real HTTP path (LiteLLM, its Router) can be tested.
"""

from __future__ import annotations

from ._fake_lm import ScriptedLM, logprob_content
from ._search_suite import SearchConformance, toy_objective, toy_space
from ._server import Activity, ScriptedServer

__all__ = [
    "Activity",
    "ScriptedLM",
    "ScriptedServer",
    "SearchConformance",
    "logprob_content",
    "toy_objective",
    "toy_space",
]
