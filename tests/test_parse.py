"""Rating and pairwise-verdict extraction (judgeopt.scoring, re-exported by judge)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest

from judgeopt.scoring import (
    PREFERENCE_RULES,
    RATING_RULES,
    PreferenceParse,
    RatingParse,
    parse_preference,
    parse_rating,
)

DOCS = Path(__file__).resolve().parents[1] / "docs" / "parsing.md"

# A realistic prefix-CoT answer to the MT-Bench style prompt (HPSS Table 11).
COT_OUTPUT = """The summary captures the main event (the $2.6 million ruling) but omits the
judge's reasoning. It mentions 3 of the 5 key facts, and sentence 2 repeats sentence 1.
Compared with a perfect 10, I would deduct 2 points for omissions and 1 for redundancy.

Rating: [[7]]"""

# The model echoes the format example of the prompt before answering.
ECHO_OUTPUT = (
    'You asked me to answer by strictly following this format: "[[rating]]", for example: '
    '"Rating: [[10]]".\n\nThe response is fluent but generic.\n\nRating: [[6]]'
)

# Suffix CoT: the rating first, then an explanation that contains other numbers.
SUFFIX_OUTPUT = "Rating: [[4]]\n\nExplanation: of the 12 claims, 9 are unsupported (see 1. and 2.)."


@pytest.mark.parametrize(
    ("text", "scale", "score", "method"),
    [
        ("[[8]]", 10, 8.0, "double_brackets"),
        ("Rating: [[ 8 ]]", 10, 8.0, "double_brackets"),
        ("[[7.5]]", 10, 7.5, "double_brackets"),
        ("[[ 3 / 5 ]]", 5, 3.0, "double_brackets"),
        (COT_OUTPUT, 10, 7.0, "double_brackets"),
        (ECHO_OUTPUT, 10, 6.0, "double_brackets"),
        (SUFFIX_OUTPUT, 5, 4.0, "double_brackets"),
        (
            "First I thought [[3]], but on reflection the final rating is [[4]].",
            5,
            4.0,
            "double_brackets",
        ),
        ("**Rating: [[9]]**", 10, 9.0, "double_brackets"),
        ("Rating: 8", 10, 8.0, "labelled"),
        ("Rating: **8**", 10, 8.0, "labelled"),
        ("**Final rating:** 2", 3, 2.0, "labelled"),
        ("I would give this response a rating of 4.", 5, 4.0, "labelled"),
        ("Score = 45", 50, 45.0, "labelled"),
        ("My rating is 7/10 because of 2 errors.", 10, 7.0, "labelled"),
        ("Score: 4 out of 5", 5, 4.0, "labelled"),
        ("Rating (1 to 10), my rating: 6", 10, 6.0, "labelled"),
        ("It covers 3/4 of the facts. Overall: 8/10.", 10, 8.0, "fraction"),
        ("Solid work, 7 out of 10", 10, 7.0, "fraction"),
        ("8", 10, 8.0, "lone_number"),
        ("  8.0\n", 10, 8.0, "lone_number"),
        ("**8**", 10, 8.0, "lone_number"),
        ("`3`.", 3, 3.0, "lone_number"),
        ("(2)", 3, 2.0, "lone_number"),
        ("100", 100, 100.0, "lone_number"),
    ],
)
def test_rating_successes(text: str, scale: int, score: float, method: str) -> None:
    result = parse_rating(text, scale=scale)
    assert result == RatingParse(score, method, None, result.matched)
    assert result.ok and result.matched


@pytest.mark.parametrize(
    ("text", "scale", "method", "error"),
    [
        ("[[12]]", 10, "double_brackets", "rating 12 outside 1..10"),
        ("Rating: [[0]]", 10, "double_brackets", "rating 0 outside 1..10"),
        ("[[3.5]]", 3, "double_brackets", "rating 3.5 outside 1..3"),
        ("[[8]] then [[80]]", 10, "double_brackets", "rating 80 outside 1..10"),
        ("[[4/5]]", 10, "double_brackets", "rating 4/5 is not on the 1..10 scale"),
        ("Rating: -1", 10, "labelled", "rating -1 outside 1..10"),
        ("Score: 4 out of 5", 10, "labelled", "rating 4/5 is not on the 1..10 scale"),
        ("15", 10, "lone_number", "rating 15 outside 1..10"),
        ("The response is good.", 10, "none", "no rating found"),
        ('Answer in the format "[[rating]]".', 10, "none", "no rating found"),
        ("It has 3 errors and 2 omissions.", 10, "none", "no rating found"),
        ("On 12/10/2023 the game ended 3-1.", 10, "none", "no rating found"),
        ("score of 1 to 10", 10, "none", "no rating found"),
        ("", 10, "none", "empty output"),
        ("   \n", 10, "none", "empty output"),
        (None, 10, "none", "empty output"),
    ],
)
def test_rating_failures(text: str | None, scale: int, method: str, error: str) -> None:
    result = parse_rating(text, scale=scale)
    assert result.score is None and not result.ok
    assert (result.method, result.error) == (method, error)


def test_out_of_range_is_not_rescued_by_a_later_rule() -> None:
    # The brackets decide; the in-range "7/10" of the explanation is not used.
    result = parse_rating("I'd say 7/10, so [[70]]", scale=10)
    assert result.error == "rating 70 outside 1..10"


def test_rating_scale_is_validated() -> None:
    for scale in (1, 0, 2.5, True):
        with pytest.raises(ValueError, match="scale"):
            parse_rating("[[1]]", scale=scale)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"scale must be above rating_min, got 5\.\.5"):
        parse_rating("[[1]]", scale=5, rating_min=5)
    with pytest.raises(ValueError, match="rating_min must be an int"):
        parse_rating("[[1]]", scale=5, rating_min=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "score", "error"),
    [
        ("Rating: [[0]]", 0.0, None),
        ("[[1]]", 1.0, None),
        ("0", 0.0, None),
        ("[[2]]", None, "rating 2 outside 0..1"),
        ("Rating: [[-1]]", None, "rating -1 outside 0..1"),
        ("[[1/3]]", None, "rating 1/3 is not on the 0..1 scale"),
    ],
)
def test_rating_with_rating_min_zero(text: str, score: float | None, error: str | None) -> None:
    # HPSS asks for Topical-Chat groundedness on 0..1 when the scale factor is 3.
    result = parse_rating(text, scale=1, rating_min=0)
    assert (result.score, result.error) == (score, error)


@pytest.mark.parametrize(
    ("text", "choice", "method"),
    [
        ("[[A]]", "a", "double_brackets"),
        ("[[B]]", "b", "double_brackets"),
        ("[[C]]", "tie", "double_brackets"),
        ("[[ tie ]]", "tie", "double_brackets"),
        (
            "Assistant A is more detailed, so [[B]] is wrong... final verdict: [[A]]",
            "a",
            "double_brackets",
        ),
        ('My final verdict is "[[B]]" because Assistant A made 2 errors.', "b", "double_brackets"),
        ("Output (a)", "a", "exact"),
        ("**Output (b)**", "b", "exact"),
        ("B", "b", "exact"),
        ("tie.", "tie", "exact"),
        ("Assistant A", "a", "exact"),
        ("After weighing both, Assistant A is better.", "a", "statement"),
        ("Output (a) is clearly better than Output (b).", "a", "statement"),
        ("Output (a) is fine, but Output (b) is the better one.", "b", "statement"),
        ("Overall I prefer Response B.", "b", "statement"),
        ("Both responses are equally good.", "tie", "statement"),
        ("It's a tie.", "tie", "statement"),
        ("Output (b)\n\nOutput (a) ignores the word limit.", "b", "leading_label"),
        ("Output (a): it follows the instruction exactly.", "a", "leading_label"),
    ],
)
def test_preference_successes(text: str, choice: str, method: str) -> None:
    result = parse_preference(text)
    assert (result.choice, result.method, result.error) == (choice, method, None)
    assert result.ok


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("Both have merits and drawbacks.", "no verdict found"),
        ("a response a user would want", "no verdict found"),
        ("[[D]]", "no verdict found"),
        ("", "empty output"),
        (None, "empty output"),
    ],
)
def test_preference_failures(text: str | None, error: str) -> None:
    assert parse_preference(text) == PreferenceParse(None, "none", error)


# ---------------------------------------------------------------------- properties


# Fragments that real judge outputs are made of, plus noise characters.
_PIECES = [
    "[[",
    "]]",
    "[",
    "]",
    "(",
    ")",
    "Rating",
    "rating:",
    "Score",
    " of ",
    " is ",
    "/",
    " out of ",
    "**",
    "_",
    "`",
    "\n",
    " ",
    ".",
    "-",
    "to",
    "Output (a)",
    "Assistant B",
    "[[C]]",
    "tie",
    "better",
    "prefer",
    "0",
    "1",
    "3",
    "7.5",
    "10",
    "12",
    "100",
    "-1",
    "é",
    "😀",
    "\t",
    "：",
]


def _random_texts(seed: int, count: int, max_pieces: int = 25) -> list[str]:
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(count):
        picks = rng.integers(0, len(_PIECES), size=int(rng.integers(0, max_pieces)))
        texts.append("".join(_PIECES[int(i)] for i in picks))
    return texts


def test_never_raises_and_scores_are_in_range() -> None:
    names = {rule.name for rule in RATING_RULES} | {"none"}
    for i, text in enumerate(_random_texts(seed=0, count=3000)):
        scale = (3, 5, 10, 50, 100)[i % 5]
        result = parse_rating(text, scale=scale)
        assert (result.score is None) == (result.error is not None), text
        if result.score is not None:
            assert 1 <= result.score <= scale, text
        assert result.method in names
        verdict = parse_preference(text)
        assert (verdict.choice is None) == (verdict.error is not None), text


def test_last_double_bracket_wins_over_any_explanation() -> None:
    rng = np.random.default_rng(1)
    explanations = [t.replace("[", "").replace("]", "") for t in _random_texts(seed=2, count=400)]
    for i in range(0, len(explanations), 2):
        value = int(rng.integers(1, 101))
        spaces = " " * int(rng.integers(0, 3))
        text = f"{explanations[i]}Rating: [[{spaces}{value}{spaces}]]{explanations[i + 1]}"
        result = parse_rating(text, scale=100)
        assert (result.score, result.method) == (float(value), "double_brackets"), text
        assert parse_rating(f"[[{101 - value}]] {text}", scale=100).score == float(value)


def test_last_verdict_wins() -> None:
    explanations = [t.replace("[", "").replace("]", "") for t in _random_texts(seed=3, count=300)]
    expected = {"A": "a", "B": "b", "C": "tie"}
    for i in range(0, len(explanations), 2):
        verdict = "ABC"[i % 3]
        text = f"{explanations[i]}[[A]] then [[{verdict}]]{explanations[i + 1]}"
        assert parse_preference(text).choice == expected[verdict], text


def test_long_adversarial_inputs_are_fast() -> None:
    texts = [
        "rating " + " " * 20000 + "x",
        "1" * 20000,
        "1/" * 10000,
        "[[" * 10000 + "1",
        "Output (a) " * 3000,
        "score: " * 5000,
        "Rating: 1" + " " * 20000 + "x",
        "Output A" + " " * 20000 + "is",
        "[[" + " " * 20000 + "1",
        "1" + " " * 20000 + "out",
        "0." * 10000,
    ]
    start = time.perf_counter()
    for text in texts:
        parse_rating(text, scale=10)
        parse_preference(text)
    assert time.perf_counter() - start < 2.0


# ---------------------------------------------------------------- docs agree with code


def _documented_methods(section: str) -> list[str]:
    return re.findall(r"^\| \d \| `(\w+)` \|", section, flags=re.MULTILINE)


def test_docs_list_the_rules_in_code_order() -> None:
    text = DOCS.read_text(encoding="utf-8")
    ratings = text.split("## Ratings", 1)[1].split("## Pairwise", 1)[0]
    preferences = text.split("## Pairwise", 1)[1].split("## In-context", 1)[0]
    assert _documented_methods(ratings) == [rule.name for rule in RATING_RULES]
    assert _documented_methods(preferences) == [rule.name for rule in PREFERENCE_RULES]
