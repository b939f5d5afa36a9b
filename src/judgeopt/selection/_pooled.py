"""Decision rules over a whole table of judgements: every candidate judged on the same items.

The rules of :mod:`judgeopt.selection._rules` decide from a search half and a confirmation
half. The rules here see one validation set on which every candidate strategy (the
baseline among them) has been judged, as a judgement bank holds them, and use all of it:

* :func:`best_rule` keeps the best validation score (the paper's rule).
* :func:`confirm_rule` / :func:`veto_rule` replay the compile's ``confirm`` and ``veto``
  (search half, confirmation half, :func:`~judgeopt.selection.choose` /
  :func:`~judgeopt.selection.veto`).
* :func:`shrink_rule`: each candidate's paired gain over the baseline on all the items,
  shrunk toward zero by empirical Bayes (the spread of true gains estimated from the spread
  of observed gains minus their bootstrap noise); the best shrunk gain wins if positive.
* :func:`lcb_rule`: the best lower confidence bound of the paired gain, the bound's level
  corrected for the number of candidates compared (Bonferroni).
* :func:`factor_rule`: each factor value's effect on the gain estimated from every
  candidate (a ridge regression on the strategies' factor values, as HPSS pools its
  advantages), the candidate with the best fitted gain wins if positive.
* :func:`ensemble_rule`: the mean of the ``m`` best candidates' z-normalised ratings.
* :func:`anchored_rule`: the baseline's z-normalised ratings at weight ``w`` plus the ``m``
  best other candidates' sharing the rest: an ensemble hedged toward the baseline.
* :func:`stack_rule`: a ridge regression of the human scores' ranks on every candidate's
  z-normalised ratings (few effective parameters at a strong penalty).
* :func:`guarded` wraps a rule: its pick only when the rule, applied to each half of the
  items, beats the baseline on the other half (:func:`crossfit_gain`), or, with ``alpha``,
  when that cross-fitted gain's lower bound does (:func:`crossfit_bound`).

The rules that read other tasks' results (:func:`prior_rule`, :func:`posterior_rule`) are in
``_cross_task_prior``.

Every rule reads a :class:`~judgeopt.selection.RuleInput` and returns a ``Pick``: the
candidate(s) and weights that make its judge (both in ``_table``). Pure numpy/scipy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

# scipy ships no type information unless scipy-stubs is installed.
from ._rules import choose, veto
from ._split import blocked_split, confirmation_split
from ._table import (
    FloatArray,
    Pick,
    RuleInput,
    _check_strategies,
    _gains,
    _single,
    _sub,
    column_scores,
    impute,
    paired_gain_resamples,
)

__all__ = [
    "anchored_rule",
    "best_rule",
    "confirm_rule",
    "crossfit_bound",
    "crossfit_gain",
    "ensemble_rule",
    "factor_rule",
    "frugal",
    "guarded",
    "lcb_rule",
    "shrink_rule",
    "stack_rule",
    "veto_rule",
    "with_fallback",
]


def _scipy_stats() -> Any:
    """``scipy.stats``, imported on first use: it takes about half a second to import,
    which every ``judgeopt`` command (``--help`` included) would pay otherwise."""
    from scipy import stats  # type: ignore[import-untyped, unused-ignore]

    return stats


def _combination(data: RuleInput, members: Sequence[int], weights: Sequence[float]) -> Pick:
    x = impute(data.preds[list(members)])
    center = x.mean(axis=1)
    scale = x.std(axis=1)
    scale = np.where(scale > 0, scale, 1.0)
    return Pick(
        tuple(int(m) for m in members),
        tuple(float(w) for w in weights),
        tuple(float(c) for c in center),
        tuple(float(s) for s in scale),
    )


def _argmax(values: FloatArray, prefer: int) -> int:
    """Index of the largest value; ``prefer`` (the baseline) wins ties."""
    top = float(np.max(values))
    return prefer if values[prefer] >= top else int(np.argmax(values))


def best_rule(data: RuleInput) -> Pick:
    """The best validation score (the baseline on a tie)."""
    i = _argmax(data.scores, data.baseline)
    return _single(i, "best validation score")


def _halves(data: RuleInput, fraction: float) -> tuple[list[int], list[int]]:
    split_by = data.split_groups if data.split_groups is not None else data.groups
    return confirmation_split(data.human, split_by, fraction=fraction, seed=data.seed)


def confirm_rule(
    data: RuleInput,
    *,
    confidence: float = 0.8,
    finalists: int = 3,
    fraction: float = 0.5,
    n_resamples: int = 1000,
) -> Pick:
    """The compile's ``confirm``: the best ``finalists`` of the search half (the baseline
    not among them), kept only when the one-sided lower bound of the paired gain over the
    baseline on the confirmation half is above 0."""
    search, conf = _halves(data, fraction)
    h_s, x_s, g_s = _sub(data, search)
    s_scores = column_scores(h_s, x_s, g_s)
    cands = [i for i in np.argsort(-s_scores, kind="stable") if i != data.baseline][:finalists]
    h_c, x_c, g_c = _sub(data, conf)
    try:
        res = choose(
            h_c,
            x_c[data.baseline],
            [x_c[i] for i in cands],
            method="spearman",
            groups=g_c,
            confidence=confidence,
            n_resamples=n_resamples,
            seed=data.seed,
        )
    except ValueError as e:
        return _single(data.baseline, f"confirmation undefined ({e})")
    if res.chosen is None:
        return _single(data.baseline, "no finalist confirmed")
    return _single(int(cands[res.chosen]), "finalist confirmed")


def veto_rule(
    data: RuleInput, *, confidence: float = 0.8, fraction: float = 0.5, n_resamples: int = 1000
) -> Pick:
    """The compile's ``veto``: the best search-half score unless the confirmation half's
    one-sided upper bound of its gain over the baseline is below 0."""
    search, conf = _halves(data, fraction)
    h_s, x_s, g_s = _sub(data, search)
    s_scores = column_scores(h_s, x_s, g_s)
    top = _argmax(s_scores, data.baseline)
    if top == data.baseline:
        return _single(top, "the baseline has the best search score")
    h_c, x_c, g_c = _sub(data, conf)
    try:
        res = veto(
            h_c,
            x_c[data.baseline],
            x_c[top],
            search_score=float(s_scores[top]),
            baseline_search_score=float(s_scores[data.baseline]),
            method="spearman",
            groups=g_c,
            confidence=confidence,
            n_resamples=n_resamples,
            seed=data.seed,
        )
    except ValueError as e:
        return _single(data.baseline, f"confirmation undefined ({e})")
    return _single(data.baseline if res.chosen is None else top, res.reason)


def shrink_rule(data: RuleInput, *, n_resamples: int = 200, margin: float = 0.0) -> Pick:
    """Empirical Bayes: gains shrunk by ``tau^2 / (tau^2 + se^2)``, where ``tau^2`` (the
    spread of the true gains) is the observed gains' variance minus their mean squared
    standard error (at least 0: then every gain shrinks to 0 and the baseline stays). The
    best shrunk gain wins when above ``margin``."""
    gains, se = _gains(data, n_resamples)
    others = [i for i in range(gains.size) if i != data.baseline]
    if not others:
        return _single(data.baseline, "no candidate")
    g, s2 = gains[others], se[others] ** 2
    tau2 = max(0.0, float(np.var(g, ddof=1) - np.mean(s2))) if len(others) > 1 else 0.0
    shrunk = np.zeros_like(gains)
    with np.errstate(invalid="ignore", divide="ignore"):
        shrunk[others] = np.where(tau2 + s2 > 0, g * tau2 / (tau2 + s2), 0.0)
    i = int(np.argmax(shrunk))
    if i == data.baseline or shrunk[i] <= margin:
        return _single(data.baseline, f"no shrunk gain above {margin:+.3f} (tau^2 {tau2:.4f})")
    return _single(i, f"shrunk gain {shrunk[i]:+.3f} (raw {gains[i]:+.3f}, tau^2 {tau2:.4f})")


def lcb_rule(data: RuleInput, *, alpha: float = 0.2, n_resamples: int = 200) -> Pick:
    """The best lower bound ``gain - z * se`` with ``z`` the one-sided normal quantile at
    ``1 - alpha / k`` (``k`` candidates besides the baseline: a Bonferroni correction for
    choosing among them); the baseline unless that bound is above 0."""
    gains, se = _gains(data, n_resamples)
    k = max(1, gains.size - 1)
    z = float(_scipy_stats().norm.ppf(1.0 - alpha / k))
    lower = gains - z * se
    lower[data.baseline] = 0.0
    i = _argmax(lower, data.baseline)
    if i == data.baseline:
        return _single(i, f"no lower bound above 0 (z={z:.2f})")
    return _single(i, f"lower bound {lower[i]:+.3f} > 0 (z={z:.2f})")


def _design(strategies: Sequence[Mapping[str, Any]], baseline: int) -> FloatArray:
    """One-hot columns of every factor value that differs from the baseline's."""
    base = strategies[baseline]
    cols: list[tuple[str, Any]] = []
    for s in strategies:
        for k, v in s.items():
            if v != base.get(k) and (k, v) not in cols:
                cols.append((k, v))
    x = np.zeros((len(strategies), len(cols)))
    for i, s in enumerate(strategies):
        for j, (k, v) in enumerate(cols):
            x[i, j] = float(s.get(k) == v)
    return x


