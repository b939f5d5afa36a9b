"""The judgement bank: every planned strategy judged on a fixed pool of items, once.

A bank is to the judge what a PrExMe surface is to the search: judgements recorded once and
replayed many times (``benchmarks/bank_rules.py``), so that a decision rule of the compile can
be tried over hundreds of validation/test splits in seconds, without an LLM call.

Three steps, each resumable:

``plan``
    Writes ``benchmarks/bank_plan.json``: for each task-aspect pair of the end-to-end benchmark
    (``benchmarks/e2e.py``'s stored runs), the pool of items (whole groups; at least
    ``--min-pool``: the e2e search items and test items, then e2e confirmation groups in a
    seeded order until the pool is large enough, which reuses most stored judgements) and
    the strategies (the MT-Bench baseline, every strategy the pair's e2e search evaluated,
    every finalist and ensemble member; self-consistency strategies left out, see the plan's
    ``excluded``). The plan is committed *before* any of its items are judged, and
    ``record`` refuses a plan that changed under a bank (its sha256 is in every bank file).

``record``
    Judges what is missing with the embedded model, one call per (strategy, item) with
    ``expected`` decoding, which gives both the greedy rating (the answer's parsed rating)
    and the expected rating (from the rating token's logprobs) in the same call. Stored e2e
    judgements of the same model, strategy and item are imported first, not re-judged; a
    few of them are judged again as a check of the import (``verify`` lines). Written to
    ``benchmarks/results/bank/<pair>.jsonl`` line by line: Ctrl-C or SIGTERM stop with exit
    130 and the same command resumes. Breadth first: the first ``--first`` pairs each reach
    ``--levels`` items judged by every column (in waves of whole groups, see ``_needed``)
    one level at a time, then are completed; then the other pairs the same way.

``pack``
    Moves the plain lines into ``<pair>.jsonl.gz`` (the committed form); the loader
    (:func:`judgeopt.bench.load_bank`) reads both.

Usage:
    python benchmarks/bank.py plan [--min-pool 250]
    python benchmarks/bank.py record [--pairs summeval_coherence,...] [--parallel 8]
        [--max-minutes M] [--levels 150,200] [--first 5]
    python benchmarks/bank.py status
    python benchmarks/bank.py pack

Set JUDGEOPT_THREADS to the CPU threads of the local model (default 2).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import logging
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from judgeopt.bench import (
    BANK_FORMAT,
    EXIT_INTERRUPTED,
    bank_lines,
    judgement_covers,
    keep_judgement,
    markdown_table,
    run_interruptible,
    shared_data_dir,
    stored_items,
    strategy_json,
    strategy_key,
    write_json,
)
from judgeopt.data import Record, load_records, split_holdout
from judgeopt.demo import E2E_SPLIT, PER_GROUP
from judgeopt.evaluate import CallPool
from judgeopt.judge import ArtifactStore, JudgeProgram, load_task
from judgeopt.scoring import parse_rating

log = logging.getLogger("bank")

DATA = shared_data_dir()
ROOT = Path(__file__).resolve().parent
PLAN = ROOT / "bank_plan.json"
E2E_DIR = ROOT / "results" / "e2e_runs"
BANK_DIR = ROOT / "results" / "bank"
#: The e2e pairs, in the order they are recorded (the four of e2e.json, then the held-out three).
PAIRS = (
    "sfres_naturalness",
    "topical_chat_naturalness",
    "topical_chat_coherence",
    "summeval_coherence",
    "sfhot_informativeness",
    "summeval_relevance",
    "hanna_coherence",
)
VERIFY_ITEMS = 8
#: Judged lines between two ``chunk`` lines (calls, tokens, seconds).
STAT_EVERY = 32
#: Items per wave of whole groups the recorder completes before the next (see ``_needed``).
WAVE_ITEMS = 16


# Plan ------------------------------------------------------------------------------------
def _e2e_split(row: dict[str, Any]) -> tuple[list[Record], list[Record]]:
    records = load_records(DATA / row["task"] / "full.jsonl")
    return split_holdout(
        records,
        row["n_valid"],
        row["n_test"],
        seed=E2E_SPLIT["seed"],
        per_group=PER_GROUP.get(row["task"]),
    )


_plain_key = strategy_json


def _pair_plan(name: str, min_pool: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from judgeopt.selection import confirmation_split
    from judgeopt.teleprompt import load_optimizer

    row = json.loads((E2E_DIR / name / "result.json").read_text(encoding="utf-8"))
    task, aspect = row["task"], row["aspect"]
    valid, test = _e2e_split(row)
    if len(valid) != row["n_valid"] or len(test) != row["n_test"]:
        raise RuntimeError(f"{name}: the redone e2e split differs from the stored run")
    baseline = row.get("baseline_strategy") or JudgeProgram(task, aspect).strategy.as_dict()
    roles: dict[str, list[str]] = {}

    def add(strategy: dict[str, Any], role: str) -> None:
        roles.setdefault(_plain_key(strategy), []).append(role)

    add(baseline, "baseline")
    for t in row["search"]["trace"]:
        add(t["strategy"], f"search #{int(t['number']) + 1}")
    for f in (row.get("selection") or {}).get("finalists") or []:
        add(f["strategy"], "finalist")
    for m in row.get("ensemble_members") or []:
        add(m, "ensemble member")
    columns, excluded = [], []
    for key, rs in roles.items():
        strategy = json.loads(key)
        if str(strategy["decoding"]).startswith("sc"):
            excluded.append(
                {
                    "pair": name,
                    "strategy": strategy,
                    "roles": sorted(set(rs)),
                    "reason": "self-consistency: five sampled calls per item, about five "
                    "times the cost of a column; its decision is replayed without it",
                }
            )
            continue
        columns.append({"strategy": strategy, "roles": sorted(set(rs))})
    # The pool: the e2e search items and test items (stored for many strategies), then whole
    # confirmation groups in a seeded order until it holds at least min_pool items.
    sel = load_optimizer("auto").selection
    humans = [r.scores[aspect] for r in valid]
    grouped = any(r.group_id for r in valid)
    groups = [r.group_id or r.id for r in valid] if grouped else None
    search_idx, confirm_idx = confirmation_split(
        humans, groups, fraction=sel.confirm_fraction, seed=sel.seed
    )
    pool = [valid[i] for i in search_idx] + list(test)
    confirm = [valid[i] for i in confirm_idx]
    conf_groups = sorted({r.group_id or r.id for r in confirm})
    order = np.random.default_rng(0).permutation(len(conf_groups))
    for i in order:
        if len(pool) >= min_pool:
            break
        g = conf_groups[int(i)]
        pool += [r for r in confirm if (r.group_id or r.id) == g]
    plan = {
        "name": name,
        "task": task,
        "aspect": aspect,
        "level": row["level"],
        "e2e_dir": f"benchmarks/results/e2e_runs/{name}",
        "e2e_split": {
            "n_valid": row["n_valid"],
            "n_test": row["n_test"],
            "seed": E2E_SPLIT["seed"],
            "per_group": PER_GROUP.get(task),
        },
        "example_pool": "the e2e validation set (in-context examples are drawn from it, "
        "as in the e2e compile; an item is never an example in its own prompt)",
        "n_pool": len(pool),
        "n_groups": len({r.group_id or r.id for r in pool}),
        "pool": [r.id for r in pool],
        "columns": [
            {"key": f"C{k + 1:02d}", **c}
            for k, c in enumerate(sorted(columns, key=lambda c: _column_order(c["roles"])))
        ],
    }
    return plan, excluded


def _column_order(roles: list[str]) -> tuple[int, int]:
    if "baseline" in roles:
        return (0, 0)
    numbers = [int(r.split("#")[1]) for r in roles if r.startswith("search #")]
    return (1, min(numbers)) if numbers else (2, 0)


def make_plan(min_pool: int) -> dict[str, Any]:
    pairs, excluded = [], []
    for name in PAIRS:
        p, ex = _pair_plan(name, min_pool)
        pairs.append(p)
        excluded += ex
    return {
        "format": BANK_FORMAT,
        "model": "local:qwen2.5-coder-1.5b",
        "model_weights": "gguf-sha256:"
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "min_pool": min_pool,
        "decoding": "one call per (strategy without decoding, item) with expected decoding "
        "(top_logprobs 20, temperature 0): 'greedy' is the answer's parsed rating, "
        "'expected' the probability-weighted rating of the rating token",
        "pairs": pairs,
        "excluded": excluded,
    }


def plan_sha(path: Path = PLAN) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


# Record ----------------------------------------------------------------------------------
def _base(strategy: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in strategy.items() if k != "decoding"}


def _imports(plan: dict[str, Any], bounds_of: Any) -> list[dict[str, Any]]:
    """Bank lines for the stored e2e judgements of the pair's columns on pool items."""
    pair_dir = ROOT.parent / plan["e2e_dir"]
    pool = set(plan["pool"])
    found: dict[str, dict[str, Any]] = {}  # base key + item id -> line
    sources: dict[str, list[tuple[str, Any]]] = {}  # strategy key -> [(source, items)]
    ckpt = pair_dir / "ckpt" / "items.jsonl"
    if ckpt.is_file():
        for text in ckpt.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(text)
            except ValueError:
                continue
            sources.setdefault(row["strategy"], []).append(("e2e:ckpt/items.jsonl", row["item"]))
    for column in plan["columns"]:
        strategy = column["strategy"]
        skey = _plain_key(strategy)
        key16 = strategy_key(strategy)
        rows = list(sources.get(skey, []))
        for prefix in ("test", "confirm"):
            path = pair_dir / f"{prefix}_{key16}.jsonl"
            rows += [(f"e2e:{path.name}", it.__dict__) for it in stored_items(path).values()]
        lo, hi = bounds_of(strategy)
        for source, item in rows:
            if item.get("error") is not None or item["id"] not in pool:
                continue
            base = _plain_key(_base(strategy))
            line = found.setdefault(
                base + "\n" + item["id"],
                {
                    "kind": "judgement",
                    "strategy": _base(strategy),
                    "id": item["id"],
                    "greedy": None,
                    "expected": None,
                    "probs": None,
                    "parse_error": None,
                    "error": None,
                    "raw": item.get("raw"),
                    "seconds": None,
                    "source": source,
                },
            )
            if strategy["decoding"] == "greedy":
                line["greedy"] = item["score"]
                if item["score"] is None:
                    line["parse_error"] = item.get("parse_error")
            elif strategy["decoding"] == "expected":
                line["expected"] = item["score"]
                if item["score"] is None:
                    line["expected_error"] = item.get("parse_error")
                if line["greedy"] is None:
                    parsed = parse_rating(item.get("raw"), scale=hi, rating_min=lo)
                    line["greedy"] = parsed.score
                    line["parse_error"] = parsed.error
    return list(found.values())


