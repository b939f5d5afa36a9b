"""Do the rating distributions add signal? Guarded stacks on the judgement bank, with and without.

A judge that rates before it explains reads its rating off a distribution over the scale's
values (``probs`` in the bank's records). Its expected rating is that distribution's mean; the
glass-box seed's point is that the rest of it (how spread, how sure) carries quality signal
too. This replays, on the bank's complete pairs with the twin columns (``load_bank(twins=True)``,
no LLM call), three guarded ridge stacks of the same judges on the same splits:

* ``ratings``: the baseline and the ``m`` best other columns by validation score (the
  registry's ``stack+guard``);
* ``+ spread``: the same, plus the standard deviation of each rating-first member's rating
  distribution (one more weight per such member);
* ``+ entropy``: the same, plus the distribution's entropy (normalised to [0, 1]).

Every arm is kept only when its cross-fitted gain over the baseline is above the margin
(:func:`judgeopt.selection.guarded`), as the bank's other combining rules are. The feature
columns are computed from the same calls (no new call): from the bank's judgements where they
recorded the distribution, else from the twin lines (``benchmarks/bank.py twins``). A column
without the distribution on every pool item gets no feature. Per pair the arms are paired
(same splits, same seed); the difference of each feature arm from ``ratings`` is reported
as a mean over pairs with its standard error over pairs.

Prints a table per size and writes ``benchmarks/results/bank_distributions.json``::

    {"settings", "features": {PAIR: {"columns", "with_distribution"}},
     "arms": {ARM: {"n_valid": {N: {...replay_fixed fields...}}}},
     "difference": {ARM: {N: {"mean", "se", "per_pair"}}}}

Usage:
    python benchmarks/bank_distributions.py [--splits 200] [--n-valid 50,100,200]
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from judgeopt.selection import Pick, RuleInput, RuleSpec, guarded, stack_rule
from judgeopt_lab import (
    BankColumn,
    BankPair,
    add_replay_arguments,
    bank_base,
    bank_lines,
    load_bank,
    markdown_table,
    n_valids_of,
    paired_difference,
    rates_first,
    replay_fixed,
    strategy_json,
    write_json,
)

ROOT = Path(__file__).resolve().parent
PLAN = ROOT / "bank_plan.json"
BANK = ROOT / "runs" / "bank"
OUT = ROOT / "results" / "bank_distributions.json"

#: The distribution features, by arm: name -> function of a probability vector over the
#: scale's values (ascending) and those values.
FEATURES: dict[str, Callable[[np.ndarray, np.ndarray], float]] = {
    "spread": lambda p, v: float(np.sqrt(max(0.0, p @ v**2 - (p @ v) ** 2))),
    "entropy": lambda p, v: float(
        -(p[p > 0] * np.log(p[p > 0])).sum() / math.log(len(p)) if len(p) > 1 else 0.0
    ),
}
#: The stacks' constants (fixed, not chosen on the bank): the registry's stack+guard at the
#: few-parameter setting, and the margin of the guarded ensemble the bank's grid held.
M, RIDGE, MARGIN = 5, 10.0, 0.05


def distributions(pair: str) -> dict[tuple[str, str], dict[str, float]]:
    """``(strategy without decoding, item id) -> probs`` for every judgement of ``pair``
    that recorded its rating's distribution (the bank's own lines, then its twin lines)."""
    out: dict[tuple[str, str], dict[str, float]] = {}
    for name in (pair, f"{pair}.twins"):
        for line in bank_lines(BANK, name):
            probs = line.get("probs")
            if line.get("kind") not in ("judgement", "twin") or not probs:
                continue
            if line.get("error") is not None:
                continue
            out.setdefault((strategy_json(bank_base(line["strategy"])), str(line["id"])), probs)
    return out


def with_features(pair: BankPair) -> tuple[BankPair, int]:
    """``pair`` with one feature column per (rating-first column, feature) whose
    distribution the bank holds on every pool item (a column's greedy and expected twins
    share one), and how many columns got them."""
    probs = distributions(pair.name)
    extra: list[BankColumn] = []
    done: set[str] = set()
    for c in pair.columns:
        plain = bank_base(c.strategy)
        key = strategy_json(plain)
        if not rates_first(plain) or key in done:
            continue
        rows = [probs.get((key, i)) for i in pair.ids]
        if any(r is None for r in rows):
            continue
        done.add(key)
        for feature, fn in FEATURES.items():
            values = []
            for r in rows:
                assert r is not None
                scale = np.array(sorted(float(k) for k in r))
                p = np.array([float(r[k]) for k in sorted(r, key=float)])
                p = p / p.sum() if p.sum() > 0 else p
                values.append(fn(p, scale))
            extra.append(
                BankColumn(
                    f"{c.key}:{feature}",
                    {"feature": feature, "of": key},
                    (f"{feature} of {c.key}",),
                    predictions=np.array(values),
                )
            )
    return replace(pair, columns=pair.columns + tuple(extra)), len(done)


def _judges(data: RuleInput) -> list[int]:
    return [i for i, s in enumerate(data.strategies or []) if "feature" not in s]


def _restricted(data: RuleInput, rows: Sequence[int]) -> RuleInput:
    return RuleInput(
        human=data.human,
        preds=data.preds[list(rows)],
        baseline=list(rows).index(data.baseline),
        groups=data.groups,
        split_groups=data.split_groups,
        strategies=[(data.strategies or [])[i] for i in rows] if data.strategies else None,
        seed=data.seed,
    )


def _stack(data: RuleInput, *, feature: str | None) -> Pick:
    """The ridge stack of the baseline and the ``M`` best other judges (feature columns are
    not judges), with ``feature``'s column of each rating-first member."""
    judges = _judges(data)
    scores = data.scores
    ranked = sorted((i for i in judges if i != data.baseline), key=lambda i: -scores[i])
    rows = [data.baseline, *ranked[:M]]
    if feature is not None:
        of = {strategy_json(bank_base((data.strategies or [])[i])) for i in rows}
        rows += [
            i
            for i, s in enumerate(data.strategies or [])
            if s.get("feature") == feature and s.get("of") in of
        ]
    sub = _restricted(data, rows)
    pick = stack_rule(sub, ridge=RIDGE)
    return replace(pick, members=tuple(rows[i] for i in pick.members))


