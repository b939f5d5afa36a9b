"""vLLM (CPU build, from its own venv) against llama.cpp in process, on the same judge calls.

One run, the same registry model (its GGUF for llama.cpp, the converted Hugging Face folder
for vLLM), the same thread count, the same Topical-Chat judge prompts (the MT-Bench baseline
strategy without CoT, scale 3, as rendered by judgeopt):

1. llama.cpp in process (``make_lm("local:NAME")``; ``logits_all=True`` only for the logprob
   calls, which need it): judge calls one at a time, greedy and with ``logprobs=True,
   top_logprobs=20`` (the ``expected`` decoding), and one long generation (decode speed);
2. vLLM: GGUF conversion (or the cached folder), server start-up, then the same calls one at a
   time, the greedy calls again with ``concurrency`` requests in flight (vLLM batches them),
   and the long generation.

llama.cpp runs first, before vLLM starts, so the two never share the cores. Every call bypasses
judgeopt's cache. Prints a table and writes JSON (default
``benchmarks/results/vllm_server.json``).

Usage:
    JUDGEOPT_VLLM_PYTHON=/work/venv-vllm/bin/python python benchmarks/vllm_server.py \
        [--model qwen2.5-coder-0.5b] [--items 8] [--threads 1] [--concurrency 4] \
        [--json benchmarks/results/vllm_server.json]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from judgeopt.data import load_records
from judgeopt.judge import baseline_strategy, load_task, render_messages
from judgeopt.lm import (
    convert_gguf_to_hf,
    find_vllm_python,
    make_lm,
    start_vllm_server,
)
from judgeopt_lab import shared_data_dir, write_json

ROOT = Path(__file__).resolve().parents[1]
DATA = shared_data_dir() / "topical_chat" / "valid.jsonl"
LONG = [{"role": "user", "content": "Write a 300-word story about a lighthouse keeper."}]


def _call(lm: Any, messages: list[dict[str, str]], **params: Any) -> dict[str, float]:
    started = time.perf_counter()
    response = lm.forward(messages=messages, cache=False, **params)
    seconds = time.perf_counter() - started
    usage = response.usage
    return {
        "seconds": seconds,
        "prompt_tokens": float(usage.prompt_tokens),
        "completion_tokens": float(usage.completion_tokens),
    }


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def _group_cpu(pgid: int) -> float:
    """CPU seconds used so far by the processes of a process group (vLLM and its engine)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ...
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / ticks


