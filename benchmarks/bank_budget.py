"""The default along one search path, cut at several budgets (no LLM call).

Issue 56 asks whether the default's gain keeps growing with the search budget. A bank pair's
columns hold the strategies its stored e2e search evaluated; another compile of the pair (the
default as it is now, continued to budget 40: ``benchmarks/budget_prereg.json``) takes its own
path, and ``benchmarks/bank.py extend --own-path`` plans the columns that path needs beyond
the pair's. Once they are recorded, this joins the two (:func:`judgeopt_lab.join_pairs`),
orders the columns by the new path (:func:`judgeopt_lab.along_path`), and replays one rule
at fixed constants (default: the shipped guarded stack) on the path cut after each budget
(:func:`judgeopt_lab.first_k`: the baseline and the path's first strategies, as a search that
stopped there would have judged them), on the same seeded splits for every cut. Each cut's
mean test gain over the baseline, the share of splits worse than the baseline, and its
paired difference from the reference cut (20, the default budget) split by split.

The candidates are the default's (``candidates = "rate_first"`` in ``optimizers/auto.toml``,
the registration's "rate-first cut"): within each budget's cut, the baseline and the path's
strategies that rate before they explain (:func:`judgeopt_lab.rate_first_k`). Such a replay
reads no explanation-first column, so ``bank.py record --columns rate_first --path-cut K``
makes a cut whole for it (``--candidates all``: every strategy of the cut).

A cut of a path is what a compile at that budget judges only if the search would have taken
the same first steps; with ``auto``'s constants chosen per budget (``BUDGET_DEFAULTS``) a
search started at another budget may not (the same caveat as ``bank_cost.py``'s budgets).

    python benchmarks/bank_budget.py --path-plan benchmarks/bank_plan_sfhot_path40.json

Writes ``benchmarks/results/bank_budget.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from judgeopt.selection import RULES
from judgeopt_lab import (
    CANDIDATE_SETS,
    BankPair,
    along_path,
    bank_splits,
    first_k,
    join_pairs,
    load_bank,
    markdown_table,
    provenance,
    rate_first_k,
    replay_rule,
    write_json,
)

ROOT = Path(__file__).resolve().parent
PLAN = ROOT / "bank_plan.json"
BANK_DIR = ROOT / "runs" / "bank"
DEFAULT_OUT = ROOT / "results" / "bank_budget.json"
#: The shipped default (optimizers/auto.toml, benchmarks/default_prereg.json).
DEFAULT_RULE = ("stack+guard", {"m": 5, "ridge": 10.0, "margin": 0.1, "nonneg": True})


def path_bank(path_plan: Path, plan: Path = PLAN, directory: Path = BANK_DIR) -> BankPair:
    """The base pair's columns and those of the path plan (the file: the bank files name
    its sha256), in the order of the plan's path."""
    made = json.loads(Path(path_plan).read_text(encoding="utf-8"))
    name = str(made["extends"]["pair"])
    ext_name = str(made["pairs"][0]["name"])
    base = load_bank(plan, directory, pairs=[name], twins=True)[name]
    ext = load_bank(path_plan, directory, twins=True)[ext_name]
    return along_path(join_pairs(base, ext), made["pairs"][0]["path"])


