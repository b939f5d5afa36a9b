"""``judgeopt grid`` (every strategy of a factor (sub)space judged on a dataset, resumable) and
``judgeopt analyze`` (PrExMe-style analysis of such a results table)."""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ..analysis import (
    AGGREGATIONS,
    ITEM_COLUMNS,
    TESTS,
    analyze,
    figures_available,
    load_items,
    load_results,
    write_report,
)
from ..evaluate import (
    CHECK_TIMEOUT,
    PLAN_WINDOW,
    call_cost,
    check_endpoint,
    default_threads,
    mean_cost,
    plan_cost,
    plan_sample,
    time_judgement,
)
from ..grid import (
    GridConfig,
    GridError,
    load_grid_config,
    parse_factor_options,
    run_grid,
    select_subspace,
)
from ._common import (
    CLIError,
    Subparsers,
    add_model,
    add_spend_limits,
    csv_list,
    json_object,
    lm_from_args,
    load_data,
    plan_first,
    positive_int,
    seconds,
)


def _infer_prexme_task(dataset: str) -> str | None:
    from ..judge import PREXME_TASKS  # lazy: loads DSPy

    name = dataset.lower().replace("-", "_")
    found = [t for t in PREXME_TASKS if t in name]
    return found[0] if len(found) == 1 else None


def _cmd_grid(args: argparse.Namespace) -> int:
    config, selection = _grid_selection(args)
    dataset = args.dataset or Path(args.data).stem
    aspect = args.aspect or config.aspect
    task, judged = _grid_task(args, config, dataset, aspect)
    # The task's fields and aspects name the columns of plain data (question,answer,score),
    # as for compile and evaluate.
    records = load_data(args.data, args.limit, task, judged)
    examples = (
        load_data(args.examples, None, task, judged, option="--examples") if args.examples else None
    )
    program, space = _grid_program(args, task, aspect, examples, selection)
    model, program.lm = lm_from_args(args)
    print(
        f"grid: {space.size} strategies x {len(records)} items of {dataset} with {model} "
        f"-> {args.out}",
        file=sys.stderr,
    )
    args.resume_hint = (
        f"the strategies finished so far are in {args.out}: run the same command to resume"
    )
    check_endpoint(program.lm, timeout=args.check_timeout, before="the grid")
    if plan_first(
        args, "grid", lambda out: _print_plan(program, space, records, out, args.threads)
    ):
        return 0
    try:
        result = run_grid(
            program,
            records,
            table=args.out,
            items=args.items,
            space=space,
            dataset=dataset,
            model=model,
            threads=args.threads,
            progress=not args.no_progress,
            keep_outputs=args.keep_outputs,
            overwrite=args.overwrite,
            check=False,  # made above, before the plan's timed judgement
            max_consecutive_failures=args.max_consecutive_failures,
        )
    except GridError as e:
        raise CLIError(str(e)) from e
    _print_grid_result(result, program, space, args.top)
    return 0


def _grid_selection(args: argparse.Namespace) -> tuple[GridConfig, dict[str, Any]]:
    """The ``--space`` file and the factor values selected by it and ``--factors``."""
    try:
        config = load_grid_config(args.space) if args.space else GridConfig()
        selection: dict[str, Any] = dict(config.factors)
        selection.update(parse_factor_options(args.factors or []))
    except GridError as e:
        raise CLIError(str(e)) from e
    return config, selection


def _grid_task(
    args: argparse.Namespace, config: GridConfig, dataset: str, aspect: str | None
) -> tuple[Any, str]:
    """The task (PrExMe's without an aspect, else a signature) and its judged score."""
    from ..judge import load_prexme_task, load_task  # lazy: judgeopt.judge loads DSPy

    task_name = args.task or config.task or (None if aspect else _infer_prexme_task(dataset))
    if task_name is None:
        raise CLIError(
            f"cannot tell the task from the dataset name {dataset!r}: give --task "
            "(a PrExMe task such as zh_en, or a signature with --aspect)"
        )
    task: Any
    try:
        if aspect is None:
            try:
                task = load_prexme_task(task_name)
            except ValueError as e:
                raise ValueError(f"{e}{_aspect_hint(task_name)}") from e
            judged = task.score_key
        else:
            task = load_task(task_name)
            task.aspect(aspect)  # an unknown aspect names the task's aspects
            judged = aspect
    except ValueError as e:
        raise CLIError(str(e)) from e
    return task, judged


