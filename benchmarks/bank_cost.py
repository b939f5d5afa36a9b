"""Gain per CPU hour: each selection rule's gain on the judgement bank, with what its compile
spends judging (no LLM call).

For every complete pair of the bank, every rule of :data:`judgeopt_lab.RULES` is replayed as
``benchmarks/bank_rules.py`` replays it (:func:`judgeopt_lab.replay_bank`: the same seeded
splits of whole groups, constants and priors chosen leave-one-pair-out) at ``--n-valid``
labelled items (100), once per search budget ``k`` of ``--budgets``: the pair cut to the
baseline and the first ``k`` strategies its budget-20 e2e search evaluated
(:func:`judgeopt_lab.first_k`; a search at budget ``k`` that took the same path). Beside each
rule's mean test gain over the baseline (standard error over the pairs) stands the CPU time
its compile spends judging on the split's validation items (:func:`judgeopt_lab.compile_seconds`:
every evaluated strategy on every validation item; ``confirm`` and ``veto`` every strategy on
the search half and only the baseline and their finalists on the confirmation half;
``baseline`` and ``prior`` nothing), and the gain per CPU hour.

``--racing-budgets`` (20) replays those budgets again with the compile's racing (rows
``K raced``; :func:`judgeopt_lab.raced`): each strategy judged on a growing prefix of the
search items and dropped when its bound cannot reach the 5th best full score so far, as
``[racing] enabled = true`` runs it; a dropped strategy costs its prefix and is not compared.
The search's path is the bank's in every row (a budget-20 e2e search's order; the replay
cannot show where another budget or a dropped strategy's partial score would have led).

Seconds per judgement come from the bank's ``chunk`` lines (the recorder's wall time per 32
judgements, 8 calls in flight on two threads), shared among a chunk's judgements in
proportion to their latencies (``--share latency``) or equally (``--share equal``; the JSON
holds both totals); the judgements imported from ``benchmarks/e2e.py`` without a call get a
per-pair line of the measured costs on the answer's length (:func:`judgeopt_lab.judgement_costs`).
A *CPU hour* is an hour of that recorder (the unit of the bank's 27.4 hours in
docs/benchmarks.md, section 13), not a core-hour.

Each row is also compared, pair by pair, with the reference (``--reference``, default the
bank's default in ``benchmarks/results/bank_rules.json``) at the largest budget: the mean
paired difference of gains over the pairs with its 95 % t interval. A row whose interval
holds 0 gains the same *within noise*; the better default on cost is the cheapest row that
costs less, meets the default's criterion (worse than the baseline in at most 10 % of the
splits on every pair) and gains at least as much on average (over five pairs the interval
holds 0 even for rows that gain nothing, so a lower mean is not taken as "the same").

Writes ``benchmarks/results/bank_cost.json`` (with provenance)::

    {"budgets": {K: {"rules": {RULE: {"mean_gain", "se", "cpu_hours",
     "gain_per_cpu_hour", "gain_per_cpu_hour_interval", "vs_reference", "per_pair", ...}},
     "lopo_default": {...}}}, "reference", "better_default_on_cost", "costs", "settings"}

Usage:
    python benchmarks/bank_cost.py [--budgets 5,8,12,20] [--racing-budgets 20]
                                   [--n-valid 100] [--splits 200]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from judgeopt_lab import (
    RULES,
    BankPair,
    bank_lines,
    bank_splits,
    cost_matrix,
    first_k,
    judgement_costs,
    load_bank,
    markdown_table,
    raced,
    replay_bank,
    rule_cost_rows,
    write_json,
)

ROOT = Path(__file__).resolve().parent
MAX_WORSE = 0.10
LOPO = "(default chosen left out)"


def t_interval(values: Sequence[float], level: float = 0.95) -> list[float] | None:
    """The mean of ``values`` +- the two-sided ``level`` t quantile times its standard
    error (``None`` below two values)."""
    v = np.asarray(values, dtype=float)
    if v.size < 2:
        return None
    half = stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size)
    return [float(v.mean() - half), float(v.mean() + half)]


def cost_rows(
    bank: Mapping[str, BankPair],
    costs: Mapping[str, Mapping[str, np.ndarray]],
    payload: Mapping[str, Any],
    rows: Mapping[str, Sequence[int]],
    *,
    n_valid: int,
    n_splits: int,
    seed: int,
    racing: bool = False,
) -> dict[str, Any]:
    """Per rule (and the default chosen left out), the replay's gains at ``n_valid`` with the
    compile's judging hours: ``costs[share][pair]`` is the pair's full cost matrix, ``rows``
    the pair's columns in the replayed (cut) bank; ``racing``: the compiles race."""
    out: dict[str, Any] = {}
    names = sorted(bank)
    splits = {p: bank_splits(bank[p], n_valid, n_splits, seed) for p in names}
    rules = list(payload["rules"])
    hours: dict[str, dict[str, dict[str, float]]] = {}
    for share, by_pair in costs.items():
        for p in names:
            cost = by_pair[p][list(rows[p])]
            per_rule = rule_cost_rows(
                bank[p], cost, splits[p], rules, prior=payload["priors"].get(p), racing=racing
            )
            for r, secs in per_rule.items():
                hours.setdefault(share, {}).setdefault(r, {})[p] = float(secs.mean()) / 3600
    key = str(n_valid)
    for r in rules:
        row = payload["rules"][r]["n_valid"][key]
        out[r] = _row(row, {s: hours[s][r] for s in hours}, setting=row.get("setting"))
    lopo = payload.get("lopo_default", {}).get("n_valid", {}).get(key)
    if lopo is not None:
        chosen = {p: v["rule"] for p, v in lopo["per_pair"].items()}
        out[LOPO] = _row(lopo, {s: {p: hours[s][chosen[p]][p] for p in names} for s in hours})
    return out