def factor_rule(data: RuleInput, *, ridge: float = 1.0, n_resamples: int = 200) -> Pick:
    """Factor-level pooling: ``gain_i ~ sum of its factor values' effects`` (values that
    differ from the baseline's; ridge penalty ``ridge`` in units of the median squared
    standard error, weights ``1 / se^2``); the candidate with the best fitted gain wins
    when that is above 0."""
    _check_strategies(data, "factor_rule")
    gains, se = _gains(data, n_resamples)
    x = _design(data.strategies, data.baseline)
    if x.shape[1] == 0:
        return _single(data.baseline, "no factor differs from the baseline")
    others = [i for i in range(gains.size) if i != data.baseline]
    s2 = se[others] ** 2
    floor = float(np.median(s2)) if s2.size else 1.0
    w = 1.0 / np.maximum(s2, 1e-6)
    xo, go = x[others], gains[others]
    lam = ridge * float(np.median(w)) if w.size else ridge
    beta = np.linalg.solve(xo.T @ (w[:, None] * xo) + lam * np.eye(x.shape[1]), xo.T @ (w * go))
    fitted = x @ beta
    fitted[data.baseline] = 0.0
    i = _argmax(fitted, data.baseline)
    if i == data.baseline:
        return _single(i, f"no fitted gain above 0 (se^2 ~ {floor:.4f})")
    return _single(i, f"fitted gain {fitted[i]:+.3f} (observed {gains[i]:+.3f})")


