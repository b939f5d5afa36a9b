"""``judgeopt bench-search``: searches benchmarked on recorded objective surfaces."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..bench import (
    METHODS,
    PRIOR_METHODS,
    leave_one_out_priors,
    load_surfaces,
    run_search_benchmark,
)
from ._common import CLIError, Subparsers, csv_list, json_object, positive_int


def _cmd_bench_search(args: argparse.Namespace) -> int:
    try:
        surfaces = load_surfaces(
            args.surface, group=args.group, factors=args.factors, objective=args.objective
        )
        priors = None
        if args.priors_from:
            priors = leave_one_out_priors(
                surfaces,
                args.priors_from,
                match=args.priors_match,
                aggregation=args.priors_aggregation,
            )
        elif any(m.endswith("+priors") for m in args.methods):
            raise ValueError(
                "The `+priors` methods need --priors-from (a group column to hold out, e.g. model)."
            )
        result = run_search_benchmark(
            surfaces,
            args.methods,
            budget=args.budget,
            seeds=args.seeds,
            baseline=args.baseline,
            priors=priors,
            progress=not args.no_progress,
        )
    except ValueError as e:
        raise CLIError(str(e)) from e
    print(result.table())
    if args.per_surface:
        print()
        print(result.surface_table("norm_regret"))
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
        print(f"wrote {out}")
    return 0


def add_parser(sub: Subparsers) -> None:
    """Add ``judgeopt bench-search``."""
    b = sub.add_parser(
        "bench-search",
        help="benchmark searches on recorded objective surfaces (no LLM calls)",
        description=(
            "Run searches against complete recorded surfaces (every strategy with its "
            "objective) and report how close each gets to the optimum: normalised regret "
            "(max - found) / (max - median), the share of runs that find a top-1% strategy, "
            "found / max and the evaluations spent."
        ),
    )
    b.add_argument("--surface", required=True, help="CSV with one row per (group, strategy)")
    b.add_argument(
        "--group",
        type=csv_list,
        default=[],
        help="columns that identify one surface, e.g. model,task",
    )
    b.add_argument(
        "--factors",
        type=csv_list,
        required=True,
        help="columns holding the factor values, e.g. base_prompt,task_description",
    )
    b.add_argument("--objective", required=True, help="objective column (higher is better)")
    b.add_argument(
        "--baseline",
        type=json_object,
        default=None,
        help="starting strategy as JSON (inline or a file); default: first values",
    )
    b.add_argument(
        "--methods",
        type=csv_list,
        default=["auto", "hpss", "random", "greedy"],
        help=f"comma-separated, from: {', '.join([*METHODS, *PRIOR_METHODS])}",
    )
    b.add_argument(
        "--budget", type=positive_int, default=71, help="unique evaluations per run (default 71)"
    )
    b.add_argument(
        "--seeds",
        type=positive_int,
        default=20,
        help="seeds 0..N-1 per method and surface (default 20)",
    )
    b.add_argument(
        "--priors-from",
        metavar="COLUMN",
        default=None,
        help="for the +priors methods: estimate each surface's priors from the "
        "surfaces with another value in this group column (e.g. model: "
        "leave-one-model-out)",
    )
    b.add_argument(
        "--priors-match",
        metavar="COLUMNS",
        type=csv_list,
        default=[],
        help="with --priors-from: only from surfaces that share these group columns (e.g. task)",
    )
    b.add_argument(
        "--priors-aggregation",
        choices=["median", "mean"],
        default="median",
        help="how a value's scores are aggregated in each source (default median)",
    )
    b.add_argument("--json", help="write the results as JSON to this file")
    b.add_argument(
        "--per-surface",
        action="store_true",
        help="also print the normalised regret of each surface",
    )
    b.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    b.set_defaults(func=_cmd_bench_search)
