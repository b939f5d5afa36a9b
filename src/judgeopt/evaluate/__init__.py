"""Run a judge over a labelled dataset and measure its agreement with the human labels.

:func:`evaluate` judges every record (:mod:`._run`) after checking that the records fit the
judge's task (:mod:`._checks`) and returns an :class:`EvalResult` (:mod:`._results`);
:func:`compare` / :func:`evaluate_against` put two judges side by side (:mod:`._compare`);
:func:`check_endpoint` is the short call a run makes before judging anything (:mod:`._endpoint`).
"""

from __future__ import annotations

from ._checks import check_label_spread, check_records
from ._compare import Comparison, compare, evaluate_against
from ._endpoint import CHECK_TIMEOUT, ENDPOINT_CHECK, check_endpoint
from ._pool import CallPool
from ._results import (
    EvalResult,
    ItemResult,
    correct,
    ensemble_result,
    item_predictions,
    merge_results,
    score_items,
)
from ._run import default_threads, evaluate, evaluate_retrying

__all__ = [
    "CHECK_TIMEOUT",
    "ENDPOINT_CHECK",
    "CallPool",
    "Comparison",
    "EvalResult",
    "ItemResult",
    "check_endpoint",
    "check_label_spread",
    "check_records",
    "compare",
    "correct",
    "default_threads",
    "ensemble_result",
    "evaluate",
    "evaluate_against",
    "evaluate_retrying",
    "item_predictions",
    "merge_results",
    "score_items",
]
