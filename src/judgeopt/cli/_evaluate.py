"""``judgeopt evaluate`` and ``judgeopt show``: use an exported judge (score labelled data,
optionally against the baseline or another judge; print its prompt)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from ..evaluate import (
    CHECK_TIMEOUT,
    PLAN_WINDOW,
    call_cost,
    check_endpoint,
    check_label_spread,
    check_records,
    default_threads,
    evaluate,
    evaluate_against,
    plan_cost,
    plan_sample,
    same_calls,
    time_judgement,
    timed_runs,
)
from ..search import Strategy
from ._attacks import add_attack_args, check_attack_args, run_attacks
from ._common import (
    EXIT_UNTRUSTED,
    CLIError,
    Subparsers,
    add_model,
    add_spend_limits,
    lm_from_args,
    load_data,
    plan_first,
    positive_int,
    seconds,
    share,
)


def unrated_problem(label: str, result: Any, limit: float) -> str | None:
    """Why ``result`` (``label``'s judged items) is not trustworthy: more than ``limit`` of
    its answers gave no rating (the compile's gate, ``max_parse_failures``); ``None``: fine."""
    n = int(result.n or 0)
    bad = int(result.parse_failures or 0) + int(result.call_failures or 0)
    if not n or bad / n <= limit:
        return None
    return (
        f"{label} gave no rating for {bad} of {n} items ({bad / n:.0%}; "
        f"{result.parse_failures} unparsed, {result.call_failures} failed calls), more than "
        f"max_parse_failures={limit:g}: too many of its answers are not in the expected "
        "format (a model too small for the prompt, or a max_tokens too low); its scores "
        "rest on the few answers that parsed"
    )


def _cmd_evaluate(args: argparse.Namespace) -> int:
    attacks = check_attack_args(args)
    judge, records = _judge_and_records(args)
    _, lm = lm_from_args(args, judge.model_name)
    judge.lm = lm
    # One short call first, as compile and grid make: a dead or hung endpoint stops here
    # (exit 3) in seconds, not after every item's timeout.
    check_endpoint(lm, timeout=args.check_timeout, before="evaluating")
    if attacks is not None:
        run_attacks(args, judge, records, attacks)
        return 0
    other, labels = _other_judge(args, judge, lm)
    judges = [judge] if other is None else [judge, other]
    if plan_first(args, "judgeopt evaluate", lambda out: _print_plan(args, judges, records, out)):
        return 0
    result, ref, payload = _judge_records(args, judge, other, records, labels)
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    if args.items:
        runs = [(labels[1], result)] if other is None else [(labels[1], result), (labels[0], ref)]
        n = _write_items(args.items, runs, records)
        print(f"wrote {n} judged items to {args.items}", file=sys.stderr)
    return _gate(args, result, None if other is None else ref, labels)


def _judge_and_records(args: argparse.Namespace) -> tuple[Any, list[Any]]:
    """The exported judge and the records of ``--data``, checked before a model is loaded."""
    from ..judge import load_judge  # lazy: loads DSPy

    try:
        judge = load_judge(args.judge)
    except ValueError as e:
        raise CLIError(str(e)) from e
    records = load_data(args.data, args.limit, judge.task, getattr(judge, "aspect", None))
    try:
        # Before the model is loaded: another task's data, or constant labels that score no
        # judge, would waste every call.
        check_records(judge, records)
    except ValueError as e:
        raise CLIError(f"--data {args.data}: {e}") from e
    try:
        check_label_spread(records, judge.task, judge.aspect, "--data")
    except ValueError as e:
        raise CLIError(str(e)) from e
    return judge, records


def _other_judge(args: argparse.Namespace, judge: Any, lm: Any) -> tuple[Any, tuple[str, str]]:
    """The judge of ``--baseline`` or ``--compare`` (``None``: neither), and the labels of
    both judges."""
    from ..judge import JudgeProgram, baseline_strategy, load_judge  # lazy: loads DSPy

    other: Any = None
    labels = ("baseline", Path(args.judge).name)
    if args.baseline:
        other = JudgeProgram(judge.task, judge.aspect, baseline_strategy(judge.task), lm=lm)
    elif args.compare:
        try:
            other = load_judge(args.compare)
        except ValueError as e:
            raise CLIError(f"--compare: {e}") from e
        if (other.task.name, other.aspect) != (judge.task.name, judge.aspect):
            raise CLIError(
                f"--compare: {args.compare} judges {other.task.name}/{other.aspect}, "
                f"{args.judge} judges {judge.task.name}/{judge.aspect}"
            )
        # The other judge runs on its own model unless --model/--router names one for both.
        if args.model or getattr(args, "router", None) or other.model_name == judge.model_name:
            other.lm = lm
        else:
            _, other.lm = lm_from_args(args, other.model_name)
            check_endpoint(other.lm, timeout=args.check_timeout, before="evaluating")
        labels = (Path(args.compare).name, Path(args.judge).name)
    return other, labels


def _judge_records(
    args: argparse.Namespace, judge: Any, other: Any, records: list[Any], labels: tuple[str, str]
) -> tuple[Any, Any, dict[str, Any]]:
    """Judge ``records`` (against ``other`` if given) and print the summary or comparison;
    the judge's result, the other's (``None`` without one) and the JSON payload."""
    ref = None
    try:
        if other is None:
            result = evaluate(
                judge,
                records,
                threads=args.threads,
                progress=not args.no_progress,
                max_consecutive_failures=args.max_consecutive_failures,
                explain=args.explanations,
            )
            payload: dict[str, Any] = result.summary()
            print(json.dumps(payload, indent=2))
        else:
            result, ref, comp = evaluate_against(
                judge,
                other,
                records,
                labels=labels,
                threads=args.threads,
                progress=not args.no_progress,
                max_consecutive_failures=args.max_consecutive_failures,
                explain=args.explanations,
            )
            payload = {
                "judge": result.summary(),
                "other": ref.summary(),
                "comparison": comp.to_dict(),
            }
            for line in comp.lines(f"{Path(args.data).name}"):
                print(line)
    except ValueError as e:
        raise CLIError(str(e)) from e
    return result, ref, payload


#: Items whose prompts are counted for the plan (a sample of a larger file).
PLAN_ITEMS = 50


def _print_plan(
    args: argparse.Namespace, judges: Sequence[Any], records: Sequence[Any], stream: TextIO
) -> None:
    """Print what judging ``records`` will cost (on ``stream``) before the first judge
    call."""
    explain = bool(args.explanations)
    sample = plan_sample(records, PLAN_ITEMS)
    parts, timing, repeated = [], None, 0
    for k, judge in enumerate(judges):
        if any(same_calls(earlier, judge, sample) for earlier in judges[:k]):
            repeated += 1  # its answers are the earlier judge's, read from the cache
            continue
        # Judged and timed as the run judges (its calls in flight), read back from the cache.
        threads = args.threads or default_threads(judge.lm)
        timed = time_judgement(judge, records, judge.lm, explain=explain, threads=threads)
        timing = timed or timing
        cost = call_cost(
            judge, sample, judge.lm, timing=timing, explain=explain, window=records[:PLAN_WINDOW]
        )
        # A judge timed here judges its first items in the timed batch, the rest in a run.
        parts.append((cost, len(records), timed_runs(timed, len(records))))
    what = (
        f"{len(judges)} judges on {len(records)} items"
        if len(judges) > 1
        else f"{len(records)} items"
    )
    if repeated:
        what += ", one sending the other's prompts: read from the cache"
    plan = plan_cost(parts, judges[0].lm, timing=timing, what=what)
    print(f"judgeopt evaluate: {plan.line()}", file=stream, flush=True)


def _gate(args: argparse.Namespace, result: Any, ref: Any, labels: tuple[str, str]) -> int:
    """Exit status 1 (as compile's) when the judge rated too few items; the problems on
    stderr. The other judge's share (``--baseline`` / ``--compare``) is only reported."""
    limit = args.max_parse_failures
    if limit is None:
        from ..teleprompt import OptimizerConfig  # lazy: loads DSPy; the compile's default

        limit = float(OptimizerConfig.model_fields["max_parse_failures"].default)
    problem = unrated_problem(f"the judge {labels[1]}", result, limit)
    name = "the baseline" if args.baseline else f"the other judge {labels[0]}"
    other = None if ref is None else unrated_problem(name, ref, limit)
    for line in (problem, other):
        if line is not None:
            print(f"judgeopt: problem: {line}", file=sys.stderr)
    if problem is None:
        return 0
    print(
        f"judgeopt: the judge's scores on --data {args.data} are not trustworthy (exit "
        f"status {EXIT_UNTRUSTED}; --max-parse-failures sets the accepted share of answers "
        "without a rating)",
        file=sys.stderr,
    )
    return EXIT_UNTRUSTED


def item_rows(label: str, items: Sequence[Any], records: Sequence[Any]) -> list[dict[str, Any]]:
    """One JSON-ready row per judged item (``judgeopt evaluate --items``).

    ``status`` is ``ok`` (a rating or verdict was read), ``unparsed`` (the answer held none:
    ``parse_error`` says why, ``raw`` is the answer) or ``failed`` (the call failed: ``error``).
    """
    inputs = {r.id: r.inputs for r in records}
    rows = []
    for item in items:
        status = "failed" if item.error else ("unparsed" if item.score is None else "ok")
        rows.append(
            {
                "id": item.id,
                "judge": label,
                "prediction": item.score,
                "human": item.human,
                "status": status,
                "parse_error": item.parse_error,
                "error": item.error,
                "raw": item.raw,
                "inputs": inputs.get(item.id),
            }
        )
    return rows


def _write_items(path: str, runs: Sequence[tuple[str, Any]], records: Sequence[Any]) -> int:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w", encoding="utf-8") as fh:
        for label, result in runs:
            for row in item_rows(label, result.items, records):
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                n += 1
    return n


def _cmd_show(args: argparse.Namespace) -> int:
    # lazy: judgeopt.judge loads DSPy
    from ..judge import (
        baseline_strategy,
        hpss_strategy,
        load_task,
        render_template,
    )

    try:
        if args.judge:
            from ..judge import JudgeEnsemble, load_judge  # lazy: loads DSPy

            loaded = load_judge(args.judge)
            members = loaded.members if isinstance(loaded, JudgeEnsemble) else [loaded]
            for i, judge in enumerate(members):
                data = judge.export()
                if len(members) > 1:
                    print(f"## member {i + 1} of {len(members)}")
                print(f"# {data['task_name']} / {data['aspect']}: {judge.strategy}\n")
                if args.template:
                    if judge.task.system:
                        print(f"[system]\n{judge.task.system}\n")
                    print(f"[user]\n{data['template']}\n")
                    continue
                for message in data["messages"]:
                    print(f"[{message['role']}]\n{message['content']}\n")
                print("# placeholders: " + ", ".join("{" + n + "}" for n in data["placeholders"]))
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
            strategy = hpss_strategy(task, Strategy.from_json(text))
        print(f"# {task.name} / {args.aspect}: {strategy}\n")
        if task.system:
            print(f"[system]\n{task.system}\n")
        print(f"[user]\n{render_template(task, args.aspect, strategy)}")
    except ValueError as e:
        raise CLIError(str(e)) from e
    return 0


def add_evaluate_parser(sub: Subparsers) -> None:
    """Add ``judgeopt evaluate``."""
    e = sub.add_parser("evaluate", help="evaluate an exported judge on labelled data")
    e.add_argument("judge", help="exported judge JSON")
    e.add_argument("--data", required=True, help="labelled JSONL/CSV")
    e.add_argument("--limit", type=positive_int, help="use the first N records")
    e.add_argument("--json", help="also write the summary to this file")
    e.add_argument(
        "--items",
        metavar="OUT.jsonl",
        help="write one JSON line per judged item: id, judge, prediction, human "
        "score, status (ok / unparsed / failed), parse_error, error, raw "
        "answer and inputs (with --baseline/--compare: both judges' items)",
    )
    e.add_argument(
        "--explanations",
        action="store_true",
        help="let a judge that rates before it explains write its explanation too (into "
        "--items' raw answers); by default its calls stop at the end of the rating, which "
        "gives the same scores for a fraction of the tokens",
    )
    against = e.add_mutually_exclusive_group()
    against.add_argument(
        "--baseline",
        action="store_true",
        help="also evaluate the task's MT-Bench baseline prompt on the same "
        "items and report the paired gain with its bootstrap interval",
    )
    against.add_argument(
        "--compare",
        metavar="OTHER.json",
        help="also evaluate another exported judge (or ensemble) on the same "
        "items and report the paired difference with its interval",
    )
    e.add_argument(
        "--max-parse-failures",
        type=share,
        default=None,
        metavar="SHARE",
        help="largest share of the judge's answers without a rating before evaluate "
        "exits with 1, as compile does (default: compile's, 0.25)",
    )
    e.add_argument(
        "--check-timeout",
        type=seconds,
        default=CHECK_TIMEOUT,
        metavar="SECONDS",
        help="how long the check call made before judging waits for the endpoint's answer "
        f"({CHECK_TIMEOUT:g}; the judge calls keep their own timeout)",
    )
    e.add_argument(
        "--max-consecutive-failures",
        type=positive_int,
        default=5,
        metavar="N",
        help="stop (exit 3) after N judge calls in a row failed with connection "
        "errors, timeouts or 5xx: the endpoint is down (5)",
    )
    add_model(
        e,
        default="default: the model the judge records (its `model`, e.g. "
        "'local:qwen2.5-coder-1.5b'), else 'local'",
    )
    add_attack_args(e)
    add_spend_limits(e)
    e.set_defaults(func=_cmd_evaluate)


def add_show_parser(sub: Subparsers) -> None:
    """Add ``judgeopt show``."""
    s = sub.add_parser(
        "show",
        help="print a judge's rendered prompt",
        description="Print the messages of an exported judge (every artifact "
        "filled in, placeholders for the item's fields), or of a "
        "task's strategy.",
    )
    s.add_argument("judge", nargs="?", help="exported judge JSON")
    s.add_argument("--task", help="signature TOML file or shipped task name")
    s.add_argument("--aspect", help="the aspect")
    s.add_argument("--strategy", help="'baseline' (default), a JSON object or a JSON file")
    s.add_argument(
        "--template",
        action="store_true",
        help="for a judge file: show the template with the artifacts as "
        "placeholders ({icl_examples}, ...) instead of the filled messages",
    )
    s.set_defaults(func=_cmd_show)
