"""DSPy teleprompters that search a judge's prompting strategy (HPSS and its baselines).

Each teleprompter is a thin loop around a search of :mod:`judgeopt.search`::

    strategy = search.ask() -> judge = student.with_strategy(strategy)
    -> evaluate(judge, valset) -> search.tell(strategy, correlation)

with a checkpoint after every evaluation (search state, evaluation summaries and
artifacts) and after every judged item of the candidate in progress, so an interrupted
compile resumes where it stopped without repeating a finished judge call; the LM's
persistent cache also makes finished judge calls free on a re-run.

With racing (:mod:`judgeopt.racing`) a candidate is judged on a growing, fixed-order prefix
of the validation set and dropped as soon as an upper confidence bound on its full-set
score falls below the population's ``top``-th best; the search is told its partial score.

The package's modules, one concept each:

* ``_config``: :class:`OptimizerConfig` and the presets (:func:`load_optimizer`);
* ``_journal``: the run journal (checkpoint files, fingerprint, resume, judged items);
* ``_judging``: judging a strategy during a compile (retries, stored items, racing);
* ``_searching``: the compile's data, space and search;
* ``_loop``: the compile loop (ask, judge, tell, record; then choose and report);
* ``_choosing``: choosing the compiled judge (finalists, confirmation; the order of it all);
* ``_choice``: the state of one choice (its record, table and judged results) and its outcome;
* ``_ensembling``: the prompt ensemble built beside the chosen judge (``--ensemble``);
* ``_pooling``: the table of every strategy's stored ratings on the validation items, and
  the choice of the rules a compile runs on it (``shrink``, ``lcb``, ``factor``,
  ``posterior``: :func:`judgeopt.selection.compile_rule`);
* ``_guard``: the cross-fitted guard of rule ``best`` and the ensemble (``[selection]
  guard``);
* ``_prior_default``: the prior default returned instead of the baseline (``[selection] prior``);
* ``_compile_result``: :class:`CompileResult` and the problems a compile reports;
* ``_judge_cost``: what a compiled judge costs per item (:func:`judge_cost`), measured on
  the search's own calls;
* ``_teleprompters``: :class:`JudgeSearch`, :class:`HPSS`, :class:`Greedy`, ...
"""

from __future__ import annotations

from .._checkpoint import CheckpointMismatchError
from .._renamed import renamed_names as _renamed_names
from ._compile_result import CompileResult
from ._config import Metric, OptimizerConfig, load_optimizer
from ._journal import ItemStore
from ._judge_cost import JudgeCost, judge_cost
from ._judging import ENDPOINT_CHECK
from ._teleprompters import (
    HPSS,
    Auto,
    Greedy,
    GridJudgeSearch,
    JudgeSearch,
    RandomJudgeSearch,
    StepwiseGreedy,
)

__all__ = [
    "Auto",
    "CheckpointMismatchError",
    "CompileResult",
    "ENDPOINT_CHECK",
    "Greedy",
    "GridJudgeSearch",
    "HPSS",
    "ItemStore",
    "JudgeCost",
    "JudgeSearch",
    "Metric",
    "OptimizerConfig",
    "RandomJudgeSearch",
    "StepwiseGreedy",
    "judge_cost",
    "load_optimizer",
]

__getattr__ = _renamed_names(
    __name__, {"RandomSearch": "RandomJudgeSearch", "GridSearch": "GridJudgeSearch"}, globals()
)
