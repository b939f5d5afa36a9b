"""The guard on its lower bound: the pre-registered stack's guard reading the cross-fitted
gain's one-sided lower bound (or its mean over several halvings) instead of its one
halving's point, replayed on the judgement bank and read on the fresh pairs' compile tables
(no LLM call).

The pre-registered candidate (``stack+guard``: the non-negative stack of the baseline and the
5 best others, ridge 10) ships its stack when the stack's cross-fitted gain over the baseline
(chosen on each half of the labelled items, scored on the other) is above 0.1. A gain of
+0.2 on 50 items per half and one on 500 are the same point and very different evidence.
``stack+bound`` (:func:`judgeopt.selection.crossfit_bound`) asks the gain's one-sided
``1 - alpha`` lower bound (a paired bootstrap over each half's items, 500 resamples) to clear
``margin`` instead: a margin that grows with the noise of the items. ``stack+repeat`` keeps
the point but averages it over five halvings of the items (the first the candidate's, the
others blocked random splits, :func:`judgeopt.selection.blocked_split`): one halving's point
moves by a few hundredths with the items that fall on each side.

Three readings, written to ``benchmarks/results/bank_bound.json``:

* ``bank``: the candidate and every setting of ``stack+bound``'s and ``stack+repeat``'s
  grids at fixed constants on every pair whose rate-first cut is complete (the splits of
  ``bank_fixed.py``: 200 per pair and size, seed 0): mean gain, worst pair's worse share,
  prompts per item, and each setting's gain minus the candidate's, pair by pair (mean and
  standard error over the pairs).
* ``left_out``: the guard's constants chosen leave-one-pair-out among those settings by the
  default's criterion (the best mean gain among the settings worse than the baseline in at
  most 10 % of the splits on every other pair), scored on the pair left out.
* ``fresh``: each fresh pair compiled by ``benchmarks/e2e.py`` (``--runs``, default the
  pre-registered compiles of ``benchmarks/runs/e2e_prereg``) has its compile's validation
  table rebuilt from its checkpoint (the compile's own cross-fitted gain is recomputed as a
  check) and every setting's guard read on it: would it ship the stack, and what the
  shipped stack scored on the test items when it did (the compile's own test judgements).
  These pairs were scored before this rule was written: a reading after the fact, not a
  test.

Beside each share of splits worse than the baseline, the share *significantly* worse
(``--significance``, 95 %: the shipped judge's paired test interval below zero,
:func:`judgeopt_lab.significantly_worse`): a truly better judge still loses on a small test
set often, and only the second share counts losses the test items can tell from that.

Beside the guard settings, each fresh pair has ``frugal``: the candidate with
``stack+guard+frugal``'s single-judge fallback at each of its tolerances (what it ships, its
prompts per item, its test gain where the compile's test judgements hold it). ``--fresh-only``
rereads the fresh compiles into an existing output, keeping its bank replay.

Usage:
    python benchmarks/bank_bound.py [--n-valid 50,100,200] [--splits 200] [--fresh-only]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from judgeopt.data import load_records
from judgeopt.demo import E2E_SPLIT, PER_GROUP
from judgeopt.selection import RULES, RuleInput, crossfit_bound, crossfit_gain, stack_rule
from judgeopt_lab import (
    MAX_WORSE_SHARE,
    add_replay_arguments,
    candidate_pairs,
    load_bank,
    markdown_table,
    n_valids_of,
    paired_difference,
    provenance,
    replay_fixed,
    safest_best,
    write_json,
)

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "results" / "bank_bound.json"

#: The pre-registered candidate (benchmarks/default_prereg.json).
CANDIDATE: tuple[str, dict[str, Any]] = (
    "stack+guard",
    {"m": 5, "ridge": 10.0, "margin": 0.1, "nonneg": True},
)


def settings() -> list[tuple[str, str, dict[str, Any]]]:
    """``(label, rule, setting)``: the candidate, then ``stack+bound``'s and
    ``stack+repeat``'s grids."""
    rule, setting = CANDIDATE
    out = [(f"candidate (margin {setting['margin']:g} on the point)", rule, dict(setting))]
    for s in RULES["stack+bound"].settings():
        out.append((f"bound {1 - s['alpha']:.0%}, margin {s['margin']:g}", "stack+bound", s))
    for s in RULES["stack+repeat"].settings():
        label = f"point over {s['repeats']} halvings, margin {s['margin']:g}"
        out.append((label, "stack+repeat", s))
    return out