def _row(
    replayed: Mapping[str, Any],
    hours: Mapping[str, Mapping[str, float]],
    setting: Any = None,
) -> dict[str, Any]:
    per_pair = replayed["per_pair"]
    h = float(np.mean(list(hours["latency"].values())))
    gain = float(replayed["mean_gain"])
    interval = t_interval([v["mean_gain"] for v in per_pair.values()])
    per_hour = None if h <= 0 else gain / h
    return {
        "mean_gain": gain,
        "se": replayed["se"],
        "gain_interval": interval,
        "worse_share": replayed["worse_share"],
        "max_pair_worse_share": replayed["max_pair_worse_share"],
        "baseline_share": float(np.mean([v["baseline_share"] for v in per_pair.values()])),
        "cpu_hours": h,
        "cpu_hours_equal_share": float(np.mean(list(hours["equal"].values())))
        if "equal" in hours
        else None,
        "gain_per_cpu_hour": per_hour,
        "gain_per_cpu_hour_interval": None
        if per_hour is None or interval is None
        else [v / h for v in interval],
        **({"setting": setting} if setting is not None else {}),
        "per_pair": {
            p: {
                "mean_gain": v["mean_gain"],
                "split_se": v.get("split_se"),
                "worse_share": v["worse_share"],
                "baseline_share": v["baseline_share"],
                "cpu_hours": hours["latency"][p],
                **({"rule": v["rule"]} if "rule" in v else {}),
            }
            for p, v in per_pair.items()
        },
    }


def compare(budgets: Mapping[str, Any], reference: tuple[str, str]) -> dict[str, Any] | None:
    """Add to every row its paired difference of gains with ``reference`` (budget, rule)
    over the pairs (``vs_reference``: mean, 95 % t interval, ``within_noise``), and return
    the better default on cost: the cheapest row that meets the default's criterion, costs
    less than the reference and gains at least as much on average (the difference within
    noise or above it; ``None``: no row). A row whose mean gain is below the reference's is
    not taken even when its interval holds 0: over a few pairs the interval holds 0 for
    rows that gain nothing, the baseline's included."""
    k_ref, r_ref = reference
    ref = budgets[k_ref]["rules"][r_ref]
    better = None
    for k, b in budgets.items():
        for name, row in b["rules"].items():
            diffs = [
                row["per_pair"][p]["mean_gain"] - ref["per_pair"][p]["mean_gain"]
                for p in ref["per_pair"]
            ]
            iv = t_interval(diffs)
            mean = float(np.mean(diffs))
            row["vs_reference"] = {
                "mean_difference": mean,
                "interval": iv,
                "within_noise": iv is not None and iv[0] <= 0 <= iv[1],
            }
            if (
                mean >= 0
                and row["max_pair_worse_share"] <= MAX_WORSE
                and row["cpu_hours"] < ref["cpu_hours"]
                and name != LOPO
                and (better is None or row["cpu_hours"] < better["cpu_hours"])
            ):
                better = {"budget": k, "rule": name, **{f: row[f] for f in _BRIEF}}
                better["vs_reference"] = row["vs_reference"]
    return better


