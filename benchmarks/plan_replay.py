"""A compile's cost plan made again on compiles already measured, without a judge call.

``benchmarks/compile_cost.py`` stores, for each compile it ran, what the compile's plan said
before its first judge call, the timing it made that plan with, and what the compile spent.
This script rebuilds each of those compiles up to its first call (the same preset, budget,
seed, candidates and items; the embedded model loaded for its tokenizer only) and makes the
plan again with the recorded timing, two ways: the baseline's one-factor neighbours stand in
for the strategies the search will judge (``neighbours``, the plan before simulated paths),
and the search's own paths on made-up scores choose them (``paths``, the plan a compile
makes: :func:`judgeopt.teleprompt._planning.simulated_paths`). Each plan's calls, tokens and
seconds are compared with what the compile spent, as signed fractions of the actual.

The row of the method a compile used reproduces the plan it printed (a check of the
replay); entries whose compile printed no timing are compared on calls and tokens only.
Each ``paths`` plan also gives the 10th and 90th percentiles over its simulated paths
(``spread``), and whether the compile's actual figures fell within them.

``--source`` reads another file of compile_cost.py's schema: ``--heldout`` is the held-out
check (``benchmarks/results/compile_cost_heldout.json``: an embedded ``estimate`` and the
scripted hosted model's ``estimate_hosted`` with its ``other_pairs``, each replayed with the
LM it ran on).

    python benchmarks/plan_replay.py                        # every stored compile
    python benchmarks/plan_replay.py --entries full,estimate
    python benchmarks/plan_replay.py --heldout
    python benchmarks/plan_replay.py --entries full --retime-engine   # one batch of calls

``--retime-engine`` times each entry's baseline again as its compile did (one batch of
judge calls on the same items) and plans the search's paths with that batch read both ways:
its wall time with the one-token probe (the plan's timing), and the batch engine's clock
(``ENGINE_TIMING``); written under the ``engine_clock`` key.

Each entry also says how often the plan's simulated paths visit the costly kinds of strategy
(in-context examples, generated criteria, references, metrics questions, AutoCoT steps,
self-consistency) per path, against the strategies the compile judged (``visits``).

A timing read from the engine's clock is also planned with ``tail_once`` off (the row whose
name ends in ``_tail_every``): a run's explaining calls at the timed batch's own rate, its
wait for the longest answer paid in every call, as plans made before ``TAIL_ONCE``.

Writes ``benchmarks/results/plan_replay.json`` (``--heldout``: its ``heldout`` key) and
prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from compile_cost import (  # noqa: E402 - the script beside this one
    DEFAULT_OUT as COMPILE_COST,
)
from compile_cost import (  # noqa: E402
    HostedScriptedLM,
    _lm_maker,
    error,
    first_items,
    recording_student,
    validation_part,
)
from judgeopt.evaluate import Timing  # noqa: E402
from judgeopt.judge import load_task  # noqa: E402
from judgeopt.lm import RECOMMENDED_PARALLEL  # noqa: E402
from judgeopt.teleprompt import JudgeSearch, load_optimizer  # noqa: E402
from judgeopt.teleprompt._loop import CompileRun  # noqa: E402 - the compile up to its plan
from judgeopt.teleprompt._planning import (  # noqa: E402
    PLAN_PATHS,
    compile_plan,
    simulated_paths,
)
from judgeopt_lab import markdown_table, write_json  # noqa: E402
from timing_check import both_timings  # noqa: E402 - the two readings of one timed batch

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_OUT = RESULTS / "plan_replay.json"
HELDOUT = RESULTS / "compile_cost_heldout.json"
#: compile_cost.json's entries that hold one embedded compile.
ENTRIES = ("full", "full_8_in_flight", "full_fast", "estimate", "estimate_summeval")
FIGURES = ("calls", "tokens", "seconds")


def entry_run(entry: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(plan, actual)`` of a compile_cost.json entry (a ``full`` entry keeps its run)."""
    if "run" in entry:
        run = entry["run"]
        actual = {
            "calls": run["calls"],
            "tokens": run["prompt_tokens"] + run["completion_tokens"],
            "seconds": run["seconds"],
        }
        return run["report"]["plan"], actual
    actual = entry["actual"]
    return entry["plan"], {k: actual[k] for k in ("calls", "tokens", "seconds")}


def entry_items(name: str, entry: Mapping[str, Any], pair: str) -> list[Any]:
    """The items the entry's compile judged (the first of the e2e validation part)."""
    task = pair.split(":", 1)[0]
    if name.startswith("full"):
        return validation_part(task)[: int(entry["n_valid"])]
    return first_items(task, int(entry["plan"]["what"].split(" on ")[1].split()[0]))


