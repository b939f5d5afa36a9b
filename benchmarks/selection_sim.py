"""The winner's curse in numbers: how often does a selection rule return a worse judge?

Simulates compiles (``judgeopt.selection.simulate_selection``): ``--budget`` strategies whose
true quality is the baseline's plus a drawn gain, judged on ``--n-valid`` items with errors
correlated across strategies (one model, several prompts) and ratings cut to a 10-point
scale. For each scenario (the distribution of the candidates' true gains) and rule, prints
the share of compiles that return a judge truly worse than the baseline, the share that
return the baseline, and the mean true and claimed gains (Spearman scale), and writes JSON.

The scenarios and the rules' settings are synthetic: nothing here was tuned on real data,
and the defaults of ``SelectionConfig`` were chosen from this table.

``--levels 3 --mode-share 0.7`` simulates coarse judges like the embedded 1.5B, which gives its
most frequent rating to most items (docs/judge.md).

Usage:
    python benchmarks/selection_sim.py [--runs 200] [--n-valid 100] [--budget 20]
        [--levels 10] [--mode-share SHARE] [--json benchmarks/results/selection_sim.json]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from judgeopt.selection import SelectionConfig, simulate_selection
from judgeopt_lab import write_json

SCENARIOS = {
    "all worse (-0.10)": {"gain_mean": -0.10, "gain_sd": 1e-4},
    "mostly worse (-0.05 +- 0.06)": {"gain_mean": -0.05, "gain_sd": 0.06},
    "mixed (0 +- 0.08)": {"gain_mean": 0.0, "gain_sd": 0.08},
    "mostly better (+0.05 +- 0.05)": {"gain_mean": 0.05, "gain_sd": 0.05},
}
RULES = {
    "best (paper)": SelectionConfig(rule="best"),
    "confirm c=0.5": SelectionConfig(rule="confirm", confidence=0.5),
    "confirm c=0.7": SelectionConfig(rule="confirm", confidence=0.7),
    "confirm c=0.8": SelectionConfig(rule="confirm"),
    "confirm c=0.9": SelectionConfig(rule="confirm", confidence=0.9),
    "confirm c=0.8, 1 finalist": SelectionConfig(rule="confirm", finalists=1),
    "confirm c=0.8, 2 finalists": SelectionConfig(rule="confirm", finalists=2),
    "confirm c=0.8, 5 finalists": SelectionConfig(rule="confirm", finalists=5),
    "confirm c=0.8, 30 % held out": SelectionConfig(rule="confirm", confirm_fraction=0.3),
    "veto c=0.8": SelectionConfig(rule="veto"),
    "veto c=0.6": SelectionConfig(rule="veto", confidence=0.6),
    "veto c=0.9": SelectionConfig(rule="veto", confidence=0.9),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--n-valid", type=int, default=100)
    p.add_argument("--budget", type=int, default=20)
    p.add_argument("--baseline-rho", type=float, default=0.3)
    p.add_argument(
        "--levels",
        type=int,
        default=10,
        help="rating values of every simulated judge (default %(default)s)",
    )
    p.add_argument(
        "--mode-share",
        type=float,
        default=None,
        help="share of each judge's ratings on its central value, the others "
        "splitting the rest (default: all values equally likely)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    # The settings of the committed default run (10 equally likely values) are written as
    # before, so its JSON only changes when its numbers do.
    settings = {
        k: v
        for k, v in vars(args).items()
        if not (k == "levels" and v == 10 or k == "mode_share" and v is None)
    }
    out: dict[str, object] = {"settings": settings, "scenarios": {}}
    lines = [
        "| scenario | rule | P(worse) | P(baseline) | true gain (+- s.e.) | claimed gain |",
        "|---|---|---|---|---|---|",
    ]
    for i, (name, sc) in enumerate(SCENARIOS.items()):
        t0 = time.perf_counter()
        res = simulate_selection(
            n_valid=args.n_valid,
            budget=args.budget,
            baseline_rho=args.baseline_rho,
            configs=RULES,
            levels=args.levels,
            mode_share=args.mode_share,
            n_runs=args.runs,
            seed=args.seed + i,
            **sc,
        )
        out["scenarios"][name] = {"params": sc, "rules": res}  # type: ignore[index]
        for rule, r in res.items():
            lines.append(
                f"| {name} | {rule} | {r['p_worse']:.3f} | {r['p_baseline']:.3f} | "
                f"{r['mean_true_gain']:+.4f} +- {r['se_true_gain']:.4f} | "
                f"{r['mean_claimed_gain']:+.4f} |"
            )
        print(f"{name}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    print("\n".join(lines))
    if args.json:
        path = Path(args.json)
        write_json(path, out)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
