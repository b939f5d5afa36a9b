"""What a compile costs (issue 57's targets): today's compile beside the new one, the cost plan
against what was spent, the demo's time, and the default compile at 100 labels.

Five parts, chosen with ``--parts`` (comma-separated, or ``all``); each is written into the
JSON as soon as it is done, beside the parts an earlier run left there (a part run again
replaces its own entry only), so the parts can be run separately and merged:

* ``side_by_side``: the default search (the ``auto`` preset, ``--budget`` strategies, ``--seed``)
  compiles twice on the same ``--n-items`` items of one bank pair (``--pair``, default SFRES
  naturalness: the first items of the validation part of ``benchmarks/e2e.py``'s split, the
  part ``judgeopt demo`` draws from). *Old* is today's compile before the stop at the score:
  every judgement writes its explanation. It is reproduced here only, by a student whose
  ``with_explain`` always keeps ``explain=True`` (:class:`RecordingJudge` with
  ``keep_explanations``), so the compile's ``scoring_program(program, explain=False)`` leaves
  it explaining; its copies (``with_strategy``, ``fresh_copy``) keep the class and the switch.
  *New* is the compile as it is. Each run has its own fresh LM response cache and a fresh batch
  engine, with the model loaded before the clock starts. Per run: wall seconds, LM calls,
  prompt and completion tokens, the strategies in the order evaluated and every (strategy,
  item) rating. ``same_ratings``: on every strategy both runs evaluated that rates first
  (``cot`` none or suffix, no ``dialectic`` reference: those the stop applies to), the greedy
  rating equal and the expected rating within 1e-6 on every item both judged (``null`` when
  there was none; the counts compared, the mismatches and whether the two search paths
  diverged are reported beside it). Target: new <= old / 3. Note: ``auto``'s start varies
  the factors one by one from the baseline (``cot`` prefix), ``autocot``, ``metrics`` and
  ``criteria`` first: with a scripted model, the budget-20 search judged ``cot`` none and
  suffix 8th and 9th and the budget-10 search neither, so at budget 10 the comparison may
  be empty and the stop may save little.
* ``recheck``: side_by_side's part completed without a clock: the rating-first strategies
  only the new compile judged (with ``--new-candidates rate_first``, every one but the
  baseline) are judged again on the same items as the old compile would have (explanation
  written, a fresh LM), read from the two runs side_by_side saved in the JSON, and the
  ratings compared again (``same_ratings``, ``rechecked_strategies``). Separate so that the
  timed runs are saved before hours of untimed judging.
* ``estimate``: the cost plan the new compile made before its first judge call (its report's
  ``plan``) against what the compile spent: every call and token the LM counted from the
  start of the compile to its end (the endpoint check, the logprobs probe and the timed
  judgement included) and its wall seconds. It reuses side_by_side's new run (run in the same
  command, or saved in the JSON with the same settings; otherwise the new compile runs
  alone). ``estimate_hosted`` does the same with a
  scripted model named like a hosted one (``--hosted-model``, priced by LiteLLM's list):
  a :class:`judgeopt.testing.ScriptedLM` whose usage is counted with LiteLLM's tokenizer for
  that model and whose answers take the time of a hosted API (a fixed latency, then tokens
  at a steady rate; :data:`HOSTED_LATENCY`), money compared too. Errors are *signed*
  fractions of the actual, ``(estimate - actual) / actual`` (positive: the plan said more).
  ``estimate_hosted`` is its own part (seconds of scripted calls; ``estimate`` is the
  embedded model's); it checks the same estimate on ``--hosted-pairs`` too (three other
  pairs by default, ``other_pairs`` in the JSON). Target: every ``|error|`` <= 0.25.
* ``demo``: ``judgeopt demo`` as the README's first command runs it (a subprocess, with
  ``--no-progress --out-dir`` a temporary folder, a fresh ``JUDGEOPT_CACHE_DIR`` and
  ``JUDGEOPT_THREADS=2``; ``--model`` only when it is not ``local``): its wall seconds and its
  result lines (the chosen judge, the gain). Target: under 8 minutes.
* ``full``: the new compile (as side_by_side's new run) on all of the e2e validation part
  (``--full-n-valid`` 100) at ``--full-budget`` (20, the e2e benchmark's budget, whose
  compiles took 1.5-3 hours). Hours of wall time: not run by default; until it is, the JSON
  says ``"full": {"pair", "n_valid": 100, "seconds": null, "measured": false}``.
  Target: at most 30 minutes.

Writes ``--out`` (default ``benchmarks/results/compile_cost.json``)::

    {"side_by_side": {"n_items", "old_seconds", "new_seconds", "same_ratings", "ratio",
                      "time_target_met", "target_met", "notes", "comparison",
                      "runs": {"old", "new"}, "settings", "provenance"},
     "full": {"pair", "n_valid", "seconds", "measured", ...},
     "full_fast": {...},  # an earlier ``full`` of ``--optimizer fast --full-budget 8``, kept
     "demo_seconds", "demo": {...},
     "estimate": {"calls_error", "tokens_error", "seconds_error", "plan", "actual", ...},
     "estimate_hosted": {... "dollars_error", "other_pairs": [{"pair", ...}]},
     "provenance"}

Usage:
    # side_by_side, recheck, estimate and demo:
    JUDGEOPT_THREADS=2 python benchmarks/compile_cost.py --new-candidates rate_first
    python benchmarks/compile_cost.py --parts demo
    python benchmarks/compile_cost.py --parts full                  # hours
    python benchmarks/compile_cost.py --parts full --optimizer fast --full-budget 8
    python benchmarks/compile_cost.py --model local:qwen2.5-coder-0.5b --n-items 6 --budget 3 \\
        --parts side_by_side,estimate --out /tmp/compile_cost_smoke.json   # plumbing

Set JUDGEOPT_THREADS to the CPU threads of the local model (default 2), and run on an idle
machine: the targets are wall times.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from judgeopt.data import Record, load_records, split_holdout
from judgeopt.demo import E2E_SPLIT, PER_GROUP
from judgeopt.evaluate import PLAN_WINDOW, RATING_TOKENS, Timing, computed_share, evaluate
from judgeopt.judge import JudgeProgram, JudgeTask, load_task
from judgeopt.judge import rates_first as judge_rates_first
from judgeopt.lm import RECOMMENDED_PARALLEL, make_lm, parse_local_model, price_of
from judgeopt.teleprompt import JudgeSearch, OptimizerConfig, load_optimizer
from judgeopt.testing import ScriptedLM, logprob_content
from judgeopt_lab import (
    EXIT_INTERRUPTED,
    fresh_engines,
    markdown_table,
    provenance,
    run_interruptible,
    shared_data_dir,
    spent,
    strategy_json,
    write_json,
)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "compile_cost.json"
PARTS = ("side_by_side", "recheck", "estimate", "estimate_hosted", "demo", "full")
DEFAULT_PARTS = ("side_by_side", "recheck", "estimate", "estimate_hosted", "demo")
#: Expected ratings closer than this are the same.
TOLERANCE = 1e-6
#: side_by_side's target: the new compile's wall time at most this share of the old one's.
TARGET_RATIO = 1 / 3
#: The estimate's target: every error at most this fraction of the actual.
TARGET_ERROR = 0.25
#: The demo's target (seconds) and the full compile's.
TARGET_DEMO_SECONDS = 8 * 60
TARGET_FULL_SECONDS = 30 * 60
#: The scripted hosted model's answer times: seconds before the first token, per written
#: token, per prompt token (a hosted API's shape, about ten times faster than gpt-4o-mini's
#: typical figures so that the run takes a minute), multiplied by ``--hosted-time-scale``.
HOSTED_LATENCY = {"first_token": 0.04, "per_completion_token": 0.0015, "per_prompt_token": 2e-5}
#: The figures whose estimate is compared with the actual (``<figure>_error``).
ERRORS = ("calls", "tokens", "seconds", "dollars")

log = logging.getLogger("compile_cost")


# Items -----------------------------------------------------------------------------------
def validation_part(task: str) -> list[Record]:
    """The validation part of ``benchmarks/e2e.py``'s split of ``task`` (whole groups, at least
    100 items; the part ``judgeopt demo`` draws from)."""
    records = load_records(shared_data_dir() / task / "full.jsonl")
    valid, _ = split_holdout(
        records,
        E2E_SPLIT["n_valid"],
        E2E_SPLIT["n_test"],
        seed=E2E_SPLIT["seed"],
        per_group=PER_GROUP.get(task),
    )
    return valid


def first_items(task: str, n: int) -> list[Record]:
    """The first ``n`` items of :func:`validation_part` (exactly ``n``).

    Raises:
        ValueError: When the part has fewer.
    """
    valid = validation_part(task)
    if n > len(valid):
        raise ValueError(f"{task}: the e2e validation part has {len(valid)} items, not {n}")
    return valid[:n]


# The judges ------------------------------------------------------------------------------
class RecordingJudge(JudgeProgram):
    """A :class:`JudgeProgram` that logs every judgement into a list its copies share
    (``judgements``); with ``keep_explanations``, today's compile before the stop at the
    score: ``with_explain`` always keeps ``explain=True``, so a judge that rates first
    writes its explanation when it is only measured, as every judge did before.

    ``with_strategy`` (a shallow copy) and ``fresh_copy`` (this class, rebuilt) keep both.
    """

    judgements: list[dict[str, Any]]
    keep_explanations: bool = False

    def with_explain(self, explain: bool) -> JudgeProgram:
        return super().with_explain(True if self.keep_explanations else explain)

    def fresh_copy(self, **kwargs: Any) -> JudgeProgram:
        new = super().fresh_copy(**kwargs)
        new.judgements = self.judgements
        new.keep_explanations = self.keep_explanations
        return new

    def judge(
        self, inputs: Mapping[str, Any], *, sample_id: str | None = None, lm: Any = None
    ) -> Any:
        pred = super().judge(inputs, sample_id=sample_id, lm=lm)
        self.judgements.append(judgement_row(self, sample_id, pred))
        return pred


def recording_student(task: JudgeTask, aspect: str, lm: Any, *, old: bool) -> RecordingJudge:
    """The MT-Bench baseline judge of ``task``/``aspect`` on ``lm`` that a compile starts
    from, logging its judgements; ``old``: it always explains (today's compile)."""
    student = RecordingJudge(task, aspect, lm=lm)
    student.judgements = []
    student.keep_explanations = old
    return student


def judgement_row(judge: JudgeProgram, sample_id: str | None, pred: Any) -> dict[str, Any]:
    """One judgement as the comparison reads it: the strategy, the item, the greedy rating
    (``greedy_score`` of an expected rating, each sample's of self-consistency, else the
    rating), the rating the judge scores with, and whether the call stopped at the rating."""
    samples = pred.get("samples")
    greedy = list(samples) if samples is not None else pred.get("greedy_score", pred.get("score"))
    return {
        "strategy": strategy_json(judge.strategy.as_dict()),
        "item": sample_id,
        "greedy": greedy,
        "score": pred.get("score"),
        "stopped": bool(judge.stops_at_score),
        "explained": bool(pred.get("rationale")),
    }


def latest(judgements: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The judgements by (strategy, item), the last of each (a judgement read back from the
    cache repeats the one it was made by)."""
    return {(j["strategy"], j["item"]): dict(j) for j in judgements}


# Comparing the two compiles' ratings -------------------------------------------------------
def rates_first(strategy: str | Mapping[str, Any]) -> bool:
    """Whether a strategy (its JSON or dict) rates before it explains: ``cot`` none or
    suffix without a reference of its own written first (``dialectic``), the strategies the
    stop at the score applies to (:func:`judgeopt.judge.rates_first`)."""
    return judge_rates_first(json.loads(strategy) if isinstance(strategy, str) else strategy)


def _same_rating(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, list) or isinstance(b, list):
        return isinstance(a, list) and isinstance(b, list) and a == b
    return bool(a == b)


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, str) or isinstance(b, str):  # pairwise verdicts
        return bool(a == b)
    return math.isclose(float(a), float(b), rel_tol=0.0, abs_tol=TOLERANCE)


def compare_ratings(
    old: Iterable[Mapping[str, Any]],
    new: Iterable[Mapping[str, Any]],
    old_path: Sequence[str] = (),
    new_path: Sequence[str] = (),
) -> dict[str, Any]:
    """Old against new on every rating-first strategy both judged, item by item.

    Args:
        old, new: The two runs' judgements (:func:`judgement_row` dicts).
        old_path, new_path: The strategies (JSON) each search evaluated, in order.

    Returns:
        ``same_ratings`` (``None`` when no rating-first strategy was judged by both),
        ``strategies_compared``, ``items_compared``, ``mismatches`` (each with both
        runs' figures), ``paths_diverged`` (the searches evaluated different sequences;
        then the comparison is on the strategies in common), the strategies only one run
        evaluated, and per run how many of its judgements stopped at the rating.
    """
    a, b = latest(old), latest(new)
    common = sorted({s for s, _ in a} & {s for s, _ in b})
    first = [s for s in common if rates_first(s)]
    compared, mismatches = 0, []
    for key in sorted(set(a) & set(b)):
        if key[0] not in first:
            continue
        x, y = a[key], b[key]
        compared += 1
        if not (_same_rating(x["greedy"], y["greedy"]) and _close(x["score"], y["score"])):
            mismatches.append(
                {
                    "strategy": key[0],
                    "item": key[1],
                    "old_greedy": x["greedy"],
                    "new_greedy": y["greedy"],
                    "old_score": x["score"],
                    "new_score": y["score"],
                }
            )
    old_set, new_set = set(old_path) or {s for s, _ in a}, set(new_path) or {s for s, _ in b}
    return {
        "same_ratings": None if compared == 0 else not mismatches,
        "strategies_compared": len(first),
        "items_compared": compared,
        "mismatches": mismatches,
        "paths_diverged": list(old_path) != list(new_path),
        "common_strategies": len(old_set & new_set),
        "only_old": sorted(old_set - new_set),
        "only_new": sorted(new_set - old_set),
        "stopped": {
            "old": sum(j["stopped"] for j in a.values()),
            "new": sum(j["stopped"] for j in b.values()),
        },
        "rating_first_judgements": {
            "old": sum(rates_first(s) for s, _ in a),
            "new": sum(rates_first(s) for s, _ in b),
        },
        "tolerance": TOLERANCE,
    }


# One compile ----------------------------------------------------------------------------
def compile_once(
    lm: Any,
    task: JudgeTask,
    aspect: str,
    items: Sequence[Record],
    *,
    preset: OptimizerConfig,
    budget: int,
    seed: int,
    old: bool,
    progress: bool = True,
    keep_judgements: bool = True,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One compile of the ``preset``'s search on ``items`` with ``lm`` (a fresh LM with its
    own cache), timed from the compile's start to its end with the model already loaded and
    a fresh batch engine; ``old``: the student always explains and every candidate is
    judged (today's compile; ``overrides`` may still set ``candidates``).

    Returns what it spent (``seconds``, ``calls``, ``cache_hits``, ``prompt_tokens``,
    ``completion_tokens``), the compile's own report (``report``: its plan, its search and
    selection calls), the strategies in the order evaluated (``path``, with their scores),
    the chosen strategy, and (``keep_judgements``) every judgement.
    """
    load = getattr(lm, "load", None)
    t0 = time.perf_counter()
    if callable(load):
        load()  # the embedded model: loaded before the clock starts
    fresh_engines(lm)
    load_seconds = time.perf_counter() - t0
    student = recording_student(task, aspect, lm, old=old)
    settings = dict(overrides or {})
    if old:
        # Today's compile as it was measured: every candidate, each with its explanation
        # (the `auto` preset's rate-first candidates came with the stop at the score).
        settings.setdefault("candidates", "all")
    opt = JudgeSearch.from_config(preset, budget=budget, seed=seed, progress=progress, **settings)
    load_before = os.getloadavg()
    with spent(lm) as cost:
        judge = opt.compile(student, trainset=list(items))
    load_after = os.getloadavg()
    res = judge.search_result
    rows = latest(student.judgements)
    path = [
        {
            "strategy": strategy_json(s["strategy"]),
            "score": s.get(res.metric),
            "calls": s.get("calls"),
            "prompt_tokens": s.get("prompt_tokens"),
            "completion_tokens": s.get("completion_tokens"),
            "seconds": s.get("seconds"),
        }
        for s in res.evaluation_summaries
    ]
    run: dict[str, Any] = {
        "old": old,
        "overrides": dict(overrides or {}),
        **cost,
        "seconds": round(cost["seconds"], 2),
        "tokens": cost["prompt_tokens"] + cost["completion_tokens"],
        "load_seconds": round(load_seconds, 2),
        # The machine's 1, 5 and 15-minute load averages: above the cores the model uses,
        # something else was running and the seconds are not an idle machine's.
        "load_average": {"before": list(load_before), "after": list(load_after)},
        "report": {
            "plan": res.plan,
            "search_calls": res.calls,
            "selection_calls": res.selection_calls,
            "prompt_tokens": res.prompt_tokens,
            "completion_tokens": res.completion_tokens,
            "loop_seconds": round(res.seconds, 2),
        },
        "path": path,
        "chosen": judge.strategy.as_dict(),
        "kept_baseline": judge.strategy == student.strategy,
        "judgements_made": len(rows),
        "judgements_stopped": sum(j["stopped"] for j in rows.values()),
        "judgements_explained": sum(j["explained"] for j in rows.values()),
    }
    selection = judge.selection or {}
    ensemble = getattr(judge, "ensemble", None)
    # What the compile shipped: the guard's record, the stack's or ensemble's size (None:
    # a single judge) and the selection's messages.
    run["shipped"] = {
        "guard": selection.get("guard"),
        "ensemble_members": None if ensemble is None else len(ensemble.members),
        "messages": list(selection.get("messages") or []),
    }
    if keep_judgements:
        run["judgements"] = list(rows.values())
    run["time_model"] = time_model_check(run, student, items, lm)
    return run


def time_model_check(
    run: Mapping[str, Any], student: Any, items: Sequence[Record], lm: Any
) -> dict[str, Any] | None:
    """The plan's time model, strategy by strategy, on the compile's own tokens: each
    evaluated strategy's seconds per call against the timed judgement (the plan's
    ``timing``) scaled to its recorded prompt and written tokens, once with every prompt
    token read (the model before prefix reuse was counted) and once with the tokens the
    model computes (its share counted on the first ``PLAN_WINDOW`` items; the reused ones at
    the timing's ``reused_cost``; an explaining strategy's evaluation, one run, waits once
    for its longest answer: ``Timing.tail_seconds`` shared among its calls). Each row keeps
    its prompt and written tokens per call, so another time model can be replayed on it.
    Separates the time model from the plan's guess of which strategies the search will
    evaluate.
    ``None`` without a timing or on an LM that does not count computed tokens."""
    plan = (run.get("report") or {}).get("plan") or {}
    if not plan.get("timing") or not callable(getattr(lm, "computed_prompt_tokens", None)):
        return None
    timing = Timing(**plan["timing"])
    read_all = Timing(**{**plan["timing"], "computed_tokens": None, "prompt_seconds": None})

    def waits(written: float, calls: int) -> float:
        """An explaining strategy's one wait for its longest answer (its evaluation is one
        run of ``calls``), shared among its calls; none for a judge stopped at its rating."""
        if written <= 2 * RATING_TOKENS:
            return 0.0
        return timing.tail_seconds(written) / calls

    rows = []
    for step in run["path"]:
        calls = step.get("calls") or 0
        if calls <= 0 or not step.get("prompt_tokens"):
            continue  # refused (a prompt over the context) or read from the cache
        prompt = step["prompt_tokens"] / calls
        written = (step.get("completion_tokens") or 0) / calls
        judge = student.with_strategy(json.loads(step["strategy"]))
        share = computed_share(judge, list(items[:PLAN_WINDOW]), lm, in_flight=timing.in_flight)
        actual = step["seconds"] / calls
        rows.append(
            {
                "strategy": step["strategy"],
                "seconds_per_call": round(actual, 3),
                "prompt_per_call": round(prompt, 1),
                "written_per_call": round(written, 1),
                "computed_share": round(share, 3),
                "all_read": round(read_all.per_call(prompt, written), 3),
                "computed": round(
                    timing.per_call(prompt, written, share * prompt) + waits(written, calls), 3
                ),
            }
        )
    if not rows:
        return None

    def mean_abs_error(key: str) -> float:
        return round(
            sum(abs(r[key] - r["seconds_per_call"]) / r["seconds_per_call"] for r in rows)
            / len(rows),
            4,
        )

    return {
        "timing": plan["timing"],
        "strategies": rows,
        "all_read_error": mean_abs_error("all_read"),
        "computed_error": mean_abs_error("computed"),
        "errors": "mean over strategies of |predicted - actual| / actual seconds per call",
    }


def side_by_side(
    make: Callable[[str], Any],
    task: JudgeTask,
    aspect: str,
    items: Sequence[Record],
    *,
    preset: OptimizerConfig,
    budget: int,
    seed: int,
    order: Sequence[str] = ("old", "new"),
    progress: bool = True,
    new_overrides: Mapping[str, Any] | None = None,
    recheck: bool = True,
) -> dict[str, Any]:
    """The old and the new compile on the same items, one fresh LM each (``make(tag)``), in
    ``order``; the part's figures, the comparison of their ratings and both runs.

    ``new_overrides`` are the new compile's settings beyond the stop at the score (e.g.
    ``{"candidates": "rate_first"}``). ``recheck``: every rating-first strategy the new
    compile judged and the old one did not is judged again on the items as the old compile
    would have (explanation written, its own fresh LM, not timed), so the ratings are
    compared on every rating-first strategy the new compile used."""
    runs: dict[str, dict[str, Any]] = {}
    for tag in order:
        log.info("side_by_side: the %s compile", tag)
        lm = make(tag)
        runs[tag] = compile_once(
            lm,
            task,
            aspect,
            items,
            preset=preset,
            budget=budget,
            seed=seed,
            old=tag == "old",
            progress=progress,
            overrides=new_overrides if tag == "new" else None,
        )
        del lm
    rechecked: list[dict[str, Any]] = []
    if recheck:
        missing = strategies_to_recheck(runs)
        if missing:
            log.info("side_by_side: %d rating-first strategies judged as before", len(missing))
            rechecked = judged_with_explanations(make("recheck"), task, aspect, items, missing)
    return summarise(runs, rechecked, n_items=len(items), order=order, new_overrides=new_overrides)


def strategies_to_recheck(runs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The rating-first strategies (JSON) the new compile judged and the old one did not."""
    judged_old = {j["strategy"] for j in runs["old"]["judgements"]}
    return [
        p["strategy"]
        for p in runs["new"]["path"]
        if rates_first(p["strategy"]) and p["strategy"] not in judged_old
    ]


def summarise(
    runs: Mapping[str, dict[str, Any]],
    rechecked: Sequence[Mapping[str, Any]],
    *,
    n_items: int,
    order: Sequence[str] = ("old", "new"),
    new_overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """side_by_side's part from its two runs and the judgements made again as the old
    compile would have (``rechecked``)."""
    old, new = runs["old"], runs["new"]
    comparison = compare_ratings(
        [*old["judgements"], *rechecked],
        new["judgements"],
        [p["strategy"] for p in old["path"]],
        [p["strategy"] for p in new["path"]],
    )
    ratio = new["seconds"] / old["seconds"] if old["seconds"] else None
    faster = ratio is not None and ratio <= TARGET_RATIO
    return {
        "n_items": n_items,
        "old_seconds": old["seconds"],
        "new_seconds": new["seconds"],
        "same_ratings": comparison["same_ratings"],
        "ratio": None if ratio is None else round(ratio, 4),
        "target": "new_seconds <= old_seconds / 3, same ratings on every rating-first strategy",
        "time_target_met": faster,
        # An empty comparison (no rating-first strategy judged by both) does not meet it.
        "target_met": faster and comparison["same_ratings"] is True,
        "notes": side_by_side_notes(
            old, new, comparison, rechecked=len({j["strategy"] for j in rechecked})
        ),
        "order": list(order),
        "comparison": comparison,
        "new_overrides": dict(new_overrides or {}),
        "rechecked_strategies": len({j["strategy"] for j in rechecked}),
        "rechecked": list(rechecked),
        "runs": dict(runs),
    }


def recheck_part(
    out: Path, make: Callable[[str], Any], task: JudgeTask, aspect: str, task_name: str
) -> dict[str, Any]:
    """side_by_side's part in ``out`` completed: the rating-first strategies only the new
    compile judged, judged again on the same items as the old compile would have (the
    explanation written; a fresh LM, not timed), and the ratings compared again.

    Raises:
        ValueError: When ``out`` holds no measured side_by_side part.
    """
    payload = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {}
    part = payload.get("side_by_side") or {}
    if not part.get("runs"):
        raise ValueError(f"recheck: {out} has no measured side_by_side part; run that first")
    runs = part["runs"]
    missing = strategies_to_recheck(runs)
    items = first_items(task_name, int(part["n_items"]))
    log.info("recheck: %d rating-first strategies judged as before", len(missing))
    rechecked = (
        judged_with_explanations(make("recheck"), task, aspect, items, missing) if missing else []
    )
    new = summarise(
        runs,
        rechecked,
        n_items=int(part["n_items"]),
        order=part.get("order", ("old", "new")),
        new_overrides=part.get("new_overrides"),
    )
    return {**part, **new}


def saved_new_run(out: Path, settings: Mapping[str, Any], n_items: int) -> dict[str, Any] | None:
    """The new compile of the side_by_side part saved in ``out`` when it ran with these
    ``settings`` on ``n_items`` items (so the estimate reuses it), else ``None``."""
    if not out.is_file():
        return None
    part = json.loads(out.read_text(encoding="utf-8")).get("side_by_side") or {}
    run = (part.get("runs") or {}).get("new")
    if run is None or part.get("n_items") != n_items or part.get("settings") != dict(settings):
        return None
    return dict(run)


def judged_with_explanations(
    lm: Any,
    task: JudgeTask,
    aspect: str,
    items: Sequence[Record],
    strategies: Sequence[str],
) -> list[dict[str, Any]]:
    """``strategies`` (JSON) judged on ``items`` as the old compile judged: the explanation
    written after the rating (no stop); their judgement rows."""
    student = recording_student(task, aspect, lm, old=True)
    for s in strategies:
        judge = student.with_strategy(json.loads(s))
        evaluate(judge, list(items), progress=False, explain=True)
    return list(latest(student.judgements).values())


def side_by_side_notes(
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    comparison: Mapping[str, Any],
    *,
    rechecked: int = 0,
) -> list[str]:
    """What to keep in mind when reading the two runs' figures (``rechecked``: strategies
    judged again as the old compile would have)."""
    notes = []
    if comparison["strategies_compared"] == 0:
        notes.append(
            "no rating-first strategy was judged by both compiles: nothing to compare, and "
            "nothing for the stop at the score to save"
        )
    if (old["calls"], old["completion_tokens"]) == (new["calls"], new["completion_tokens"]):
        notes.append(
            "both compiles made the same calls and wrote the same tokens: their time "
            "difference is the machine's, not the compile's"
        )
    cores = float(os.environ.get("JUDGEOPT_THREADS", "2"))
    busy = [
        tag
        for tag, run in (("old", old), ("new", new))
        if max(run["load_average"]["before"][0], run["load_average"]["after"][0]) > cores + 0.5
    ]
    if busy:
        notes.append(
            f"the machine was busy during the {' and '.join(busy)} compile (1-minute load "
            f"average above {cores + 0.5:g}): the seconds are not an idle machine's"
        )
    if comparison["paths_diverged"]:
        common = comparison["common_strategies"]
        notes.append(
            f"the searches took different paths ({common} strategies in common): ratings "
            + (
                f"compared on the {rechecked} rating-first strategies only the new compile "
                "judged, judged again as the old one would have"
                if rechecked
                else f"compared on the {common} strategies both judged"
            )
        )
    return notes


# The estimate ---------------------------------------------------------------------------
def error(estimate: float | None, actual: float | None) -> float | None:
    """``(estimate - actual) / actual``, the signed error as a fraction of the actual
    (``None`` without both, or with an actual of 0)."""
    if estimate is None or actual is None or actual == 0:
        return None
    return round((float(estimate) - float(actual)) / float(actual), 4)


def estimate_report(run: Mapping[str, Any], *, model: str, dollars: float | None) -> dict[str, Any]:
    """A compile's plan against what it spent (``run``: :func:`compile_once`'s result;
    ``dollars``: the actual price of its tokens, ``None`` when not priced)."""
    plan = run["report"]["plan"]
    actual = {
        "calls": run["calls"],
        "prompt_tokens": run["prompt_tokens"],
        "completion_tokens": run["completion_tokens"],
        "tokens": run["prompt_tokens"] + run["completion_tokens"],
        "seconds": run["seconds"],
        "dollars": dollars,
        "search_calls": run["report"]["search_calls"],
        "selection_calls": run["report"]["selection_calls"],
        "loop_seconds": run["report"]["loop_seconds"],
    }
    out: dict[str, Any] = {"model": model, "plan": plan, "actual": actual}
    if run.get("time_model"):
        out["time_model"] = run["time_model"]
    if plan is None:
        out.update({f"{k}_error": None for k in ERRORS}, target_met=None, measured=True)
        out["note"] = "the compile made no plan"
        return out
    estimate = {
        "calls": plan["calls"],
        "tokens": plan["prompt_tokens"] + plan["completion_tokens"],
        "prompt_tokens": plan["prompt_tokens"],
        "completion_tokens": plan["completion_tokens"],
        "seconds": plan["seconds"],
        "dollars": plan["dollars"],
    }
    for key in ERRORS:
        out[f"{key}_error"] = error(estimate[key], actual[key])
    out["prompt_tokens_error"] = error(estimate["prompt_tokens"], actual["prompt_tokens"])
    out["completion_tokens_error"] = error(
        estimate["completion_tokens"], actual["completion_tokens"]
    )
    checked = [out[f"{k}_error"] for k in ("calls", "tokens", "seconds")]
    if dollars:
        checked.append(out["dollars_error"])
    out["errors"] = "signed fractions of the actual: (estimate - actual) / actual"
    out["target"] = f"|error| <= {TARGET_ERROR} for calls, tokens, seconds (and dollars)"
    out["target_met"] = all(e is not None and abs(e) <= TARGET_ERROR for e in checked)
    out["measured"] = True
    return out


def _scale_of(text: str) -> tuple[int, int]:
    m = re.search(r"scale of (\d+) to (\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (1, 5)


class HostedScriptedLM(ScriptedLM):
    """A scripted model named like a hosted one: its usage counted with LiteLLM's tokenizer
    for ``model`` (what the provider would bill), its answers given after the time a hosted
    API takes for them (:data:`HOSTED_LATENCY` x ``time_scale``), with logprobs (the
    ``expected`` decoding is in the search's space, as with a real hosted model).

    Every answer rates first, a rating that follows a hash of the prompt, then an
    explanation of 20-80 words, so a call stopped at the rating writes a few tokens and
    one that is not writes the rest. ``max_tokens`` is honoured as a provider honours it
    (the answer cut there, ``finish_reason="length"``): the one-token check call takes
    the time of one token."""

    def __init__(self, model: str, *, cache: Any, time_scale: float = 1.0) -> None:
        super().__init__(hosted_answer, cache=cache, model=model, logprobs=hosted_logprobs)
        self.time_scale = time_scale
        self.model_name = model

    def _backend(self, request: dict[str, Any], num_retries: int) -> dict[str, Any]:
        import litellm

        out = super()._backend(request, num_retries)
        choice = out["choices"][0]
        text = str(choice["message"]["content"] or "")
        prompt = int(litellm.token_counter(model=self.model_name, messages=request["messages"]))
        completion = int(litellm.token_counter(model=self.model_name, text=text)) if text else 0
        cap = request.get("max_tokens")
        if cap is not None and completion > int(cap):
            tokens = litellm.encode(model=self.model_name, text=text)[: int(cap)]
            choice["message"]["content"] = litellm.decode(model=self.model_name, tokens=tokens)
            choice["finish_reason"] = "length"
            completion = int(cap)
        out["usage"] = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        wait = self.time_scale * (
            HOSTED_LATENCY["first_token"]
            + HOSTED_LATENCY["per_completion_token"] * completion
            + HOSTED_LATENCY["per_prompt_token"] * prompt
        )
        if wait > 0:
            time.sleep(wait)
        return out


def hosted_answer(messages: list[dict[str, Any]]) -> str:
    """The scripted hosted model's answer: ``Rating: [[k]]`` then an explanation."""
    text = str(messages[-1]["content"])
    lo, hi = _scale_of(text)
    h = int(hashlib.sha256(text.encode()).hexdigest(), 16)
    words = " ".join(["the sentence reads well enough"] * (4 + h % 13))
    return f"Rating: [[{lo + h % (hi - lo + 1)}]]\n\nExplanation: {words}."


def hosted_logprobs(generated: str, request: dict[str, Any]) -> list[dict[str, Any]]:
    """Logprobs of the hosted answer's tokens: the rating's digit with its neighbours."""
    m = re.match(r"(Rating: \[\[)(\d+)(\]\])", generated)
    if m is None:
        return logprob_content([generated])
    lo, hi = _scale_of(str(request["messages"][-1]["content"]))
    k = int(m.group(2))
    alts = {str(k): 0.6}
    for other in (k - 1, k + 1):
        if lo <= other <= hi:
            alts[str(other)] = 0.2
    rest = generated[m.end() :]
    return logprob_content(
        [m.group(1), m.group(2), m.group(3)] + ([rest] if rest else []), {1: alts}
    )


def hosted_estimate(
    task: JudgeTask,
    aspect: str,
    items: Sequence[Record],
    *,
    preset: OptimizerConfig,
    budget: int,
    seed: int,
    model: str,
    cache: Path,
    time_scale: float,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The new compile with :class:`HostedScriptedLM`: its plan against what it spent,
    money included."""
    fake = HostedScriptedLM(model, cache=cache, time_scale=time_scale)
    run = compile_once(
        fake.lm,
        task,
        aspect,
        items,
        preset=preset,
        budget=budget,
        seed=seed,
        old=False,
        progress=False,
        keep_judgements=False,
        overrides=overrides,
    )
    dollars = price_of(model, run["prompt_tokens"], run["completion_tokens"])
    out = estimate_report(run, model=model, dollars=dollars)
    out["latency"] = {k: v * time_scale for k, v in HOSTED_LATENCY.items()}
    out["run"] = run
    return out


# The demo -------------------------------------------------------------------------------
def run_demo(model: str, *, timeout: float | None = None) -> dict[str, Any]:
    """``judgeopt demo`` as the README runs it, in a subprocess of this checkout's code, with
    a fresh response cache and two threads; its wall seconds and result lines."""
    with tempfile.TemporaryDirectory(prefix="judgeopt-demo-") as tmp:
        out_dir, cache = Path(tmp) / "demo", Path(tmp) / "cache"
        command = [sys.executable, "-m", "judgeopt", "demo", "--no-progress"]
        command += ["--out-dir", str(out_dir)]
        if model != "local":
            command += ["--model", model]
        env = {
            **os.environ,
            "JUDGEOPT_CACHE_DIR": str(cache),
            "JUDGEOPT_THREADS": "2",
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        t0 = time.perf_counter()
        proc = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
        seconds = time.perf_counter() - t0
        summary_file = out_dir / "summary.json"
        summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    # What the demo prints after its compile: the search, the choice, the test, the time.
    start = next((i for i, line in enumerate(lines) if line.startswith("search:")), len(lines))
    logged = proc.stdout.splitlines() + proc.stderr.splitlines()
    plan = [line.strip() for line in logged if "plan (" in line]
    test = summary.get("test") or {}
    return {
        "seconds": round(seconds, 1),
        "exit_status": proc.returncode,
        "command": ["judgeopt", *command[3:]],
        "result_lines": lines[start:],
        "plan_line": plan[0] if plan else None,
        "chosen_strategy": summary.get("chosen_strategy"),
        "kept_baseline": summary.get("kept_baseline"),
        "gain": test.get("gain"),
        "gain_ci": test.get("gain_ci"),
        "n_valid": summary.get("n_valid"),
        "n_test": summary.get("n_test"),
        "demo_reported_seconds": summary.get("seconds"),
        "target": f"demo_seconds < {TARGET_DEMO_SECONDS}",
        "target_met": proc.returncode == 0 and seconds < TARGET_DEMO_SECONDS,
        "stderr_tail": proc.stderr.splitlines()[-5:] if proc.returncode else [],
    }


# The JSON -------------------------------------------------------------------------------
def placeholders(pair: str, n_items: int, n_valid: int) -> dict[str, Any]:
    """The schema's keys for the parts not measured yet."""
    return {
        "side_by_side": {
            "n_items": n_items,
            "old_seconds": None,
            "new_seconds": None,
            "same_ratings": None,
            "measured": False,
        },
        "full": {"pair": pair, "n_valid": n_valid, "seconds": None, "measured": False},
        "demo_seconds": None,
        "estimate": {
            "calls_error": None,
            "tokens_error": None,
            "seconds_error": None,
            "measured": False,
        },
        "estimate_hosted": {
            "calls_error": None,
            "tokens_error": None,
            "seconds_error": None,
            "measured": False,
        },
    }


def merge(path: Path, updates: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON at ``path`` (if any) with ``updates`` put in, the keys it still lacks taken
    from ``defaults`` (:func:`placeholders`), written back atomically; returned."""
    payload: dict[str, Any] = {}
    if path.is_file():
        payload = json.loads(path.read_text(encoding="utf-8"))
    payload.update(updates)
    for key, value in defaults.items():
        payload.setdefault(key, value)
    payload["provenance"] = provenance()
    write_json(path, payload, indent=1, default=str)
    return payload


# Tables ---------------------------------------------------------------------------------
def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:+.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def side_by_side_table(part: Mapping[str, Any]) -> str:
    rows = []
    for tag in ("old", "new"):
        r = part["runs"][tag]
        rows.append(
            [
                tag,
                f"{r['seconds']:.1f}",
                r["calls"],
                r["prompt_tokens"],
                r["completion_tokens"],
                len(r["path"]),
                r["judgements_stopped"],
                r["judgements_explained"],
            ]
        )
    c = part["comparison"]
    lines = [
        markdown_table(
            [
                "compile",
                "seconds",
                "calls",
                "prompt tokens",
                "completion tokens",
                "strategies",
                "stopped",
                "explained",
            ],
            rows,
        ),
        f"new/old time: {_fmt(part['ratio'])} (target <= {TARGET_RATIO:.3f}); same ratings: "
        f"{part['same_ratings']} ({c['items_compared']} items of {c['strategies_compared']} "
        f"rating-first strategies compared, {len(c['mismatches'])} mismatches); paths "
        f"diverged: {c['paths_diverged']} ({c['common_strategies']} strategies in common); "
        f"target met: {part['target_met']}",
        *(f"note: {n}" for n in part.get("notes", [])),
    ]
    return "\n".join(lines)


def estimate_table(parts: Mapping[str, Mapping[str, Any]]) -> str:
    rows = []
    for name, e in parts.items():
        plan, actual = e.get("plan") or {}, e["actual"]
        for key, plan_key in (
            ("calls", "calls"),
            ("prompt_tokens", "prompt_tokens"),
            ("completion_tokens", "completion_tokens"),
            ("tokens", None),
            ("seconds", "seconds"),
            ("dollars", "dollars"),
        ):
            planned = (
                (plan.get("prompt_tokens", 0) + plan.get("completion_tokens", 0))
                if plan_key is None and plan
                else plan.get(plan_key)
            )
            rows.append(
                [name, key, _fmt(planned), _fmt(actual.get(key)), _fmt(e.get(f"{key}_error"))]
            )
    lines = [markdown_table(["model", "figure", "plan", "actual", "error"], rows)]
    for name, e in parts.items():
        lines.append(f"{name}: target (|error| <= {TARGET_ERROR}) met: {e.get('target_met')}")
        model = e.get("time_model")
        if model:
            lines.append(
                f"{name}: seconds per call, strategy by strategy (mean |error|): every prompt "
                f"token read {model['all_read_error']:.0%}, computed tokens "
                f"{model['computed_error']:.0%} ({len(model['strategies'])} strategies)"
            )
    return "\n".join(lines)


# Main -----------------------------------------------------------------------------------
def _lm_maker(model: str, parallel: int, root: Path) -> Callable[[str], Any]:
    local = parse_local_model(model) is not None

    def make(tag: str) -> Any:
        kwargs = {"parallel": parallel} if local else {}
        return make_lm(model, cache=root / tag, **kwargs)

    return make


def _settings(args: argparse.Namespace, task: str, aspect: str) -> dict[str, Any]:
    return {
        "pair": f"{task}:{aspect}",
        "model": args.model,
        "optimizer": args.optimizer,
        "budget": args.budget,
        "seed": args.seed,
        "parallel": args.parallel,
        "threads": os.environ.get("JUDGEOPT_THREADS", "2"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parts", default=",".join(DEFAULT_PARTS), help=f"of {PARTS}, or all")
    p.add_argument("--pair", default=None, help="task:aspect (sfres:naturalness)")
    p.add_argument("--task", default="sfres")
    p.add_argument("--aspect", default="naturalness")
    p.add_argument("--n-items", type=int, default=30, help="side_by_side's items (30)")
    p.add_argument("--budget", type=int, default=10, help="side_by_side's strategies (10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="local", help="the embedded model (local)")
    p.add_argument("--optimizer", default="auto", help="the preset (auto)")
    p.add_argument(
        "--parallel",
        type=int,
        default=RECOMMENDED_PARALLEL,
        help="local model: calls decoded together (the CLI's default, %(default)s)",
    )
    p.add_argument(
        "--order", default="old,new", help="side_by_side: which compile runs first (old,new)"
    )
    p.add_argument("--full-n-valid", type=int, default=E2E_SPLIT["n_valid"])
    p.add_argument(
        "--new-candidates",
        choices=["all", "rate_first"],
        default=None,
        help="the new compile's candidates (default: the preset's)",
    )
    p.add_argument("--full-budget", type=int, default=20, help="full's strategies (20)")
    p.add_argument("--hosted-model", default="openai/gpt-4o-mini")
    p.add_argument(
        "--hosted-pairs",
        default="topical_chat:coherence,summeval:coherence,hanna:engagement",
        help="estimate_hosted: pairs its estimate is checked on besides --pair, same settings "
        "(comma-separated task:aspect; empty: none)",
    )
    p.add_argument(
        "--hosted-time-scale",
        type=float,
        default=1.0,
        help="multiplies the scripted hosted model's answer times (0: instant)",
    )
    p.add_argument(
        "--estimate-fresh",
        action="store_true",
        help="estimate: compile anew instead of reusing side_by_side's new run (a plan made "
        "by the current code)",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--out", default=str(DEFAULT_OUT))
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", force=True
    )
    for name in ("compile_cost", "judgeopt.progress"):
        logging.getLogger(name).setLevel(logging.INFO)
    task_name, aspect = args.pair.split(":", 1) if args.pair else (args.task, args.aspect)
    parts = PARTS if args.parts == "all" else tuple(x for x in args.parts.split(",") if x)
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        p.error(f"unknown parts {unknown}; choose from {PARTS}")
    order = tuple(args.order.split(","))
    if sorted(order) != ["new", "old"]:
        p.error("--order is old,new or new,old")
    pair = f"{task_name}:{aspect}"
    out = Path(args.out)
    defaults = placeholders(pair, args.n_items, args.full_n_valid)
    task = load_task(task_name)
    preset = load_optimizer(args.optimizer)
    new_overrides = {} if args.new_candidates is None else {"candidates": args.new_candidates}
    settings = {**_settings(args, task_name, aspect), "new_overrides": new_overrides}
    progress = not args.no_progress

    def body() -> int:
        with tempfile.TemporaryDirectory(prefix="judgeopt-compile-cost-") as tmp:
            make = _lm_maker(args.model, args.parallel, Path(tmp))

            def new_compile(tag: str, items: Sequence[Record], budget: int) -> dict[str, Any]:
                """The new compile alone on ``items`` at ``budget`` (a fresh LM tagged
                ``tag``), its judgements not kept."""
                return compile_once(
                    make(tag),
                    task,
                    aspect,
                    items,
                    preset=preset,
                    budget=budget,
                    seed=args.seed,
                    old=False,
                    overrides=new_overrides,
                    progress=progress,
                    keep_judgements=False,
                )

            new_run = None
            if "side_by_side" in parts:
                items = first_items(task_name, args.n_items)
                part = side_by_side(
                    make,
                    task,
                    aspect,
                    items,
                    preset=preset,
                    budget=args.budget,
                    seed=args.seed,
                    order=order,
                    progress=progress,
                    new_overrides=new_overrides,
                    recheck=False,
                )
                part.update(settings=settings, provenance=provenance())
                new_run = part["runs"]["new"]
                merge(out, {"side_by_side": part}, defaults)
                print(side_by_side_table(part), flush=True)
            if "recheck" in parts:
                part = recheck_part(out, make, task, aspect, task_name)
                merge(out, {"side_by_side": part}, defaults)
                print(side_by_side_table(part), flush=True)
            if "estimate" in parts:
                items = first_items(task_name, args.n_items)
                if args.estimate_fresh:
                    new_run = None
                elif new_run is None:
                    new_run = saved_new_run(out, settings, args.n_items)
                if new_run is None:
                    new_run = new_compile("estimate", items, args.budget)
                embedded = estimate_report(new_run, model=args.model, dollars=0.0)
                embedded.update(settings=settings, provenance=provenance())
                merge(out, {"estimate": embedded}, defaults)
                print(estimate_table({args.model: embedded}))
            if "estimate_hosted" in parts:
                items = first_items(task_name, args.n_items)
                hosted = hosted_estimate(
                    task,
                    aspect,
                    items,
                    preset=preset,
                    budget=args.budget,
                    seed=args.seed,
                    model=args.hosted_model,
                    cache=Path(tmp) / "hosted",
                    time_scale=args.hosted_time_scale,
                    overrides=new_overrides,
                )
                hosted.update(
                    settings={**settings, "model": args.hosted_model}, provenance=provenance()
                )
                tables = {args.hosted_model: hosted}
                others = []
                for other in [x for x in args.hosted_pairs.split(",") if x]:
                    o_task, o_aspect = other.split(":", 1)
                    report = hosted_estimate(
                        load_task(o_task),
                        o_aspect,
                        first_items(o_task, args.n_items),
                        preset=preset,
                        budget=args.budget,
                        seed=args.seed,
                        model=args.hosted_model,
                        cache=Path(tmp) / f"hosted-{o_task}-{o_aspect}",
                        time_scale=args.hosted_time_scale,
                        overrides=new_overrides,
                    )
                    report.pop("run")
                    others.append({"pair": other, **report})
                    tables[f"{args.hosted_model} ({other})"] = report
                hosted["other_pairs"] = others
                merge(out, {"estimate_hosted": hosted}, defaults)
                print(estimate_table(tables))
            if "demo" in parts:
                demo = run_demo(args.model)
                demo["provenance"] = provenance()
                merge(out, {"demo_seconds": demo["seconds"], "demo": demo}, defaults)
                print(
                    markdown_table(
                        ["demo", "seconds", "exit", "kept baseline", "gain", "target met"],
                        [
                            [
                                " ".join(demo["command"]),
                                demo["seconds"],
                                demo["exit_status"],
                                demo["kept_baseline"],
                                _fmt(demo["gain"]),
                                demo["target_met"],
                            ]
                        ],
                    )
                )
                for line in demo["result_lines"]:
                    print(f"  {line}")
            if "full" in parts:
                items = validation_part(task_name)[: args.full_n_valid]
                run = new_compile("full", items, args.full_budget)
                full = {
                    "pair": pair,
                    "n_valid": len(items),
                    "seconds": run["seconds"],
                    "measured": True,
                    "budget": args.full_budget,
                    "target": f"seconds <= {TARGET_FULL_SECONDS}",
                    "target_met": run["seconds"] <= TARGET_FULL_SECONDS,
                    "run": run,
                    "settings": {**settings, "budget": args.full_budget},
                    "provenance": provenance(),
                }
                merge(out, {"full": full}, defaults)
                print(
                    markdown_table(
                        ["full", "n_valid", "budget", "seconds", "calls", "target met"],
                        [
                            [
                                pair,
                                len(items),
                                args.full_budget,
                                run["seconds"],
                                run["calls"],
                                full["target_met"],
                            ]
                        ],
                    )
                )
            if not out.is_file():
                merge(out, {}, defaults)
        print(f"wrote {out}")
        return 0

    def stopped() -> None:
        log.warning("stopped; the parts finished before are in %s", out)

    status = run_interruptible(body, on_stop=stopped)
    return EXIT_INTERRUPTED if status == EXIT_INTERRUPTED else status


if __name__ == "__main__":
    sys.exit(main())