def budget_replay(
    pair: BankPair,
    cuts: Sequence[int],
    rule: str,
    setting: Mapping[str, Any],
    *,
    n_valid: int = 100,
    n_splits: int = 200,
    seed: int = 0,
    reference: int = 20,
    candidates: str = "all",
) -> dict[str, Any]:
    """``rule`` at ``setting`` on ``pair`` cut after each of ``cuts`` strategies, every cut on
    the same splits; a cut whose columns are not all judged on the pool is reported as such.
    ``candidates``: ``"all"``, every column of the cut, or ``"rate_first"``, the baseline and
    the cut's strategies that rate before they explain (what a compile with ``candidates =
    "rate_first"`` chooses among after a search of that budget).

    Raises:
        ValueError: On an unknown rule or candidate set.
    """
    spec = RULES.get(rule)
    if spec is None:
        raise ValueError(f"unknown rule {rule!r}; allowed: {sorted(RULES)}")
    if candidates not in CANDIDATE_SETS:
        raise ValueError(f"candidates: {candidates!r}; allowed: {list(CANDIDATE_SETS)}")
    fn = spec.bind(setting)
    splits = bank_splits(pair, n_valid, n_splits, seed)
    rows: dict[str, dict[str, Any]] = {}
    gains: dict[int, np.ndarray] = {}
    for k in cuts:
        cut, _ = first_k(pair, k)
        row: dict[str, Any] = {"strategies": len(cut.columns)}
        if candidates == "rate_first":
            cut, _ = rate_first_k(cut)
            row["candidates"] = len(cut.columns)
        row["complete"] = cut.complete
        if not cut.complete:
            rows[str(k)] = row | {"missing": cut.missing}
            continue
        r = replay_rule(cut, fn, splits)
        gains[k] = r.gains
        rows[str(k)] = row | {
            "mean_gain": float(np.mean(r.gains)),
            "split_se": _se(r.gains),
            "worse_share": float(np.mean(r.gains < -1e-12)),
            "baseline_share": float(np.mean(r.kept_baseline)),
            "members": float(np.mean([len(p) for p in r.picks])),
        }
    if reference in gains:
        for k, g in gains.items():
            diff = g - gains[reference]
            rows[str(k)]["minus_reference"] = float(np.mean(diff))
            rows[str(k)]["minus_reference_se"] = _se(diff)
    return {
        "pair": pair.name,
        "rule": rule,
        "setting": dict(setting),
        "n_valid": n_valid,
        "n_splits": n_splits,
        "seed": seed,
        "reference": reference,
        "candidates": candidates,
        "cuts": rows,
    }


def _se(values: np.ndarray) -> float | None:
    return float(np.std(values, ddof=1) / math.sqrt(values.size)) if values.size > 1 else None


def table(result: Mapping[str, Any]) -> str:
    """The replay as a markdown table, one row per cut."""
    rows = []
    for k, row in result["cuts"].items():
        size = str(row["strategies"])
        if "candidates" in row:
            size += f" ({row['candidates']} candidates)"
        if not row["complete"]:
            rows.append([k, size, f"{row['missing']} judgements missing", "", "", ""])
            continue
        diff = row.get("minus_reference")
        rows.append(
            [
                k,
                size,
                f"{row['mean_gain']:+.3f} ({row['split_se']:.3f})",
                f"{100 * row['worse_share']:.1f} %",
                f"{100 * row['baseline_share']:.1f} %",
                "" if diff is None else f"{diff:+.3f} ({row['minus_reference_se']:.3f})",
            ]
        )
    header = [
        "budget",
        "strategies",
        "mean gain (split s.e.)",
        "worse",
        "baseline kept",
        "minus ref",
    ]
    return markdown_table(header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--path-plan", required=True, help="bank.py extend --own-path's plan")
    p.add_argument("--cuts", default="10,15,20,30,40")
    p.add_argument("--rule", default=DEFAULT_RULE[0])
    p.add_argument("--setting", default=json.dumps(DEFAULT_RULE[1]), help="JSON")
    p.add_argument("--n-valid", type=int, default=100)
    p.add_argument("--splits", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--candidates",
        choices=CANDIDATE_SETS,
        default="rate_first",
        help="the strategies of each cut the rule chooses among (default: the default "
        "compile's, rate_first)",
    )
    p.add_argument("--out", default=str(DEFAULT_OUT))
    args = p.parse_args(argv)
    pair = path_bank(Path(args.path_plan))
    cuts = [int(x) for x in args.cuts.split(",") if x]
    result = budget_replay(
        pair,
        cuts,
        args.rule,
        json.loads(args.setting),
        n_valid=args.n_valid,
        n_splits=args.splits,
        seed=args.seed,
        candidates=args.candidates,
    )
    print(table(result))
    write_json(Path(args.out), result | {"provenance": provenance()})
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