def ensemble_rule(data: RuleInput, *, m: int = 3) -> Pick:
    """The mean of the ``m`` best candidates' z-normalised ratings (by validation score; the
    baseline may be one)."""
    order = [int(i) for i in np.argsort(-data.scores, kind="stable")[: max(1, m)]]
    if len(order) == 1:
        return _single(int(order[0]), "best validation score")
    pick = _combination(data, order, [1.0 / len(order)] * len(order))
    return Pick(pick.members, pick.weights, pick.center, pick.scale, f"mean of the {m} best")


def anchored_rule(data: RuleInput, *, m: int = 3, w: float = 0.5) -> Pick:
    """The baseline at weight ``w`` plus the ``m`` best other candidates (by validation
    score) at ``(1 - w) / m`` each, on z-normalised ratings.

    A hedge: the further the combination is from the baseline, the more its test score
    can differ from the baseline's either way; keeping the baseline in pulls the pick
    toward it, trading some of the ensemble's gain for fewer losses.

    Raises:
        ValueError: When ``w`` is not in [0, 1) or ``m`` < 1.
    """
    if not 0.0 <= w < 1.0:
        raise ValueError(f"anchored_rule: w (the baseline's weight) must be in [0, 1); got {w}")
    if m < 1:
        raise ValueError(f"anchored_rule: m (other candidates) must be at least 1; got {m}")
    order = [int(i) for i in np.argsort(-data.scores, kind="stable") if int(i) != data.baseline]
    others = order[:m]
    if not others:
        return _single(data.baseline, "no candidate")
    weights = [w] + [(1.0 - w) / len(others)] * len(others)
    pick = _combination(data, [data.baseline, *others], weights)
    return Pick(
        pick.members,
        pick.weights,
        pick.center,
        pick.scale,
        f"baseline at {w:.2f} with the {len(others)} best others",
    )


