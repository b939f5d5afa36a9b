"""Synthetic judges and validation tables shared by the selection rules' tests."""

from __future__ import annotations

import math

import numpy as np

from judgeopt.selection import RuleInput


def correlated_judges(
    n: int, rhos: list[float], seed: int = 0
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Human scores and one judge's ratings per ``rho``, each correlating ``rho`` with the
    humans (through a shared error, as judges of one model do)."""
    rng = np.random.default_rng(seed)
    h = rng.standard_normal(n)
    shared = rng.standard_normal(n)
    rows = []
    for rho in rhos:
        e = 0.7 * shared + math.sqrt(1 - 0.49) * rng.standard_normal(n)
        rows.append(rho * h + math.sqrt(1 - rho**2) * e)
    return h, rows


def correlated_table(n: int, rhos: list[float], seed: int = 0, groups: int = 0) -> RuleInput:
    """:func:`correlated_judges` as a rule's input, the first judge the baseline (row 0);
    ``groups`` > 0 groups the items into that many units."""
    h, rows = correlated_judges(n, rhos, seed)
    ids = [f"g{i % groups}" for i in range(n)] if groups else None
    return RuleInput(human=h, preds=np.asarray(rows), baseline=0, groups=ids, seed=seed)
