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

The rules that read other tasks' results (:func:`prior_rule`, :func:`posterior_rule`) are in
``_prior``.

Every rule returns a :class:`Pick`: the candidate(s) and weights that make its judge, which
:meth:`Pick.predict` applies to new items. Pure numpy/scipy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

# scipy ships no type information unless scipy-stubs is installed.
from scipy import stats  # type: ignore[import-untyped, unused-ignore]

from ._rules import choose, veto
from ._split import confirmation_split

__all__ = [
    "Pick",
    "RuleInput",
    "anchored_rule",
    "best_rule",
    "bootstrap_scores",
    "column_scores",
    "confirm_rule",
    "ensemble_rule",
    "factor_rule",
    "impute",
    "lcb_rule",
    "shrink_rule",
    "stack_rule",
    "veto_rule",
    "with_fallback",
]

FloatArray = npt.NDArray[np.float64]
T = TypeVar("T")


def impute(preds: FloatArray) -> FloatArray:
    """Each row's missing (``nan``) ratings replaced by the mean of its parsed ones (a row
    without any parsed rating becomes 0: a constant judge), as :func:`judgeopt.evaluate`
    scores unparsed answers."""
    x = np.array(preds, dtype=np.float64, copy=True, ndmin=2)
    for row in x:
        bad = np.isnan(row)
        if bad.any():
            row[bad] = row[~bad].mean() if (~bad).any() else 0.0
    return x


def _rank_corr(h: FloatArray, p: FloatArray) -> FloatArray:
    """Spearman correlation of ``h`` (..., n) with each row of ``p`` (..., n), last axis;
    ``nan`` where either side is constant."""
    rh = stats.rankdata(h, axis=-1)
    rp = stats.rankdata(p, axis=-1)
    rh = rh - rh.mean(axis=-1, keepdims=True)
    rp = rp - rp.mean(axis=-1, keepdims=True)
    num = (rh * rp).sum(axis=-1)
    den = np.sqrt((rh * rh).sum(axis=-1) * (rp * rp).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = num / den
    return np.where(den > 0, out, np.nan)


def _group_table(human: FloatArray, preds: FloatArray, groups: Sequence[Any]) -> FloatArray:
    """Per-group Spearman of every row, (k, G): judge-constant groups (human varying) count
    0, groups with fewer than 2 items or constant humans are ``nan`` (skipped)."""
    ids = np.asarray(groups, dtype=object)
    _, inverse = np.unique(ids.astype(str), return_inverse=True)
    out = np.full((preds.shape[0], int(inverse.max()) + 1), np.nan)
    for g in range(out.shape[1]):
        idx = np.flatnonzero(inverse == g)
        if idx.size < 2 or np.ptp(human[idx]) == 0:
            continue
        values = _rank_corr(human[idx][None, :], preds[:, idx])
        out[:, g] = np.where(np.isnan(values), 0.0, values)
    return out


def column_scores(
    human: Sequence[float] | FloatArray,
    preds: FloatArray,
    groups: Sequence[Any] | None = None,
) -> FloatArray:
    """Spearman correlation of each row of ``preds`` (imputed) with ``human``: dataset level,
    or with ``groups`` the mean of per-group correlations (judge-constant groups count 0).
    A constant row scores 0."""
    h = np.asarray(human, dtype=np.float64)
    x = impute(preds)
    if groups is None:
        return np.asarray(np.nan_to_num(_rank_corr(h[None, :], x), nan=0.0), dtype=np.float64)
    table = _group_table(h, x, groups)
    with np.errstate(invalid="ignore"):
        return np.asarray(np.nan_to_num(np.nanmean(table, axis=1), nan=0.0), dtype=np.float64)


def bootstrap_scores(
    human: Sequence[float] | FloatArray,
    preds: FloatArray,
    groups: Sequence[Any] | None,
    *,
    n_resamples: int,
    rng: np.random.Generator,
) -> FloatArray:
    """Every row's score on ``n_resamples`` bootstrap resamples of the items (of whole
    groups at group level), the same resamples for every row: (n_resamples, k)."""
    h = np.asarray(human, dtype=np.float64)
    x = impute(preds)
    if groups is not None:
        table = _group_table(h, x, groups)
        g = table.shape[1]
        idx = rng.integers(0, g, size=(n_resamples, g))
        with np.errstate(invalid="ignore"):
            return np.asarray(
                np.nan_to_num(np.nanmean(table[:, idx], axis=2).T, nan=0.0), dtype=np.float64
            )
    n = h.size
    idx = rng.integers(0, n, size=(n_resamples, n))
    return np.nan_to_num(_rank_corr(h[idx][None, :, :], x[:, idx]).T, nan=0.0)


@dataclass(frozen=True)
class RuleInput:
    """What a rule sees: the validation items' human scores and every candidate's ratings.

    Attributes:
        human: Human score per item.
        preds: Ratings, (candidates, items); ``nan`` where unparsed.
        baseline: Row of the baseline judge.
        groups: Group id per item for a group-level correlation, else ``None``.
        split_groups: Group id per item for splitting (whole groups on one side), or
            ``None``; defaults to ``groups``.
        strategies: Each candidate's strategy (plain data), for rules that read factors.
        order: The candidates in the order a search evaluated them (default: row order).
        seed: Seed of the rule's own randomness (splits, bootstrap).
    """

    human: FloatArray
    preds: FloatArray
    baseline: int
    groups: Sequence[Any] | None = None
    split_groups: Sequence[Any] | None = None
    strategies: Sequence[Mapping[str, Any]] = ()
    order: Sequence[int] | None = None
    seed: int = 0
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def memo(self, key: str, compute: Callable[[], T]) -> T:
        """``compute()``, called once per input and ``key``: what several rules derive
        from the same validation data (scores, bootstrap, a rule's pick that others build
        on) is computed once."""
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]  # type: ignore[no-any-return]

    @property
    def scores(self) -> FloatArray:
        """Each candidate's validation score (computed once)."""
        return self.memo("scores", lambda: column_scores(self.human, self.preds, self.groups))

    def resampled(self, n_resamples: int) -> FloatArray:
        """Bootstrap scores (n_resamples, candidates), computed once per size."""
        return self.memo(
            f"boot{n_resamples}",
            lambda: bootstrap_scores(
                self.human,
                self.preds,
                self.groups,
                n_resamples=n_resamples,
                rng=np.random.default_rng(self.seed),
            ),
        )


