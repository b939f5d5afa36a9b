"""The rating an explanation-first answer did not write: asked for, and what it is worth.

A judge that explains before it rates (the MT-Bench baseline, every ``cot`` prefix strategy)
sometimes ends its answer without the rating: the small model writes its verdict in words
("the sentence is not natural") and stops, or repeats a sentence until the output cap. The
compile then imputes the judge's mean rating (PrExMe's fallback), so the call's verdict is
lost, and on some pairs the lost answers are not a random share: they are the items the
judge found bad. This measures, on the judgement bank's recorded answers, what one short
follow-up call recovers: the judge's own conversation (its prompt and its answer, unchanged)
continued by one user turn asking for the rating in the judge's format, read greedily (and
its expected rating from the rating token's logprobs).

Two commands, both resumable:

``record``
    Makes the follow-up call for every unparsed answer (no failed call) of the chosen
    columns of each pair, with the embedded model, ``--parallel`` calls in flight; lines go
    to ``benchmarks/runs/recovery/<pair>.jsonl`` as they are made (Ctrl-C stops with exit
    130, the same command resumes).

``report``
    No LLM call. Per pair and column: pool items, unparsed answers, ratings recovered, the
    mean human score of the unparsed items against the parsed ones (is the missing rating
    informative?), the column's Spearman with imputation (as the compile and the bank score
    it) and with the recovered ratings (the rest still imputed), their paired difference
    with its 95 % bootstrap interval (the same resamples of items, of whole groups at group
    level), and the follow-up calls' seconds. Beside them, with no call, the column with each
    missing rating taken as below every rating it gave (is a missing rating a verdict?).
    Writes ``benchmarks/results/rating_recovery.json``.

Usage:
    python benchmarks/rating_recovery.py record [--pairs P,...] [--columns baseline]
        [--parallel 16] [--max-minutes M]
    python benchmarks/rating_recovery.py report [--pairs P,...] [--columns baseline]

``--columns baseline`` (default): the MT-Bench baseline's column; ``explain_first``: every
planned column whose answer explains before it rates.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bank import Recorder  # noqa: E402 - the sibling script
from bank_plan import BANK_DIR, PLAN, plan_sha  # noqa: E402
from judgeopt.evaluate import CallPool  # noqa: E402
from judgeopt.judge import ARTIFACTS_KEY  # noqa: E402
from judgeopt.scoring import (  # noqa: E402
    generation_from_logprobs,
    parse_rating,
    rating_from_generation,
)
from judgeopt.selection import bootstrap_scores, column_scores  # noqa: E402
from judgeopt_lab import (  # noqa: E402
    EXIT_INTERRUPTED,
    bank_base,
    load_bank,
    markdown_table,
    run_interruptible,
    strategy_json,
    write_json,
)

ROOT = Path(__file__).resolve().parent
RUNS = ROOT / "runs" / "recovery"
OUT = ROOT / "results" / "rating_recovery.json"
#: Tokens the follow-up may write (every recorded answer was ``Rating: [[n]]``, 5 tokens with
#: the embedded model; 12 leave room for two-digit scales).
FOLLOW_UP_TOKENS = 12
TOP_LOGPROBS = 20
RESAMPLES = 2000

log = logging.getLogger("rating_recovery")


def follow_up_text(lo: int, hi: int) -> str:
    """The user turn that asks for the rating the answer did not write."""
    return (
        f"Your evaluation has no rating. Now rate it on a scale of {lo} to {hi} by strictly "
        'following this format: "Rating: [[rating]]".'
    )


def explains_first(strategy: dict[str, Any]) -> bool:
    return strategy.get("cot") == "prefix" or strategy.get("reference") == "dialectic"


def chosen_columns(pair: Any, which: str) -> list[Any]:
    if which == "baseline":
        return [pair.baseline]
    return [c for c in pair.columns if "~" not in c.key and explains_first(dict(c.strategy))]


def follow_up(recorder: Recorder, program: Any, rid: str, raw: str) -> dict[str, Any]:
    """One follow-up call for the answer ``raw`` of ``program`` on item ``rid``."""
    record = recorder.records[rid]
    fields = {n: str(record.inputs[n]) for n in program.task.input_names}
    t0 = time.perf_counter()
    line: dict[str, Any] = {
        "kind": "recovery",
        "strategy": bank_base(program.strategy.as_dict()),
        "id": rid,
    }
    lo, hi = program.rating_bounds
    try:
        artifacts = program.maker.prepare(
            program.strategy, fields, sample_id=record.id, lm=recorder.lm
        )
        messages = program.adapter.format(None, [], {**fields, ARTIFACTS_KEY: artifacts})
        messages = [
            *messages,
            {"role": "assistant", "content": raw},
            {"role": "user", "content": follow_up_text(lo, hi)},
        ]
        response = recorder.lm.forward(
            messages=messages,
            max_tokens=FOLLOW_UP_TOKENS,
            temperature=0.0,
            logprobs=True,
            top_logprobs=TOP_LOGPROBS,
        )
    except Exception as e:  # noqa: BLE001 - a failed call is recorded, never fatal
        return {**line, "error": f"{type(e).__name__}: {e}", "seconds": _since(t0)}
    choice = _get(response, "choices")[0]
    text = _get(_get(choice, "message"), "content") or ""
    parsed = parse_rating(text, scale=hi, rating_min=lo)
    expected = None
    content = _get(_get(choice, "logprobs"), "content")
    if content and parsed.score is not None:
        try:
            gen = generation_from_logprobs(content, text=text)
            expected = rating_from_generation(
                gen, scale=hi, rating_min=lo, top_k=TOP_LOGPROBS
            ).score
        except ValueError:
            expected = None
    usage = _get(response, "usage")
    return {
        **line,
        "text": text,
        "greedy": parsed.score,
        "expected": expected,
        "parse_error": parsed.error,
        "error": None,
        "prompt_tokens": _get(usage, "prompt_tokens"),
        "completion_tokens": _get(usage, "completion_tokens"),
        "seconds": _since(t0),
    }


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def _since(t0: float) -> float:
    return round(time.perf_counter() - t0, 3)


def recorded(pair: str, kind: str) -> list[dict[str, Any]]:
    """The lines of ``kind`` (``recovery`` or ``run``) in ``pair``'s follow-up file."""
    path = RUNS / f"{pair}.jsonl"
    if not path.is_file():
        return []
    lines = (json.loads(raw) for raw in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line.get("kind") == kind]