def compile_run(
    task_name: str,
    aspect: str,
    items: Sequence[Any],
    settings: Mapping[str, Any],
    overrides: Mapping[str, Any],
    lm: Any,
) -> CompileRun:
    """A compile of ``task_name``/``aspect`` on ``items`` rebuilt up to its first call (its
    preset, budget and seed from ``settings``, the preset's fields ``overrides`` replaced):
    its search at the start, its plan's inputs, nothing judged."""
    opt = JudgeSearch.from_config(
        load_optimizer(settings["optimizer"]),
        budget=int(settings["budget"]),
        seed=int(settings["seed"]),
        progress=False,
        **dict(overrides),
    )
    student = recording_student(load_task(task_name), aspect, lm, old=False)
    return CompileRun(
        opt.config,
        student,
        trainset=list(items),
        valset=None,
        checkpoint_dir=None,
        restart=False,
        check_lm=False,
        progress=False,
        plan=False,
    )


def replay(
    name: str,
    entry: Mapping[str, Any],
    lm: Any,
    settings: Mapping[str, Any],
    *,
    retime: bool = False,
) -> dict[str, Any]:
    """The entry's compile rebuilt and planned again both ways (``settings``: its
    compile_cost.py settings; a hosted entry's other pairs carry only their pair).

    ``retime``: the baseline is timed again as the compile timed it (the same items, calls
    in flight and model; ``lm`` a fresh response cache: one batch of judge calls), read
    both ways (``timing_check.both_timings``: the batch's wall time with the probe, and the
    batch engine's clock), and the search's paths are planned with each."""
    pair = str(entry.get("pair") or settings["pair"])
    task_name, aspect = pair.split(":", 1)
    plan, actual = entry_run(entry)
    items = entry_items(name, entry, pair)
    run = compile_run(
        task_name, aspect, items, settings, dict(settings.get("new_overrides") or {}), lm
    )
    visits = visit_kinds(run, entry)  # before the plans ask the search for its next
    timing = Timing(**plan["timing"]) if plan.get("timing") else None
    hows: list[tuple[str, Timing | None]] = [("neighbours", timing), ("paths", timing)]
    timed_again: dict[str, Any] = {}
    if retime:
        threads = int(plan.get("in_flight") or run.config.threads or RECOMMENDED_PARALLEL)
        judge = run.base.with_strategy(run.student.strategy)
        records = run.plan.records(len(run.plan.units))
        one_batch, engine, _ = both_timings(judge, records, lm, threads)
        if one_batch is None or engine is None:
            raise SystemExit(f"{name}: the baseline could not be timed again")
        hows = [("paths_one_batch_again", one_batch), ("paths_engine", engine)]
        timed_again = {"one_batch": asdict(one_batch), "engine": asdict(engine)}
    if timing_is_clocked(hows[-1][1]):
        # The same engine timing with a run's explanations at the timed batch's own rate
        # (its wait for the longest answer in every call), as before ``tail_once``.
        name_every = f"{hows[-1][0]}_tail_every"
        hows.append((name_every, replace(hows[-1][1], tail_once=False)))  # type: ignore[arg-type]
    rows: dict[str, Any] = {"printed": _figures(plan)}
    for how, timed in hows:
        made = compile_plan(
            run.graph,
            run.base,
            run.student.strategy,
            run.plan.records(len(run.plan.units)),
            run.confirm_val,
            strategies_left=int(settings["budget"]),
            lm=run.lm,
            threads=run.config.threads,
            baseline_left=True,
            next_strategy=run.search.ask(),
            search=None if how == "neighbours" else run.search,
            # Without a recorded timing the plan counts calls and tokens only: a stand-in
            # timing keeps the replay from judging anything.
            timing=timed or Timing(seconds=1.0, prompt_tokens=1, completion_tokens=1),
        )
        rows[how] = _figures(made.to_dict(), timed=timed is not None)
        if how != "neighbours" and made.spread is not None:
            spread = {k: v for k, v in made.spread.items() if k in FIGURES}
            if timed is None:
                spread.pop("seconds", None)
            rows[how]["spread"] = {
                k: [round(lo, 1), round(hi, 1)] for k, (lo, hi) in spread.items()
            }
            rows[how]["within_spread"] = {
                k: bool(lo <= actual[k] <= hi) for k, (lo, hi) in spread.items()
            }
    errors = {how: {k: error(rows[how][k], actual[k]) for k in FIGURES} for how in rows}
    return {
        "visits": visits,
        "pair": pair,
        **({"timed_again": timed_again} if timed_again else {}),
        "model": settings.get("model", "local"),
        "budget": int(settings["budget"]),
        "optimizer": settings["optimizer"],
        "n_items": len(items),
        "actual": actual,
        "plans": rows,
        "errors": errors,
    }