_BRIEF = ("mean_gain", "se", "cpu_hours", "gain_per_cpu_hour", "max_pair_worse_share")


def _fmt_interval(iv: Sequence[float] | None, digits: int = 3, sign: bool = True) -> str:
    if iv is None:
        return "-"
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    return f"[{f.format(iv[0])}, {f.format(iv[1])}]"


def tables(payload: Mapping[str, Any]) -> str:
    out = []
    ref = payload["reference"]
    for k, b in payload["budgets"].items():
        rows = []
        for name, v in b["rules"].items():
            vs = v.get("vs_reference") or {}
            rows.append(
                [
                    name,
                    f"{v['mean_gain']:+.3f} ({v['se']:.3f})",
                    f"{vs['mean_difference']:+.3f} {_fmt_interval(vs['interval'])}" if vs else "-",
                    f"{100 * v['worse_share']:.1f} % ({100 * v['max_pair_worse_share']:.1f} %)",
                    f"{v['cpu_hours']:.2f}",
                    "-"
                    if v["gain_per_cpu_hour"] is None
                    else f"{v['gain_per_cpu_hour']:+.3f} "
                    + _fmt_interval(v["gain_per_cpu_hour_interval"]),
                ]
            )
        first = k.split()[0]
        out.append(
            f"budget {k} (first {first} strategies of the search), n_valid = "
            f"{payload['settings']['n_valid']}"
        )
        out.append(
            markdown_table(
                [
                    "rule",
                    "mean gain (se over pairs)",
                    f"minus {ref['rule']} at {ref['budget']} [95 %]",
                    "worse (worst pair)",
                    "CPU hours",
                    "gain per CPU hour [95 %]",
                ],
                rows,
            )
        )
    return "\n\n".join(out)


