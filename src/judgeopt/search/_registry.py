"""The closed map from search names to classes (used by presets and the CLI; state restore
finds the same classes through :func:`._base.search_classes`)."""

from __future__ import annotations

from ._auto import AutoSearch
from ._base import SearchStrategy
from ._baselines import Greedy, GridSearch, RandomSearch, StepwiseGreedy
from ._hpss import HPSS
from ._tpe import TPESearch

SEARCHES: dict[str, type[SearchStrategy]] = {
    cls.name: cls
    for cls in (AutoSearch, HPSS, RandomSearch, Greedy, StepwiseGreedy, GridSearch, TPESearch)
}
"""Search name -> class. A closed set: there is no registration hook."""
