"""A pre-registered default's verdict, read off the results its plan names (no LLM call).

A pre-registration (``benchmarks/default_prereg.json``) names a candidate, the pairs it is
tested on and its criteria before their items are judged. :func:`prereg_verdict` applies
those criteria to what the named commands wrote: the bank replays of ``bank_fixed.py`` (keys
made by :func:`fixed_label`) and the real compiles of ``e2e.py``. Each criterion is
``"met"``, ``"not met"`` or ``"pending"`` (its results are not all there yet); the decision
is ``"adopt"`` when every criterion is met, ``"keep the shipped default"`` as soon as one is
not, and ``"open"`` otherwise. The thresholds are the plan's (10 % of splits worse, a gain
above 0), written here once so the verdict cannot drift from the registered text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MAX_WORSE_SHARE", "fixed_label", "prereg_verdict", "stage_2_beside"]

#: S1's bound: the share of a pair's splits on which the candidate may test worse than the
#: baseline.
MAX_WORSE_SHARE = 0.10


def fixed_label(
    rule: str,
    setting: Mapping[str, Any],
    candidates: str = "all",
    pairs: Sequence[str] | None = None,
) -> str:
    """The key ``bank_fixed.py`` files a rule at a setting under: ``rule setting-as-json``,
    then `` [candidates]`` unless every candidate, then `` on PAIR,PAIR`` for named pairs."""
    key = f"{rule} {json.dumps(dict(setting), sort_keys=True)}"
    if candidates != "all":
        key += f" [{candidates}]"
    if pairs:
        key += f" on {','.join(sorted(pairs))}"
    return key


def _criterion(status: str, value: Any, detail: str) -> dict[str, Any]:
    return {"status": status, "value": value, "detail": detail}


def _bank_row(
    bank: Mapping[str, Any], judge: Mapping[str, Any], pairs: list[str], n: str
) -> dict[str, Any] | None:
    """The replay row of a plan's ``judge`` (its ``rule``, ``setting``, ``candidates``) on
    ``pairs`` at ``n`` labels; ``None`` while it is not in ``bank``."""
    key = fixed_label(judge["rule"], judge["setting"], judge.get("candidates", "all"), pairs)
    entry = bank.get(key)
    if not isinstance(entry, Mapping):
        return None
    row = entry.get("n_valid", {}).get(n)
    return dict(row) if isinstance(row, Mapping) else None


def _stage_1(plan: Mapping[str, Any], bank: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    stage = plan["stage_1_bank"]
    pairs = sorted(stage["pairs"])
    n = str(stage["splits"]["n_valid"])
    row = _bank_row(bank, plan["candidate"], pairs, n)
    # S3's comparator is the judge the plan reports as the shipped default.
    default = next(j for j in plan["reported_beside"] if j["role"] == "the shipped default")
    shipped = _bank_row(bank, default, pairs, n)
    if row is None:
        wait = "the candidate's replay on " + ", ".join(pairs) + " is not in the results yet"
        return {k: _criterion("pending", None, wait) for k in ("S1", "S2", "S3")}
    per_pair = row["per_pair"]
    worse = {p: float(per_pair[p]["worse_share"]) for p in pairs if p in per_pair}
    s1_ok = len(worse) == len(pairs) and all(w <= MAX_WORSE_SHARE for w in worse.values())
    gain = float(row["mean_gain"])
    out = {
        "S1": _criterion(
            "met" if s1_ok else "not met",
            worse,
            f"share of splits worse than the baseline, per pair (at most {MAX_WORSE_SHARE})",
        ),
        "S2": _criterion("met" if gain > 0 else "not met", gain, "mean test gain over the pairs"),
    }
    if shipped is None:
        out["S3"] = _criterion(
            "pending", None, f"{default['rule']}'s replay on the same pairs is not there yet"
        )
    else:
        base = float(shipped["mean_gain"])
        out["S3"] = _criterion(
            "met" if gain >= base else "not met",
            {"candidate": gain, default["rule"]: base},
            f"the candidate's mean gain against the shipped {default['rule']}'s, same splits",
        )
    return out


def _tested(plan: Mapping[str, Any], e2e: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The e2e rows of the plan's fresh pairs tested so far (a shipped gain is there), by
    ``task:aspect`` in the plan's order."""
    rows = {f"{r.get('task')}:{r.get('aspect')}": r for r in e2e.get("pairs", [])}
    return {
        name: rows[name]
        for name in plan["stage_2_fresh"]["pairs"]
        if name in rows and rows[name].get("shipped_gain") is not None
    }


