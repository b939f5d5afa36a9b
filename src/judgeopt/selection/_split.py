"""The seeded, stratified split of a scoring set into a search part and a confirmation part."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..metrics import Groups
from ..racing import unit_keys


def confirmation_split(
    humans: Sequence[Any] | np.ndarray,
    groups: Groups | None,
    *,
    fraction: float,
    seed: int,
) -> tuple[list[int], list[int]]:
    """Seeded split of a scoring set into (search indices, confirmation indices).

    Units are items, or whole groups when ``groups`` is given (a group never straddles the
    split). Units are sorted by their human score (a group's mean; pairwise labels sort as
    text), ties in seeded random order, and taken by systematic sampling with a random
    offset: every run of ``1 / fraction`` consecutive units gives one to the confirmation
    part, so both parts cover the score range.

    Args:
        humans: Human score (or pairwise label) per item.
        groups: Group id per item, or ``None``.
        fraction: Share of the units for confirmation, in (0, 1).
        seed: Seed of the tie-breaking and the offset.

    Returns:
        Item indices of the search part and of the confirmation part, each in input order.

    Raises:
        ValueError: When ``fraction`` is outside (0, 1) or either part would be empty.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"`fraction` must be in (0, 1). Got {fraction!r} instead.")
    rng = np.random.default_rng(seed)
    members, order = _ranked_units(humans, groups, rng)
    n = len(members)
    offset = float(rng.random())
    confirm_units = {
        u
        for rank, u in enumerate(order)
        if math.floor((rank + 1) * fraction + offset) - math.floor(rank * fraction + offset) == 1
    }
    if not confirm_units or len(confirm_units) == n:
        raise ValueError(
            f"a confirmation split of {n} units at fraction {fraction} leaves a "
            "part empty; give more items or another fraction"
        )
    search = sorted(i for u in range(n) if u not in confirm_units for i in members[u])
    confirm = sorted(i for u in confirm_units for i in members[u])
    return search, confirm


def blocked_split(
    humans: Sequence[Any] | np.ndarray,
    groups: Groups | None,
    *,
    fraction: float,
    seed: int,
) -> tuple[list[int], list[int]]:
    """A seeded, stratified random split, one of many: the units (items, or whole groups),
    sorted by their human score with ties in seeded random order, are cut into consecutive
    blocks of ``round(1 / fraction)``, and one unit of each block, drawn at random, goes to
    the second part (of a last, shorter block: with its share's probability).

    :func:`confirmation_split` takes every ``1 / fraction``-th unit from a random offset: on
    scores without ties there are only ``1 / fraction`` such splits (two halves, swapped),
    so reseeding it cannot give a second halving. Blocks drawn independently give
    ``2 ** (n / 2)`` halvings, each as stratified as the systematic one.

    Returns:
        Item indices of the first and the second part, each in input order.

    Raises:
        ValueError: When ``fraction`` is outside (0, 1) or either part would be empty.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"`fraction` must be in (0, 1). Got {fraction!r} instead.")
    rng = np.random.default_rng(seed)
    members, order = _ranked_units(humans, groups, rng)
    n = len(members)
    size = max(2, round(1.0 / fraction))
    second: set[int] = set()
    for start in range(0, n, size):
        block = order[start : start + size]
        if len(block) == size or rng.random() < len(block) / size:
            second.add(block[int(rng.integers(len(block)))])
    if not second or len(second) == n:
        raise ValueError(
            f"a split of {n} units at fraction {fraction} leaves a part empty; give more "
            "items or another fraction"
        )
    first = sorted(i for u in range(n) if u not in second for i in members[u])
    return first, sorted(i for u in second for i in members[u])


def _ranked_units(
    humans: Sequence[Any] | np.ndarray, groups: Groups | None, rng: np.random.Generator
) -> tuple[list[list[int]], list[int]]:
    """The units (items, or whole groups) with their item indices, and the units in order
    of their human score (a group's mean; pairwise labels sort as text), ties in ``rng``'s
    random order."""
    _, keys, members = unit_keys(list(humans), None if groups is None else list(groups))
    tie = rng.permutation(len(members))
    numeric = all(isinstance(k, (int, float)) for k in keys)
    order = sorted(
        range(len(members)),
        key=lambda u: ((float(keys[u]) if numeric else str(keys[u])), int(tie[u])),
    )
    return members, order
