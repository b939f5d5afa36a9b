"""Gain per CPU hour: each selection rule's gain on the judgement bank, with what its compile
spends judging (no LLM call).

For every complete pair of the bank, every rule of :data:`judgeopt_lab.RULES` is replayed as
``benchmarks/bank_rules.py`` replays it (:func:`judgeopt_lab.replay_bank`: the same seeded
splits of whole groups, constants and priors chosen leave-one-pair-out) at ``--n-valid``
labelled items (100), once per search budget ``k`` of ``--budgets``: the pair cut to the
baseline and the first ``k`` strategies its budget-20 e2e search evaluated
(:func:`judgeopt_lab.first_k`; a search at budget ``k`` that took the same path). Beside each
rule's mean test gain over the baseline (standard error over the pairs) stands the CPU time
its compile spends judging on the split's validation items (:func:`judgeopt_lab.compile_seconds`:
every evaluated strategy on every validation item; ``confirm`` and ``veto`` every strategy on
the search half and only the baseline and their finalists on the confirmation half;
``baseline`` and ``prior`` nothing), and the gain per CPU hour.

``--racing-budgets`` (20) replays those budgets again with the compile's racing (rows
``K raced``; :func:`judgeopt_lab.raced`): each strategy judged on a growing prefix of the
search items and dropped when its bound cannot reach the 5th best full score so far, as
``[racing] enabled = true`` runs it; a dropped strategy costs its prefix and is not compared.
The search's path is the bank's in every row (a budget-20 e2e search's order; the replay
cannot show where another budget or a dropped strategy's partial score would have led).

Seconds per judgement come from the bank's ``chunk`` lines (the recorder's wall time per 32
judgements, 8 calls in flight on two threads), shared among a chunk's judgements in
proportion to their latencies (``--share latency``) or equally (``--share equal``; the JSON
holds both totals); the judgements imported from ``benchmarks/e2e.py`` without a call get a
per-pair line of the measured costs on the answer's length (:func:`judgeopt_lab.judgement_costs`).
A *CPU hour* is an hour of that recorder (the unit of the bank's 27.4 hours in
docs/benchmarks.md, section 13), not a core-hour.

Each row is also compared, pair by pair, with the reference (``--reference``, default the
bank's default in ``benchmarks/results/bank_rules.json``) at the largest budget: the mean
paired difference of gains over the pairs with its 95 % t interval. A row whose interval
holds 0 gains the same *within noise*; the better default on cost is the cheapest row that
costs less, meets the default's criterion (worse than the baseline in at most 10 % of the
splits on every pair) and gains at least as much on average (over five pairs the interval
holds 0 even for rows that gain nothing, so a lower mean is not taken as "the same").

``--cost-accounting stopped`` costs each judgement of a strategy that rates first and
explains after (``cot`` ``suffix``, no ``dialectic`` reference) as if its call stopped at the
score, as a compile runs it since the stop (:func:`judgeopt_lab.stopped_costs`; the bank
recorded those calls with their explanation). ``--stop-estimate none`` (the default): per
item, the median recorded cost of the pair's ``cot`` ``none`` columns with the same other
factors, else of all its ``cot`` ``none`` columns (``stop_at_score.json`` measured a stopped
suffix call at 0.98-1.07 times a ``none`` call's seconds); ``ratio``: its recorded cost times
``stop_at_score.json``'s measured stopped/explained ratio (0.43). The rows then also hold
the hours as recorded and under the other estimate (``cpu_hours_by_accounting``).
``recorded`` (the default) reproduces ``bank_cost.json``.

``--candidates rate_first`` replays the pairs cut to the baseline and the search path's
rate-first strategies (``JudgeProgram.rates_first``), in the path's order
(:func:`judgeopt_lab.rate_first_k`; budget ``k``: the baseline and the first ``k - 1`` of
them; a budget whose cut equals a smaller one's on every pair is recorded as its alias).
It approximates a search that judges no explanation-first candidate but the baseline by the
path of one that did, minus those: a search that forbade them would have spent the budget on
other rate-first strategies. ``--candidates all,rate_first`` replays both, compares every
row with ``all``'s reference and writes a ``decision``: per rule, rate-first against all at
the largest budget (paired difference over the pairs with its standard error, whether the
rate-first gain is within one standard error of the all-candidates gain, issue 57's bound
for a saving that changes what is judged; the cost fraction), and estimated wall minutes of
the compile on this machine (``wall``: each column's recorder seconds times the ratio, by
kind of call, of the e2e compiles' wall seconds, or ``stop_at_score.json``'s, to the bank's).

Writes ``benchmarks/results/bank_cost.json`` (with provenance)::

    {"budgets": {K: {"rules": {RULE: {"mean_gain", "se", "cpu_hours",
     "gain_per_cpu_hour", "gain_per_cpu_hour_interval", "vs_reference", "per_pair", ...}},
     "lopo_default": {...}}}, "reference", "better_default_on_cost", "costs", "settings"}

or, with two candidate sets, ``{"candidates": {SET: {"budgets", "budget_aliases",
"reference", "better_default_on_cost"}}, "decision", "wall", "stop", "costs", "settings"}``.

Usage:
    python benchmarks/bank_cost.py [--budgets 5,8,12,20] [--racing-budgets 20]
                                   [--n-valid 100] [--splits 200]
    python benchmarks/bank_cost.py --cost-accounting stopped --candidates all,rate_first \
        --json benchmarks/results/bank_cost_rate_first.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from judgeopt_lab import (
    RULES,
    STOP_ESTIMATES,
    BankPair,
    RuleSpec,
    bank_lines,
    bank_splits,
    cost_matrix,
    first_k,
    judgement_costs,
    load_bank,
    markdown_table,
    raced,
    rate_first_k,
    rates_first,
    replay_bank,
    rule_cost_rows,
    split_inputs,
    stopped_costs,
    strategy_json,
    write_json,
)

ROOT = Path(__file__).resolve().parent
MAX_WORSE = 0.10
LOPO = "(default chosen left out)"


def t_interval(values: Sequence[float], level: float = 0.95) -> list[float] | None:
    """The mean of ``values`` +- the two-sided ``level`` t quantile times its standard
    error (``None`` below two values)."""
    v = np.asarray(values, dtype=float)
    if v.size < 2:
        return None
    half = stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size)
    return [float(v.mean() - half), float(v.mean() + half)]


def cost_rows(
    bank: Mapping[str, BankPair],
    costs: Mapping[str, Mapping[str, np.ndarray]],
    payload: Mapping[str, Any],
    rows: Mapping[str, Sequence[int]],
    *,
    n_valid: int,
    n_splits: int,
    seed: int,
    racing: bool = False,
) -> dict[str, Any]:
    """Per rule (and the default chosen left out), the replay's gains at ``n_valid`` with the
    compile's judging hours: ``costs[share][pair]`` is the pair's full cost matrix, ``rows``
    the pair's columns in the replayed (cut) bank; ``racing``: the compiles race.
    ``costs["latency"]`` gives ``cpu_hours``, ``costs["equal"]`` ``cpu_hours_equal_share``,
    any other key an alternative accounting's hours (``cpu_hours_by_accounting``)."""
    out: dict[str, Any] = {}
    names = sorted(bank)
    splits = {p: bank_splits(bank[p], n_valid, n_splits, seed) for p in names}
    rules = list(payload["rules"])
    hours: dict[str, dict[str, dict[str, float]]] = {}
    inputs = {p: split_inputs(bank[p], splits[p]) for p in names}
    for share, by_pair in costs.items():
        for p in names:
            cost = by_pair[p][list(rows[p])]
            per_rule = rule_cost_rows(
                bank[p],
                cost,
                splits[p],
                rules,
                prior=payload["priors"].get(p),
                racing=racing,
                inputs=inputs[p],
            )
            for r, secs in per_rule.items():
                hours.setdefault(share, {}).setdefault(r, {})[p] = float(secs.mean()) / 3600
    key = str(n_valid)
    for r in rules:
        row = payload["rules"][r]["n_valid"][key]
        out[r] = _row(row, {s: hours[s][r] for s in hours}, setting=row.get("setting"))
    lopo = payload.get("lopo_default", {}).get("n_valid", {}).get(key)
    if lopo is not None:
        chosen = {p: v["rule"] for p, v in lopo["per_pair"].items()}
        out[LOPO] = _row(lopo, {s: {p: hours[s][chosen[p]][p] for p in names} for s in hours})
    return out


