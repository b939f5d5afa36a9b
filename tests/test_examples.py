"""Tests for judgeopt.judge._examples: rescaling and stratified example selection (App. D)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from judgeopt.data import Record, load_records
from judgeopt.judge._examples import ExamplePool, rescale, select_examples


def _rec(rid: str, **scores: float) -> Record:
    return Record(id=rid, group_id=None, system_id=None, inputs={"x": rid}, scores=dict(scores))


@pytest.fixture(scope="module")
def topical(shared_data: Path) -> list[Record]:
    return load_records(shared_data / "topical_chat" / "valid.jsonl")


@pytest.fixture(scope="module")
def summeval(shared_data: Path) -> list[Record]:
    return load_records(shared_data / "summeval" / "full.jsonl")


# --------------------------------------------------------------------------- rescale


@pytest.mark.parametrize(
    ("score", "expected"),
    [
        (1.0, 1),
        (1.3333333333, 3),  # 2.5 -> 3 (half up, despite float noise)
        (4 / 3, 3),
        (1.6666666667, 4),
        (2.0, 6),  # 5.5 -> 6 (not banker's 6 by luck: see 2.6667 -> 8.5 -> 9)
        (2.3333333333, 7),
        (2.6666666667, 9),  # 8.5 -> 9, banker's rounding would give 8
        (3.0, 10),
    ],
)
def test_rescale_table_1_to_3_onto_10(score: float, expected: int) -> None:
    assert rescale(score, source_range=(1, 3), scale=10) == expected


@pytest.mark.parametrize(
    ("score", "source", "scale", "expected"),
    [
        (0.0, (0, 1), 3, 1),
        (0.5, (0, 1), 3, 2),
        (1.0, (0, 1), 3, 3),
        (0.3333333333, (0, 1), 3, 2),  # 1.67 -> 2
        (5.0, (1, 5), 5, 5),
        (3.0, (1, 5), 100, 51),  # 50.5 -> 51
        (-31.0, (-31, 0), 10, 1),
        (0.0, (-31, 0), 10, 10),
        (7.0, (1, 5), 10, 10),  # above the range: clipped
        (-2.0, (1, 5), 10, 1),  # below the range: clipped
    ],
)
def test_rescale_other_ranges_and_clipping(
    score: float, source: tuple[float, float], scale: int, expected: int
) -> None:
    assert rescale(score, source_range=source, scale=scale) == expected


@pytest.mark.parametrize(
    ("score", "source", "bounds", "expected"),
    [
        (0.0, (0, 1), (0, 1), 0),  # HPSS groundedness at scale 3 is asked on 0..1
        (0.3333333333, (0, 1), (0, 1), 0),
        (0.6666666667, (0, 1), (0, 1), 1),
        (0.5, (0, 1), (0, 1), 1),  # half up
        (3.0, (1, 5), (0, 10), 5),
        (9.0, (1, 5), (0, 10), 10),
    ],
)
def test_rescale_with_rating_min(
    score: float, source: tuple[float, float], bounds: tuple[int, int], expected: int
) -> None:
    low, high = bounds
    assert rescale(score, source_range=source, scale=high, rating_min=low) == expected


def test_rescale_is_monotone_in_range_and_hits_endpoints() -> None:
    rng = np.random.default_rng(0)
    for _ in range(500):
        low = float(rng.uniform(-100, 100))
        width = float(rng.uniform(0.01, 100))
        scale = int(rng.integers(2, 101))
        t = float(rng.uniform(0, 1))
        source = (low, low + width)
        rating = rescale(low + t * width, source_range=source, scale=scale)
        assert 1 <= rating <= scale
        assert rescale(low, source_range=source, scale=scale) == 1
        assert rescale(low + width, source_range=source, scale=scale) == scale
        later = rescale(low + min(1.0, t + 0.1) * width, source_range=source, scale=scale)
        assert later >= rating
        assert abs(rating - (1 + t * (scale - 1))) <= 0.5 + 1e-6


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"score": float("nan"), "source_range": (1, 3), "scale": 10}, "finite"),
        ({"score": 2.0, "source_range": (3, 1), "scale": 10}, "low < high"),
        ({"score": 2.0, "source_range": (1, 1), "scale": 10}, "low < high"),
        ({"score": 2.0, "source_range": (1, 3), "scale": 1}, r"scale must be above rating_min"),
        ({"score": 2.0, "source_range": (1, 3), "scale": 5.0}, "scale must be an int, got 5.0"),
        ({"score": 2.0, "source_range": (1, 3), "scale": 3, "rating_min": 3}, r"got 3\.\.3"),
        ({"score": 2.0, "source_range": (1, 3), "scale": 3, "rating_min": 0.5}, "rating_min"),
    ],
)
def test_rescale_errors(kwargs: dict[str, object], expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        rescale(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- stratified selection


def _select(pool: list[Record], **kwargs: object) -> list[tuple[Record, int]]:
    args: dict[str, object] = {
        "aspect": "naturalness",
        "n": 5,
        "scale": 10,
        "score_range": (1, 3),
        "seed": 0,
    }
    args.update(kwargs)
    return select_examples(pool, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", range(10))
def test_topical_naturalness_examples_cover_low_mid_high(topical: list[Record], seed: int) -> None:
    examples = _select(topical, seed=seed)
    scores = [r.scores["naturalness"] for r, _ in examples]
    assert len(examples) == 5
    # One example per equal-width stratum of [1, 3]: [1, 1.4), [1.4, 1.8), ..., [2.6, 3].
    strata = [min(int((s - 1.0) / 0.4 + 1e-9), 4) for s in scores]
    assert strata == [0, 1, 2, 3, 4]
    assert scores == sorted(scores)  # documented order: ascending human score
    ratings = [rating for _, rating in examples]
    assert ratings[0] <= 3 and ratings[-1] >= 9 and any(4 <= r <= 7 for r in ratings)
    assert ratings == [rescale(s, source_range=(1, 3), scale=10) for s in scores]


def test_skewed_aspect_is_spread_over_the_range(summeval: list[Record]) -> None:
    # 1306 of 1600 SummEval summaries have consistency 5.0; quantile strata would
    # return mostly 5.0. Value strata give one example per fifth of the range.
    for seed in range(5):
        examples = select_examples(
            summeval, aspect="consistency", n=5, scale=5, score_range=(1, 5), seed=seed
        )
        scores = [r.scores["consistency"] for r, _ in examples]
        assert sum(s == 5.0 for s in scores) <= 1
        assert min(scores) < 1.8 and max(scores) >= 4.2
        assert len({rating for _, rating in examples}) >= 4


def test_selection_is_deterministic_and_seed_dependent(topical: list[Record]) -> None:
    first = _select(topical, seed=7)
    assert _select(topical, seed=7) == first
    assert _select(list(reversed(topical)), seed=7) == first  # input order does not matter
    others = {tuple(r.id for r, _ in _select(topical, seed=s)) for s in range(8)}
    assert len(others) > 4


def test_more_strata_than_distinct_scores_still_gives_n_distinct_items(
    topical: list[Record],
) -> None:
    examples = _select(topical, aspect="coherence", n=10)  # only 7 distinct scores
    ids = [r.id for r, _ in examples]
    assert len(ids) == len(set(ids)) == 10
    scores = [r.scores["coherence"] for r, _ in examples]
    assert scores == sorted(scores)
    assert scores[0] == 1.0 and scores[-1] == 3.0


def test_exclusion_replaces_only_the_excluded_item_within_its_stratum(
    topical: list[Record],
) -> None:
    pool = ExamplePool(topical)
    strata = pool.strata(aspect="naturalness", n=5, seed=2)
    default = _select(topical, seed=2)
    assert [r.id for r, _ in default] == [s[0].id for s in strata]
    for k, stratum in enumerate(strata):
        judged = stratum[0].id
        examples = _select(topical, seed=2, exclude_ids={judged})
        ids = [r.id for r, _ in examples]
        assert judged not in ids
        assert len(ids) == 5
        default_ids = [r.id for r, _ in default]
        changed = [i for i, (a, b) in enumerate(zip(ids, default_ids, strict=True)) if a != b]
        assert changed == [k]
        assert ids[k] == stratum[1].id  # next in the stratum's priority order


def test_no_item_is_its_own_example_and_pool_matches_function(topical: list[Record]) -> None:
    pool = ExamplePool(topical)
    for record in topical:
        cached = pool.select(
            aspect="naturalness",
            n=5,
            scale=10,
            score_range=(1, 3),
            seed=1,
            exclude_ids=[record.id],
        )
        assert record.id not in {r.id for r, _ in cached}
        assert cached == pool.select(
            aspect="naturalness",
            n=5,
            scale=10,
            score_range=(1, 3),
            seed=1,
            exclude_ids=[record.id],
        )
    for record in topical[::30]:
        assert pool.select(
            aspect="naturalness",
            n=5,
            scale=10,
            score_range=(1, 3),
            seed=1,
            exclude_ids=[record.id],
        ) == _select(topical, seed=1, exclude_ids={record.id})


def test_pool_returns_fresh_lists(topical: list[Record]) -> None:
    pool = ExamplePool(topical)
    kwargs: dict[str, object] = {
        "aspect": "naturalness",
        "n": 3,
        "scale": 5,
        "score_range": (1, 3),
        "seed": 0,
    }
    first = pool.select(**kwargs)  # type: ignore[arg-type]
    first.clear()
    assert len(pool.select(**kwargs)) == 3  # type: ignore[arg-type]


def test_rating_min_is_forwarded_and_cached_separately(topical: list[Record]) -> None:
    pool = ExamplePool(topical)
    kwargs: dict[str, object] = {"aspect": "groundedness", "n": 4, "score_range": (0, 1), "seed": 0}
    zero_based = pool.select(scale=1, rating_min=0, **kwargs)  # type: ignore[arg-type]
    one_based = pool.select(scale=3, **kwargs)  # type: ignore[arg-type]
    assert [r.id for r, _ in zero_based] == [r.id for r, _ in one_based]
    assert [rating for _, rating in zero_based] == [
        rescale(r.scores["groundedness"], source_range=(0, 1), scale=1, rating_min=0)
        for r, _ in zero_based
    ]
    assert {rating for _, rating in zero_based} == {0, 1}
    assert {rating for _, rating in one_based} <= {1, 2, 3}
    assert zero_based == select_examples(topical, scale=1, rating_min=0, **kwargs)  # type: ignore[arg-type]


def test_emptied_stratum_borrows_from_nearest() -> None:
    pool = [_rec("a", q=1.0), _rec("b", q=1.0), _rec("c", q=1.2), _rec("top", q=5.0)]
    default = select_examples(pool, aspect="q", n=2, scale=5, score_range=(1, 5), seed=0)
    assert default[-1][0].id == "top" and default[-1][1] == 5
    examples = select_examples(
        pool, aspect="q", n=2, scale=5, score_range=(1, 5), seed=0, exclude_ids={"top", "zzz"}
    )
    assert len(examples) == 2
    assert "top" not in {r.id for r, _ in examples}
    assert {r.id for r, _ in examples} <= {"a", "b", "c"}


def test_many_exclusions_and_all_equal_scores() -> None:
    pool = [_rec(f"r{i}", q=2.0) for i in range(6)]
    examples = select_examples(pool, aspect="q", n=3, scale=3, score_range=(1, 3), seed=0)
    assert len({r.id for r, _ in examples}) == 3
    assert {rating for _, rating in examples} == {2}
    rest = select_examples(
        pool, aspect="q", n=3, scale=3, score_range=(1, 3), seed=0, exclude_ids={"r0", "r1", "r2"}
    )
    assert {r.id for r, _ in rest} == {"r3", "r4", "r5"}


def test_n_zero_and_whole_pool() -> None:
    pool = [_rec(f"r{i}", q=float(i)) for i in range(4)]
    kwargs: dict[str, object] = {"aspect": "q", "scale": 4, "score_range": (0, 3), "seed": 0}
    assert select_examples(pool, n=0, **kwargs) == []  # type: ignore[arg-type]
    everything = select_examples(pool, n=4, **kwargs)  # type: ignore[arg-type]
    assert [(r.id, rating) for r, rating in everything] == [
        ("r0", 1),
        ("r1", 2),
        ("r2", 3),
        ("r3", 4),
    ]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"n": -1}, "n must be a non-negative int"),
        ({"n": 5}, r"n=5 examples requested but the pool has only 4 records"),
        (
            {"n": 4, "exclude_ids": {"r0"}},
            r"only 3 of the pool's 4 records remain after excluding 1",
        ),
        ({"aspect": "fluency"}, r"4 pool record\(s\) have no score for aspect 'fluency'.*has: q"),
        ({"score_range": (0, 2)}, r"outside score_range \[0, 2\].*record 'r3' with 3"),
        ({"scale": 1}, "scale"),
        ({"seed": -3}, "seed"),
        ({"score_range": (2, 2)}, "low < high"),
    ],
)
def test_selection_errors(kwargs: dict[str, object], expected: str) -> None:
    pool = [_rec(f"r{i}", q=float(i)) for i in range(4)]
    args: dict[str, object] = {"aspect": "q", "n": 2, "scale": 4, "score_range": (0, 3), "seed": 0}
    args.update(kwargs)
    with pytest.raises(ValueError, match=expected):
        select_examples(pool, **args)  # type: ignore[arg-type]


def test_pool_errors() -> None:
    with pytest.raises(ValueError, match="unique; repeated: 'a'"):
        ExamplePool([_rec("a", q=1.0), _rec("a", q=2.0)])
    partial = [_rec("a", q=1.0), _rec("b")]
    with pytest.raises(ValueError, match=r"1 pool record\(s\) have no score for aspect 'q': 'b'"):
        select_examples(partial, aspect="q", n=1, scale=3, score_range=(1, 3), seed=0)
    with pytest.raises(TypeError, match="collection of ids"):
        select_examples(
            [_rec("a", q=1.0)],
            aspect="q",
            n=1,
            scale=3,
            score_range=(1, 3),
            seed=0,
            exclude_ids="a",
        )


def test_selection_properties() -> None:
    rng = np.random.default_rng(123)
    levels = np.array([1.0, 1.5, 2.0, 3.0, 4.5, 5.0])
    for _ in range(300):
        size = int(rng.integers(1, 31))
        scores = [float(v) for v in rng.choice(levels, size=size)]
        n = int(rng.integers(1, 9))
        seed = int(rng.integers(0, 2**32))
        excluded = {int(i) for i in rng.integers(0, 30, size=int(rng.integers(0, 6)))}
        _check_selection(scores, n, seed, excluded)


def _check_selection(scores: list[float], n: int, seed: int, excluded: set[int]) -> None:
    pool = [_rec(f"r{i:02d}", q=s) for i, s in enumerate(scores)]
    exclude = {f"r{i:02d}" for i in excluded}
    available = [r for r in pool if r.id not in exclude]
    kwargs: dict[str, object] = {
        "aspect": "q",
        "n": n,
        "scale": 10,
        "score_range": (1, 5),
        "seed": seed,
        "exclude_ids": exclude,
    }
    if n > len(available):
        with pytest.raises(ValueError, match="requested"):
            select_examples(pool, **kwargs)  # type: ignore[arg-type]
        return
    examples = select_examples(pool, **kwargs)  # type: ignore[arg-type]
    ids = [r.id for r, _ in examples]
    assert len(ids) == len(set(ids)) == n
    assert not set(ids) & exclude
    keys = [(r.scores["q"], r.id) for r, _ in examples]
    assert keys == sorted(keys)
    assert examples == select_examples(pool, **kwargs)  # type: ignore[arg-type]
    low, high = min(scores), max(scores)
    if n >= 2 and high > low and not exclude:
        # The first and last examples come from the lowest and highest value strata.
        width = (high - low) / n
        assert keys[0][0] < low + width + 1e-9
        assert keys[-1][0] >= high - width - 1e-9