@dataclass(frozen=True)
class Pick:
    """A rule's judge: one candidate, or a weighted combination of several.

    Attributes:
        members: Candidate rows.
        weights: One weight per member (on z-normalised ratings when more than one).
        center: Each member's validation mean (z-normalisation).
        scale: Each member's validation standard deviation.
        reason: Why the rule chose it.
        averaged: A combination is a weighted mean (an ensemble: a member's missing rating
            drops out and the others' weights are renormalised, as
            :class:`judgeopt.judge.JudgeEnsemble` scores); ``False`` for a linear model
            (stacking: a missing rating counts as the member's validation mean, z = 0).
    """

    members: tuple[int, ...]
    weights: tuple[float, ...] = (1.0,)
    center: tuple[float, ...] = ()
    scale: tuple[float, ...] = ()
    reason: str = ""
    averaged: bool = True

    @property
    def single(self) -> int | None:
        """The one candidate this pick is, else ``None``."""
        return self.members[0] if len(self.members) == 1 else None

    def predict(self, preds: FloatArray) -> FloatArray:
        """The pick's ratings on new items, from every candidate's ratings there
        ((candidates, items), ``nan`` where unparsed). A single candidate's ratings are
        returned as they are (``nan`` kept); an averaged combination is the weighted mean z
        of the members whose rating parsed (weights renormalised over them, ``nan`` where
        none parsed), a linear one counts a missing rating as z = 0."""
        if self.single is not None:
            return np.asarray(preds[self.single], dtype=np.float64)
        rows = np.asarray(preds[list(self.members)], dtype=np.float64)
        c = np.asarray(self.center)[:, None]
        s = np.asarray(self.scale)[:, None]
        present = ~np.isnan(rows)
        z = np.where(present, (rows - c) / s, 0.0)
        if not self.averaged:
            return np.asarray(np.asarray(self.weights) @ z, dtype=np.float64)
        w = np.asarray(self.weights, dtype=np.float64)[:, None] * present
        total = w.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(total > 0, (w * z).sum(axis=0) / total, np.nan)
        return np.asarray(out, dtype=np.float64)


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


def _single(row: int, reason: str) -> Pick:
    return Pick((int(row),), reason=reason)


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


def _sub(data: RuleInput, idx: Sequence[int]) -> tuple[FloatArray, FloatArray, list[Any] | None]:
    ix = np.asarray(idx)
    groups = None if data.groups is None else [data.groups[i] for i in idx]
    return data.human[ix], impute(data.preds[:, ix]), groups


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


def _gains(data: RuleInput, n_resamples: int) -> tuple[FloatArray, FloatArray]:
    """Every candidate's paired gain over the baseline on all items, and its bootstrap
    standard error (the baseline's own: 0, 0)."""
    gains = data.scores - data.scores[data.baseline]
    boot = data.resampled(n_resamples)
    se = (boot - boot[:, [data.baseline]]).std(axis=0, ddof=1)
    return gains, se


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
    z = float(stats.norm.ppf(1.0 - alpha / k))
    lower = gains - z * se
    lower[data.baseline] = 0.0
    i = _argmax(lower, data.baseline)
    if i == data.baseline:
        return _single(i, f"no lower bound above 0 (z={z:.2f})")
    return _single(i, f"lower bound {lower[i]:+.3f} > 0 (z={z:.2f})")


def _check_strategies(data: RuleInput, rule: str) -> None:
    """Raise unless ``data`` has one strategy per candidate row (the rules that read factor
    values, the baseline's row included)."""
    if len(data.strategies) != data.preds.shape[0]:
        raise ValueError(
            f"{rule} needs one strategy per candidate (strategies: {len(data.strategies)}, "
            f"candidates: {data.preds.shape[0]})"
        )


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


def stack_rule(data: RuleInput, *, ridge: float = 10.0) -> Pick:
    """Ridge regression of the human scores' ranks (z-normalised) on every candidate's
    z-normalised ratings; ``ridge`` is the penalty per item (a strong penalty leaves few
    effective parameters). The weights are the pick's."""
    rows = list(range(data.preds.shape[0]))
    base = _combination(data, rows, [1.0] * len(rows))
    z = (impute(data.preds) - np.asarray(base.center)[:, None]) / np.asarray(base.scale)[:, None]
    y = stats.rankdata(data.human)
    y = (y - y.mean()) / (y.std() or 1.0)
    n = y.size
    beta = np.linalg.solve(z @ z.T + ridge * n * np.eye(len(rows)), z @ y)
    return Pick(
        base.members,
        tuple(float(b) for b in beta),
        base.center,
        base.scale,
        f"stacked ridge (penalty {ridge} per item)",
        averaged=False,
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
