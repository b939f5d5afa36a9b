"""Replaying the compile's decision on a judgement bank: many splits, no LLM call.

For a bank pair (every candidate strategy judged on a pool of items), a *split* draws whole
groups at random until ``n_valid`` items are the labelled validation set; the rest is the test
set. A rule (:mod:`judgeopt.selection`'s ``*_rule`` functions) decides from the validation
judgements; its pick is scored on the test items against the MT-Bench baseline (Spearman,
group level for a group-level task). Repeated over ``n_splits`` seeded splits per pair and size,
this gives each rule's mean test gain, how often it is worse than the baseline, and the
relative gain, in seconds.

The constants of a rule (a confidence, a penalty, an ensemble size) and the *prior default*
strategy are chosen leave-one-pair-out (:func:`replay_bank`): for each pair, on the other
pairs only, then scored on that pair. The caveat of every replay: the bank holds the
strategies one e2e search evaluated on that pair, so a replayed search cannot wander to other
strategies; the replay measures the decision, not the search path.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import numpy as np

from judgeopt.selection import (
    RULES,
    GainPrior,
    Pick,
    RuleInput,
    RuleSpec,
    change_from,
    change_key,
    column_scores,
    paired_gain_resamples,
)

from ._bank import BankPair

__all__ = [
    "choose_default",
    "bank_splits",
    "gain_prior",
    "pool_best",
    "pool_gains",
    "prior_strategy",
    "replay_bank",
    "replay_fixed",
    "replay_rule",
    "rule_input",
    "safest_best",
    "significantly_worse",
]


#: What ``replay_bank``'s ``ceiling`` row is (kept out of ``rules``: it is no rule).
CEILING = (
    "not a rule: each pair's best column on its whole pool (test labels included), scored "
    "on the same splits; its worse share is what test noise alone costs"
)


def bank_splits(
    pair: BankPair, n_valid: int, n_splits: int, seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``n_splits`` seeded (validation, test) index pairs of whole groups: groups in random
    order until at least ``n_valid`` items, the rest is test.

    Raises:
        ValueError: When ``n_valid`` leaves fewer than 20 test items.
    """
    groups = [str(g) for g in pair.groups]
    units = sorted(set(groups))
    members = {u: np.flatnonzero(np.asarray(groups, dtype=object) == u) for u in units}
    out = []
    for s in range(n_splits):
        rng = np.random.default_rng([seed, n_valid, s])
        valid: list[int] = []
        for i in rng.permutation(len(units)):
            if len(valid) >= n_valid:
                break
            valid += members[units[int(i)]].tolist()
        v = np.array(sorted(valid))
        t = np.setdiff1d(np.arange(len(groups)), v)
        if t.size < 20:
            raise ValueError(
                f"{pair.name}: n_valid={n_valid} leaves {t.size} test items of {len(groups)}"
            )
        out.append((v, t))
    return out


def rule_input(pair: BankPair, idx: np.ndarray, preds: np.ndarray, seed: int) -> RuleInput:
    """The rule input of ``pair``'s pool rows ``idx`` (``preds``: :meth:`BankPair.matrix`),
    as every replay makes it: the split's index is the rule's ``seed``."""
    return _input(pair, idx, preds, seed)


def _input(pair: BankPair, idx: np.ndarray, preds: np.ndarray, seed: int) -> RuleInput:
    grouped = pair.level == "group"
    g = [pair.groups[i] for i in idx]
    return RuleInput(
        human=pair.human[idx],
        preds=preds[:, idx],
        baseline=_baseline_row(pair),
        groups=g if grouped else None,
        split_groups=g,
        strategies=[c.strategy for c in pair.columns],
        seed=seed,
    )


def _baseline_row(pair: BankPair) -> int:
    for i, c in enumerate(pair.columns):
        if "baseline" in c.roles:
            return i
    raise ValueError(f"{pair.name}: no baseline column")


@dataclass(frozen=True)
class _Replay:
    gains: np.ndarray  # per split: pick's test score minus the baseline's
    baseline: np.ndarray  # per split: the baseline's test score
    picks: list[tuple[int, ...]]
    kept_baseline: np.ndarray  # per split: the pick is the baseline alone
    # per split: the pick's paired test interval lies below zero (None: not computed)
    sig_worse: np.ndarray | None = None


