"""How much of a compile's prompt the embedded model computes, and how much it could reuse.

For each pair, the MT-Bench baseline and ``--strategies`` strategies drawn from the HPSS space
(the cost plan's draw: ``judgeopt.search.sample_valid`` with seed ``--seed``) are judged on the
same ``--limit`` items (whole groups, in file order) with the embedded model on the batched
engine a compile uses (``--parallel`` sequences, no response cache), as ``evaluate`` judges
them (stopped at the score where a strategy rates first). The artifacts a strategy needs
(criteria, AutoCoT steps, references) are made first, so the counts below are the judge
calls' own.

Per strategy, from the engine (``LlamaCppLM.prompt_reuse``): the prompt tokens sent, those
computed and those copied from a prefix another sequence held. Beside them, from the
prompts' token ids, two bounds of what a block-aligned prefix cache (blocks of 64 tokens,
the engine's unit) would compute:

* ``within``: each prompt reuses the longest prefix of any earlier prompt of the same
  strategy (the judge's instructions; for grouped items, the shared input);
* ``across``: of any earlier prompt of any strategy judged before it in the run (what an
  unbounded cache could add: items shared across strategies whose input comes first).

The gap between the engine's computed tokens and ``within`` is what its slots lose (a prefix
evicted before it is needed again); between ``within`` and ``across``, what only a cache kept
across strategies could save.

Usage:
    python benchmarks/prefix_cache.py --json benchmarks/results/prefix_cache.json

Set JUDGEOPT_THREADS to the CPU threads of the local model (default 2).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from judgeopt.data import Record, load_records
from judgeopt.evaluate import evaluate
from judgeopt.judge import ARTIFACTS_KEY, JudgeProgram, load_task, sample_id_of
from judgeopt.lm import LlamaCppLM, computed_tokens, make_lm
from judgeopt.search import sample_valid
from judgeopt_lab import markdown_table, pair_file, sample_groups, write_json

PAIRS = "summeval:coherence,topical_chat:naturalness,hanna:coherence"
BLOCK = 64  # the batch engine's unit of prompt evaluation and of prefix sharing


def pair_records(task: str, n: int, seed: int) -> tuple[list[Record], list[Record]]:
    """``n`` items (whole groups, in file order) and the rest of the file (the example pool)."""
    records = load_records(pair_file(task, "valid"))
    items = sample_groups(records, n, seed=seed, cut=True)
    chosen = {r.id for r in items}
    items.sort(key=lambda r: records.index(r))
    return items, [r for r in records if r.id not in chosen]


def computed(prompt: Sequence[int], earlier: Sequence[Sequence[int]]) -> int:
    """Tokens of ``prompt`` a block-aligned prefix cache holding ``earlier`` computes: all but
    the longest shared run of whole blocks (the last token is always computed)."""
    return computed_tokens([*earlier, prompt], block=BLOCK)[-1]


def prompts_of(program: JudgeProgram, records: Sequence[Record], lm: LlamaCppLM) -> list[list[int]]:
    """The token ids of ``program``'s judge prompt for each record (its artifacts made)."""
    out = []
    for r in records:
        fields = {f: str(r.inputs[f]) for f in program.task.input_names}
        sid = r.id or sample_id_of(fields, program.task.input_names)
        artifacts = program.maker.prepare(program.strategy, fields, sample_id=sid, lm=lm)
        messages = program.adapter.format(None, [], {**fields, ARTIFACTS_KEY: artifacts})
        out.append(lm.prompt_token_ids(messages))
    return out


