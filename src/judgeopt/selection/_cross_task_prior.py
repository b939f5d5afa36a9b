"""What other tasks say: a prior default strategy, and a prior on every strategy's gain.

A strategy is named across tasks by its *change* from the task's baseline
(:func:`change_from`): each task has its own baseline (its criteria, its scale), so "scale 10
without explanation" is the same change on SummEval and on Topical-Chat even though the two
strategies differ.

* :func:`prior_rule` returns one change chosen elsewhere (the *prior default*), without
  looking at the labels or unless they refute it.
* :func:`posterior_rule` weighs every candidate's paired gain on the labels against what the
  other tasks measured for the same change (:class:`GainPrior`): the posterior mean of a
  normal prior and a normal likelihood, the best posterior gain wins when above a margin. With
  few labels it follows the other tasks, with many it follows the labels; it is the
  hierarchical (empirical-Bayes) form of "the prior default, unless the labels refute it".

Pure numpy, like the rest of the package.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._rules import veto
from ._table import Pick, RuleInput, _check_strategies, _gains, _single, _sub

__all__ = ["GainPrior", "change_from", "change_key", "posterior_rule", "prior_rule"]


def change_from(strategy: Mapping[str, Any], baseline: Mapping[str, Any]) -> dict[str, Any]:
    """The factor values of ``strategy`` that differ from ``baseline``'s: how a strategy is
    named across tasks, whose baselines differ ({} is the baseline itself)."""
    return {k: v for k, v in sorted(strategy.items()) if baseline.get(k) != v}


def change_key(change: Mapping[str, Any]) -> str:
    """A change's key in a :class:`GainPrior`: its sorted JSON."""
    return json.dumps(dict(change), sort_keys=True)


def prior_rule(
    data: RuleInput,
    *,
    strategy: Mapping[str, Any] | None,
    veto_confidence: float | None = None,
    items: Sequence[int] | None = None,
    n_resamples: int = 500,
) -> Pick:
    """A strategy chosen without these labels (on other tasks), given as its change from
    the baseline (:func:`change_from`), if such a candidate is here; else the baseline.

    With ``veto_confidence`` the labels may refute it: the baseline is kept when the
    one-sided upper bound at that level of the prior's paired gain over the baseline on
    ``items`` (default: all) is below 0, or when that gain is undefined (the compile's
    ``prior_veto``)."""
    if strategy is None or not data.strategies:
        return _single(data.baseline, "no prior default: the baseline")
    base = data.strategies[data.baseline]
    row = next(
        (i for i, s in enumerate(data.strategies) if change_from(s, base) == dict(strategy)),
        None,
    )
    if row is None:
        return _single(data.baseline, "the prior default is not a candidate: the baseline")
    if veto_confidence is None or row == data.baseline:
        return _single(row, f"the prior default {dict(strategy)}")
    idx = list(range(data.human.size)) if items is None else [int(i) for i in items]
    h, x, g = _sub(data, idx)
    try:
        res = veto(
            h,
            x[data.baseline],
            x[row],
            key="prior",
            method="spearman",
            groups=g,
            confidence=veto_confidence,
            n_resamples=n_resamples,
            seed=data.seed,
        )
    except ValueError as e:
        return _single(data.baseline, f"the prior default cannot be compared ({e})")
    if res.chosen is None:
        return _single(data.baseline, "the prior default was vetoed by the labels")
    return _single(row, f"the prior default {dict(strategy)} (not vetoed)")


@dataclass(frozen=True)
class GainPrior:
    """Other tasks' gains over their baselines, per change: a normal prior on a new task's.

    Attributes:
        means: Mean gain per change key (:func:`change_key`) over the tasks that hold it.
        counts: How many tasks hold each change.
        sd_task: The spread of one change's gain from task to task (pooled over the changes
            that two or more tasks hold); the prior's standard deviation for a change held by
            ``n`` tasks is ``sd_task * sqrt(1 + 1/n)``.
        sd_unseen: The prior's standard deviation for a change no task holds (its mean is 0):
            the root mean square of every task's gains.
    """

    means: Mapping[str, float]
    counts: Mapping[str, int]
    sd_task: float
    sd_unseen: float

    @classmethod
    def from_gains(cls, tasks: Sequence[Mapping[str, float]]) -> GainPrior:
        """The prior from each task's gain per change key (the baseline's ``{}`` is left
        out: its gain is 0 by definition).

        Raises:
            ValueError: Without any task, or with no change but the baseline.
        """
        per: dict[str, list[float]] = {}
        for t in tasks:
            for k, g in t.items():
                if k != change_key({}) and math.isfinite(g):
                    per.setdefault(k, []).append(float(g))
        if not per:
            raise ValueError("GainPrior.from_gains needs at least one task with a change")
        every = np.concatenate([np.asarray(v) for v in per.values()])
        sd_unseen = float(np.sqrt(np.mean(every**2)))
        ss = sum(float(np.sum((np.asarray(v) - np.mean(v)) ** 2)) for v in per.values())
        dof = sum(len(v) - 1 for v in per.values())
        sd_task = math.sqrt(ss / dof) if dof > 0 else sd_unseen
        return cls(
            means={k: float(np.mean(v)) for k, v in sorted(per.items())},
            counts={k: len(v) for k, v in sorted(per.items())},
            sd_task=sd_task,
            sd_unseen=sd_unseen,
        )

    def of(self, change: Mapping[str, Any]) -> tuple[float, float]:
        """``(mean, sd)`` of the prior on ``change``'s gain (``(0, 0)`` for the baseline)."""
        key = change_key(change)
        if key == change_key({}):
            return 0.0, 0.0
        if key not in self.means:
            return 0.0, self.sd_unseen
        return self.means[key], self.sd_task * math.sqrt(1.0 + 1.0 / self.counts[key])


def posterior_rule(
    data: RuleInput,
    *,
    prior: GainPrior | None,
    margin: float = 0.0,
    n_resamples: int = 200,
) -> Pick:
    """Each candidate's gain over the baseline on the labels (``g``, bootstrap standard
    error ``se``) combined with ``prior.of(its change)`` (``m``, ``sd``): the posterior
    mean ``(m / sd^2 + g / se^2) / (1 / sd^2 + 1 / se^2)``; the best posterior gain wins
    when above ``margin``, else the baseline. Without a prior: the baseline."""
    if prior is None or not data.strategies:
        return _single(data.baseline, "no gain prior: the baseline")
    _check_strategies(data, "posterior_rule")
    gains, se = _gains(data, n_resamples)
    base = data.strategies[data.baseline]
    post = np.zeros_like(gains)
    means = np.zeros_like(gains)
    for i, s in enumerate(data.strategies):
        if i == data.baseline:
            continue
        m, sd = prior.of(change_from(s, base))
        means[i] = m
        if sd <= 0.0 or not math.isfinite(gains[i]):
            post[i] = m
        elif se[i] <= 0.0:
            post[i] = gains[i]
        else:
            w_prior, w_data = 1.0 / sd**2, 1.0 / se[i] ** 2
            post[i] = (m * w_prior + gains[i] * w_data) / (w_prior + w_data)
    post[data.baseline] = 0.0
    i = int(np.argmax(post))
    if i == data.baseline or post[i] <= margin:
        return _single(data.baseline, f"no posterior gain above {margin:+.3f}")
    return _single(
        i, f"posterior gain {post[i]:+.3f} (labels {gains[i]:+.3f}, other tasks {means[i]:+.3f})"
    )