def _aspect_hint(task_name: str) -> str:
    """What to add when ``task_name`` is a signature task given without ``--aspect``."""
    from ..judge import load_task  # lazy: judgeopt.judge loads DSPy

    try:
        task = load_task(task_name)
    except (ValueError, OSError):
        return ""
    return (
        f" {task_name!r} is a signature task: give --aspect to judge one of its aspects "
        f"with the HPSS factors ({', '.join(task.aspects)})."
    )


def _grid_program(
    args: argparse.Namespace,
    task: Any,
    aspect: str | None,
    examples: list[Any] | None,
    selection: dict[str, Any],
) -> tuple[Any, Any]:
    """The judge (PrExMe's templates without an aspect) and the selected sub-space."""
    # lazy: judgeopt.judge loads DSPy
    from ..judge import ONE_SHOT_BASE_PROMPTS, ZERO_SHOT_BASE_PROMPTS, JudgeProgram, PrExMeProgram

    program: Any
    try:
        if aspect is None:
            program = PrExMeProgram(task, examples=examples, max_tokens=args.max_tokens or 180)
            if examples is None and "base_prompt" not in selection:
                # Without examples, "every base prompt" means the zero-shot ones.
                selection["base_prompt"] = list(ZERO_SHOT_BASE_PROMPTS)
                print(
                    f"grid: no --examples, so only the zero-shot base prompts (the one-shot "
                    f"{', '.join(ONE_SHOT_BASE_PROMPTS)} need them)",
                    file=sys.stderr,
                )
        else:
            program = JudgeProgram(task, aspect, trainset=examples, max_tokens=args.max_tokens)
        space = select_subspace(program.space, selection)
    except (GridError, ValueError) as e:
        raise CLIError(str(e)) from e
    if aspect is None and examples is None:
        one_shot = [b for b in space["base_prompt"].values if b in ONE_SHOT_BASE_PROMPTS]
        if one_shot:
            raise CLIError(
                f"the one-shot base prompts {one_shot!r} need --examples (labelled "
                "records to retrieve the demonstrations from)"
            )
    if space.size > args.max_strategies:
        raise CLIError(
            f"the grid has {space.size} strategies, more than --max-strategies "
            f"{args.max_strategies}: select values with --factors or raise the limit"
        )
    return program, space


def _print_grid_result(result: Any, program: Any, space: Any, top: int) -> None:
    per_call = f", {result.seconds / result.calls:.2f} s per call" if result.calls else ""
    print(
        f"{result.evaluated} strategies evaluated, {result.skipped} already done; "
        f"{result.calls} LM calls in {result.seconds:.0f} s{per_call}"
    )
    metric = "accuracy" if getattr(program.task, "mode", "") == "pairwise" else "kendall"
    print(f"best by {metric}:")
    for row in result.best(metric, k=top):
        value = f"{float(row[metric]):.3f}" if row[metric] else "nan"
        print(
            f"  {value:>6}  unparsed {row['n_unparsed']:>3}/{row['n']}  "
            + ", ".join(f"{n}={row[n]}" for n in space.names)
        )
    print(f"wrote {result.table} and {result.items}")


#: Strategies of the grid whose prompts are counted for the plan, and items of each.
PLAN_STRATEGIES, PLAN_ITEMS = 24, 8