def _row(
    replayed: Mapping[str, Any],
    hours: Mapping[str, Mapping[str, float]],
    setting: Any = None,
) -> dict[str, Any]:
    per_pair = replayed["per_pair"]
    other = [(k, v) for k, v in hours.items() if k not in ("latency", "equal")]
    h = float(np.mean(list(hours["latency"].values())))
    gain = float(replayed["mean_gain"])
    interval = t_interval([v["mean_gain"] for v in per_pair.values()])
    per_hour = None if h <= 0 else gain / h
    return {
        "mean_gain": gain,
        "se": replayed["se"],
        "gain_interval": interval,
        "worse_share": replayed["worse_share"],
        "max_pair_worse_share": replayed["max_pair_worse_share"],
        "baseline_share": float(np.mean([v["baseline_share"] for v in per_pair.values()])),
        "cpu_hours": h,
        "cpu_hours_equal_share": float(np.mean(list(hours["equal"].values())))
        if "equal" in hours
        else None,
        **(
            {"cpu_hours_by_accounting": {k: float(np.mean(list(v.values()))) for k, v in other}}
            if other
            else {}
        ),
        "gain_per_cpu_hour": per_hour,
        "gain_per_cpu_hour_interval": None
        if per_hour is None or interval is None
        else [v / h for v in interval],
        **({"setting": setting} if setting is not None else {}),
        "per_pair": {
            p: {
                "mean_gain": v["mean_gain"],
                "split_se": v.get("split_se"),
                "worse_share": v["worse_share"],
                "baseline_share": v["baseline_share"],
                "cpu_hours": hours["latency"][p],
                **({"cpu_hours_by_accounting": {k: a[p] for k, a in other}} if other else {}),
                **({"rule": v["rule"]} if "rule" in v else {}),
            }
            for p, v in per_pair.items()
        },
    }


