"""The plan of the judgement bank (``benchmarks/bank.py plan``) and what it draws on.

For each task-aspect pair of the end-to-end benchmark, :func:`pair_plan` fixes the pool of
items and the strategy columns from the pair's stored ``benchmarks/e2e.py`` run;
:func:`make_plan` writes them all, :func:`plan_sha` names the plan in every bank file, and
:func:`e2e_imports` turns the stored e2e judgements of the columns on pool items into bank
lines, so the recorder makes no call already made. ``benchmarks/bank.py`` imports this
sibling module; see its docstring for the steps.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from judgeopt.data import Record, load_records, split_holdout
from judgeopt.demo import E2E_SPLIT, PER_GROUP
from judgeopt.judge import JudgeProgram
from judgeopt.scoring import parse_rating
from judgeopt_lab import (
    BANK_FORMAT,
    bank_base,
    shared_data_dir,
    stored_items,
    strategy_json,
    strategy_key,
)

DATA = shared_data_dir()
ROOT = Path(__file__).resolve().parent
PLAN = ROOT / "bank_plan.json"
E2E_DIR = ROOT / "runs" / "e2e_runs"
BANK_DIR = ROOT / "runs" / "bank"


def e2e_dir_of(plan: dict[str, Any]) -> Path:
    """The folder of a planned pair's e2e run (``benchmarks/runs/e2e_runs/<pair>``; an
    extension's continued run, ``e2e_run`` below ``benchmarks/``)."""
    if plan.get("e2e_run"):
        return ROOT / plan["e2e_run"]
    return E2E_DIR / Path(plan["e2e_dir"]).name


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


# Plan ------------------------------------------------------------------------------------
def e2e_split(row: dict[str, Any]) -> tuple[list[Record], list[Record]]:
    """The (validation, test) records of a stored e2e run ``row``, redrawn as e2e.py drew them."""
    records = load_records(DATA / row["task"] / "full.jsonl")
    return split_holdout(
        records,
        row["n_valid"],
        row["n_test"],
        seed=E2E_SPLIT["seed"],
        per_group=PER_GROUP.get(row["task"]),
    )


def _uncounted(t: dict[str, Any]) -> bool:
    """Whether the search told this trace entry uncounted (``"counted": false``: every
    item's prompt was longer than the model's context, so it has no judgement)."""
    return t.get("counted", True) is False


def _unjudgeable(t: dict[str, Any]) -> dict[str, Any]:
    """The excluded entry of a strategy the search told uncounted (:func:`_uncounted`)."""
    return {
        "strategy": t["strategy"],
        "roles": [f"search #{int(t['number']) + 1}"],
        "reason": "unjudgeable: every prompt was longer than the model's context (the search "
        "told it uncounted)",
    }


