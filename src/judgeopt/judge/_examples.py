"""In-context examples for the judge prompt (HPSS Appendix D).

HPSS "perform[s] stratified sampling based on human ratings within the validation
dataset to obtain in-context examples, aiming to ensure an even distribution of
examples across different human ratings", and removes an example from the set when
that very item is being evaluated, "to prevent data leakage".

Procedure of :func:`select_examples` / :class:`ExamplePool` for ``n`` examples:

1. Sort the pool by ``(human score of the aspect, id)``.
2. Cut it into ``n`` contiguous strata by *value*: stratum ``k`` holds the scores in
   ``[lo + k*w, lo + (k+1)*w)`` with ``w = (hi - lo) / n`` over the pool's observed
   range ``[lo, hi]`` (the last stratum includes ``hi``). Equal-width strata spread
   the examples over the rating range even when the scores are skewed (SummEval
   consistency: 82 % of the items score 5.0; equal-count strata would give four
   examples of 5.0 out of five). A stratum left empty (too few distinct scores) is
   filled by moving the nearest cut so that every stratum is non-empty; if all
   scores are equal the strata are equal-count blocks.
3. ``rng = numpy.random.default_rng(seed)`` draws one random permutation per
   stratum, from the lowest stratum to the highest: the stratum's *priority order*.
   The default example of a stratum is the first item of its order.
4. Exclusion: a stratum whose default is excluded takes the next non-excluded item
   of its own order. A stratum with no item left borrows the next unused item of
   the nearest stratum (distance 1 below, then above, then distance 2, ...).
   Because the orders do not depend on the exclusions, excluding the judged item
   changes at most that item's slot.
5. The examples are returned in ascending order of ``(human score, id)`` (lowest
   rated first, as in the HPSS example files), each with its human score rescaled
   to the judge's ``rating_min..scale`` (default ``1..scale``) by :func:`rescale`.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final, TypeAlias

import numpy as np
import numpy.typing as npt

from judgeopt._validation import check_int
from judgeopt.data import Record

__all__ = ["Example", "ExamplePool", "rescale", "select_examples"]

Example: TypeAlias = tuple[Record, int]
"""An in-context example: the record and its human score on the judge's scale."""

_ROUND_DIGITS: Final[int] = 9
_EDGE_TOLERANCE: Final[float] = 1e-9
_MAX_REPORTED: Final[int] = 5


def rescale(
    score: float, *, source_range: tuple[float, float], scale: int, rating_min: int = 1
) -> int:
    """Map a human score linearly onto the judge's integer rating scale ``rating_min..scale``.

    ``source_range[0]`` maps to ``rating_min`` and ``source_range[1]`` to ``scale``;
    the mapped value is rounded to the nearest integer with halves rounded **up**
    (not Python's round-half-to-even), after rounding to 9 decimals so that a mean
    like ``1.3333333333`` lands on the exact half it stands for. Scores outside
    ``source_range`` are clipped to ``[rating_min, scale]``. For ``1..3 -> 1..10``:
    1 -> 1, 1.33 -> 3, 1.67 -> 4, 2 -> 6, 2.33 -> 7, 2.67 -> 9, 3 -> 10.

    Args:
        score: The human score.
        source_range: Inclusive ``(low, high)`` range of the data's scores.
        scale: Top of the judge's scale.
        rating_min: Bottom of the judge's scale (1 unless a task says otherwise,
            e.g. HPSS asks for groundedness on ``0..1``); below ``scale``.

    Returns:
        The rating, an int in ``[rating_min, scale]``.

    Raises:
        ValueError: If ``score`` is not finite, ``source_range`` is not a finite
            pair with ``low < high``, or ``scale`` / ``rating_min`` are not ints with
            ``rating_min < scale``.
    """
    low, high = _check_range(source_range)
    _check_scale(scale, rating_min)
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        raise ValueError(f"score must be a finite number, got {score!r}")
    span = scale - rating_min
    mapped = round(rating_min + (score - low) * span / (high - low), _ROUND_DIGITS)
    return min(max(math.floor(mapped + 0.5), rating_min), scale)