def stack_rule(
    data: RuleInput, *, ridge: float = 10.0, m: int | None = None, nonneg: bool = False
) -> Pick:
    """Ridge regression of the human scores' ranks (z-normalised) on the candidates'
    z-normalised ratings; ``ridge`` is the penalty per item (a strong penalty leaves few
    effective parameters). The weights are the pick's.

    ``m``: stack only the baseline and the ``m`` best other candidates (by validation
    score): ``m + 1`` weights instead of one per candidate. ``None``: every candidate.

    ``nonneg``: no negative weight. The most negative weight's candidate is dropped and the
    rest fitted again until none is negative; the pick is the weighted mean z of the
    candidates left (a :class:`~judgeopt.judge.JudgeEnsemble` with those weights, which a
    compile can export), or the one candidate left, alone. A judge that only helps with a
    negative sign is not kept, and fewer members make a cheaper judge.

    Raises:
        ValueError: When ``m`` is below 1.
    """
    if m is not None and m < 1:
        raise ValueError(f"stack_rule: m (other candidates) must be at least 1; got {m}")
    rows = list(range(data.preds.shape[0]))
    if m is not None:
        ranked = np.argsort(-data.scores, kind="stable")
        rows = [data.baseline] + [int(i) for i in ranked if int(i) != data.baseline][:m]
    y = _scipy_stats().rankdata(data.human)
    y = (y - y.mean()) / (y.std() or 1.0)
    what = f"stacked ridge (penalty {ridge} per item)" + (
        "" if m is None else f" of the baseline and the {len(rows) - 1} best others"
    )
    while True:
        base = _combination(data, rows, [1.0] * len(rows))
        center = np.asarray(base.center)[:, None]
        z = (impute(data.preds[rows]) - center) / np.asarray(base.scale)[:, None]
        beta = np.linalg.solve(z @ z.T + ridge * y.size * np.eye(len(rows)), z @ y)
        if not nonneg or beta.min() >= 0 or len(rows) == 1:
            break
        del rows[int(np.argmin(beta))]
    if not nonneg:
        return Pick(
            base.members,
            tuple(float(b) for b in beta),
            base.center,
            base.scale,
            what,
            averaged=False,
        )
    if len(rows) == 1 or beta.max() <= 0:
        best = rows[int(np.argmax(beta))] if len(rows) > 1 else rows[0]
        return _single(best, f"{what}, non-negative: one candidate left")
    return Pick(
        base.members,
        tuple(float(b) for b in beta),
        base.center,
        base.scale,
        f"{what}, non-negative: {len(rows)} members",
    )


RuleFn = Callable[[RuleInput], Pick]


def with_fallback(rule: RuleFn, fallback: RuleFn) -> RuleFn:
    """``rule``, but ``fallback``'s pick when ``rule`` keeps the baseline (the labels could
    not confirm anything)."""

    def run(data: RuleInput) -> Pick:
        pick = rule(data)
        if pick.single == data.baseline:
            return fallback(data)
        return pick

    return run


def _subset(data: RuleInput, idx: Sequence[int]) -> RuleInput:
    """``data`` restricted to the items ``idx`` (same candidates, baseline and seed)."""

    def part(values: Sequence[Any] | None) -> list[Any] | None:
        return None if values is None else [values[i] for i in idx]

    ix = np.asarray(idx, dtype=np.intp)
    return RuleInput(
        human=data.human[ix],
        preds=data.preds[:, ix],
        baseline=data.baseline,
        groups=part(data.groups),
        split_groups=part(data.split_groups),
        strategies=data.strategies,
        order=data.order,
        seed=data.seed,
    )


def _pick_gain(pick: Pick, data: RuleInput) -> float:
    """``pick``'s score on ``data``'s items minus the baseline's there."""
    return pick.score(data) - float(data.scores[data.baseline])


