"""The ``judgeopt`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


def _lm_from_args(args: argparse.Namespace, default_model: str | None = None) -> Any:
    from .lm import make_lm

    model = args.model or default_model or "local"
    kwargs: dict[str, Any] = {}
    if getattr(args, "n_ctx", None):
        kwargs["n_ctx"] = args.n_ctx
    try:
        return model, make_lm(model, api_base=args.api_base, **kwargs)
    except ValueError as e:
        raise CLIError(str(e)) from e


def _load_data(path: str, limit: int | None) -> list[Any]:
    from .data import load_records

    try:
        return load_records(path, limit=limit)
    except (ValueError, OSError) as e:
        raise CLIError(f"--data {path}: {e}") from e


def _cmd_compile(args: argparse.Namespace) -> int:
    from .evaluate import evaluate
    from .judge import JudgeProgram, load_task
    from .teleprompt import JudgeSearch, load_optimizer

    try:
        task = load_task(args.task)
        task.aspect(args.aspect)
        preset = load_optimizer(args.optimizer)
        optimizer = JudgeSearch.from_config(
            preset, budget=args.budget, seed=args.seed, threads=args.threads,
            checkpoint_dir=args.checkpoint or f"{args.out}.ckpt", progress=not args.no_progress)
    except ValueError as e:
        raise CLIError(str(e)) from e
    train = _load_data(args.data, args.limit)
    val = _load_data(args.valid_data, args.limit) if args.valid_data else None
    model, lm = _lm_from_args(args)
    student = JudgeProgram(task, args.aspect, lm=lm)
    try:
        judge = optimizer.compile(student, trainset=train, valset=val)
    except ValueError as e:
        raise CLIError(str(e)) from e
    judge.model_name = model
    if args.test_data:
        test = _load_data(args.test_data, args.test_limit)
        judge.test = evaluate(judge, test, threads=args.threads,
                              progress=not args.no_progress, desc="test").summary()
    judge.save(args.out)
    res = judge.search_result
    print(f"best strategy: {judge.strategy}")
    print(f"validation {res.metric}: {res.best_score:.4f} ({res.evaluations} strategies, "
          f"{res.calls} calls, {res.prompt_tokens + res.completion_tokens} tokens, "
          f"{res.seconds:.0f} s)")
    if judge.test is not None:
        print("test: " + json.dumps(judge.test))
    print(f"wrote {args.out}")
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from .evaluate import evaluate
    from .judge import JudgeProgram

    try:
        judge = JudgeProgram.load(args.judge)
    except ValueError as e:
        raise CLIError(str(e)) from e
    _, lm = _lm_from_args(args, judge.model_name)
    judge.lm = lm
    records = _load_data(args.data, args.limit)
    try:
        result = evaluate(judge, records, threads=args.threads, progress=not args.no_progress)
    except ValueError as e:
        raise CLIError(str(e)) from e
    summary = result.summary()
    print(json.dumps(summary, indent=2))
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from .judge import (
        JudgeProgram,
        baseline_strategy,
        hpss_space,
        load_task,
        render_template,
    )
    from .search import Strategy

    try:
        if args.judge:
            judge = JudgeProgram.load(args.judge)
            data = judge.export()
            print(f"# {data['task_name']} / {data['aspect']}: {judge.strategy}\n")
            if judge.task.system:
                print(f"[system]\n{judge.task.system}\n")
            print(f"[user]\n{data['template']}")
            return 0
        if not (args.task and args.aspect):
            raise CLIError("give a judge file, or --task and --aspect")
        task = load_task(args.task)
        task.aspect(args.aspect)
        if args.strategy in (None, "baseline"):
            strategy = baseline_strategy(task)
        else:
            text = args.strategy
            if not text.lstrip().startswith("{"):
                text = Path(text).read_text(encoding="utf-8")
            strategy = Strategy.from_json(text, hpss_space(task))
        print(f"# {task.name} / {args.aspect}: {strategy}\n")
        if task.system:
            print(f"[system]\n{task.system}\n")
        print(f"[user]\n{render_template(task, args.aspect, strategy)}")
    except ValueError as e:
        raise CLIError(str(e)) from e
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(model=args.model or "local", api_base=args.api_base,
                    n_valid=args.n_valid, n_test=args.n_test, budget=args.budget,
                    out_dir=Path(args.out_dir), progress=not args.no_progress)


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

    def add_model(p: argparse.ArgumentParser) -> None:
        p.add_argument("--model", default=None,
                       help="'local' (embedded Qwen2.5-Coder-1.5B, the default), "
                            "'local:NAME' or 'local:PATH.gguf', or any LiteLLM model string")
        p.add_argument("--api-base", default=None, help="endpoint of a LiteLLM model")
        p.add_argument("--threads", type=_positive_int, default=1,
                       help="judge calls in flight at once (default 1)")
        p.add_argument("--n-ctx", type=_positive_int, default=None,
                       help="context window of a local model (default 4096)")
        p.add_argument("--no-progress", action="store_true", help="hide progress bars")

    c = sub.add_parser("compile", help="search the best prompting strategy and export the judge",
                       description="Search a judge's prompting strategy with HPSS (or another "
                                   "search) on labelled data and export the best judge as JSON.")
    c.add_argument("--task", required=True, help="signature TOML file or shipped task name")
    c.add_argument("--aspect", required=True, help="the aspect to judge")
    c.add_argument("--data", required=True,
                   help="labelled JSONL/CSV: example pool and (without --valid-data) scoring set")
    c.add_argument("--valid-data", help="labelled data to score strategies on")
    c.add_argument("--test-data", help="held-out labelled data to evaluate the best judge on")
    c.add_argument("--limit", type=_positive_int, help="use the first N records of each file")
    c.add_argument("--test-limit", type=_positive_int, help="use the first N test records")
    c.add_argument("--optimizer", default="hpss",
                   help="optimizer preset TOML or name: hpss (default), greedy, stepwise, "
                        "random, quick")
    c.add_argument("--budget", type=_positive_int, help="override the preset's budget")
    c.add_argument("--seed", type=int, help="override the preset's seed")
    c.add_argument("--checkpoint", help="checkpoint directory (default: OUT.ckpt); a re-run "
                                        "resumes from it")
    c.add_argument("--out", required=True, help="the exported judge (JSON)")
    add_model(c)
    c.set_defaults(func=_cmd_compile)

    e = sub.add_parser("evaluate", help="evaluate an exported judge on labelled data")
    e.add_argument("judge", help="exported judge JSON")
    e.add_argument("--data", required=True, help="labelled JSONL/CSV")
    e.add_argument("--limit", type=_positive_int, help="use the first N records")
    e.add_argument("--json", help="also write the summary to this file")
    add_model(e)
    e.set_defaults(func=_cmd_evaluate)

    s = sub.add_parser("show", help="print a judge's rendered prompt template",
                       description="Print the messages of an exported judge, or of a task's "
                                   "strategy, with placeholders for the input fields.")
    s.add_argument("judge", nargs="?", help="exported judge JSON")
    s.add_argument("--task", help="signature TOML file or shipped task name")
    s.add_argument("--aspect", help="the aspect")
    s.add_argument("--strategy", help="'baseline' (default), a JSON object or a JSON file")
    s.set_defaults(func=_cmd_show)

    d = sub.add_parser("demo", help="compile a Topical-Chat naturalness judge with the "
                                    "embedded model and compare it with the MT-Bench baseline")
    d.add_argument("--n-valid", type=_positive_int, default=12, help="validation items (12)")
    d.add_argument("--n-test", type=_positive_int, default=30, help="held-out test items (30)")
    d.add_argument("--budget", type=_positive_int, default=8, help="strategies to try (8)")
    d.add_argument("--out-dir", default="runs/demo", help="where the judge and checkpoint go")
    add_model(d)
    d.set_defaults(func=_cmd_demo)
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
    except (FileNotFoundError, ValueError) as e:
        print(f"judgeopt: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:
        # LM configuration errors (a missing model file, packages not installed) are user
        # errors too; anything else is a bug and keeps its traceback.
        if type(e).__module__.startswith("judgeopt.lm"):
            print(f"judgeopt: error: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