def select_examples(
    pool: Sequence[Record],
    *,
    aspect: str,
    n: int,
    scale: int,
    score_range: tuple[float, float],
    seed: int,
    exclude_ids: Collection[str] = (),
    rating_min: int = 1,
) -> list[Example]:
    """Pick ``n`` in-context examples stratified by human rating (HPSS App. D).

    See the module docstring for the procedure. Equivalent to
    ``ExamplePool(pool).select(...)``; use :class:`ExamplePool` when selecting
    once per judged item.

    Args:
        pool: Candidate records (ids unique), each with a score for ``aspect``.
        aspect: The aspect whose human scores stratify the pool.
        n: Number of examples (0 gives an empty list).
        scale: Top of the judge's rating scale (``rating_min..scale``).
        score_range: Inclusive ``(low, high)`` range of the human scores.
        seed: Non-negative seed for ``numpy.random.default_rng``.
        exclude_ids: Ids that must not be returned, e.g. the judged item's id.
            Ids not in the pool are ignored.
        rating_min: Bottom of the judge's rating scale (see :func:`rescale`).

    Returns:
        ``n`` pairs ``(record, rating)`` in ascending order of ``(score, id)``,
        ``rating`` being the score rescaled to ``rating_min..scale``. Deterministic for the
        same pool contents, arguments and seed.

    Raises:
        ValueError: If ``n`` is negative or exceeds the pool size after exclusion,
            a record lacks the aspect score (ids and present aspects listed), a
            score is outside ``score_range``, ids repeat, or ``scale`` / ``seed``
            / ``score_range`` are invalid.
        TypeError: If ``exclude_ids`` is a single string instead of a collection.
    """
    return ExamplePool(pool).select(
        aspect=aspect,
        n=n,
        scale=scale,
        score_range=score_range,
        seed=seed,
        exclude_ids=exclude_ids,
        rating_min=rating_min,
    )


@dataclass(frozen=True)
class _Layout:
    """Strata of one (aspect, n, seed): positions into ``records`` (sorted by score, id)."""

    records: tuple[Record, ...]
    strata: tuple[tuple[int, ...], ...]  # each in the seed's priority order

    @property
    def defaults(self) -> tuple[int, ...]:
        return tuple(stratum[0] for stratum in self.strata)

    def choose(self, excluded: Collection[str]) -> list[int]:
        """Positions of the examples given ``excluded`` ids (module docstring, step 4)."""
        defaults = self.defaults
        excluded = frozenset(excluded)
        if not any(self.records[p].id in excluded for p in defaults):
            return list(defaults)
        n = len(self.strata)
        available = sum(1 for r in self.records if r.id not in excluded)
        if available < n:
            n_out = len(self.records) - available
            raise ValueError(
                f"n={n} examples requested but only {available} of the pool's "
                f"{len(self.records)} records remain after excluding {n_out}"
            )
        chosen: list[int | None] = [
            next((p for p in stratum if self.records[p].id not in excluded), None)
            for stratum in self.strata
        ]
        used = {p for p in chosen if p is not None}
        for k in range(n):
            if chosen[k] is not None:
                continue
            for j in _nearest_first(k, n):
                pick = next(
                    (
                        p
                        for p in self.strata[j]
                        if p not in used and self.records[p].id not in excluded
                    ),
                    None,
                )
                if pick is not None:
                    chosen[k] = pick
                    used.add(pick)
                    break
        return sorted(p for p in chosen if p is not None)


