"""A categorical Parzen-estimator proposal (multivariate TPE, as Optuna builds it), in numpy.

Used by :class:`~judgeopt.search.AutoSearch` as the global arm of its portfolio, so the
default search needs no Optuna. The evaluated strategies are split into the best
``ceil(gamma * n)`` ("good") and the rest ("bad"); each set defines a mixture with one
product kernel per observation plus a uniform prior component, where a factor's kernel at
observed value ``o`` puts ``(1 + 1/m) / 2`` on ``o`` and ``1 / (2 m)`` on each of the other
``m - 1`` values (Optuna's categorical kernel with ``prior_weight = 1``). Candidates are drawn
from the good mixture and the one with the highest ``log l(x) - log g(x)`` is proposed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ._space import FactorSpace, Strategy

N_CANDIDATES = 24
"""Candidates drawn from the good mixture per proposal (Optuna's ``n_ei_candidates``)."""
GAMMA = 0.1
"""Share of the evaluations in the good set (Optuna's default ``gamma``: ``ceil(0.1 n)``)."""
_MAX_GOOD = 25


def _log_mixture(x: np.ndarray, obs: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """log density of each row of ``x`` under the kernel mixture of ``obs`` plus the prior.

    ``x`` and ``obs`` hold value indices, shape ``(n, d)`` and ``(k, d)``.
    """
    # Per factor: kernel mass at x given observation o.
    same = x[:, None, :] == obs[None, :, :]  # (n, k, d)
    on = (1.0 + 1.0 / sizes) / 2.0
    off = 1.0 / (2.0 * sizes)
    logk = np.where(same, np.log(on), np.log(off)).sum(axis=2)  # (n, k)
    log_prior = -np.log(sizes).sum()
    allk = np.concatenate([logk, np.full((len(x), 1), log_prior)], axis=1)
    top = allk.max(axis=1, keepdims=True)
    out: np.ndarray = top[:, 0] + np.log(np.exp(allk - top).sum(axis=1)) - math.log(allk.shape[1])
    return out


def parzen_proposal(
    space: FactorSpace,
    evaluated: Sequence[tuple[Strategy, float]],
    is_free: Callable[[Strategy], bool],
    rng: np.random.Generator,
) -> Strategy | None:
    """The unexplored strategy a multivariate TPE step proposes, or ``None``.

    Args:
        space: The factor space.
        evaluated: ``(strategy, score)`` pairs; higher is better, failures already replaced
            by a finite (worst) score.
        is_free: True for a strategy that may be proposed (unexplored and valid).
        rng: The search's generator (consumed: one batch of draws per call).

    Returns:
        The best free candidate by ``log l - log g``, or ``None`` when none of the drawn
        candidates is free (the caller falls back to its own proposal).
    """
    if not evaluated:
        return None
    sizes = np.array([len(f.values) for f in space.factors], dtype=float)
    idx = np.array([[f.index(s[f.name]) for f in space.factors] for s, _ in evaluated])
    order = np.argsort([-score for _, score in evaluated], kind="stable")
    n_good = min(max(1, math.ceil(GAMMA * len(evaluated))), _MAX_GOOD)
    good, bad = idx[order[:n_good]], idx[order[n_good:]]
    # Draw from the good mixture: a component (an observation, or the prior), then per factor
    # the observed value with probability 1/2, else a uniform value.
    d = len(space.factors)
    comp = rng.integers(n_good + 1, size=N_CANDIDATES)
    keep = rng.random((N_CANDIDATES, d)) < 0.5
    uniform = np.floor(rng.random((N_CANDIDATES, d)) * sizes).astype(int)
    observed = good[np.minimum(comp, n_good - 1)]
    cand = np.where(keep & (comp[:, None] < n_good), observed, uniform)
    score = _log_mixture(cand, good, sizes) - _log_mixture(cand, bad, sizes)
    best: Strategy | None = None
    best_score = -math.inf
    for row, sc in zip(cand, score, strict=True):
        if sc <= best_score:
            continue
        s = Strategy(
            space.names, tuple(f.values[int(j)] for f, j in zip(space.factors, row, strict=True))
        )
        if is_free(s):
            best, best_score = s, float(sc)
    return best
