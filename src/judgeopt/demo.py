"""``judgeopt demo``: compile a judge on a few labelled items and test it against MT-Bench's.

The demo does what a user does with judgeopt, at a size that runs in minutes on a laptop CPU
with the embedded default model (Qwen2.5-Coder-1.5B-Instruct in process):

1. Take the labelled items of one task-aspect pair from the shared datasets and split them
   by whole groups exactly as ``benchmarks/e2e.py`` does (same seed, same sizes), then use
   the first ``n_valid`` items of the benchmark's *validation* part to compile on and the
   first ``n_test`` items of its *test* part to test on. The demo's setup was chosen from the
   benchmark's validation results, so its test items have chosen nothing.
2. Compile with the safe selection for few labels (:func:`demo_selection`: rule ``lcb``,
   chosen on the judgement bank): search the ``quick`` space (plus the ``expected``
   decoding when the LM gives logprobs; no explanation except the baseline's, which is what
   makes it fast: :func:`explanations_only_in_baseline`) on all the validation items, then
   keep the strategy whose paired gain over the baseline has the best lower bound (95 %,
   corrected for the number of strategies compared) if that bound is above zero, otherwise
   keep the baseline, and say so.
3. Judge the held-out test items with the MT-Bench baseline and the chosen judge and print
   both correlations with the paired bootstrap interval of the gain.

A re-run with the same ``out_dir`` resumes from the checkpoint and repeats no judgement.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .data import load_records, split_holdout

if TYPE_CHECKING:
    from .selection import SelectionConfig

__all__ = [
    "DEMO_PAIR",
    "E2E_SPLIT",
    "PER_GROUP",
    "demo_selection",
    "explanations_only_in_baseline",
    "find_shared_data",
    "run_demo",
]

DEMO_PAIR: tuple[str, str] = ("sfres", "naturalness")
"""The demo's task and aspect (see docs/benchmarks.md, "The demo", for why this pair)."""

E2E_SPLIT: dict[str, int] = {"n_valid": 100, "n_test": 200, "seed": 0}
"""The end-to-end benchmark's split (``benchmarks/e2e.py`` takes its defaults from here): the
demo draws its validation and test items from the same parts."""

PER_GROUP: dict[str, int] = {"summeval": 8}
"""Items kept per group in that split: SummEval has 16 summaries of each of 100 articles; 8 per
article (seeded) give twice as many articles for the same number of items, which a group-level
correlation needs."""


def demo_selection() -> SelectionConfig:
    """How the demo chooses its judge: ``lcb`` at 0.95 (``SelectionConfig()``), the judgement
    bank's safe rule at few labels. The default compile (``optimizers/auto.toml``) ships a
    guarded stack registered for 100 labelled items; the demo compiles on 41, where a fixed
    guard margin is too low (``docs/judge.md``, "How many labels you need")."""
    from .selection import SelectionConfig

    return SelectionConfig()


def find_shared_data() -> Path:
    """The shared datasets: ``$JUDGEOPT_DATA``, else ``../shared/data`` beside the project.

    Raises:
        FileNotFoundError: When neither exists.
    """
    env = os.environ.get("JUDGEOPT_DATA")
    candidates = [Path(env)] if env else []
    candidates += [
        Path(__file__).resolve().parents[3] / "shared" / "data",
        Path.cwd().parent / "shared" / "data",
        Path.cwd() / "shared" / "data",
    ]
    for c in candidates:
        if (c / "topical_chat").is_dir():
            return c
    raise FileNotFoundError(
        "The demo needs the shared datasets: set JUDGEOPT_DATA to the folder that holds "
        "topical_chat/, sfres/, ..., or put it at ../shared/data beside the project."
    )


def _head_groups(records: list[Any], n: int) -> list[Any]:
    """The shortest prefix of whole groups holding at least ``n`` records."""
    out: list[Any] = []
    seen: set[str] = set()
    for r in records:
        g = r.group_id or r.id
        if len(out) >= n and g not in seen:
            break
        seen.add(g)
        out.append(r)
    return out


def demo_split(
    task: str, n_valid: int, n_test: int, data_dir: Path | None = None
) -> tuple[list[Any], list[Any]]:
    """The demo's validation and test items of ``task`` (see the module docstring).

    Raises:
        ValueError: When ``n_valid`` or ``n_test`` exceeds the benchmark's parts.
    """
    if n_valid > E2E_SPLIT["n_valid"] or n_test > E2E_SPLIT["n_test"]:
        raise ValueError(
            f"the demo draws from benchmarks/e2e.py's split: n_valid must be at most "
            f"{E2E_SPLIT['n_valid']} and n_test at most {E2E_SPLIT['n_test']}; got "
            f"n_valid={n_valid}, n_test={n_test}"
        )
    root = data_dir or find_shared_data()
    records = load_records(root / task / "full.jsonl")
    valid, test = split_holdout(
        records,
        E2E_SPLIT["n_valid"],
        E2E_SPLIT["n_test"],
        seed=E2E_SPLIT["seed"],
        per_group=PER_GROUP.get(task),
    )
    return _head_groups(valid, n_valid), _head_groups(test, n_test)


