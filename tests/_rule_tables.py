"""Synthetic validation tables shared by the tests of the cross-fitted guard."""

from __future__ import annotations

import math

import numpy as np

from judgeopt.selection import RuleInput


def correlated_table(n: int, rhos: list[float], seed: int = 0, groups: int = 0) -> RuleInput:
    """A baseline (row 0) and other judges whose ratings correlate ``rho`` with the humans
    (through a shared error, as judges of one model do); ``groups`` > 0 groups the items
    into that many units."""
    rng = np.random.default_rng(seed)
    h = rng.standard_normal(n)
    shared = rng.standard_normal(n)
    rows = []
    for rho in rhos:
        e = 0.7 * shared + math.sqrt(1 - 0.49) * rng.standard_normal(n)
        rows.append(rho * h + math.sqrt(1 - rho**2) * e)
    ids = [f"g{i % groups}" for i in range(n)] if groups else None
    return RuleInput(human=h, preds=np.asarray(rows), baseline=0, groups=ids, seed=seed)
