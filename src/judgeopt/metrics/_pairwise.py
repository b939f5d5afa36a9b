"""Pairwise metrics: accuracy of pairwise judges, pairwise agreement, tie calibration.

* :func:`pairwise_accuracy` scores a *pairwise* judge (labels ``"a"``, ``"b"``,
  ``"tie"``) against human preference labels.
* :func:`pairwise_agreement` turns *pointwise* scores into win/tie/lose outcomes
  for every pair of responses to the same query, as in AlignBench and HPSS's
  reward-hacking analysis (Section 5, Figure 5), and measures how often the judge
  and the humans agree.
* :func:`tie_calibrated_accuracy` is ``acc_eq`` with tie calibration from
  Deutsch, Foster & Freitag (2023), "Ties Matter", as used by PrExMe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from judgeopt.metrics._validation import (
    FloatArray,
    Groups,
    Scores,
    group_indices,
    validate_groups,
    validate_pair,
)

__all__ = [
    "PAIRWISE_LABELS",
    "PairwiseAgreement",
    "TieCalibration",
    "pairwise_accuracy",
    "pairwise_agreement",
    "pairwise_agreement_details",
    "tie_calibrated_accuracy",
]

PAIRWISE_LABELS: Final[tuple[str, ...]] = ("a", "b", "tie")
"""Allowed labels of a pairwise comparison: response A wins, B wins, or a tie."""


@dataclass(frozen=True)
class PairwiseAgreement:
    """Result of :func:`pairwise_agreement_details`.

    Attributes:
        value: Fraction of pairs on which human and judge outcomes agree.
        n_pairs: Number of within-group pairs compared.
        n_groups: Number of groups that contributed at least one pair.
    """

    value: float
    n_pairs: int
    n_groups: int


@dataclass(frozen=True)
class TieCalibration:
    """Result of :func:`tie_calibrated_accuracy`.

    Attributes:
        accuracy: Pairwise accuracy ``acc_eq`` at the chosen ``epsilon``.
        epsilon: Tie threshold: a pair is a judge tie when ``|diff| <= epsilon``.
            The smallest threshold reaching the maximum accuracy is returned.
        n_pairs: Number of pairs compared.
    """

    accuracy: float
    epsilon: float
    n_pairs: int


def _check_labels(values: Sequence[str], name: str) -> list[str]:
    """Return ``values`` as a list after checking every label is allowed."""
    if isinstance(values, str):
        raise ValueError(f"{name} must be a sequence of labels, not a single string")
    labels = list(values)
    for position, label in enumerate(labels):
        if label not in PAIRWISE_LABELS:
            raise ValueError(
                f"{name}[{position}] is {label!r}; allowed labels: "
                f"{', '.join(repr(x) for x in PAIRWISE_LABELS)}"
            )
    return labels


def pairwise_accuracy(
    labels: Sequence[str],
    predictions: Sequence[str],
    ignore_ties: bool = False,
) -> float:
    """Fraction of pairwise judgements equal to the human label.

    Args:
        labels: Human labels, each ``"a"``, ``"b"`` or ``"tie"``.
        predictions: Judge labels, each ``"a"``, ``"b"`` or ``"tie"``.
        ignore_ties: If True, drop the items whose *human* label is ``"tie"``
            (two-way accuracy; a judge ``"tie"`` then always counts as wrong).

    Returns:
        Accuracy in ``[0, 1]``.

    Raises:
        ValueError: If a label is not allowed (the bad value and the allowed set
            are named), the lengths differ, there are no items, or every item is
            dropped by ``ignore_ties``.
    """
    truth = _check_labels(labels, "labels")
    guess = _check_labels(predictions, "predictions")
    if len(truth) != len(guess):
        raise ValueError(
            f"lengths differ: labels has {len(truth)} items but predictions has {len(guess)}"
        )
    if not truth:
        raise ValueError("need at least 1 item, got 0")
    kept = [(t, g) for t, g in zip(truth, guess, strict=True) if not (ignore_ties and t == "tie")]
    if not kept:
        raise ValueError("every human label is 'tie', nothing is left with ignore_ties=True")
    return sum(t == g for t, g in kept) / len(kept)


def _pair_differences(
    h: FloatArray, p: FloatArray, groups: Groups | None
) -> tuple[FloatArray, FloatArray, int]:
    """Differences ``x[j] - x[i]`` (``i < j``) for all pairs, within groups if given.

    Returns:
        Human differences, predicted differences, and the number of groups that
        contributed at least one pair (1 without groups).
    """
    if groups is None:
        i, j = np.triu_indices(h.size, k=1)
        return h[j] - h[i], p[j] - p[i], 1 if h.size > 1 else 0
    ids = validate_groups(groups, h.size)
    dh_parts: list[FloatArray] = []
    dp_parts: list[FloatArray] = []
    n_groups = 0
    for idx in group_indices(ids).values():
        if idx.size < 2:
            continue
        i, j = np.triu_indices(idx.size, k=1)
        dh_parts.append(h[idx[j]] - h[idx[i]])
        dp_parts.append(p[idx[j]] - p[idx[i]])
        n_groups += 1
    if not dh_parts:
        empty = np.empty(0, dtype=np.float64)
        return empty, empty, 0
    return np.concatenate(dh_parts), np.concatenate(dp_parts), n_groups


def pairwise_agreement_details(
    human: Scores,
    predicted: Scores,
    groups: Groups,
) -> PairwiseAgreement:
    """Pairwise agreement with the number of pairs and groups.

    Within every group all pairs ``(i, j)``, ``i < j``, are turned into an outcome
    ``sign(x[j] - x[i])`` (win / tie / lose) once for the human and once for the
    judge scores; the agreement is the fraction of pairs, pooled over groups,
    whose two outcomes are equal. Ties are exact equality of scores.

    Args:
        human: Human scores, one per item.
        predicted: Judge scores, one per item.
        groups: One hashable group id per item; pairs never cross groups.

    Returns:
        A :class:`PairwiseAgreement`.

    Raises:
        ValueError: If the lengths differ, an input holds NaN/inf, ``groups`` has
            the wrong length, or no group has two or more items.
    """
    h, p = validate_pair(human, predicted, min_items=2, allow_constant=True)
    dh, dp, n_groups = _pair_differences(h, p, groups)
    if dh.size == 0:
        raise ValueError("no group has two or more items, so there are no pairs to compare")
    agree = int(np.count_nonzero(np.sign(dh) == np.sign(dp)))
    return PairwiseAgreement(value=agree / dh.size, n_pairs=int(dh.size), n_groups=n_groups)


def pairwise_agreement(human: Scores, predicted: Scores, groups: Groups) -> float:
    """Fraction of within-group pairs on which judge and humans agree (win/tie/lose).

    See :func:`pairwise_agreement_details` for the definition.

    Args:
        human: Human scores, one per item.
        predicted: Judge scores, one per item.
        groups: One hashable group id per item; pairs never cross groups.

    Returns:
        Agreement in ``[0, 1]``.

    Raises:
        ValueError: As :func:`pairwise_agreement_details`.
    """
    return pairwise_agreement_details(human, predicted, groups).value


def tie_calibrated_accuracy(
    human: Scores,
    predicted: Scores,
    groups: Groups | None = None,
) -> TieCalibration:
    """Pairwise accuracy with tie calibration (``acc_eq``, Deutsch et al. 2023).

    Over all pairs (all pairs of the dataset, or all within-group pairs when
    ``groups`` is given) the human outcome is ``sign(h[j] - h[i])`` (0 = tie);
    the judge outcome is 0 when ``|p[j] - p[i]| <= epsilon`` and the sign of the
    difference otherwise. The accuracy is the fraction of pairs whose outcomes
    are equal, so a correctly predicted tie counts as a hit. ``epsilon`` is chosen
    among 0 and every distinct ``|p[j] - p[i]|`` to maximise the accuracy (the
    smallest maximiser is returned).

    The sweep sorts the ``P`` absolute judge differences once and evaluates every
    threshold with cumulative counts, so the cost is ``O(P log P)``.

    Args:
        human: Human scores, one per item.
        predicted: Judge scores, one per item.
        groups: Optional group id per item; pairs are then formed within groups.

    Returns:
        A :class:`TieCalibration` with the accuracy, the threshold and ``P``.

    Raises:
        ValueError: If the lengths differ, an input holds NaN/inf, ``groups`` has
            the wrong length, or there is no pair to compare.
    """
    h, p = validate_pair(human, predicted, min_items=2, allow_constant=True)
    dh, dp, _ = _pair_differences(h, p, groups)
    n_pairs = int(dh.size)
    if n_pairs == 0:
        raise ValueError("no group has two or more items, so there are no pairs to compare")
    human_sign = np.sign(dh)
    gap = np.abs(dp)
    order = np.argsort(gap, kind="stable")
    gap_sorted = gap[order]
    human_tie = human_sign[order] == 0
    # A pair with |diff| > epsilon is a hit iff the judge's strict sign matches a
    # non-tied human sign; with |diff| <= epsilon it is a hit iff the human tied.
    strict_hit = (np.sign(dp[order]) == human_sign[order]) & ~human_tie
    cum_tie = np.concatenate(([0], np.cumsum(human_tie)))
    cum_strict = np.concatenate(([0], np.cumsum(strict_hit)))
    candidates = np.unique(np.concatenate(([0.0], gap_sorted)))
    n_tied = np.searchsorted(gap_sorted, candidates, side="right")
    hits = cum_tie[n_tied] + (cum_strict[-1] - cum_strict[n_tied])
    best = int(np.argmax(hits))
    return TieCalibration(
        accuracy=float(hits[best]) / n_pairs,
        epsilon=float(candidates[best]),
        n_pairs=n_pairs,
    )
