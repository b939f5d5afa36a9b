"""The ``judgeopt`` command line."""

from __future__ import annotations

from ._errors import JudgeoptError
import argparse
import json
import logging
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import __version__

log = logging.getLogger("judgeopt")


class CLIError(JudgeoptError):
    """A user error reported as ``judgeopt: error: ...`` with exit status 2."""


#: Exit statuses: 0 done; 1 the compile finished but its judge is not trustworthy (see the
#: printed problems; the judge is written anyway); 2 a usage, data or configuration error;
#: 3 the model endpoint failed (a re-run continues from the checkpoint); 130 interrupted.
EXIT_UNTRUSTED = 1
EXIT_UNAVAILABLE = 3


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {text!r}"
                                         ) from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1, got {value:g}")
    return value


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
    from .bench import leave_one_out_priors, load_surfaces, run_search_benchmark

    try:
        surfaces = load_surfaces(args.surface, group=args.group, factors=args.factors,
                                 objective=args.objective)
        priors = None
        if args.priors_from:
            priors = leave_one_out_priors(surfaces, args.priors_from, match=args.priors_match,
                                          aggregation=args.priors_aggregation)
        elif any(m.endswith("+priors") for m in args.methods):
            raise ValueError("The `+priors` methods need --priors-from (a group column to "
                             "hold out, e.g. model).")
        result = run_search_benchmark(surfaces, args.methods, budget=args.budget,
                                      seeds=args.seeds, baseline=args.baseline, priors=priors,
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


def _model_string(args: argparse.Namespace, default_model: str | None = None) -> str:
    """The model string of ``--model`` / ``--router`` (``router:FILE`` or ``router:FILE#GROUP``
    with ``--router``, where ``--model`` names a model group of the file)."""
    router = getattr(args, "router", None)
    if router:
        if getattr(args, "api_base", None):
            raise CLIError("--api-base does not apply with --router: the endpoints come from "
                           f"the router config {router}")
        if args.model and (args.model.startswith(("local", "router:")) or "/" in args.model):
            raise CLIError(f"with --router, --model names a model group of {router} (its "
                           f"model_name), not a model string; got {args.model!r}")
        return f"router:{router}" + (f"#{args.model}" if args.model else "")
    if not args.model and default_model:
        from .lm import loadable_spec

        try:
            return loadable_spec(default_model)
        except ValueError as e:
            raise CLIError(str(e)) from e
    return str(args.model or default_model or "local")


def _lm_from_args(args: argparse.Namespace, default_model: str | None = None) -> Any:
    from .lm import RECOMMENDED_PARALLEL, make_lm
    from .lm import parse_local_model

    model = _model_string(args, default_model)
    kwargs: dict[str, Any] = {}
    if getattr(args, "n_ctx", None):
        kwargs["n_ctx"] = args.n_ctx
    parallel = getattr(args, "parallel", None)
    try:
        local = parse_local_model(model) is not None
    except ValueError as e:
        raise CLIError(str(e)) from e
    if local:
        kwargs["parallel"] = RECOMMENDED_PARALLEL if parallel is None else parallel
    elif parallel is not None:
        raise CLIError(f"--parallel only applies to local models ('local', 'local:...'), not "
                       f"to {model!r}; for a server, use --threads")
    if getattr(args, "logprobs", False):
        print("judgeopt: --logprobs is no longer needed (the embedded model gives the "
              "expected rating's logprobs without logits_all) and is ignored", file=sys.stderr)
    try:
        return model, make_lm(model, api_base=args.api_base, **kwargs)
    except ValueError as e:
        raise CLIError(str(e)) from e


def _load_data(path: str, limit: int | None, task: Any = None,
               aspect: str | None = None) -> list[Any]:
    """Records of ``path``; with a ``task``, also in the plain layout (its input fields and
    aspect names as bare columns, ``score`` for ``aspect``; docs/tasks.md, "Your data")."""
    from .data import load_records

    kwargs: dict[str, Any] = {}
    if task is not None and hasattr(task, "input_names"):
        kwargs["fields"] = list(task.input_names)
        scores = {a: a for a in getattr(task, "aspect_names", ())} \
            if getattr(task, "mode", "") == "pointwise" else {}
        if aspect is not None and scores and "score" not in scores:
            scores["score"] = aspect
        kwargs["scores"] = {k: v for k, v in scores.items() if k not in kwargs["fields"]}
    try:
        records = load_records(path, limit=limit, **kwargs)
    except (ValueError, OSError) as e:
        raise CLIError(f"--data {path}: {e}") from e
    if not records:
        raise CLIError(f"--data {path}: the file holds no records (expected one JSON object "
                       "per line, or a CSV header row and rows)")
    return records


def _compile_aspects(args: argparse.Namespace, task: Any) -> list[str]:
    """The aspects of ``--aspect a,b,c`` / ``--aspects all`` (each checked)."""
    if args.aspects is not None:
        if args.aspects == "all":
            return list(task.aspect_names)
        names = _csv_list(args.aspects)
    else:
        names = _csv_list(args.aspect)
    for name in names:
        task.aspect(name)
    if len(set(names)) != len(names):
        raise ValueError(f"--aspect lists an aspect more than once: {names!r}")
    return names


def _cmd_compile(args: argparse.Namespace) -> int:
    from .judge import load_task
    from .teleprompt import JudgeSearch, load_optimizer

    try:
        task = load_task(args.task)
        aspects = _compile_aspects(args, task)
        preset = load_optimizer(args.optimizer)
        JudgeSearch.from_config(preset, budget=args.budget, seed=args.seed,
                                racing=args.racing, selection=args.selection,
                                ensemble=args.ensemble,
                                max_consecutive_failures=args.max_consecutive_failures,
                                max_parse_failures=args.max_parse_failures
                                )  # validate before loading a model
    except (ValueError, argparse.ArgumentTypeError) as e:
        raise CLIError(str(e)) from e
    several = len(aspects) > 1
    root = Path(args.out)
    if several and root.suffix == ".json":
        raise CLIError(f"with several aspects ({', '.join(aspects)}), --out names a directory "
                       f"(one judge per aspect plus index.json); got {args.out!r}")
    # One LM for every aspect: the model is loaded once and its cache is shared.
    model, lm = _lm_from_args(args)
    written: dict[str, str] = {}
    problems: list[str] = []
    for aspect in aspects:
        out = root / f"{aspect}.json" if several else root
        if several:
            print(f"== {task.name} / {aspect}", flush=True)
        ckpt = (str(Path(args.checkpoint) / aspect) if several else args.checkpoint) \
            if args.checkpoint else f"{out}.ckpt"
        try:
            optimizer = JudgeSearch.from_config(
                preset, budget=args.budget, seed=args.seed, threads=args.threads,
                checkpoint_dir=ckpt, progress=not args.no_progress, racing=args.racing,
                selection=args.selection, ensemble=args.ensemble,
                max_consecutive_failures=args.max_consecutive_failures,
                max_parse_failures=args.max_parse_failures, restart=args.restart)
        except ValueError as e:
            raise CLIError(str(e)) from e
        args.resume_hint = (
            f"the judgements made so far for {aspect!r} are in the checkpoint {ckpt}"
            + (f" ({len(written)} of {len(aspects)} aspects written)" if several else "")
            + ": run the same command to resume")
        # NOTE: an endpoint failure (LMUnavailable) stops every aspect: exit 3, resumable.
        problems += _compile_aspect(args, task, aspect, model, lm, optimizer, out)
        written[aspect] = out.name
    if several:
        from .judge import write_judge_index

        index = write_judge_index(root / "index.json", task.name, written, model=model)
        print(f"wrote {index} ({len(written)} judges of {task.name}: {', '.join(written)})")
    if problems:
        print(f"judgeopt: the compiled judge is not trustworthy ({len(problems)} problem"
              f"{'s' if len(problems) > 1 else ''} above); it was written for inspection "
              f"(exit status {EXIT_UNTRUSTED}; --max-parse-failures sets the accepted share "
              "of answers without a rating)", file=sys.stderr)
        return EXIT_UNTRUSTED
    return 0


def _compile_aspect(args: argparse.Namespace, task: Any, aspect: str, model: str, lm: Any,
                    optimizer: Any, out: Path) -> list[str]:
    """Compile, test and write the judge of one aspect; the problems found (printed)."""
    from .evaluate import evaluate_against
    from .judge import JudgeProgram

    train = _load_data(args.data, args.limit, task, aspect)
    val = _load_data(args.valid_data, args.limit, task, aspect) if args.valid_data else None
    student = JudgeProgram(task, aspect, lm=lm)
    try:
        judge = optimizer.compile(student, trainset=train, valset=val)
    except ValueError as e:
        raise CLIError(str(e)) from e
    judge = judge.with_report(judge.report_.with_model(model))
    ensemble = judge.ensemble
    if ensemble is not None:
        ensemble.model_name = model
    test = None
    if args.test_data:
        test = _load_data(args.test_data, args.test_limit, task, aspect)
        baseline = judge.with_strategy(student.strategy)
        res, _, comp = evaluate_against(
            judge, baseline, test, threads=args.threads, progress=not args.no_progress,
            desc="test", max_consecutive_failures=optimizer.config.max_consecutive_failures)
        bad = res.parse_failures + res.call_failures
        too_many = [
            f"the chosen judge gave no rating for {bad} of {res.n} test items "
            f"({bad / res.n:.0%}), more than max_parse_failures="
            f"{optimizer.config.max_parse_failures:g}"
        ] if res.n and bad / res.n > optimizer.config.max_parse_failures else []
        judge = judge.with_report(judge.report_.with_test(
            res.summary(), res.items, comparison=comp.to_dict(), problems=too_many))
        if ensemble is not None:
            eres, _, ecomp = evaluate_against(ensemble, baseline, test,
                                              labels=("baseline", "ensemble"),
                                              threads=args.threads,
                                              progress=not args.no_progress, desc="test",
                                              max_consecutive_failures=optimizer.config
                                              .max_consecutive_failures)
            ensemble.test = eres.summary()
            ensemble.comparisons = {**(ensemble.comparisons or {}), "test": ecomp.to_dict()}
    if ensemble is not None:
        single = out.with_name(out.stem + ".single.json")
        judge.save(single)
        ensemble.save(out)
    else:
        judge.save(out)
    _print_compile_summary(judge, ensemble)
    if ensemble is not None:
        print(f"wrote {out} (the ensemble of {len(ensemble.members)} strategies) and {single} "
              "(the chosen single judge)")
    else:
        print(f"wrote {out}")
    if not args.no_report:
        from .report import write_judge_report

        report = out.with_name(out.stem + ".report")
        write_judge_report(judge, report)
        print(f"wrote the report {report / 'index.html'}")
    problems = list(judge.search_result.problems)
    for line in problems:
        print(f"judgeopt: problem ({aspect}): {line}", file=sys.stderr)
    return problems


def _print_comparisons(comparisons: dict[str, Any] | None) -> None:
    from .evaluate import Comparison

    for split, data in (comparisons or {}).items():
        comp = Comparison(**{**data, "gain_ci": tuple(data["gain_ci"])})
        for line in comp.lines(split):
            print(line)


def _print_compile_summary(judge: Any, ensemble: Any) -> None:
    res = judge.search_result
    sel = judge.selection or {}
    part = (f"on {sel['search_items']} search items" if sel.get("rule") in ("confirm", "veto")
            else f"on {sel.get('search_items', '?')} validation items")
    best = "nan" if res.best_score is None or math.isnan(res.best_score) else \
        f"{res.best_score:.4f}"
    resumed = (f", {res.calls_this_run} of them in this run" if res.calls_this_run != res.calls
               else "")
    print(f"search: {res.search}, {res.evaluations} strategies {part}; best {res.metric} "
          f"{best} ({res.calls} calls{resumed}, {res.prompt_tokens + res.completion_tokens} "
          f"tokens, {res.seconds:.0f} s)")
    print(f"  {'#':>3} {res.metric:>9} {'unparsed':>9} {'failed':>7}  strategy (changes from "
          "the first)")
    first = res.evaluation_summaries[0]["strategy"] if res.evaluation_summaries else {}
    for s in res.evaluation_summaries:
        value = s.get(res.metric)
        changed = ", ".join(f"{k}={v}" for k, v in s["strategy"].items() if first.get(k) != v)
        print(f"  {s['number'] + 1:>3} {'nan' if value is None else f'{value:.4f}':>9} "
              f"{s['parse_failures']:>4}/{s['n']:<4} {s['call_failures']:>3}/{s['n']:<3}  "
              f"{changed or '(the first)'}")
    if res.racing is not None:
        print(f"racing: {res.racing['dropped']} of {res.evaluations} strategies dropped early; "
              f"{res.racing['items_judged']} of {res.racing['items_full']} judgements made")
    for message in sel.get("messages", []):
        print(message)
    cost = sel.get("cost")
    if cost and sel.get("rule") in ("confirm", "veto"):
        print(f"confirmation: {sel['confirm_items']} items, {cost['calls']} calls, "
              f"{cost['seconds']:.0f} s")
    print(f"chosen strategy: {judge.strategy}")
    val = judge.validation
    if val is not None:
        print(f"chosen judge on the {val['n']} search items: {val['parse_failures']} unparsed, "
              f"{val['call_failures']} failed calls")
    if res.selection_calls:
        print(f"calls: {res.calls} for the search, {res.selection_calls} for choosing the "
              f"judge ({res.calls + res.selection_calls} in all)")
    _print_comparisons(judge.comparisons)
    if ensemble is not None:
        print(f"ensemble of {len(ensemble.members)} strategies:")
        _print_comparisons(ensemble.comparisons)


def _cmd_evaluate(args: argparse.Namespace) -> int:
    from .evaluate import check_label_spread, check_records, evaluate, evaluate_against
    from .judge import JudgeProgram, baseline_strategy, load_any_judge

    try:
        judge = load_any_judge(args.judge)
    except ValueError as e:
        raise CLIError(str(e)) from e
    records = _load_data(args.data, args.limit, judge.task, getattr(judge, "aspect", None))
    try:
        # Before the model is loaded: another task's data, or constant labels that score no
        # judge, would waste every call.
        check_records(judge, records)
        check_label_spread(records, judge.task, judge.aspect, "--data")
    except ValueError as e:
        raise CLIError(str(e)) from e
    _, lm = _lm_from_args(args, judge.model_name)
    judge.lm = lm
    other: Any = None
    labels = ("baseline", Path(args.judge).name)
    if args.baseline:
        other = JudgeProgram(judge.task, judge.aspect, baseline_strategy(judge.task), lm=lm)
    elif args.compare:
        try:
            other = load_any_judge(args.compare)
        except ValueError as e:
            raise CLIError(f"--compare: {e}") from e
        if (other.task.name, other.aspect) != (judge.task.name, judge.aspect):
            raise CLIError(f"--compare: {args.compare} judges {other.task.name}/{other.aspect}, "
                           f"{args.judge} judges {judge.task.name}/{judge.aspect}")
        # The other judge runs on its own model unless --model/--router names one for both.
        if args.model or getattr(args, "router", None) or other.model_name == judge.model_name:
            other.lm = lm
        else:
            _, other.lm = _lm_from_args(args, other.model_name)
        labels = (Path(args.compare).name, Path(args.judge).name)
    try:
        if other is None:
            result = evaluate(judge, records, threads=args.threads,
                              progress=not args.no_progress,
                              max_consecutive_failures=args.max_consecutive_failures)
            payload: dict[str, Any] = result.summary()
            print(json.dumps(payload, indent=2))
        else:
            result, ref, comp = evaluate_against(
                judge, other, records, labels=labels, threads=args.threads,
                progress=not args.no_progress,
                max_consecutive_failures=args.max_consecutive_failures)
            payload = {"judge": result.summary(), "other": ref.summary(),
                       "comparison": comp.to_dict()}
            for line in comp.lines(f"{Path(args.data).name}"):
                print(line)
    except ValueError as e:
        raise CLIError(str(e)) from e
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    if args.items:
        runs = [(labels[1], result)] if other is None else [(labels[1], result),
                                                             (labels[0], ref)]
        n = _write_items(args.items, runs, records)
        print(f"wrote {n} judged items to {args.items}", file=sys.stderr)
    return 0


def item_rows(label: str, items: Sequence[Any], records: Sequence[Any]) -> list[dict[str, Any]]:
    """One JSON-ready row per judged item (``judgeopt evaluate --items``).

    ``status`` is ``ok`` (a rating or verdict was read), ``unparsed`` (the answer held none:
    ``parse_error`` says why, ``raw`` is the answer) or ``failed`` (the call failed: ``error``).
    """
    inputs = {r.id: r.inputs for r in records}
    rows = []
    for item in items:
        status = "failed" if item.error else ("unparsed" if item.score is None else "ok")
        rows.append({"id": item.id, "judge": label, "prediction": item.score,
                     "human": item.human, "status": status, "parse_error": item.parse_error,
                     "error": item.error, "raw": item.raw, "inputs": inputs.get(item.id)})
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


def _cmd_report(args: argparse.Namespace) -> int:
    from .report import write_judge_report

    out = Path(args.out) if args.out else Path(args.judge).with_suffix(".report")
    try:
        files = write_judge_report(args.judge, out, figures=not args.no_figures)
    except ValueError as e:
        raise CLIError(str(e)) from e
    pngs = [f.name for f in files if f.suffix == ".png"]
    print(f"wrote {files[0]}" + (f" and {', '.join(pngs)}" if pngs else " (no figures)"))
    return 0


def _cmd_init(args: argparse.Namespace) -> int:
    from .judge import JudgeTask
    from .starter import starter_task

    out = Path(args.out) if args.out else Path(Path(args.data).stem + ".toml")
    if out.exists() and not args.force:
        raise CLIError(f"{out} exists; choose another --out or pass --force to overwrite it")
    try:
        text = starter_task(args.data, name=args.name or out.stem)
        task = JudgeTask.from_toml(text, source=str(out))
    except (ValueError, OSError) as e:
        raise CLIError(str(e)) from e
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out}: task {task.name!r}, inputs {list(task.input_names)!r}, judged "
          f"{list(task.judged_fields)!r}, aspects {list(task.aspect_names)!r}")
    print(f"edit the criteria in {out}, then: judgeopt compile --task {out} --aspect "
          f"{task.aspect_names[0]} --data {args.data} --out judge.json")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from .judge import (
        baseline_strategy,
        hpss_strategy,
        load_task,
        render_template,
    )
    from .search import Strategy

    try:
        if args.judge:
            from .judge import JudgeEnsemble, load_any_judge

            loaded = load_any_judge(args.judge)
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
                print("# placeholders: " + ", ".join("{" + n + "}"
                                                     for n in data["placeholders"]))
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