def compare(
    budgets: Mapping[str, Any],
    reference: tuple[str, str],
    ref: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Add to every row its paired difference of gains with ``reference`` (budget, rule)
    over the pairs (``vs_reference``: mean, 95 % t interval, ``within_noise``), and return
    the better default on cost: the cheapest row that meets the default's criterion, costs
    less than the reference and gains at least as much on average (the difference within
    noise or above it; ``None``: no row). A row whose mean gain is below the reference's is
    not taken even when its interval holds 0: over a few pairs the interval holds 0 for
    rows that gain nothing, the baseline's included. ``ref``: the reference row, when it is
    not among ``budgets`` (another candidate set's)."""
    k_ref, r_ref = reference
    if ref is None:
        ref = budgets[k_ref]["rules"][r_ref]
    better = None
    for k, b in budgets.items():
        for name, row in b["rules"].items():
            diffs = [
                row["per_pair"][p]["mean_gain"] - ref["per_pair"][p]["mean_gain"]
                for p in ref["per_pair"]
            ]
            iv = t_interval(diffs)
            mean = float(np.mean(diffs))
            row["vs_reference"] = {
                "mean_difference": mean,
                "interval": iv,
                "within_noise": iv is not None and iv[0] <= 0 <= iv[1],
            }
            if (
                mean >= 0
                and row["max_pair_worse_share"] <= MAX_WORSE
                and row["cpu_hours"] < ref["cpu_hours"]
                and name != LOPO
                and (better is None or row["cpu_hours"] < better["cpu_hours"])
            ):
                better = {"budget": k, "rule": name, **{f: row[f] for f in _BRIEF}}
                better["vs_reference"] = row["vs_reference"]
    return better


_BRIEF = ("mean_gain", "se", "cpu_hours", "gain_per_cpu_hour", "max_pair_worse_share")


def _fmt_interval(iv: Sequence[float] | None, digits: int = 3, sign: bool = True) -> str:
    if iv is None:
        return "-"
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    return f"[{f.format(iv[0])}, {f.format(iv[1])}]"


def tables(payload: Mapping[str, Any], candidates: str = "all") -> str:
    out = []
    ref = payload["reference"]
    for k, b in payload["budgets"].items():
        rows = []
        for name, v in b["rules"].items():
            vs = v.get("vs_reference") or {}
            rows.append(
                [
                    name,
                    f"{v['mean_gain']:+.3f} ({v['se']:.3f})",
                    f"{vs['mean_difference']:+.3f} {_fmt_interval(vs['interval'])}" if vs else "-",
                    f"{100 * v['worse_share']:.1f} % ({100 * v['max_pair_worse_share']:.1f} %)",
                    f"{v['cpu_hours']:.2f}",
                    "-"
                    if v["gain_per_cpu_hour"] is None
                    else f"{v['gain_per_cpu_hour']:+.3f} "
                    + _fmt_interval(v["gain_per_cpu_hour_interval"]),
                ]
            )
        first = k.split()[0]
        which = (
            f"first {first} strategies of the search"
            if candidates == "all"
            else f"the baseline and the first {int(first) - 1} rate-first strategies of the search"
        )
        out.append(f"budget {k} ({which}), n_valid = {payload['settings']['n_valid']}")
        out.append(
            markdown_table(
                [
                    "rule",
                    "mean gain (se over pairs)",
                    f"minus {ref['rule']} at {ref['budget']} [95 %]",
                    "worse (worst pair)",
                    "CPU hours",
                    "gain per CPU hour [95 %]",
                ],
                rows,
            )
        )
    return "\n\n".join(out)


def budget_table(payload: Mapping[str, Any], rules: Sequence[str]) -> str:
    """The cost by budget of a few rules: gain (se), CPU hours, gain per CPU hour."""
    rows = []
    for name in rules:
        for k, b in payload["budgets"].items():
            v = b["rules"].get(name)
            if v is None:
                continue
            rows.append(
                [
                    name,
                    k,
                    f"{v['mean_gain']:+.3f} ({v['se']:.3f})",
                    f"{100 * v['max_pair_worse_share']:.1f} %",
                    f"{v['cpu_hours']:.2f}",
                    "-" if v["gain_per_cpu_hour"] is None else f"{v['gain_per_cpu_hour']:+.3f}",
                ]
            )
    return markdown_table(
        ["rule", "budget", "mean gain (se)", "worst pair worse", "CPU hours", "gain / CPU h"],
        rows,
    )


CANDIDATES = ("all", "rate_first")
ACCOUNTINGS = ("recorded", "stopped")
STOP_AT_SCORE = ROOT / "results" / "stop_at_score.json"
#: The wall accountings (:func:`wall_factor`'s sources), the first the estimate.
WALLS = ("wall (e2e)", "wall (stop_at_score)")


def stop_ratio(path: Path = STOP_AT_SCORE) -> dict[str, Any]:
    """The measured ratio of a stopped to an explained rate-first call (``cot`` ``suffix``):
    ``stop_at_score.json``'s seconds per item, pooled and per pair."""
    d = json.loads(path.read_text(encoding="utf-8"))
    s = d["summary"]
    per_pair = {
        f"{r['task']}_{r['aspect']}": r["seconds_stop"] / r["seconds_explain"]
        for r in d["rows"]
        if r["cot"] == "suffix"
    }
    return {
        "ratio": s["suffix_seconds_per_item_stop"] / s["suffix_seconds_per_item_explain"],
        "per_pair": per_pair,
        "stopped_over_none": {
            f"{r['task']}_{r['aspect']}": r["seconds_stop"] / n["seconds_stop"]
            for r in d["rows"]
            for n in d["rows"]
            if r["cot"] == "suffix"
            and n["cot"] == "none"
            and (r["task"], r["aspect"]) == (n["task"], n["aspect"])
        },
        "model": d.get("model"),
        "n_per_row": d.get("limit"),
    }


def rating_only(strategy: Mapping[str, Any], *, stopped: bool) -> bool:
    """A call of ``strategy`` generates only its rating: ``cot`` ``none`` (rating first), or,
    ``stopped``, any strategy that rates first (its call ends at the score)."""
    if stopped:
        return rates_first(strategy)
    return strategy.get("cot", "none") == "none" and rates_first(strategy)


def wall_factor(
    bank: Mapping[str, BankPair],
    recorded: Mapping[str, np.ndarray],
    plan: Mapping[str, Any],
    stop: Path = STOP_AT_SCORE,
) -> dict[str, Any]:
    """How a compile's judging wall time on this machine compares with the recorder's
    seconds, for calls that generate only the rating (``rating``) and calls that write an
    explanation (``explain``): per strategy of each pair's e2e compile
    (``ckpt/evaluations.jsonl``: its wall seconds per call on the validation items), divided
    by the bank's recorded mean cost of the same column on those items (median over the
    strategies, ``e2e``); and per row of ``stop_at_score.json`` (its seconds per item with
    the explanation; the bank column of the same ``cot`` with the baseline's other factors)
    divided by that column's mean recorded cost on the pool (median, ``stop_at_score``)."""
    dirs = {p["name"]: ROOT / "runs" / "e2e_runs" / Path(p["e2e_dir"]).name for p in plan["pairs"]}
    e2e: dict[str, dict[str, list[float]]] = {"rating": {}, "explain": {}}
    for name, pair in bank.items():
        ckpt = dirs[name] / "ckpt"
        if not (ckpt / "evaluations.jsonl").is_file():
            continue
        items: dict[str, list[str]] = {}
        for text in (ckpt / "items.jsonl").read_text(encoding="utf-8").splitlines():
            x = json.loads(text)
            items.setdefault(x["strategy"], []).append(str(x["item"]["id"]))
        where = {rid: k for k, rid in enumerate(pair.ids)}
        rows = {strategy_json(c.strategy): r for r, c in enumerate(pair.columns)}
        for text in (ckpt / "evaluations.jsonl").read_text(encoding="utf-8").splitlines():
            e = json.loads(text)
            key = strategy_json(e["strategy"])
            cols = [where[i] for i in items.get(key, []) if i in where]
            if key not in rows or not cols or not e.get("calls") or not e.get("seconds"):
                continue
            bank_seconds = float(np.nanmean(recorded[name][rows[key], cols]))
            kind = "rating" if rating_only(e["strategy"], stopped=False) else "explain"
            e2e[kind].setdefault(name, []).append(e["seconds"] / e["calls"] / bank_seconds)
    measured: dict[str, dict[str, float]] = {"rating": {}, "explain": {}}
    if stop.is_file():
        for r in json.loads(stop.read_text(encoding="utf-8"))["rows"]:
            name = f"{r['task']}_{r['aspect']}"
            if name not in bank:
                continue
            pair = bank[name]
            want = {**pair.baseline.strategy, "cot": r["cot"], "decoding": "greedy"}
            row = next((i for i, c in enumerate(pair.columns) if dict(c.strategy) == want), None)
            if row is None:
                continue
            kind = "rating" if r["cot"] == "none" else "explain"
            per_item = r["seconds_explain"] / r["n"]
            measured[kind][name] = per_item / float(np.nanmean(recorded[name][row]))
    out: dict[str, Any] = {}
    for source, by_kind in (("e2e", e2e), ("stop_at_score", measured)):
        block: dict[str, Any] = {}
        for kind, values in by_kind.items():
            flat = (
                [v for vs in values.values() for v in vs]
                if source == "e2e"
                else list(values.values())
            )
            block[kind] = float(np.median(flat)) if flat else None
            block[f"{kind}_n"] = len(flat)
            block[f"{kind}_values"] = values
        out[source] = block
    return out


def wall_matrix(
    pair: BankPair, cost: np.ndarray, factors: Mapping[str, Any], *, stopped: bool
) -> np.ndarray:
    """``cost`` in estimated wall seconds of a compile on this machine: each column times
    the factor of its kind (:func:`wall_factor`'s ``rating`` or ``explain``)."""
    f = np.array(
        [
            factors["rating" if rating_only(c.strategy, stopped=stopped) else "explain"]
            for c in pair.columns
        ],
        dtype=float,
    )
    return cost * f[:, None]


def stopped_matrices(
    bank: Mapping[str, BankPair],
    recorded: Mapping[str, Mapping[str, np.ndarray]],
    estimate: str,
) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, Any]]:
    """The cost matrices with rate-first calls stopped at the score (:func:`stopped_costs`):
    ``latency`` and ``equal`` by ``estimate``, ``recorded`` (latency, as recorded) and
    ``stopped (OTHER)`` (latency, by the other estimate); and what the estimates did."""
    measured = stop_ratio()
    stopped: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    notes: dict[str, dict[str, Any]] = {}
    for est in STOP_ESTIMATES:
        for share in recorded:
            for name, pair in bank.items():
                m, how = stopped_costs(
                    pair, recorded[share][name], estimate=est, ratio=measured["ratio"]
                )
                stopped.setdefault(est, {}).setdefault(share, {})[name] = m
                if share == "latency":
                    notes.setdefault(est, {})[name] = [h.__dict__ for h in how]
    other = next(e for e in STOP_ESTIMATES if e != estimate)
    matrices = {
        **stopped[estimate],
        "recorded": dict(recorded["latency"]),
        f"stopped ({other})": stopped[other]["latency"],
    }
    info = {
        "estimate": estimate,
        "measured": measured,
        "columns": notes,
        "mean_seconds_per_judgement": {
            est: {n: float(np.nanmean(m)) for n, m in stopped[est]["latency"].items()}
            for est in STOP_ESTIMATES
        },
    }
    return matrices, info


