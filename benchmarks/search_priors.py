"""Search with priors, leave-one-model-out on PrExMe's recorded surfaces (no LLM calls).

For every held-out model, each of its 3 surfaces (tasks) is searched with
:class:`~judgeopt.search.FactorPriors` estimated from the *other two models'* surfaces:

* ``+priors``: from all 6 of their surfaces (median aggregation, the library default);
* ``+priors[task]``: from their 2 surfaces of the same task only;
* ``+priors[mean]``: all 6, mean aggregation.

Methods without priors (``hpss``, ``auto``, and ``tpe`` unless ``--no-tpe``) run on the same
surfaces and seeds for reference (TPE dominates the run time at large budgets; its numbers on
the same seeds are also in ``search_prexme.json``). Prints, per budget, the mean normalised
regret ± s.e. and p_top1, the paired difference of each ``+priors`` method to its plain
counterpart, and a per-surface table; writes everything to JSON.

Usage:
    python benchmarks/search_priors.py [--budgets 20,35,50,71,120] [--seeds 20]
        [--objective kendall] [--no-tpe] [--out benchmarks/results/search_priors.json]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np

from judgeopt.bench import leave_one_out_priors, load_surfaces, run_search_benchmark
from judgeopt_lab import shared_data_dir, write_json

ROOT = Path(__file__).resolve().parents[1]
DEV = shared_data_dir() / "prexme_surface" / "dev.csv"
BASELINE = {"base_prompt": "PZS", "task_description": "Neutral", "format_requirement": "0 to 100"}
FACTORS = ["base_prompt", "task_description", "format_requirement"]
# label suffix -> arguments of leave_one_out_priors
PRIOR_SETS: dict[str, dict[str, Any]] = {
    "": {"aggregation": "median"},
    "[task]": {"aggregation": "median", "match": ["task"]},
    "[mean]": {"aggregation": "mean"},
}


def _sem(x: list[float]) -> float:
    return float(np.std(x, ddof=1) / np.sqrt(len(x)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--surface", default=str(DEV))
    ap.add_argument("--budgets", default="20,35,50,71,120")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--objective", default="kendall")
    ap.add_argument("--no-tpe", action="store_true", help="leave out the TPE reference")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "search_priors.json"))
    args = ap.parse_args()

    surfaces = load_surfaces(
        args.surface, group=["model", "task"], factors=FACTORS, objective=args.objective
    )
    names = [s.name for s in surfaces]
    priors = {
        suffix: leave_one_out_priors(surfaces, "model", **kw) for suffix, kw in PRIOR_SETS.items()
    }
    plain = ["hpss", "auto"] + ([] if args.no_tpe else ["tpe"])
    results = []
    for budget in [int(b) for b in args.budgets.split(",")]:
        t0 = time.perf_counter()
        # method label -> {surface: [norm_regret per seed]}, and p_top1 runs
        regret: dict[str, dict[str, list[float]]] = {}
        top1: dict[str, dict[str, list[bool]]] = {}

        res = run_search_benchmark(
            surfaces, plain, budget=budget, seeds=args.seeds, baseline=BASELINE
        )
        runs = [(r.method, r.method, r) for r in res.runs]
        for suffix, pr in priors.items():
            res = run_search_benchmark(
                surfaces,
                ["hpss+priors", "auto+priors"],
                budget=budget,
                seeds=args.seeds,
                baseline=BASELINE,
                priors=pr,
            )
            runs += [(r.method + suffix, r.method, r) for r in res.runs]
        for label, _, r in sorted(runs, key=lambda x: (x[2].surface, x[2].seed)):
            regret.setdefault(label, {n: [] for n in names})[r.surface].append(r.norm_regret)
            top1.setdefault(label, {n: [] for n in names})[r.surface].append(r.top1)
        seconds = time.perf_counter() - t0
        summary: dict[str, Any] = {}
        for label in regret:
            allr = [x for n in names for x in regret[label][n]]
            allt = [x for n in names for x in top1[label][n]]
            base = label.split("+")[0]
            entry: dict[str, Any] = {
                "norm_regret": float(np.mean(allr)),
                "sem_norm_regret": _sem(allr),
                "p_top1": float(np.mean(allt)),
                "per_surface": {
                    n: {
                        "norm_regret": float(np.mean(regret[label][n])),
                        "p_top1": float(np.mean(top1[label][n])),
                    }
                    for n in names
                },
            }
            if "+priors" in label:
                # Paired by (surface, seed): the same seed drives both searches' first draws.
                diff = [
                    a - b
                    for n in names
                    for a, b in zip(regret[label][n], regret[base][n], strict=True)
                ]
                entry["diff_vs_" + base] = float(np.mean(diff))
                entry["sem_diff_vs_" + base] = _sem(diff)
                entry["surfaces_better"] = sum(
                    bool(np.mean(regret[label][n]) < np.mean(regret[base][n]) - 1e-12)
                    for n in names
                )
                entry["surfaces_worse"] = sum(
                    bool(np.mean(regret[label][n]) > np.mean(regret[base][n]) + 1e-12)
                    for n in names
                )
            summary[label] = entry
        results.append(
            {
                "budget": budget,
                "seeds": args.seeds,
                "surfaces": names,
                "seconds": seconds,
                "methods": summary,
            }
        )

        print(
            f"budget {budget}, {args.seeds} seeds x {len(names)} surfaces "
            f"({seconds:.1f} s); priors leave-one-model-out"
        )
        head = (
            f"{'method':<22}{'norm_regret':>12}{'± s.e.':>8}{'p_top1':>8}"
            f"{'vs plain (paired)':>22}{'surf +/-':>10}"
        )
        print(head)
        print("-" * len(head))
        for label, e in summary.items():
            line = (
                f"{label:<22}{e['norm_regret']:>12.3f}{e['sem_norm_regret']:>8.3f}"
                f"{e['p_top1']:>8.3f}"
            )
            base = label.split("+")[0]
            if "+priors" in label:
                line += (
                    f"{e['diff_vs_' + base]:>+14.3f} ± {e['sem_diff_vs_' + base]:.3f}"
                    f"{e['surfaces_better']:>6}/{e['surfaces_worse']}"
                )
            print(line)
        print()
        width = max(len(lb) for lb in summary) + 2
        print(f"{'norm_regret per surface':<30}" + "".join(f"{lb:>{width}}" for lb in summary))
        for n in names:
            print(
                f"{n:<30}"
                + "".join(
                    f"{summary[lb]['per_surface'][n]['norm_regret']:>{width}.3f}" for lb in summary
                )
            )
        print()
        # Written after every budget, so a long run keeps what it has finished.
        out = Path(args.out)
        write_json(
            out,
            {
                "objective": args.objective,
                "baseline": BASELINE,
                "priors": {("+priors" + k): v for k, v in PRIOR_SETS.items()},
                "hold_out": "model",
                "results": results,
            },
            indent=1,
        )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
