"""Run a judge over a labelled dataset and measure its agreement with the human labels.

:func:`evaluate` judges every record (:mod:`._run`) after checking that the records fit the
judge's task (:mod:`._checks`) and returns an :class:`EvalResult` (:mod:`._eval_result`);
:func:`compare` / :func:`evaluate_against` put two judges side by side (:mod:`._compare`);
:func:`check_endpoint` is the short call a run makes before judging anything (:mod:`._endpoint`);
:class:`CostPlan` is what a run will cost, estimated before it starts (:mod:`._plan`, on the
prompts of :mod:`._plan_prompts` and the judgement timed by :mod:`._timed`, a
:class:`Timing` (:mod:`._timing`), or read from a resumed run's records by
:mod:`._recorded_timing`);
:func:`robustness` runs the injection suite (:mod:`._attacks`, :mod:`._robustness`): how far
text inside the judged item can move the judge's ratings.
"""

from __future__ import annotations

from ._attacks import ATTACK_SUITES, SUITE_VERSION, Attack, attack_records, attack_suite
from ._checks import check_label_spread, check_records
from ._compare import Comparison, compare, evaluate_against
from ._endpoint import CHECK_TIMEOUT, ENDPOINT_CHECK, check_endpoint, one_token_call
from ._eval_result import (
    EvalResult,
    ItemResult,
    correct,
    ensemble_result,
    item_predictions,
    merge_results,
    score_items,
)
from ._plan import (
    CallCost,
    CostPlan,
    call_cost,
    duration,
    mean_cost,
    plan_cost,
    screen_cost,
    timed_runs,
)
from ._plan_prompts import (
    PLAN_WINDOW,
    artifact_tokens,
    computed_share,
    plan_sample,
    same_calls,
)
from ._pool import CallPool
from ._recorded_timing import recorded_timing
from ._robustness import AttackResult, RobustnessReport, robustness, wilson_interval
from ._run import default_threads, evaluate, evaluate_retrying
from ._timed import ENGINE_TIMING, TIMED_ROUNDS, engine_timing, time_judgement
from ._timing import PREFILL_SPEEDUP, RATING_TOKENS, REUSED_TOKEN_COST, TAIL_ONCE, Timing

__all__ = [
    "ATTACK_SUITES",
    "SUITE_VERSION",
    "Attack",
    "AttackResult",
    "RobustnessReport",
    "attack_records",
    "attack_suite",
    "robustness",
    "same_calls",
    "wilson_interval",
    "CHECK_TIMEOUT",
    "ENDPOINT_CHECK",
    "ENGINE_TIMING",
    "PLAN_WINDOW",
    "PREFILL_SPEEDUP",
    "RATING_TOKENS",
    "REUSED_TOKEN_COST",
    "TAIL_ONCE",
    "TIMED_ROUNDS",
    "CallCost",
    "CallPool",
    "Comparison",
    "CostPlan",
    "EvalResult",
    "ItemResult",
    "Timing",
    "artifact_tokens",
    "call_cost",
    "screen_cost",
    "check_endpoint",
    "check_label_spread",
    "check_records",
    "compare",
    "computed_share",
    "correct",
    "default_threads",
    "duration",
    "engine_timing",
    "ensemble_result",
    "evaluate",
    "evaluate_against",
    "evaluate_retrying",
    "item_predictions",
    "mean_cost",
    "merge_results",
    "one_token_call",
    "plan_cost",
    "plan_sample",
    "score_items",
    "recorded_timing",
    "time_judgement",
    "timed_runs",
]
