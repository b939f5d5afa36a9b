"""``judgeopt evaluate --attacks``: run the injection suite on an exported judge; and
``judgeopt compile``'s options that search defences and hold the judge to a robustness bound."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ..evaluate import SUITE_VERSION, attack_suite, robustness
from ._common import CLIError, csv_list, share


def add_compile_attack_args(c: argparse.ArgumentParser) -> None:
    """Add ``compile``'s ``--defences``, ``--max-attack-success`` and ``--attack-suite``."""
    c.add_argument(
        "--defences",
        action="store_true",
        help="search the defence factor too: the judged text as the task shows it, "
        "tagged with a rule that instructions inside it are judged, not obeyed, or "
        "tagged and followed by a reminder, or that with answers whose rating echoes the "
        "judged text refused, or that with every space of the judged text marked ^, or "
        "that and a screen call per item that refuses a text addressing its evaluator, "
        "its threshold calibrated on the validation texts (at most 5 %% of clean texts "
        "refused), or that and a judged text holding a rating in the answer's format "
        "([[5]], 'Rating: 5') refused before any call (docs/judge.md, 'Judges under attack')",
    )
    c.add_argument(
        "--max-attack-success",
        type=share,
        default=None,
        metavar="SHARE",
        help="hold the chosen judge to this attack success rate, averaged over the "
        "injection suite on the validation items: a judge above it is passed over "
        "and the choice made again (each judge checked costs 10 calls per "
        "validation item; default: no check)",
    )
    c.add_argument(
        "--attack-suite",
        default=None,
        metavar="SUITE",
        help="the injection suite of --max-attack-success (default: the newest, injection-1)",
    )


def add_attack_args(p: argparse.ArgumentParser) -> None:
    """Add ``--attacks [SUITE]``, ``--attack NAMES`` and ``--attack-seed``."""
    p.add_argument(
        "--attacks",
        nargs="?",
        const=SUITE_VERSION,
        default=None,
        metavar="SUITE",
        help="judge the items clean and with each attack of the injection suite (SUITE, "
        f"default {SUITE_VERSION}: text added to the judged text that tries to move the "
        "rating) and report per attack the mean rating shift, the attack success rate (items "
        "moved by a quarter of the scale or more), the share sent to the scale's end and the "
        "agreement with the humans under attack, with intervals; one run of the judge per "
        "attack",
    )
    p.add_argument(
        "--attack",
        type=csv_list,
        default=None,
        metavar="NAMES",
        help="with --attacks: only these attacks of the suite (comma-separated)",
    )
    p.add_argument(
        "--attack-seed",
        type=int,
        default=0,
        metavar="N",
        help="with --attacks: the seed of a pairwise judge's attacked side (0)",
    )


def check_attack_args(args: argparse.Namespace) -> list[str] | None:
    """The attacks to run (``None``: no ``--attacks``), checked before a model is loaded."""
    if args.attacks is None:
        if args.attack is not None:
            raise CLIError("--attack names attacks of --attacks; give --attacks too")
        return None
    if args.baseline or args.compare:
        raise CLIError("--attacks measures one judge: leave out --baseline and --compare")
    try:
        return [a.name for a in attack_suite(args.attacks, args.attack)]
    except ValueError as e:
        raise CLIError(str(e)) from e


def run_attacks(
    args: argparse.Namespace, judge: Any, records: list[Any], attacks: list[str]
) -> dict[str, Any]:
    """Run the suite, print its table and write ``--json``; the report's plain form."""
    if getattr(judge, "screens", False) and getattr(judge, "screen_calibration", None) is None:
        print(
            f"note: the judge's screen refuses above the fixed P(yes) "
            f"{judge.screen_threshold:g}, not a threshold calibrated on clean items; a small "
            "model may refuse every clean text (judgeopt.judge.calibrate_screen, docs/judge.md)",
            file=sys.stderr,
        )
    try:
        report = robustness(
            judge,
            records,
            suite=args.attacks,
            attacks=attacks,
            threads=args.threads,
            progress=not args.no_progress,
            seed=args.attack_seed,
            max_consecutive_failures=args.max_consecutive_failures,
        )
    except ValueError as e:
        raise CLIError(str(e)) from e
    for line in report.lines():
        print(line)
    payload = report.to_dict()
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return payload
