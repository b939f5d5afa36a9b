"""One selection rule at fixed constants, replayed on the judgement bank (no LLM call).

``benchmarks/bank_rules.py`` chooses each rule's constants leave-one-pair-out, which shows what
a rule gives when its constants are learnt from the other pairs. A candidate default is a
rule *and* its constants: this replays a rule of :data:`judgeopt.selection.RULES` at one
setting on every complete pair and size (the same splits as ``bank_rules.py``: 200 per pair
and size, seed 0), so a candidate can be written down with its numbers before it is tested
on pairs nobody has scored. Numbers read here are in-sample for the constants: chosen after
seeing these pairs, they are a hypothesis, not a result.

Writes (merging) ``benchmarks/results/bank_fixed.json``::

    {LABEL: {"rule", "setting", "settings", "provenance", "n_valid": {N: {"mean_gain", "se",
             "mean_relative_gain", "worse_share", "max_pair_worse_share", "mean_members",
             "per_pair": {...}}}}}

(``mean_members``: the prompts the shipped judge combines, its calls per judged item, mean
over the splits of each pair, then over the pairs.)

with ``LABEL`` = ``rule setting-as-json``, followed by `` [rate_first]`` for
``--candidates rate_first`` (each pair cut to the baseline and its search path's strategies
that rate before they explain, :func:`judgeopt_lab.rate_first_k`, as a compile with
``candidates = "rate_first"`` would judge them) and by `` on PAIR,PAIR`` for ``--pairs``
(a replay on named pairs only, such as the held-out pairs of a pre-registration, a rule's
prior still learnt from every other complete pair; a named pair whose bank is not complete is
refused, with what is left to record). A pair is complete for the candidate set: with
``--candidates rate_first``, when its cut's columns are judged on the whole pool (the replay
reads no other column, so it gives what it will give once the pair is complete).

Usage:
    python benchmarks/bank_fixed.py stack+guard \
        '{"m": 0, "ridge": 10.0, "margin": 0.1, "nonneg": true}'
    python benchmarks/bank_fixed.py lcb '{"alpha": 0.05}' --candidates rate_first \
        --pairs summeval_relevance,hanna_coherence --n-valid 100
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from judgeopt.selection import RULES
from judgeopt_lab import (
    CANDIDATE_SETS,
    add_replay_arguments,
    bank_lines,
    candidate_pairs,
    cost_matrix,
    fixed_label,
    judgement_costs,
    load_bank,
    markdown_table,
    n_valids_of,
    provenance,
    replay_fixed,
    stopped_costs,
    write_json,
)

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "results" / "bank_fixed.json"


#: The candidate sets a replay can cut each pair to.
CANDIDATES = CANDIDATE_SETS

#: The JSON key of a rule at a setting (on a candidate set, on named pairs).
label = fixed_label


def column_seconds(bank: dict[str, Any]) -> dict[str, np.ndarray]:
    """Each pair's columns' mean seconds per judgement as the bank recorded them (a chunk's
    wall time shared by latency, :func:`judgeopt_lab.judgement_costs`), the calls that rate
    before they explain costed as stopped at the score (:func:`judgeopt_lab.stopped_costs`,
    by the pair's rating-only calls), as a compile judges them."""
    out = {}
    for name, pair in bank.items():
        held, _ = judgement_costs(bank_lines(ROOT / "runs" / "bank", name))
        stopped, _ = stopped_costs(pair, cost_matrix(pair, held), estimate="none")
        out[name] = np.nanmean(stopped, axis=1)
    return out


def table(entry: dict[str, Any]) -> str:
    rows = []
    for n, v in entry["n_valid"].items():
        worst = max(v["per_pair"].items(), key=lambda kv: kv[1]["worse_share"])
        rows.append(
            [
                n,
                f"{v['mean_gain']:+.3f} ({'-' if v['se'] is None else format(v['se'], '.3f')})",
                f"{100 * v['mean_relative_gain']:+.1f} %",
                f"{100 * v['worse_share']:.1f} %",
                f"{100 * v['max_pair_worse_share']:.1f} % ({worst[0]})",
                "-" if v.get("mean_members") is None else f"{v['mean_members']:.2f}",
                "-" if v.get("mean_seconds") is None else f"{v['mean_seconds']:.1f}",
            ]
        )
    return markdown_table(
        [
            "labelled items",
            "mean gain (se over pairs)",
            "mean relative gain",
            "worse",
            "worst pair",
            "prompts per item",
            "seconds per item",
        ],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rule", help=f"one of {sorted(RULES)}")
    ap.add_argument("setting", nargs="?", default="{}", help="its constants, as JSON")
    ap.add_argument(
        "--candidates",
        choices=CANDIDATES,
        default="all",
        help="all: every column of each pair's search path and plan; rate_first: the "
        "baseline and the path's strategies that rate before they explain",
    )
    ap.add_argument(
        "--pairs",
        default="",
        help="comma-separated bank pairs (default: every complete pair); each must be complete",
    )
    ap.add_argument(
        "--seconds",
        action="store_true",
        help="also report the shipped judge's seconds per judged item: its members' mean "
        "seconds per judgement in the bank's recording, rate-first calls stopped at the "
        "score (bank_cost.py's accounting)",
    )
    add_replay_arguments(ap, OUT)
    args = ap.parse_args(argv)
    if args.rule not in RULES:
        ap.error(f"rule {args.rule!r} is not a registered rule; choose from {sorted(RULES)}")
    try:
        setting = json.loads(args.setting)
    except ValueError as e:
        ap.error(f"setting {args.setting!r} is not JSON: {e}")
    if not isinstance(setting, dict):
        ap.error(f"setting {args.setting!r} must be a JSON object of the rule's constants")
    grid = RULES[args.rule].grid
    unknown = sorted(set(setting) - set(grid))
    if unknown:
        ap.error(f"setting: {unknown} are not constants of {args.rule} (it has {sorted(grid)})")
    missing = sorted(set(grid) - set(setting))
    if missing:
        ap.error(f"setting: {args.rule} needs {missing} too")
    n_valids = n_valids_of(args.n_valid)
    named = sorted({p.strip() for p in args.pairs.split(",") if p.strip()}) or None
    try:
        bank = load_bank(ROOT / "bank_plan.json", ROOT / "runs" / "bank", pairs=None)
        unknown = [p for p in named or () if p not in bank]
        if unknown:
            load_bank(ROOT / "bank_plan.json", ROOT / "runs" / "bank", pairs=unknown)
    except ValueError as e:
        ap.error(f"--pairs {args.pairs!r}: {e}")
    usable, rows = candidate_pairs(bank, args.candidates)
    not_there = sorted(p for p in named or () if p not in usable)
    if not_there:
        left = (
            "`record --columns rate_first` completes the rate-first cut"
            if args.candidates == "rate_first"
            else "`record` completes them"
        )
        ap.error(
            f"--pairs {args.pairs!r}: not complete in the bank: {not_there} "
            f"(`python benchmarks/bank.py status` says what is left; {left})"
        )
    # Every complete pair stays in: a rule with a prior learns it from the pairs not scored.
    seconds = None
    if args.seconds:
        whole = column_seconds({p: bank[p] for p in usable})
        seconds = {p: whole[p][rows[p]] for p in usable}
    bank = usable
    entry = replay_fixed(
        bank,
        args.rule,
        setting,
        n_valids=n_valids,
        n_splits=args.splits,
        seed=args.seed,
        scored=named,
        column_seconds=seconds,
    )
    scored = named or sorted(bank)
    entry["settings"] = {
        "splits": args.splits,
        "seed": args.seed,
        "pairs": scored,
        "candidates": args.candidates,
        "columns": {p: len(bank[p].columns) for p in scored},
    }
    entry["provenance"] = provenance()
    out = Path(args.out)
    payload = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else {}
    key = label(args.rule, setting, args.candidates, named)
    payload[key] = entry
    write_json(out, payload, provenance_key=None)
    print(key)
    print(table(entry))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