def _infer_prexme_task(dataset: str) -> str | None:
    from .judge import PREXME_TASKS

    name = dataset.lower().replace("-", "_")
    found = [t for t in PREXME_TASKS if t in name]
    return found[0] if len(found) == 1 else None


def _cmd_grid(args: argparse.Namespace) -> int:
    from .grid import (
        GridConfig,
        GridError,
        load_grid_config,
        parse_factor_options,
        run_grid,
        select_subspace,
    )
    from .judge import JudgeProgram, PrExMeProgram, load_task
    from .judge import ONE_SHOT_BASE_PROMPTS, ZERO_SHOT_BASE_PROMPTS

    try:
        config = load_grid_config(args.space) if args.space else GridConfig()
        selection: dict[str, Any] = dict(config.factors)
        selection.update(parse_factor_options(args.factors or []))
    except GridError as e:
        raise CLIError(str(e)) from e
    dataset = args.dataset or Path(args.data).stem
    aspect = args.aspect or config.aspect
    task_name = args.task or config.task or (None if aspect else _infer_prexme_task(dataset))
    if task_name is None:
        raise CLIError(f"cannot tell the task from the dataset name {dataset!r}: give --task "
                       "(a PrExMe task such as zh_en, or a signature with --aspect)")
    records = _load_data(args.data, args.limit)
    examples = _load_data(args.examples, None) if args.examples else None
    program: Any
    try:
        if aspect is None:
            program = PrExMeProgram(task_name, examples=examples,
                                    max_tokens=args.max_tokens or 180)
            if examples is None and "base_prompt" not in selection:
                # Without examples, "every base prompt" means the zero-shot ones.
                selection["base_prompt"] = list(ZERO_SHOT_BASE_PROMPTS)
                print(f"grid: no --examples, so only the zero-shot base prompts (the one-shot "
                      f"{', '.join(ONE_SHOT_BASE_PROMPTS)} need them)", file=sys.stderr)
        else:
            program = JudgeProgram(load_task(task_name), aspect, trainset=examples,
                                   max_tokens=args.max_tokens)
        space = select_subspace(program.space, selection)
    except (GridError, ValueError) as e:
        raise CLIError(str(e)) from e
    if aspect is None and examples is None:
        one_shot = [b for b in space["base_prompt"].values if b in ONE_SHOT_BASE_PROMPTS]
        if one_shot:
            raise CLIError(f"the one-shot base prompts {one_shot!r} need --examples (labelled "
                           "records to retrieve the demonstrations from)")
    if space.size > args.max_strategies:
        raise CLIError(f"the grid has {space.size} strategies, more than --max-strategies "
                       f"{args.max_strategies}: select values with --factors or raise the limit")
    model, program.lm = _lm_from_args(args)
    print(f"grid: {space.size} strategies x {len(records)} items of {dataset} with {model} "
          f"-> {args.out}", file=sys.stderr)
    args.resume_hint = (f"the strategies finished so far are in {args.out}: run the same "
                        "command to resume")
    try:
        result = run_grid(program, records, table=args.out, items=args.items, space=space,
                          dataset=dataset, model=model, threads=args.threads,
                          progress=not args.no_progress, keep_outputs=args.keep_outputs,
                          overwrite=args.overwrite)
    except GridError as e:
        raise CLIError(str(e)) from e
    per_call = f", {result.seconds / result.calls:.2f} s per call" if result.calls else ""
    print(f"{result.evaluated} strategies evaluated, {result.skipped} already done; "
          f"{result.calls} LM calls in {result.seconds:.0f} s{per_call}")
    metric = "accuracy" if getattr(program.task, "mode", "") == "pairwise" else "kendall"
    print(f"best by {metric}:")
    for row in result.best(metric, k=args.top):
        value = f"{float(row[metric]):.3f}" if row[metric] else "nan"
        print(f"  {value:>6}  unparsed {row['n_unparsed']:>3}/{row['n']}  "
              + ", ".join(f"{n}={row[n]}" for n in space.names))
    print(f"wrote {result.table} and {result.items}")
    return 0


