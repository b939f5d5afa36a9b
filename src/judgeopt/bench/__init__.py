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

The benchmark reports the mean of each over surfaces x seeds (``judgeopt bench-search``).
The project's own research harness (the judgement bank, its replays, the end-to-end
benchmark's reports, the cross-validation of searches) lives with its scripts in
``benchmarks/`` and is not part of the package.
"""

from __future__ import annotations

from ._runner import (
    METHODS,
    PRIOR_METHODS,
    BenchResult,
    MethodResult,
    leave_one_out_priors,
    make_search,
    run_search_benchmark,
)
from ._surface import Surface, load_surfaces

__all__ = [
    "METHODS",
    "PRIOR_METHODS",
    "BenchResult",
    "MethodResult",
    "Surface",
    "leave_one_out_priors",
    "load_surfaces",
    "make_search",
    "run_search_benchmark",
]