def compare(
    entries: Mapping[str, Mapping[str, Any]], reference: str
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per label and size: the replay's summary and its gain minus ``reference``'s, pair by
    pair (:func:`judgeopt_lab.paired_difference`; ``diff``: mean over the pairs, ``diff_se``:
    its standard error over them)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for label, entry in entries.items():
        out[label] = {}
        for n, row in entry["n_valid"].items():
            diff = paired_difference(entries[reference], entry, int(n))
            worst = max(row["per_pair"].items(), key=lambda kv: kv[1]["worse_share"])
            out[label][n] = {
                "mean_gain": row["mean_gain"],
                "se": row["se"],
                "mean_relative_gain": row["mean_relative_gain"],
                "max_pair_worse_share": row["max_pair_worse_share"],
                "worst_pair": worst[0],
                "mean_members": row["mean_members"],
                **(
                    {"max_pair_sig_worse_share": row["max_pair_sig_worse_share"]}
                    if "max_pair_sig_worse_share" in row
                    else {}
                ),
                "diff": diff["mean"],
                "diff_se": diff["se"],
                "per_pair": {
                    p: {
                        k: v[k]
                        for k in ("mean_gain", "worse_share", "sig_worse_share", "baseline_share")
                        if k in v
                    }
                    for p, v in row["per_pair"].items()
                },
            }
    return out


def left_out(rows: Mapping[str, Mapping[str, Any]], n: str) -> dict[str, Any]:
    """For each pair, the setting chosen on the others by the default's criterion
    (:func:`judgeopt_lab.safest_best`: the best mean gain among the settings worse in at most
    :data:`judgeopt_lab.MAX_WORSE_SHARE` of the splits on every other pair, else the one
    with the smallest such worst share; the first setting on a tie), scored on it."""
    labels = list(rows)
    pairs = sorted(rows[labels[0]][n]["per_pair"])
    per_pair: dict[str, Any] = {}
    for p in pairs:
        others = [q for q in pairs if q != p]
        on_others = {}
        for k, label in enumerate(labels):
            pp = rows[label][n]["per_pair"]
            on_others[k] = {
                "mean_gain": float(np.mean([pp[q]["mean_gain"] for q in others])),
                "max_pair_worse_share": max(pp[q]["worse_share"] for q in others),
            }
        chosen = labels[safest_best(on_others, MAX_WORSE_SHARE, lambda k: -k)]
        per_pair[p] = {"chosen": chosen, **rows[chosen][n]["per_pair"][p]}
    gains = np.array([v["mean_gain"] for v in per_pair.values()])
    sig = [v.get("sig_worse_share") for v in per_pair.values()]
    return {
        "mean_gain": float(gains.mean()),
        "se": float(gains.std(ddof=1) / math.sqrt(gains.size)) if gains.size > 1 else None,
        "max_pair_worse_share": max(v["worse_share"] for v in per_pair.values()),
        **({} if None in sig else {"max_pair_sig_worse_share": max(sig)}),
        "per_pair": per_pair,
    }


def _lines(path: Path) -> list[str]:
    return [x for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def _split_asked(result: Mapping[str, Any]) -> dict[str, int]:
    """The ``--n-valid``, ``--n-test`` and ``--seed`` the compile's ``e2e.py`` command asked
    for (its split is of whole groups, so the result's own counts can be larger), each
    defaulting to the demo's split (:data:`judgeopt.demo.E2E_SPLIT`)."""
    command = list((result.get("provenance") or {}).get("command") or [])
    out = {k: int(E2E_SPLIT[k]) for k in ("n_valid", "n_test", "seed")}
    for flag, key in (("--n-valid", "n_valid"), ("--n-test", "n_test"), ("--seed", "seed")):
        if flag in command[:-1]:
            out[key] = int(command[command.index(flag) + 1])
    return out


def compile_table(run: Path) -> tuple[RuleInput, dict[str, Any], list[dict[str, Any]]]:
    """A fresh pair's compile validation table, rebuilt from its run directory: the baseline
    and every strategy its search judged on all the validation items, in the order they
    were evaluated, the items in the order of ``e2e.py``'s split (the order the compile's
    halves are drawn from), group ids at group level; the compile's ``result.json``; and
    the table's strategies, one per row."""
    sys.path.insert(0, str(ROOT))
    import e2e  # noqa: PLC0415 - the benchmark's own split, only for this reading
    from judgeopt.teleprompt import ItemStore  # noqa: PLC0415 - here: it imports DSPy

    result = json.loads((run / "result.json").read_text(encoding="utf-8"))
    evals = [json.loads(x) for x in _lines(run / "ckpt" / "evaluations.jsonl")]
    store = ItemStore(run / "ckpt" / "items.jsonl")
    task = result["task"]
    records = load_records(e2e.DATA / task / "full.jsonl")
    asked = _split_asked(result)
    valid, _ = e2e.split_groups(
        records, asked["n_valid"], asked["n_test"], asked["seed"], per_group=PER_GROUP.get(task)
    )
    if len(valid) != int(result["n_valid"]):
        raise ValueError(
            f"{run}: the split of {asked} gives {len(valid)} validation items, the compile "
            f"had {result['n_valid']}"
        )
    ordered = [e["strategy"] for e in sorted(evals, key=lambda e: e["number"])]
    rows = [(s, store.items(s)) for s in ordered]
    rows = [(s, items) for s, items in rows if all(r.id in items for r in valid)]
    strategies = [s for s, _ in rows]
    judged = [items for _, items in rows]
    human = np.array([judged[0][r.id].human for r in valid], dtype=float)
    preds = np.array(
        [[math.nan if it[r.id].score is None else it[r.id].score for r in valid] for it in judged],
        dtype=float,
    )
    groups = [r.group_id or r.id for r in valid] if result["level"] == "group" else None
    data = RuleInput(human=human, preds=preds, baseline=0, groups=groups, seed=0)
    return data, result, strategies


def frugal_reading(
    data: RuleInput, result: Mapping[str, Any], strategies: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """``stack+guard+frugal`` (the candidate, or the single best judge by validation score
    when its cross-fitted gain is above the margin and within ``tolerance`` of the stack's)
    at each tolerance of its grid, read on a compile's validation table: what it ships
    (``stack``, ``single`` or ``baseline``), its prompts per item (members with a weight),
    and its test gain where the compile's own test judgements hold it (the stack the
    compile shipped, or the single judge when it is the compile's chosen one; else
    ``None``)."""
    spec = RULES["stack+guard+frugal"]
    out: dict[str, Any] = {}
    for setting in spec.settings():
        pick = spec.bind(setting)(data)
        members = [int(m) for m in pick.members]
        if len(members) > 1:
            ships = "stack"
        else:
            ships = "baseline" if members == [data.baseline] else "single"
        if ships == "baseline":
            test: float | None = 0.0
        elif ships == "stack":
            test = result.get("shipped_gain") if result.get("shipped") == "ensemble" else None
        else:
            same = dict(strategies[members[0]]) == dict(result.get("chosen_strategy") or {})
            test = result.get("gain") if same else None
        weights = list(pick.weights) or [1.0] * len(members)
        out[str(setting["tolerance"])] = {
            "ships": ships,
            "prompts": sum(1 for w in weights if w != 0.0),  # a zero weight is never asked
            "test_gain": test,
            "reason": pick.reason,
        }
    return out


def _stack(setting: Mapping[str, Any]) -> Callable[[RuleInput], Any]:
    """The stack a setting guards (its ``m``, ``ridge`` and ``nonneg``)."""
    return lambda d: stack_rule(
        d, ridge=float(setting["ridge"]), m=int(setting["m"]), nonneg=bool(setting["nonneg"])
    )


def fresh(runs: Path, labels: Sequence[tuple[str, str, dict[str, Any]]]) -> dict[str, Any]:
    """Each compiled fresh pair: the guard of every setting read on its validation table."""
    out: dict[str, Any] = {}
    for run in sorted(p for p in runs.iterdir() if (p / "result.json").is_file()):
        data, result, strategies = compile_table(run)
        guard = (result.get("selection") or {}).get("guard") or {}
        point = crossfit_gain(data, _stack(CANDIDATE[1]))
        shipped_stack = result.get("shipped") == "ensemble"
        row: dict[str, Any] = {
            "items": int(data.human.size),
            "columns": int(data.preds.shape[0]),
            "crossfit_gain": point,
            "compile_crossfit_gain": guard.get("crossfit_gain"),
            "compile_shipped": result.get("shipped"),
            "stack_test_gain": result.get("shipped_gain") if shipped_stack else None,
            "stack_test_gain_ci": result.get("shipped_gain_ci") if shipped_stack else None,
            "settings": {},
        }
        bounds: dict[Any, float] = {}  # by alpha (or repeats) and stack: margins share it
        for label, _, s in labels:
            alpha, repeats = s.get("alpha"), int(s.get("repeats", 1))
            if alpha is None and repeats == 1:
                value = point
            elif alpha is None:
                key = ("repeats", repeats, s["m"], s["ridge"], s["nonneg"])
                if key not in bounds:
                    bounds[key] = crossfit_gain(data, _stack(s), repeats=repeats)
                value = bounds[key]
            else:
                key = (alpha, s["m"], s["ridge"], s["nonneg"])
                if key not in bounds:
                    bounds[key] = crossfit_bound(
                        data, _stack(s), alpha=float(alpha), n_resamples=500
                    )
                value = bounds[key]
            ships = bool(value > s["margin"])
            test = (row["stack_test_gain"] if shipped_stack else None) if ships else 0.0
            row["settings"][label] = {"guard_value": value, "ships": ships, "test_gain": test}
        row["frugal"] = frugal_reading(data, result, strategies)
        out[run.name] = row
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_replay_arguments(ap, OUT)
    ap.add_argument("--runs", default=str(ROOT / "runs" / "e2e_prereg"), help="fresh compiles")
    ap.add_argument(
        "--significance",
        type=float,
        default=0.95,
        help="two-sided level of the paired test interval that counts a split's shipped "
        "judge as significantly worse than the baseline (default 0.95)",
    )
    ap.add_argument(
        "--fresh-only",
        action="store_true",
        help="read the fresh compiles again into the existing --out file, keeping its bank "
        "replay (seconds instead of minutes: for a fresh pair compiled after the replay)",
    )
    args = ap.parse_args(argv)
    if args.fresh_only:
        return _fresh_only(Path(args.out), Path(args.runs))
    if args.splits < 2:
        ap.error(f"--splits {args.splits}: at least 2 (a standard error needs two)")
    if not 0.0 < args.significance < 1.0:
        ap.error(f"--significance {args.significance}: a two-sided level in (0, 1)")
    n_valids = n_valids_of(args.n_valid)
    bank, _ = candidate_pairs(
        load_bank(ROOT / "bank_plan.json", ROOT / "runs" / "bank", pairs=None), "rate_first"
    )
    labels = settings()
    entries = {
        label: replay_fixed(
            bank,
            rule,
            s,
            n_valids=n_valids,
            n_splits=args.splits,
            seed=args.seed,
            significance=args.significance,
        )
        for label, rule, s in labels
    }
    rows = compare(entries, labels[0][0])
    payload: dict[str, Any] = {
        "candidates": "rate_first",
        "pairs": sorted(bank),
        "splits": args.splits,
        "seed": args.seed,
        "significance": args.significance,
        "settings": {label: {"rule": r, "setting": s} for label, r, s in labels},
        "bank": rows,
        "left_out": {str(n): left_out(rows, str(n)) for n in n_valids},
    }
    runs = Path(args.runs)
    payload["fresh"] = fresh(runs, labels) if runs.is_dir() else {}
    payload["provenance"] = provenance()
    write_json(args.out, payload, provenance_key=None)
    for n in map(str, n_valids):
        print(f"\n{n} labelled items, {len(bank)} pairs, rate-first cut, {args.splits} splits")
        print(
            markdown_table(
                [
                    "guard",
                    "mean gain (se)",
                    "minus the candidate (se)",
                    "worst pair",
                    "significantly worse, worst pair",
                    "prompts",
                ],
                [
                    [
                        label,
                        f"{r[n]['mean_gain']:+.3f} ({r[n]['se']:.3f})",
                        f"{r[n]['diff']:+.3f} ({r[n]['diff_se']:.3f})",
                        f"{100 * r[n]['max_pair_worse_share']:.1f} % ({r[n]['worst_pair']})",
                        f"{100 * r[n]['max_pair_sig_worse_share']:.1f} %",
                        f"{r[n]['mean_members']:.2f}",
                    ]
                    for label, r in rows.items()
                ],
            )
        )
        lo = payload["left_out"][n]
        print(
            f"left out: mean gain {lo['mean_gain']:+.3f} ({lo['se']:.3f}), worst pair "
            f"{100 * lo['max_pair_worse_share']:.1f} % (significantly worse "
            f"{100 * lo['max_pair_sig_worse_share']:.1f} %); chosen: "
            + ", ".join(f"{p}: {v['chosen']}" for p, v in lo["per_pair"].items())
        )
    _print_fresh(payload["fresh"])
    print(f"wrote {args.out}")
    return 0


def _print_fresh(rows: Mapping[str, Any]) -> None:
    for name, row in rows.items():
        print(
            f"\n{name}: cross-fitted {row['crossfit_gain']:+.3f} (compile "
            f"{row['compile_crossfit_gain']}), shipped {row['compile_shipped']}, stack's "
            f"test gain {row['stack_test_gain']}"
        )
        for label, v in row["settings"].items():
            print(f"  {label}: {v['guard_value']:+.3f} -> ships {v['ships']}")
        for tol, v in row["frugal"].items():
            gain = "not judged" if v["test_gain"] is None else f"{v['test_gain']:+.3f}"
            print(
                f"  frugal, tolerance {tol}: ships the {v['ships']} ({v['prompts']} prompts), "
                f"test gain {gain}"
            )


def _fresh_only(out: Path, runs: Path) -> int:
    """``--fresh-only``: the fresh readings of ``runs`` rewritten into ``out``, whose bank
    replay (and its settings) is kept as it is."""
    if not out.is_file():
        raise SystemExit(f"--fresh-only: {out} does not exist; run the full replay first")
    if not runs.is_dir():
        raise SystemExit(f"--fresh-only: --runs {runs} is not a directory")
    payload = json.loads(out.read_text(encoding="utf-8"))
    labels = [(label, v["rule"], v["setting"]) for label, v in payload["settings"].items()]
    payload["fresh"] = fresh(runs, labels)
    payload["provenance"] = provenance()
    write_json(out, payload, provenance_key=None)
    _print_fresh(payload["fresh"])
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
