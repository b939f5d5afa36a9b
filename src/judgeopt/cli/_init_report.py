"""``judgeopt init`` (a starting task TOML from a data file) and ``judgeopt report`` (a compiled
judge's HTML report)."""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

from ..report import write_judge_report
from ..starter import ConstantScoresWarning, starter_task
from ._common import CLIError, Subparsers


def _cmd_report(args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else Path(args.judge).with_suffix(".report")
    try:
        files = write_judge_report(args.judge, out, figures=not args.no_figures)
    except ValueError as e:
        raise CLIError(str(e)) from e
    pngs = [f.name for f in files if f.suffix == ".png"]
    print(f"wrote {files[0]}" + (f" and {', '.join(pngs)}" if pngs else " (no figures)"))
    return 0


def _cmd_init(args: argparse.Namespace) -> int:
    from ..judge import JudgeTask  # lazy: loads DSPy

    out = Path(args.out) if args.out else Path(Path(args.data).stem + ".toml")
    if out.exists() and not args.force:
        raise CLIError(f"{out} exists; choose another --out or pass --force to overwrite it")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConstantScoresWarning)
            text = starter_task(args.data, name=args.name or out.stem)
    except (ValueError, OSError) as e:
        raise CLIError(f"`--data`: {e}") from e
    constant: list[str] = []  # aspects whose scores do not vary: said, not buried in the TOML
    for w in caught:
        if isinstance(w.message, ConstantScoresWarning):
            constant.append(w.message.aspect)
            print(f"judgeopt: warning: `--data`: {w.message}", file=sys.stderr)
        else:
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    try:
        task = JudgeTask.from_toml(text, source=str(out))
    except ValueError as e:
        raise CLIError(str(e)) from e
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(
        f"wrote {out}: task {task.name!r}, inputs {list(task.input_names)!r}, judged "
        f"{list(task.judged_fields)!r}, aspects {list(task.aspect_names)!r}"
    )
    print(
        f"edit the criteria in {out}, then: judgeopt compile --task {out} --aspect "
        f"{next(a for a in task.aspect_names if a not in constant)} --data {args.data} "
        "--out judge.json"
    )
    return 0


def add_report_parser(sub: Subparsers) -> None:
    """Add ``judgeopt report``."""
    rp = sub.add_parser(
        "report",
        help="write a compiled judge's HTML report and PNG figures",
        description="Write DIR/index.html (self-contained) and PNG figures of an exported "
        "judge: the search trace with the best so far and the baseline, each "
        "factor value's mean score with intervals, the gain over the baseline with "
        "its interval, judge vs human on the test items, and the chosen prompt.",
    )
    rp.add_argument("judge", help="exported judge JSON")
    rp.add_argument("--out", help="the report directory (default: JUDGE stem + .report)")
    rp.add_argument("--no-figures", action="store_true", help="write the HTML only")
    rp.set_defaults(func=_cmd_report)


def add_init_parser(sub: Subparsers) -> None:
    """Add ``judgeopt init``."""
    it = sub.add_parser(
        "init",
        help="write a starting task TOML from a labelled CSV/JSONL file",
        description="Read a data file's columns and write a task signature to edit: text "
        "columns become input fields (the last one is judged), numeric columns "
        "aspects with the score range seen in the data; a label column (a/b/tie) "
        "makes a pairwise task.",
    )
    it.add_argument(
        "--data",
        required=True,
        help="labelled CSV or JSONL (plain columns such as question,answer,helpfulness work)",
    )
    it.add_argument("--out", help="the TOML to write (default: DATA stem + .toml here)")
    it.add_argument("--name", help="the task's name (default: the TOML's stem)")
    it.add_argument("--force", action="store_true", help="overwrite an existing --out")
    it.set_defaults(func=_cmd_init)
