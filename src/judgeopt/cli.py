"""The ``judgeopt`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__

log = logging.getLogger("judgeopt")


class CLIError(Exception):
    """A user error reported as ``judgeopt: error: ...`` with exit status 2."""


def _csv_list(text: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list, got an empty one")
    return items


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _json_object(text: str) -> dict[str, object]:
    """A JSON object given inline or as a path to a JSON file."""
    path = Path(text)
    raw = path.read_text(encoding="utf-8") if path.is_file() else text
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not a JSON object or JSON file: {e}") from None
    if not isinstance(data, dict):
        raise argparse.ArgumentTypeError("expected a JSON object such as '{\"factor\": \"value\"}'")
    return data


def _cmd_bench_search(args: argparse.Namespace) -> int:
    from .bench import load_surfaces, run_search_benchmark

    try:
        surfaces = load_surfaces(args.surface, group=args.group, factors=args.factors,
                                 objective=args.objective)
        result = run_search_benchmark(surfaces, args.methods, budget=args.budget,
                                      seeds=args.seeds, baseline=args.baseline,
                                      progress=not args.no_progress)
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``judgeopt`` command."""
    parser = argparse.ArgumentParser(
        prog="judgeopt",
        description="Find the best prompting strategy for an LLM-as-a-judge evaluator.",
    )
    parser.add_argument("--version", action="version", version=f"judgeopt {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from .bench import METHODS

    b = sub.add_parser(
        "bench-search",
        help="benchmark searches on recorded objective surfaces (no LLM calls)",
        description=(
            "Run searches against complete recorded surfaces (every strategy with its "
            "objective) and report how close each gets to the optimum: normalised regret "
            "(max - found) / (max - median), the share of runs that find a top-1%% strategy, "
            "found / max and the evaluations spent."
        ),
    )
    b.add_argument("--surface", required=True, help="CSV with one row per (group, strategy)")
    b.add_argument("--group", type=_csv_list, default=[],
                   help="columns that identify one surface, e.g. model,task")
    b.add_argument("--factors", type=_csv_list, required=True,
                   help="columns holding the factor values, e.g. base_prompt,task_description")
    b.add_argument("--objective", required=True, help="objective column (higher is better)")
    b.add_argument("--baseline", type=_json_object, default=None,
                   help="starting strategy as JSON (inline or a file); default: first values")
    b.add_argument("--methods", type=_csv_list, default=["hpss", "random", "greedy", "stepwise"],
                   help=f"comma-separated, from: {', '.join(METHODS)}")
    b.add_argument("--budget", type=_positive_int, default=71,
                   help="unique evaluations per run (default 71)")
    b.add_argument("--seeds", type=_positive_int, default=20,
                   help="seeds 0..N-1 per method and surface (default 20)")
    b.add_argument("--json", help="write the results as JSON to this file")
    b.add_argument("--per-surface", action="store_true",
                   help="also print the normalised regret of each surface")
    b.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    b.set_defaults(func=_cmd_bench_search)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``judgeopt`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.func(args))
    except CLIError as e:
        print(f"judgeopt: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
