"""What a judgement bank still has to judge, in the order its recorder judges it.

A bank column is a strategy *with* its decoding, but one call with ``expected`` decoding
gives both the greedy and the expected rating: the unit of work is a *base strategy*
(:func:`bank_base`, the strategy without its decoding) on one item. :func:`bank_todo` lists
the (base strategy, item) calls a pair of the plan still needs, ordered so that a pair only
partly recorded is already usable: whole groups judged by every column, grown in waves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._bank import judgement_covers, strategy_json


def bank_base(strategy: Mapping[str, Any]) -> dict[str, Any]:
    """``strategy`` without its ``decoding``: what one bank call judges with."""
    return {k: v for k, v in strategy.items() if k != "decoding"}


def bank_todo(
    pair: Mapping[str, Any],
    have: Mapping[tuple[str, str], Mapping[str, Any]],
    groups: Mapping[str, str] | None = None,
    *,
    wave: int = 1,
    upto: int | None = None,
) -> list[tuple[str, str]]:
    """The (base strategy key, item id) calls ``pair`` still needs: a column's judgement of
    the item is absent, or only a failed call (:func:`~judgeopt_lab.judgement_covers`).

    ``pair`` is one pair of a bank plan (its ``pool`` of item ids and its ``columns``),
    ``have`` the judgements held, keyed like :func:`~judgeopt_lab.keep_judgement` keys
    them, and ``groups`` maps a pool item to its group (default: each item its own).

    The calls come in *waves* of whole groups (at least ``wave`` items each), the groups with
    the fewest calls per item first (ties in pool order), and column by column inside a
    wave. A pair recorded only in part then holds whole groups judged by every column, a pool
    a replay can use before the pair is complete (the pool's groups were drawn without
    looking at labels, so any such subset is too), while the calls in flight together mostly
    share their strategy's instructions, whose prompt blocks a batch engine evaluates once.
    With ``upto``, only the waves until at least ``upto`` pool items are judged by every
    column (every wave when ``None``).
    """
    if wave < 1:
        raise ValueError(f"`wave` must be at least 1 item; got {wave!r}")
    groups = groups or {}
    bases: list[tuple[str, str]] = []
    for column in pair["columns"]:
        strategy = column["strategy"]
        decoding = "greedy" if strategy["decoding"] == "greedy" else "expected"
        bases.append((strategy_json(bank_base(strategy)), decoding))
    members: dict[str, list[str]] = {}
    for rid in pair["pool"]:
        members.setdefault(groups.get(rid, rid), []).append(rid)
    todo = {
        rid: {b for b, dec in bases if not judgement_covers(have.get((b, rid)), dec)}
        for rid in pair["pool"]
    }
    columns = list(dict.fromkeys(b for b, _ in bases))  # greedy and expected share a call
    calls = {g: sum(len(todo[r]) for r in rids) for g, rids in members.items()}
    order = [g for g in sorted(members, key=lambda g: calls[g] / len(members[g])) if calls[g]]
    out: list[tuple[str, str]] = []
    whole = sum(len(rids) for g, rids in members.items() if not calls[g])
    start = 0
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
