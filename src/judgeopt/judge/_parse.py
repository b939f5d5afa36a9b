"""Rating and verdict parsing lives in :mod:`judgeopt.scoring`; this module keeps the old
import path for judge's own modules until they import from there."""

from __future__ import annotations

from judgeopt.scoring import (
    PREFERENCE_RULES,
    RATING_RULES,
    Choice,
    PreferenceParse,
    RatingParse,
    Rule,
    parse_preference,
    parse_rating,
)

__all__ = [
    "PREFERENCE_RULES",
    "RATING_RULES",
    "Choice",
    "PreferenceParse",
    "RatingParse",
    "Rule",
    "parse_preference",
    "parse_rating",
]