def wall_matrices(
    bank: Mapping[str, BankPair],
    cost: Mapping[str, np.ndarray],
    wall: Mapping[str, Any],
    stopped: bool,
) -> dict[str, dict[str, np.ndarray]]:
    """Per wall accounting (:data:`WALLS`) whose factors :func:`wall_factor` measured, each
    pair's ``cost`` in estimated wall seconds (:func:`wall_matrix`)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for source, key in zip(("e2e", "stop_at_score"), WALLS, strict=True):
        if wall[source]["rating"] is None or wall[source]["explain"] is None:
            continue
        out[key] = {
            n: wall_matrix(pair, cost[n], wall[source], stopped=stopped) for n, pair in bank.items()
        }
    return out


def replay_candidates(
    bank: Mapping[str, BankPair],
    matrices: Mapping[str, Mapping[str, np.ndarray]],
    candidates: str,
    runs: Sequence[tuple[int, bool]],
    *,
    n_valid: int,
    n_splits: int,
    seed: int,
    rules: Mapping[str, RuleSpec] | None = None,
) -> dict[str, Any]:
    """Every rule (of ``rules``, default :data:`RULES`) replayed on one candidate set
    (``all``: :func:`first_k`; ``rate_first``: :func:`rate_first_k`) at each (budget,
    racing) of ``runs``, with its compile's hours. A budget whose cut holds the same columns
    on every pair as an earlier one is not replayed again (``budget_aliases``: its label ->
    the earlier one's)."""
    cut_of = first_k if candidates == "all" else rate_first_k
    out: dict[str, Any] = {"budgets": {}, "budget_aliases": {}}
    seen: dict[tuple[Any, ...], str] = {}
    for k, race in runs:
        label = f"{k} raced" if race else str(k)
        cut = {name: cut_of(pair, k) for name, pair in bank.items()}
        signature = (race, *(tuple(cut[n][1]) for n in sorted(cut)))
        if signature in seen:
            out["budget_aliases"][label] = seen[signature]
            continue
        seen[signature] = label
        sub = {name: c[0] for name, c in cut.items()}
        specs = dict(RULES if rules is None else rules)
        if race:
            specs = {n: raced(n, spec) for n, spec in specs.items()}
        payload = replay_bank(
            sub,
            specs,
            n_valids=[n_valid],
            n_splits=n_splits,
            seed=seed,
            progress=lambda s, label=label: print(
                f"  {candidates} budget {label}: {s}", file=sys.stderr
            ),
        )
        out["budgets"][label] = {
            "columns": {name: len(s.columns) for name, s in sub.items()},
            "column_keys": {name: [c.key for c in s.columns] for name, s in sub.items()},
            "rules": cost_rows(
                sub,
                matrices,
                payload,
                {name: c[1] for name, c in cut.items()},
                n_valid=n_valid,
                n_splits=n_splits,
                seed=seed,
                racing=race,
            ),
        }
    return out


def resolve(block: Mapping[str, Any], label: str) -> str:
    """``label``, or the budget it is an alias of."""
    return str(block.get("budget_aliases", {}).get(label, label))


def decision(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    label: str,
    reference: str,
) -> dict[str, Any]:
    """Per rule, (b) the rate-first candidates against (a) all of them at budget ``label``:
    the paired difference of the pairs' mean gains (its standard error and 95 % t interval),
    whether (b)'s gain is within one standard error of (a)'s (``gain_b >= gain_a - se_a``:
    issue 57's bound for a saving that changes what is judged), the cost fraction, and the
    compile's judging minutes (recorder, and wall on this machine: the ``wall (e2e)``
    accounting, its range over both wall accountings, :func:`wall_factor`)."""
    ra = a["budgets"][resolve(a, label)]["rules"]
    rb = b["budgets"][resolve(b, label)]["rules"]

    def minutes(row: Mapping[str, Any]) -> dict[str, Any]:
        """The row's (or a pair's) recorder minutes and estimated wall minutes."""
        by = row.get("cpu_hours_by_accounting", {})
        walls = [60 * by[k] for k in WALLS if k in by]
        return {
            "recorder": 60 * row["cpu_hours"],
            "wall": 60 * by[WALLS[0]] if WALLS[0] in by else None,
            "wall_range": [min(walls), max(walls)] if walls else None,
        }

    out: dict[str, Any] = {
        "reference": reference,
        "budget": label,
        "budgets_used": {"a": resolve(a, label), "b": resolve(b, label)},
        "criterion": "gain_b >= gain_a - se_a (se_a: the standard error over pairs of the "
        "all-candidates row's mean gain)",
        "rules": {},
    }
    for name, row_a in ra.items():
        row_b = rb.get(name)
        if row_b is None:
            continue
        pairs = list(row_a["per_pair"])
        diffs = np.array(
            [row_b["per_pair"][p]["mean_gain"] - row_a["per_pair"][p]["mean_gain"] for p in pairs]
        )
        se_diff = float(diffs.std(ddof=1) / math.sqrt(diffs.size)) if diffs.size > 1 else None
        se_a = row_a["se"]
        out["rules"][name] = {
            "gain_a": row_a["mean_gain"],
            "se_a": se_a,
            "gain_b": row_b["mean_gain"],
            "se_b": row_b["se"],
            "difference": float(diffs.mean()),
            "difference_se": se_diff,
            "difference_interval": t_interval(diffs),
            "within_one_se": se_a is not None and row_b["mean_gain"] >= row_a["mean_gain"] - se_a,
            "within_one_se_either_side": se_a is not None
            and abs(row_b["mean_gain"] - row_a["mean_gain"]) <= se_a,
            "max_pair_worse_share_a": row_a["max_pair_worse_share"],
            "max_pair_worse_share_b": row_b["max_pair_worse_share"],
            "meets_worse_criterion_a": row_a["max_pair_worse_share"] <= MAX_WORSE,
            "meets_worse_criterion_b": row_b["max_pair_worse_share"] <= MAX_WORSE,
            "cpu_hours_a": row_a["cpu_hours"],
            "cpu_hours_b": row_b["cpu_hours"],
            "cost_fraction": row_b["cpu_hours"] / row_a["cpu_hours"]
            if row_a["cpu_hours"]
            else None,
            "minutes_a": minutes(row_a),
            "minutes_b": minutes(row_b),
            "per_pair": {
                p: {
                    "gain_a": row_a["per_pair"][p]["mean_gain"],
                    "gain_b": row_b["per_pair"][p]["mean_gain"],
                    "worse_share_a": row_a["per_pair"][p]["worse_share"],
                    "worse_share_b": row_b["per_pair"][p]["worse_share"],
                    "cpu_hours_a": row_a["per_pair"][p]["cpu_hours"],
                    "cpu_hours_b": row_b["per_pair"][p]["cpu_hours"],
                    "minutes_a": minutes(row_a["per_pair"][p]),
                    "minutes_b": minutes(row_b["per_pair"][p]),
                    **(
                        {
                            "rule_a": row_a["per_pair"][p]["rule"],
                            "rule_b": row_b["per_pair"][p]["rule"],
                        }
                        if "rule" in row_a["per_pair"][p]
                        else {}
                    ),
                }
                for p in pairs
            },
        }
    return out


def decision_table(d: Mapping[str, Any]) -> str:
    """(a) all candidates against (b) the rate-first ones, per rule."""
    rows = []
    for name, v in d["rules"].items():
        rows.append(
            [
                name,
                f"{v['gain_a']:+.3f} ({v['se_a']:.3f})",
                f"{v['gain_b']:+.3f} ({v['se_b']:.3f})",
                f"{v['difference']:+.3f} ({v['difference_se']:.3f})",
                "yes" if v["within_one_se"] else "no",
                f"{100 * v['max_pair_worse_share_a']:.1f} % / "
                f"{100 * v['max_pair_worse_share_b']:.1f} %",
                f"{v['cpu_hours_a']:.2f} / {v['cpu_hours_b']:.2f}",
                "-" if v["cost_fraction"] is None else f"{100 * v['cost_fraction']:.0f} %",
            ]
        )
    return markdown_table(
        [
            "rule",
            "(a) all: gain (se)",
            "(b) rate-first: gain (se)",
            "(b)-(a) (se)",
            "within 1 se",
            "worst pair worse (a / b)",
            "CPU h (a / b)",
            "(b)/(a) cost",
        ],
        rows,
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--budgets", default="5,8,12,20", help="comma-separated search budgets")
    p.add_argument(
        "--racing-budgets",
        default="20",
        help="budgets also replayed with racing (rows 'K raced'); '' for none",
    )
    p.add_argument("--n-valid", type=int, default=100)
    p.add_argument("--splits", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--reference",
        default=None,
        help="rule at the largest budget (default: bank_rules.json's default)",
    )
    p.add_argument(
        "--cost-accounting",
        choices=ACCOUNTINGS,
        default="recorded",
        help="recorded: the bank's seconds as recorded (bank_cost.json); stopped: each "
        "rate-first call that explains after its rating (cot suffix) costed as if stopped "
        "at the score, as a compile runs it",
    )
    p.add_argument(
        "--stop-estimate",
        choices=STOP_ESTIMATES,
        default="none",
        help="with --cost-accounting stopped: none (the pair's cot-none calls' seconds, same "
        "other factors where the bank has them) or ratio (stop_at_score.json's measured "
        "stopped/explained ratio)",
    )
    p.add_argument(
        "--candidates",
        default="all",
        help="comma-separated candidate sets: all (every column of the search path) and/or "
        "rate_first (the baseline and the path's rate-first strategies); with both, every "
        "row is compared with all's reference and a 'decision' compares the two",
    )
    p.add_argument("--json", default=str(ROOT / "results" / "bank_cost.json"))
    args = p.parse_args(argv)
    budgets = sorted(int(k) for k in args.budgets.split(","))
    sets = [c.strip() for c in args.candidates.split(",") if c.strip()]
    if not sets or any(c not in CANDIDATES for c in sets) or len(set(sets)) != len(sets):
        p.error(f"--candidates: one or both of {CANDIDATES}; got {args.candidates!r}")
    bank_dir = ROOT / "runs" / "bank"
    plan = json.loads((ROOT / "bank_plan.json").read_text(encoding="utf-8"))
    bank = load_bank(ROOT / "bank_plan.json", bank_dir, complete_only=True)
    if len(bank) < 2:
        print(f"the bank has {len(bank)} complete pair(s); a replay needs at least 2")
        return 2
    reference = args.reference
    if reference is None:
        rules_json = ROOT / "results" / "bank_rules.json"
        reference = json.loads(rules_json.read_text(encoding="utf-8"))["default"]
    t0 = time.perf_counter()
    recorded: dict[str, dict[str, np.ndarray]] = {"latency": {}, "equal": {}}
    fits: dict[str, Any] = {}
    for name, pair in bank.items():
        lines = list(bank_lines(bank_dir, name))
        for share in recorded:
            held, fit = judgement_costs(lines, share=share)
            recorded[share][name] = cost_matrix(pair, held)
            if share == "latency":
                m = recorded[share][name]
                fits[name] = {
                    **fit.__dict__,
                    "recorder_hours": fit.seconds / 3600,
                    "mean_seconds_per_judgement": float(np.nanmean(m)),
                    "per_column_seconds": {
                        c.key: float(np.nanmean(m[i])) for i, c in enumerate(pair.columns)
                    },
                }
    matrices: dict[str, dict[str, np.ndarray]] = recorded
    stop: dict[str, Any] | None = None
    if args.cost_accounting == "stopped":
        matrices, stop = stopped_matrices(bank, recorded, args.stop_estimate)
    wall: dict[str, Any] | None = None
    if "all" in sets and "rate_first" in sets:
        wall = wall_factor(bank, recorded["latency"], plan)
        matrices = {
            **matrices,
            **wall_matrices(bank, matrices["latency"], wall, args.cost_accounting == "stopped"),
        }
    racing = [int(k) for k in args.racing_budgets.split(",") if k.strip()]
    runs = [(k, False) for k in budgets] + [(k, True) for k in racing]
    blocks = {
        c: replay_candidates(
            bank,
            matrices,
            c,
            runs,
            n_valid=args.n_valid,
            n_splits=args.splits,
            seed=args.seed,
        )
        for c in sets
    }
    top = str(budgets[-1])
    ref_set = "all" if "all" in blocks else sets[0]
    ref_key = resolve(blocks[ref_set], top)
    ref_row = blocks[ref_set]["budgets"][ref_key]["rules"][reference]
    for block in blocks.values():
        block["reference"] = {"rule": reference, "budget": budgets[-1], "candidates": ref_set}
        block["better_default_on_cost"] = compare(
            block["budgets"], (ref_key, reference), ref=ref_row
        )
    settings = {
        "n_valid": args.n_valid,
        "n_splits": args.splits,
        "seed": args.seed,
        "budgets": budgets,
        "racing_budgets": racing,
        "racing": "judgeopt.racing's defaults (checkpoints 0.25/0.5/0.75, min_items 20, "
        "confidence 0.95), top 5 (the search's k), the search's order; a dropped strategy "
        "costs its judged items and is not compared",
        "pairs": sorted(bank),
        "max_worse": MAX_WORSE,
        "cpu_hour": "an hour of the bank's recorder: the embedded 1.5B on two threads, "
        "8 calls in flight (a chunk's wall time shared among its judgements)",
        "share": "latency (cpu_hours_equal_share: shared equally)",
        "interval": "95 % t interval over the pairs",
        "cost_accounting": args.cost_accounting,
        "candidates": sets,
    }
    if args.cost_accounting == "stopped":
        settings["stop"] = (
            "each judgement of a column that rates first and explains after (cot suffix, no "
            "dialectic reference) costed as if its call stopped at the score: "
            + (
                "per item, the median recorded cost of the pair's cot-none rate-first columns "
                "with the same other factors (else all of them)"
                if args.stop_estimate == "none"
                else "its recorded cost times stop_at_score.json's stopped/explained ratio"
            )
            + "; every other column as recorded"
        )
    if "rate_first" in sets:
        settings["rate_first"] = (
            "the baseline and the search path's rate-first strategies (JudgeProgram."
            "rates_first: cot none or suffix, no dialectic reference), in the path's order; "
            "budget k: the baseline and the first k-1 of them. An approximation: it keeps the "
            "path of a search that did judge explanation-first strategies and drops them; a "
            "search that forbade them would have spent that budget on other rate-first "
            "strategies"
        )
    if len(blocks) == 1:
        out: dict[str, Any] = {**blocks[sets[0]], "costs": fits}
        out["reference"] = {"rule": reference, "budget": budgets[-1]}
    else:
        out = {"candidates": blocks, "costs": fits}
    if stop is not None:
        out["stop"] = stop
    if wall is not None:
        out["wall"] = {
            **wall,
            "note": "a compile's judging wall seconds on this machine, estimated: each "
            "column's recorder seconds times the median factor of its kind (rating: calls "
            "that generate only the rating, cot none or stopped; explain: the others) "
            "measured on the e2e compiles ('wall (e2e)', the estimate) or on "
            "stop_at_score.json's rows ('wall (stop_at_score)'); model start and the "
            "artifact calls (self criteria, self references, metric questions, examples) "
            "are not counted",
        }
        out["decision"] = decision(blocks["all"], blocks["rate_first"], top, reference)
    out["settings"] = settings
    out["seconds"] = round(time.perf_counter() - t0, 1)
    path = Path(args.json)
    write_json(path, out)
    for c, block in blocks.items():
        if len(blocks) > 1:
            print(f"\n## candidates: {c}\n")
        view = {**block, "settings": settings}
        print(tables(view, c))
        print("\nCost by budget:\n")
        print(budget_table(view, [reference, "confirm", "ensemble+guard", LOPO]))
        if block.get("budget_aliases"):
            print(f"\nsame columns: {block['budget_aliases']}")
        better = block["better_default_on_cost"]
        if better is None:
            print(
                f"\nno cheaper row gains as much as {reference} on average and meets the "
                f"default's criterion"
            )
        else:
            print(
                f"\nbetter default on cost: {better['rule']} at budget {better['budget']} "
                f"({better['cpu_hours']:.2f} CPU h against {ref_row['cpu_hours']:.2f}; "
                f"gain {better['mean_gain']:+.3f}, difference "
                f"{better['vs_reference']['mean_difference']:+.3f} "
                f"{_fmt_interval(better['vs_reference']['interval'])})"
            )
    if "decision" in out:
        print(f"\n## (a) all candidates against (b) rate-first ones, budget {top}\n")
        print(decision_table(out["decision"]))
    print(f"{out['seconds']} s; wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