def wall_seconds(pair: str, which: str) -> float:
    """The recorder's wall time for ``pair``'s follow-ups of ``which`` columns (its ``run``
    lines; the calls ran ``parallel`` at a time, so this, not their summed latencies, is
    what they cost)."""
    return sum(float(x["wall_seconds"]) for x in recorded(pair, "run") if x["columns"] == which)


def done_lines(pair: str) -> dict[tuple[str, str], dict[str, Any]]:
    """``pair``'s follow-ups by (base strategy, item): a successful one over a failed one."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for line in recorded(pair, "recovery"):
        key = (strategy_json(line["strategy"]), str(line["id"]))
        if line.get("error") is None or key not in out:
            out[key] = line
    return out


def todo(pair: Any, which: str, held: dict[tuple[str, str], dict[str, Any]]) -> list[Any]:
    """(base strategy, item id, raw answer) of every unparsed answer left to follow up."""
    done = done_lines(pair.name)
    out = []
    for col in chosen_columns(pair, which):
        base = bank_base(dict(col.strategy))
        key = strategy_json(base)
        for i, rid in enumerate(pair.ids):
            if not np.isnan(col.predictions[i]):
                continue
            line = held.get((key, rid))
            if line is None or line.get("error") is not None or not line.get("raw"):
                continue
            if (key, rid) in done and done[(key, rid)].get("error") is None:
                continue
            out.append((base, rid, line["raw"]))
    return out


def record(names: Sequence[str], which: str, parallel: int, deadline: float | None) -> int:
    from judgeopt.lm import make_lm

    plan = json.loads(PLAN.read_text(encoding="utf-8"))
    sha = plan_sha(PLAN)
    by_name = {p["name"]: p for p in plan["pairs"]}
    bank = load_bank(plan, BANK_DIR, pairs=list(names))
    lm = make_lm("local", cache=RUNS.parent / "recovery-lm-cache", parallel=parallel)
    RUNS.mkdir(parents=True, exist_ok=True)
    for name in names:
        recorder = Recorder(by_name[name], sha, lm, parallel)
        jobs = todo(bank[name], which, recorder.have())
        log.info("%s: %d follow-up calls to make", name, len(jobs))
        if not jobs:
            continue
        programs: dict[str, Any] = {}
        calls = []
        for base, rid, raw in jobs:
            key = strategy_json(base)
            if key not in programs:
                programs[key] = recorder.program(base)
            calls.append(functools.partial(follow_up, recorder, programs[key], rid, raw))
        pool: CallPool[dict[str, Any]] = CallPool(calls, parallel, name="recovery")
        n = 0
        t0 = time.perf_counter()
        with (RUNS / f"{name}.jsonl").open("a", encoding="utf-8") as fh:
            try:
                for _, line in pool:
                    fh.write(json.dumps(line, ensure_ascii=False) + "\n")
                    fh.flush()
                    n += 1
                    if n % 16 == 0:
                        log.info("%s: %d/%d", name, n, len(jobs))
                    if deadline is not None and time.time() > deadline:
                        return 0
            finally:
                for _, late in pool.stop():
                    fh.write(json.dumps(late, ensure_ascii=False) + "\n")
                    n += 1
                run = {"kind": "run", "columns": which, "calls": n, "parallel": parallel}
                run["wall_seconds"] = _since(t0)
                fh.write(json.dumps(run) + "\n")
    return 0


def _interval(values: np.ndarray) -> list[float]:
    return [
        round(float(np.quantile(values, 0.025)), 4),
        round(float(np.quantile(values, 0.975)), 4),
    ]


def column_report(
    pair: Any, col: Any, done: dict[tuple[str, str], dict[str, Any]]
) -> dict[str, Any]:
    """One column's figures: imputed against recovered (greedy and expected)."""
    key = strategy_json(bank_base(dict(col.strategy)))
    preds = np.asarray(col.predictions, dtype=np.float64)
    unparsed = np.isnan(preds)
    greedy = preds.copy()
    expected = preds.copy()
    asked = recovered = 0
    seconds = 0.0
    for i, rid in enumerate(pair.ids):
        line = done.get((key, rid))
        if not unparsed[i] or line is None or line.get("error") is not None:
            continue
        asked += 1
        seconds += float(line.get("seconds") or 0.0)
        if line.get("greedy") is not None:
            recovered += 1
            greedy[i] = float(line["greedy"])
            expected[i] = float(
                line["expected"] if line.get("expected") is not None else line["greedy"]
            )
    groups = None if pair.level == "dataset" else pair.groups
    # No call: a missing rating taken as a verdict below every rating the column gave.
    low = preds.copy()
    if unparsed.any() and (~unparsed).any():
        low[unparsed] = np.nanmin(preds) - 0.5
    rows = np.vstack([preds, greedy, expected, low])
    scores = column_scores(pair.human, rows, groups)
    boot = bootstrap_scores(
        pair.human, rows, groups, n_resamples=RESAMPLES, rng=np.random.default_rng(0)
    )
    human = np.asarray(pair.human, dtype=np.float64)
    return {
        "column": col.key,
        "strategy": dict(col.strategy),
        "n_pool": int(preds.size),
        "unparsed": int(unparsed.sum()),
        "asked": asked,
        "recovered": recovered,
        "human_mean_unparsed": round(float(human[unparsed].mean()), 3) if unparsed.any() else None,
        "human_mean_parsed": round(float(human[~unparsed].mean()), 3),
        "recovered_ratings": {
            str(int(v)): int((greedy[unparsed] == v).sum())
            for v in np.unique(greedy[unparsed])
            if np.isfinite(v)
        },
        "spearman_imputed": round(float(scores[0]), 4),
        "spearman_recovered": round(float(scores[1]), 4),
        "spearman_recovered_expected": round(float(scores[2]), 4),
        "gain": round(float(scores[1] - scores[0]), 4),
        "gain_interval": _interval(boot[:, 1] - boot[:, 0]),
        "gain_expected": round(float(scores[2] - scores[0]), 4),
        "gain_expected_interval": _interval(boot[:, 2] - boot[:, 0]),
        "spearman_imputed_low": round(float(scores[3]), 4),
        "gain_imputed_low": round(float(scores[3] - scores[0]), 4),
        "follow_up_seconds": round(seconds, 1),
    }


