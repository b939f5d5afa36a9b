"""Search benchmark on recorded surfaces (no LLM): how close does each search get to the optimum?

A *surface* is a complete table of a factor space: every strategy with its recorded
objective (e.g. PrExMe's 720 prompts x (model, task) with their Kendall correlation). A
search runs against it as if each lookup were an LLM evaluation, and its best find is
compared with the surface's true optimum.

Per run (one method, one surface, one seed), with ``found`` the recorded value of the best
strategy the search evaluated:

* ``norm_regret = (max - found) / (max - median)`` (0 is optimal; 1 is no better than the
  median strategy),
* ``top1``: ``found`` is at least the value of the surface's ``max(1, floor(N/100))``-th best
  strategy (within the top 1 %),
* ``found_over_max = found / max``,
* ``evals``: unique evaluations spent.

The benchmark reports the mean of each over surfaces x seeds.

The plumbing of the benchmark scripts (``benchmarks/*.py``) lives here too, so each script
holds only its experiment: :func:`shared_data_dir`, :func:`sample_groups` (seeded samples of
whole groups), :func:`normal_interval`, :func:`markdown_table`, :func:`write_json` (atomic),
:func:`run_interruptible` (Ctrl-C or SIGTERM end a run with :data:`EXIT_INTERRUPTED`, 130, and
the same command resumes it) and the judged-item files that make a resumed run repeat no call
(:func:`stored_items`, :func:`evaluate_stored`, :func:`stored_result`, :func:`strategy_key`).

The end-to-end benchmark's (``benchmarks/e2e.py``) reports, from stored judgements without a
call: :func:`finalist_report`, :func:`rules_report` and :func:`passed_over_report` (the
strategies :func:`passed_over` names) per pair (the confirmation's
:func:`confirmation_kwargs`); :func:`summarise_e2e`, :func:`across_pairs` and
:func:`e2e_table` over the pairs.

The judgement bank (``benchmarks/bank.py``): :func:`bank_todo` orders what its recorder still
judges, :func:`load_bank` reads it, :data:`RULES` (``judgeopt.selection``'s registry, the
one the compile reads too) are the decision rules it replays, :func:`replay_bank` replays
them over many splits and chooses the default leave-one-pair-out (:func:`choose_default`),
and :func:`selection_settings` / :func:`preset_toml` turn the choice into a preset's
settings.
"""

from __future__ import annotations

from ..selection import RULES, RuleSpec
from ._bank import (
    BANK_FORMAT,
    BankColumn,
    BankPair,
    bank_lines,
    judgement_covers,
    keep_judgement,
    load_bank,
    pack_bank,
    strategy_json,
)
from ._bank_todo import bank_base, bank_todo
from ._cv import CVMethodResult, CVResult, Factory, RunCache, cross_validate_searches
from ._e2e_passed_over import passed_over, passed_over_report
from ._e2e_rules import confirmation_kwargs, finalist_report, finite_or_none, rules_report
from ._e2e_summary import across_pairs, e2e_table, summarise_e2e
from ._harness import (
    EXIT_INTERRUPTED,
    markdown_table,
    normal_interval,
    run_interruptible,
    sample_groups,
    shared_data_dir,
    write_json,
)
from ._preset import preset_toml, selection_settings
from ._replay import (
    bank_splits,
    choose_default,
    prior_strategy,
    replay_bank,
    replay_fixed,
    replay_rule,
)
from ._runner import (
    METHODS,
    PRIOR_METHODS,
    BenchResult,
    MethodResult,
    leave_one_out_priors,
    make_search,
    run_search_benchmark,
)
from ._stored import evaluate_stored, stored_items, stored_result, strategy_key
from ._surface import Surface, load_surfaces

__all__ = [
    "across_pairs",
    "confirmation_kwargs",
    "e2e_table",
    "finalist_report",
    "finite_or_none",
    "passed_over",
    "passed_over_report",
    "rules_report",
    "summarise_e2e",
    "RULES",
    "RuleSpec",
    "bank_splits",
    "choose_default",
    "prior_strategy",
    "replay_bank",
    "replay_fixed",
    "replay_rule",
    "preset_toml",
    "selection_settings",
    "BANK_FORMAT",
    "BankColumn",
    "BankPair",
    "bank_base",
    "bank_lines",
    "bank_todo",
    "judgement_covers",
    "keep_judgement",
    "strategy_json",
    "load_bank",
    "pack_bank",
    "EXIT_INTERRUPTED",
    "METHODS",
    "PRIOR_METHODS",
    "RunCache",
    "BenchResult",
    "CVMethodResult",
    "CVResult",
    "Factory",
    "MethodResult",
    "Surface",
    "cross_validate_searches",
    "evaluate_stored",
    "leave_one_out_priors",
    "load_surfaces",
    "make_search",
    "markdown_table",
    "normal_interval",
    "run_interruptible",
    "run_search_benchmark",
    "sample_groups",
    "shared_data_dir",
    "stored_items",
    "stored_result",
    "strategy_key",
    "write_json",
]