def arms() -> dict[str, RuleSpec]:
    """The three guarded stacks as rules (each guard's cross-fitted gain computed once per
    input under its own name)."""

    def arm(feature: str | None) -> RuleSpec:
        def fn(data: RuleInput) -> Pick:
            rule = guarded(
                lambda d: _stack(d, feature=feature), margin=MARGIN, key=f"dist-{feature}"
            )
            return rule(data)

        return RuleSpec(fn, description=f"guarded stack, feature {feature}")

    return {"ratings": arm(None), **{f"+ {f}": arm(f) for f in FEATURES}}


def table(payload: Mapping[str, Any], n: int) -> str:
    rows = []
    for label, v in payload["arms"].items():
        x = v["n_valid"][str(n)]
        d = payload["difference"].get(label, {}).get(str(n))
        rows.append(
            [
                label,
                f"{x['mean_gain']:+.3f}",
                "-" if x["se"] is None else f"{x['se']:.3f}",
                f"{100 * x['worse_share']:.1f} %",
                f"{100 * x['max_pair_worse_share']:.1f} %",
                "-" if d is None else f"{d['mean']:+.3f} ({d['se']:.3f})",
                " ".join(f"{pp['mean_gain']:+.3f}" for _, pp in sorted(x["per_pair"].items())),
            ]
        )
    return f"n_valid = {n}\n" + markdown_table(
        [
            "stack",
            "mean gain",
            "se (pairs)",
            "worse",
            "worst pair",
            "minus ratings (se)",
            "per pair (alphabetical)",
        ],
        rows,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_replay_arguments(ap, OUT)
    args = ap.parse_args(argv)
    n_valids = n_valids_of(args.n_valid)
    bank, features = {}, {}
    for name, pair in load_bank(PLAN, BANK, complete_only=True, twins=True).items():
        bank[name], covered = with_features(pair)
        n_rf = len(
            {strategy_json(bank_base(c.strategy)) for c in pair.columns if rates_first(c.strategy)}
        )
        features[name] = {"rating_first_strategies": n_rf, "with_distribution": covered}
    print(features, file=sys.stderr)
    rules = arms()
    payload: dict[str, Any] = {
        "settings": {
            "splits": args.splits,
            "n_valids": n_valids,
            "seed": args.seed,
            "m": M,
            "ridge": RIDGE,
            "margin": MARGIN,
        },
        "features": features,
        "arms": {},
        "difference": {},
    }
    for label in rules:
        payload["arms"][label] = replay_fixed(
            bank, label, {}, rules=rules, n_valids=n_valids, n_splits=args.splits, seed=args.seed
        )
        print(f"  {label} replayed", file=sys.stderr)
    for label in rules:
        if label == "ratings":
            continue
        payload["difference"][label] = {
            str(n): paired_difference(payload["arms"]["ratings"], payload["arms"][label], n)
            for n in n_valids
        }
    for n in n_valids:
        print(table(payload, n))
        print()
    write_json(args.out, payload)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