def crossfit_gain(
    data: RuleInput, rule: RuleFn, *, fraction: float = 0.5, repeats: int = 1
) -> float:
    """The gain over the baseline of what ``rule`` picks, estimated on items it did not
    choose on: the validation items split into two halves (whole groups, stratified by the
    human score, seeded, as the ``confirm`` rule splits them), ``rule`` applied to each half
    and its pick scored against the baseline on the other; the mean of the two.

    An honest estimate of the rule's gain at half the labels (so a little pessimistic for
    the pick made on all of them), where the pick's own validation gain is biased upward
    by the choice. With ``repeats`` above 1 the estimate is the mean over that many
    halvings: the first is the single halving's (systematic, every other unit in score
    order), the others blocked random splits (each consecutive pair of units in score order
    split at random, seeded from ``data.seed`` and the halving's index). One halving's
    point moves by a few hundredths with the items that fall on each side; the mean of
    several moves less. The halves are computed once per input and shared by every rule.
    """
    if repeats < 1:
        raise ValueError(f"repeats={repeats!r}: the number of halvings must be at least 1")
    total = 0.0
    for k in range(repeats):
        a, b = _crossfit_pair(data, fraction, k)
        total += 0.5 * (_pick_gain(rule(a), b) + _pick_gain(rule(b), a))
    return total / repeats


def _halving_seed(seed: int, k: int) -> int:
    """The seed of the ``k``-th halving: ``seed`` itself for the first."""
    if k == 0:
        return seed
    return int(np.random.SeedSequence([seed, k]).generate_state(1)[0])


def _crossfit_pair(data: RuleInput, fraction: float, k: int = 0) -> tuple[RuleInput, RuleInput]:
    """The ``k``-th halving's two halves of ``data`` (computed once per input): the first
    is the ``confirm`` rule's systematic split, the others blocked random splits
    (:func:`~judgeopt.selection.blocked_split`)."""
    name = f"crossfit-halves-{fraction}" + (f"-{k}" if k else "")
    return data.memo(name, lambda: _crossfit_halves(data, fraction, k))


def _crossfit_halves(data: RuleInput, fraction: float, k: int) -> tuple[RuleInput, RuleInput]:
    if k == 0:
        first, second = _halves(data, fraction)
    else:
        split_by = data.split_groups if data.split_groups is not None else data.groups
        first, second = blocked_split(
            data.human, split_by, fraction=fraction, seed=_halving_seed(data.seed, k)
        )
    return _subset(data, first), _subset(data, second)