def _stage_2(plan: Mapping[str, Any], e2e: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    done = _tested(plan, e2e)
    worse = [name for name, r in done.items() if r.get("shipped_significantly_worse")]
    gains = {name: float(r["shipped_gain"]) for name, r in done.items()}
    missing = [name for name in plan["stage_2_fresh"]["pairs"] if name not in gains]
    if worse:
        f1 = _criterion("not met", worse, "pairs whose shipped judge tested significantly worse")
    elif missing:
        f1 = _criterion("pending", gains, f"not compiled and tested yet: {', '.join(missing)}")
    else:
        f1 = _criterion("met", [], "no pair's shipped judge tested significantly worse")
    if missing:
        f2 = _criterion("pending", gains, f"not compiled and tested yet: {', '.join(missing)}")
    else:
        mean = sum(gains.values()) / len(gains)
        f2 = _criterion(
            "met" if mean > 0 else "not met",
            {"per_pair": gains, "mean": mean},
            "mean test gain of the shipped judges over the pairs",
        )
    return {"F1": f1, "F2": f2}


def stage_2_beside(plan: Mapping[str, Any], e2e: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What the plan reports beside stage 2's criteria, per fresh pair tested so far (no
    criterion reads it): the shipped judge's headline gain with its interval, the same gain
    on the test items the baseline rated (``rated_by_baseline``: an unparsed answer is
    imputed by the judge's mean in the headline, so part of a gain can be the baseline's
    failures to answer), and the shipped judge's calls and seconds per judged item."""
    out: dict[str, dict[str, Any]] = {}
    for name, row in _tested(plan, e2e).items():
        rated = row.get("rated_by_baseline") or None
        shipped_key = "ensemble" if row.get("shipped") == "ensemble" else "chosen"
        rated_judge = (rated or {}).get(shipped_key) or {}
        cost = (row.get("cost_per_item") or {}).get("shipped") or {}
        out[name] = {
            "shipped": row.get("shipped"),
            "gain": row["shipped_gain"],
            "gain_ci": row.get("shipped_gain_ci"),
            "rated_by_baseline": None
            if not rated
            else {
                "n_items": rated.get("n_items"),
                "n_test": rated.get("n_test"),
                "gain": rated_judge.get("gain"),
                "gain_ci": rated_judge.get("gain_ci"),
            },
            "calls_per_item": cost.get("calls"),
            "seconds_per_item": cost.get("seconds"),
        }
    return out


def prereg_verdict(
    plan: Mapping[str, Any], bank: Mapping[str, Any], e2e: Mapping[str, Any]
) -> dict[str, Any]:
    """Every criterion of ``plan`` on the results so far, and the decision they give.

    Args:
        plan: The pre-registration (``benchmarks/default_prereg.json``).
        bank: Stage 1's ``bank_fixed.py`` results (``{}`` when none are there yet).
        e2e: Stage 2's ``e2e.py`` JSON (``{}`` when none is there yet).

    Returns:
        ``{"criteria": {NAME: {"status", "value", "detail"}}, "decision"}``.
    """
    criteria = _stage_1(plan, bank) | _stage_2(plan, e2e)
    states = {c["status"] for c in criteria.values()}
    if "not met" in states:
        decision = "keep the shipped default"
    elif states == {"met"}:
        decision = "adopt"
    else:
        decision = "open"
    return {"criteria": criteria, "decision": decision}