def report(names: Sequence[str], which: str) -> int:
    plan = json.loads(PLAN.read_text(encoding="utf-8"))
    bank = load_bank(plan, BANK_DIR, pairs=list(names))
    rows, table = [], []
    for name in names:
        pair = bank[name]
        done = done_lines(name)
        for col in chosen_columns(pair, which):
            r = {"pair": name, **column_report(pair, col, done)}
            rows.append(r)
            lo, hi = r["gain_interval"]
            table.append(
                [
                    name,
                    col.key,
                    f"{r['unparsed']}/{r['n_pool']}",
                    f"{r['recovered']}/{r['asked']}",
                    f"{r['human_mean_unparsed']} vs {r['human_mean_parsed']}",
                    f"{r['spearman_imputed']:.3f}",
                    f"{r['spearman_recovered']:.3f}",
                    f"{r['gain']:+.3f} [{lo:+.3f}, {hi:+.3f}]",
                    f"{r['gain_expected']:+.3f}",
                    f"{r['follow_up_seconds']:.0f}",
                ]
            )
    print(
        markdown_table(
            [
                "pair",
                "column",
                "unparsed",
                "recovered",
                "human mean: unparsed vs parsed",
                "imputed",
                "recovered",
                "gain [95 %]",
                "gain, expected",
                "follow-up s",
            ],
            table,
        )
    )
    complete = [r for r in rows if r["asked"] == r["unparsed"] and r["unparsed"] > 0]
    per_pair = {}
    for name in names:
        mine = [r for r in rows if r["pair"] == name and r["unparsed"]]
        if not mine or any(r["asked"] != r["unparsed"] for r in mine):
            continue  # only pairs whose every column's missing ratings were asked for
        per_pair[name] = {"columns": len(mine), "wall_seconds": wall_seconds(name, which)}
        for kind in ("gain", "gain_expected", "gain_imputed_low"):
            g = np.array([r[kind] for r in mine])
            per_pair[name][kind] = {
                "mean": round(float(g.mean()), 4),
                "se": round(float(g.std(ddof=1) / np.sqrt(g.size)), 4) if g.size > 1 else None,
                "positive": int((g > 0).sum()),
            }
            if kind != "gain_imputed_low":
                above = sum(r[f"{kind}_interval"][0] > 0 for r in mine)
                below = sum(r[f"{kind}_interval"][1] < 0 for r in mine)
                per_pair[name][kind]["interval_above_zero"] = int(above)
                per_pair[name][kind]["interval_below_zero"] = int(below)
    for name, p in per_pair.items():
        print(
            f"{name}: {p['columns']} column(s) with missing ratings, every one asked for; "
            f"mean gain {p['gain']['mean']:+.3f} (se {p['gain']['se']}), "
            f"{p['gain']['interval_above_zero']} above zero, "
            f"{p['gain']['interval_below_zero']} below; expected: "
            f"{p['gain_expected']['mean']:+.3f}; imputed low (no call): "
            f"{p['gain_imputed_low']['mean']:+.3f}; follow-ups {p['wall_seconds']:.0f} s wall"
        )
    imputed_low = {}
    for name in names:
        g = np.array([r["gain_imputed_low"] for r in rows if r["pair"] == name and r["unparsed"]])
        if g.size:
            imputed_low[name] = {
                "columns": int(g.size),
                "mean": round(float(g.mean()), 4),
                "se": round(float(g.std(ddof=1) / np.sqrt(g.size)), 4) if g.size > 1 else None,
                "positive": int((g > 0).sum()),
            }
            print(
                f"{name}: a missing rating taken as the lowest (no call), {g.size} column(s): "
                f"{g.mean():+.3f} against the mean, higher in {int((g > 0).sum())}"
            )
    summary = {
        "columns": which,
        "imputed_low": imputed_low,
        "follow_up": follow_up_text(1, 5),
        "follow_up_tokens": FOLLOW_UP_TOKENS,
        "rows": rows,
        "per_pair": per_pair,
        "mean_gain": round(float(np.mean([r["gain"] for r in complete])), 4) if complete else None,
        "complete_rows": len(complete),
    }
    out = OUT if which == "baseline" else OUT.with_name(f"rating_recovery_{which}.json")
    write_json(out, summary)
    print(f"wrote {out}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("command", choices=["record", "report"])
    p.add_argument("--pairs", default=None, help="default: every pair of the bank's plan")
    p.add_argument("--columns", choices=["baseline", "explain_first"], default="baseline")
    p.add_argument("--parallel", type=int, default=16)
    p.add_argument("--max-minutes", type=float, default=None)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    plan = json.loads(PLAN.read_text(encoding="utf-8"))
    names = [s for s in (args.pairs or "").split(",") if s] or [q["name"] for q in plan["pairs"]]
    if args.command == "report":
        return report(names, args.columns)
    deadline = None if args.max_minutes is None else time.time() + 60 * args.max_minutes

    def stopped() -> None:
        print("stopped: every follow-up made is kept; the same command resumes", file=sys.stderr)

    code = run_interruptible(
        lambda: record(names, args.columns, args.parallel, deadline), on_stop=stopped
    )
    return EXIT_INTERRUPTED if code == EXIT_INTERRUPTED else code


if __name__ == "__main__":
    sys.exit(main())
