"""Combining several judges' ratings of the same items into one score.

One piece for the arithmetic that a prompt ensemble (:class:`judgeopt.judge.JudgeEnsemble`,
one item at a time) and a selection rule's pick (:class:`judgeopt.selection.Pick`, whole
arrays of validation or test items) must agree on: each member's rating is z-normalised with
that member's centre and scale, then combined with the members' weights.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Float64Array = npt.NDArray[np.float64]


def combine_z(
    ratings: npt.ArrayLike,
    center: Sequence[float],
    scale: Sequence[float],
    weights: Sequence[float],
    *,
    averaged: bool = True,
) -> Float64Array:
    """The weighted z of several members' ratings, item by item.

    Args:
        ratings: ``(members, items)`` ratings, ``nan`` where a member's rating did not parse.
        center: Each member's centre (its validation mean).
        scale: Each member's scale (its validation standard deviation, > 0).
        weights: Each member's weight.
        averaged: ``True`` (an ensemble): the weighted mean z of the members whose rating
            parsed, their weights renormalised over them; ``nan`` where none parsed or their
            weights sum to 0 or less. ``False`` (a linear model): ``sum(w * z)`` with a missing
            rating counted as z = 0 (the member's centre).

    Returns:
        One combined z per item.

    Raises:
        ValueError: When ``center``, ``scale`` or ``weights`` does not have one entry per
            member (a row of ``ratings``).
    """
    rows = np.atleast_2d(np.asarray(ratings, dtype=np.float64))
    n = rows.shape[0]
    for name, values in (("center", center), ("scale", scale), ("weights", weights)):
        if len(values) != n:
            raise ValueError(
                f"combine_z: {n} members (rows of `ratings`) but {len(values)} {name}."
            )
    c = np.asarray(center, dtype=np.float64)[:, None]
    s = np.asarray(scale, dtype=np.float64)[:, None]
    w = np.asarray(weights, dtype=np.float64)
    present = ~np.isnan(rows)
    z = np.where(present, (rows - c) / s, 0.0)
    if not averaged:
        return np.asarray(w @ z, dtype=np.float64)
    wp = w[:, None] * present
    total = wp.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(total > 0, (wp * z).sum(axis=0) / total, np.nan)
    return np.asarray(out, dtype=np.float64)