def pair_plan(name: str, min_pool: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One pair's plan (pool of whole groups, at least ``min_pool`` items; its columns) from
    its stored e2e run, and the strategies left out of it with the reason."""
    from judgeopt.selection import confirmation_split
    from judgeopt.teleprompt import load_optimizer

    row = json.loads((E2E_DIR / name / "result.json").read_text(encoding="utf-8"))
    task, aspect = row["task"], row["aspect"]
    valid, test = e2e_split(row)
    if len(valid) != row["n_valid"] or len(test) != row["n_test"]:
        raise RuntimeError(f"{name}: the redone e2e split differs from the stored run")
    baseline = row.get("baseline_strategy") or JudgeProgram(task, aspect).strategy.as_dict()
    roles: dict[str, list[str]] = {}

    def add(strategy: dict[str, Any], role: str) -> None:
        roles.setdefault(strategy_json(strategy), []).append(role)

    add(baseline, "baseline")
    excluded = []
    for t in row["search"]["trace"]:
        if _uncounted(t):  # no item fit the model's context: no column
            excluded.append({"pair": name, **_unjudgeable(t)})
            continue
        add(t["strategy"], f"search #{int(t['number']) + 1}")
    for f in (row.get("selection") or {}).get("finalists") or []:
        add(f["strategy"], "finalist")
    for m in row.get("ensemble_members") or []:
        add(m, "ensemble member")
    columns = []
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
        # Where the pair's e2e run was when the plan was committed (the plan's sha256 names
        # every bank file, so the text stays); read it through e2e_dir_of.
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
            for k, c in enumerate(sorted(columns, key=lambda c: column_order(c["roles"])))
        ],
    }
    return plan, excluded


def column_order(roles: list[str]) -> tuple[int, int]:
    """A column's place: the baseline first, then search strategies in search order."""
    if "baseline" in roles:
        return (0, 0)
    numbers = [int(r.split("#")[1]) for r in roles if r.startswith("search #")]
    return (1, min(numbers)) if numbers else (2, 0)


def make_plan(min_pool: int) -> dict[str, Any]:
    """The whole plan of :data:`PAIRS` (what ``bank.py plan`` writes to :data:`PLAN`)."""
    pairs, excluded = [], []
    for name in PAIRS:
        p, ex = pair_plan(name, min_pool)
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


def _run_of(
    base: dict[str, Any], pair: str, run_dir: Path, budget: int
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """The base plan's ``pair``, and the trace of the e2e run in ``run_dir`` (in order) with
    its counted entries, checked: the run has the pair's stored split and reached ``budget``.

    Raises:
        ValueError: On an unknown pair, a run with another split, or a run that has not
            reached ``budget``.
    """
    by_name = {p["name"]: p for p in base["pairs"]}
    if pair not in by_name:
        raise ValueError(f"pair {pair!r} is not in the base plan; it has {sorted(by_name)}")
    bp = by_name[pair]
    row = json.loads((run_dir / "result.json").read_text(encoding="utf-8"))
    split = bp["e2e_split"]
    if (row["n_valid"], row["n_test"]) != (split["n_valid"], split["n_test"]):
        raise ValueError(
            f"{run_dir}: split {row['n_valid']}/{row['n_test']} is not the base run's "
            f"{split['n_valid']}/{split['n_test']}"
        )
    trace = sorted(row["search"]["trace"], key=lambda t: int(t["number"]))
    counted = [t for t in trace if not _uncounted(t)]
    if len(counted) < budget:
        raise ValueError(f"{run_dir}: its search evaluated {len(counted)} of {budget} strategies")
    return bp, trace, counted


def extension_plan(
    base: dict[str, Any], base_sha: str, pair: str, run_dir: Path, budget: int
) -> dict[str, Any]:
    """A plan of the new columns of ``pair``'s search continued to ``budget`` strategies.

    The continued run (``run_dir``: a copy of the pair's e2e run, its compile resumed with
    ``benchmarks/e2e.py --budget BUDGET --out-dir``; the search goes on from its saved state
    with the same constants) must have the stored run's split and repeat its search path:
    its first strategies are the base plan's search columns, in order. The extension's
    columns are the strategies it evaluated after them (self-consistency left out, as in the
    base plan), keyed after the base pair's last column; its pool is the base pair's, so a
    replay can join both (:func:`judgeopt_lab.join_pairs`). Its name is
    ``<pair>_b<budget>``; ``extends`` names the base plan's sha and pair.

    Raises:
        ValueError: On an unknown pair, a run with another split or search path, or a run
            that has not reached ``budget``.
    """
    bp, trace, counted = _run_of(base, pair, run_dir, budget)
    end = int(counted[budget - 1]["number"]) + 1 if budget else 0  # budget spent there
    seen = {strategy_json(c["strategy"]) for c in bp["columns"]}  # planned, then new
    numbers = {
        int(r.split("#")[1]): strategy_json(c["strategy"])
        for c in bp["columns"]
        for r in c["roles"]
        if r.startswith("search #")
    }
    for number, key in sorted(numbers.items()):
        if strategy_json(trace[number - 1]["strategy"]) != key:
            raise ValueError(
                f"{run_dir}: search #{number} is not the base plan's (the continued search "
                "must repeat the stored path)"
            )
    done = max(numbers) if numbers else 0
    columns, excluded = [], []
    for t in trace[done:end]:
        strategy, role = t["strategy"], f"search #{int(t['number']) + 1}"
        if _uncounted(t):
            excluded.append(_unjudgeable(t))
            continue
        key = strategy_json(strategy)
        if key in seen:
            continue
        seen.add(key)
        if str(strategy["decoding"]).startswith("sc"):
            excluded.append({"strategy": strategy, "roles": [role], "reason": "self-consistency"})
            continue
        columns.append({"strategy": strategy, "roles": [role]})
    first = len(bp["columns"]) + 1
    return {
        "format": BANK_FORMAT,
        "model": base["model"],
        "model_weights": base["model_weights"],
        "min_pool": base["min_pool"],
        "decoding": base["decoding"],
        "extends": {"plan_sha": base_sha, "pair": pair, "budget": budget},
        "pairs": [
            {
                **{k: v for k, v in bp.items() if k != "columns"},
                "name": f"{pair}_b{budget}",
                "e2e_run": _below_root(run_dir),
                "columns": [{"key": f"C{first + k:02d}", **c} for k, c in enumerate(columns)],
            }
        ],
        "excluded": excluded,
    }


def path_plan(
    base: dict[str, Any], base_sha: str, pair: str, run_dir: Path, budget: int
) -> dict[str, Any]:
    """A plan of the columns another search path of ``pair`` needs on the pair's pool.

    :func:`extension_plan` continues the stored e2e search; this takes a run whose search
    took its own path (``run_dir``: a ``benchmarks/e2e.py`` run of ``pair`` with the stored
    split, for instance the default compile of today, whose candidates differ from the stored
    run's). Its first ``budget`` counted strategies are the path (``path``, in order, each with
    its ``search #n`` role); those the base pair does not hold are the new columns (keyed
    after the base pair's last, self-consistency left out as in the base plan), and the
    others are read from the base pair's columns. The pool is the base pair's, so
    :func:`judgeopt_lab.join_pairs` joins both and :func:`judgeopt_lab.along_path` orders the
    joined columns by the path for a replay. Its name is ``<pair>_path<budget>``.

    Raises:
        ValueError: On an unknown pair, a run with another split, or a run that has not
            reached ``budget``.
    """
    bp, trace, counted = _run_of(base, pair, run_dir, budget)
    seen = {strategy_json(c["strategy"]) for c in bp["columns"]}
    path, columns, excluded = [], [], []
    for rank, t in enumerate(counted[:budget], start=1):
        strategy, role = t["strategy"], f"search #{rank}"
        path.append({"strategy": strategy, "role": role})
        key = strategy_json(strategy)
        if key in seen:
            continue
        seen.add(key)
        if str(strategy["decoding"]).startswith("sc"):
            excluded.append({"strategy": strategy, "roles": [role], "reason": "self-consistency"})
            continue
        columns.append({"strategy": strategy, "roles": [role]})
    excluded += [_unjudgeable(t) for t in trace if _uncounted(t)]
    first = len(bp["columns"]) + 1
    return {
        "format": BANK_FORMAT,
        "model": base["model"],
        "model_weights": base["model_weights"],
        "min_pool": base["min_pool"],
        "decoding": base["decoding"],
        "extends": {"plan_sha": base_sha, "pair": pair, "budget": budget, "path": "own"},
        "pairs": [
            {
                **{k: v for k, v in bp.items() if k != "columns"},
                "name": f"{pair}_path{budget}",
                "e2e_run": _below_root(run_dir),
                "path": path,
                "columns": [{"key": f"C{first + k:02d}", **c} for k, c in enumerate(columns)],
            }
        ],
        "excluded": excluded,
    }


def _below_root(path: Path) -> str:
    """``path`` relative to ``benchmarks/`` where it is below it (a committed plan names no
    machine's folders), else absolute."""
    full = path.resolve()
    return full.relative_to(ROOT).as_posix() if full.is_relative_to(ROOT) else str(full)


def plan_sha(path: Path = PLAN) -> str:
    """The plan file's name in every bank file: the first 16 hex digits of its sha256."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


# Imports ----------------------------------------------------------------------------------
def e2e_imports(plan: dict[str, Any], bounds_of: Any) -> list[dict[str, Any]]:
    """Bank lines for the stored e2e judgements of the pair's columns on pool items."""
    pair_dir = e2e_dir_of(plan)
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
        skey = strategy_json(strategy)
        key16 = strategy_key(strategy)
        rows = list(sources.get(skey, []))
        for prefix in ("test", "confirm"):
            path = pair_dir / f"{prefix}_{key16}.jsonl"
            rows += [(f"e2e:{path.name}", it.__dict__) for it in stored_items(path).values()]
        lo, hi = bounds_of(strategy)
        for source, item in rows:
            if item.get("error") is not None or item["id"] not in pool:
                continue
            base = strategy_json(bank_base(strategy))
            line = found.setdefault(
                base + "\n" + item["id"],
                {
                    "kind": "judgement",
                    "strategy": bank_base(strategy),
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


def pool_records(pair: dict[str, Any]) -> tuple[dict[str, Record], dict[str, str]]:
    """A pair's pool records by id, and each pool item's group (the item itself when it has
    none): the one map the recorder and ``status`` order their waves by."""
    by_id = {r.id: r for r in load_records(DATA / pair["task"] / "full.jsonl")}
    records = {rid: by_id[rid] for rid in pair["pool"]}
    return records, {rid: r.group_id or rid for rid, r in records.items()}