def _pool_records(pair: dict[str, Any]) -> tuple[dict[str, Record], dict[str, str]]:
    """A pair's pool records by id, and each pool item's group (the item itself when it has
    none): the one map the recorder and ``status`` order their waves by."""
    by_id = {r.id: r for r in load_records(DATA / pair["task"] / "full.jsonl")}
    records = {rid: by_id[rid] for rid in pair["pool"]}
    return records, {rid: r.group_id or rid for rid, r in records.items()}


def _needed(
    plan: dict[str, Any],
    have: dict[tuple[str, str], dict[str, Any]],
    groups: dict[str, str] | None = None,
    wave: int = 1,
    upto: int | None = None,
) -> list[Any]:
    """(base strategy, record id) pairs still to judge: a column's judgement of the item is
    absent (or only a failed call).

    Ordered in *waves* of whole groups (at least ``wave`` items each), the groups with the
    fewest calls per item first (ties in pool order), and column by column inside a wave:
    a pair only partly recorded then holds whole groups judged by every column, a pool
    usable for a replay before the pair is complete (the pool's groups were drawn without
    looking at labels, so any such subset is too), while the calls in flight together
    mostly share their strategy's instructions, whose prompt blocks the batch engine
    evaluates once. ``groups`` maps a pool item to its group (default: each item its own).
    With ``upto``, only the waves until at least ``upto`` pool items are judged by every
    column (every wave when ``None``).
    """
    groups = groups or {}
    bases = []
    for column in plan["columns"]:
        strategy = column["strategy"]
        decoding = "greedy" if strategy["decoding"] == "greedy" else "expected"
        bases.append((_plain_key(_base(strategy)), decoding))
    members: dict[str, list[str]] = {}
    for rid in plan["pool"]:
        members.setdefault(groups.get(rid, rid), []).append(rid)

    def missing(rid: str) -> set[str]:
        return {b for b, dec in bases if not judgement_covers(have.get((b, rid)), dec)}

    todo = {rid: missing(rid) for rid in plan["pool"]}
    columns = list(dict.fromkeys(b for b, _ in bases))  # greedy and expected share a call
    calls = {g: sum(len(todo[r]) for r in rids) for g, rids in members.items()}
    order = [
        g
        for g in sorted(members, key=lambda g: calls[g] / len(members[g]))  # stable
        if calls[g]
    ]
    out: list[Any] = []
    start = 0
    whole = sum(len(rids) for g, rids in members.items() if not calls[g])
    while start < len(order) and (upto is None or whole < upto):
        items: list[str] = []
        stop = start
        while stop < len(order) and len(items) < wave:
            items += members[order[stop]]
            stop += 1
        for base in columns:
            out += [(base, rid) for rid in items if base in todo[rid]]
        start = stop
        whole += len(items)
    return out