def _print_plan(
    program: Any, space: Any, records: Sequence[Any], stream: TextIO, threads: int | None
) -> None:
    """Print what the grid will cost (on ``stream``) before its first judge call: the mean
    cost of up to :data:`PLAN_STRATEGIES` of its strategies, spread evenly over the space,
    timed with the grid's calls in flight (``threads``; ``None``: what the LM keeps busy)."""
    lm = program.lm
    step = max(1, space.size // PLAN_STRATEGIES)
    drawn = [space.from_index(i) for i in range(0, space.size, step)][:PLAN_STRATEGIES]
    items = plan_sample(records, PLAN_ITEMS)
    in_flight = threads or default_threads(lm)
    timing = time_judgement(program.with_strategy(drawn[0]), records, lm, threads=in_flight)
    window = records[:PLAN_WINDOW]
    costs = [
        call_cost(program.with_strategy(s), items, lm, timing=timing, window=window) for s in drawn
    ]
    mean = mean_cost(costs)
    what = f"{space.size} strategies on {len(records)} items"
    plan = plan_cost(
        [(mean, space.size * len(records), float(space.size))], lm, timing=timing, what=what
    )
    print(f"grid: {plan.line()}", file=stream, flush=True)


def _cmd_analyze(args: argparse.Namespace) -> int:
    n_column = None if args.n_column == "none" else args.n_column
    if n_column == "auto":
        try:
            with open(args.results, newline="", encoding="utf-8") as fh:
                header = next(csv.reader(fh), [])
        except OSError as e:
            raise CLIError(f"--results {args.results}: {e}") from e
        n_column = next((c for c in ("n_items", "n_segments", "n") if c in header), None)
    try:
        table = load_results(
            args.results,
            factors=args.factors,
            objective=args.objective,
            group=args.group,
            n_column=n_column,
        )
        items = None
        if args.items:
            item_id, judge, human = args.item_columns
            items = load_items(
                args.items,
                columns=table.dimensions,
                item_column=item_id,
                judge_column=judge,
                human_column=human,
            )
        analysis = analyze(
            table,
            items=items,
            fraction=args.top_fraction,
            aggregation=args.aggregation,
            aggregations=args.aggregations,
            value_groups=args.value_groups,
            between=args.between,
            test=args.test,
            method=args.method,
            alpha=args.alpha,
            max_candidates=args.max_candidates,
            n_resamples=args.n_resamples,
            seed=args.seed,
        )
    except ValueError as e:
        raise CLIError(str(e)) from e
    if not args.no_figures and not figures_available():
        print(
            "analyze: matplotlib is not installed, so no figures are drawn "
            "(pip install 'judgeopt[report]')",
            file=sys.stderr,
        )
    files = write_report(analysis, args.out, figures=not args.no_figures)
    for line in analysis.findings:
        print(f"- {line}")
    pngs = sum(1 for f in files if f.suffix == ".png")
    print(f"wrote {files[0]}, {files[1].name} and {pngs} figures in {Path(args.out)}")
    return 0


def add_grid_parser(sub: Subparsers) -> None:
    """Add ``judgeopt grid``."""
    g = sub.add_parser(
        "grid",
        help="evaluate every strategy of a (sub)space on a dataset (resumable)",
        description=(
            "Judge a labelled sample with every strategy of a factor space (PrExMe's prompt "
            "templates by default, or an HPSS task with --aspect) and write a tidy CSV (one "
            "row per strategy: kendall, tie-corrected kendall, pearson, spearman, n, "
            "unparsed, calls, seconds) plus a per-item JSONL. A re-run with the same "
            "arguments skips the finished strategies. An endpoint that does not answer a "
            "check call, or fails the judge calls of a strategy, stops the grid with exit "
            "status 3 and no row for that strategy; the re-run judges it again."
        ),
    )
    _add_grid_input_args(g)
    _add_grid_run_args(g)
    add_model(g)
    add_spend_limits(g)
    g.set_defaults(func=_cmd_grid)


def _add_grid_input_args(g: argparse.ArgumentParser) -> None:
    g.add_argument("--data", required=True, help="labelled JSONL/CSV to judge")
    g.add_argument("--limit", type=positive_int, help="judge the first N records")
    g.add_argument(
        "--task",
        help="PrExMe task (en_de, zh_en, summarization, ...; default: "
        "from the data file name) or, with --aspect, a signature",
    )
    g.add_argument(
        "--aspect",
        help="judge this aspect of a signature task with the HPSS factors instead of PrExMe's",
    )
    g.add_argument(
        "--factors",
        action="append",
        metavar="NAME=V1,V2",
        help="keep only these values of a factor (repeatable; a factor not named "
        "keeps all values), e.g. --factors 'format_requirement=0 to 100,easy "
        "token labels'",
    )
    g.add_argument(
        "--space",
        help="TOML file with task, aspect and a [factors] table (options given here override it)",
    )
    g.add_argument(
        "--examples",
        help="labelled JSONL/CSV for one-shot demonstrations "
        "(PrExMe POS/OS-CoT/OS-CoT-EM) or in-context examples",
    )
    g.add_argument("--dataset", help="dataset name in the table (default: the data file stem)")


def _add_grid_run_args(g: argparse.ArgumentParser) -> None:
    g.add_argument("--out", required=True, help="the CSV table (appended to; resumes)")
    g.add_argument("--items", help="per-item JSONL (default: OUT with .items.jsonl)")
    g.add_argument(
        "--max-tokens", type=positive_int, help="output token limit (PrExMe default 180)"
    )
    g.add_argument(
        "--max-strategies",
        type=positive_int,
        default=2000,
        help="refuse larger grids (default 2000)",
    )
    g.add_argument(
        "--keep-outputs", action="store_true", help="also store every raw output in the items file"
    )
    g.add_argument(
        "--overwrite",
        action="store_true",
        help="start afresh instead of resuming (deletes OUT and the items file)",
    )
    g.add_argument("--top", type=positive_int, default=5, help="best strategies to print (5)")
    g.add_argument(
        "--max-consecutive-failures",
        type=positive_int,
        default=5,
        metavar="N",
        help="stop the grid (resumably, exit 3) after N judge calls in a row failed with "
        "connection errors, timeouts or 5xx (default 5)",
    )
    g.add_argument(
        "--check-timeout",
        type=seconds,
        default=CHECK_TIMEOUT,
        metavar="SECONDS",
        help="how long the check call made before the first strategy waits for the "
        f"endpoint's answer (default {CHECK_TIMEOUT:g}; the judge calls keep their own timeout)",
    )


def add_analyze_parser(sub: Subparsers) -> None:
    """Add ``judgeopt analyze``."""
    an = sub.add_parser(
        "analyze",
        help="analyse a results table: best prompts, top-2%% patterns, stability",
        description=(
            "PrExMe-style analysis of a tidy results table (one row per strategy and "
            "setting, e.g. the output of `judgeopt grid` or PrExMe's published surface): best "
            "strategies with significance clusters, the share of each pattern among the top "
            "2% strategies, pattern rankings by median (mean, max, ...) and their stability "
            "(Kendall between rankings when the task, the model or another factor changes). "
            "Writes report.md, analysis.json and PNG figures to --out."
        ),
    )
    _add_analyze_input_args(an)
    _add_analyze_method_args(an)
    an.add_argument(
        "--max-candidates",
        type=positive_int,
        default=20,
        help="strategies per setting tested against the best with --items (20)",
    )
    an.add_argument(
        "--n-resamples", type=positive_int, default=1000, help="permutations per test (1000)"
    )
    an.add_argument("--seed", type=int, default=0, help="seed of the permutations (0)")
    an.add_argument("--no-figures", action="store_true", help="write no PNG figures")
    an.set_defaults(func=_cmd_analyze)


def _add_analyze_input_args(an: argparse.ArgumentParser) -> None:
    an.add_argument(
        "--results", required=True, help="results CSV, one row per strategy and setting"
    )
    an.add_argument(
        "--factors",
        type=csv_list,
        required=True,
        help="factor columns, e.g. base_prompt,task_description,format_requirement",
    )
    an.add_argument("--objective", required=True, help="metric column (higher is better)")
    an.add_argument(
        "--group", type=csv_list, default=[], help="columns that define a setting, e.g. model,task"
    )
    an.add_argument("--out", required=True, help="output directory")
    an.add_argument(
        "--items",
        help="per-item scores (JSONL or CSV; the key columns plus item "
        "id, judge and human score) for the permute-input test",
    )
    an.add_argument(
        "--item-columns",
        type=csv_list,
        default=list(ITEM_COLUMNS),
        metavar="ID,JUDGE,HUMAN",
        help=f"item id, judge and human score columns of --items "
        f"(default {','.join(ITEM_COLUMNS)}, as `judgeopt grid` writes)",
    )
    an.add_argument(
        "--n-column",
        default="auto",
        help="column with the number of items per row, for the Fisher-z "
        "approximation without --items ('auto': n_items, n_segments or n if "
        "present; 'none')",
    )


def _add_analyze_method_args(an: argparse.ArgumentParser) -> None:
    an.add_argument(
        "--test",
        choices=TESTS,
        default=None,
        help="significance test (default: permutation with --items, else fisher-z "
        "with an item count column, else none)",
    )
    an.add_argument(
        "--method",
        choices=("spearman", "kendall", "pearson"),
        default=None,
        help="correlation of the objective (default: from its name)",
    )
    an.add_argument(
        "--alpha",
        type=float,
        default=0.075,
        help="significance level of the clusters (PrExMe: 0.075)",
    )
    an.add_argument(
        "--top-fraction",
        type=float,
        default=0.02,
        help="top share of every setting whose patterns are counted (0.02)",
    )
    an.add_argument(
        "--aggregation",
        choices=AGGREGATIONS,
        default="median",
        help="aggregation of the stability heatmaps (median)",
    )
    an.add_argument(
        "--aggregations",
        type=csv_list,
        default=list(AGGREGATIONS),
        help=f"aggregations to compare (default {','.join(AGGREGATIONS)})",
    )
    an.add_argument(
        "--value-groups",
        type=json_object,
        default=None,
        help="JSON (inline or a file): factor -> category -> values counted "
        'together, e.g. \'{"format_requirement": {"textual labels": '
        '["easy token labels", "complex token labels"]}}\'',
    )
    an.add_argument(
        "--between",
        default=None,
        help="group column whose best strategies are compared (default: the first group column)",
    )