def _prefix_cache(api_base: str) -> dict[str, float]:
    """vLLM's prefix-cache counters (tokens queried and found cached) from /metrics."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(api_base.removesuffix("/v1") + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    found = {"queries": 0.0, "hits": 0.0}
    for line in text.splitlines():
        for key in found:
            if line.startswith(f"vllm:prefix_cache_{key}_total"):
                found[key] += float(line.rsplit(" ", 1)[1])
    return found


def _summary(
    calls: list[dict[str, float]], wall: float | None = None, cpu: float | None = None
) -> dict[str, float]:
    wall = sum(c["seconds"] for c in calls) if wall is None else wall
    extra = (
        {} if cpu is None else {"cpu_seconds": round(cpu, 1), "cores_used": round(cpu / wall, 2)}
    )
    return {
        **extra,
        "calls": len(calls),
        "wall_seconds": round(wall, 2),
        "median_call_seconds": round(statistics.median(c["seconds"] for c in calls), 3),
        "prompt_tokens": int(sum(c["prompt_tokens"] for c in calls)),
        "completion_tokens": int(sum(c["completion_tokens"] for c in calls)),
        "calls_per_minute": round(60 * len(calls) / wall, 1),
    }


def _workload(
    lm: Any,
    sets: dict[str, list[list[dict[str, str]]]],
    concurrency: int,
    max_tokens: int,
    cpu: Any,
    logprob_lm: Any = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def run(label: str, fn: Any, **params: Any) -> None:
        before = cpu()
        started = time.perf_counter()
        calls = fn(**params)
        wall = time.perf_counter() - started
        out[label] = _summary(calls, wall, cpu() - before)

    run("greedy", lambda: [_call(lm, m, max_tokens=max_tokens) for m in sets["greedy"]])
    run(
        "expected",
        lambda: [
            _call(logprob_lm or lm, m, max_tokens=max_tokens, logprobs=True, top_logprobs=20)
            for m in sets["expected"]
        ],
    )
    if concurrency > 1:

        def batch() -> list[dict[str, float]]:
            with ThreadPoolExecutor(concurrency) as pool:
                return list(
                    pool.map(lambda m: _call(lm, m, max_tokens=max_tokens), sets["concurrent"])
                )

        run(f"greedy_x{concurrency}", batch)
    before = cpu()
    long = _call(lm, LONG, max_tokens=256)
    out["long_generation"] = {
        "seconds": round(long["seconds"], 2),
        "completion_tokens": int(long["completion_tokens"]),
        "tokens_per_second": round(long["completion_tokens"] / long["seconds"], 1),
        "cores_used": round((cpu() - before) / long["seconds"], 2),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--python", default=None, help="the vLLM venv's python")
    parser.add_argument("--json", default=str(ROOT / "benchmarks/results/vllm_server.json"))
    args = parser.parse_args()

    env = find_vllm_python(args.python)
    task = load_task("topical_chat")
    strategy = baseline_strategy(task).replace(cot="none")
    records = load_records(DATA)[: 4 * args.items]
    # Disjoint item sets: one to warm each engine up, one per measured workload, so that no
    # engine answers a prompt it has seen (vLLM caches whole prompts; llama.cpp only the
    # prefix shared with the previous prompt). Both share the judge instructions.
    prompts = [render_messages(task, "naturalness", strategy, r.inputs) for r in records]
    n = args.items
    warm = prompts[:2]
    sets = {
        "greedy": prompts[n : 2 * n],
        "expected": prompts[2 * n : 3 * n],
        "concurrent": prompts[3 * n : 4 * n],
    }

    results: dict[str, Any] = {
        "model": args.model,
        "items_per_workload": n,
        "threads": args.threads,
        "concurrency": args.concurrency,
        "max_tokens": args.max_tokens,
        "vllm": env.vllm,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "load_average_at_start": os.getloadavg()[0],
    }
    # llama.cpp: greedy calls without logits_all (faster), logprob calls need it.
    plain = make_lm(f"local:{args.model}", n_threads=args.threads, n_ctx=2048, cache=False)
    started = time.perf_counter()
    plain.load()
    results["llama_cpp_load_seconds"] = round(time.perf_counter() - started, 2)
    logprob = make_lm(
        f"local:{args.model}", n_threads=args.threads, logits_all=True, n_ctx=2048, cache=False
    )
    for m in warm:
        _call(plain, m, max_tokens=args.max_tokens)
        _call(logprob, m, max_tokens=args.max_tokens, logprobs=True, top_logprobs=20)
    results["llama_cpp"] = _workload(plain, sets, 1, args.max_tokens, _own_cpu, logprob_lm=logprob)
    del plain, logprob

    started = time.perf_counter()
    folder = convert_gguf_to_hf(args.model, python=env.python, n_threads=args.threads)
    results["conversion_seconds"] = round(time.perf_counter() - started, 2)
    results["converted_folder"] = str(folder)
    started = time.perf_counter()
    with start_vllm_server(
        args.model, python=env.python, n_threads=args.threads, kv_cache_gb=1
    ) as server:
        results["vllm_startup_seconds"] = round(time.perf_counter() - started, 1)
        lm = make_lm(
            server.model, api_base=server.api_base, cache=False, max_concurrency=args.concurrency
        )
        for m in warm:
            _call(lm, m, max_tokens=args.max_tokens)
        cache_before = _prefix_cache(server.api_base)
        results["vllm_server"] = _workload(
            lm, sets, args.concurrency, args.max_tokens, lambda: _group_cpu(server.pid)
        )
        cache_after = _prefix_cache(server.api_base)
        queried = cache_after["queries"] - cache_before["queries"]
        results["vllm_prefix_cache_hit_rate"] = (
            round((cache_after["hits"] - cache_before["hits"]) / queried, 3) if queried else None
        )
    results["load_average_at_end"] = os.getloadavg()[0]

    rows = []
    for label in ("greedy", "expected", f"greedy_x{args.concurrency}"):
        ll = results["llama_cpp"].get(label)
        vl = results["vllm_server"].get(label)
        rows.append((label, ll, vl))
    print(
        f"{args.model}, {n} Topical-Chat judge calls per workload, {args.threads} thread(s), "
        f"vLLM {env.vllm}"
    )
    print(
        f"{'workload':<14} {'llama.cpp s/call':>17} {'vLLM s/call':>12} "
        f"{'llama.cpp calls/min':>20} {'vLLM calls/min':>15}"
    )
    for label, ll, vl in rows:

        def cell(summary: dict[str, Any] | None, key: str) -> str:
            return "-" if summary is None else str(summary[key])

        print(
            f"{label:<14} {cell(ll, 'median_call_seconds'):>17} "
            f"{cell(vl, 'median_call_seconds'):>12} {cell(ll, 'calls_per_minute'):>20} "
            f"{cell(vl, 'calls_per_minute'):>15}"
        )
    print(
        f"{'long gen tok/s':<14} "
        f"{results['llama_cpp']['long_generation']['tokens_per_second']:>17} "
        f"{results['vllm_server']['long_generation']['tokens_per_second']:>12}"
    )
    print(
        "cores used (CPU seconds / wall seconds): "
        + ", ".join(
            f"{engine} {label} {results[engine][label]['cores_used']}"
            for engine in ("llama_cpp", "vllm_server")
            for label in ("greedy", "long_generation")
        )
    )
    print(
        f"vLLM prefix-cache hit rate over the measured calls: "
        f"{results['vllm_prefix_cache_hit_rate']}"
    )
    print(
        f"llama.cpp load {results['llama_cpp_load_seconds']} s; GGUF conversion "
        f"{results['conversion_seconds']} s; vLLM start-up {results['vllm_startup_seconds']} s"
    )
    out = Path(args.json)
    write_json(out, results)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
