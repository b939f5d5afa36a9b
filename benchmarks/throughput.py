"""Judge-call throughput with concurrency: judgeopt's evaluate against raw LiteLLM calls.

Starts two llama.cpp servers of one model (1 CPU thread each) with
``judgeopt.lm.start_servers`` (the code of ``judgeopt serve``), and measures completed calls
per second at several concurrency levels C for two targets:

* ``router``: both servers behind a ``litellm.Router`` (one target);
* ``single``: the first server alone.

and two arms on the same items, the same rendered judge messages and the same decoding
parameters:

* ``raw``: C threads calling ``litellm.Router.completion`` (router) or ``litellm.completion``
  (single) on the pre-rendered messages, no cache;
* ``judgeopt``: ``evaluate(JudgeProgram, records, threads=C)`` through a ``RouterLM``
  (router) or a ``JudgeLM`` (single), each cell with a fresh, empty response cache (so its
  writes are part of the measured cost; nothing is ever read back from it).

A llama.cpp server reuses the key/value state of the prompt prefix it saw last, which would
favour the second arm on the same prompts. Each cell (round, target, level) therefore
judges its own items (distinct from every other cell's), both arms in the same submission
order, each arm after one short untimed prompt to every server (so both start from the same
server state), and the arm that goes first alternates from cell to cell and round to round.
Each arm's clients are built and warmed up once per run; judgeopt's LM has one fresh cache
for the run, so every timed call is a miss and a write.

``--overhead`` replaces the llama.cpp servers with two scripted OpenAI-compatible servers
(``judgeopt.testing.ScriptedServer``, in a child process) that answer at once: the rates are
then the clients' own cost per call, without the noise of model inference on a shared machine.

Prints a table and writes ``benchmarks/results/throughput.json`` (``throughput_overhead.json``
with ``--overhead``; per-cell rows included).

Usage:
    python benchmarks/throughput.py                  # Qwen2.5-Coder-0.5B, levels 1,2,4,8
    python benchmarks/throughput.py --quick          # SmolLM2-135M: plumbing only
    python benchmarks/throughput.py --overhead       # client cost per call, instant servers
    python benchmarks/throughput.py --overhead --latency --items 150   # per-call medians
    python benchmarks/throughput.py --levels 1,2,4 --rounds 3 --items 12
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judgeopt.data import Record, load_records
from judgeopt.evaluate import evaluate
from judgeopt.judge import JudgeProgram, baseline_strategy, load_task
from judgeopt.judge._program import ARTIFACTS_KEY
from judgeopt.lm import make_lm, start_servers, write_router_config
from judgeopt.lm._litellm import NO_KEY
from judgeopt_lab import shared_data_dir, write_json

ROOT = Path(__file__).resolve().parents[1]
DATA = shared_data_dir()
OUT = ROOT / "benchmarks" / "results" / "throughput.json"
WARM_UP = [{"role": "user", "content": "Reply with one digit: 7"}]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b", help="registry model or GGUF")
    p.add_argument("--quick", action="store_true", help="SmolLM2, 2 rounds of 6 items")
    p.add_argument(
        "--overhead",
        action="store_true",
        help="scripted instant servers instead of llama.cpp: the clients' own cost",
    )
    p.add_argument(
        "--delay",
        type=float,
        default=0.0,
        help="with --overhead: seconds each scripted request takes (0)",
    )
    p.add_argument(
        "--slots",
        type=int,
        default=0,
        help="with --overhead: requests a scripted server processes at once (0: no "
        "limit; 1 emulates a llama.cpp server)",
    )
    p.add_argument(
        "--latency",
        action="store_true",
        help="per-call latency of both clients, alternating call by call "
        "(medians; meant for --overhead)",
    )
    p.add_argument(
        "--paired",
        action="store_true",
        help="run both arms at once against the same servers (robust to the "
        "background load of a shared machine) instead of one after the other",
    )
    p.add_argument("--levels", default="1,2,4,8", help="concurrency levels (1,2,4,8)")
    p.add_argument("--targets", default="router,single", help="router,single")
    p.add_argument("--rounds", type=int, default=2, help="rounds per cell (2)")
    p.add_argument("--items", type=int, default=10, help="items per cell and arm (10)")
    p.add_argument("--task", default="sfres", help="signature task (sfres: short prompts)")
    p.add_argument("--aspect", default="naturalness")
    p.add_argument("--max-tokens", type=int, default=8, help="judge output budget (8)")
    p.add_argument("--server-threads", type=int, default=1, help="CPU threads per server (1)")
    p.add_argument("--seed", type=int, default=0, help="item shuffle seed")
    p.add_argument("--out", default=None, help=f"JSON output (default {OUT})")
    args = p.parse_args(argv)
    if args.quick:
        args.model, args.items = "smollm2-135m", 6
    if args.out is None:
        name = "throughput"
        if args.overhead:
            name += "_emulated" if args.delay else "_overhead"
        if args.latency:
            name += "_latency"
        args.out = str(OUT.with_name(name + ("_paired" if args.paired else "") + ".json"))
    args.levels = [int(x) for x in args.levels.split(",")]
    args.targets = args.targets.split(",")
    unknown = set(args.targets) - {"router", "single"}
    if unknown:
        p.error(f"unknown targets {sorted(unknown)}; allowed: router, single")
    return args


def judge_program(task_name: str, aspect: str, lm: Any, max_tokens: int) -> JudgeProgram:
    """The judge both arms run: the MT-Bench baseline without explanation (short answers)."""
    task = load_task(task_name)
    strategy = {**baseline_strategy(task).as_dict(), "cot": "none"}
    return JudgeProgram(task, aspect, strategy, lm=lm, max_tokens=max_tokens)


def rendered(judge: JudgeProgram, records: Sequence[Record]) -> list[list[dict[str, Any]]]:
    """The messages judgeopt sends for each record, in evaluate's submission order."""
    out = []
    for r in submission_order(records):
        fields = {f: str(r.inputs[f]) for f in judge.task.input_names}
        artifacts = judge.maker.prepare(judge.strategy, fields, sample_id=r.id, lm=judge.lm)
        out.append(judge.adapter.format(judge.signature, [], {**fields, ARTIFACTS_KEY: artifacts}))
    return out