def explanations_only_in_baseline(spec: Any, space: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Forbidden combinations that leave the explanation (``cot`` other than ``none``) to
    the baseline: every other strategy of ``space`` rates without one.

    Args:
        spec: The task (:class:`judgeopt.judge.JudgeTask`).
        space: The search's allowed values per factor (factors not named keep all theirs).

    Returns:
        Partial assignments for :class:`judgeopt.teleprompt.OptimizerConfig`'s ``forbid``.
    """
    from .judge import baseline_strategy, hpss_graph  # lazy: the judge package loads DSPy

    base = baseline_strategy(spec)
    full = hpss_graph(spec).space
    if "cot" not in full.names:
        return []
    out: list[dict[str, Any]] = []
    for c in space.get("cot", full["cot"].values):
        if c == "none":
            continue
        if c != base["cot"]:
            out.append({"cot": c})
            continue
        for name in full.names:
            if name == "cot":
                continue
            out += [
                {"cot": c, name: v} for v in space.get(name, full[name].values) if v != base[name]
            ]
    return out


def run_demo(
    *,
    model: str = "local",
    api_base: str | None = None,
    task: str = DEMO_PAIR[0],
    aspect: str = DEMO_PAIR[1],
    n_valid: int = 40,
    n_test: int = 100,
    budget: int = 6,
    out_dir: Path = Path("runs/demo"),
    threads: int | None = None,
    parallel: int | None = None,
    progress: bool = True,
) -> int:
    """Run the demo; print the search, the selection and the test comparison; write the judge.

    Args:
        model: Model string (``local`` is the embedded default).
        api_base: Server URL for a served model.
        task: Task (a folder of the shared data with ``full.jsonl``).
        aspect: The task's aspect.
        n_valid: Validation items (the compile searches and selects on all of them).
        n_test: Held-out test items.
        budget: Strategies the search evaluates.
        out_dir: Where the judge, its checkpoint and ``summary.json`` go.
        threads: Judge calls in flight at once (``None``: ``parallel`` for a local model,
            else 1).
        parallel: Local model: judge calls decoded together (``None``:
            :data:`judgeopt.lm.RECOMMENDED_PARALLEL`).
        progress: Show progress bars.

    Returns:
        The process exit status: 0, or 1 when the compile reported problems (every strategy
        failed, too many unparsed answers; ``CompileResult.problems``).
    """
    spec, valid, test = _demo_items(task, aspect, model, n_valid, n_test, budget)
    t0 = time.perf_counter()
    lm = _demo_lm(model, api_base, parallel)
    judge, student = _compile(spec, aspect, lm, valid, budget, out_dir, threads, progress)
    judge = judge.with_report(judge.report_.with_model(model))
    res, sel = judge.search_result, judge.selection or {}
    kept = judge.strategy == student.strategy
    why, checked = _print_choice(res, sel, kept, judge.strategy)
    comp = _test_judge(
        judge, judge.with_strategy(student.strategy), test, out_dir, threads, progress
    )
    seconds = time.perf_counter() - t0
    print()
    for line in comp.lines("held-out test"):
        print(line)
    print(_verdict(comp, kept, why, checked))
    problems = list(res.problems)
    for line in problems:
        print(f"problem: {line}")
    summary = {
        "task": task,
        "aspect": aspect,
        "model": model,
        "n_valid": len(valid),
        "n_test": len(test),
        "budget": budget,
        "kept_baseline": kept,
        "chosen_strategy": judge.strategy.as_dict(),
        "selection": sel,
        "test": comp.to_dict(),
        "problems": problems,
        "seconds": seconds,
    }
    _write_summary(lm, out_dir, summary)
    return 1 if problems else 0


def _demo_items(
    task: str, aspect: str, model: str, n_valid: int, n_test: int, budget: int
) -> tuple[Any, list[Any], list[Any]]:
    """The task and the demo's validation and test items, announced."""
    from .judge import load_task  # lazy: the judge package loads DSPy

    valid, test = demo_split(task, n_valid, n_test)
    spec = load_task(task)
    spec.aspect(aspect)  # a clear error for an unknown aspect before the model loads
    print(
        f"judgeopt demo: {task} / {aspect}, model {model}; {len(valid)} labelled items to "
        f"compile on, {len(test)} held-out test items, "
        f"{budget} strategies.",
        flush=True,
    )
    return spec, valid, test


def _demo_lm(model: str, api_base: str | None, parallel: int | None) -> Any:
    # Lazy: judgeopt.lm loads DSPy and LiteLLM, which `judgeopt demo --help` does not need.
    from .lm import RECOMMENDED_PARALLEL, make_lm, parse_local_model

    local = parse_local_model(model) is not None
    if parallel is not None and not local:
        raise ValueError(f"`parallel` only applies to local models, not to {model!r}")
    if local:
        return make_lm(model, api_base=api_base, parallel=parallel or RECOMMENDED_PARALLEL)
    return make_lm(model, api_base=api_base)


def _compile(
    spec: Any,
    aspect: str,
    lm: Any,
    valid: list[Any],
    budget: int,
    out_dir: Path,
    threads: int | None,
    progress: bool,
) -> tuple[Any, Any]:
    """The judge compiled on ``valid`` (the ``quick`` preset's space, the demo's selection),
    and the baseline judge it started from."""
    # Lazy: these load DSPy and LiteLLM, which `judgeopt demo --help` does not need.
    from .judge import JudgeProgram
    from .teleprompt import JudgeSearch, load_optimizer

    out_dir.mkdir(parents=True, exist_ok=True)
    preset = load_optimizer("quick")
    space = dict(preset.space)
    if getattr(lm, "supports_logprobs", False):
        # The probability-weighted rating carries the small model's signal
        # (docs/judge.md, "Decoding"); the embedded model gives it at greedy's cost.
        space["decoding"] = ["greedy", "expected"]
    # An explanation costs several times a rating (docs/benchmarks.md, section 3): only the
    # baseline writes one, so the demo fits in minutes.
    forbid = explanations_only_in_baseline(spec, space)
    optimizer = JudgeSearch.from_config(
        preset,
        budget=budget,
        space=space,
        forbid=forbid,
        selection=demo_selection(),
        threads=threads,
        checkpoint_dir=out_dir / "checkpoint",
        progress=progress,
    )
    student = JudgeProgram(spec, aspect, lm=lm)
    return optimizer.compile(student, trainset=valid), student


def _print_choice(res: Any, sel: dict[str, Any], kept: bool, chosen: Any) -> tuple[str, bool]:
    """Print the search and the chosen strategy; why the baseline would be kept, and whether a
    rule compared the strategies with it."""
    print()
    best = "n/a" if res.best_score is None else f"{res.best_score:.3f}"
    print(
        f"search: {res.evaluations} strategies on {sel.get('search_items', '?')} items, "
        f"best {res.metric} {best} (biased upward: the best of {res.evaluations} noisy "
        "scores)"
    )
    for message in sel.get("messages", []):
        print(message)
    rule = sel.get("rule")
    confirmed = rule in ("confirm", "veto") and bool(sel.get("confirm_items"))
    pooled = "candidates" in sel  # a pooled rule compared every strategy with the baseline
    why = (
        "no gain confirmed"
        if confirmed and rule == "confirm"
        else "the search's best was the baseline or was vetoed"
        if confirmed
        else f"rule {rule}: no strategy's gain over the baseline was shown above zero"
        if pooled
        else "the best validation score"
    )
    print(f"chosen: {f'the MT-Bench baseline ({why})' if kept else chosen}")
    return why, confirmed or pooled


def _verdict(comp: Any, kept: bool, why: str, checked: bool) -> str:
    lo, hi = comp.gain_ci
    if kept and checked:
        return f"The compile kept the baseline ({why}), so the judge is not made worse."
    if kept:
        return "The compile kept the baseline: no strategy scored better on the validation items."
    if lo is not None and lo > 0:
        return "The chosen judge agrees with the human labels better than the baseline."
    if hi is not None and hi < 0:
        return "The chosen judge is worse than the baseline on these items."
    return (
        f"The difference is within noise at n = {comp.n}: these items cannot tell "
        "the two judges apart."
    )


def _test_judge(
    judge: Any, baseline: Any, test: list[Any], out_dir: Path, threads: int | None, progress: bool
) -> Any:
    """``judge`` against ``baseline`` on the test items; the judge is saved with its results."""
    from .evaluate import evaluate_against  # lazy: judgeopt.evaluate loads DSPy

    tres, _, comp = evaluate_against(
        judge, baseline, test, threads=threads, progress=progress, desc="test"
    )
    judge = judge.with_report(
        judge.report_.with_test(tres.summary(), tres.items, comparison=comp.to_dict())
    )
    judge.save(out_dir / "judge.json")
    return comp


def _write_summary(lm: Any, out_dir: Path, summary: dict[str, Any]) -> None:
    """Print the time and the LM's calls, and write ``summary.json``."""
    seconds = summary["seconds"]
    stats = lm.stats() if hasattr(lm, "stats") else None
    calls = "" if stats is None else f", {stats.calls} LLM calls, {stats.total_tokens} tokens"
    print(
        f"\n{seconds / 60:.1f} minutes{calls}. Judge written to {out_dir / 'judge.json'} "
        f"(inspect it with: judgeopt show {out_dir / 'judge.json'})."
    )
    (out_dir / "summary.json").write_text(
        json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8"
    )