def _pair(task_name: str, aspect: str, n_items: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A pair's row: its strategies and their totals."""
    total = {
        key: sum(int(r[key]) for r in rows)
        for key in ("prompt_tokens", "computed", "copied", "bound_within", "bound_across", "n")
    }
    return {"task": task_name, "aspect": aspect, "items": n_items, "strategies": rows, **total}


def measure_pair(
    task_name: str,
    aspect: str,
    args: argparse.Namespace,
    lm: LlamaCppLM,
    on_strategy: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """The pair's row; ``on_strategy`` gets the row so far after each strategy (the script
    writes its JSON then, so an interrupted run keeps what it measured)."""
    items, pool = pair_records(task_name, args.limit, args.seed)
    task = load_task(task_name)
    base = JudgeProgram(task, aspect, lm=lm, trainset=pool)
    drawn = sample_valid(base.search_graph(), args.strategies, np.random.default_rng(args.seed))
    programs = [base] + [base.with_strategy(s) for s in drawn]
    rows, history = [], []
    for k, program in enumerate(programs):
        prompts = prompts_of(program, items, lm)  # makes the artifacts first (their own calls)
        before = lm.prompt_reuse() or {"evaluated": 0, "shared": 0}
        t0 = time.perf_counter()
        res = evaluate(program, items, lm=lm, threads=args.parallel, progress=False)
        seconds = time.perf_counter() - t0
        after = lm.prompt_reuse() or {"evaluated": 0, "shared": 0}
        # A call the engine refused (a prompt longer than the context) evaluates nothing:
        # the bounds count the prompts it judged.
        failed = {i.id for i in res.items if i.error}
        judged = [p for r, p in zip(items, prompts, strict=True) if r.id not in failed]
        within = sum(computed(p, judged[:i]) for i, p in enumerate(judged))
        across = sum(computed(p, [*history, *judged[:i]]) for i, p in enumerate(judged))
        history.extend(judged)
        rows.append(
            {
                "strategy": program.strategy.as_dict(),
                "baseline": k == 0,
                "n": len(judged),
                "failed": len(failed),
                "prompt_tokens": sum(len(p) for p in judged),
                "usage_prompt_tokens": res.prompt_tokens,
                "computed": after["evaluated"] - before["evaluated"],
                "copied": after["shared"] - before["shared"],
                "bound_within": within,
                "bound_across": across,
                "seconds": round(seconds, 2),
                "calls": res.calls,
            }
        )
        r = rows[-1]
        print(
            f"{task_name}/{aspect} #{k}: {r['prompt_tokens']} prompt tokens, computed "
            f"{r['computed']}, within-bound {within}, across-bound {across} ({seconds:.0f} s)",
            file=sys.stderr,
        )
        on_strategy(_pair(task_name, aspect, len(items), rows))
    return _pair(task_name, aspect, len(items), rows)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default=PAIRS, help="task:aspect,...")
    ap.add_argument("--limit", type=int, default=24, help="items per pair (whole groups)")
    ap.add_argument("--strategies", type=int, default=4, help="drawn strategies per pair")
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    lm = make_lm("local", cache=False, parallel=args.parallel)
    assert isinstance(lm, LlamaCppLM)
    pairs: list[dict[str, Any]] = []
    settings = {k: v for k, v in vars(args).items() if k != "json"}

    def save(partial: dict[str, Any]) -> None:
        if args.json:
            payload = {"settings": {**settings, "block": BLOCK}, "pairs": [*pairs, partial]}
            write_json(args.json, payload)

    for spec in args.pairs.split(","):
        task_name, aspect = spec.split(":")
        pairs.append(measure_pair(task_name, aspect, args, lm, save))
    per = [
        (
            f"{p['task']}/{p['aspect']}",
            p["n"],
            f"{p['prompt_tokens'] / p['n']:.0f}",
            f"{p['computed'] / p['n']:.0f}",
            f"{p['bound_within'] / p['n']:.0f}",
            f"{p['bound_across'] / p['n']:.0f}",
            f"{1 - p['computed'] / p['prompt_tokens']:.0%}",
            f"{1 - p['bound_across'] / p['prompt_tokens']:.0%}",
        )
        for p in pairs
    ]
    header = [
        "pair",
        "judgements",
        "prompt tokens / judgement",
        "computed",
        "bound within a strategy",
        "bound across strategies",
        "reused",
        "reusable at most",
    ]
    print(markdown_table(header, per))
    return 0


if __name__ == "__main__":
    sys.exit(main())