@dataclass
class _Split:
    """One split's validation and test inputs (their caches, such as every column's
    score, shared by every rule)."""

    valid: RuleInput
    test: RuleInput


def prepare_splits(pair: BankPair, splits: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[_Split]:
    """The splits' rule inputs (every column's test score is then computed once, on first
    use, for all rules)."""
    preds = pair.matrix()
    out = []
    for s, (v, t) in enumerate(splits):
        test = _input(pair, t, preds, seed=s)
        out.append(_Split(_input(pair, v, preds, seed=s), test))
    return out


def replay_rule(
    pair: BankPair,
    rule: Callable[[RuleInput], Pick],
    splits: Sequence[tuple[np.ndarray, np.ndarray]] | Sequence[_Split],
    *,
    significance: float | None = None,
) -> _Replay:
    """Apply ``rule`` to each split's validation judgements and score its pick on the split's
    test items against the baseline. With ``significance`` (a two-sided level such as 0.95),
    also whether each split's pick is *significantly* worse than the baseline on its test
    items (:func:`significantly_worse`)."""
    if splits and not isinstance(splits[0], _Split):
        splits = prepare_splits(pair, splits)  # type: ignore[arg-type]
    base = _baseline_row(pair)
    gains, bases, picks, sig = [], [], [], []
    for sp in splits:
        assert isinstance(sp, _Split)
        pick = rule(sp.valid)
        b = float(sp.test.scores[base])
        gains.append(pick.score(sp.test) - b)
        bases.append(b)
        picks.append(pick.members)
        if significance is not None:
            sig.append(significantly_worse(pick, sp.test, significance))
    kept = np.array([p == (base,) for p in picks], dtype=bool)
    worse = np.array(sig, dtype=bool) if significance is not None else None
    return _Replay(np.array(gains), np.array(bases), picks, kept, worse)


def significantly_worse(
    pick: Pick, test: RuleInput, significance: float = 0.95, n_resamples: int = 1000
) -> bool:
    """Whether ``pick`` is worse than the baseline on ``test``'s items beyond their noise:
    the two-sided ``significance`` percentile interval of its paired gain (the pick and the
    baseline scored on the same bootstrap resamples of the items, of whole groups at group
    level; ``n_resamples``, seeded by ``test.seed``) lies below zero, as ``e2e.py`` reports
    ``shipped_significantly_worse``. The baseline itself never is. Computed once per split
    and judge (rules that ship the same judge share it).

    A share of splits worse than the baseline counts the test items' noise as well as the
    rule: a judge truly better by a few hundredths loses on a small test set often. The
    share significantly worse counts the losses the test items can tell apart from that.
    """
    if not 0.0 < significance < 1.0:
        raise ValueError(f"significance={significance!r}: a two-sided level in (0, 1)")
    if pick.members == (test.baseline,):
        return False
    key = repr(("sig", pick.members, pick.weights, pick.center, pick.scale, pick.averaged))

    def upper() -> float:
        rng = np.random.default_rng([test.seed, 95])
        gains = paired_gain_resamples(pick, test, n_resamples=n_resamples, rng=rng)
        return float(np.quantile(gains, 1.0 - (1.0 - significance) / 2))

    return test.memo(f"{key}-{significance}-{n_resamples}", upper) < 0.0


def pool_gains(pair: BankPair) -> dict[str, float]:
    """Every column's whole-pool gain over the baseline (Spearman, group level where the
    task is), keyed by its change from the baseline (:func:`judgeopt.selection.change_key`):
    what this pair tells another task about each change."""
    sc = _pool_scores(pair)
    b = _baseline_row(pair)
    base = pair.columns[b].strategy
    return {
        change_key(change_from(c.strategy, base)): float(sc[i] - sc[b])
        for i, c in enumerate(pair.columns)
    }


def pool_best(pair: BankPair) -> int:
    """The column with the best whole-pool score (every label of the pair, test items
    included): not a rule a user could run, the ceiling a rule's pick is measured against."""
    return int(np.argmax(np.nan_to_num(_pool_scores(pair), nan=-np.inf)))


def _pool_scores(pair: BankPair) -> np.ndarray:
    """Every column's score on the pair's whole pool (group level where the task is)."""
    return column_scores(
        pair.human, pair.matrix(), list(pair.groups) if pair.level == "group" else None
    )


def prior_strategy(pairs: Sequence[BankPair]) -> dict[str, Any] | None:
    """The change from the baseline (:func:`judgeopt.selection.change_from`) with the best
    mean whole-pool gain over the baseline across ``pairs``, among the changes every one of
    them holds (``{}``, the baseline, when no change beats it on average; ``None`` for no
    pairs). Changes, not strategies, are compared, because each task has its own baseline
    (its criteria, its scale)."""
    if not pairs:
        return None
    keyed = [pool_gains(p) for p in pairs]
    common = set.intersection(*(set(k) for k in keyed))
    best = max(sorted(common), key=lambda k: (float(np.mean([g[k] for g in keyed])), k == "{}"))
    return dict(json.loads(best))


def gain_prior(pairs: Sequence[BankPair]) -> GainPrior | None:
    """The :class:`~judgeopt.selection.GainPrior` of ``pairs``' whole-pool gains (``None``
    for no pairs)."""
    return GainPrior.from_gains([pool_gains(p) for p in pairs]) if pairs else None


def replay_bank(
    bank: Mapping[str, BankPair],
    rules: Mapping[str, RuleSpec] | None = None,
    *,
    n_valids: Sequence[int] = (50, 100, 200),
    n_splits: int = 200,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    stricter: Sequence[float] = (0.05, 0.025),
    significance: float | None = None,
) -> dict[str, Any]:
    """Every rule on every pair and size, its constants and prior chosen leave-one-pair-out.

    Returns the ``bank_rules.json`` payload (without ``default``): ``{"rules": {RULE:
    {"n_valid": {N: {"mean_gain", "se", "mean_relative_gain", "worse_share", "per_pair":
    {PAIR: {...}}}}}}, "settings": {...}}``. ``mean_gain`` is the mean over pairs of each
    pair's mean test gain over its splits, ``se`` the standard error of that mean across
    pairs (the pairs' spread: would it carry over to another task), ``mean_relative_gain``
    the mean over pairs of the pair's mean gain divided by its baseline's mean test score,
    ``worse_share`` the share of all splits where the pick scored below the baseline.
    With three pairs or more, ``lopo_default`` (same fields, per pair also the ``rule``
    and ``setting`` chosen) scores the choice of the default itself left out
    (:func:`_lopo_default`): the targets' number, since choosing the best of a dozen rules
    on the same pairs it is scored on would be optimistic. ``lopo_default_stricter``
    holds the same choice made with each of ``stricter`` as the safety bound on the other
    pairs (``{BOUND: {"n_valid": {N: ...}}}``): a default must be safe on a pair it was not
    chosen on, so the bound it meets on the others may need headroom below the target's.
    With ``significance``, the ceiling's and the left-out defaults' entries also count the
    splits whose shipped judge is significantly worse than the baseline on the test items
    (``sig_worse_share`` per pair, ``max_pair_sig_worse_share``; :func:`significantly_worse`
    at that two-sided level), the chosen rule replayed once more on its pair for it.
    """
    rules = dict(RULES if rules is None else rules)
    names = sorted(bank)
    if len(names) < 2:
        raise ValueError(f"a leave-one-pair-out replay needs at least 2 pairs; got {names}")
    priors = {p: prior_strategy([bank[q] for q in names if q != p]) for p in names}
    gain_priors = {p: gain_prior([bank[q] for q in names if q != p]) for p in names}
    out: dict[str, Any] = {
        "rules": {},
        "priors": priors,
        "prior": prior_strategy([bank[q] for q in names]),  # what a compile reads
        "gain_prior": asdict(gain_prior([bank[q] for q in names])),  # what a compile reads
        "settings": {
            "n_splits": n_splits,
            "seed": seed,
            "n_valids": list(n_valids),
            "pairs": names,
            "metric": "spearman (group level where the task is)",
        },
    }
    for n_valid in n_valids:
        splits = {
            p: prepare_splits(bank[p], bank_splits(bank[p], n_valid, n_splits, seed)) for p in names
        }
        every: dict[str, dict[int, dict[str, _Replay]]] = {}
        for rname, spec in rules.items():
            if progress:
                progress(f"{rname} at n_valid={n_valid}")
            # every setting on every pair (the prior of a pair is its own LOPO prior)
            runs: dict[int, dict[str, _Replay]] = {}
            settings = spec.settings() or [{}]
            for k, setting in enumerate(settings):
                runs[k] = {}
                for p in names:
                    runs[k][p] = _replay_setting(
                        bank[p], spec, setting, priors[p], gain_priors[p], splits[p]
                    )
            every[rname] = runs
            per_pair: dict[str, Any] = {}
            for p in names:
                k = _lopo_setting(runs, [q for q in names if q != p]) if len(settings) > 1 else 0
                r = runs[k][p]
                per_pair[p] = _summary(r) | {"setting": settings[k]}
            out["rules"].setdefault(rname, {"description": spec.description, "n_valid": {}})
            row = _across(per_pair)
            # The constants a compile ships: chosen on every pair.
            row["setting"] = settings[_lopo_setting(runs, names) if len(settings) > 1 else 0]
            out["rules"][rname]["n_valid"][str(n_valid)] = row
        # The ceiling: each pair's pool-best column, scored on the same test splits. Its
        # worse share is the test noise alone (the best judge of the pair still loses to
        # the baseline on that share of ~n_test-item test sets): a rule cannot be expected
        # to do better on that pair.
        ceiling = {}
        for p in names:
            col = pool_best(bank[p])
            r = replay_rule(
                bank[p],
                lambda d, col=col: Pick((col,), reason="ceiling"),
                splits[p],
                significance=significance,
            )
            ceiling[p] = _summary(r) | {"strategy": dict(bank[p].columns[col].strategy)}
        out.setdefault("ceiling", {"description": CEILING, "n_valid": {}})["n_valid"][
            str(n_valid)
        ] = _across(ceiling)
        if len(names) >= 3:
            rule_settings = {r: rules[r].settings() or [{}] for r in every}
            for bound, where in [(0.10, out.setdefault("lopo_default", {}))] + [
                (b, out.setdefault("lopo_default_stricter", {}).setdefault(str(b), {}))
                for b in stricter
            ]:
                row = _lopo_default(every, rule_settings, names, max_worse=bound)
                if significance is not None:
                    scored = {p: (bank[p], priors[p], gain_priors[p], splits[p]) for p in names}
                    row = _count_significant(row, rules, scored, significance)
                where.setdefault("n_valid", {})[str(n_valid)] = row
    return out


def _count_significant(
    row: dict[str, Any],
    rules: Mapping[str, RuleSpec],
    scored: Mapping[str, tuple[BankPair, Any, Any, Sequence[_Split]]],
    significance: float,
) -> dict[str, Any]:
    """A left-out default's row with each pair's ``sig_worse_share`` (the rule chosen for
    the pair replayed once more there, counting significant losses) and their maximum."""
    for p, v in row["per_pair"].items():
        pair, prior, gain, splits = scored[p]
        fn = rules[v["rule"]].bind(v["setting"], strategy=prior, prior=gain)
        again = replay_rule(pair, fn, splits, significance=significance)
        v["sig_worse_share"] = float(np.mean(again.sig_worse))
    return row | _max_sig_worse(row["per_pair"])


def replay_fixed(
    bank: Mapping[str, BankPair],
    rule: str,
    setting: Mapping[str, Any],
    *,
    rules: Mapping[str, RuleSpec] | None = None,
    n_valids: Sequence[int] = (50, 100, 200),
    n_splits: int = 200,
    seed: int = 0,
    scored: Sequence[str] | None = None,
    column_seconds: Mapping[str, np.ndarray] | None = None,
    significance: float | None = None,
) -> dict[str, Any]:
    """One rule at one fixed setting on every pair and size: what a preset ships, whose
    constants do not change with the user's number of labels (:func:`replay_bank` chooses a
    rule's constants per size). The splits are :func:`replay_bank`'s (same ``seed``); a prior
    is each pair's leave-one-pair-out prior. ``scored``: replay these pairs only (held-out
    pairs), their priors still learnt from every other pair of ``bank``. Returns ``{"rule",
    "setting", "n_valid": {N: {...}}}`` with :func:`replay_bank`'s fields per size.

    ``column_seconds``: per pair, each column's seconds per judgement; each pair's entry
    then holds ``seconds``, the shipped judge's seconds per judged item (its members'
    seconds added), mean over the splits, and each size ``mean_seconds`` over the pairs.

    ``significance``: each pair's entry also holds ``sig_worse_share``, the share of its
    splits whose shipped judge is significantly worse than the baseline on the test items
    (:func:`significantly_worse` at that two-sided level), and each size
    ``max_pair_sig_worse_share``."""
    spec = dict(RULES if rules is None else rules).get(rule)
    if spec is None:
        raise ValueError(f"unknown rule {rule!r}; allowed: {sorted(rules or RULES)}")
    unknown = sorted(set(scored or ()) - set(bank))
    if unknown:
        raise ValueError(f"scored: {unknown} are not pairs of the bank ({sorted(bank)})")
    names = sorted(scored) if scored else sorted(bank)
    others = {p: [bank[q] for q in sorted(bank) if q != p] for p in names}
    priors = {p: prior_strategy(others[p]) if spec.uses_prior else None for p in names}
    gains = {p: gain_prior(others[p]) if spec.uses_gain_prior else None for p in names}
    out: dict[str, Any] = {"rule": rule, "setting": dict(setting), "n_valid": {}}
    for n_valid in n_valids:
        per_pair: dict[str, Any] = {}
        for p in names:
            splits = prepare_splits(bank[p], bank_splits(bank[p], n_valid, n_splits, seed))
            rule_fn = spec.bind(setting, strategy=priors[p], prior=gains[p])
            r = replay_rule(bank[p], rule_fn, splits, significance=significance)
            per_pair[p] = _summary(r) | {"setting": dict(setting)}
            if column_seconds is not None:
                sec = column_seconds[p]
                per_pair[p]["seconds"] = float(
                    np.mean([sum(float(sec[m]) for m in pick) for pick in r.picks])
                )
        out["n_valid"][str(n_valid)] = _across(per_pair)
        if column_seconds is not None:
            out["n_valid"][str(n_valid)]["mean_seconds"] = float(
                np.mean([v["seconds"] for v in per_pair.values()])
            )
    return out


def _replay_setting(
    pair: BankPair,
    spec: RuleSpec,
    setting: Mapping[str, Any],
    prior: Mapping[str, Any] | None,
    gain: GainPrior | None,
    splits: Sequence[_Split],
) -> _Replay:
    """``spec``'s rule at ``setting`` on ``pair``'s splits, given the pair's leave-one-pair-out
    prior and gain prior where the rule uses them."""
    return replay_rule(pair, spec.bind(setting, strategy=prior, prior=gain), splits)


def _lopo_default(
    every: Mapping[str, Mapping[int, Mapping[str, _Replay]]],
    settings: Mapping[str, Sequence[Mapping[str, Any]]],
    names: Sequence[str],
    max_worse: float = 0.10,
) -> dict[str, Any]:
    """The whole choice of a default, left out: for each pair, every rule's setting and then
    the rule itself are chosen on the other pairs only (as :func:`choose_default` chooses,
    each rule run on the others with the setting chosen on them), and the chosen rule is
    scored on the pair. What a user of a new task gets from a default the bank chose; the
    rules' own rows reuse the other pairs' choices of rule."""
    per_pair: dict[str, Any] = {}
    for p in names:
        others = [q for q in names if q != p]
        rows: dict[str, dict[str, float]] = {}
        ks: dict[str, int] = {}
        for rname, runs in every.items():
            k = _lopo_setting(runs, others, max_worse) if len(runs) > 1 else 0
            ks[rname] = k
            rows[rname] = _on_pairs(runs[k], others)
        rule = _pick_default(rows, max_worse)
        k = ks[rule]
        per_pair[p] = _summary(every[rule][k][p]) | {
            "rule": rule,
            "setting": dict(settings[rule][k]),
        }
    return _across(per_pair)


#: A row's key in :func:`safest_best`: a rule's name or a setting's index.
K = TypeVar("K", str, int)


def _on_pairs(runs: Mapping[str, _Replay], pairs: Sequence[str]) -> dict[str, float]:
    """What the default's criterion reads of one rule (or setting) on ``pairs``: the mean
    of the pairs' mean test gains (of gains, not of ratios, which a pair with a baseline
    near 0 would dominate) and the largest per-pair worse share."""
    return {
        "mean_gain": float(np.mean([np.mean(runs[q].gains) for q in pairs])),
        "max_pair_worse_share": max(float(np.mean(runs[q].gains < -1e-12)) for q in pairs),
    }


def safest_best(
    rows: Mapping[K, Mapping[str, float]], max_worse: float, prefer: Callable[[K], Any]
) -> K:
    """The default's criterion: the best ``mean_gain`` among the rows whose
    ``max_pair_worse_share`` is at most ``max_worse`` (``prefer`` breaks a tie: the largest
    wins), else the row with the smallest ``max_pair_worse_share`` (the first key on a
    tie)."""
    safe = [k for k, r in rows.items() if r["max_pair_worse_share"] <= max_worse]
    if safe:
        return max(safe, key=lambda k: (round(rows[k]["mean_gain"], 12), prefer(k)))
    return min(rows, key=lambda k: (rows[k]["max_pair_worse_share"], k))


def _pick_default(rows: Mapping[str, Mapping[str, float]], max_worse: float) -> str:
    """:func:`choose_default`'s criterion on rows of ``mean_gain`` and
    ``max_pair_worse_share`` (on a tie the simpler rule, the shorter name)."""
    return safest_best(rows, max_worse, lambda n: (-len(n), n))


def _relative(r: _Replay) -> float:
    b = float(np.mean(r.baseline))
    return float(np.mean(r.gains)) / abs(b) if b else math.nan


def _lopo_setting(
    runs: Mapping[int, Mapping[str, _Replay]], others: Sequence[str], max_worse: float = 0.10
) -> int:
    """The setting chosen on ``others`` as the default rule is chosen (:func:`safest_best`:
    the best mean test gain among the settings worse than the baseline in at most
    ``max_worse`` of the splits on every one of ``others``, else the one with the smallest
    largest per-pair worse share; the first setting on a tie).

    A rule's constants are part of the rule: choosing them by gain alone would hand the
    default's criterion an aggressive setting it then rejects, where a safer setting of the
    same rule would pass (a guard's margin, an anchor's weight).
    """
    rows = {k: _on_pairs(runs[k], others) for k in sorted(runs)}
    return safest_best(rows, max_worse, lambda k: -k)


def _summary(r: _Replay) -> dict[str, Any]:
    return {
        "mean_gain": float(np.mean(r.gains)),
        "split_se": float(np.std(r.gains, ddof=1) / math.sqrt(r.gains.size))
        if r.gains.size > 1
        else None,
        "relative_gain": _relative(r),
        "worse_share": float(np.mean(r.gains < -1e-12)),
        **({} if r.sig_worse is None else {"sig_worse_share": float(np.mean(r.sig_worse))}),
        "baseline": float(np.mean(r.baseline)),
        "baseline_share": float(np.mean(r.kept_baseline)),
        "n_splits": int(r.gains.size),
        # Prompts the shipped judge combines: its calls per judged item.
        "members": float(np.mean([len(p) for p in r.picks])) if r.picks else None,
    }


def _across(per_pair: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    g = np.array([v["mean_gain"] for v in per_pair.values()])
    rel = np.array([v["relative_gain"] for v in per_pair.values()], dtype=float)
    worse = np.array([v["worse_share"] for v in per_pair.values()])
    n = np.array([v["n_splits"] for v in per_pair.values()])
    base = np.array([v["baseline"] for v in per_pair.values()])
    return {
        "mean_gain": float(g.mean()),
        "se": float(g.std(ddof=1) / math.sqrt(g.size)) if g.size > 1 else None,
        "mean_relative_gain": float(np.nanmean(rel)),
        "relative_mean_gain": float(g.mean() / abs(base.mean())) if base.mean() else None,
        "worse_share": float((worse * n).sum() / n.sum()),
        "max_pair_worse_share": float(worse.max()),
        **_max_sig_worse(per_pair),
        "mean_members": _mean_members(per_pair),
        "per_pair": {p: dict(v) for p, v in per_pair.items()},
    }


def _max_sig_worse(per_pair: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
    """``max_pair_sig_worse_share`` where every pair counted its significant losses."""
    got = [v.get("sig_worse_share") for v in per_pair.values()]
    if not got or any(g is None for g in got):
        return {}
    return {"max_pair_sig_worse_share": float(max(got))}  # type: ignore[type-var]


def _mean_members(per_pair: Mapping[str, Mapping[str, Any]]) -> float | None:
    """The mean over pairs of the shipped judge's prompts per item (``None`` when a pair's
    replay did not count them)."""
    got = [v.get("members") for v in per_pair.values()]
    return None if not got or None in got else float(np.mean(got))


def choose_default(
    payload: Mapping[str, Any], *, n_valid: int = 100, max_worse: float = 0.10
) -> str:
    """The rule with the best mean test gain at ``n_valid`` among those whose pick is worse
    than the baseline in at most ``max_worse`` of the splits on every pair (on a tie the
    simpler rule, the shorter name); when none is, the one with the smallest largest
    per-pair worse share."""
    rows = {
        name: r["n_valid"][str(n_valid)]
        for name, r in payload["rules"].items()
        if str(n_valid) in r["n_valid"]
    }
    if not rows:
        raise ValueError(f"no rule was replayed at n_valid={n_valid}")
    return _pick_default(rows, max_worse)


def paired_difference(a: Mapping[str, Any], b: Mapping[str, Any], n_valid: int) -> dict[str, Any]:
    """``b`` minus ``a``, two :func:`replay_fixed` results on the same bank and splits, at
    ``n_valid`` labels: per pair the difference of the mean test gains (the splits are the
    same, so the pair's noise cancels), and their mean over pairs with its standard error
    over pairs (``None`` with one pair)."""
    pa = a["n_valid"][str(n_valid)]["per_pair"]
    pb = b["n_valid"][str(n_valid)]["per_pair"]
    if sorted(pa) != sorted(pb):
        raise ValueError(f"the replays hold different pairs: {sorted(pa)} and {sorted(pb)}")
    names = sorted(pa)
    diff = np.array([pb[p]["mean_gain"] - pa[p]["mean_gain"] for p in names])
    return {
        "mean": float(diff.mean()),
        "se": float(diff.std(ddof=1) / math.sqrt(diff.size)) if diff.size > 1 else None,
        "per_pair": {p: float(d) for p, d in zip(names, diff, strict=True)},
    }


def add_replay_arguments(parser: Any, out: Any) -> None:
    """The options every bank replay script takes: ``--splits``, ``--n-valid`` (a
    comma-separated list, parsed by :func:`n_valids_of`), ``--seed`` and ``--out``."""
    parser.add_argument("--splits", type=int, default=200, help="splits per pair and size")
    parser.add_argument("--n-valid", default="50,100,200", help="labelled items, comma-separated")
    parser.add_argument("--seed", type=int, default=0, help="seed of the splits")
    parser.add_argument("--out", default=str(out), help="where the JSON goes")


def n_valids_of(text: str) -> list[int]:
    """``--n-valid``'s comma-separated sizes as integers (each at least 2)."""
    try:
        sizes = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--n-valid {text!r}: expected comma-separated integers") from None
    if not sizes or min(sizes) < 2:
        raise SystemExit(f"--n-valid {text!r}: expected sizes of at least 2 labelled items")
    return sizes