def _cmd_analyze(args: argparse.Namespace) -> int:
    import csv

    from .analysis import analyze, figures_available, load_items, load_results, write_report

    n_column = None if args.n_column == "none" else args.n_column
    if n_column == "auto":
        try:
            with open(args.results, newline="", encoding="utf-8") as fh:
                header = next(csv.reader(fh), [])
        except OSError as e:
            raise CLIError(f"--results {args.results}: {e}") from e
        n_column = next((c for c in ("n_items", "n_segments", "n") if c in header), None)
    try:
        table = load_results(args.results, factors=args.factors, objective=args.objective,
                             group=args.group, n_column=n_column)
        items = None
        if args.items:
            item_id, judge, human = args.item_columns
            items = load_items(args.items, columns=table.dimensions, item_column=item_id,
                               judge_column=judge, human_column=human)
        analysis = analyze(
            table, items=items, fraction=args.top_fraction, aggregation=args.aggregation,
            aggregations=args.aggregations, value_groups=args.value_groups,
            between=args.between, test=args.test, method=args.method, alpha=args.alpha,
            max_candidates=args.max_candidates, n_resamples=args.n_resamples, seed=args.seed)
    except ValueError as e:
        raise CLIError(str(e)) from e
    if not args.no_figures and not figures_available():
        print("analyze: matplotlib is not installed, so no figures are drawn "
              "(pip install 'judgeopt[report]')", file=sys.stderr)
    files = write_report(analysis, args.out, figures=not args.no_figures)
    for line in analysis.findings:
        print(f"- {line}")
    pngs = sum(1 for f in files if f.suffix == ".png")
    print(f"wrote {files[0]}, {files[1].name} and {pngs} figures in {Path(args.out)}")
    return 0