#: Kinds of strategy that cost more than a rate-first judgement of the item alone.
COSTLY = {
    "examples": lambda d: bool(d.get("examples", 0)),
    "criteria_self": lambda d: d.get("criteria") == "self",
    "reference_self": lambda d: d.get("reference") == "self",
    "metrics": lambda d: d.get("metrics") == "on",
    "autocot": lambda d: d.get("autocot") == "on",
    "sc5": lambda d: d.get("decoding") == "sc5",
}


def visit_kinds(run: Any, entry: Mapping[str, Any]) -> dict[str, Any]:
    """How often the plan's simulated paths (:data:`PLAN_PATHS` of them, the plan's seed)
    visit each :data:`COSTLY` kind of strategy per path, against the strategies the
    compile judged with calls (the entry's per-strategy time check)."""
    paths = simulated_paths(run.search, PLAN_PATHS, np.random.default_rng(0))
    per_path = {
        k: round(sum(test(s.as_dict()) for p in paths for s in p) / len(paths), 2)
        for k, test in COSTLY.items()
    }
    checked = entry.get("time_model") or (entry.get("run") or {}).get("time_model") or {}
    judged = [json.loads(r["strategy"]) for r in checked.get("strategies", [])]
    actual = {k: sum(test(d) for d in judged) for k, test in COSTLY.items()}
    return {
        "paths": len(paths),
        "per_path": per_path,
        "judged_with_calls": len(judged),
        "judged": actual,
    }


def timing_is_clocked(timing: Timing | None) -> bool:
    """Whether ``timing`` was read from the batch engine's clock (``tail_once`` applies)."""
    return timing is not None and timing.engine is not None


def _figures(plan: Mapping[str, Any], *, timed: bool = True) -> dict[str, Any]:
    return {
        "calls": plan["calls"],
        "tokens": plan["prompt_tokens"] + plan["completion_tokens"],
        "seconds": plan.get("seconds") if timed else None,
    }


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:+.1f} %"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", default=",".join(ENTRIES), help=f"of {ENTRIES}")
    p.add_argument("--source", default=None, help="compile_cost.py's JSON (its default file)")
    p.add_argument("--heldout", action="store_true", help=f"replay {HELDOUT.name}")
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument(
        "--retime-engine",
        action="store_true",
        help="time each entry's baseline again on the engine's clock (judge calls: one batch "
        "per entry) and plan with that timing; written under the 'engine_clock' key",
    )
    args = p.parse_args(argv)
    source = Path(args.source or (HELDOUT if args.heldout else COMPILE_COST))
    stored = json.loads(source.read_text())
    names = [n for n in args.entries.split(",") if n]
    unknown = sorted(set(names) - set(ENTRIES))
    if unknown and not args.heldout:
        p.error(f"unknown entries {unknown}; choose from {ENTRIES}")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="judgeopt-plan-replay-") as tmp:
        make = _lm_maker("local", RECOMMENDED_PARALLEL, Path(tmp))
        embedded = make("replay")
        for name in ("estimate",) if args.heldout else names:
            if name not in stored or "settings" not in stored[name]:
                print(f"{name}: not in {source}", file=sys.stderr)
                continue
            if args.retime_engine:
                embedded = make(f"retime-{name}")  # a fresh response cache: judged again
            results[name] = replay(
                name, stored[name], embedded, stored[name]["settings"], retime=args.retime_engine
            )
        hosted = stored.get("estimate_hosted") if args.heldout else None
        if hosted and "settings" in hosted:
            model = hosted["settings"]["model"]
            lm = HostedScriptedLM(model, cache=Path(tmp) / "hosted", time_scale=0.0).lm
            settings = hosted["settings"]
            results[f"hosted {settings['pair']}"] = replay("estimate", hosted, lm, settings)
            for other in hosted.get("other_pairs", []):
                results[f"hosted {other['pair']}"] = replay("estimate", other, lm, settings)
    rows = []
    for name, r in results.items():
        for how in r["plans"]:
            e = r["errors"][how]
            f = r["plans"][how]
            inside = f.get("within_spread") or {}
            rows.append(
                [
                    name,
                    r["budget"],
                    how,
                    f["calls"],
                    f["tokens"],
                    *(_pct(e[k]) for k in FIGURES),
                    ", ".join(k for k in FIGURES if inside.get(k)) if inside else "",
                ]
            )
    header = ["entry", "budget", "plan", "calls", "tokens", "calls err", "tokens err", "s err"]
    print(markdown_table([*header, "actual within the spread"], rows))
    out = Path(args.out)
    key = "heldout" if args.heldout else "engine_clock" if args.retime_engine else "entries"
    kept = json.loads(out.read_text()) if out.is_file() else {}
    kept[key] = results
    kept.setdefault("sources", {})[key] = source.name
    write_json(out, kept)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
