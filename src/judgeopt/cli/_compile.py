"""``judgeopt compile``: search a judge's prompting strategy for one or several aspects, test
it on held-out data, print the summary and write the judge (and its report)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..evaluate import (
    check_label_spread,
    check_records,
)
from ._attacks import add_compile_attack_args
from ._common import (
    EXIT_UNTRUSTED,
    CLIError,
    Subparsers,
    add_model,
    add_spend_limits,
    csv_list,
    lm_from_args,
    load_data,
)
from ._compile_args import add_data_args, add_failure_args, add_search_args, add_selection_args
from ._compile_output import judge_on_test, write_judge

if TYPE_CHECKING:  # the CLI imports them where they are used: they load DSPy
    from ..data import Record
    from ..judge import ArtifactStore, JudgeProgram, JudgeTask
    from ..teleprompt import JudgeSearch, OptimizerConfig


def _compile_aspects(args: argparse.Namespace, task: JudgeTask) -> list[str]:
    """The aspects of ``--aspect a,b,c`` / ``--aspects all`` (each checked)."""
    if args.aspects is not None:
        if args.aspects == "all":
            return list(task.aspect_names)
        names = csv_list(args.aspects)
    else:
        names = csv_list(args.aspect)
    for name in names:
        task.aspect(name)
    if len(set(names)) != len(names):
        raise ValueError(f"--aspect lists an aspect more than once: {names!r}")
    return names


def _optimizer(
    search_class: type[JudgeSearch],
    preset: OptimizerConfig,
    args: argparse.Namespace,
    **run: Any,
) -> JudgeSearch:
    """The teleprompter of the command's preset and options (``run``: the settings of one
    run: threads, checkpoint, progress, restart)."""
    from ..judge import DEFENCES  # lazy: judgeopt.judge loads DSPy

    space = {**preset.space, "defence": list(DEFENCES)} if args.defences else None
    return search_class.from_config(
        preset,
        budget=args.budget,
        seed=args.seed,
        racing=args.racing,
        selection=args.selection,
        guard=args.guard,
        frugal=args.frugal,
        ensemble=args.ensemble,
        ensemble_anchor=args.ensemble_anchor,
        ensemble_stack=args.ensemble_stack,
        max_consecutive_failures=args.max_consecutive_failures,
        max_parse_failures=args.max_parse_failures,
        check_timeout=args.check_timeout,
        max_attack_success=args.max_attack_success,
        attack_suite=args.attack_suite,
        candidates=args.candidates,
        space=space,
        **run,
    )


def _cmd_compile(args: argparse.Namespace) -> int:
    # lazy: judgeopt.judge and judgeopt.teleprompt load DSPy
    from ..judge import ArtifactStore
    from ..teleprompt import JudgeSearch

    task, aspects, preset = _compile_setup(args)
    # --aspects always writes an index directory (even of one aspect); --aspect a,b too.
    several = len(aspects) > 1 or args.aspects is not None
    root = _out_root(args, aspects, several)
    # One LM for every aspect: the model is loaded once and its cache is shared.
    model, lm = lm_from_args(args)
    # The artifacts that are the same for every aspect (the self-generated references; see
    # judgeopt.judge.shared_across_aspects) are made once and handed to the next aspects.
    shared = ArtifactStore()
    written: dict[str, str] = {}
    problems: list[str] = []
    for aspect in aspects:
        out = root / f"{aspect}.json" if several else root
        if several:
            print(f"== {task.name} / {aspect}", flush=True)
        ckpt = (
            (str(Path(args.checkpoint) / aspect) if several else args.checkpoint)
            if args.checkpoint
            else f"{out}.ckpt"
        )
        try:
            optimizer = _optimizer(
                JudgeSearch,
                preset,
                args,
                threads=args.threads,
                checkpoint_dir=ckpt,
                progress=not args.no_progress,
                restart=args.restart,
            )
        except ValueError as e:
            raise CLIError(str(e)) from e
        args.resume_hint = (
            f"the judgements made so far for {aspect!r} are in the checkpoint {ckpt}"
            + (f" ({len(written)} of {len(aspects)} aspects written)" if several else "")
            + ": run the same command to resume"
        )
        if args.plan_only:
            _plan_aspect(args, task, aspect, lm, optimizer, shared)
            continue
        # NOTE: an endpoint failure (LMUnavailable) stops every aspect: exit 3, resumable.
        problems += _compile_aspect(args, task, aspect, (model, lm), optimizer, out, shared)
        written[aspect] = out.name
    if args.plan_only:
        return 0
    if several:
        _write_index(root, task.name, written, model)
    if problems:
        print(
            f"judgeopt: the compiled judge is not trustworthy ({len(problems)} problem"
            f"{'s' if len(problems) > 1 else ''} above); it was written for inspection "
            f"(exit status {EXIT_UNTRUSTED}; --max-parse-failures sets the accepted share "
            "of answers without a rating)",
            file=sys.stderr,
        )
        return EXIT_UNTRUSTED
    return 0


def _compile_setup(args: argparse.Namespace) -> tuple[JudgeTask, list[str], OptimizerConfig]:
    """The task, its aspects and the optimizer preset of the command's options (checked
    before a model is loaded)."""
    # lazy: judgeopt.judge and judgeopt.teleprompt load DSPy
    from ..judge import load_task
    from ..teleprompt import JudgeSearch, load_optimizer

    if args.ensemble_anchor is not None and args.ensemble_anchor >= 1.0:
        raise CLIError(
            f"--ensemble-anchor is the baseline's weight in the ensemble, below 1 (1 would "
            f"be the baseline alone); got {args.ensemble_anchor:g}"
        )
    if args.ensemble_stack is not None and args.ensemble_stack < 0:
        raise CLIError(
            f"--ensemble-stack is the stack's ridge penalty per item, 0 or more (0: equal "
            f"weights); got {args.ensemble_stack:g}"
        )
    if args.ensemble_stack and args.ensemble_anchor:
        raise CLIError(
            "--ensemble-stack and --ensemble-anchor cannot be used together: a stacked "
            "ensemble fits the baseline's weight, an anchored one fixes it"
        )
    try:
        task = load_task(args.task)
        aspects = _compile_aspects(args, task)
        preset = load_optimizer(args.optimizer)
        _optimizer(JudgeSearch, preset, args)  # validate before loading a model
    except (ValueError, argparse.ArgumentTypeError) as e:
        raise CLIError(str(e)) from e
    return task, aspects, preset


def _out_root(args: argparse.Namespace, aspects: list[str], several: bool) -> Path:
    """``--out``: a directory with several aspects, else the judge's JSON file."""
    root = Path(args.out)
    if several and root.suffix == ".json":
        raise CLIError(
            f"with --aspects (here {', '.join(aspects)}), --out names a directory "
            f"(one judge per aspect plus index.json); got {args.out!r}"
        )
    if not several and root.suffix != ".json":
        raise CLIError(
            f"--out names the exported judge, a file ending in .json, for one aspect; got "
            f"{args.out!r} (--aspects {aspects[0]} writes an index directory instead)"
        )
    return root


