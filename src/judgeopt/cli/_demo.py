"""``judgeopt demo``: compile a judge on a few labelled items with the embedded model and test it
against the MT-Bench baseline on held-out items."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..demo import DEMO_PAIR, run_demo
from ._common import CLIError, Subparsers, _model_string, add_model, positive_int


def _cmd_demo(args: argparse.Namespace) -> int:
    if args.task not in (None, DEMO_PAIR[0]) and args.aspect is None:
        raise CLIError(
            "--task needs --aspect (the demo's default aspect belongs to its "
            f"default task {DEMO_PAIR[0]!r})"
        )
    args.resume_hint = (
        "the search's judgements made so far are in "
        f"{Path(args.out_dir) / 'checkpoint'}: run the same command to resume "
        "(the held-out test items are judged again)"
    )
    try:
        return run_demo(
            model=_model_string(args),
            api_base=args.api_base,
            task=args.task or DEMO_PAIR[0],
            aspect=args.aspect or DEMO_PAIR[1],
            n_valid=args.n_valid,
            n_test=args.n_test,
            budget=args.budget,
            threads=args.threads,
            parallel=args.parallel,
            out_dir=Path(args.out_dir),
            progress=not args.no_progress,
        )
    except (ValueError, FileNotFoundError) as e:
        raise CLIError(str(e)) from e


def add_parser(sub: Subparsers) -> None:
    """Add ``judgeopt demo``."""
    d = sub.add_parser(
        "demo",
        help="compile a judge on a few labelled items with the embedded "
        "model and test it against the MT-Bench baseline on held-out "
        "items",
    )
    d.add_argument(
        "--task", default=None, help="task of the shared data (default: the demo's pair, sfres)"
    )
    d.add_argument("--aspect", default=None, help="the task's aspect (default: naturalness)")
    d.add_argument(
        "--n-valid",
        type=positive_int,
        default=40,
        help="items to compile on: the search and the selection use all of them (40)",
    )
    d.add_argument("--n-test", type=positive_int, default=100, help="held-out test items (100)")
    d.add_argument("--budget", type=positive_int, default=6, help="strategies to try (6)")
    d.add_argument("--out-dir", default="runs/demo", help="where the judge and checkpoint go")
    add_model(d)
    d.set_defaults(func=_cmd_demo)
