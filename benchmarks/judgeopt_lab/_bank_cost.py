"""What a replayed compile's judging costs: the bank's seconds per judgement, replayed with
each selection rule's gain (``benchmarks/bank_cost.py``).

**Seconds per judgement.** The recorder writes, after every ``n`` judged lines, a ``chunk``
line with the wall seconds of those ``n`` calls (``benchmarks/bank.py``: 8 calls always in
flight on the batch engine); each bank call's own line holds its latency (``seconds``, the
time from its start to its end while it shared the engine with the others). A chunk's
wall time is shared among its ``n`` judgements in proportion to their latencies
(``share="latency"``: a call's share of the engine's slot-seconds; an explanation-first call
that runs ten times longer than a rating-only one costs about ten times as much) or equally
(``share="equal"``). The shares of a chunk add up to its wall time, so a pair's costs add up to
the recorder's hours (section 13 of docs/benchmarks.md).

A judgement without a chunk (imported from ``benchmarks/e2e.py`` without a call, or a bank
call whose chunk line an interruption cut) gets a modelled cost: per pair, the least-squares
line of the measured costs on the answer's length in characters (``raw``; most of a call's
time is the tokens it generates), at that judgement's answer length (never below 0).

**A compile's judging.** A replayed compile judges, on the split's validation items, every
strategy its search evaluated (the bank's columns, or the first ``k`` of them in the search's
order for a budget of ``k``, :func:`first_k`), except where the rule asks for less
(:func:`compile_seconds`): ``confirm`` and ``veto`` search on one half
(:func:`judgeopt.selection.confirmation_split`, as the rule splits) and judge only the baseline
and their finalists on the other; ``baseline`` and ``prior`` judge nothing.

**Racing** (:func:`race`, :func:`raced`): the compile's racing (:mod:`judgeopt.racing`, the
``[racing]`` defaults: checkpoints at 25, 50 and 75 % of the search items, at least 20 items,
a one-sided 95 % bound compared with the 5th best full score so far) replayed on the bank's
columns in the search's order. A dropped strategy costs the items it was judged on and is
not among the strategies the rule compares (as the compile's pooled rules leave it out); the
search's path is the bank's either way (the replay cannot show where a dropped strategy's
partial score would have sent the search).

**The stop at the score** (:func:`stopped_costs`): a compile stops a rate-first judge's call
at the end of its rating (``JudgeProgram.stops_at_score``), which gives the same rating and
distribution. The bank recorded its ``cot`` ``suffix`` calls with the explanation after the
rating; their stopped cost is estimated from the bank's own rating-only calls (``none``: per
item, the median cost of the pair's ``cot`` ``none`` columns with the same other factors,
else of all of them; a stopped suffix call generates what a ``none`` call generates) or by a
measured ratio of stopped to explained seconds (``ratio``).

**Rate-first candidates** (:func:`rate_first_k`): the pair cut to the baseline and the
strategies of its search path that rate before they explain (``JudgeProgram.rates_first``),
in the search's order: a search that judges no explanation-first candidate but the
baseline, read off the path of one that did (a search that forbade them would have spent
that budget on other rate-first strategies). A cut's ``complete`` is its own columns':
:func:`rate_first_columns` names them in a plan, and a bank recorded cut first (``bank.py
record --columns rate_first``) can replay the cut before the rest of the pair is judged.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from judgeopt.metrics import group_correlation
from judgeopt.racing import (
    RacingConfig,
    checkpoint_sizes,
    race_decision,
    race_order,
    threshold,
    unit_keys,
)
from judgeopt.selection import (
    Pick,
    RuleInput,
    RuleSpec,
    change_from,
    column_scores,
    confirmation_split,
    impute,
)

from ._bank import BankColumn, BankPair, keep_judgement, rates_first, strategy_json
from ._replay import _input

__all__ = [
    "CONFIRM_FINALISTS",
    "NO_CALLS",
    "CANDIDATE_SETS",
    "STOP_ESTIMATES",
    "CostFit",
    "StopCost",
    "candidate_pairs",
    "column_index",
    "compile_seconds",
    "cost_matrix",
    "explains_after_rating",
    "first_k",
    "judgement_costs",
    "race",
    "raced",
    "rate_first_columns",
    "rate_first_k",
    "rule_cost_rows",
    "search_rank",
    "split_inputs",
    "stopped_costs",
]

#: Rules that judge nothing on the validation items.
NO_CALLS = frozenset({"baseline", "prior"})
#: Rules that search on one half and confirm on the other: the finalists they judge there.
CONFIRM_FINALISTS = {"confirm": 3, "confirm+prior": 3, "confirm+prior(veto)": 3, "veto": 1}


@dataclass(frozen=True)
class CostFit:
    """How a pair's judgements got their seconds.

    Attributes:
        measured: Judgements whose cost is their share of a chunk.
        modelled: Judgements costed by the length line (no chunk).
        intercept: Seconds of the line at an empty answer.
        per_char: Seconds per character of the answer.
        r: Correlation of the measured costs with the answer's length.
        seconds: The chunks' wall seconds in all (what the measured shares add up to).
    """

    measured: int
    modelled: int
    intercept: float
    per_char: float
    r: float
    seconds: float


def judgement_costs(
    lines: Iterable[Mapping[str, Any]], *, share: str = "latency"
) -> tuple[dict[tuple[str, str], float], CostFit]:
    """The seconds of each judgement a pair's bank holds, keyed as :func:`keep_judgement`
    keys them (the base strategy's sorted JSON, the item id), for the judgement the loader
    keeps (a bank call over an imported one).

    Raises:
        ValueError: On an unknown ``share`` (``latency`` or ``equal``).
    """
    if share not in ("latency", "equal"):
        raise ValueError(f"share must be 'latency' or 'equal'; got {share!r}")
    lines = [dict(x) for x in lines]
    cost: dict[int, float] = {}
    pending: list[int] = []
    total = 0.0
    for k, line in enumerate(lines):
        kind = line.get("kind")
        if kind == "judgement" and line.get("source") == "bank":
            pending.append(k)
        elif kind == "chunk":
            n = int(line.get("n") or 0)
            wall = float(line.get("seconds") or 0.0)
            total += wall
            mine = pending[-n:] if n else []
            latency = [float(lines[j].get("seconds") or 0.0) for j in mine]
            whole = sum(latency)
            for j, lat in zip(mine, latency, strict=True):
                cost[j] = wall * (lat / whole if share == "latency" and whole > 0 else 1 / n)
            pending = []
    x = np.array([len(lines[j].get("raw") or "") for j in cost], dtype=float)
    y = np.array(list(cost.values()), dtype=float)
    if x.size >= 2 and np.ptp(x) > 0:
        per_char, intercept = (float(v) for v in np.polyfit(x, y, 1))
        r = float(np.corrcoef(x, y)[0, 1]) if np.ptp(y) > 0 else math.nan
    else:
        per_char, intercept, r = 0.0, float(y.mean()) if y.size else 0.0, math.nan
    held: dict[tuple[str, str], dict[str, Any]] = {}
    modelled = 0
    for k, line in enumerate(lines):
        if line.get("kind") != "judgement":
            continue
        if k in cost:
            seconds = cost[k]
        else:
            seconds = max(0.0, intercept + per_char * len(line.get("raw") or ""))
        keep_judgement(held, {**line, "_cost": seconds, "_measured": k in cost})
    out = {key: float(v["_cost"]) for key, v in held.items()}
    modelled = sum(not v["_measured"] for v in held.values())
    fit = CostFit(len(out) - modelled, modelled, intercept, per_char, r, total)
    return out, fit


def _base(column: BankColumn) -> str:
    return strategy_json({k: v for k, v in column.strategy.items() if k != "decoding"})


def cost_matrix(pair: BankPair, costs: Mapping[tuple[str, str], float]) -> np.ndarray:
    """The seconds of each (column, pool item) judgement, shaped as :meth:`BankPair.matrix`
    (``nan`` where the bank holds none). A column is one strategy with its decoding; two
    columns of the same calls (``greedy`` and ``expected``) each cost the calls, as a compile
    that evaluates both judges both."""
    out = np.full((len(pair.columns), len(pair.ids)), np.nan)
    for c, col in enumerate(pair.columns):
        base = _base(col)
        for i, rid in enumerate(pair.ids):
            v = costs.get((base, str(rid)))
            if v is not None:
                out[c, i] = v
    return out


def search_rank(column: BankColumn) -> int | None:
    """The column's place in its search's order (its ``search #n`` role), else ``None``."""
    return _rank_of(column.roles)


def _rank_of(roles: Iterable[str]) -> int | None:
    """The ``n`` of a ``search #n`` role among ``roles``, else ``None``."""
    for role in roles:
        if str(role).startswith("search #"):
            return int(str(role).split("#", 1)[1])
    return None


def first_k(pair: BankPair, k: int) -> tuple[BankPair, list[int]]:
    """The pair cut to the baseline and the columns the search evaluated first, up to ``k``
    in all (a search at budget ``k`` that took the same path), and their rows in ``pair``."""
    rows = [i for i, c in enumerate(pair.columns) if _within(c.roles, k)]
    return _cut(pair, rows), rows


def _within(roles: Iterable[str], k: int) -> bool:
    """A column of these ``roles`` is in a path cut at budget ``k``: the baseline, or the
    search's ``search #1`` to ``search #k``."""
    roles = tuple(roles)
    return "baseline" in roles or ((rank := _rank_of(roles)) is not None and rank <= k)


def _cut(pair: BankPair, rows: Sequence[int]) -> BankPair:
    """``pair`` with only the columns at ``rows``; its ``missing`` (and so ``complete``)
    counts the judgements those columns lack, not the whole pair's."""
    columns = tuple(pair.columns[i] for i in rows)
    missing = sum(int((~c.judged).sum()) for c in columns if c.judged is not None)
    return replace(pair, columns=columns, missing=missing)


def rate_first_k(pair: BankPair, k: int | None = None) -> tuple[BankPair, list[int]]:
    """The pair cut to the baseline and the strategies of its search path that rate before
    they explain (``JudgeProgram.rates_first``: ``cot`` ``none`` or ``suffix``, no
    ``dialectic`` reference), in the search's order, and their rows in ``pair``; with ``k``,
    the baseline and the first ``k - 1`` of them (``k`` strategies judged in all, the baseline
    being the search's first, as :func:`first_k` counts it). Columns off the search path
    (twins, planned extras) are left out, as :func:`first_k` leaves them out."""
    if k is not None and k < 1:
        raise ValueError(f"k must be at least 1 (the baseline); got {k}")
    ranked = sorted(
        (rank, i)
        for i, c in enumerate(pair.columns)
        if "baseline" not in c.roles
        and (rank := search_rank(c)) is not None
        and rates_first(c.strategy)
    )
    base = [i for i, c in enumerate(pair.columns) if "baseline" in c.roles]
    chosen = [i for _, i in ranked][: None if k is None else k - len(base)]
    rows = sorted([*base, *chosen])
    return _cut(pair, rows), rows


#: The candidate sets a replay can cut each pair to (:func:`candidate_pairs`).
CANDIDATE_SETS = ("all", "rate_first")


def candidate_pairs(
    bank: Mapping[str, BankPair], candidates: str
) -> tuple[dict[str, BankPair], dict[str, list[int]]]:
    """The pairs complete for the candidate set, each cut to it (``all``: the pair itself;
    ``rate_first``: :func:`judgeopt_lab.rate_first_k`), and each cut's rows in its pair.

    A pair is complete for the set when the set's columns are judged on the whole pool: a
    replay reads no other column, so a pair whose rate-first cut is complete (``bank.py
    record --columns rate_first``) replays as it will once the rest of it is recorded.
    """
    if candidates not in CANDIDATE_SETS:
        raise ValueError(f"candidates: {candidates!r}; allowed: {list(CANDIDATE_SETS)}")
    out: dict[str, BankPair] = {}
    rows: dict[str, list[int]] = {}
    for name, pair in bank.items():
        if candidates == "rate_first":
            cut, kept = rate_first_k(pair)
        else:
            cut, kept = pair, list(range(len(pair.columns)))
        if cut.complete:
            out[name], rows[name] = cut, kept
    return out, rows


def rate_first_columns(columns: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The columns of a bank plan's pair (each with ``roles`` and ``strategy``) that
    :func:`rate_first_k` keeps: the baseline and the search path's strategies that rate
    before they explain, in the plan's order (what ``bank.py record --columns rate_first``
    records first)."""
    return [
        c
        for c in columns
        if "baseline" in c["roles"]
        or (_rank_of(c["roles"]) is not None and rates_first(c["strategy"]))
    ]


def path_cut_columns(columns: Sequence[Mapping[str, Any]], k: int) -> list[Mapping[str, Any]]:
    """The columns of a bank plan's pair that :func:`first_k` keeps at budget ``k``: the
    baseline and the search path's strategies ranked ``search #1`` to ``search #k``, in the
    plan's order (what ``bank.py record --path-cut K`` records first, so that a path's
    smaller budgets are whole on the pool before its larger ones).

    Raises:
        ValueError: When ``k`` is below 1.
    """
    if k < 1:
        raise ValueError(f"k must be at least 1 (the baseline); got {k}")
    return [c for c in columns if _within(c["roles"], k)]


#: How a stopped call of a strategy that explains after its rating is costed
#: (:func:`stopped_costs`).
STOP_ESTIMATES = ("none", "ratio")


def explains_after_rating(strategy: Mapping[str, Any]) -> bool:
    """The strategy rates first and then explains (``cot`` ``suffix``): the calls a compile
    stops at the score, whose explanation the bank's seconds include."""
    return strategy.get("cot", "none") == "suffix" and rates_first(strategy)


def _factors(strategy: Mapping[str, Any]) -> str:
    return strategy_json({k: v for k, v in strategy.items() if k not in ("cot", "decoding")})


@dataclass(frozen=True)
class StopCost:
    """How one column's stopped cost was estimated.

    Attributes:
        key: The column's key.
        by: The keys of the ``cot`` ``none`` columns it was costed by (``none`` estimate;
            empty for ``ratio``).
        same_factors: Those columns share every other factor with it (else: all the pair's
            ``cot`` ``none`` columns).
        recorded: Its recorded mean seconds per judgement.
        stopped: Its estimated mean seconds per judgement, stopped at the score.
    """

    key: str
    by: tuple[str, ...]
    same_factors: bool
    recorded: float
    stopped: float


def _nanmedian(values: np.ndarray, axis: int | None = None) -> Any:
    """``np.nanmedian`` that gives ``nan`` quietly for an all-``nan`` slice."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(values, axis=axis)


def stopped_costs(
    pair: BankPair,
    cost: np.ndarray,
    *,
    estimate: str = "none",
    ratio: float | None = None,
) -> tuple[np.ndarray, list[StopCost]]:
    """``cost`` (shaped as :func:`cost_matrix`) with each column that explains after its
    rating (:func:`explains_after_rating`) costed as if its calls stopped at the score.

    ``estimate="none"``: each such judgement costs, per item, the median cost of the pair's
    ``cot`` ``none`` rate-first columns (one per distinct call: decodings of the same calls
    count once) with the same other factors (all but ``cot`` and the decoding), else of all
    the pair's ``cot`` ``none`` rate-first columns. A stopped suffix call generates what a
    ``none`` call generates (the rating and the stop), from a prompt that differs by the
    instruction to explain after it. ``estimate="ratio"``: each such judgement costs its
    recorded seconds times ``ratio`` (stopped / explained seconds, measured). Every other
    column keeps its recorded cost: explanation-first calls cannot stop, and a ``none``
    call generates nothing after its rating.

    Raises:
        ValueError: On an unknown ``estimate``, ``ratio`` missing (or not in (0, 1]) for
            ``ratio``, or a pair without a ``cot`` ``none`` column for ``none``.
    """
    if estimate not in STOP_ESTIMATES:
        raise ValueError(f"estimate must be one of {STOP_ESTIMATES}; got {estimate!r}")
    if estimate == "ratio" and (ratio is None or not 0 < ratio <= 1):
        raise ValueError(f"estimate 'ratio' needs a ratio in (0, 1]; got {ratio!r}")
    out = np.array(cost, dtype=float, copy=True)
    suffix = [r for r, c in enumerate(pair.columns) if explains_after_rating(c.strategy)]
    rating_only: dict[str, int] = {}
    for r, c in enumerate(pair.columns):
        if c.strategy.get("cot", "none") == "none" and rates_first(c.strategy):
            rating_only.setdefault(_base(c), r)
    if estimate == "none" and suffix and not rating_only:
        raise ValueError(f"{pair.name}: no cot 'none' column to cost a stopped call by")
    notes = []
    for r in suffix:
        col = pair.columns[r]
        if estimate == "ratio":
            assert ratio is not None
            out[r] = cost[r] * ratio
            by: list[int] = []
            same = False
        else:
            same_rows = [
                i
                for i in rating_only.values()
                if _factors(pair.columns[i].strategy) == _factors(col.strategy)
            ]
            same = bool(same_rows)
            by = same_rows or list(rating_only.values())
            per_item = _nanmedian(cost[by], axis=0)
            # an item none of them judged: their median over all items
            per_item = np.where(np.isnan(per_item), _nanmedian(cost[by]), per_item)
            out[r] = np.where(np.isnan(cost[r]), np.nan, per_item)  # judged where it was
        notes.append(
            StopCost(
                col.key,
                tuple(pair.columns[i].key for i in by),
                same,
                float(np.nanmean(cost[r])),
                float(np.nanmean(out[r])),
            )
        )
    return out, notes


def column_index(pair: BankPair, change: Mapping[str, Any] | None) -> int | None:
    """The row of the column that is ``change`` from the baseline (``None``: no such
    column, or no change)."""
    if not change:
        return None
    base = pair.baseline.strategy
    for i, c in enumerate(pair.columns):
        if change_from(c.strategy, base) == dict(change):
            return i
    return None


def compile_seconds(
    rule: str,
    pair: BankPair,
    cost: np.ndarray,
    valid: np.ndarray,
    *,
    seed: int,
    prior_row: int | None = None,
    racing: bool = False,
    data: RuleInput | None = None,
) -> float:
    """The seconds a compile running ``rule`` spends judging on the validation items
    ``valid`` (pool rows), every column of ``pair`` being a strategy its search evaluated;
    ``seed`` is the rule's seed on the split (the replay's split index), ``prior_row`` the
    prior default's column (judged on the confirmation half by ``confirm+prior(veto)``).
    With ``racing``, each strategy costs the search items racing judged it on (:func:`race`)
    and the finalists are among those it kept. ``data``: the split's validation input, if
    made already (its race is then run once for every rule).
    """
    if rule in NO_CALLS:
        return 0.0
    sub = cost[:, valid]
    finalists = CONFIRM_FINALISTS.get(rule)
    if data is None:
        data = _input(pair, np.asarray(valid), pair.matrix(), seed)
    halves = finalists is not None
    search = _search_items(data, halves)
    if racing:
        judged = data.memo(f"race-items-{halves}", lambda: race(data, search))
    else:
        judged = {r: search for r in range(len(pair.columns))}
    seconds = sum(float(np.nansum(sub[r, judged[r]])) for r in judged)
    if finalists is None:
        return seconds
    b = data.baseline
    conf = sorted(set(range(len(valid))) - set(search))
    kept = [r for r in judged if len(judged[r]) == len(search)]
    human = pair.human[valid]
    groups = [pair.groups[i] for i in valid]
    grouped = groups if pair.level == "group" else None
    s_groups = None if grouped is None else [grouped[i] for i in search]
    preds = impute(pair.matrix()[:, valid][:, np.asarray(search)])  # as the rule reads them
    scores = np.full(len(pair.columns), np.nan)
    scores[kept] = column_scores(human[np.asarray(search)], preds[kept], s_groups)
    ranked = [int(i) for i in np.argsort(-np.nan_to_num(scores, nan=-np.inf), kind="stable")]
    ranked = [i for i in ranked if i in kept]
    if rule == "veto":  # the search half's best, the baseline on a tie (as the rule)
        finite = np.nan_to_num(scores, nan=-np.inf)
        top = b if finite[b] >= finite.max() else ranked[0]
        confirmed: set[int] = set() if top == b else {b, top}
    else:
        confirmed = {b, *[i for i in ranked if i != b][:finalists]}
        if rule == "confirm+prior(veto)" and prior_row is not None:
            confirmed.add(prior_row)
    return seconds + float(np.nansum(sub[sorted(confirmed)][:, conf]))


def rule_cost_rows(
    pair: BankPair,
    cost: np.ndarray,
    splits: Sequence[tuple[np.ndarray, np.ndarray]],
    rules: Iterable[str],
    *,
    prior: Mapping[str, Any] | None = None,
    racing: bool = False,
    inputs: Sequence[RuleInput] | None = None,
) -> dict[str, np.ndarray]:
    """Per rule, the compile's judging seconds on each split's validation items.
    ``inputs``: the splits' validation inputs, if made already (:func:`split_inputs`; a
    race run on them is then shared by every cost matrix they are used with)."""
    prior_row = column_index(pair, prior)
    if inputs is None:
        inputs = split_inputs(pair, splits)
    return {
        r: np.array(
            [
                compile_seconds(
                    r, pair, cost, v, seed=s, prior_row=prior_row, racing=racing, data=d
                )
                for s, ((v, _), d) in enumerate(zip(splits, inputs, strict=True))
            ]
        )
        for r in rules
    }


def split_inputs(
    pair: BankPair, splits: Sequence[tuple[np.ndarray, np.ndarray]]
) -> list[RuleInput]:
    """Each split's validation input, as the replay makes it (seeded by the split's index)."""
    preds = pair.matrix()
    return [_input(pair, np.asarray(v), preds, s) for s, (v, _) in enumerate(splits)]


#: The search's population size (``k`` of HPSS and ``auto``): racing's ``top``.
RACE_TOP = 5


def race(
    data: RuleInput,
    items: Sequence[int],
    *,
    config: RacingConfig | None = None,
    top: int = RACE_TOP,
) -> dict[int, list[int]]:
    """Racing replayed on ``data``'s candidates in row order (the search's order) over the
    search items ``items`` (indices into ``data``'s items): per candidate, the items it is
    judged on (all of ``items`` for a survivor, a prefix for a dropped one). The baseline is
    never dropped (the compile judges it on every item)."""
    cfg = config or RacingConfig(enabled=True)
    idx = np.asarray(items, dtype=np.intp)
    grouped = data.groups is not None
    groups = [data.groups[i] for i in idx] if data.groups is not None else None
    _, keys, members = unit_keys(list(data.human[idx]), groups)
    n_units = len(members)
    per_unit = len(idx) / n_units
    min_units = max(3, math.ceil(cfg.min_items / per_unit)) if grouped else cfg.min_items
    sizes = checkpoint_sizes(n_units, cfg.checkpoints, min_units)
    order = race_order(keys, n_strata=sizes[0], seed=cfg.seed)
    level = "group" if grouped else "dataset"
    full: list[float] = []
    out: dict[int, list[int]] = {}
    for row in range(data.preds.shape[0]):
        bar = threshold(full, top)
        judged = [int(i) for i in idx]
        if row != data.baseline:
            for size in sizes[:-1]:
                part = [int(idx[i]) for u in order[:size] for i in members[u]]
                h, x = data.human[part], data.preds[row, part]
                g = None if data.groups is None else [data.groups[i] for i in part]
                estimate = float(column_scores(h, x[None, :], g)[0])
                sd = _group_sd(h, x, g) if g is not None else None
                decision = race_decision(
                    estimate if math.isfinite(estimate) else None,
                    size,
                    n_units,
                    bar,
                    metric="spearman",
                    z=cfg.z,
                    level=level,
                    group_sd=sd,
                )
                if decision.drop:
                    judged = part
                    break
        out[row] = judged
        if len(judged) == len(idx):
            score = float(column_scores(data.human[idx], data.preds[row, idx][None, :], groups)[0])
            if math.isfinite(score):
                full.append(score)
    return out


def _group_sd(human: np.ndarray, pred: np.ndarray, groups: Sequence[Any]) -> float | None:
    """The spread of the per-group Spearman correlations (mean-imputed), as the compile's
    racing reads it at group level."""
    parsed = pred[np.isfinite(pred)]
    if parsed.size < 3:
        return None
    filled = np.where(np.isfinite(pred), pred, parsed.mean())
    try:
        per = list(
            group_correlation(
                list(human), list(filled), list(groups), "spearman"
            ).per_group.values()
        )
    except ValueError:
        return None
    return float(np.std(per, ddof=1)) if len(per) >= 2 else None


def _search_items(data: RuleInput, halves: bool) -> list[int]:
    if not halves:
        return list(range(len(data.human)))
    split_by = data.split_groups if data.split_groups is not None else data.groups
    search, _ = confirmation_split(data.human, split_by, fraction=0.5, seed=data.seed)
    return list(search)


def _raced_input(data: RuleInput, halves: bool) -> tuple[RuleInput, list[int]]:
    """``data`` cut to the candidates racing keeps (and their rows in ``data``)."""

    def make() -> tuple[RuleInput, list[int]]:
        items = _search_items(data, halves)
        n = len(items)
        rows = [r for r, judged in race(data, items).items() if len(judged) == n]
        sub = RuleInput(
            human=data.human,
            preds=data.preds[rows],
            baseline=rows.index(data.baseline),
            groups=data.groups,
            split_groups=data.split_groups,
            strategies=[data.strategies[r] for r in rows] if data.strategies else (),
            seed=data.seed,
        )
        return sub, rows

    return data.memo(f"raced-{halves}", make)


def raced(name: str, spec: RuleSpec) -> RuleSpec:
    """``spec`` as a raced compile runs it: the rule compares only the candidates racing
    kept (on the search half for ``confirm`` and ``veto``, else on all the items)."""
    if name in NO_CALLS:
        return spec
    halves = name in CONFIRM_FINALISTS

    def fn(data: RuleInput, **kwargs: Any) -> Pick:
        sub, rows = _raced_input(data, halves)
        pick = spec.fn(sub, **kwargs)
        return replace(pick, members=tuple(rows[m] for m in pick.members))

    return replace(spec, fn=fn)