def _write_index(root: Path, task_name: str, written: dict[str, str], model: str) -> None:
    from ..judge import write_judge_index  # lazy: loads DSPy

    index = write_judge_index(root / "index.json", task_name, written, model=model, merge=True)
    listed = json.loads(index.read_text(encoding="utf-8"))["judges"]  # other aspects kept
    kept = [a for a in listed if a not in written]
    print(
        f"wrote {index} ({len(listed)} judges of {task_name}: {', '.join(listed)}"
        + (f"; kept from the earlier index: {', '.join(kept)}" if kept else "")
        + ")"
    )


#: The compile's Python names (in its fingerprint) -> the CLI options that give them.
_OPTION_OF = {"trainset": "--data (trainset)", "valset": "--valid-data (valset)"}


def _check_data(
    student: JudgeProgram, parts: list[tuple[str, str | None, list[Record] | None, bool]]
) -> None:
    """The compile's checks of its data (``trainset`` / ``valset`` in the Python API's
    messages), made here first so that the messages name the option the user typed.

    ``parts``: ``(option, path, records or None, whether it is the scoring set)``.
    """
    for option, path, records, scoring in parts:
        if records is None:
            continue
        try:
            check_records(student, records)
        except ValueError as e:
            raise CLIError(f"{option} {path}: {e}") from e
        if scoring:
            try:
                check_label_spread(records, student.task, student.aspect, option)
            except ValueError as e:
                raise CLIError(str(e)) from e


def _compile_aspect(
    args: argparse.Namespace,
    task: JudgeTask,
    aspect: str,
    model_lm: tuple[str, Any],
    optimizer: JudgeSearch,
    out: Path,
    shared: ArtifactStore,
) -> list[str]:
    """Compile, test and write the judge of one aspect; the problems found (printed).

    ``shared``: the artifacts common to every aspect (an ``ArtifactStore``), made by the
    aspects compiled before: the search starts with them, and adds the ones it makes.
    """
    from ..judge import ANY_ASPECT  # lazy: loads DSPy

    model, lm = model_lm
    student, train, val, test = _student_and_data(args, task, aspect, lm, shared)
    judge = _search(optimizer, student, train, val)
    common = f"{task.name}/{ANY_ASPECT}/"
    for key, value in judge.store.to_dict().items():
        if key.startswith(common):
            shared.set(key, value)
    judge = judge.with_report(judge.report_.with_model(model))
    ensemble = judge.ensemble
    if ensemble is not None:
        ensemble = ensemble.with_model_name(model)
    if test is not None:
        baseline = judge.with_strategy(student.strategy)
        judge, ensemble = judge_on_test(args, optimizer, judge, ensemble, baseline, test)
    write_judge(args, judge, ensemble, out)
    problems = list(judge.search_result.problems)
    for line in problems:
        print(f"judgeopt: problem ({aspect}): {line}", file=sys.stderr)
    return problems


