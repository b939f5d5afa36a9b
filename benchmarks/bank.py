"""The judgement bank: every planned strategy judged on a fixed pool of items, once.

A bank is to the judge what a PrExMe surface is to the search: judgements recorded once and
replayed many times (``benchmarks/bank_rules.py``), so that a decision rule of the compile can
be tried over hundreds of validation/test splits in seconds, without an LLM call.

Three steps, each resumable:

``plan`` (``benchmarks/bank_plan.py``)
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
    ``benchmarks/runs/bank/<pair>.jsonl`` line by line: Ctrl-C or SIGTERM stop with exit
    130 and the same command resumes. Breadth first: the first ``--first`` pairs each reach
    ``--levels`` items judged by every column (in waves of whole groups, see
    :func:`judgeopt_lab.bank_todo`) one level at a time, then are completed; then the
    other pairs the same way. ``--columns rate_first`` records only the baseline and the
    search path's rate-first strategies (stopped at the score, a few seconds a call), so
    that a ``--candidates rate_first`` replay can read a pair long before its
    explanation-first columns are done. ``--path-cut K`` records only the columns a path
    plan's first ``K`` strategies need (``extend --own-path``), so that the path's budget
    ``K`` is whole on the pool before its larger budgets (``bank_budget.py``).

``twins``
    Makes the bank's *twin* columns whole (``load_bank(twins=True)``): a strategy that rates
    before it explains gives its greedy and its expected rating from one call, and the bank's
    own calls recorded both; the judgements imported from ``benchmarks/e2e.py`` hold the
    greedy rating only. Those items are judged again (stopped at the rating, which changes
    nothing in it) into ``<pair>.twins.jsonl`` as ``twin`` lines, never replacing a planned
    column's own rating; each line keeps the imported greedy rating beside the new one
    (``stored_greedy``), a check of the re-judging. Resumable like ``record``.

``pack``
    Moves the plain lines into ``<pair>.jsonl.gz`` (the committed form); the loader
    (:func:`judgeopt_lab.load_bank`) reads both.

``extend`` (a pair's search continued to a larger budget)
    The bank holds the strategies a budget-20 search evaluated. To see whether the gain grows
    with the budget, a pair's e2e compile is continued: its run folder is copied and
    ``benchmarks/e2e.py --pairs TASK:ASPECT --budget 40 --out-dir COPY_PARENT`` resumes the
    search from its saved state (same constants; the first 20 strategies are the stored
    ones). ``extend --pairs PAIR --run-dir COPY --budget 40 --out bank_plan_b40.json`` writes
    a plan of the new strategies only (pair ``PAIR_b40``, the same pool), committed before
    they are judged on it; ``record --plan bank_plan_b40.json`` judges them like any pair
    (importing what the continued compile judged), and :func:`judgeopt_lab.join_pairs`
    joins the two pairs' columns for a replay. With ``--own-path`` the run is another compile
    of the pair whose search took its own path (today's default compile, say): the plan
    (``PAIR_path<budget>``, :func:`bank_plan.path_plan`) holds the columns that path needs
    beyond the base pair's and the path itself, which :func:`judgeopt_lab.along_path` follows
    in a replay of the joined pairs.

Usage:
    python benchmarks/bank.py plan [--min-pool 250]
    python benchmarks/bank.py record [--pairs summeval_coherence,...] [--parallel 8]
        [--max-minutes M] [--levels 150,200] [--first 5] [--columns all|rate_first]
        [--path-cut K]
    python benchmarks/bank.py twins [--pairs ...] [--parallel 8] [--max-minutes M]
    python benchmarks/bank.py status
    python benchmarks/bank.py pack
    python benchmarks/bank.py extend --pairs PAIR --run-dir DIR --budget 40 --out PLAN_FILE
        [--own-path]
    (every command but plan and extend takes --plan PLAN_FILE; default bank_plan.json)

Set JUDGEOPT_THREADS to the CPU threads of the local model (default 2).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from judgeopt.evaluate import CallPool
from judgeopt.judge import ArtifactStore, JudgeProgram, load_task
from judgeopt.scoring import parse_rating
from judgeopt_lab import (
    EXIT_INTERRUPTED,
    bank_base,
    bank_lines,
    bank_todo,
    judgement_covers,
    keep_judgement,
    markdown_table,
    path_cut_columns,
    rate_first_columns,
    run_interruptible,
    strategy_json,
    write_json,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bank_plan import (  # noqa: E402 - the sibling script, found through the line above
    BANK_DIR,
    PLAN,
    e2e_dir_of,
    e2e_imports,
    e2e_split,
    extension_plan,
    make_plan,
    path_plan,
    plan_sha,
    pool_records,
)

log = logging.getLogger("bank")

VERIFY_ITEMS = 8
#: Judged lines between two ``chunk`` lines (calls, tokens, seconds).
STAT_EVERY = 32
#: Items per wave of whole groups the recorder completes before the next (``bank_todo``).
WAVE_ITEMS = 16


class Recorder:
    """Judges one pair's missing (strategy, item) pairs and appends them to its bank file."""

    def __init__(self, plan: dict[str, Any], sha: str, lm: Any, parallel: int) -> None:
        self.plan = plan
        self.sha = sha
        self.lm = lm
        self.parallel = parallel
        self.task = load_task(plan["task"])
        self.path = BANK_DIR / f"{plan['name']}.jsonl"
        row = json.loads((e2e_dir_of(plan) / "result.json").read_text(encoding="utf-8"))
        valid, _ = e2e_split(row)
        self.valid = valid
        self.records, self.groups = pool_records(plan)
        art = e2e_dir_of(plan) / "ckpt" / "artifacts.json"
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
            # A strategy that rates first stops at its rating (the same rating and
            # distribution; the explanation after it is not judged).
            explain=False,
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
            "strategy": bank_base(program.strategy.as_dict()),
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
            key = strategy_json(base)
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

    def record(
        self,
        deadline: float | None,
        upto: int | None = None,
        columns: str = "all",
        path_cut: int | None = None,
    ) -> bool:
        """Judge what is missing, or only until at least ``upto`` pool items are judged by
        every column; False when ``deadline`` stopped it first. ``columns``: ``"all"``, or
        ``"rate_first"``: only the baseline and the search path's rate-first strategies
        (:func:`judgeopt_lab.rate_first_columns`), the cut a ``--candidates rate_first``
        replay reads. ``path_cut``: only the columns the path's first ``path_cut``
        strategies need (:func:`judgeopt_lab.path_cut_columns`), the cut a budget replay
        (``bank_budget.py``) reads at that budget."""
        if not self.path.exists() and not (BANK_DIR / f"{self.plan['name']}.jsonl.gz").exists():
            self.write([{"kind": "header", "plan_sha": self.sha, "pair": self.plan["name"]}])
        have = self.have()
        if not any(str(ln["source"]).startswith("e2e:") for ln in have.values()):
            imported = e2e_imports(self.plan, self.bounds)
            self.write(imported)
            log.info("%s: imported %d stored e2e judgements", self.plan["name"], len(imported))
            have = self.have()
        self.verify(have)
        plan = self.plan
        if columns == "rate_first":
            plan = {**plan, "columns": rate_first_columns(plan["columns"])}
        if path_cut is not None:
            plan = {**plan, "columns": path_cut_columns(plan["columns"], path_cut)}
        todo = bank_todo(plan, have, self.groups, wave=WAVE_ITEMS, upto=upto)
        log.info(
            "%s: %d (strategy, item) calls to make%s%s%s",
            self.plan["name"],
            len(todo),
            "" if columns == "all" else f" for the {len(plan['columns'])} {columns} columns",
            "" if path_cut is None else f" for the path's first {path_cut} strategies",
            "" if upto is None else f" (until {upto} items are judged by every column)",
        )
        self._feed([(json.loads(b), rid) for b, rid in todo], deadline)
        self.artifacts.save()
        return deadline is None or time.time() <= deadline