def crossfit_bound(
    data: RuleInput,
    rule: RuleFn,
    *,
    alpha: float,
    fraction: float = 0.5,
    n_resamples: int = 1000,
) -> float:
    """The one-sided ``1 - alpha`` lower bound of :func:`crossfit_gain`: how low the
    cross-fitted gain could be, given the items it was measured on.

    Each half's pick (made on the other half) and the baseline are scored on ``n_resamples``
    bootstrap resamples of the half's items (whole groups at group level, the same
    resamples for both: a paired gain); the two halves' resampled gains are averaged
    replicate by replicate, as the point estimate averages the two, and the bound is their
    ``alpha`` quantile. A cross-fitted gain of +0.2 on 50 items per half and one on 500 are
    the same point and very different evidence; the bound tells them apart. Seeded by
    ``data.seed``.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha={alpha!r}: the bound's one-sided level must be in (0, 1)")
    a, b = _crossfit_pair(data, fraction)
    total = np.zeros(n_resamples)
    for k, (fit, held) in enumerate(((a, b), (b, a))):
        rng = np.random.default_rng([data.seed, k])
        total += 0.5 * paired_gain_resamples(rule(fit), held, n_resamples=n_resamples, rng=rng)
    return float(np.quantile(total, alpha))


def guarded(
    rule: RuleFn,
    *,
    margin: float = 0.0,
    fraction: float = 0.5,
    key: str | None = None,
    alpha: float | None = None,
    n_resamples: int = 1000,
    repeats: int = 1,
) -> RuleFn:
    """``rule``, kept only when its cross-fitted gain (:func:`crossfit_gain`) is above
    ``margin``; otherwise the baseline. With ``key``, the cross-fitted gain is computed once
    per input under that name (guards of the same rule at several margins share it). With
    ``alpha``, the guard reads the gain's one-sided ``1 - alpha`` lower bound
    (:func:`crossfit_bound`, ``n_resamples`` resamples) instead of its point: the margin the
    pick must clear then grows with the noise of the items it was measured on. With
    ``repeats`` above 1 (and no ``alpha``), the point is the mean over that many halvings.

    A guard for the rules whose pick's validation gain cannot say whether it is real (an
    ensemble of the best few, chosen and weighed on the same items): the rule is asked
    twice more, on each half of the items, and must beat the baseline on the half it did
    not see. It removes picks whose gain was the choice's optimism; the test noise of a
    truly better pick (the ceiling's share of losses) it cannot remove.
    """
    if repeats < 1:
        raise ValueError(f"repeats={repeats!r}: the number of halvings must be at least 1")
    if alpha is not None and repeats > 1:
        raise ValueError(
            f"repeats={repeats!r} with alpha={alpha!r}: the lower bound is read on one "
            "halving; give one or the other"
        )

    def run(data: RuleInput) -> Pick:
        pick = rule(data)
        if pick.single == data.baseline:
            return pick

        def cross() -> float:
            if alpha is None:
                return crossfit_gain(data, rule, fraction=fraction, repeats=repeats)
            return crossfit_bound(
                data, rule, alpha=alpha, fraction=fraction, n_resamples=n_resamples
            )

        what = "cross-fitted gain"
        if alpha is not None:
            what = f"{what}'s {1 - alpha:.0%} bound"
        elif repeats > 1:
            what = f"{what} over {repeats} halvings"
        name = key
        if key is not None and alpha is not None:
            name = f"{key}-bound-{alpha}-{n_resamples}"
        elif key is not None and repeats > 1:
            name = f"{key}-repeats-{repeats}"
        gain = cross() if name is None else data.memo(f"{name}-{fraction}", cross)
        if not gain > margin:
            return _single(data.baseline, f"{what} {gain:+.3f} <= {margin:+.3f}")
        return Pick(
            pick.members,
            pick.weights,
            pick.center,
            pick.scale,
            f"{pick.reason}; {what} {gain:+.3f}",
            pick.averaged,
        )

    return run


def frugal(
    rule: RuleFn,
    cheap: RuleFn,
    *,
    tolerance: float = 0.0,
    margin: float = 0.0,
    fraction: float = 0.5,
    keys: tuple[str, str] | None = None,
) -> RuleFn:
    """``rule``'s pick, or ``cheap``'s when it judges with fewer prompts per item and does as
    well: its cross-fitted gain (:func:`crossfit_gain`) is above ``margin`` and at least
    ``rule``'s minus ``tolerance``. A combination of six prompts costs six calls per item;
    when one prompt does as well on the items neither was chosen on, the one prompt is the
    better buy.

    ``rule`` is the combination as it is fitted (unguarded: wrap the result in
    :func:`guarded` for the guard, and the two share the cross-fitted gain when
    ``keys[0]`` is the guard's ``key``); ``keys``: memo names of the two cross-fitted
    gains (computed once per input).
    """

    def gain(data: RuleInput, fn: RuleFn, key: str | None) -> float:
        def cross() -> float:
            return crossfit_gain(data, fn, fraction=fraction)

        return cross() if key is None else data.memo(f"{key}-{fraction}", cross)

    def run(data: RuleInput) -> Pick:
        pick = rule(data)
        if len(pick.members) <= 1:
            return pick
        alt = cheap(data)
        if len(alt.members) >= len(pick.members):
            return pick
        g_alt = gain(data, cheap, None if keys is None else keys[1])
        g_rule = gain(data, rule, None if keys is None else keys[0])
        if g_alt > margin and g_alt >= g_rule - tolerance:
            return replace(
                alt,
                reason=f"{alt.reason}; cross-fitted gain {g_alt:+.3f} against the "
                f"{len(pick.members)}-prompt pick's {g_rule:+.3f}, fewer calls",
            )
        return pick

    return run
