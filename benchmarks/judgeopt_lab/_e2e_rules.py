"""What the end-to-end benchmark (``benchmarks/e2e.py``) reads off one pair's stored judgements
after its compile, without a call: every finalist on the test items (:func:`finalist_report`)
and what two other selection rules would have returned (:func:`rules_report`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from judgeopt.data import Record
from judgeopt.evaluate import EvalResult, compare, item_predictions
from judgeopt.selection import SelectionConfig, choose, confirmation_split, veto

from ._stored import stored_result, strategy_key

__all__ = ["confirmation_kwargs", "finalist_report", "finite_or_none", "rules_report"]


def confirmation_kwargs(selection: SelectionConfig, groups: list[str] | None) -> dict[str, Any]:
    """The keyword arguments of :func:`~judgeopt.selection.choose` and
    :func:`~judgeopt.selection.veto` on a compile's confirmation items under the
    ``[selection]`` settings ``selection`` (Spearman; ``groups`` at group level, else None).

    The level is the one ``--selection confirm`` would run at with these settings: the
    preset's ``confidence`` when it states one, else the rule's own (0.8; the ``auto``
    preset's ``lcb`` runs at its own 0.95, :func:`~judgeopt.selection.default_confidence`)."""
    return {
        "method": "spearman",
        "groups": groups,
        "confidence": selection.with_rule("confirm").confidence,
        "n_resamples": selection.n_resamples,
        "seed": selection.seed,
    }


def finite_or_none(x: Any) -> float | None:
    """``x``, or None for None and NaN (JSON has no NaN)."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def finalist_report(
    pair_dir: Path, test: list[Record], row: dict[str, Any], seed: int
) -> list[dict[str, Any]]:
    """Every finalist judged on test (the ensemble's members are), against the baseline.

    This is the check of the selection rule on held-out items: what each finalist (and so
    the paper's rule, which keeps the best search score) would have scored on test. It reads
    the stored test items only; a finalist whose items are not all stored is left out.
    """
    level = row["level"]
    base = (
        stored_result(
            pair_dir / f"test_{strategy_key(row['baseline_strategy'])}.jsonl", test, level
        )
        if row.get("baseline_strategy")
        else None
    )
    if base is None:
        return []
    finalists = (row.get("selection") or {}).get("finalists") or []
    if not isinstance(finalists, list):  # a rule without confirmation: the setting's count
        return []
    out = []

    def by_search_score(f: dict[str, Any]) -> float:  # best first; no score last
        score = f.get("search_score")
        return math.inf if score is None else -float(score)

    for rank, f in enumerate(sorted(finalists, key=by_search_score)):
        res = stored_result(pair_dir / f"test_{strategy_key(f['strategy'])}.jsonl", test, level)
        if res is None:
            continue
        c = compare(res, base, test, labels=("baseline", f["key"]), seed=seed)
        out.append(
            {
                "key": f["key"],
                "search_rank": rank + 1,
                "search_score": f.get("search_score"),
                "confirm_gain": f.get("gain"),
                "confirm_gain_ci": f.get("gain_ci"),
                "confirmed": f.get("confirmed"),
                "test": finite_or_none(res.metric("spearman")),
                "test_gain": finite_or_none(c.gain),
                "test_gain_ci": list(c.gain_ci),
                "test_parse_failures": res.parse_failures,
                "strategy": f["strategy"],
            }
        )
    return out


def rules_report(
    pair_dir: Path, valid: list[Record], test: list[Record], row: dict[str, Any], optimizer: str
) -> dict[str, Any]:
    """What two other selection rules would have returned on this pair, and its test gain.

    Both are computed from stored judgements without a call: the compile's confirmation
    split is redone (same function and seed), the baseline's and the finalists' judged
    confirmation items are read from the checkpoint's ``items.jsonl``, and the rule's pick is
    looked up among the finalists judged on test.

    - ``best_search_score`` (the paper's rule, on the search half): the strategy with the
      best search score; that is the baseline when the baseline's own search score is at
      least the best finalist's.
    - ``veto`` (:func:`judgeopt.selection.veto`, pre-registered in docs/benchmarks.md
      section 11): the same pick unless the one-sided upper bound of its confirmation gain
      over the baseline is below zero.

    A rule that returns the baseline has a test gain of exactly 0 (interval [0, 0]); each
    rule's ``minus_chosen`` is its judge's paired test difference from the default rule's
    chosen judge (0, [0, 0] when they are the same judge). As a
    check of the redone split and the stored items, the default rule is recomputed too and
    must give the gains the compile recorded (``check_max_abs_diff``).
    """
    from judgeopt.teleprompt import ItemStore, load_optimizer  # here: it imports DSPy

    sel_cfg = load_optimizer(optimizer).selection
    sel = row.get("selection") or {}
    listed = sel.get("finalists")
    fins = sorted(
        listed if isinstance(listed, list) else [],  # an int: a rule without confirmation
        key=lambda f: math.inf if f.get("search_score") is None else -float(f["search_score"]),
    )
    base_strategy = row["baseline_strategy"]
    base_scores = [
        t["score"]
        for t in row["search"]["trace"]
        if t["strategy"] == base_strategy and t["score"] is not None
    ]
    base_search = max(base_scores) if base_scores else None
    out: dict[str, Any] = {"baseline_search_score": base_search}
    if not fins or sel.get("rule") != "confirm":
        return out
    aspect = row["aspect"]
    humans = [r.scores[aspect] for r in valid]
    grouped = any(r.group_id for r in valid)
    groups = [r.group_id or r.id for r in valid] if grouped else None
    _, confirm_idx = confirmation_split(
        humans, groups, fraction=sel_cfg.confirm_fraction, seed=sel_cfg.seed
    )
    confirm = [valid[i] for i in confirm_idx]
    if len(confirm) != sel.get("confirm_items"):
        raise RuntimeError(
            f"{row['task']}/{aspect}: the redone split has {len(confirm)} "
            f"confirmation items, the compile had {sel.get('confirm_items')}"
        )
    stored = ItemStore(pair_dir / "ckpt" / "items.jsonl")

    def vector(strategy: dict[str, Any]) -> list[float] | None:
        items = stored.items(strategy)
        if any(r.id not in items for r in confirm):
            return None
        return item_predictions([items[r.id] for r in confirm])

    level = row["level"]
    human = [r.scores[aspect] for r in confirm]
    cgroups = [r.group_id or r.id for r in confirm] if level == "group" else None
    kw = confirmation_kwargs(sel_cfg, cgroups)
    base_vec = vector(base_strategy)
    vecs = [vector(f["strategy"]) for f in fins]
    if base_vec is None or any(v is None for v in vecs):
        out["error"] = "not every finalist's confirmation items are stored"
        return out
    again = choose(human, base_vec, vecs, keys=[f["key"] for f in fins], **kw)
    diffs = [
        abs(a.gain.delta - f["gain"])
        for a, f in zip(again.finalists, fins, strict=True)
        if f.get("gain") is not None and a.error is None
    ]
    out["check_max_abs_diff"] = max(diffs) if diffs else None
    top = fins[0]
    v = veto(
        human,
        base_vec,
        vecs[0],
        search_score=float(top["search_score"]),
        baseline_search_score=base_search,
        key=top["key"],
        **kw,
    )
    on_test = {f["key"]: f for f in row.get("finalists_on_test") or []}

    def test_result(strategy: dict[str, Any]) -> EvalResult | None:
        return stored_result(pair_dir / f"test_{strategy_key(strategy)}.jsonl", test, level)

    def minus_chosen(strategy: dict[str, Any]) -> dict[str, Any]:
        if strategy == row["chosen_strategy"]:
            return {"minus_chosen": 0.0, "minus_chosen_ci": [0.0, 0.0]}
        mine, chosen = test_result(strategy), test_result(row["chosen_strategy"])
        if mine is None or chosen is None:
            return {"minus_chosen": None, "minus_chosen_ci": None}
        c = compare(mine, chosen, test, labels=("chosen", "rule"), seed=sel_cfg.seed)
        return {"minus_chosen": finite_or_none(c.gain), "minus_chosen_ci": list(c.gain_ci)}

    def outcome(pick: str | None, extra: dict[str, Any]) -> dict[str, Any]:
        if pick is None:
            return {
                "returns": "baseline",
                "test_gain": 0.0,
                "test_gain_ci": [0.0, 0.0],
                **minus_chosen(base_strategy),
                **extra,
            }
        f = on_test.get(pick)
        return {
            "returns": pick,
            "test_gain": None if f is None else f["test_gain"],
            "test_gain_ci": None if f is None else f["test_gain_ci"],
            **minus_chosen(top["strategy"]),
            **extra,
        }

    best_is_base = base_search is not None and not base_search < float(top["search_score"])
    out["best_search_score"] = outcome(None if best_is_base else top["key"], {})
    out["veto"] = outcome(
        None if v.chosen is None else top["key"],
        {
            "confirm_gain": finite_or_none(v.finalists[0].gain.delta),
            "upper_bound": finite_or_none(v.finalists[0].upper_bound),
            "reason": v.reason,
        },
    )
    return out
