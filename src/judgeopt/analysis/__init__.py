"""Analysis of prompt-exploration results (PrExMe Sec. 4-5, App. G-J), from any tidy table.

A *results table* has one row per strategy and setting: factor columns (the parts of a
prompt, e.g. base prompt, task description, format requirement), group columns (what
defines a setting, e.g. model and task) and an objective column (e.g. Kendall with human
scores). It is what ``judgeopt grid`` writes and what PrExMe published.

* :func:`load_results` / :class:`ResultsTable`: read and validate the table.
* :func:`best_strategies`, :func:`best_between`: the best strategies of every setting, and
  the best of every model, with significance clusters (:class:`Cluster`): the permute-input
  test with per-item scores (:func:`load_items`), else a Fisher-z approximation from item
  counts (:func:`fisher_z_pvalue`), else ranks only.
* :func:`top_prompts`: the top 2 % of every setting and the share of each pattern among them.
* :func:`pattern_scores`, :func:`pattern_ranking`: a pattern's median (mean, max, ...) score.
* :func:`ranking_stability`: Kendall tau between a dimension's rankings when another
  dimension (a factor, the task, the model) changes; :func:`compare_aggregations`: which
  aggregation gives the most stable rankings.
* :func:`analyze` runs all of it; :func:`write_report` writes ``report.md``,
  ``analysis.json`` and PNG figures (matplotlib, the ``report`` extra).

Pure numpy/scipy apart from the figures; no LLM is called. See ``docs/analysis.md``.
"""

from __future__ import annotations

from ._aggregate import AGGREGATIONS, aggregate, kendall_tau_b
from ._aggregation_comparison import AggregationComparison, compare_aggregations
from ._analysis import Analysis, analyze
from ._clusters import (
    TESTS,
    Cluster,
    RankedStrategy,
    best_between,
    best_strategies,
    fisher_z_pvalue,
)
from ._figures import figures_available
from ._items import ITEM_COLUMNS, ItemScores, load_items
from ._patterns import (
    Stability,
    TopPrompts,
    pattern_ranking,
    pattern_scores,
    ranking_stability,
    top_prompts,
)
from ._report import write_report
from ._table import ResultsTable, load_results

__all__ = [
    "AGGREGATIONS",
    "ITEM_COLUMNS",
    "TESTS",
    "AggregationComparison",
    "Analysis",
    "Cluster",
    "ItemScores",
    "RankedStrategy",
    "ResultsTable",
    "Stability",
    "TopPrompts",
    "aggregate",
    "analyze",
    "best_between",
    "best_strategies",
    "compare_aggregations",
    "figures_available",
    "fisher_z_pvalue",
    "kendall_tau_b",
    "load_items",
    "load_results",
    "pattern_ranking",
    "pattern_scores",
    "ranking_stability",
    "top_prompts",
    "write_report",
]
