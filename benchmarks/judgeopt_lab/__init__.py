"""The project's research harness: the code behind ``benchmarks/*.py``, not shipped in the
judgeopt wheel (the scripts put ``benchmarks/`` on ``sys.path``; the tests in
``benchmarks/tests/`` read it the same way, through pytest's ``pythonpath``).

The plumbing of the scripts, so each holds only its experiment: :func:`shared_data_dir`,
:func:`sample_groups` (seeded samples of whole groups), :func:`normal_interval`,
:func:`markdown_table`, :func:`write_json` (atomic, with the commit and command that made the
result, :func:`provenance`), :func:`run_interruptible` (Ctrl-C or
SIGTERM end a run with :data:`EXIT_INTERRUPTED`, 130, and the same command resumes it) and the
judged-item files that make a resumed run repeat no call (:func:`stored_items`,
:func:`evaluate_stored`, :func:`stored_result`, :func:`strategy_key`). What a block of LM work
spent (:func:`spent`) and a clean start for the embedded model's batch engines
(:func:`fresh_engines`), for the scripts that time judging.

Nested cross-validation of searches on recorded surfaces (``benchmarks/search_cv.py``):
:func:`cross_validate_searches`.

The end-to-end benchmark's (``benchmarks/e2e.py``) reports, from stored judgements without a
call: :func:`finalist_report`, :func:`rules_report` and :func:`passed_over_report` (the
strategies :func:`passed_over` names) per pair, and :func:`rated_report` (the gain again on
the items the baseline rated) (the confirmation's
:func:`confirmation_kwargs`); :func:`summarise_e2e`, :func:`across_pairs` and
:func:`e2e_table` over the pairs.

The judgement bank (``benchmarks/bank.py``): :func:`bank_todo` orders what its recorder still
judges, :func:`load_bank` reads it, :data:`RULES` (``judgeopt.selection``'s registry, the
one the compile reads too) are the decision rules it replays, :func:`replay_bank` replays
them over many splits and chooses the default leave-one-pair-out (:func:`choose_default`),
and :func:`selection_settings` / :func:`preset_toml` turn the choice into a preset's
settings. What a replayed compile's judging costs (``benchmarks/bank_cost.py``):
:func:`judgement_costs` (seconds per judgement from the bank's chunks), :func:`cost_matrix`,
:func:`first_k` (a smaller budget's columns; :func:`path_cut_columns` in a plan),
:func:`rate_first_k` (the rate-first candidates; :func:`rate_first_columns` in a plan;
:func:`candidate_pairs`, the pairs complete for a candidate set),
:func:`stopped_costs` (rate-first calls stopped at the score) and :func:`compile_seconds` /
:func:`rule_cost_rows` (per rule and split). A pre-registered default's verdict from the
results its plan names: :func:`prereg_verdict` (``benchmarks/prereg_check.py``), with
:func:`fixed_label`, the key ``bank_fixed.py`` files a rule at a setting under, and
:func:`stage_2_beside`, what is reported beside the fresh pairs' criteria.

The search benchmark a user runs (``judgeopt bench-search``) is the product's:
:mod:`judgeopt.bench`.
"""

from __future__ import annotations

from judgeopt.selection import RULES, RuleSpec

from ._bank import (
    BANK_FORMAT,
    BankColumn,
    BankPair,
    along_path,
    bank_lines,
    join_pairs,
    judgement_covers,
    keep_judgement,
    load_bank,
    pack_bank,
    rates_first,
    strategy_json,
)
from ._bank_cost import (
    CANDIDATE_SETS,
    STOP_ESTIMATES,
    CostFit,
    StopCost,
    candidate_pairs,
    compile_seconds,
    cost_matrix,
    explains_after_rating,
    first_k,
    judgement_costs,
    path_cut_columns,
    race,
    raced,
    rate_first_columns,
    rate_first_k,
    rule_cost_rows,
    split_inputs,
    stopped_costs,
)
from ._bank_todo import bank_base, bank_todo
from ._cv import CVMethodResult, CVResult, Factory, RunCache, cross_validate_searches
from ._e2e_passed_over import passed_over, passed_over_report
from ._e2e_rated import rated_report
from ._e2e_rules import confirmation_kwargs, finalist_report, finite_or_none, rules_report
from ._e2e_summary import across_pairs, e2e_table, summarise_e2e
from ._harness import (
    EXIT_INTERRUPTED,
    markdown_table,
    normal_interval,
    pair_file,
    provenance,
    run_interruptible,
    sample_groups,
    shared_data_dir,
    write_json,
)
from ._prereg import MAX_WORSE_SHARE, fixed_label, prereg_verdict, stage_2_beside
from ._preset import preset_toml, selection_settings
from ._replay import (
    add_replay_arguments,
    bank_splits,
    choose_default,
    gain_prior,
    n_valids_of,
    paired_difference,
    prior_strategy,
    replay_bank,
    replay_fixed,
    replay_rule,
    rule_input,
    safest_best,
    significantly_worse,
)
from ._spend import fresh_engines, spent
from ._stored import evaluate_stored, stored_items, stored_result, strategy_key

__all__ = [
    "CANDIDATE_SETS",
    "add_replay_arguments",
    "BANK_FORMAT",
    "BankColumn",
    "BankPair",
    "CVMethodResult",
    "CostFit",
    "CVResult",
    "EXIT_INTERRUPTED",
    "MAX_WORSE_SHARE",
    "Factory",
    "RULES",
    "RuleSpec",
    "RunCache",
    "STOP_ESTIMATES",
    "StopCost",
    "across_pairs",
    "bank_base",
    "bank_lines",
    "bank_splits",
    "bank_todo",
    "choose_default",
    "compile_seconds",
    "confirmation_kwargs",
    "candidate_pairs",
    "cost_matrix",
    "cross_validate_searches",
    "e2e_table",
    "evaluate_stored",
    "explains_after_rating",
    "finalist_report",
    "finite_or_none",
    "first_k",
    "fixed_label",
    "fresh_engines",
    "gain_prior",
    "judgement_costs",
    "along_path",
    "join_pairs",
    "judgement_covers",
    "keep_judgement",
    "load_bank",
    "markdown_table",
    "n_valids_of",
    "normal_interval",
    "pack_bank",
    "pair_file",
    "passed_over",
    "passed_over_report",
    "paired_difference",
    "preset_toml",
    "prereg_verdict",
    "provenance",
    "prior_strategy",
    "replay_bank",
    "replay_fixed",
    "replay_rule",
    "significantly_worse",
    "path_cut_columns",
    "race",
    "raced",
    "rate_first_columns",
    "rate_first_k",
    "rates_first",
    "rated_report",
    "rule_cost_rows",
    "rules_report",
    "rule_input",
    "safest_best",
    "run_interruptible",
    "sample_groups",
    "selection_settings",
    "shared_data_dir",
    "spent",
    "split_inputs",
    "stored_items",
    "stage_2_beside",
    "stored_result",
    "stopped_costs",
    "strategy_json",
    "strategy_key",
    "summarise_e2e",
    "write_json",
]
