"""What a compile reports about its search: :class:`CompileResult`, and the problems found."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..search import Search, Value
from ._summary import StrategySummary

__all__ = ["CompileResult", "find_problems"]


@dataclass(frozen=True)
class CompileResult:
    """What a compile did: the search, its trace, and its cost.

    ``calls`` (and the token counts) are the LM calls of the search's strategy evaluations
    over every session of a resumed compile; ``calls_this_run`` those made by this process;
    ``seconds`` is this process's wall time (each evaluation summary carries its own);
    ``selection_calls`` those of choosing the judge after the search (confirmation,
    comparison with the baseline, ensemble). ``problems`` lists why the returned judge
    should not be trusted (every strategy scored NaN, too many answers without a rating);
    empty when none was found. ``plan`` is the cost estimated before the first judge call
    (:meth:`judgeopt.evaluate.CostPlan.to_dict`; ``None`` when none was made).
    ``evaluations`` counts every strategy the search told, ``uncounted`` those among them
    that could not be judged at all (every prompt longer than the model's context) and so
    did not spend the budget.
    """

    search: str
    budget: int
    seed: int
    metric: str
    evaluations: int
    best_strategy: dict[str, Value]
    best_score: float
    trace: list[dict[str, Any]] = field(repr=False)
    evaluation_summaries: list[dict[str, Any]] = field(repr=False)
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    racing: dict[str, Any] | None = None
    calls_this_run: int = 0
    selection_calls: int = 0
    problems: list[str] = field(default_factory=list)
    plan: dict[str, Any] | None = None
    uncounted: int = 0

    def best_so_far(self) -> list[tuple[int, float]]:
        """``(evaluation number, best score so far)`` after each evaluation."""
        out, best = [], -math.inf
        for t in self.trace:
            s = t["score"]
            if s is not None and s > best:
                best = s
            out.append((t["number"], best if best > -math.inf else math.nan))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (for the exported judge)."""
        return {
            "search": self.search,
            "budget": self.budget,
            "seed": self.seed,
            "metric": self.metric,
            "evaluations": self.evaluations,
            "uncounted": self.uncounted,
            "best_strategy": self.best_strategy,
            "best_score": None if math.isnan(self.best_score) else self.best_score,
            "best_so_far": [[n, None if math.isnan(v) else v] for n, v in self.best_so_far()],
            "trace": self.trace,
            "calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "seconds": round(self.seconds, 3),
            "racing": self.racing,
            "calls_this_run": self.calls_this_run,
            "selection_calls": self.selection_calls,
            "problems": list(self.problems),
            "plan": self.plan,
        }


def find_problems(
    search: Search,
    summaries: Sequence[StrategySummary],
    validation: StrategySummary | None,
    comparisons: Mapping[str, Mapping[str, Any]],
    *,
    metric: str,
    max_parse_failures: float,
) -> list[str]:
    """Why the compiled judge should not be trusted (``docs/judge.md``, "What happens when
    things go wrong"); empty when nothing was found.

    Args:
        search: The finished search.
        summaries: Its evaluation summaries.
        validation: The chosen judge's evaluation summary on the search items, if any.
        comparisons: Split name -> the chosen judge against the baseline.
        metric: What the search maximised.
        max_parse_failures: The largest accepted share of answers without a rating.
    """
    out = []
    n_items = sum(s.n for s in summaries)
    unparsed = sum(s.count("parse_failures") for s in summaries)
    failed = sum(s.count("call_failures") for s in summaries)
    if search.trials and all(t.failed for t in search.trials):
        out.append(
            f"every one of the {search.n_evaluations} strategies scored NaN ({metric} "
            f"undefined): {unparsed} of {n_items} answers gave no rating and {failed} "
            "calls failed, or the judge gave one rating to every item; the returned "
            "judge is the baseline, not a judge that was shown to work"
        )
    elif validation is not None and validation.score(metric) is None:
        out.append(f"the chosen judge's {metric} on the validation items is undefined (NaN)")
    limit = max_parse_failures
    # (split, items, unparsed, failed calls) of the chosen judge on each split it was judged on
    splits: list[tuple[str, int, int, int]] = []
    if validation is not None:
        v = validation
        splits.append(("validation", v.n, v.count("parse_failures"), v.count("call_failures")))
    for split, comp in comparisons.items():
        if split != "validation":
            side = comp.get("chosen") or {}  # a Comparison's side: the same counts
            n, unparsed, failed = (
                int(side.get(k) or 0) for k in ("n", "parse_failures", "call_failures")
            )
            splits.append((split, n, unparsed, failed))
    for split, n, unparsed, failed in splits:
        bad = unparsed + failed
        if n and bad / n > limit:
            out.append(
                f"the chosen judge gave no rating for {bad} of {n} {split} items "
                f"({bad / n:.0%}; {unparsed} unparsed, "
                f"{failed} failed calls), more than "
                f"max_parse_failures={limit:g}: too many of its answers are not in the "
                "expected format (a model too small for the prompt, or a max_tokens "
                "too low)"
            )
    return out