def _cmd_glassbox(args: argparse.Namespace) -> int:
    from . import glassbox

    records = _load_data(args.data, args.limit)
    try:
        with glassbox.make_backend(
            args.model or "local", backend=args.backend, api_base=args.api_base,
            n_threads=args.n_threads, n_ctx=args.n_ctx, dtype=args.dtype,
            prompt_logprobs=args.prompt_logprobs,
        ) as backend:
            result = glassbox.compute_features(
                records, backend, args.features, instruction_field=args.instruction_field,
                instruction_template=args.instruction_template, response_field=args.field,
                reference_field=args.reference_field, system=args.system, topk=args.topk,
                vocab_size=args.vocab_size, n_ensemble=args.n_ensemble, seed=args.seed,
                progress=not args.no_progress)
        corr = glassbox.correlate_features(result, level=args.level)
    except (ValueError, ImportError) as e:
        raise CLIError(str(e)) from e
    print(corr.table())
    print(f"{len(result.ids)} items, {len(result.errors)} failed, {result.seconds:.1f} s "
          f"({result.backend}, {result.model})")
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        payload = {**result.to_dict(), "correlations": corr.to_dict()}
        out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {out}")
    return 0


class _Stopped(Exception):
    """SIGINT or SIGTERM reached `judgeopt serve`."""