def _plan_aspect(
    args: argparse.Namespace,
    task: JudgeTask,
    aspect: str,
    lm: Any,
    optimizer: JudgeSearch,
    shared: ArtifactStore,
) -> None:
    """Print the plan of one aspect's compile (``--plan-only``): the search and the choice
    (:meth:`JudgeSearch.plan`), and the held-out test's calls when ``--test-data`` is given."""
    student, train, val, test = _student_and_data(args, task, aspect, lm, shared)
    try:
        plan = _reported(lambda: optimizer.plan(student, trainset=train, valset=val))
    except RuntimeError as e:  # no plan could be made: the plan is all that was asked for
        raise CLIError(str(e)) from e
    print(f"{aspect}: {plan.line()}", flush=True)
    if test is not None:
        print(
            f"{aspect}: then the held-out test: the baseline and the chosen judge on "
            f"{len(test)} items (about {2 * len(test):,} calls more, {len(test):,} when the "
            "baseline is chosen)",
            flush=True,
        )


def _student_and_data(
    args: argparse.Namespace, task: JudgeTask, aspect: str, lm: Any, shared: ArtifactStore
) -> tuple[JudgeProgram, list[Record], list[Record] | None, list[Record] | None]:
    """The aspect's student (its artifacts seed the search's store, JudgeProgram.fresh_copy)
    and the records of ``--data``, ``--valid-data`` and ``--test-data``, checked."""
    from ..judge import JudgeProgram  # lazy: loads DSPy

    train, val, test = _aspect_data(args, task, aspect)
    student = JudgeProgram(task, aspect, lm=lm, artifacts=shared)
    _check_data(
        student,
        [
            ("--data", args.data, train, val is None),
            ("--valid-data", args.valid_data, val, True),
            ("--test-data", args.test_data, test, False),
        ],
    )
    return student, train, val, test


def _aspect_data(
    args: argparse.Namespace, task: JudgeTask, aspect: str
) -> tuple[list[Record], list[Record] | None, list[Record] | None]:
    """The records of ``--data``, ``--valid-data`` and ``--test-data`` (``None``: not given)."""
    train = load_data(args.data, args.limit, task, aspect)
    val = (
        load_data(args.valid_data, args.limit, task, aspect, option="--valid-data")
        if args.valid_data
        else None
    )
    # Loaded and checked before the search, so a bad test file does not wait for it.
    test = (
        load_data(args.test_data, args.test_limit, task, aspect, option="--test-data")
        if args.test_data
        else None
    )
    return train, val, test


def _search(
    optimizer: JudgeSearch, student: JudgeProgram, train: list[Record], val: list[Record] | None
) -> JudgeProgram:
    """``optimizer.compile``, its errors reported with the options the user typed."""
    return _reported(lambda: optimizer.compile(student, trainset=train, valset=val))


_T = TypeVar("_T")


def _reported(call: Callable[[], _T]) -> _T:
    """``call()`` (a compile or its plan), its data and checkpoint errors as CLI errors
    that name the options the user typed."""
    from ..teleprompt import CheckpointMismatchError  # lazy: loads DSPy

    try:
        return call()
    except CheckpointMismatchError as e:
        # The fingerprint's keys are the Python API's names; the user typed the options.
        renamed = [(_OPTION_OF.get(what, what), old, new) for what, old, new in e.differences]
        raise CLIError(str(CheckpointMismatchError(e.path, renamed))) from e
    except ValueError as e:
        raise CLIError(str(e)) from e


def add_parser(sub: Subparsers) -> None:
    """Add ``judgeopt compile``."""
    c = sub.add_parser(
        "compile",
        help="search the best prompting strategy and export the judge",
        description="Search a judge's prompting strategy with HPSS (or another "
        "search) on labelled data and export the best judge as JSON.",
    )
    add_data_args(c)
    add_search_args(c)
    add_failure_args(c)
    add_selection_args(c)
    add_compile_attack_args(c)
    c.add_argument(
        "--out", required=True, help="the exported judge (JSON); with several aspects a directory"
    )
    c.add_argument(
        "--no-report",
        action="store_true",
        help="do not write the HTML report (OUT stem + .report/index.html)",
    )
    add_model(c)
    add_spend_limits(c)
    c.set_defaults(func=_cmd_compile)