class ExamplePool:
    """A candidate pool that caches example selections for repeated judging.

    The judge asks for examples once per judged item, excluding that item. The
    pool sorts and stratifies the candidates once per ``(aspect, n, seed)`` and
    caches the default selection per ``(aspect, n, scale, rating_min, score_range,
    seed)``:

    * if none of the default examples is excluded, the cached default is returned
      (``O(n)``, a fresh list);
    * if ``exclude_ids`` is a single id that is one of the defaults (the judged item
      is itself a default example), only that example is replaced, by the next item
      in its stratum's fixed random order; the result is cached per id, so judging
      every item of the pool costs at most one small computation per default item;
    * any other exclusion is computed in ``O(len(pool))`` without caching.

    Results equal :func:`select_examples` with the same arguments.

    Args:
        pool: Candidate records; ids must be unique.

    Raises:
        ValueError: If ids repeat.
    """

    def __init__(self, pool: Sequence[Record]) -> None:
        self._records: tuple[Record, ...] = tuple(pool)
        seen: set[str] = set()
        duplicates: list[str] = []
        for record in self._records:
            if record.id in seen:
                duplicates.append(record.id)
            seen.add(record.id)
        if duplicates:
            raise ValueError(f"pool ids must be unique; repeated: {_preview(duplicates)}")
        self._layouts: dict[tuple[str, int, int], _Layout] = {}
        self._defaults: dict[
            tuple[str, int, int, int, tuple[float, float], int], list[Example]
        ] = {}
        self._replaced: dict[
            tuple[str, int, int, int, tuple[float, float], int, str], list[Example]
        ] = {}
        self._range_checked: set[tuple[str, tuple[float, float]]] = set()

    def __len__(self) -> int:
        return len(self._records)

    @property
    def records(self) -> tuple[Record, ...]:
        """The candidate records, in the order given."""
        return self._records

    def strata(self, *, aspect: str, n: int, seed: int) -> list[list[Record]]:
        """The ``n`` strata, lowest scores first, each in the seed's priority order.

        Args:
            aspect: Aspect whose scores stratify the pool.
            n: Number of strata (= examples), at least 1.
            seed: Non-negative random seed.

        Returns:
            One list of records per stratum; the first record of each is its
            default example.

        Raises:
            ValueError: As for :meth:`select`.
        """
        _check_count(n)
        check_int(seed, "seed", min_value=0, owner="ExamplePool")
        if n == 0:
            raise ValueError("n must be at least 1 to form strata")
        layout = self._layout(aspect, n, seed)
        return [[layout.records[p] for p in stratum] for stratum in layout.strata]

    def select(
        self,
        *,
        aspect: str,
        n: int,
        scale: int,
        score_range: tuple[float, float],
        seed: int,
        exclude_ids: Collection[str] = (),
        rating_min: int = 1,
    ) -> list[Example]:
        """Pick ``n`` examples; same contract as :func:`select_examples`.

        Args:
            aspect: The aspect whose human scores stratify the pool.
            n: Number of examples (0 gives an empty list).
            scale: Top of the judge's rating scale (``rating_min..scale``).
            score_range: Inclusive ``(low, high)`` range of the human scores.
            seed: Non-negative seed for ``numpy.random.default_rng``.
            exclude_ids: Ids that must not be returned.
            rating_min: Bottom of the judge's rating scale (see :func:`rescale`).

        Returns:
            ``n`` pairs ``(record, rating)`` in ascending order of ``(score, id)``.

        Raises:
            ValueError: See :func:`select_examples`.
            TypeError: If ``exclude_ids`` is a single string.
        """
        _check_count(n)
        _check_scale(scale, rating_min)
        check_int(seed, "seed", min_value=0, owner="ExamplePool")
        low, high = _check_range(score_range)
        if isinstance(exclude_ids, str):
            raise TypeError(
                f"exclude_ids must be a collection of ids, not the string {exclude_ids!r}"
            )
        if n == 0:
            return []
        layout = self._layout(aspect, n, seed)
        self._check_scores_in_range(aspect, (low, high))
        key = (aspect, n, scale, rating_min, (low, high), seed)
        defaults = self._defaults.get(key)
        if defaults is None:
            defaults = self._examples(
                layout, layout.defaults, aspect, (rating_min, scale), (low, high)
            )
            self._defaults[key] = defaults
        if not any(record.id in exclude_ids for record, _ in defaults):
            return list(defaults)
        if len(exclude_ids) == 1:
            (excluded_id,) = tuple(exclude_ids)
            cached = self._replaced.get((*key, excluded_id))
            if cached is None:
                positions = layout.choose(exclude_ids)
                cached = self._examples(layout, positions, aspect, (rating_min, scale), (low, high))
                self._replaced[(*key, excluded_id)] = cached
            return list(cached)
        positions = layout.choose(exclude_ids)
        return self._examples(layout, positions, aspect, (rating_min, scale), (low, high))

    def _examples(
        self,
        layout: _Layout,
        positions: Sequence[int],
        aspect: str,
        bounds: tuple[int, int],
        score_range: tuple[float, float],
    ) -> list[Example]:
        rating_min, scale = bounds
        return [
            (
                record,
                rescale(
                    record.scores[aspect],
                    source_range=score_range,
                    scale=scale,
                    rating_min=rating_min,
                ),
            )
            for record in (layout.records[p] for p in positions)
        ]

    def _layout(self, aspect: str, n: int, seed: int) -> _Layout:
        key = (aspect, n, seed)
        layout = self._layouts.get(key)
        if layout is None:
            layout = _build_layout(self._records, aspect, n, seed)
            self._layouts[key] = layout
        return layout

    def _check_scores_in_range(self, aspect: str, score_range: tuple[float, float]) -> None:
        if (aspect, score_range) in self._range_checked:
            return
        low, high = score_range
        outside = [r for r in self._records if not low <= r.scores[aspect] <= high]
        if outside:
            first = outside[0]
            raise ValueError(
                f"{len(outside)} pool record(s) have a {aspect!r} score outside "
                f"score_range [{low:g}, {high:g}], e.g. record {first.id!r} with "
                f"{first.scores[aspect]:g}; pass the data's real range"
            )
        self._range_checked.add((aspect, score_range))