def submission_order(records: Sequence[Record]) -> list[Record]:
    """evaluate's order (by group, then position), so both arms submit alike."""
    order = sorted(range(len(records)), key=lambda i: (records[i].group_id or "", i))
    return [records[i] for i in order]


def run_raw(
    call: Callable[[list[dict[str, Any]]], Any], messages: list[list[dict[str, Any]]], threads: int
) -> tuple[int, float]:
    """Completed calls and seconds of ``threads`` threads calling ``call`` on each message."""

    def one(m: list[dict[str, Any]]) -> bool:
        try:
            response = call(m)
        except Exception as exc:  # noqa: BLE001 - a failed call is counted, not fatal
            print(f"  raw call failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return False
        return bool(response.choices)

    started = time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=threads)
    try:
        done = sum(pool.map(one, messages))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return done, time.perf_counter() - started


@dataclass(frozen=True)
class Backend:
    """Where the two arms send their calls: a router config and its first server."""

    spec: str  # "router:FILE" over both servers
    model: str  # the first server alone: its LiteLLM model string ...
    api_base: str  # ... and endpoint
    description: str


@contextlib.contextmanager
def llama_backend(args: argparse.Namespace, tmp: Path) -> Iterator[Backend]:
    """Two llama.cpp servers started as `judgeopt serve` starts them."""
    with start_servers(
        args.model,
        replicas=2,
        n_threads=args.server_threads,
        n_ctx=2048,
        config_path=tmp / "servers.yaml",
        logits_all=False,
    ) as group:
        first = group.servers[0]
        yield Backend(
            group.spec,
            first.model,
            first.api_base,
            f"2 llama.cpp servers of {args.model} ({args.server_threads} thread each)",
        )