def twin_todo(plan: dict[str, Any], have: dict[tuple[str, str], dict[str, Any]]) -> list[Any]:
    """The (base strategy, item, stored line) of every rating-first planned column whose
    other decoding the bank does not hold (imported greedy judgements), minus those already
    in the pair's twin file."""
    done = {
        (strategy_json(ln["strategy"]), str(ln["id"]))
        for ln in bank_lines(BANK_DIR, f"{plan['name']}.twins")
        if ln.get("kind") == "twin" and ln.get("error") is None
    }
    out, seen = [], set()
    for c in plan["columns"]:
        base = dict(c["strategy"])
        decoding = base.pop("decoding")
        rates_first = base.get("cot", "none") in ("none", "suffix")
        if not rates_first or base.get("reference") == "dialectic":
            continue
        other = "expected" if decoding == "greedy" else "greedy"
        key = strategy_json(base)
        for rid in plan["pool"]:
            line = have.get((key, rid))
            if (key, rid) in seen or (key, rid) in done or judgement_covers(line, other):
                continue
            seen.add((key, rid))
            out.append((base, rid, line))
    return out


def record_twins(recorder: Recorder, deadline: float | None) -> bool:
    """Judge the pair's missing twin judgements into ``<pair>.twins.jsonl``; False when
    ``deadline`` stopped it first."""
    name = recorder.plan["name"]
    todo = twin_todo(recorder.plan, recorder.have())
    log.info("%s: %d twin judgements to make", name, len(todo))
    if not todo:
        return True
    path = BANK_DIR / f"{name}.twins.jsonl"
    if not path.exists():
        with path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"kind": "header", "plan_sha": recorder.sha, "pair": name}) + "\n")
    stored = {(strategy_json(b), rid): line for b, rid, line in todo}
    pool: CallPool[dict[str, Any]] = CallPool(
        recorder._calls([(b, rid) for b, rid, _ in todo]), recorder.parallel, name="twins"
    )
    done = 0
    t0 = time.perf_counter()
    try:
        with path.open("a", encoding="utf-8") as fh:
            for _, line in pool:
                old = stored.get((strategy_json(line["strategy"]), line["id"])) or {}
                row = {**line, "kind": "twin", "stored_greedy": old.get("greedy")}
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                fh.flush()
                done += 1
                if done % 32 == 0:
                    log.info(
                        "%s: %d/%d twins (%.1f s/item)",
                        name,
                        done,
                        len(todo),
                        (time.perf_counter() - t0) / done,
                    )
                if deadline is not None and time.time() > deadline:
                    break
    finally:
        pool.stop()
    return deadline is None or time.time() <= deadline