def _cmd_serve(args: argparse.Namespace) -> int:
    import signal
    import time

    from .lm import start_servers
    from .lm import parse_local_model
    from .lm import DEFAULT_SERVE_SETTINGS

    try:
        model = parse_local_model(args.model) or args.model
    except ValueError as e:
        raise CLIError(str(e)) from e
    settings = dict(DEFAULT_SERVE_SETTINGS)
    if args.routing_strategy:
        settings["routing_strategy"] = args.routing_strategy
    if args.num_retries is not None:
        settings["num_retries"] = args.num_retries

    def stop_now(signum: int, frame: Any) -> None:
        raise _Stopped(signal.Signals(signum).name)

    handled = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, stop_now) for sig in handled}
    group = None
    try:
        group = start_servers(
            model, replicas=args.replicas, engine=args.engine, config_path=args.out,
            n_threads=args.threads, n_ctx=args.n_ctx, ports=args.ports, alias=args.alias,
            logits_all=args.logits_all, model_name=args.model_name, router_settings=settings)
        each = f", {args.threads} thread(s) each" if args.threads else ""
        print(f"judgeopt serve: {len(group.servers)} {args.engine} server(s) of {model} on "
              f"127.0.0.1{each}", flush=True)
        for server in group.servers:
            print(f"  {server.api_base}  pid {server.pid}", flush=True)
        print(f"wrote {group.config_path} (model group {group.model_name!r}, "
              f"routing {settings.get('routing_strategy')})")
        # About two calls in flight per replica keep every one busy (docs/lm.md, Concurrency).
        threads = 2 * len(group.servers)
        print("use it with:")
        print(f"  judgeopt compile --router {group.config_path} --threads {threads} "
              "--task ... --aspect ... --data ... --out judge.json")
        print(f"  judgeopt evaluate judge.json --router {group.config_path} --threads "
              f"{threads} --data ...")
        print(f"  make_lm({group.spec!r})  # Python")
        print("SIGINT (Ctrl-C) or SIGTERM stops every server.", flush=True)
        reported: set[int] = set()
        while True:
            time.sleep(1.0)
            for server in group.dead():
                if server.pid not in reported:
                    reported.add(server.pid)
                    print(f"judgeopt serve: the server at {server.api_base} (pid "
                          f"{server.pid}) exited; the router sends requests to the others",
                          file=sys.stderr, flush=True)
    except _Stopped as e:
        if group is None:
            # start_servers stopped the servers it had started.
            print(f"judgeopt serve: {e} during start-up; no server is left running",
                  file=sys.stderr)
            return 130
        print(f"judgeopt serve: {e}: stopping {len(group.servers)} server(s) (pids "
              f"{', '.join(str(p) for p in group.pids)})", flush=True)
    except ValueError as e:
        raise CLIError(str(e)) from e
    finally:
        for sig in handled:  # a second Ctrl-C must not interrupt the stopping
            signal.signal(sig, signal.SIG_IGN)
        try:
            if group is not None:
                group.stop()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import DEMO_PAIR, run_demo

    if args.task not in (None, DEMO_PAIR[0]) and args.aspect is None:
        raise CLIError("--task needs --aspect (the demo's default aspect belongs to its "
                       f"default task {DEMO_PAIR[0]!r})")
    args.resume_hint = ("the search's judgements made so far are in "
                        f"{Path(args.out_dir) / 'checkpoint'}: run the same command to resume "
                        "(the held-out test items are judged again)")
    try:
        return run_demo(model=_model_string(args), api_base=args.api_base,
                        task=args.task or DEMO_PAIR[0], aspect=args.aspect or DEMO_PAIR[1],
                        n_valid=args.n_valid, n_test=args.n_test, budget=args.budget,
                        threads=args.threads, parallel=args.parallel,
                        out_dir=Path(args.out_dir), progress=not args.no_progress)
    except (ValueError, FileNotFoundError) as e:
        raise CLIError(str(e)) from e


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``judgeopt`` command."""
    parser = argparse.ArgumentParser(
        prog="judgeopt",
        description="Find the best prompting strategy for an LLM-as-a-judge evaluator.",
    )
    parser.add_argument("--version", action="version", version=f"judgeopt {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    from .bench import METHODS, PRIOR_METHODS

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
    b.add_argument("--group", type=_csv_list, default=[],
                   help="columns that identify one surface, e.g. model,task")
    b.add_argument("--factors", type=_csv_list, required=True,
                   help="columns holding the factor values, e.g. base_prompt,task_description")
    b.add_argument("--objective", required=True, help="objective column (higher is better)")
    b.add_argument("--baseline", type=_json_object, default=None,
                   help="starting strategy as JSON (inline or a file); default: first values")
    b.add_argument("--methods", type=_csv_list, default=["auto", "hpss", "random", "greedy"],
                   help=f"comma-separated, from: {', '.join([*METHODS, *PRIOR_METHODS])}")
    b.add_argument("--budget", type=_positive_int, default=71,
                   help="unique evaluations per run (default 71)")
    b.add_argument("--seeds", type=_positive_int, default=20,
                   help="seeds 0..N-1 per method and surface (default 20)")
    b.add_argument("--priors-from", metavar="COLUMN", default=None,
                   help="for the +priors methods: estimate each surface's priors from the "
                        "surfaces with another value in this group column (e.g. model: "
                        "leave-one-model-out)")
    b.add_argument("--priors-match", metavar="COLUMNS", type=_csv_list, default=[],
                   help="with --priors-from: only from surfaces that share these group "
                        "columns (e.g. task)")
    b.add_argument("--priors-aggregation", choices=["median", "mean"], default="median",
                   help="how a value's scores are aggregated in each source (default median)")
    b.add_argument("--json", help="write the results as JSON to this file")
    b.add_argument("--per-surface", action="store_true",
                   help="also print the normalised regret of each surface")
    b.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    b.set_defaults(func=_cmd_bench_search)

    def add_model(p: argparse.ArgumentParser, default: str = "'local' (embedded "
                  "Qwen2.5-Coder-1.5B) by default") -> None:
        p.add_argument("--model", default=None,
                       help="'local', 'local:NAME' or 'local:PATH.gguf', or any LiteLLM model "
                            f"string; {default}")
        p.add_argument("--api-base", default=None, help="endpoint of a LiteLLM model")
        p.add_argument("--router", metavar="FILE", default=None,
                       help="judge through a LiteLLM Router over several servers, configured "
                            "by FILE (a LiteLLM model_list YAML/JSON; `judgeopt serve` writes "
                            "one); --model then names one of its model groups")
        p.add_argument("--threads", type=_positive_int, default=None,
                       help="judge calls in flight at once (default: --parallel for a local "
                            "model, else 1; with --router or a server, about the servers' "
                            "total parallel slots)")
        p.add_argument("--parallel", type=_positive_int, default=None,
                       help="local model: judge calls decoded together (default 8, "
                            "judgeopt.lm.RECOMMENDED_PARALLEL; 1: one at a time)")
        p.add_argument("--n-ctx", type=_positive_int, default=None,
                       help="context window of a local model (default 4096)")
        # NOTE: kept (hidden, ignored) so that older scripts still run.
        p.add_argument("--logprobs", action="store_true", help=argparse.SUPPRESS)
        p.add_argument("--no-progress", action="store_true", help="hide progress bars")

    c = sub.add_parser("compile", help="search the best prompting strategy and export the judge",
                       description="Search a judge's prompting strategy with HPSS (or another "
                                   "search) on labelled data and export the best judge as JSON.")
    c.add_argument("--task", required=True, help="signature TOML file or shipped task name")
    which = c.add_mutually_exclusive_group(required=True)
    which.add_argument("--aspect", help="the aspect to judge, or several: a,b,c (one judge "
                                        "per aspect in the --out directory, plus index.json)")
    which.add_argument("--aspects", metavar="all|a,b,c",
                       help="several aspects in one command ('all': every aspect of the "
                            "task), sharing the model and its cache; --out is then a "
                            "directory with <aspect>.json per aspect and index.json")
    c.add_argument("--data", required=True,
                   help="labelled JSONL/CSV: example pool and (without --valid-data) scoring set")
    c.add_argument("--valid-data", help="labelled data to score strategies on")
    c.add_argument("--test-data", help="held-out labelled data to evaluate the best judge on")
    c.add_argument("--limit", type=_positive_int, help="use the first N records of each file")
    c.add_argument("--test-limit", type=_positive_int, help="use the first N test records")
    c.add_argument("--optimizer", default="auto",
                   help="optimizer preset TOML or name: auto (default; judgeopt's search), "
                        "hpss (the paper's algorithm), greedy, stepwise, random, quick, "
                        "racing (auto with racing)")
    c.add_argument("--budget", type=_positive_int, help="override the preset's budget")
    c.add_argument("--seed", type=int, help="override the preset's seed")
    c.add_argument("--racing", action=argparse.BooleanOptionalAction, default=None,
                   help="race candidates: judge each on a growing prefix of the validation set "
                        "and drop it once it cannot reach the population (default: the "
                        "preset's [racing] setting, off in the shipped presets but 'racing')")
    c.add_argument("--checkpoint", help="checkpoint directory (default: OUT.ckpt); a re-run "
                                        "with the same data, settings and model resumes "
                                        "from it")
    c.add_argument("--restart", action="store_true",
                   help="discard the checkpoint and start afresh (needed when it belongs to a "
                        "run with other data, settings or model)")
    c.add_argument("--max-consecutive-failures", type=_positive_int, default=None, metavar="N",
                   help="stop the compile (resumably, exit 3) after N judge calls in a row "
                        "failed with connection errors, timeouts or 5xx (default: the "
                        "preset's, 5)")
    c.add_argument("--max-parse-failures", type=_share, default=None, metavar="SHARE",
                   help="largest share of the chosen judge's answers without a rating "
                        "before the compile exits with 1 (default: the preset's, 0.25)")
    c.add_argument("--selection", choices=("confirm", "veto", "best"), default=None,
                   help="how the judge is chosen (default: the preset's, confirm): 'confirm' "
                        "searches on half the scoring set and keeps a strategy only if its "
                        "gain over the baseline is confirmed on the other half; 'veto' keeps "
                        "the best search score unless the other half shows it worse than the "
                        "baseline; 'best' keeps the best validation score (biased upward)")
    c.add_argument("--ensemble", type=_positive_int, default=None, metavar="M",
                   help="export the mean of the M best strategies' z-normalised ratings as "
                        "one judge (OUT; the chosen single judge goes to OUT stem + "
                        ".single.json)")
    c.add_argument("--out", required=True, help="the exported judge (JSON); with several "
                                                "aspects a directory")
    c.add_argument("--no-report", action="store_true",
                   help="do not write the HTML report (OUT stem + .report/index.html)")
    add_model(c)
    c.set_defaults(func=_cmd_compile)

    e = sub.add_parser("evaluate", help="evaluate an exported judge on labelled data")
    e.add_argument("judge", help="exported judge JSON")
    e.add_argument("--data", required=True, help="labelled JSONL/CSV")
    e.add_argument("--limit", type=_positive_int, help="use the first N records")
    e.add_argument("--json", help="also write the summary to this file")
    e.add_argument("--items", metavar="OUT.jsonl",
                   help="write one JSON line per judged item: id, judge, prediction, human "
                        "score, status (ok / unparsed / failed), parse_error, error, raw "
                        "answer and inputs (with --baseline/--compare: both judges' items)")
    against = e.add_mutually_exclusive_group()
    against.add_argument("--baseline", action="store_true",
                         help="also evaluate the task's MT-Bench baseline prompt on the same "
                              "items and report the paired gain with its bootstrap interval")
    against.add_argument("--compare", metavar="OTHER.json",
                         help="also evaluate another exported judge (or ensemble) on the same "
                              "items and report the paired difference with its interval")
    e.add_argument("--max-consecutive-failures", type=_positive_int, default=5, metavar="N",
                   help="stop (exit 3) after N judge calls in a row failed with connection "
                        "errors, timeouts or 5xx: the endpoint is down (5)")
    add_model(e, default="default: the model the judge records (its `model`, e.g. "
                         "'local:qwen2.5-coder-1.5b'), else 'local'")
    e.set_defaults(func=_cmd_evaluate)

    rp = sub.add_parser(
        "report", help="write a compiled judge's HTML report and PNG figures",
        description="Write DIR/index.html (self-contained) and PNG figures of an exported "
                    "judge: the search trace with the best so far and the baseline, each "
                    "factor value's mean score with intervals, the gain over the baseline with "
                    "its interval, judge vs human on the test items, and the chosen prompt.")
    rp.add_argument("judge", help="exported judge JSON")
    rp.add_argument("--out", help="the report directory (default: JUDGE stem + .report)")
    rp.add_argument("--no-figures", action="store_true", help="write the HTML only")
    rp.set_defaults(func=_cmd_report)

    it = sub.add_parser(
        "init", help="write a starting task TOML from a labelled CSV/JSONL file",
        description="Read a data file's columns and write a task signature to edit: text "
                    "columns become input fields (the last one is judged), numeric columns "
                    "aspects with the score range seen in the data; a label column (a/b/tie) "
                    "makes a pairwise task.")
    it.add_argument("--data", required=True, help="labelled CSV or JSONL (plain columns such "
                                                  "as question,answer,helpfulness work)")
    it.add_argument("--out", help="the TOML to write (default: DATA stem + .toml here)")
    it.add_argument("--name", help="the task's name (default: the TOML's stem)")
    it.add_argument("--force", action="store_true", help="overwrite an existing --out")
    it.set_defaults(func=_cmd_init)

    s = sub.add_parser("show", help="print a judge's rendered prompt",
                       description="Print the messages of an exported judge (every artifact "
                                   "filled in, placeholders for the item's fields), or of a "
                                   "task's strategy.")
    s.add_argument("judge", nargs="?", help="exported judge JSON")
    s.add_argument("--task", help="signature TOML file or shipped task name")
    s.add_argument("--aspect", help="the aspect")
    s.add_argument("--strategy", help="'baseline' (default), a JSON object or a JSON file")
    s.add_argument("--template", action="store_true",
                   help="for a judge file: show the template with the artifacts as "
                        "placeholders ({icl_examples}, ...) instead of the filled messages")
    s.set_defaults(func=_cmd_show)

    g = sub.add_parser(
        "grid", help="evaluate every strategy of a (sub)space on a dataset (resumable)",
        description=(
            "Judge a labelled sample with every strategy of a factor space (PrExMe's prompt "
            "templates by default, or an HPSS task with --aspect) and write a tidy CSV (one "
            "row per strategy: kendall, tie-corrected kendall, pearson, spearman, n, "
            "unparsed, calls, seconds) plus a per-item JSONL. A re-run with the same "
            "arguments skips the finished strategies."),
    )
    g.add_argument("--data", required=True, help="labelled JSONL/CSV to judge")
    g.add_argument("--limit", type=_positive_int, help="judge the first N records")
    g.add_argument("--task", help="PrExMe task (en_de, zh_en, summarization, ...; default: "
                                  "from the data file name) or, with --aspect, a signature")
    g.add_argument("--aspect", help="judge this aspect of a signature task with the HPSS "
                                    "factors instead of PrExMe's")
    g.add_argument("--factors", action="append", metavar="NAME=V1,V2",
                   help="keep only these values of a factor (repeatable; a factor not named "
                        "keeps all values), e.g. --factors 'format_requirement=0 to 100,easy "
                        "token labels'")
    g.add_argument("--space", help="TOML file with task, aspect and a [factors] table "
                                   "(options given here override it)")
    g.add_argument("--examples", help="labelled JSONL/CSV for one-shot demonstrations "
                                      "(PrExMe POS/OS-CoT/OS-CoT-EM) or in-context examples")
    g.add_argument("--dataset", help="dataset name in the table (default: the data file stem)")
    g.add_argument("--out", required=True, help="the CSV table (appended to; resumes)")
    g.add_argument("--items", help="per-item JSONL (default: OUT with .items.jsonl)")
    g.add_argument("--max-tokens", type=_positive_int,
                   help="output token limit (PrExMe default 180)")
    g.add_argument("--max-strategies", type=_positive_int, default=2000,
                   help="refuse larger grids (default 2000)")
    g.add_argument("--keep-outputs", action="store_true",
                   help="also store every raw output in the items file")
    g.add_argument("--overwrite", action="store_true",
                   help="start afresh instead of resuming (deletes OUT and the items file)")
    g.add_argument("--top", type=_positive_int, default=5, help="best strategies to print (5)")
    add_model(g)
    g.set_defaults(func=_cmd_grid)

    from .analysis import AGGREGATIONS, ITEM_COLUMNS, TESTS

    an = sub.add_parser(
        "analyze", help="analyse a results table: best prompts, top-2%% patterns, stability",
        description=(
            "PrExMe-style analysis of a tidy results table (one row per strategy and "
            "setting, e.g. the output of `judgeopt grid` or PrExMe's published surface): best "
            "strategies with significance clusters, the share of each pattern among the top "
            "2% strategies, pattern rankings by median (mean, max, ...) and their stability "
            "(Kendall between rankings when the task, the model or another factor changes). "
            "Writes report.md, analysis.json and PNG figures to --out."),
    )
    an.add_argument("--results", required=True, help="results CSV, one row per strategy "
                                                      "and setting")
    an.add_argument("--factors", type=_csv_list, required=True,
                    help="factor columns, e.g. base_prompt,task_description,format_requirement")
    an.add_argument("--objective", required=True, help="metric column (higher is better)")
    an.add_argument("--group", type=_csv_list, default=[],
                    help="columns that define a setting, e.g. model,task")
    an.add_argument("--out", required=True, help="output directory")
    an.add_argument("--items", help="per-item scores (JSONL or CSV; the key columns plus item "
                                    "id, judge and human score) for the permute-input test")
    an.add_argument("--item-columns", type=_csv_list, default=list(ITEM_COLUMNS),
                    metavar="ID,JUDGE,HUMAN",
                    help=f"item id, judge and human score columns of --items "
                         f"(default {','.join(ITEM_COLUMNS)}, as `judgeopt grid` writes)")
    an.add_argument("--n-column", default="auto",
                    help="column with the number of items per row, for the Fisher-z "
                         "approximation without --items ('auto': n_items, n_segments or n if "
                         "present; 'none')")
    an.add_argument("--test", choices=TESTS, default=None,
                    help="significance test (default: permutation with --items, else fisher-z "
                         "with an item count column, else none)")
    an.add_argument("--method", choices=("spearman", "kendall", "pearson"), default=None,
                    help="correlation of the objective (default: from its name)")
    an.add_argument("--alpha", type=float, default=0.075,
                    help="significance level of the clusters (PrExMe: 0.075)")
    an.add_argument("--top-fraction", type=float, default=0.02,
                    help="top share of every setting whose patterns are counted (0.02)")
    an.add_argument("--aggregation", choices=AGGREGATIONS, default="median",
                    help="aggregation of the stability heatmaps (median)")
    an.add_argument("--aggregations", type=_csv_list, default=list(AGGREGATIONS),
                    help=f"aggregations to compare (default {','.join(AGGREGATIONS)})")
    an.add_argument("--value-groups", type=_json_object, default=None,
                    help="JSON (inline or a file): factor -> category -> values counted "
                         "together, e.g. '{\"format_requirement\": {\"textual labels\": "
                         "[\"easy token labels\", \"complex token labels\"]}}'")
    an.add_argument("--between", default=None,
                    help="group column whose best strategies are compared (default: the "
                         "first group column)")
    an.add_argument("--max-candidates", type=_positive_int, default=20,
                    help="strategies per setting tested against the best with --items (20)")
    an.add_argument("--n-resamples", type=_positive_int, default=1000,
                    help="permutations per test (1000)")
    an.add_argument("--seed", type=int, default=0, help="seed of the permutations (0)")
    an.add_argument("--no-figures", action="store_true", help="write no PNG figures")
    an.set_defaults(func=_cmd_analyze)

    gb = sub.add_parser(
        "glassbox", help="glass-box (token-probability) features and their correlation "
                         "with human scores",
        description="Score each record's (instruction, response) pair with a model's token "
                    "probabilities (SentProb, Softmax-Ent/Var/combo, ensembles, reference "
                    "features; Huang et al. 2024) and correlate each feature with every "
                    "human aspect. Local models give the full vocabulary; servers only "
                    "top-k logprobs (pass --topk for the approximation); attention "
                    "features need --backend transformers.")
    gb.add_argument("--data", required=True, help="labelled JSONL/CSV")
    gb.add_argument("--field", default="response", help="input field of the scored response")
    gb_instr = gb.add_mutually_exclusive_group(required=True)
    gb_instr.add_argument("--instruction-field", help="input field of the instruction")
    gb_instr.add_argument("--instruction-template",
                          help="instruction built from input fields, e.g. "
                               "'Summarize the article: {source}'")
    gb.add_argument("--reference-field", help="input field of a reference answer")
    gb.add_argument("--system", help="system message before the instruction")
    gb.add_argument("--features", type=_csv_list,
                    default=["sentprob", "softmax_ent", "softmax_var", "softmax_combo"],
                    help="comma-separated features (default sentprob,softmax_ent,"
                         "softmax_var,softmax_combo); see docs/glassbox.md")
    gb.add_argument("--model", default=None,
                    help="'local' (default), 'local:NAME', 'local:PATH.gguf', "
                         "'local:HF_FOLDER' (transformers only) or a LiteLLM model string")
    gb.add_argument("--backend", choices=["llama.cpp", "transformers", "litellm"], default=None,
                    help="how to run the model (default: llama.cpp for local models, LiteLLM "
                         "otherwise); 'transformers' runs a local model with CPU torch and "
                         "gives attention weights (attn_ent_min, attn_ent_avg; needs "
                         "pip install 'judgeopt[transformers]')")
    gb.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                    help="weights of the transformers backend (default float32)")
    gb.add_argument("--api-base", default=None, help="endpoint of a LiteLLM model")
    gb.add_argument("--prompt-logprobs", action="store_true",
                    help="vLLM only: score given texts through its prompt logprobs")
    gb.add_argument("--topk", type=_positive_int, default=None,
                    help="Softmax-Ent from the top-K logprobs (approximation; the variance "
                         "features have none)")
    gb.add_argument("--vocab-size", type=_positive_int, default=None,
                    help="the model's vocabulary size, for --topk with a server")
    gb.add_argument("--n-ensemble", type=_positive_int, default=10,
                    help="forward passes of the ensemble features (10)")
    gb.add_argument("--seed", type=int, default=0, help="seed of the ensembles (0)")
    gb.add_argument("--level", choices=["dataset", "group"], default="dataset",
                    help="correlation level (dataset)")
    gb.add_argument("--limit", type=_positive_int, help="use the first N records")
    gb.add_argument("--n-threads", type=_positive_int, default=None,
                    help="CPU threads of a local model (default $JUDGEOPT_THREADS or 2)")
    gb.add_argument("--n-ctx", type=_positive_int, default=None,
                    help="context window of a local model (default 4096)")
    gb.add_argument("--json", help="write the features and correlations to this file")
    gb.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    gb.set_defaults(func=_cmd_glassbox)

    from .lm import ENGINES

    sv = sub.add_parser(
        "serve", help="start local llama.cpp or vLLM servers on 127.0.0.1 and write a "
                      "router config",
        description=(
            "Start REPLICAS inference servers of one model on 127.0.0.1 (free ports unless "
            "--ports), write a LiteLLM Router config listing them as one model group (--out), "
            "print how to use it, and stay in the foreground: SIGINT (Ctrl-C) or SIGTERM "
            "stops every server. Then judge through all of them with "
            "`judgeopt compile --router FILE --threads N ...`."))
    sv.add_argument("--model", required=True,
                    help="a registry model (qwen2.5-coder-1.5b, qwen2.5-coder-0.5b, "
                         "smollm2-135m; 'local:NAME' works too) or a .gguf file; with "
                         "--engine vllm also a Hugging Face model folder or hub id")
    sv.add_argument("--replicas", type=_positive_int, default=2, help="servers to start (2)")
    sv.add_argument("--threads", type=_positive_int, default=None,
                    help="CPU threads per server (default $JUDGEOPT_THREADS or 2; replicas x "
                         "threads should not exceed the cores)")
    sv.add_argument("--n-ctx", type=_positive_int, default=4096,
                    help="context window per server (4096; vLLM's --max-model-len)")
    sv.add_argument("--ports", type=lambda t: [_positive_int(x) for x in _csv_list(t)],
                    default=None, help="comma-separated port per replica (default: free ports)")
    sv.add_argument("--engine", choices=sorted(ENGINES), default="llama.cpp",
                    help="inference runtime: llama.cpp (default) or vllm (needs a vLLM "
                         "environment: $JUDGEOPT_VLLM_PYTHON, see scripts/install_vllm.sh)")
    sv.add_argument("--out", default="servers.yaml",
                    help="the router config to write (servers.yaml)")
    sv.add_argument("--alias", default=None,
                    help="served model name (default: the model name or file stem)")
    sv.add_argument("--model-name", default="judge",
                    help="the config's model group (judge)")
    sv.add_argument("--routing-strategy", default=None,
                    help="LiteLLM routing strategy (default least-busy; e.g. simple-shuffle)")
    sv.add_argument("--num-retries", type=int, default=None,
                    help="the Router's retries of a failed request (2)")
    sv.add_argument("--logits-all", action=argparse.BooleanOptionalAction, default=True,
                    help="keep the logits that logprobs need (default on; --no-logits-all "
                         "saves memory)")
    sv.set_defaults(func=_cmd_serve)

    d = sub.add_parser("demo", help="compile a judge on a few labelled items with the embedded "
                                    "model and test it against the MT-Bench baseline on held-out "
                                    "items")
    d.add_argument("--task", default=None,
                   help="task of the shared data (default: the demo's pair, sfres)")
    d.add_argument("--aspect", default=None, help="the task's aspect (default: naturalness)")
    d.add_argument("--n-valid", type=_positive_int, default=40,
                   help="items to compile on: half search, half confirmation (40)")
    d.add_argument("--n-test", type=_positive_int, default=100, help="held-out test items (100)")
    d.add_argument("--budget", type=_positive_int, default=6, help="strategies to try (6)")
    d.add_argument("--out-dir", default="runs/demo", help="where the judge and checkpoint go")
    add_model(d)
    d.set_defaults(func=_cmd_demo)
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
    """Entry point of the ``judgeopt`` command."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
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
        return _run(args)
    finally:
        progress.removeHandler(handler)
        progress.setLevel(saved[0])
        progress.propagate = saved[1]
        teleprompt.removeFilter(_not_reported)


def _not_reported(record: logging.LogRecord) -> bool:
    return not getattr(record, "judgeopt_reported", False)


def _run(args: argparse.Namespace) -> int:
    from ._signals import interrupt_reason, sigterm_as_interrupt
    from .lm import LMUnavailable

    try:
        # SIGTERM (how a `nohup ... &` run is stopped) ends the command as Ctrl-C does, so
        # it can say what was kept; `serve` sets its own handlers inside.
        with sigterm_as_interrupt():
            return int(args.func(args))
    except KeyboardInterrupt as e:
        # A long command sets `resume_hint` once it has something to resume from.
        hint = getattr(args, "resume_hint", None)
        print(f"judgeopt {args.command}: stopped ({interrupt_reason(e)})"
              + (f"; {hint}" if hint else ""), file=sys.stderr, flush=True)
        return 130
    except CLIError as e:
        print(f"judgeopt: error: {e}", file=sys.stderr)
        return 2
    except LMUnavailable as e:
        print(f"judgeopt: error: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
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