def budget_table(payload: Mapping[str, Any], rules: Sequence[str]) -> str:
    """The cost by budget of a few rules: gain (se), CPU hours, gain per CPU hour."""
    rows = []
    for name in rules:
        for k, b in payload["budgets"].items():
            v = b["rules"].get(name)
            if v is None:
                continue
            rows.append(
                [
                    name,
                    k,
                    f"{v['mean_gain']:+.3f} ({v['se']:.3f})",
                    f"{100 * v['max_pair_worse_share']:.1f} %",
                    f"{v['cpu_hours']:.2f}",
                    "-" if v["gain_per_cpu_hour"] is None else f"{v['gain_per_cpu_hour']:+.3f}",
                ]
            )
    return markdown_table(
        ["rule", "budget", "mean gain (se)", "worst pair worse", "CPU hours", "gain / CPU h"],
        rows,
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--budgets", default="5,8,12,20", help="comma-separated search budgets")
    p.add_argument(
        "--racing-budgets",
        default="20",
        help="budgets also replayed with racing (rows 'K raced'); '' for none",
    )
    p.add_argument("--n-valid", type=int, default=100)
    p.add_argument("--splits", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--reference",
        default=None,
        help="rule at the largest budget (default: bank_rules.json's default)",
    )
    p.add_argument("--json", default=str(ROOT / "results" / "bank_cost.json"))
    args = p.parse_args(argv)
    budgets = sorted(int(k) for k in args.budgets.split(","))
    bank_dir = ROOT / "runs" / "bank"
    bank = load_bank(ROOT / "bank_plan.json", bank_dir, complete_only=True)
    if len(bank) < 2:
        print(f"the bank has {len(bank)} complete pair(s); a replay needs at least 2")
        return 2
    reference = args.reference
    if reference is None:
        rules_json = ROOT / "results" / "bank_rules.json"
        reference = json.loads(rules_json.read_text(encoding="utf-8"))["default"]
    t0 = time.perf_counter()
    matrices: dict[str, dict[str, np.ndarray]] = {"latency": {}, "equal": {}}
    fits: dict[str, Any] = {}
    for name, pair in bank.items():
        lines = list(bank_lines(bank_dir, name))
        for share in matrices:
            held, fit = judgement_costs(lines, share=share)
            matrices[share][name] = cost_matrix(pair, held)
            if share == "latency":
                m = matrices[share][name]
                fits[name] = {
                    **fit.__dict__,
                    "recorder_hours": fit.seconds / 3600,
                    "mean_seconds_per_judgement": float(np.nanmean(m)),
                    "per_column_seconds": {
                        c.key: float(np.nanmean(m[i])) for i, c in enumerate(pair.columns)
                    },
                }
    out: dict[str, Any] = {"budgets": {}, "costs": fits}
    racing = [int(k) for k in args.racing_budgets.split(",") if k.strip()]
    runs = [(k, False) for k in budgets] + [(k, True) for k in racing]
    for k, race in runs:
        label = f"{k} raced" if race else str(k)
        cut = {name: first_k(pair, k) for name, pair in bank.items()}
        sub = {name: c[0] for name, c in cut.items()}
        rules = {n: raced(n, spec) for n, spec in RULES.items()} if race else None
        payload = replay_bank(
            sub,
            rules,
            n_valids=[args.n_valid],
            n_splits=args.splits,
            seed=args.seed,
            progress=lambda s, label=label: print(f"  budget {label}: {s}", file=sys.stderr),
        )
        out["budgets"][label] = {
            "columns": {name: len(s.columns) for name, s in sub.items()},
            "rules": cost_rows(
                sub,
                matrices,
                payload,
                {name: c[1] for name, c in cut.items()},
                n_valid=args.n_valid,
                n_splits=args.splits,
                seed=args.seed,
                racing=race,
            ),
        }
    out["reference"] = {"rule": reference, "budget": budgets[-1]}
    better = compare(out["budgets"], (str(budgets[-1]), reference))
    out["better_default_on_cost"] = better
    out["settings"] = {
        "n_valid": args.n_valid,
        "n_splits": args.splits,
        "seed": args.seed,
        "budgets": budgets,
        "racing_budgets": racing,
        "racing": "judgeopt.racing's defaults (checkpoints 0.25/0.5/0.75, min_items 20, "
        "confidence 0.95), top 5 (the search's k), the search's order; a dropped strategy "
        "costs its judged items and is not compared",
        "pairs": sorted(bank),
        "max_worse": MAX_WORSE,
        "cpu_hour": "an hour of the bank's recorder: the embedded 1.5B on two threads, "
        "8 calls in flight (a chunk's wall time shared among its judgements)",
        "share": "latency (cpu_hours_equal_share: shared equally)",
        "interval": "95 % t interval over the pairs",
    }
    out["seconds"] = round(time.perf_counter() - t0, 1)
    path = Path(args.json)
    write_json(path, out)
    print(tables(out))
    print("\nCost by budget:\n")
    print(budget_table(out, [reference, "confirm", "ensemble+guard", LOPO]))
    if better is None:
        print(
            f"\nno cheaper row gains as much as {reference} on average and meets the "
            f"default's criterion"
        )
    else:
        print(
            f"\nbetter default on cost: {better['rule']} at budget {better['budget']} "
            f"({better['cpu_hours']:.2f} CPU h against "
            f"{out['budgets'][str(budgets[-1])]['rules'][reference]['cpu_hours']:.2f}; "
            f"gain {better['mean_gain']:+.3f}, difference "
            f"{better['vs_reference']['mean_difference']:+.3f} "
            f"{_fmt_interval(better['vs_reference']['interval'])})"
        )
    print(f"{out['seconds']} s; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
