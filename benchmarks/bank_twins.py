"""Every call's whole signal on the judgement bank: the rules with and without the twin columns.

A strategy that rates before it explains gives two ratings from one call: the greedy one (its
answer's rating) and the expected one (the rating token's distribution). A compile that judged
the greedy strategy holds its expected twin for free, and the other way round. This replays
the selection rules on the bank (``benchmarks/bank_rules.py``'s splits and scoring, no LLM
call) twice: with the planned columns only, and with every rating-first column's twin added
(``load_bank(twins=True)``; the twins of imported greedy judgements come from
``benchmarks/bank.py twins``). Each rule at fixed constants, the splits the same in both
(same seed), so per pair the two replays are paired.

Prints one table per size and writes ``benchmarks/results/bank_twins.json``::

    {"twins": {PAIR: {"added", "missing", "rejudged", "same_greedy"}},
     "rules": {LABEL: {"without": {"n_valid": {N: ...}}, "with": {...}}}}

Usage:
    python benchmarks/bank_twins.py [--splits 200] [--n-valid 50,100,200]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from judgeopt_lab import (
    add_replay_arguments,
    bank_lines,
    load_bank,
    markdown_table,
    n_valids_of,
    paired_difference,
    replay_fixed,
    write_json,
)

ROOT = Path(__file__).resolve().parent
PLAN = ROOT / "bank_plan.json"
BANK = ROOT / "runs" / "bank"
OUT = ROOT / "results" / "bank_twins.json"

#: The rules compared: the shipped default, and the conservative guarded ensemble the
#: bank's grid held (read after seeing the five pairs: a hypothesis, not a result), and
#: the paper's rule.
RULES = {
    "lcb (alpha 0.05, shipped)": ("lcb", {"alpha": 0.05}),
    "ensemble of 5 + guard (margin 0.1)": ("ensemble+guard", {"m": 5, "margin": 0.1}),
    "best": ("best", {}),
}


def twin_report(plan: dict[str, Any], with_twins: dict[str, Any]) -> dict[str, Any]:
    """Per pair: twin columns added, rating-first columns still without one, and the
    re-judged items' greedy ratings against the imported ones."""
    out = {}
    for p in plan["pairs"]:
        if p["name"] not in with_twins:
            continue
        rows = [
            ln
            for ln in bank_lines(BANK, f"{p['name']}.twins")
            if ln.get("kind") == "twin" and ln.get("error") is None
        ]
        compared = [ln for ln in rows if ln.get("stored_greedy") is not None]
        bp = with_twins[p["name"]]
        out[p["name"]] = {
            "added": sum(any(r.startswith("twin of") for r in c.roles) for c in bp.columns),
            "missing": bp.twins_missing,
            "rejudged": len(rows),
            "same_greedy": sum(ln["stored_greedy"] == ln.get("greedy") for ln in compared),
            "compared": len(compared),
        }
    return out


def table(payload: dict[str, Any], n: int) -> str:
    rows = []
    for label, both in payload["rules"].items():
        for arm in ("without", "with"):
            v = both[arm]["n_valid"][str(n)]
            rows.append(
                [
                    label,
                    arm,
                    f"{v['mean_gain']:+.3f}",
                    "-" if v["se"] is None else f"{v['se']:.3f}",
                    f"{100 * v['mean_relative_gain']:+.1f} %",
                    f"{100 * v['worse_share']:.1f} %",
                    f"{100 * v['max_pair_worse_share']:.1f} %",
                    " ".join(f"{pp['mean_gain']:+.3f}" for _, pp in sorted(v["per_pair"].items())),
                ]
            )
    return f"n_valid = {n}\n" + markdown_table(
        [
            "rule",
            "twins",
            "mean gain",
            "se (pairs)",
            "mean relative gain",
            "worse",
            "worst pair",
            "per pair (alphabetical)",
        ],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_replay_arguments(ap, OUT)
    args = ap.parse_args(argv)
    n_valids = n_valids_of(args.n_valid)
    plan = json.loads(PLAN.read_text(encoding="utf-8"))
    without = load_bank(PLAN, BANK, complete_only=True)
    with_twins = load_bank(PLAN, BANK, complete_only=True, twins=True)
    twins = twin_report(plan, with_twins)
    payload: dict[str, Any] = {
        "settings": {"splits": args.splits, "n_valids": n_valids, "seed": args.seed},
        "twins": twins,
        "rules": {},
    }
    for label, (rule, setting) in RULES.items():
        payload["rules"][label] = {
            "rule": rule,
            "setting": setting,
            **{
                arm: replay_fixed(
                    bank, rule, setting, n_valids=n_valids, n_splits=args.splits, seed=args.seed
                )
                for arm, bank in (("without", without), ("with", with_twins))
            },
        }
        both = payload["rules"][label]
        both["difference"] = {
            str(n): paired_difference(both["without"], both["with"], n) for n in n_valids
        }
    print(json.dumps(twins, indent=1), file=sys.stderr)
    for n in n_valids:
        print(table(payload, n))
        print()
    write_json(args.out, payload)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