_SCRIPTED_CHILD = """
import sys, time
from judgeopt.testing import ScriptedServer
delay, slots = float(sys.argv[1]), int(sys.argv[2]) or None
servers = [ScriptedServer(name, reply=lambda body: "Rating: [[3]]", delay=delay, slots=slots)
           for name in ("A", "B")]
print(" ".join(s.api_base for s in servers), flush=True)
sys.stdin.read()  # until the parent closes the pipe
"""


@contextlib.contextmanager
def scripted_backend(args: argparse.Namespace, tmp: Path) -> Iterator[Backend]:
    """Two instant scripted servers in a child process (not competing for this GIL)."""
    child = subprocess.Popen(
        [sys.executable, "-c", _SCRIPTED_CHILD, str(args.delay), str(args.slots)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        bases = child.stdout.readline().split()
        path = write_router_config(
            tmp / "servers.yaml",
            [{"model": "openai/scripted", "api_base": b, "model_id": "scripted"} for b in bases],
            router_settings={"routing_strategy": "least-busy", "num_retries": 2},
        )
        what = (
            "answering at once (client cost only)"
            if not args.delay
            else f"taking {args.delay:g} s per request, {args.slots or 'unlimited'} at a time"
        )
        yield Backend(f"router:{path}", "openai/scripted", bases[0], f"2 scripted servers {what}")
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=10)


@dataclass
class Arms:
    """Both arms of one target, built once per run (LiteLLM registers a Router's routing
    callbacks globally, so a Router per cell would pile them up)."""

    target: str
    lm: Any  # judgeopt's LM: a RouterLM or a JudgeLM, with one fresh cache for the run
    raw_call: Callable[..., Any]  # raw LiteLLM: raw_call(messages, **params) -> response
    servers: list[tuple[str, str]]  # (model, api_base) of every server of the backend


def build_arms(backend: Backend, target: str, cache_dir: Path) -> Arms:
    import litellm

    if target == "router":
        lm = make_lm(backend.spec, cache=cache_dir / target)
        config = lm.config
        router = litellm.Router(
            model_list=[dict(e) for e in config.model_list], **dict(config.router_settings)
        )

        def raw_call(m: list[dict[str, Any]], **params: Any) -> Any:
            return router.completion(model=config.model_name, messages=m, **params)

        servers = [(d.model, d.api_base) for d in config.deployments]
    else:
        lm = make_lm(backend.model, api_base=backend.api_base, cache=cache_dir / target)

        def raw_call(m: list[dict[str, Any]], **params: Any) -> Any:
            return litellm.completion(
                model=backend.model,
                api_base=backend.api_base,
                api_key=NO_KEY,
                messages=m,
                num_retries=0,
                max_retries=0,
                **params,
            )

        servers = [(backend.model, backend.api_base)]
    for _ in range(2):  # warm both clients (connections, LiteLLM's lazy set-up), untimed
        raw_call(WARM_UP, max_tokens=4)
        lm.forward(messages=WARM_UP, max_tokens=4, cache=False)
    return Arms(target, lm, raw_call, servers)


def reset_servers(servers: Sequence[tuple[str, str | None]]) -> None:
    """One short prompt to each server, so every arm starts from the same server state (a
    llama.cpp server reuses the prompt prefix it saw last)."""
    import litellm

    for model, api_base in servers:
        litellm.completion(
            model=model,
            api_base=api_base,
            api_key=NO_KEY,
            messages=WARM_UP,
            max_tokens=1,
            num_retries=0,
            max_retries=0,
        )


def run_cell(
    arms: Arms,
    level: int,
    records: list[Record],
    args: argparse.Namespace,
    arm_order: Sequence[str],
) -> dict[str, Any]:
    lm = arms.lm
    judge = judge_program(args.task, args.aspect, lm, args.max_tokens)
    params = {
        k: v
        for k, v in {**lm.kwargs, **judge.lm_kwargs()}.items()
        if k not in ("rollout_id", "cache")
    }
    messages = rendered(judge, records)
    row: dict[str, Any] = {
        "target": arms.target,
        "level": level,
        "items": len(records),
        "arm_order": list(arm_order),
        "params": params,
    }
    answered: list[str] = []  # the deployment that answered each raw call

    def raw(m: list[dict[str, Any]]) -> Any:
        response = arms.raw_call(m, **params)
        answered.append(str((getattr(response, "_hidden_params", None) or {}).get("model_id")))
        return response

    for arm in arm_order:
        reset_servers(arms.servers)
        if arm == "raw":
            done, seconds = run_raw(raw, messages, level)
            row["raw_deployments"] = {k: answered.count(k) for k in sorted(set(answered))}
        else:
            lm.reset_stats()
            started = time.perf_counter()
            res = evaluate(judge, records, threads=level, progress=False)
            seconds = time.perf_counter() - started
            done = res.n - res.call_failures
            stats = lm.stats()
            row["judgeopt_stats"] = stats.to_dict()
            row["judgeopt_deployments"] = {k: v.calls for k, v in stats.deployments.items()}
            sent = [h["messages"] for h in lm.history[-len(records) :]]
            # The two arms send the same messages (any order).
            row["same_messages"] = sorted(map(json.dumps, sent)) == sorted(
                map(json.dumps, messages)
            )
        row[arm] = {"completed": done, "seconds": seconds, "rate": done / seconds}
    row["ratio"] = row["judgeopt"]["rate"] / row["raw"]["rate"]
    return row


def run_cell_paired(
    arms: Arms, level: int, records: list[Record], args: argparse.Namespace
) -> dict[str, Any]:
    """Both arms at once, ``level`` threads each, against the same servers.

    Both see the same background load at every moment. The raw arm takes the items in
    judgeopt's order rotated by half, so the two never ask for the same prompt at the same
    time (a server would answer the second from its prompt cache). Each arm's rate counts
    its calls completed before the first of the two finished, over that time.
    """
    lm = arms.lm
    judge = judge_program(args.task, args.aspect, lm, args.max_tokens)
    params = {
        k: v
        for k, v in {**lm.kwargs, **judge.lm_kwargs()}.items()
        if k not in ("rollout_id", "cache")
    }
    messages = rendered(judge, records)
    half = len(messages) // 2
    raw_messages = messages[half:] + messages[:half]
    reset_servers(arms.servers)
    done_at: dict[str, list[float]] = {"raw": [], "judgeopt": []}
    start = threading.Barrier(3)

    def raw_arm() -> None:
        def one(m: list[dict[str, Any]]) -> None:
            try:
                if arms.raw_call(m, **params).choices:
                    done_at["raw"].append(time.perf_counter())
            except Exception as exc:  # noqa: BLE001 - a failed call is not completed
                print(f"  raw call failed: {type(exc).__name__}: {exc}", file=sys.stderr)

        start.wait()
        with ThreadPoolExecutor(max_workers=level) as pool:
            list(pool.map(one, raw_messages))

    def judgeopt_arm() -> None:
        start.wait()
        evaluate(
            judge,
            records,
            threads=level,
            progress=False,
            on_item=lambda item: (
                done_at["judgeopt"].append(time.perf_counter()) if item.error is None else None
            ),
        )

    lm.reset_stats()
    workers = [threading.Thread(target=raw_arm), threading.Thread(target=judgeopt_arm)]
    for w in workers:
        w.start()
    start.wait()
    t0 = time.perf_counter()
    for w in workers:
        w.join()
    end = min(max(done_at["raw"], default=t0), max(done_at["judgeopt"], default=t0))
    row: dict[str, Any] = {
        "target": arms.target,
        "level": level,
        "items": len(records),
        "arm_order": ["paired"],
        "params": params,
        "same_messages": True,
        "judgeopt_stats": lm.stats().to_dict(),
    }
    for arm, times in done_at.items():
        done = sum(t <= end for t in times)
        row[arm] = {
            "completed": done,
            "seconds": end - t0,
            "rate": done / (end - t0),
            "all_completed": len(times),
        }
    row["ratio"] = row["judgeopt"]["rate"] / row["raw"]["rate"]
    return row


def client_latency(arms: Arms, records: list[Record], args: argparse.Namespace) -> dict[str, Any]:
    """Per-call latency of the two clients, one call of each in turn (``--latency``).

    Calls alternate raw, judgeopt, raw, judgeopt... on consecutive items, so a burst of
    background load hits both alike; medians and quartiles ignore the bursts. judgeopt's
    call is ``JudgeProgram.judge`` (render, DSPy's call path, the LM, parse, cache write).
    """
    judge = judge_program(args.task, args.aspect, arms.lm, args.max_tokens)
    params = {
        k: v
        for k, v in {**arms.lm.kwargs, **judge.lm_kwargs()}.items()
        if k not in ("rollout_id", "cache")
    }
    times: dict[str, list[float]] = {"raw": [], "judgeopt": []}
    for record, messages in zip(submission_order(records), rendered(judge, records), strict=True):
        started = time.perf_counter()
        arms.raw_call(messages, **params)
        times["raw"].append(time.perf_counter() - started)
        started = time.perf_counter()
        judge.judge(record.inputs, sample_id=record.id)
        times["judgeopt"].append(time.perf_counter() - started)
    out: dict[str, Any] = {"target": arms.target, "calls": len(records)}
    for arm, values in times.items():
        ordered = sorted(values)
        out[arm] = {
            f"p{q}_ms": 1000 * ordered[int(q / 100 * (len(ordered) - 1))] for q in (25, 50, 75)
        }
    out["median_extra_ms"] = out["judgeopt"]["p50_ms"] - out["raw"]["p50_ms"]
    return out


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    keys = sorted({(r["target"], r["level"]) for r in rows}, key=lambda k: (k[0] != "router", k[1]))
    for target, level in keys:
        cells = [r for r in rows if r["target"] == target and r["level"] == level]
        raw_done = sum(r["raw"]["completed"] for r in cells)
        raw_s = sum(r["raw"]["seconds"] for r in cells)
        j_done = sum(r["judgeopt"]["completed"] for r in cells)
        j_s = sum(r["judgeopt"]["seconds"] for r in cells)
        ratios = [r["ratio"] for r in cells]
        out.append(
            {
                "target": target,
                "level": level,
                "cells": len(cells),
                "calls_per_arm": raw_done,
                "raw_rate": raw_done / raw_s,
                "judgeopt_rate": j_done / j_s,
                "ratio": (j_done / j_s) / (raw_done / raw_s),
                "cell_ratio_min": min(ratios),
                "cell_ratio_max": max(ratios),
                "raw_ms_per_call": 1000 * raw_s / raw_done,
                "judgeopt_ms_per_call": 1000 * j_s / j_done,
            }
        )
    return out


def _report_latency(
    args: argparse.Namespace,
    arms: dict[str, Arms],
    pool: list[Record],
    t0: float,
    load_before: tuple[float, float, float],
) -> int:
    n = args.items * args.rounds
    results = [
        client_latency(arms[t], pool[i * n : (i + 1) * n], args) for i, t in enumerate(args.targets)
    ]
    print(
        f"\n{'target':<8}{'calls':>7}{'raw p25/p50/p75 ms':>22}{'judgeopt p25/p50/p75':>24}"
        f"{'extra p50':>11}"
    )
    for r in results:
        raw, jo = r["raw"], r["judgeopt"]
        print(
            f"{r['target']:<8}{r['calls']:>7}"
            f"{raw['p25_ms']:>8.1f}{raw['p50_ms']:>7.1f}{raw['p75_ms']:>7.1f}"
            f"{jo['p25_ms']:>10.1f}{jo['p50_ms']:>7.1f}{jo['p75_ms']:>7.1f}"
            f"{r['median_extra_ms']:>11.1f}"
        )
    load_after = os.getloadavg()
    print(f"\nload average {load_before[0]:.1f} before, {load_after[0]:.1f} after")
    out = Path(args.out)
    write_json(
        out,
        {
            "backend": "scripted" if args.overhead else args.model,
            "delay": args.delay,
            "task": args.task,
            "seconds": time.perf_counter() - t0,
            "load_average_before": load_before,
            "load_average_after": load_after,
            "latency": results,
        },
    )
    print(f"wrote {out}")
    return 0


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the servers are stopped on the way out.
    signal.signal(signal.SIGTERM, _interrupt)
    task = load_task(args.task)
    pool = [r for r in load_records(DATA / args.task / "full.jsonl") if args.aspect in r.scores]
    random.Random(args.seed).shuffle(pool)
    cells = args.rounds * len(args.targets) * (1 if args.latency else len(args.levels))
    if cells * args.items > len(pool):
        raise SystemExit(
            f"{cells} cells x {args.items} items need more than the {len(pool)} "
            f"records of {args.task}"
        )
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    make_backend = scripted_backend if args.overhead else llama_backend
    with tempfile.TemporaryDirectory() as tmp, make_backend(args, Path(tmp)) as backend:
        print(
            f"{backend.description}, task {task.name}/{args.aspect}, {args.items} items per "
            f"cell and arm, levels {args.levels}, {args.rounds} rounds",
            flush=True,
        )
        arms = {t: build_arms(backend, t, Path(tmp)) for t in args.targets}
        if args.latency:
            return _report_latency(args, arms, pool, t0, load_before)
        cell = 0
        for rnd in range(args.rounds):
            for target in args.targets:
                for level in args.levels:
                    items = pool[cell * args.items : (cell + 1) * args.items]
                    order = ("raw", "judgeopt") if (rnd + cell) % 2 == 0 else ("judgeopt", "raw")
                    if args.paired:
                        row = run_cell_paired(arms[target], level, items, args)
                    else:
                        row = run_cell(arms[target], level, items, args, order)
                    row["round"] = rnd
                    rows.append(row)
                    print(
                        f"  round {rnd} {target:>6} C={level}: raw {row['raw']['rate']:.3f}/s "
                        f"judgeopt {row['judgeopt']['rate']:.3f}/s ratio {row['ratio']:.3f} "
                        f"(arms: {'at once' if args.paired else order[0] + ' first'}; "
                        f"same messages: {row['same_messages']})",
                        flush=True,
                    )
                    cell += 1
    seconds = time.perf_counter() - t0
    summary = summarise(rows)
    print()
    print(
        f"{'target':<8}{'C':>3}{'calls':>7}{'raw calls/s':>13}{'judgeopt/s':>12}"
        f"{'ratio':>8}{'cell ratios':>16}{'ms/call raw':>13}{'judgeopt':>10}"
    )
    for s in summary:
        print(
            f"{s['target']:<8}{s['level']:>3}{s['calls_per_arm']:>7}{s['raw_rate']:>13.3f}"
            f"{s['judgeopt_rate']:>12.3f}{s['ratio']:>8.3f}"
            f"{s['cell_ratio_min']:>8.3f}-{s['cell_ratio_max']:.3f}"
            f"{s['raw_ms_per_call']:>13.1f}{s['judgeopt_ms_per_call']:>10.1f}"
        )
    for target in args.targets:
        cells = [r for r in rows if r["target"] == target]
        rates = {
            arm: sum(r[arm]["completed"] for r in cells) / sum(r[arm]["seconds"] for r in cells)
            for arm in ("raw", "judgeopt")
        }
        print(
            f"{target}: all levels together, judgeopt/raw = {rates['judgeopt'] / rates['raw']:.3f}"
        )
    load_after = os.getloadavg()
    print(
        f"\n{seconds / 60:.1f} minutes; load average {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after (2 cores, shared machine)"
    )
    result = {
        "model": "scripted (--overhead)" if args.overhead else args.model,
        "design": "paired (both arms at once)"
        if args.paired
        else "alternating (one arm after the other)",
        "task": args.task,
        "aspect": args.aspect,
        "server_threads": args.server_threads,
        "max_tokens": args.max_tokens,
        "levels": args.levels,
        "rounds": args.rounds,
        "items_per_cell": args.items,
        "seconds": seconds,
        "load_average_before": load_before,
        "load_average_after": load_after,
        "summary": summary,
        "cells": rows,
    }
    out = Path(args.out)
    write_json(out, result)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
