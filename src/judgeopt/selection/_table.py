"""A table of judgements: every candidate strategy judged on the same items, and its scores.

What the pooled rules (``_pooled``) and the rules that read other tasks
(``_cross_task_prior``) decide from: :class:`RuleInput` (human scores, one row of ratings per
candidate, groups, the baseline's row, a split seed, memoised scores and bootstrap
resamples), :func:`column_scores` (Spearman per row, dataset or group level) and
:func:`bootstrap_scores`; and what they decide: a :class:`Pick`, the candidate(s) and weights
that make a rule's judge, which :meth:`Pick.predict` applies to new items. Pure numpy/scipy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

# scipy ships no type information unless scipy-stubs is installed.
from ..scoring import combine_z

__all__ = [
    "Pick",
    "RuleInput",
    "bootstrap_scores",
    "column_scores",
    "impute",
    "paired_gain_resamples",
]

FloatArray = npt.NDArray[np.float64]
T = TypeVar("T")


def _scipy_stats() -> Any:
    """``scipy.stats``, imported on first use: it takes about half a second to import,
    which every ``judgeopt`` command (``--help`` included) would pay otherwise."""
    from scipy import stats  # type: ignore[import-untyped, unused-ignore]

    return stats


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
    rh = _scipy_stats().rankdata(h, axis=-1)
    rp = _scipy_stats().rankdata(p, axis=-1)
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
        return combine_z(rows, self.center, self.scale, self.weights, averaged=self.averaged)

    def score(self, data: RuleInput) -> float:
        """The pick's score on ``data``'s items (as :attr:`RuleInput.scores` scores a
        candidate: a single candidate's score is read from there)."""
        if self.single is not None:
            return float(data.scores[self.single])
        pred = self.predict(data.preds)[None, :]
        return float(column_scores(data.human, pred, data.groups)[0])


def paired_gain_resamples(
    pick: Pick, data: RuleInput, *, n_resamples: int, rng: np.random.Generator
) -> FloatArray:
    """``pick``'s gain over ``data``'s baseline on ``n_resamples`` bootstrap resamples of
    ``data``'s items (whole groups at group level), the pick and the baseline scored on the
    same resamples: the paired gain's bootstrap distribution, (n_resamples,)."""
    rows = np.vstack([pick.predict(data.preds), data.preds[data.baseline]])
    boot = bootstrap_scores(data.human, rows, data.groups, n_resamples=n_resamples, rng=rng)
    return np.asarray(boot[:, 0] - boot[:, 1], dtype=np.float64)


def _single(row: int, reason: str) -> Pick:
    return Pick((int(row),), reason=reason)


def _sub(data: RuleInput, idx: Sequence[int]) -> tuple[FloatArray, FloatArray, list[Any] | None]:
    ix = np.asarray(idx)
    groups = None if data.groups is None else [data.groups[i] for i in idx]
    return data.human[ix], impute(data.preds[:, ix]), groups


def _gains(data: RuleInput, n_resamples: int) -> tuple[FloatArray, FloatArray]:
    """Every candidate's paired gain over the baseline on all items, and its bootstrap
    standard error (the baseline's own: 0, 0)."""
    gains = data.scores - data.scores[data.baseline]
    boot = data.resampled(n_resamples)
    se = (boot - boot[:, [data.baseline]]).std(axis=0, ddof=1)
    return gains, se


def _check_strategies(data: RuleInput, rule: str) -> None:
    """Raise unless ``data`` has one strategy per candidate row (the rules that read factor
    values, the baseline's row included)."""
    if len(data.strategies) != data.preds.shape[0]:
        raise ValueError(
            f"{rule} needs one strategy per candidate (strategies: {len(data.strategies)}, "
            f"candidates: {data.preds.shape[0]})"
        )
