"""What a demo of a given size would show, pair by pair, before it is run (no LLM call).

The README's first command should show a compile that finds a better judge than the MT-Bench
baseline, with the gain on held-out items and its interval, in minutes (issues 56 and 57).
Whether a demo can show that is decided by its pair, its size and its rule, and all three can
be read off the judgement bank before a single call:

* **What it would show.** Each complete bank pair is cut as a demo's search would judge it:
  the baseline and the first ``--budget - 1`` strategies of its search path that rate before
  they explain (:func:`judgeopt_lab.rate_first_k`; the demo forbids every other
  explanation). For ``--splits`` seeded splits per size, whole groups are drawn until
  ``n_valid`` labelled items (the bank's own splits, :func:`judgeopt_lab.bank_splits`), and
  from the rest, whole groups until ``--n-test`` held-out items, as the demo tests on. Each
  rule picks its judge on the labelled items; the pick is tested against the baseline on the
  held-out items with the paired bootstrap interval the demo prints
  (:func:`judgeopt.metrics.paired_bootstrap`, 95 %, whole groups where the task is scored
  per group, unparsed ratings imputed by the judge's mean as the compile scores them). A
  split *shows a gain* when that interval is above zero, *shows a loss* when it is below.
* **How long it would take.** The bank's seconds per judgement (the recorder's wall time
  shared among the calls in flight, :func:`judgeopt_lab.judgement_costs`; calls that rate
  first costed as stopped at the rating, :func:`judgeopt_lab.stopped_costs`): every cut
  column on the labelled items, then the baseline and the pick's members on the held-out
  items. Judging only: loading the model and the check call add a few seconds.
* **Whether prompts differ at all on the pair**: the best cut column's gain over the
  baseline on the pair's whole pool, with its paired interval (the ceiling no rule can pass;
  chosen with every label, so optimistic).

Everything here was judged on the bank's pools, which the demo's items may overlap: the
table predicts a run, it is not a held-out result. The rules' constants are the fixed ones
the bank chose (``benchmarks/results/bank_fixed.json``), each rule's prior learnt from the
other pairs.

Usage:
    python benchmarks/demo_plan.py            # every complete pair, sizes 24-64
    python benchmarks/demo_plan.py --n-valid 48 --n-test 96 --budget 6

Writes ``benchmarks/results/demo_plan.json``: ``{"settings", "rules", "pairs": {PAIR:
{"level", "pool", "ceiling": {"strategy", "gain", "ci"}, "n_valid": {N: {RULE: {"shipped",
"mean_gain", "gain_share", "shows_gain", "shows_loss", "seconds", "seconds_p90",
"n_test"}}}}}, "provenance"}`` (shares over the splits; ``seconds`` the mean predicted
judging time, ``seconds_p90`` its 90th percentile).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from judgeopt.metrics import paired_bootstrap
from judgeopt.selection import RULES, Pick, impute
from judgeopt_lab import (
    BankPair,
    bank_lines,
    bank_splits,
    cost_matrix,
    gain_prior,
    judgement_costs,
    load_bank,
    markdown_table,
    n_valids_of,
    prior_strategy,
    rate_first_k,
    rule_input,
    stopped_costs,
    strategy_json,
    write_json,
)

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "results" / "demo_plan.json"

#: The rules compared, at the constants the bank chose (bank_fixed.json): the shipped
#: default, the pre-registered candidate (benchmarks/default_candidate.toml) and the guarded
#: mean of the five best.
DEFAULT_RULES: dict[str, tuple[str, dict[str, Any]]] = {
    "lcb": ("lcb", {"alpha": 0.05}),
    "stack+guard": ("stack+guard", {"m": 5, "ridge": 10.0, "margin": 0.1, "nonneg": True}),
    "ensemble+guard": ("ensemble+guard", {"m": 5, "margin": 0.1}),
}


def test_rows(
    pair: BankPair, test: np.ndarray, n_test: int, rng: np.random.Generator
) -> np.ndarray:
    """Whole groups of ``test`` (pool rows) in random order until at least ``n_test`` rows
    (all of them when there are fewer)."""
    groups = np.asarray([str(pair.groups[i]) for i in test], dtype=object)
    units = sorted(set(groups.tolist()))
    out: list[int] = []
    for u in rng.permutation(len(units)):
        if len(out) >= n_test:
            break
        out += test[groups == units[int(u)]].tolist()
    return np.array(sorted(out))


def interval(
    pair: BankPair, rows: np.ndarray, pick_pred: np.ndarray, base_pred: np.ndarray, seed: int
) -> tuple[float, float, float]:
    """The paired bootstrap gain of a pick over the baseline on pool ``rows`` (``delta``,
    low, high), as the demo prints it."""
    grouped = pair.level == "group"
    r = paired_bootstrap(
        pair.human[rows],
        pick_pred,
        base_pred,
        groups=[pair.groups[i] for i in rows] if grouped else None,
        n_resamples=1000,
        seed=seed,
    )
    return float(r.delta), float(r.low), float(r.high)


def demo_cut(pair: BankPair, budget: int) -> tuple[BankPair, list[int]]:
    """``pair`` cut as a demo's search judges it: the baseline and the first ``budget - 1``
    rate-first strategies of its search path (:func:`judgeopt_lab.rate_first_k`), each with
    its decoding twin where the bank has it (the same calls read as greedy and as expected:
    a compile evaluates both for one call), and each column's call: the index of the first
    column with the same strategy but for the decoding."""
    cut, _ = rate_first_k(pair, budget)
    keys = {c.key for c in cut.columns}
    twins = [c for c in pair.columns if any(r.removeprefix("twin of ") in keys for r in c.roles)]
    cut = replace(cut, columns=(*cut.columns, *twins))
    calls: dict[str, int] = {}
    call_of = [
        calls.setdefault(strategy_json(_undecoded(c.strategy)), i)
        for i, c in enumerate(cut.columns)
    ]
    return cut, call_of


def _undecoded(strategy: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in strategy.items() if k != "decoding"}


def pair_costs(
    directory: Path, pair: BankPair, cut: BankPair, call_of: Sequence[int]
) -> np.ndarray:
    """The seconds per (column, pool item) of the cut's calls, rate-first calls stopped at the
    rating; a twin column costs nothing (its call is its twin's)."""
    held, _ = judgement_costs(bank_lines(directory, pair.name), share="latency")
    cost, _ = stopped_costs(cut, cost_matrix(cut, held), estimate="none")
    for i, call in enumerate(call_of):
        if call != i:
            cost[i] = 0.0
    return cost


def plan_pair(
    cut: BankPair,
    cost: np.ndarray,
    call_of: Sequence[int],
    rules: Mapping[str, Any],
    n_valid: int,
    n_test: int,
    n_splits: int,
    seed: int,
) -> dict[str, Any]:
    """Every rule's demo outcomes on ``n_splits`` splits of ``cut`` at one size."""
    preds = cut.matrix()
    base = next(i for i, c in enumerate(cut.columns) if "baseline" in c.roles)
    filled = impute(preds)
    out: dict[str, dict[str, list[float]]] = {name: {} for name in rules}
    sizes = []
    for s, (v, t) in enumerate(bank_splits(cut, n_valid, n_splits, seed)):
        rows = test_rows(cut, t, n_test, np.random.default_rng([seed, n_valid, s, 1]))
        sizes.append(len(rows))
        valid = rule_input(cut, v, preds, seed=s)
        # Judged on the labelled items: every column of the cut.
        search = float(np.nansum(cost[:, v]))
        for name, rule in rules.items():
            pick: Pick = rule(valid)
            members = sorted({base, *(call_of[m] for m in pick.members)})
            seconds = search + float(np.nansum(cost[members][:, rows]))
            if pick.members == (base,):
                delta, low, high = 0.0, 0.0, 0.0
            else:
                # The pick's ratings on the test rows, as the compile combines its members
                # (z-scored with the validation statistics); unparsed ratings imputed.
                mine = impute(pick.predict(preds[:, rows]))[0]
                delta, low, high = interval(cut, rows, mine, filled[base, rows], seed=s)
            row = out[name]
            for key, value in (
                ("shipped", float(pick.members != (base,))),
                ("gain", delta),
                ("gain_share", float(delta > 1e-12)),
                ("shows_gain", float(low > 0)),
                ("shows_loss", float(high < 0)),
                ("seconds", seconds),
            ):
                row.setdefault(key, []).append(value)
    result: dict[str, Any] = {}
    for name, row in out.items():
        secs = np.asarray(row["seconds"])
        result[name] = {
            "shipped": float(np.mean(row["shipped"])),
            "mean_gain": float(np.mean(row["gain"])),
            "gain_share": float(np.mean(row["gain_share"])),
            "shows_gain": float(np.mean(row["shows_gain"])),
            "shows_loss": float(np.mean(row["shows_loss"])),
            "seconds": float(secs.mean()),
            "seconds_p90": float(np.quantile(secs, 0.9)),
            "n_test": float(np.mean(sizes)),
        }
    return result


def ceiling(cut: BankPair) -> dict[str, Any]:
    """The cut's best column on its whole pool against the baseline, with the paired
    interval (every label used: an upper bound on what a rule can find)."""
    from judgeopt.selection import column_scores

    preds = impute(cut.matrix())
    grouped = list(cut.groups) if cut.level == "group" else None
    scores = column_scores(cut.human, preds, grouped)
    base = next(i for i, c in enumerate(cut.columns) if "baseline" in c.roles)
    best = int(np.nanargmax(scores))
    rows = np.arange(len(cut.ids))
    delta, low, high = interval(cut, rows, preds[best], preds[base], seed=0)
    return {
        "strategy": dict(cut.columns[best].strategy),
        "baseline": float(scores[base]),
        "gain": delta,
        "ci": [low, high],
    }


def bound_rules(bank: Mapping[str, BankPair], name: str, chosen: Sequence[str]) -> dict[str, Any]:
    """The chosen rules bound for pair ``name`` (priors learnt on the other pairs)."""
    others = [bank[q] for q in sorted(bank) if q != name]
    out = {}
    for label in chosen:
        rule, setting = DEFAULT_RULES[label]
        spec = RULES[rule]
        out[label] = spec.bind(
            setting,
            strategy=prior_strategy(others) if spec.uses_prior else None,
            prior=gain_prior(others) if spec.uses_gain_prior else None,
        )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-valid", default="24,32,40,48,64", help="labelled items, comma-separated")
    ap.add_argument("--n-test", type=int, default=100, help="held-out items the demo tests on")
    ap.add_argument("--budget", type=int, default=6, help="strategies judged, the baseline one")
    ap.add_argument("--rules", default=",".join(DEFAULT_RULES), help="comma-separated")
    ap.add_argument("--splits", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=str(OUT))
    args = ap.parse_args(argv)
    chosen = [r.strip() for r in args.rules.split(",") if r.strip()]
    unknown = sorted(set(chosen) - set(DEFAULT_RULES))
    if unknown or not chosen:
        ap.error(f"--rules: {unknown or args.rules!r}; allowed: {sorted(DEFAULT_RULES)}")
    if args.budget < 2:
        ap.error(f"--budget must be at least 2 (the baseline and one other); got {args.budget}")
    sizes = n_valids_of(args.n_valid)
    directory = ROOT / "runs" / "bank"
    bank = load_bank(ROOT / "bank_plan.json", directory, complete_only=True, twins=True)
    if len(bank) < 2:
        print(f"the bank has {len(bank)} complete pair(s); priors need at least 2")
        return 2
    t0 = time.perf_counter()
    pairs: dict[str, Any] = {}
    for name in sorted(bank):
        cut, call_of = demo_cut(bank[name], args.budget)
        cost = pair_costs(directory, bank[name], cut, call_of)
        rules = bound_rules(bank, name, chosen)
        entry: dict[str, Any] = {
            "level": cut.level,
            "pool": len(cut.ids),
            "columns": [c.key for c in cut.columns],
            "calls_per_item": len(set(call_of)),
            "ceiling": ceiling(cut),
            "n_valid": {},
        }
        for n in sizes:
            print(f"{name}: {n} labelled items", file=sys.stderr, flush=True)
            entry["n_valid"][str(n)] = plan_pair(
                cut, cost, call_of, rules, n, args.n_test, args.splits, args.seed
            )
        pairs[name] = entry
    payload = {
        "settings": {
            "n_valid": sizes,
            "n_test": args.n_test,
            "budget": args.budget,
            "splits": args.splits,
            "seed": args.seed,
            "candidates": "rate_first",
            "interval": "paired bootstrap, 95 %, 1000 resamples (whole groups at group level)",
            "seconds": "bank seconds per judgement (latency share), rate-first calls stopped",
        },
        "rules": {k: {"rule": DEFAULT_RULES[k][0], "setting": DEFAULT_RULES[k][1]} for k in chosen},
        "pairs": pairs,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    write_json(args.json, payload)
    print(report(payload))
    return 0


def report(payload: Mapping[str, Any]) -> str:
    """One table: per pair, size and rule, what the demo would show and how long it takes."""
    rows = []
    for name, entry in payload["pairs"].items():
        c = entry["ceiling"]
        head = f"{name} (best {c['gain']:+.3f} [{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}])"
        for n, by_rule in entry["n_valid"].items():
            for rule, r in by_rule.items():
                rows.append(
                    [
                        head,
                        n,
                        rule,
                        f"{r['shipped']:.0%}",
                        f"{r['mean_gain']:+.3f}",
                        f"{r['gain_share']:.0%}",
                        f"{r['shows_gain']:.0%}",
                        f"{r['shows_loss']:.0%}",
                        f"{r['seconds'] / 60:.1f} ({r['seconds_p90'] / 60:.1f})",
                    ]
                )
                head = ""
    header = [
        "pair (best column's pool gain)",
        "labelled",
        "rule",
        "shipped",
        "mean test gain",
        "gain > 0",
        "interval > 0",
        "interval < 0",
        "minutes (p90)",
    ]
    return markdown_table(header, rows) + "\n" + json.dumps(payload["settings"])


if __name__ == "__main__":
    raise SystemExit(main())