class Recorder:
    """Judges one pair's missing (strategy, item) pairs and appends them to its bank file."""

    def __init__(self, plan: dict[str, Any], sha: str, lm: Any, parallel: int) -> None:
        self.plan = plan
        self.sha = sha
        self.lm = lm
        self.parallel = parallel
        self.task = load_task(plan["task"])
        self.path = BANK_DIR / f"{plan['name']}.jsonl"
        row = json.loads(
            (ROOT.parent / plan["e2e_dir"] / "result.json").read_text(encoding="utf-8")
        )
        valid, _ = _e2e_split(row)
        self.valid = valid
        self.records, self.groups = _pool_records(plan)
        art = ROOT.parent / plan["e2e_dir"] / "ckpt" / "artifacts.json"
        self.artifacts = ArtifactStore(BANK_DIR / f"{plan['name']}.artifacts.json")
        if art.is_file() and len(self.artifacts) == 0:
            for key, value in json.loads(art.read_text(encoding="utf-8")).items():
                self.artifacts.set(key, value)
        self.lock = threading.Lock()

    def bounds(self, strategy: dict[str, Any]) -> tuple[int, int]:
        return self.task.rating_bounds(self.plan["aspect"], int(strategy["scale"]))

    def program(self, base: dict[str, Any]) -> JudgeProgram:
        return JudgeProgram(
            self.task,
            self.plan["aspect"],
            {**base, "decoding": "expected"},
            trainset=self.valid,
            artifacts=self.artifacts,
            lm=self.lm,
        )

    def write(self, lines: Sequence[dict[str, Any]]) -> None:
        BANK_DIR.mkdir(parents=True, exist_ok=True)
        with self.lock, self.path.open("a", encoding="utf-8") as fh:
            for line in lines:
                fh.write(json.dumps(line, ensure_ascii=False) + "\n")
            fh.flush()

    def have(self) -> dict[tuple[str, str], dict[str, Any]]:
        out: dict[tuple[str, str], dict[str, Any]] = {}
        for line in bank_lines(BANK_DIR, self.plan["name"]):
            if line.get("kind") == "header" and line.get("plan_sha") != self.sha:
                raise SystemExit(
                    f"{self.path}: recorded under plan {line.get('plan_sha')}, but "
                    f"bank_plan.json is now {self.sha}: the plan may not change under a bank"
                )
            if line.get("kind") == "judgement":
                keep_judgement(out, line)
        return out

    def judge(self, program: JudgeProgram, rid: str) -> dict[str, Any]:
        record = self.records[rid]
        t0 = time.perf_counter()
        line: dict[str, Any] = {
            "kind": "judgement",
            "strategy": _base(program.strategy.as_dict()),
            "id": rid,
            "source": "bank",
        }
        try:
            pred = program.judge(record.inputs, sample_id=record.id)
        except Exception as e:  # noqa: BLE001 - a failed call is recorded, never fatal
            kind = getattr(e, "kind", None)
            return {
                **line,
                "greedy": None,
                "expected": None,
                "probs": None,
                "parse_error": None,
                "error": f"{type(e).__name__}: {e}",
                "error_kind": kind if isinstance(kind, str) else "error",
                "raw": None,
                "seconds": round(time.perf_counter() - t0, 3),
            }
        dist = getattr(pred, "distribution", None)
        greedy = getattr(pred, "greedy_score", None)
        lo, hi = program.rating_bounds
        parsed = parse_rating(pred.raw, scale=hi, rating_min=lo)
        return {
            **line,
            "greedy": greedy,
            "expected": pred.score,
            "probs": (dist or {}).get("probs"),
            "mass": (dist or {}).get("mass"),
            "parse_error": None if greedy is not None else (parsed.error or pred.parse_error),
            "expected_error": None if pred.score is not None else pred.parse_error,
            "error": None,
            "raw": pred.raw,
            "seconds": round(time.perf_counter() - t0, 3),
        }

    def verify(self, have: dict[tuple[str, str], dict[str, Any]]) -> None:
        """Judge again a few imported items of the baseline and one more column, once."""
        if any(ln.get("kind") == "verify" for ln in bank_lines(BANK_DIR, self.plan["name"])):
            return
        imported = [ln for ln in have.values() if str(ln["source"]).startswith("e2e:")]
        bases = []
        for ln in imported:
            if ln["strategy"] not in bases and ln["greedy"] is not None:
                bases.append(ln["strategy"])
            if len(bases) == 2:
                break
        picks = []
        for base in bases:
            items = [ln for ln in imported if ln["strategy"] == base][: VERIFY_ITEMS // 2]
            picks += items
        results = self._run([(ln["strategy"], ln["id"]) for ln in picks])
        rows = []
        for old, new in zip(picks, results, strict=True):
            rows.append(
                {
                    "kind": "verify",
                    "strategy": old["strategy"],
                    "id": old["id"],
                    "stored_greedy": old["greedy"],
                    "again_greedy": new["greedy"],
                    "same_raw": (old.get("raw") or "").strip() == (new.get("raw") or "").strip(),
                    "source": old["source"],
                }
            )
        self.write(rows)
        same = sum(r["stored_greedy"] == r["again_greedy"] for r in rows)
        log.info("%s: verify: %d of %d re-judged ratings equal", self.plan["name"], same, len(rows))

    def _calls(self, jobs: list[tuple[dict[str, Any], str]]) -> list[Any]:
        """One call per (base strategy, item), each strategy's program built once."""
        programs: dict[str, JudgeProgram] = {}
        calls = []
        for base, rid in jobs:
            key = _plain_key(base)
            if key not in programs:
                programs[key] = self.program(base)
            calls.append(functools.partial(self.judge, programs[key], rid))
        return calls

    def _run(self, jobs: list[tuple[dict[str, Any], str]]) -> list[dict[str, Any]]:
        """Judge ``jobs`` ``parallel`` at a time; the lines in the order of ``jobs``."""
        pool: CallPool[dict[str, Any]] = CallPool(self._calls(jobs), self.parallel, name="bank")
        out: dict[int, dict[str, Any]] = {}
        try:
            for k, line in pool:
                out[k] = line
        finally:
            pool.stop()
        return [out[k] for k in sorted(out)]

    def _feed(self, jobs: list[tuple[dict[str, Any], str]], deadline: float | None) -> None:
        """Judge ``jobs`` with ``parallel`` calls always in flight (a new call starts as soon
        as one ends, so the batch engine never drains between chunks) and write each line as
        it is judged; every ``STAT_EVERY`` lines a ``chunk`` line records the calls, tokens
        and seconds since the last one. The calls run on daemon threads
        (:class:`judgeopt.evaluate.CallPool`): an interrupt does not wait for the calls in
        flight, which the next run makes again. After ``deadline`` no new call starts and
        the calls in flight are left unfinished."""
        pool: CallPool[dict[str, Any]] = CallPool(self._calls(jobs), self.parallel, name="bank")
        done = n_since = 0
        s0, t0 = self.lm.stats(), time.perf_counter()

        def stat() -> None:
            nonlocal s0, t0, n_since
            self.artifacts.save()  # per-item artifacts (metrics questions) made so far
            s1, t1 = self.lm.stats(), time.perf_counter()
            self.write(
                [
                    {
                        "kind": "chunk",
                        "n": n_since,
                        "calls": s1.calls - s0.calls,
                        "prompt_tokens": s1.prompt_tokens - s0.prompt_tokens,
                        "completion_tokens": s1.completion_tokens - s0.completion_tokens,
                        "seconds": round(t1 - t0, 1),
                    },
                ]
            )
            log.info(
                "%s: %d/%d judged (%.1f s/item)",
                self.plan["name"],
                done,
                len(jobs),
                (t1 - t0) / max(1, n_since),
            )
            s0, t0, n_since = s1, t1, 0

        try:
            for _, line in pool:
                self.write([line])
                done += 1
                n_since += 1
                if n_since >= STAT_EVERY:
                    stat()
                if deadline is not None and time.time() > deadline:
                    break
        finally:
            for _, late in pool.stop():  # finished but not yet taken: kept, not dropped
                self.write([late])
                done += 1
                n_since += 1
            if n_since:
                stat()

    def record(self, deadline: float | None, upto: int | None = None) -> bool:
        """Judge what is missing, or only until at least ``upto`` pool items are judged by
        every column; False when ``deadline`` stopped it first."""
        if not self.path.exists() and not (BANK_DIR / f"{self.plan['name']}.jsonl.gz").exists():
            self.write([{"kind": "header", "plan_sha": self.sha, "pair": self.plan["name"]}])
        have = self.have()
        if not any(str(ln["source"]).startswith("e2e:") for ln in have.values()):
            imported = _imports(self.plan, self.bounds)
            self.write(imported)
            log.info("%s: imported %d stored e2e judgements", self.plan["name"], len(imported))
            have = self.have()
        self.verify(have)
        todo = _needed(self.plan, have, self.groups, wave=WAVE_ITEMS, upto=upto)
        log.info(
            "%s: %d (strategy, item) calls to make%s",
            self.plan["name"],
            len(todo),
            "" if upto is None else f" (until {upto} items are judged by every column)",
        )
        self._feed([(json.loads(b), rid) for b, rid in todo], deadline)
        self.artifacts.save()
        return deadline is None or time.time() <= deadline


def status(plan: dict[str, Any]) -> list[list[object]]:
    """Per pair: pool, columns, judgements held, calls still to make (a pair not started
    counts the stored e2e judgements it will import), the pool items in groups judged by
    every column (what ``bank_rules.py --partial`` can replay), bank calls made and their
    hours."""
    rows = []
    for p in plan["pairs"]:
        _, groups = _pool_records(p)
        have: dict[tuple[str, str], dict[str, Any]] = {}
        seconds = 0.0
        n_bank = 0
        for line in bank_lines(BANK_DIR, p["name"]):
            if line.get("kind") == "judgement":
                keep_judgement(have, line)
                n_bank += line["source"] == "bank"
            elif line.get("kind") == "chunk":
                seconds += float(line["seconds"])
        if not have:
            task, aspect = load_task(p["task"]), p["aspect"]

            def bounds(s: dict[str, Any], task: Any = task, aspect: str = aspect) -> Any:
                return task.rating_bounds(aspect, int(s["scale"]))

            for line in _imports(p, bounds):
                have[(_plain_key(line["strategy"]), line["id"])] = line
        todo = _needed(p, have)
        open_groups = {groups[rid] for _, rid in todo}
        rows.append(
            [
                p["name"],
                p["n_pool"],
                len(p["columns"]),
                len(have),
                len(todo),
                sum(groups[rid] not in open_groups for rid in p["pool"]),
                n_bank,
                f"{seconds / 3600:.2f}",
            ]
        )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("command", choices=["plan", "record", "status", "pack"])
    p.add_argument("--min-pool", type=int, default=250)
    p.add_argument("--pairs", default=",".join(PAIRS))
    p.add_argument("--parallel", type=int, default=8)
    p.add_argument("--max-minutes", type=float, default=None)
    p.add_argument(
        "--levels",
        default="150,200",
        help="record: judged items each of the first pairs reaches before the next level",
    )
    p.add_argument("--first", type=int, default=5, help="record: pairs filled breadth first")
    p.add_argument("--force", action="store_true", help="plan: overwrite an existing plan")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.command == "plan":
        if PLAN.exists() and not args.force:
            print(f"{PLAN} exists: a plan is registered once (use --force before any judging)")
            return 2
        write_json(PLAN, make_plan(args.min_pool))
        print(f"wrote {PLAN} (sha256 {plan_sha()})")
        return 0
    plan = json.loads(PLAN.read_text(encoding="utf-8"))
    if args.command == "status":
        print(
            markdown_table(
                [
                    "pair",
                    "pool",
                    "columns",
                    "judgements",
                    "calls to make",
                    "items judged by all",
                    "bank calls",
                    "hours",
                ],
                status(plan),
            )
        )
        return 0
    if args.command == "pack":
        from judgeopt.bench import pack_bank

        for pair in plan["pairs"]:
            pack_bank(BANK_DIR, pair["name"])
        return 0
    from judgeopt.lm import make_lm

    sha = plan_sha()
    lm = make_lm("local", cache=BANK_DIR.parent / "bank-lm-cache", parallel=args.parallel)
    deadline = None if args.max_minutes is None else time.time() + 60 * args.max_minutes
    wanted = [s for s in args.pairs.split(",") if s]
    by_name = {p["name"]: p for p in plan["pairs"]}
    unknown = [w for w in wanted if w not in by_name]
    if unknown:
        print(f"--pairs: unknown pair(s) {unknown}; the plan has {sorted(by_name)}")
        return 2

    levels = [int(x) for x in args.levels.split(",") if x] if args.levels else []
    recorders: dict[str, Recorder] = {}

    def run() -> int:
        # Breadth first over the first pairs (the bank's required five): each reaches every
        # level of judged items in turn, then the next level; then the other pairs the same
        # way. A session's CPU then widens the part every interim replay can use.
        for batch in (wanted[: args.first], wanted[args.first :]):
            for level in [*levels, None]:
                for name in batch:
                    if name not in recorders:
                        recorders[name] = Recorder(by_name[name], sha, lm, args.parallel)
                    if not recorders[name].record(deadline, upto=level):
                        return 0
        return 0

    def stopped() -> None:
        print("stopped: every judged line is kept; the same command resumes", file=sys.stderr)

    code = run_interruptible(run, on_stop=stopped)
    return EXIT_INTERRUPTED if code == EXIT_INTERRUPTED else code


if __name__ == "__main__":
    sys.exit(main())