def _build_layout(records: Sequence[Record], aspect: str, n: int, seed: int) -> _Layout:
    missing = [r for r in records if aspect not in r.scores]
    if missing:
        present = ", ".join(sorted(missing[0].scores)) or "no scores"
        raise ValueError(
            f"{len(missing)} pool record(s) have no score for aspect {aspect!r}: "
            f"{_preview([r.id for r in missing])} (record {missing[0].id!r} has: {present})"
        )
    if n > len(records):
        raise ValueError(f"n={n} examples requested but the pool has only {len(records)} records")
    ordered = tuple(sorted(records, key=lambda r: (r.scores[aspect], r.id)))
    scores = np.array([r.scores[aspect] for r in ordered], dtype=np.float64)
    cuts = _stratum_cuts(scores, n)
    rng = np.random.default_rng(seed)
    strata = tuple(
        tuple(int(cuts[k] + i) for i in rng.permutation(int(cuts[k + 1] - cuts[k])))
        for k in range(n)
    )
    return _Layout(records=ordered, strata=strata)


def _stratum_cuts(scores: npt.NDArray[np.float64], n: int) -> list[int]:
    """Cut positions ``c_0 = 0 < c_1 < ... < c_n = m`` of sorted ``scores`` (step 2)."""
    m = len(scores)
    low, high = float(scores[0]), float(scores[-1])
    if high > low:
        bins = np.floor((scores - low) / (high - low) * n + _EDGE_TOLERANCE).astype(np.int64)
        bins = np.minimum(bins, n - 1)
        cuts = [0, *(int(np.count_nonzero(bins < k)) for k in range(1, n)), m]
    else:
        cuts = [k * m // n for k in range(n + 1)]
    for k in range(1, n):  # forward: every stratum below k non-empty
        cuts[k] = max(cuts[k], cuts[k - 1] + 1)
    for k in range(n - 1, 0, -1):  # backward: every stratum from k up non-empty
        cuts[k] = min(cuts[k], cuts[k + 1] - 1)
    return cuts


def _nearest_first(k: int, n: int) -> list[int]:
    order: list[int] = []
    for distance in range(1, n):
        for j in (k - distance, k + distance):
            if 0 <= j < n:
                order.append(j)
    return order


def _check_range(value: tuple[float, float]) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"score range must be a (low, high) pair of numbers, got {value!r}"
        ) from exc
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ValueError(f"score range must be finite with low < high, got {value!r}")
    return low, high


def _check_scale(scale: int, rating_min: int) -> None:
    for name, value in (("scale", scale), ("rating_min", rating_min)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an int, got {value!r}")
    if rating_min >= scale:
        raise ValueError(f"scale must be above rating_min, got {rating_min}..{scale}")


def _check_count(n: int) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")


def _preview(ids: Sequence[str]) -> str:
    shown = ", ".join(repr(i) for i in ids[:_MAX_REPORTED])
    more = len(ids) - _MAX_REPORTED
    return f"{shown}, ... ({more} more)" if more > 0 else shown
