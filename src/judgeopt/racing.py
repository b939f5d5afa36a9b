"""Racing: stop evaluating a candidate strategy once it cannot reach the population.

A candidate is judged on a growing prefix of one fixed, seeded and stratified order of the
validation units (items; whole groups for group-level correlation). At each checkpoint
(by default 25 %, 50 % and 75 % of the units, never fewer than ``min_items``) an upper
confidence bound on the candidate's **full-set** score is compared with the ``top``-th best
full-set score found so far; a candidate whose bound falls below it is dropped.

The bound is on the full-set value, not on a population correlation: the units already
judged are part of the full set, so the uncertainty left is that of the unjudged rest. For a
statistic that behaves like a mean over ``n`` units, the partial value on ``m`` nested units
differs from the full one with variance ``s^2 (1/m - 1/n)`` (sampling without replacement),
which is zero at ``m = n``. Here ``s^2/m`` is the usual sampling variance:

* dataset-level Spearman / Kendall / Pearson: on Fisher's z scale, ``c / (m - b)`` with
  ``(c, b) = (1.06, 3)`` for Spearman (Fieller, Hartley & Pearson 1957), ``(0.437, 4)`` for
  Kendall's tau and ``(1, 3)`` for Pearson, so ``Var = c/(m-b) - c/(n-b)``;
* group-level correlation (a mean of per-group correlations): the spread of the per-group
  values seen so far, ``sd^2 (1/m - 1/n)`` over groups;
* pairwise accuracy (a mean of 0/1): ``p(1-p) (1/m - 1/n)`` with ``p`` smoothed by one
  success and one failure, so that an all-right or all-wrong prefix still has a spread.

Everything here is a pure function of numbers (numpy only): the teleprompter feeds it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "RaceDecision",
    "RacingConfig",
    "checkpoint_sizes",
    "race_decision",
    "race_order",
    "threshold",
    "unit_keys",
    "upper_bound",
]

# Fisher-z variance constants (c, b): Var(z) ~ c / (m - b).
_FISHER = {"spearman": (1.06, 3), "kendall": (0.437, 4), "pearson": (1.0, 3)}
# Partial correlations this close to 1 get the bound 1; close to -1 they are clipped here
# before the Fisher transform, which is infinite at +-1.
_R_MAX = 0.9999


class RacingConfig(BaseModel):
    """How candidates race (``[racing]`` in an optimizer preset).

    Attributes:
        enabled: Race candidates; ``False`` judges every candidate on every item.
        checkpoints: Fractions of the validation units after which a candidate may be
            dropped (the full set is always the last checkpoint).
        min_items: No drop before this many items have been judged (for group-level
            correlation: this many items' worth of whole groups, at least 3 groups).
        confidence: One-sided level of the upper bound on the full-set score.
        top: The bound is compared with the ``top``-th best full-set score; ``None``: the
            search's population size ``k`` (HPSS, auto), else 1.
        dropped_score: What the search is told for a dropped candidate: ``estimate`` (its
            partial score) or ``bound`` (its upper bound, an optimistic value that still
            ranks below the population).
        seed: Seed of the fixed item order (independent of the search's seed).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = False
    checkpoints: tuple[float, ...] = (0.25, 0.5, 0.75)
    min_items: int = Field(20, ge=5)
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    top: int | None = Field(None, ge=1)
    dropped_score: Literal["estimate", "bound"] = "estimate"
    seed: int = Field(0, ge=0)

    @field_validator("checkpoints")
    @classmethod
    def _fractions(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if any(not 0.0 < f < 1.0 for f in v):
            raise ValueError(f"every checkpoint must be a fraction in (0, 1); got {list(v)!r}")
        return tuple(sorted(set(v)))

    @property
    def z(self) -> float:
        """The standard normal quantile of :attr:`confidence`."""
        return NormalDist().inv_cdf(self.confidence)


@dataclass(frozen=True)
class RaceDecision:
    """The outcome of :func:`race_decision` at one checkpoint.

    Attributes:
        drop: True when the candidate's bound cannot reach the threshold.
        bound: Upper confidence bound on the full-set score (``None`` without an estimate).
    """

    drop: bool
    bound: float | None


def race_order(keys: Sequence[Any], *, n_strata: int, seed: int) -> list[int]:
    """A fixed, seeded, stratified order of units, so that every prefix spans the keys.

    Units are sorted by ``key`` (the human score, a pairwise label, a group's mean score;
    ties in seeded random order) and cut into ``n_strata`` contiguous strata; the order
    then takes one unit of every stratum per round (strata in a fresh random order each
    round). A prefix of ``r * n_strata`` units holds exactly ``r`` units of each stratum.

    Args:
        keys: One sortable key per unit (all of one type).
        n_strata: Number of strata (e.g. the size of the first checkpoint).
        seed: Seed of the tie-breaking and the within-stratum order.

    Returns:
        A permutation of ``range(len(keys))``.
    """
    n = len(keys)
    if n == 0:
        return []
    rng = np.random.default_rng(seed)
    tie = rng.permutation(n)
    by_key = sorted(range(n), key=lambda i: (keys[i], tie[i]))
    strata = [list(s) for s in np.array_split(np.asarray(by_key), max(1, min(n_strata, n)))]
    for s in strata:
        rng.shuffle(s)
    order: list[int] = []
    for r in range(max(len(s) for s in strata)):
        for si in rng.permutation(len(strata)):
            if r < len(strata[si]):
                order.append(int(strata[si][r]))
    return order


def checkpoint_sizes(n_units: int, fractions: Sequence[float], min_units: int) -> list[int]:
    """Unit counts after which a candidate is checked, ending with ``n_units``.

    ``ceil(f * n_units)`` for each fraction, raised to ``min_units``; sizes that reach the
    full set are dropped (the full set is always the last checkpoint).
    """
    sizes = {max(min_units, math.ceil(f * n_units)) for f in fractions}
    return sorted(s for s in sizes if s < n_units) + [n_units]


def upper_bound(
    estimate: float,
    m: int,
    n: int,
    *,
    metric: str,
    z: float,
    level: str = "dataset",
    group_sd: float | None = None,
) -> float | None:
    """Upper confidence bound on the full-set score from a partial score on ``m`` of ``n``.

    Args:
        estimate: The score on the first ``m`` units.
        m: Units judged (items; groups at group level).
        n: Units in the full set.
        metric: ``spearman``, ``kendall``, ``pearson`` or ``accuracy``.
        z: Normal quantile of the one-sided level.
        level: ``dataset`` or ``group``.
        group_sd: Standard deviation of the per-group scores seen (group level).

    Returns:
        The bound (at most 1), or ``None`` when there is too little to bound it (group level
        without a spread, or ``m`` too small for the Fisher variance).
    """
    if m >= n:
        return float(estimate)
    fpc = 1.0 / m - 1.0 / n
    if metric == "accuracy":
        p = (estimate * m + 1.0) / (m + 2.0)
        return min(1.0, estimate + z * math.sqrt(p * (1.0 - p) * fpc))
    if level == "group":
        if group_sd is None or not math.isfinite(group_sd):
            return None
        return min(1.0, estimate + z * group_sd * math.sqrt(fpc))
    c, b = _FISHER[metric]
    if m <= b + 1:
        return None
    if estimate >= _R_MAX:
        return 1.0  # a (near-)perfect partial score can reach anything
    var = c / (m - b) - c / (n - b)
    r = max(-_R_MAX, float(estimate))
    return max(float(estimate), float(math.tanh(math.atanh(r) + z * math.sqrt(max(var, 0.0)))))


def race_decision(
    estimate: float | None,
    m: int,
    n: int,
    threshold: float | None,
    *,
    metric: str,
    z: float,
    level: str = "dataset",
    group_sd: float | None = None,
) -> RaceDecision:
    """Keep or drop a candidate at a checkpoint (a pure function of its partial score).

    A candidate is dropped when it has a partial score, fewer than all units are judged, a
    threshold exists (the population is full) and the upper bound on its full-set score is
    below the threshold. Without a partial score (too few parsed ratings) it is kept.

    Example:
        >>> race_decision(0.05, 45, 180, 0.35, metric="spearman", z=1.645).drop
        True
        >>> race_decision(0.25, 45, 180, 0.35, metric="spearman", z=1.645).drop
        False
    """
    if estimate is None or not math.isfinite(estimate):
        return RaceDecision(False, None)
    bound = upper_bound(estimate, m, n, metric=metric, z=z, level=level, group_sd=group_sd)
    drop = m < n and threshold is not None and bound is not None and bound < threshold
    return RaceDecision(drop, bound)


def threshold(scores: Sequence[float], top: int) -> float | None:
    """The ``top``-th best of the finite full-set scores, or ``None`` if there are fewer."""
    finite = sorted((s for s in scores if s is not None and math.isfinite(s)), reverse=True)
    return finite[top - 1] if len(finite) >= top else None


def unit_keys(
    humans: Sequence[Any], groups: Sequence[Hashable] | None
) -> tuple[list[Hashable], list[Any], list[list[int]]]:
    """Units of a validation set: ``(unit ids, sort keys, item indices per unit)``.

    Without ``groups`` every item is a unit keyed by its human score (or label); with
    ``groups`` a unit is a whole group keyed by its mean human score.
    """
    if groups is None:
        return (list(range(len(humans))), list(humans), [[i] for i in range(len(humans))])
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    ids = list(members)
    keys = [float(np.mean([float(humans[i]) for i in members[g]])) for g in ids]
    return ids, keys, [members[g] for g in ids]
