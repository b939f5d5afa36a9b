"""The ``judgeopt`` parser (each command group adds its own subcommands) and ``main``: logging,
SIGTERM as an interrupt, and the exit statuses of errors."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from .. import __version__
from .._errors import JudgeoptError
from .._signals import SpendLimitReached, interrupt_reason, sigterm_as_interrupt
from . import _bench, _compile, _demo, _evaluate, _glassbox, _grid, _init_report, _serve
from ._common import EXIT_UNAVAILABLE


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``judgeopt`` command."""
    parser = argparse.ArgumentParser(
        prog="judgeopt",
        description="Find the best prompting strategy for an LLM-as-a-judge evaluator.",
    )
    parser.add_argument("--version", action="version", version=f"judgeopt {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # The order of `judgeopt --help`.
    _bench.add_parser(sub)
    _compile.add_parser(sub)
    _evaluate.add_evaluate_parser(sub)
    _init_report.add_report_parser(sub)
    _init_report.add_init_parser(sub)
    _evaluate.add_show_parser(sub)
    _grid.add_grid_parser(sub)
    _grid.add_analyze_parser(sub)
    _glassbox.add_parser(sub)
    _serve.add_parser(sub)
    _demo.add_parser(sub)
    return parser


class _StderrLines(logging.Handler):
    """Prints ``judgeopt.progress`` records (where a run resumes, one line per strategy with
    ``--no-progress``) as ``judgeopt: ...`` lines on the current ``sys.stderr``."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(f"judgeopt: {record.getMessage()}", file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 - logging must never break the run
            self.handleError(record)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``judgeopt`` command.

    ``argv``: the arguments; ``None`` reads ``sys.argv``, as the ``judgeopt`` program does,
    and the command then owns the process: after Ctrl-C or SIGTERM it says what was kept
    and further signals are ignored while the process exits, so nothing but that line is
    printed. With ``argv`` given (a program calling ``main``) the signal handlers are put
    back as they were.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.command is None:
        parser.print_help()
        return 2
    # Progress lines go to stderr for the command's duration; the logger is put back after,
    # so a program that calls main() keeps its own logging.
    progress = logging.getLogger("judgeopt.progress")
    handler = _StderrLines()
    saved = (progress.level, progress.propagate)
    progress.addHandler(handler)
    progress.setLevel(logging.INFO)
    progress.propagate = False
    # The compile's summary prints its selection messages and problems: their log records
    # would show the same lines twice.
    teleprompt = logging.getLogger("judgeopt.teleprompt")
    teleprompt.addFilter(_not_reported)
    try:
        return _run(args, owns_process=argv is None)
    finally:
        progress.removeHandler(handler)
        progress.setLevel(saved[0])
        progress.propagate = saved[1]
        teleprompt.removeFilter(_not_reported)


def _not_reported(record: logging.LogRecord) -> bool:
    return not getattr(record, "judgeopt_reported", False)


def _run(args: argparse.Namespace, *, owns_process: bool) -> int:
    from ..lm import LMUnavailable  # lazy: judgeopt.lm loads DSPy and LiteLLM

    try:
        # SIGTERM (how a `nohup ... &` run is stopped) ends the command as Ctrl-C does, so
        # it can say what was kept; `serve` sets its own handlers inside.
        with sigterm_as_interrupt(ignore_after=owns_process):
            return int(args.func(args))
    except KeyboardInterrupt as e:
        # A long command sets `resume_hint` once it has something to resume from.
        hint = getattr(args, "resume_hint", None)
        if isinstance(e, SpendLimitReached):
            flag = "--max-calls" if e.limit == "max_calls" else "--max-cost"
            hint = f"{hint}, with a higher {flag}" if hint else f"raise {flag} to go on"
        print(
            f"judgeopt {args.command}: stopped ({interrupt_reason(e)})"
            + (f"; {hint}" if hint else ""),
            file=sys.stderr,
            flush=True,
        )
        return 130
    except LMUnavailable as e:
        print(f"judgeopt: error: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except (JudgeoptError, FileNotFoundError, ValueError) as e:
        # What judgeopt raises on purpose (CLIError, a data, task or LM configuration error,
        # a missing optional package) is the user's to fix; anything else is a bug and keeps
        # its traceback.
        print(f"judgeopt: error: {e}", file=sys.stderr)
        return 2
