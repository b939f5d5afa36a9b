"""The closed map from search names to classes (used by presets and the CLI; state restore
finds the same classes through :func:`._base.search_classes`)."""

from __future__ import annotations

from ._auto import AutoSearch
from ._base import Search
from ._baselines import GreedySearch, GridSearch, RandomSearch, StepwiseGreedySearch
from ._hpss import HPSSSearch
from ._tpe import TPESearch

SEARCHES: dict[str, type[Search]] = {
    cls.name: cls
    for cls in (
        AutoSearch,
        HPSSSearch,
        RandomSearch,
        GreedySearch,
        StepwiseGreedySearch,
        GridSearch,
        TPESearch,
    )
}
"""Search name -> class. A closed set: there is no registration hook."""