def status(plan: dict[str, Any]) -> list[list[object]]:
    """Per pair: pool, columns, judgements held, calls still to make (a pair not started
    counts the stored e2e judgements it will import) and how many of them the rate-first
    cut needs (``record --columns rate_first``), the pool items in groups judged by
    every column (what ``bank_rules.py --partial`` can replay), bank calls made and their
    hours."""
    rows = []
    for p in plan["pairs"]:
        _, groups = pool_records(p)
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

            for line in e2e_imports(p, bounds):
                have[(strategy_json(line["strategy"]), line["id"])] = line
        todo = bank_todo(p, have)
        cut_todo = bank_todo({**p, "columns": rate_first_columns(p["columns"])}, have)
        open_groups = {groups[rid] for _, rid in todo}
        rows.append(
            [
                p["name"],
                p["n_pool"],
                len(p["columns"]),
                len(have),
                len(todo),
                len(cut_todo),
                sum(groups[rid] not in open_groups for rid in p["pool"]),
                n_bank,
                f"{seconds / 3600:.2f}",
            ]
        )
    return rows


def _extend(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``extend``: write the plan of one pair's continued search's new columns."""
    if not (args.pairs and args.run_dir and args.budget and args.out):
        parser.error("extend needs --pairs PAIR, --run-dir DIR, --budget N and --out FILE")
    pairs = [x for x in args.pairs.split(",") if x]
    if len(pairs) != 1:
        parser.error(f"extend: --pairs names the one pair whose search went on; got {pairs}")
    out, base_path = Path(args.out), Path(args.plan)
    if out.exists() and not args.force:
        print(f"{out} exists: a plan is registered once (use --force before any judging)")
        return 2
    base = json.loads(base_path.read_text(encoding="utf-8"))
    try:
        make = path_plan if args.own_path else extension_plan
        made = make(base, plan_sha(base_path), pairs[0], Path(args.run_dir), args.budget)
    except ValueError as e:
        parser.error(f"extend: {e}")
    write_json(out, made)
    cols = made["pairs"][0]["columns"]
    print(f"wrote {out} (sha256 {plan_sha(out)}): {len(cols)} new columns of {pairs[0]}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("command", choices=["plan", "extend", "record", "twins", "status", "pack"])
    p.add_argument(
        "--plan",
        default=str(PLAN),
        help="the plan to record, report or pack (an extension's file for its new columns)",
    )
    p.add_argument("--min-pool", type=int, default=250)
    p.add_argument("--run-dir", help="extend: the pair's continued e2e run")
    p.add_argument("--budget", type=int, help="extend: the budget the search was continued to")
    p.add_argument("--out", help="extend: where the extension plan goes")
    p.add_argument(
        "--own-path",
        action="store_true",
        help="extend: the run's search took its own path (another compile of the pair, not "
        "the stored one continued): plan the columns that path needs (bank_plan.path_plan)",
    )
    p.add_argument("--pairs", default=None, help="default: every pair of the plan")
    p.add_argument("--parallel", type=int, default=8)
    p.add_argument("--max-minutes", type=float, default=None)
    p.add_argument(
        "--levels",
        default="150,200",
        help="record: judged items each of the first pairs reaches before the next level",
    )
    p.add_argument("--first", type=int, default=5, help="record: pairs filled breadth first")
    p.add_argument(
        "--columns",
        choices=["all", "rate_first"],
        default="all",
        help="record: every column, or only the baseline and the search path's rate-first "
        "strategies (the cut `bank_fixed.py --candidates rate_first` replays; cheap calls "
        "stopped at the score, so a pair's cut is complete long before the pair)",
    )
    p.add_argument(
        "--path-cut",
        type=int,
        default=None,
        metavar="K",
        help="record: only the columns a path plan's first K strategies need (the baseline "
        "and search #1 to #K), so that the path's budget K is whole on the pool first",
    )
    p.add_argument("--force", action="store_true", help="plan: overwrite an existing plan")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if args.command == "plan":
        target = Path(args.plan)
        if target.exists() and not args.force:
            print(f"{target} exists: a plan is registered once (use --force before any judging)")
            return 2
        write_json(target, make_plan(args.min_pool))
        print(f"wrote {target} (sha256 {plan_sha(target)})")
        return 0
    if args.command == "extend":
        return _extend(p, args)
    if args.path_cut is not None and args.path_cut < 1:
        p.error(f"--path-cut {args.path_cut}: must be at least 1 (the baseline)")
    plan_path = Path(args.plan)
    if not plan_path.is_file():
        p.error(f"--plan {plan_path}: no such file")
    plan = json.loads(plan_path.read_text(encoding="utf-8"))
    if args.command == "status":
        print(
            markdown_table(
                [
                    "pair",
                    "pool",
                    "columns",
                    "judgements",
                    "calls to make",
                    "of them rate-first cut",
                    "items judged by all",
                    "bank calls",
                    "hours",
                ],
                status(plan),
            )
        )
        return 0
    if args.command == "pack":
        from judgeopt_lab import pack_bank

        for pair in plan["pairs"]:
            pack_bank(BANK_DIR, pair["name"])
            pack_bank(BANK_DIR, f"{pair['name']}.twins")
        return 0
    from judgeopt.lm import make_lm

    sha = plan_sha(plan_path)
    lm = make_lm("local", cache=BANK_DIR.parent / "bank-lm-cache", parallel=args.parallel)
    deadline = None if args.max_minutes is None else time.time() + 60 * args.max_minutes
    wanted = [s for s in (args.pairs or "").split(",") if s] or [q["name"] for q in plan["pairs"]]
    by_name = {p["name"]: p for p in plan["pairs"]}
    unknown = [w for w in wanted if w not in by_name]
    if unknown:
        print(f"--pairs: unknown pair(s) {unknown}; the plan has {sorted(by_name)}")
        return 2

    levels = [int(x) for x in args.levels.split(",") if x] if args.levels else []
    recorders: dict[str, Recorder] = {}

    def run_twins() -> int:
        for name in wanted:
            recorder = recorders.setdefault(name, Recorder(by_name[name], sha, lm, args.parallel))
            if not record_twins(recorder, deadline):
                return 0
        return 0

    def run() -> int:
        if args.command == "twins":
            return run_twins()
        # Breadth first over the first pairs (the bank's required five): each reaches every
        # level of judged items in turn, then the next level; then the other pairs the same
        # way. A session's CPU then widens the part every interim replay can use.
        for batch in (wanted[: args.first], wanted[args.first :]):
            for level in [*levels, None]:
                for name in batch:
                    if name not in recorders:
                        recorders[name] = Recorder(by_name[name], sha, lm, args.parallel)
                    recorder = recorders[name]
                    if not recorder.record(
                        deadline, upto=level, columns=args.columns, path_cut=args.path_cut
                    ):
                        return 0
        return 0

    def stopped() -> None:
        print("stopped: every judged line is kept; the same command resumes", file=sys.stderr)

    code = run_interruptible(run, on_stop=stopped)
    return EXIT_INTERRUPTED if code == EXIT_INTERRUPTED else code


if __name__ == "__main__":
    sys.exit(main())
