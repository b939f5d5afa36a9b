"""Grid runs: evaluate every strategy of a (sub)space on a dataset, resumably.

:func:`run_grid` judges a labelled sample with every strategy of a factor space (PrExMe's
templates, or any judge with a ``space`` and ``with_strategy``, such as
:class:`~judgeopt.judge.JudgeProgram`) and writes two files as it goes:

* the **table** (CSV), one row per (model, dataset, task, strategy): the factor values, the
  item counts (``n``, ``n_unparsed``, ``n_failed``), Kendall, tie-calibrated accuracy
  (``kendall_tie_corrected``, PrExMe's "tie-corrected Kendall"), Pearson, Spearman (or
  ``accuracy`` for pairwise judges), LM calls, cache hits, tokens and seconds. Its first
  columns match the published PrExMe surface (``model``, ``task``, the factors, ``kendall``
  ...), so the same analysis code reads both;
* the **items** (JSONL), one line per judged item and strategy: the judge's score (with the
  template-average fill-in for unparsed items), the human score and a ``parsed`` flag, for
  significance tests later.

A row is appended (and flushed to disk) only after its strategy's items are written, so a
killed run restarted with the same arguments skips every finished strategy; items of an
unfinished strategy and a half-written last line are dropped on restart. Judge calls already
made are also in the LM's persistent cache, so an interrupted strategy costs nothing twice.

A dead endpoint leaves no result: a check call before the first strategy, a circuit breaker,
and items failing transiently twice stop the run (:class:`judgeopt.lm.LMUnavailable`) without
a row for the strategy being judged, so a re-run judges it again.

Sub-spaces are chosen by factor values (:func:`select_subspace`), from ``name=v1,v2``
options (:func:`parse_factor_options`) or a TOML file (:func:`load_grid_config`).
"""

from __future__ import annotations

from ._config import GridConfig, GridError, load_grid_config, parse_factor_options, select_subspace
from ._files import METRIC_COLUMNS, table_columns
from ._run import GridProgram, GridResult, run_grid

__all__ = [
    "METRIC_COLUMNS",
    "GridConfig",
    "GridError",
    "GridProgram",
    "GridResult",
    "load_grid_config",
    "parse_factor_options",
    "run_grid",
    "select_subspace",
    "table_columns",
]
