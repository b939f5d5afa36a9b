"""Replay the compile's decision rules on the judgement bank (no LLM call).

For every complete pair of the bank (``benchmarks/bank.py``), every rule of
:data:`judgeopt_lab.RULES` and every validation size, ``--splits`` random splits of the
pool (whole groups) into validation and test: the rule decides on validation, its pick is
scored on test against the MT-Bench baseline. Each rule's constants and the prior default are
chosen leave-one-pair-out. Prints one table per size and writes
``benchmarks/results/bank_rules.json``::

    {"rules": {RULE: {"n_valid": {N: {"mean_gain", "se", "mean_relative_gain",
     "worse_share", "per_pair": {PAIR: {"mean_gain", "worse_share", ...}}}}}},
     "default": RULE, "lopo_default": {"n_valid": {N: {...}}}, ...}

``default`` is the rule chosen on every pair (what the compile ships; ``preset`` holds it as
the optimizer-preset settings, :func:`judgeopt_lab.selection_settings`, and the script
prints them as preset TOML, ``preset_error`` says why when the compile cannot run it);
``shipped`` replays that rule at the preset's
constants (chosen at 100 labelled items) at every size, in-sample; ``lopo_default``
scores that choice left out (for each pair the rule and its constants chosen on the other
pairs only), the number the targets are checked on; ``lopo_default_stricter`` the same choice
with a stricter safety bound on the other pairs (5 % and 2.5 % of the splits).

``--e2e-preview`` replays the same rules on the judgements ``benchmarks/e2e.py`` already
stored for its test items instead (per pair the 3-5 strategies judged on all its test
items: the baseline, the chosen judge, the ensemble's members), written to
``benchmarks/results/history/bank_rules_e2e_preview.json``. That is a check of the machinery on
real judgements, not the bank: the candidates are few and were themselves chosen by a
search on other items of the same pair.

``--partial`` replays a bank still being recorded: each pair restricted to its groups judged
by every column (:meth:`judgeopt_lab.BankPair.judged_groups`; the recorder fills a pair
group by group), pairs with at least ``--min-items`` such items, written to
``benchmarks/results/history/bank_rules_partial.json``. An interim look on fewer items and pairs
than the plan, not the bank's answer: no default is taken from it.

``--candidates rate_first`` replays every pair whose rate-first cut is complete
(:func:`judgeopt_lab.candidate_pairs`: the baseline and the search path's strategies that
rate before they explain, as a compile with ``candidates = "rate_first"`` judges them),
written to ``benchmarks/results/bank_rules_rate_first.json`` (the same schema).

Usage:
    python benchmarks/bank_rules.py [--splits 200] [--n-valid 40,50,100,200]
    python benchmarks/bank_rules.py --candidates rate_first [--n-valid 50,100,200]
    python benchmarks/bank_rules.py --partial [--min-items 150] [--n-valid 50,100]
    python benchmarks/bank_rules.py --e2e-preview [--n-valid 50,100]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from judgeopt.data import load_records, split_holdout
from judgeopt.demo import E2E_SPLIT, PER_GROUP
from judgeopt_lab import (
    CANDIDATE_SETS,
    BankColumn,
    BankPair,
    candidate_pairs,
    choose_default,
    load_bank,
    markdown_table,
    preset_toml,
    replay_bank,
    replay_fixed,
    selection_settings,
    shared_data_dir,
    stored_result,
    strategy_key,
    write_json,
)

ROOT = Path(__file__).resolve().parent
E2E_DIR = ROOT / "runs" / "e2e_runs"


def e2e_preview_bank() -> dict[str, BankPair]:
    """A small bank from the stored e2e test judgements: per pair, every strategy whose
    test items are all stored (greedy or expected rating as the strategy decodes)."""
    data = shared_data_dir()
    out: dict[str, BankPair] = {}
    for pair_dir in sorted(p for p in E2E_DIR.iterdir() if (p / "result.json").is_file()):
        row = json.loads((pair_dir / "result.json").read_text(encoding="utf-8"))
        records = load_records(data / row["task"] / "full.jsonl")
        _, test = split_holdout(
            records,
            row["n_valid"],
            row["n_test"],
            seed=E2E_SPLIT["seed"],
            per_group=PER_GROUP.get(row["task"]),
        )
        strategies: dict[str, dict[str, Any]] = {}
        base = row.get("baseline_strategy")
        for s in [base, row.get("chosen_strategy"), *(row.get("ensemble_members") or [])]:
            if s:
                strategies[strategy_key(s)] = s
        for f in (row.get("selection") or {}).get("finalists") or []:
            strategies[strategy_key(f["strategy"])] = f["strategy"]
        columns = []
        for key, s in strategies.items():
            res = stored_result(pair_dir / f"test_{key}.jsonl", test, row["level"])
            if res is None:
                continue
            by_id = {i.id: i for i in res.items}
            preds = np.array(
                [np.nan if by_id[r.id].score is None else float(by_id[r.id].score) for r in test]
            )
            roles = ("baseline",) if s == base else ("stored e2e test",)
            columns.append(BankColumn(f"C{len(columns) + 1:02d}", s, roles, preds))
        if not any("baseline" in c.roles for c in columns) or len(columns) < 3:
            continue
        columns.sort(key=lambda c: "baseline" not in c.roles)
        aspect = row["aspect"]
        out[pair_dir.name] = BankPair(
            name=pair_dir.name,
            task=row["task"],
            aspect=aspect,
            level=row["level"],
            ids=tuple(r.id for r in test),
            human=np.array([float(r.scores[aspect]) for r in test]),
            groups=np.array([r.group_id or r.id for r in test], dtype=object),
            columns=tuple(columns),
        )
    return out


def shipped_label(payload: dict[str, Any]) -> str:
    """The ``shipped`` row's name in both printed tables: the rule at the preset's setting."""
    return f"(shipped: {payload['shipped']['rule']} at {payload['shipped']['setting']})"


def tables(payload: dict[str, Any]) -> str:
    out = []
    lopo = payload.get("lopo_default", {}).get("n_valid", {})
    for n in payload["settings"]["n_valids"]:
        rows = []
        named = [(name, r["n_valid"][str(n)]) for name, r in payload["rules"].items()]
        if str(n) in lopo:
            named.append(("(default chosen left out)", lopo[str(n)]))
        shipped = payload.get("shipped", {}).get("n_valid", {})
        if str(n) in shipped:
            named.append((shipped_label(payload), shipped[str(n)]))
        ceiling = payload.get("ceiling", {}).get("n_valid", {})
        if str(n) in ceiling:
            named.append(("(ceiling: pool-best judge, not a rule)", ceiling[str(n)]))
        for name, v in named:
            rows.append(
                [
                    name,
                    f"{v['mean_gain']:+.3f}",
                    "-" if v["se"] is None else f"{v['se']:.3f}",
                    f"{100 * v['mean_relative_gain']:+.1f} %",
                    "-"
                    if v.get("relative_mean_gain") is None
                    else f"{100 * v['relative_mean_gain']:+.1f} %",
                    f"{100 * v['worse_share']:.1f} %",
                    f"{100 * v['max_pair_worse_share']:.1f} %",
                ]
            )
        out.append(f"n_valid = {n}")
        out.append(
            markdown_table(
                [
                    "rule",
                    "mean gain",
                    "se (pairs)",
                    "mean relative gain",
                    "mean gain / mean baseline",
                    "worse",
                    "worst pair",
                ],
                rows,
            )
        )
    return "\n\n".join(out)


def labels_table(payload: dict[str, Any], rules: Sequence[str]) -> str:
    """docs/judge.md's "How many labels you need": for each rule in ``rules`` and each
    ``n_valid``, the mean test gain over the baseline (standard error across pairs), the
    share of splits worse than the baseline (the worst pair's), and how often the baseline
    was kept (mean over pairs)."""
    rows = []
    for name in rules:
        if name == "(default chosen left out)":
            by_n = payload.get("lopo_default", {}).get("n_valid", {})
        elif name.startswith("(shipped"):
            by_n = payload.get("shipped", {}).get("n_valid", {})
        else:
            by_n = payload["rules"].get(name, {}).get("n_valid", {})
        for n in payload["settings"]["n_valids"]:
            v = by_n.get(str(n))
            if v is None:
                continue
            kept = np.mean([pp["baseline_share"] for pp in v["per_pair"].values()])
            rows.append(
                [
                    name,
                    str(n),
                    f"{v['mean_gain']:+.3f}" + ("" if v["se"] is None else f" ({v['se']:.3f})"),
                    f"{100 * v['mean_relative_gain']:+.1f} %",
                    f"{100 * v['worse_share']:.1f} % ({100 * v['max_pair_worse_share']:.1f} %)",
                    f"{100 * kept:.0f} %",
                ]
            )
    return markdown_table(
        [
            "rule",
            "labelled items",
            "mean test gain (se over pairs)",
            "mean relative gain",
            "splits worse than the baseline (worst pair)",
            "baseline kept",
        ],
        rows,
    )


def plan_model() -> str:
    """The model string of the bank's judge (what the compile records, and what a preset's
    per-model priors are keyed by)."""
    plan = json.loads((ROOT / "bank_plan.json").read_text(encoding="utf-8"))
    return str(plan["model"])


def _significance_line(row: Mapping[str, Any], ceiling: Mapping[str, Any]) -> str:
    """The left-out default's share of splits significantly worse than the baseline on its
    worst pair, beside the ceiling's (what test noise alone gives there)."""
    sig = {p: v.get("sig_worse_share") for p, v in row["per_pair"].items()}
    if not sig or None in sig.values():
        return "significantly worse: not counted"
    worst = max(sig, key=lambda p: sig[p] or 0.0)
    ceil = ceiling["per_pair"][worst].get("sig_worse_share")
    tail = "" if ceil is None else f" (the ceiling there {100 * ceil:.1f} %)"
    return f"significantly worse: worst pair {100 * (sig[worst] or 0.0):.1f} % ({worst}){tail}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--splits", type=int, default=200)
    p.add_argument(
        "--n-valid", default=None, help="comma-separated sizes (40,50,100,200; 40: the demo's)"
    )
    p.add_argument("--e2e-preview", action="store_true")
    p.add_argument("--partial", action="store_true", help="the judged groups of every pair")
    p.add_argument("--min-items", type=int, default=150, help="--partial: smallest pool")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--candidates",
        choices=CANDIDATE_SETS,
        default="all",
        help="all: every column of each complete pair; rate_first: each pair whose "
        "rate-first cut is complete, cut to it (results/bank_rules_rate_first.json)",
    )
    p.add_argument(
        "--significance",
        type=float,
        default=0.95,
        help="two-sided level of the paired test interval that counts a split's shipped "
        "judge as significantly worse than the baseline, for the ceiling and the left-out "
        "defaults (default 0.95)",
    )
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if not 0.0 < args.significance < 1.0:
        p.error(f"--significance {args.significance}: a two-sided level in (0, 1)")
    if args.candidates != "all" and (args.partial or args.e2e_preview):
        p.error(
            "--candidates rate_first replays complete cuts; not with --partial or --e2e-preview"
        )
    if args.e2e_preview:
        bank = e2e_preview_bank()
        sizes = [50, 100]
        path = Path(args.json or ROOT / "results" / "history" / "bank_rules_e2e_preview.json")
    elif args.partial:
        full = load_bank(ROOT / "bank_plan.json", ROOT / "runs" / "bank")
        parts = {name: b.judged_groups() for name, b in full.items()}
        for name, b in parts.items():
            print(f"  {name}: {len(b.ids)} of {len(full[name].ids)} items judged by every column")
        bank = {name: b for name, b in parts.items() if len(b.ids) >= args.min_items}
        sizes = [50, 100]
        path = Path(args.json or ROOT / "results" / "history" / "bank_rules_partial.json")
    elif args.candidates == "rate_first":
        full = load_bank(ROOT / "bank_plan.json", ROOT / "runs" / "bank")
        bank, _ = candidate_pairs(full, "rate_first")
        sizes = [50, 100, 200]
        path = Path(args.json or ROOT / "results" / "bank_rules_rate_first.json")
    else:
        bank = load_bank(ROOT / "bank_plan.json", ROOT / "runs" / "bank", complete_only=True)
        # 40: about the demo's 41 labelled items (its README paragraph quotes this row)
        sizes = [40, 50, 100, 200]
        path = Path(args.json or ROOT / "results" / "bank_rules.json")
    if args.n_valid:
        sizes = [int(s) for s in args.n_valid.split(",")]
    if len(bank) < 2:
        what = f"with at least {args.min_items} judged items" if args.partial else "complete"
        print(f"the bank has {len(bank)} pair(s) {what}; a replay needs at least 2")
        return 2
    t0 = time.perf_counter()
    payload = replay_bank(
        bank,
        n_valids=sizes,
        n_splits=args.splits,
        seed=args.seed,
        progress=lambda s: print(f"  {s}", file=sys.stderr),
        significance=args.significance,
    )
    at = 100 if 100 in sizes else sizes[0]
    payload["default"] = choose_default(payload, n_valid=at)
    if args.partial or args.e2e_preview:
        payload["interim"] = (
            "not the bank's answer: fewer items or strategies than the plan; "
            "the rule named `default` here sets no default"
        )
    payload["seconds"] = round(time.perf_counter() - t0, 1)
    payload["candidates"] = args.candidates
    payload["pairs"] = {
        name: {"n_pool": len(b.ids), "columns": len(b.columns), "level": b.level}
        for name, b in bank.items()
    }
    settings = None
    try:  # what a preset sets to ship the default (benchmarks/results: "preset")
        settings = selection_settings(payload, model=plan_model(), n_valid=at)
        payload["preset"] = settings
    except ValueError as e:
        payload["preset_error"] = str(e)
    if settings is not None and not (args.partial or args.e2e_preview):
        # What the preset ships at every size: the default at the constants chosen at `at`
        # (its own row above re-chooses them per size). In-sample: chosen on these pairs.
        shipped_setting = payload["rules"][payload["default"]]["n_valid"][str(at)]["setting"]
        payload["shipped"] = replay_fixed(
            bank,
            payload["default"],
            shipped_setting,
            n_valids=sizes,
            n_splits=args.splits,
            seed=args.seed,
        )
    write_json(path, payload)
    print(tables(payload))
    print(
        f"\ndefault (best mean gain, every pair worse in <= 10 % of splits): "
        f"{payload['default']}; {payload['seconds']} s; wrote {path}"
    )
    for n, v in payload.get("lopo_default", {}).get("n_valid", {}).items():
        picks = ", ".join(f"{p}: {r['rule']}" for p, r in v["per_pair"].items())
        print(f"n_valid={n}, the default chosen on the other pairs: {picks}")
        print(f"  {_significance_line(v, payload['ceiling']['n_valid'][n])}")
    for bound, entry in payload.get("lopo_default_stricter", {}).items():
        for n, v in entry["n_valid"].items():
            worst = max(v["per_pair"].items(), key=lambda kv: kv[1]["worse_share"])
            print(
                f"n_valid={n}, chosen safe at <= {float(bound):.1%} on the others: mean gain "
                f"{v['mean_gain']:+.3f} ({100 * v['mean_relative_gain']:+.1f} %), worst pair "
                f"{100 * worst[1]['worse_share']:.1f} % ({worst[0]}); "
                + _significance_line(v, payload["ceiling"]["n_valid"][n])
            )
    if settings is not None:
        what = "interim, not to ship" if "interim" in payload else "to ship"
        print(f"\nThe default as optimizer-preset settings ({what}):\n")
        print(preset_toml(settings))
    else:
        print(f"\nno preset: {payload['preset_error']}")
    shown = ["baseline", "confirm", payload["default"]]
    if "shipped" in payload:
        shown.append(shipped_label(payload))
    if "lopo_default" in payload:
        shown.append("(default chosen left out)")
    print("\nHow many labels you need (docs/judge.md):\n")
    print(labels_table(payload, list(dict.fromkeys(shown))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
