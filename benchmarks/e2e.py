"""End to end: does a compiled judge beat the MT-Bench baseline on held-out items?

For every task-aspect pair: whole groups of the dataset's full file are split, seeded, into a
validation set (at least ``--n-valid`` items) and a disjoint test set (at least ``--n-test``
items). ``judgeopt``'s default compile (the default search, the default selection rule: search
on half the validation items, confirm the finalists against the baseline on the other half)
runs with ``--budget`` strategies and an ensemble of the ``--ensemble`` best; then the MT-Bench
baseline, the chosen judge and the ensemble are scored on the test items; the *shipped* judge
is what ``judgeopt compile`` writes (the preset's ensemble when it builds one, else the chosen
judge; ``shipped_*`` fields). Per pair: the test
correlations, each gain over the baseline with its paired bootstrap interval (whole groups are
resampled for a group-level correlation), the confirmation results (what the compile saw), the
chosen strategy, calls and seconds.

Every pair checkpoints its compile (``OUT_DIR/<task>_<aspect>/ckpt``) and judge calls are
cached (``OUT_DIR/lm-cache``): an interrupted run resumes where it stopped, across sessions.
Ctrl-C or SIGTERM (the way to stop a ``nohup ... &`` run, which ignores SIGINT) ends the run
with exit code 130; the same command resumes it.
The JSON is rewritten after each pair::

    {"pairs": [{"task", "aspect", "model", "n_valid", "n_test", "baseline", "chosen",
                "ensemble", "gain", "gain_ci": [lo, hi], ...}], "mean_relative_gain": ..}

Usage:
    python benchmarks/e2e.py [--pairs sfres:naturalness,topical_chat:naturalness,
        topical_chat:coherence,summeval:coherence] [--model local] [--budget 20] [--n-valid 100]
        [--n-test 200] [--ensemble M] [--parallel 8] [--out-dir benchmarks/results/e2e_runs]
        [--json benchmarks/results/e2e.json]

Set JUDGEOPT_THREADS to the CPU threads of the local model (default 2).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from judgeopt.bench import (
    EXIT_INTERRUPTED,
    evaluate_stored,
    markdown_table,
    run_interruptible,
    shared_data_dir,
    stored_items,
    stored_result,
    strategy_key,
    write_json,
)
from judgeopt.data import Record, load_records, split_holdout
from judgeopt.demo import E2E_SPLIT, PER_GROUP
from judgeopt.evaluate import EvalResult, compare, ensemble_result
from judgeopt.judge import JudgeProgram, load_task
from judgeopt.lm import RECOMMENDED_PARALLEL, make_lm, parse_local_model
from judgeopt.teleprompt import JudgeSearch, load_optimizer

# NOTE: stored_items, evaluate_stored, stored_result and strategy_key (judgeopt.bench) are
# also read from this module by rescore_e2e.py.
__all__ = ["across_pairs", "main", "run_pair", "split_groups", "stored_items", "summarise"]

DATA = shared_data_dir()
DEFAULT_PAIRS = (
    "sfres:naturalness,topical_chat:naturalness,topical_chat:coherence,summeval:coherence"
)

log = logging.getLogger("e2e")

# How this version of judgeopt scores a group in which a judge gives one rating to every item
# (docs/metrics.md): rows written before 2026-11-27 have no ``scoring`` and were scored with
# such groups left out ("skip"); their derived fields are kept as stored, not recomputed.
SCORING = {"constant_groups": "zero"}


def split_groups(
    records: Sequence[Record], n_valid: int, n_test: int, seed: int, per_group: int | None = None
) -> tuple[list[Record], list[Record]]:
    """Disjoint validation and test sets of whole groups (:func:`judgeopt.data.split_holdout`)."""
    return split_holdout(records, n_valid, n_test, seed=seed, per_group=per_group)


def finalist_report(
    pair_dir: Path, test: list[Record], row: dict[str, Any], seed: int
) -> list[dict[str, Any]]:
    """Every finalist judged on test (the ensemble's members are), against the baseline.

    This is the check of the selection rule on held-out items: what each finalist (and so
    the paper's rule, which keeps the best search score) would have scored on test. It reads
    the stored test items only; a finalist whose items are not all stored is left out.
    """
    level = row["level"]
    base = (
        stored_result(
            pair_dir / f"test_{strategy_key(row['baseline_strategy'])}.jsonl", test, level
        )
        if row.get("baseline_strategy")
        else None
    )
    if base is None:
        return []
    finalists = (row.get("selection") or {}).get("finalists") or []
    if not isinstance(finalists, list):  # a rule without confirmation: the setting's count
        return []
    out = []

    def by_search_score(f: dict[str, Any]) -> float:  # best first; no score last
        score = f.get("search_score")
        return math.inf if score is None else -float(score)

    for rank, f in enumerate(sorted(finalists, key=by_search_score)):
        res = stored_result(pair_dir / f"test_{strategy_key(f['strategy'])}.jsonl", test, level)
        if res is None:
            continue
        c = compare(res, base, test, labels=("baseline", f["key"]), seed=seed)
        out.append(
            {
                "key": f["key"],
                "search_rank": rank + 1,
                "search_score": f.get("search_score"),
                "confirm_gain": f.get("gain"),
                "confirm_gain_ci": f.get("gain_ci"),
                "confirmed": f.get("confirmed"),
                "test": _num(res.metric("spearman")),
                "test_gain": _num(c.gain),
                "test_gain_ci": list(c.gain_ci),
                "test_parse_failures": res.parse_failures,
                "strategy": f["strategy"],
            }
        )
    return out


def rules_report(
    pair_dir: Path, valid: list[Record], test: list[Record], row: dict[str, Any], optimizer: str
) -> dict[str, Any]:
    """What two other selection rules would have returned on this pair, and its test gain.

    Both are computed from stored judgements without a call: the compile's confirmation
    split is redone (same function and seed), the baseline's and the finalists' judged
    confirmation items are read from the checkpoint's ``items.jsonl``, and the rule's pick is
    looked up among the finalists judged on test.

    - ``best_search_score`` (the paper's rule, on the search half): the strategy with the
      best search score; that is the baseline when the baseline's own search score is at
      least the best finalist's.
    - ``veto`` (:func:`judgeopt.selection.veto`, pre-registered in docs/benchmarks.md
      section 11): the same pick unless the one-sided upper bound of its confirmation gain
      over the baseline is below zero.

    A rule that returns the baseline has a test gain of exactly 0 (interval [0, 0]); each
    rule's ``minus_chosen`` is its judge's paired test difference from the default rule's
    chosen judge (0, [0, 0] when they are the same judge). As a
    check of the redone split and the stored items, the default rule is recomputed too and
    must give the gains the compile recorded (``check_max_abs_diff``).
    """
    from judgeopt.evaluate import item_predictions
    from judgeopt.selection import choose, confirmation_split, veto
    from judgeopt.teleprompt import ItemStore

    sel_cfg = load_optimizer(optimizer).selection
    sel = row.get("selection") or {}
    listed = sel.get("finalists")
    fins = sorted(
        listed if isinstance(listed, list) else [],  # an int: a rule without confirmation
        key=lambda f: math.inf if f.get("search_score") is None else -float(f["search_score"]),
    )
    base_strategy = row["baseline_strategy"]
    base_scores = [
        t["score"]
        for t in row["search"]["trace"]
        if t["strategy"] == base_strategy and t["score"] is not None
    ]
    base_search = max(base_scores) if base_scores else None
    out: dict[str, Any] = {"baseline_search_score": base_search}
    if not fins or sel.get("rule") != "confirm":
        return out
    aspect = row["aspect"]
    humans = [r.scores[aspect] for r in valid]
    grouped = any(r.group_id for r in valid)
    groups = [r.group_id or r.id for r in valid] if grouped else None
    _, confirm_idx = confirmation_split(
        humans, groups, fraction=sel_cfg.confirm_fraction, seed=sel_cfg.seed
    )
    confirm = [valid[i] for i in confirm_idx]
    if len(confirm) != sel.get("confirm_items"):
        raise RuntimeError(
            f"{row['task']}/{aspect}: the redone split has {len(confirm)} "
            f"confirmation items, the compile had {sel.get('confirm_items')}"
        )
    stored = ItemStore(pair_dir / "ckpt" / "items.jsonl")

    def vector(strategy: dict[str, Any]) -> list[float] | None:
        items = stored.items(strategy)
        if any(r.id not in items for r in confirm):
            return None
        return item_predictions([items[r.id] for r in confirm])

    level = row["level"]
    human = [r.scores[aspect] for r in confirm]
    cgroups = [r.group_id or r.id for r in confirm] if level == "group" else None
    kw = {
        "method": "spearman",
        "groups": cgroups,
        "confidence": sel_cfg.confidence,
        "n_resamples": sel_cfg.n_resamples,
        "seed": sel_cfg.seed,
    }
    base_vec = vector(base_strategy)
    vecs = [vector(f["strategy"]) for f in fins]
    if base_vec is None or any(v is None for v in vecs):
        out["error"] = "not every finalist's confirmation items are stored"
        return out
    again = choose(human, base_vec, vecs, keys=[f["key"] for f in fins], **kw)
    diffs = [
        abs(a.gain.delta - f["gain"])
        for a, f in zip(again.finalists, fins, strict=True)
        if f.get("gain") is not None and a.error is None
    ]
    out["check_max_abs_diff"] = max(diffs) if diffs else None
    top = fins[0]
    v = veto(
        human,
        base_vec,
        vecs[0],
        search_score=float(top["search_score"]),
        baseline_search_score=base_search,
        key=top["key"],
        **kw,
    )
    on_test = {f["key"]: f for f in row.get("finalists_on_test") or []}

    def test_result(strategy: dict[str, Any]) -> EvalResult | None:
        return stored_result(pair_dir / f"test_{strategy_key(strategy)}.jsonl", test, level)

    def minus_chosen(strategy: dict[str, Any]) -> dict[str, Any]:
        if strategy == row["chosen_strategy"]:
            return {"minus_chosen": 0.0, "minus_chosen_ci": [0.0, 0.0]}
        mine, chosen = test_result(strategy), test_result(row["chosen_strategy"])
        if mine is None or chosen is None:
            return {"minus_chosen": None, "minus_chosen_ci": None}
        c = compare(mine, chosen, test, labels=("chosen", "rule"), seed=sel_cfg.seed)
        return {"minus_chosen": _num(c.gain), "minus_chosen_ci": list(c.gain_ci)}

    def outcome(pick: str | None, extra: dict[str, Any]) -> dict[str, Any]:
        if pick is None:
            return {
                "returns": "baseline",
                "test_gain": 0.0,
                "test_gain_ci": [0.0, 0.0],
                **minus_chosen(base_strategy),
                **extra,
            }
        f = on_test.get(pick)
        return {
            "returns": pick,
            "test_gain": None if f is None else f["test_gain"],
            "test_gain_ci": None if f is None else f["test_gain_ci"],
            **minus_chosen(top["strategy"]),
            **extra,
        }

    best_is_base = base_search is not None and not base_search < float(top["search_score"])
    out["best_search_score"] = outcome(None if best_is_base else top["key"], {})
    out["veto"] = outcome(
        None if v.chosen is None else top["key"],
        {
            "confirm_gain": _num(v.finalists[0].gain.delta),
            "upper_bound": _num(v.finalists[0].upper_bound),
            "reason": v.reason,
        },
    )
    return out


def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def run_pair(
    task_name: str,
    aspect: str,
    *,
    model: str,
    lm: Any,
    budget: int,
    n_valid: int,
    n_test: int,
    ensemble: int | None,
    seed: int,
    out_dir: Path,
    optimizer: str,
    progress: bool,
) -> dict[str, Any]:
    task = load_task(task_name)
    full = DATA / task_name / "full.jsonl"
    records = load_records(full)
    valid, test = split_groups(records, n_valid, n_test, seed, per_group=PER_GROUP.get(task_name))
    pair_dir = out_dir / f"{task_name}_{aspect}"
    pair_dir.mkdir(parents=True, exist_ok=True)
    log.info("%s/%s: %d validation, %d test items", task_name, aspect, len(valid), len(test))
    preset = load_optimizer(optimizer)
    opt = JudgeSearch.from_config(
        preset,
        budget=budget,
        seed=seed,
        checkpoint_dir=pair_dir / "ckpt",
        progress=progress,
        ensemble=ensemble,
    )
    student = JudgeProgram(task, aspect, lm=lm)
    s0, t0 = lm.stats(), time.perf_counter()
    judge = opt.compile(student, trainset=valid)
    compile_seconds = time.perf_counter() - t0
    s1 = lm.stats()
    judge.model_name = model
    baseline = judge.with_strategy(student.strategy)
    ens = judge.ensemble

    # NOTE: the judged test items are kept per strategy (file name: the strategy's hash), so
    # a resumed run repeats no call; the ensemble's members are judged as single judges.
    def stored(program: Any, name: str) -> EvalResult:
        key = strategy_key(program.strategy.as_dict())
        return evaluate_stored(
            program, test, pair_dir / f"test_{key}.jsonl", desc=f"test: {name}", progress=progress
        )

    results = {"baseline": stored(baseline, "baseline"), "chosen": stored(judge, "chosen")}
    if ens is not None:
        members = [stored(m, f"ensemble member {i + 1}") for i, m in enumerate(ens.members)]
        results["ensemble"] = ensemble_result(ens, members, test)
    s2 = lm.stats()
    comps = {
        name: compare(res, results["baseline"], test, labels=("baseline", name), seed=seed)
        for name, res in results.items()
        if name != "baseline"
    }
    if "ensemble" in results:
        comps["ensemble_vs_chosen"] = compare(
            results["ensemble"], results["chosen"], test, labels=("chosen", "ensemble"), seed=seed
        )
    metric = "spearman"
    scores = {name: _num(res.metric(metric)) for name, res in results.items()}
    chosen_c = comps["chosen"]
    ens_c = comps.get("ensemble")
    judge = judge.with_report(
        judge.report_.with_test(results["chosen"].summary(), comparison=chosen_c.to_dict())
    )
    judge.save(pair_dir / "judge.json")
    if ens is not None:
        ens.model_name = model
        ens.test = results["ensemble"].summary()
        ens.comparisons = {**(ens.comparisons or {}), "test": comps["ensemble"].to_dict()}
        ens.save(pair_dir / "ensemble.json")
    res = judge.search_result
    sel = judge.selection or {}
    row: dict[str, Any] = {
        "task": task_name,
        "aspect": aspect,
        "model": model,
        "level": results["baseline"].level,
        "n_valid": len(valid),
        "n_test": len(test),
        "n_valid_groups": len({r.group_id or r.id for r in valid}),
        "n_test_groups": len({r.group_id or r.id for r in test}),
        "baseline": scores["baseline"],
        "chosen": scores["chosen"],
        "ensemble": scores.get("ensemble"),
        "gain": _num(chosen_c.gain),
        "gain_ci": list(chosen_c.gain_ci),
        "ensemble_gain": _num(ens_c.gain) if ens_c else None,
        "ensemble_gain_ci": list(ens_c.gain_ci) if ens_c else None,
        "ensemble_minus_chosen": (
            _num(comps["ensemble_vs_chosen"].gain) if "ensemble_vs_chosen" in comps else None
        ),
        "ensemble_minus_chosen_ci": (
            list(comps["ensemble_vs_chosen"].gain_ci) if "ensemble_vs_chosen" in comps else None
        ),
        "relative_gain": (
            _num(chosen_c.gain) / abs(scores["baseline"])
            if scores["baseline"] and chosen_c.gain is not None
            else None
        ),
        "significantly_worse": bool(chosen_c.gain_ci[1] is not None and chosen_c.gain_ci[1] < 0),
        "chosen_is_baseline": judge.strategy == student.strategy,
        "chosen_strategy": judge.strategy.as_dict(),
        "baseline_strategy": student.strategy.as_dict(),
        "ensemble_members": ([m.strategy.as_dict() for m in ens.members] if ens else None),
        "confirmation": (judge.comparisons or {}).get("confirmation"),
        "ensemble_confirmation": ((ens.comparisons or {}).get("confirmation") if ens else None),
        "selection": {
            k: sel.get(k)
            for k in ("rule", "search_items", "confirm_items", "chosen", "reason", "finalists")
        },
        "test_results": {name: r.summary() for name, r in results.items()},
        "search": {
            "search": res.search,
            "budget": res.budget,
            "evaluations": res.evaluations,
            "best_search_score": _num(res.best_score),
            "calls": res.calls,
            "trace": [
                {"number": t["number"], "score": t["score"], "strategy": t["strategy"]}
                for t in res.trace
            ],
        },
        # This process's share only: a resumed pair's earlier sessions are not counted here
        # (``search.calls`` counts the search's calls over every session).
        "calls_this_run": {"compile": s1.calls - s0.calls, "test": s2.calls - s1.calls},
        "seconds_this_run": {
            "compile": round(compile_seconds, 1),
            "test": round(sum(r.seconds for r in results.values()), 1),
        },
    }
    # What `judgeopt compile` writes to --out: the ensemble when the preset builds one
    # (an `anchored` or `ensemble` default), else the chosen single judge. An ensemble that
    # only this script asked for (--ensemble) is reported beside it, not shipped.
    row["shipped"] = "ensemble" if ens is not None and ensemble is None else "chosen"
    row |= shipped_fields(row)
    row["selection"]["guard"] = sel.get("guard")
    row["scoring"] = dict(SCORING)
    row["finalists_on_test"] = finalist_report(pair_dir, test, row, seed)
    row["rules_on_test"] = rules_report(pair_dir, valid, test, row, optimizer)
    write_json(pair_dir / "result.json", row)
    return row


def shipped_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """The judge the compile ships (``row["shipped"]``: ``"chosen"`` or ``"ensemble"``)
    against the baseline on test: ``shipped_score``, ``shipped_gain``, ``shipped_gain_ci``,
    ``shipped_relative_gain``, ``shipped_significantly_worse``."""
    name = row.get("shipped", "chosen")
    gain, ci = (
        (row["gain"], row["gain_ci"])
        if name == "chosen"
        else (row["ensemble_gain"], row["ensemble_gain_ci"])
    )
    base = row["baseline"]
    return {
        "shipped": name,
        "shipped_score": row[name],
        "shipped_gain": gain,
        "shipped_gain_ci": ci,
        "shipped_relative_gain": gain / abs(base) if gain is not None and base else None,
        "shipped_significantly_worse": bool(ci is not None and ci[1] is not None and ci[1] < 0),
    }


def complete_row(row: dict[str, Any], seed: int, out_dir: Path, optimizer: str) -> None:
    """Add the fields of later versions of this script to a row finished earlier, from the
    stored items (no call): the baseline's strategy, the finalists on test and the other
    selection rules.

    A row scored under another convention than this version's (``SCORING``; rows without
    ``scoring`` left judge-constant groups out) keeps the derived fields it has: they are
    what was measured and pre-registered, and recomputing them now would mix two
    conventions in one row (its baseline, chosen and ensemble scores are stored).
    """
    task = load_task(row["task"])
    valid, test = split_groups(
        load_records(DATA / row["task"] / "full.jsonl"),
        row["n_valid"],
        row["n_test"],
        seed,
        per_group=PER_GROUP.get(row["task"]),
    )
    row.setdefault("baseline_strategy", JudgeProgram(task, row["aspect"]).strategy.as_dict())
    row |= shipped_fields(row)  # rows before it shipped the chosen single judge
    for old_key in ("calls", "seconds"):  # renamed: they never counted earlier sessions
        if old_key in row:
            row[f"{old_key}_this_run"] = row.pop(old_key)
    pair_dir = out_dir / f"{row['task']}_{row['aspect']}"
    frozen = row.get("scoring") != SCORING
    if not (frozen and "finalists_on_test" in row):
        row["finalists_on_test"] = finalist_report(pair_dir, test, row, seed)
    if not (frozen and "rules_on_test" in row):
        row["rules_on_test"] = rules_report(pair_dir, valid, test, row, optimizer)


def across_pairs(
    gains: Sequence[float | None], cis: Sequence[Sequence[float | None] | None]
) -> dict[str, Any] | None:
    """The mean of per-pair gains with two 95 % intervals.

    ``ci_items``: the uncertainty of these pairs' test items only (each pair's standard error
    read off its paired bootstrap interval as width / 3.92, the pairs independent): is the
    mean gain on *these* tasks real? ``ci_pairs``: a t interval over the pairs' gains, which
    also counts how much the gain varies from task to task: would it carry over to another
    task? With four pairs the second is wide.
    """
    keep = [
        (g, c)
        for g, c in zip(gains, cis, strict=True)
        if g is not None and c is not None and None not in c
    ]
    if not keep:
        return None
    g = np.array([k[0] for k in keep], dtype=float)
    se = np.array([(k[1][1] - k[1][0]) / 3.92 for k in keep], dtype=float)
    k = len(g)
    mean = float(g.mean())
    half = 1.96 * float(np.sqrt((se**2).sum())) / k
    out: dict[str, Any] = {
        "mean": mean,
        "n_pairs": k,
        "ci_items": [mean - half, mean + half],
        "ci_pairs": None,
    }
    if k >= 2:
        from scipy.stats import t

        half_p = float(t.ppf(0.975, k - 1) * g.std(ddof=1) / np.sqrt(k))
        out["ci_pairs"] = [mean - half_p, mean + half_p]
    return out


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    rel = [r["relative_gain"] for r in rows if r["relative_gain"] is not None]
    gains = [r["gain"] for r in rows if r["gain"] is not None]
    # The paper's rule (keep the best search score) on the same pairs, from the stored test
    # items of the finalists: what the confirmation step changed. It returns the baseline
    # (gain 0) when the baseline's own search score is the best (``rules_on_test``).
    best_fin = {
        (r["task"], r["aspect"]): f
        for r in rows
        for f in r.get("finalists_on_test") or []
        if f["search_rank"] == 1
    }
    for r in rows:
        rule = (r.get("rules_on_test") or {}).get("best_search_score")
        if rule is not None:
            best_fin[(r["task"], r["aspect"])] = rule
    veto_rows = {
        (r["task"], r["aspect"]): r["rules_on_test"]["veto"]
        for r in rows
        if (r.get("rules_on_test") or {}).get("veto") is not None
    }
    veto_gain = {k: f["test_gain"] for k, f in veto_rows.items() if f["test_gain"] is not None}
    best_gain = {k: f["test_gain"] for k, f in best_fin.items() if f["test_gain"] is not None}
    best_rel = [
        best_gain[(r["task"], r["aspect"])] / abs(r["baseline"])
        for r in rows
        if (r["task"], r["aspect"]) in best_gain and r["baseline"]
    ]
    ens_gains = [r["ensemble_gain"] for r in rows if r.get("ensemble_gain") is not None]
    ens_rel = [
        r["ensemble_gain"] / abs(r["baseline"])
        for r in rows
        if r.get("ensemble_gain") is not None and r["baseline"]
    ]
    # The mean of per-pair relative gains explodes on a near-zero baseline (0.063 turns
    # -0.18 into -287 %); the mean gain over the mean baseline is the robust companion.
    bases = [abs(r["baseline"]) for r in rows if r["baseline"] is not None]
    base = float(np.mean(bases)) if bases else 0.0
    shipped = [r["shipped_gain"] for r in rows if r.get("shipped_gain") is not None]
    shipped_rel = [
        r["shipped_relative_gain"] for r in rows if r.get("shipped_relative_gain") is not None
    ]
    out = {
        "mean_gain_shipped": float(np.mean(shipped)) if shipped else None,
        "mean_relative_gain_shipped": float(np.mean(shipped_rel)) if shipped_rel else None,
        "pairs_significantly_worse_shipped": sum(
            bool(r.get("shipped_significantly_worse")) for r in rows
        ),
        "mean_relative_gain": float(np.mean(rel)) if rel else None,
        "mean_gain": float(np.mean(gains)) if gains else None,
        "mean_relative_gain_ensemble": float(np.mean(ens_rel)) if ens_rel else None,
        "pairs_significantly_worse": sum(r["significantly_worse"] for r in rows),
        "pairs_significantly_better": sum(
            r["gain_ci"][0] is not None and r["gain_ci"][0] > 0 for r in rows
        ),
        "n_pairs": len(rows),
        "mean_relative_gain_best_search_score": float(np.mean(best_rel)) if best_rel else None,
        "mean_baseline": base if bases else None,
        "relative_mean_gain": float(np.mean(gains)) / base if gains and base else None,
        "relative_mean_gain_ensemble": (
            float(np.mean(ens_gains)) / base if ens_gains and base else None
        ),
        "relative_mean_gain_best_search_score": (
            float(np.mean(list(best_gain.values()))) / base if best_gain and base else None
        ),
        "mean_relative_gain_veto": (
            float(
                np.mean(
                    [
                        veto_gain[(r["task"], r["aspect"])] / abs(r["baseline"])
                        for r in rows
                        if (r["task"], r["aspect"]) in veto_gain and r["baseline"]
                    ]
                )
            )
            if veto_gain
            else None
        ),
        "relative_mean_gain_veto": (
            float(np.mean(list(veto_gain.values()))) / base if veto_gain and base else None
        ),
        "pairs_significantly_worse_veto": sum(
            f["test_gain_ci"] is not None
            and f["test_gain_ci"][1] is not None
            and f["test_gain_ci"][1] < 0
            for f in veto_rows.values()
        ),
        "mean_gain_intervals": {
            "chosen": across_pairs([r["gain"] for r in rows], [r["gain_ci"] for r in rows]),
            "ensemble": across_pairs(
                [r.get("ensemble_gain") for r in rows], [r.get("ensemble_gain_ci") for r in rows]
            ),
            "ensemble_minus_chosen": across_pairs(
                [r.get("ensemble_minus_chosen") for r in rows],
                [r.get("ensemble_minus_chosen_ci") for r in rows],
            ),
            "best_search_score": across_pairs(
                [best_fin.get((r["task"], r["aspect"]), {}).get("test_gain") for r in rows],
                [best_fin.get((r["task"], r["aspect"]), {}).get("test_gain_ci") for r in rows],
            ),
            "veto": across_pairs(
                [veto_rows.get((r["task"], r["aspect"]), {}).get("test_gain") for r in rows],
                [veto_rows.get((r["task"], r["aspect"]), {}).get("test_gain_ci") for r in rows],
            ),
            "veto_minus_chosen": across_pairs(
                [veto_rows.get((r["task"], r["aspect"]), {}).get("minus_chosen") for r in rows],
                [veto_rows.get((r["task"], r["aspect"]), {}).get("minus_chosen_ci") for r in rows],
            ),
            "best_search_score_minus_chosen": across_pairs(
                [best_fin.get((r["task"], r["aspect"]), {}).get("minus_chosen") for r in rows],
                [best_fin.get((r["task"], r["aspect"]), {}).get("minus_chosen_ci") for r in rows],
            ),
        },
    }
    out["criteria"] = {
        "n_pairs": len(rows),
        "ensemble": _criterion(
            rows,
            out["mean_gain_intervals"]["ensemble_minus_chosen"],
            lambda r: r.get("ensemble_gain_ci"),
        ),
        "veto": _criterion(
            rows,
            out["mean_gain_intervals"]["veto_minus_chosen"],
            lambda r: veto_rows.get((r["task"], r["aspect"]), {}).get("test_gain_ci"),
        ),
        "best_search_score": _criterion(
            rows,
            out["mean_gain_intervals"]["best_search_score_minus_chosen"],
            lambda r: best_fin.get((r["task"], r["aspect"]), {}).get("test_gain_ci"),
        ),
    }
    return out


def _criterion(
    rows: list[dict[str, Any]], margin: dict[str, Any] | None, gain_ci: Any
) -> dict[str, Any]:
    """The pre-registered test of a candidate default (docs/benchmarks.md section 11,
    "Held-out pairs"): over the pairs, its mean margin over the chosen judge has an items
    interval above zero, and on no pair is it significantly worse than the baseline (every
    pair must have both numbers)."""
    worse, missing = [], []
    for r in rows:
        ci = gain_ci(r)
        name = f"{r['task']}/{r['aspect']}"
        if ci is None or None in ci:
            missing.append(name)
        elif ci[1] < 0:
            worse.append(name)
    above = margin is not None and margin["n_pairs"] == len(rows) and margin["ci_items"][0] > 0
    return {
        "margin_over_chosen": None if margin is None else margin["mean"],
        "margin_ci_items": None if margin is None else margin["ci_items"],
        "pairs_significantly_worse_than_baseline": worse,
        "pairs_missing": missing,
        "met": bool(rows) and above and not worse and not missing,
    }


def table(rows: list[dict[str, Any]]) -> str:
    def f(x: Any) -> str:
        return "n/a" if x is None else f"{x:+.3f}" if isinstance(x, float) else str(x)

    def ci(pair: Any) -> str:
        lo, hi = pair or [None, None]
        return f"[{f(lo)}, {f(hi)}]"

    main_rows = [
        [
            f"{r['task']}/{r['aspect']}",
            r["level"],
            f"{r['n_valid']} / {r['n_test']}",
            f(r["baseline"]),
            f(r["chosen"]),
            f"{f(r['gain'])} {ci(r['gain_ci'])}",
            f(r["ensemble"]),
            f"{f(r['ensemble_gain'])} {ci(r['ensemble_gain_ci'])}",
            "yes" if r["chosen_is_baseline"] else "no",
            r.get("shipped", "chosen"),
        ]
        for r in rows
    ]
    rule_rows = []
    for r in rows:
        rules = r.get("rules_on_test") or {}
        b, v = rules.get("best_search_score"), rules.get("veto")
        if b is None or v is None:
            continue
        rule_rows.append(
            [
                f"{r['task']}/{r['aspect']}",
                f(rules["baseline_search_score"]),
                b["returns"],
                f"{f(b['test_gain'])} {ci(b['test_gain_ci'])}",
                v["returns"],
                f"{f(v['confirm_gain'])} ({f(v['upper_bound'])})",
                f"{f(v['test_gain'])} {ci(v['test_gain_ci'])}",
            ]
        )
    finalist_rows = [
        [
            f"{r['task']}/{r['aspect']}",
            fin["key"],
            fin["search_rank"],
            f(fin["search_score"]),
            f(fin["confirm_gain"]),
            "yes" if fin["confirmed"] else "no",
            f(fin["test"]),
            f"{f(fin['test_gain'])} {ci(fin['test_gain_ci'])}",
        ]
        for r in rows
        for fin in r.get("finalists_on_test") or []
    ]
    return "\n".join(
        [
            markdown_table(
                [
                    "pair",
                    "level",
                    "n valid / test",
                    "baseline",
                    "chosen",
                    "gain [95% CI]",
                    "ensemble",
                    "ensemble gain [95% CI]",
                    "chosen = baseline",
                    "shipped",
                ],
                main_rows,
            ),
            "",
            "Other selection rules on test (from the stored judgements, no call; the "
            "baseline's own search score counts):",
            "",
            markdown_table(
                [
                    "pair",
                    "baseline search score",
                    "best search score: returns",
                    "test gain [95% CI]",
                    "veto: returns",
                    "confirmation gain (80% upper bound)",
                    "test gain [95% CI]",
                ],
                rule_rows,
            ),
            "",
            "Finalists on test (search rank 1 is the paper's rule's pick unless the "
            "baseline's search score is higher):",
            "",
            markdown_table(
                [
                    "pair",
                    "finalist",
                    "search rank",
                    "search score",
                    "confirmation gain",
                    "confirmed",
                    "test",
                    "test gain [95% CI]",
                ],
                finalist_rows,
            ),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--pairs",
        default=DEFAULT_PAIRS,
        help="comma-separated task:aspect pairs (default: %(default)s)",
    )
    p.add_argument("--model", default="local")
    p.add_argument("--budget", type=int, default=20)
    p.add_argument("--n-valid", type=int, default=E2E_SPLIT["n_valid"])
    p.add_argument("--n-test", type=int, default=E2E_SPLIT["n_test"])
    p.add_argument(
        "--ensemble",
        type=int,
        default=None,
        help="also build an ensemble of the M best, reported beside the shipped judge "
        "(default: the preset's ensemble, which is then the shipped judge; the runs of "
        "issue 15 used 3)",
    )
    p.add_argument("--optimizer", default="auto", help="optimizer preset (auto)")
    p.add_argument("--seed", type=int, default=E2E_SPLIT["seed"])
    p.add_argument(
        "--out-dir",
        default="benchmarks/results/e2e_runs",
        help="checkpoints and judged items, committed so that a later session resumes "
        "(the LM cache inside is not committed)",
    )
    p.add_argument("--json", default="benchmarks/results/e2e.json")
    p.add_argument(
        "--parallel",
        type=int,
        default=RECOMMENDED_PARALLEL,
        help="local model: judge calls decoded together, as many in flight "
        "(default %(default)s, the CLI's; 1: one at a time)",
    )
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="run no pair: complete the finished pairs' rows from their stored test "
        "items, rewrite the JSON and print the tables (no model is loaded)",
    )
    args = p.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s", force=True
    )
    for name in ("e2e", "judgeopt"):
        logging.getLogger(name).setLevel(logging.INFO)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pairs = [tuple(x.split(":")) for x in args.pairs.split(",") if x]
    out = Path(args.json)
    rows: list[dict[str, Any]] = []
    if out.is_file():
        # Pairs finished by an earlier run of the same settings are kept.
        old = json.loads(out.read_text(encoding="utf-8"))
        if old.get("settings", {}) == _settings(args):
            rows = [r for r in old.get("pairs", []) if (r["task"], r["aspect"]) in pairs]
    for r in rows:
        # Derived from stored judgements only (no call), so recomputed every time: a row
        # written by an older version of this script gets the newer fields.
        complete_row(r, args.seed, out_dir, args.optimizer)
    if args.report_only:
        result = {"settings": _settings(args), "pairs": rows, **summarise(rows)}
        if rows:
            write_json(out, result)
        print(table(rows))
        print(json.dumps({k: v for k, v in result.items() if k not in ("pairs", "settings")}))
        return 0
    done = {(r["task"], r["aspect"]) for r in rows}
    # NOTE: `parallel` is not part of the settings: the batched and the one-at-a-time paths
    # give the same greedy answers up to floating-point rounding (docs/lm.md), and the
    # pairs finished before batched decoding existed ran one at a time.
    local = parse_local_model(args.model) is not None
    lm = make_lm(
        args.model, cache=out_dir / "lm-cache", **({"parallel": args.parallel} if local else {})
    )

    def run_pairs() -> int:
        for task_name, aspect in pairs:
            if (task_name, aspect) in done:
                log.info("%s/%s: done earlier", task_name, aspect)
                continue
            t0 = time.perf_counter()
            row = run_pair(
                task_name,
                aspect,
                model=args.model,
                lm=lm,
                budget=args.budget,
                n_valid=args.n_valid,
                n_test=args.n_test,
                ensemble=args.ensemble,
                seed=args.seed,
                out_dir=out_dir,
                optimizer=args.optimizer,
                progress=not args.no_progress,
            )
            rows.append(row)
            log.info(
                "%s/%s done in %.0f s: baseline %s, chosen %s, ensemble %s",
                task_name,
                aspect,
                time.perf_counter() - t0,
                row["baseline"],
                row["chosen"],
                row["ensemble"],
            )
            rows.sort(key=lambda r: pairs.index((r["task"], r["aspect"])))
            write_json(out, {"settings": _settings(args), "pairs": rows, **summarise(rows)})
            print(table(rows), flush=True)
        return 0

    def stopped() -> None:
        # Finished pairs are in the JSON; the running pair's judgements are in its
        # checkpoint and the LM cache, so only the calls in flight are lost.
        log.warning("stopped after %d finished pair(s); run the same command to resume", len(rows))

    if run_interruptible(run_pairs, on_stop=stopped) == EXIT_INTERRUPTED:
        return EXIT_INTERRUPTED
    result = {"settings": _settings(args), "pairs": rows, **summarise(rows)}
    print(table(rows))
    print(json.dumps({k: v for k, v in result.items() if k not in ("pairs", "settings")}))
    return 0


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "model": args.model,
        "budget": args.budget,
        "n_valid": args.n_valid,
        "n_test": args.n_test,
        "ensemble": args.ensemble,
        "optimizer": args.optimizer,
        "seed": args.seed,
    }


if __name__ == "__main__":
    sys.exit(main())
