"""Extract a rating or a pairwise verdict from a judge model's free text.

The rules are tried in the order of :data:`RATING_RULES` / :data:`PREFERENCE_RULES`;
the first rule that finds something decides, and within a rule the **last**
occurrence in the text wins (a model that revises itself ends with its final
answer; an echoed format example such as ``Rating: [[10]]`` comes earlier).
A rating outside ``rating_min..scale`` (default ``1..scale``) is a failure, not
clipped and not retried with the next rule. The parsers never raise on model
text: failures return ``score`` / ``choice`` ``None`` with a specific ``error``.
``docs/parsing.md`` documents the same rules in the same order (a test checks
the names and order).

Rating rules (``n`` = integer or decimal, optionally signed so that ``-1`` is
reported as out of range rather than missed):

1. ``double_brackets``: ``[[n]]``, spaces allowed inside (``[[ 8 ]]``), optionally
   ``[[n/scale]]``.
2. ``labelled``: ``rating`` / ``score`` followed by an optional ``:``, ``=``, ``-``,
   ``is``, ``of``, ``would be``, markdown emphasis or an opening bracket, then ``n``,
   optionally ``/scale`` or ``out of scale`` (``Rating: 8``, ``rating of **7**``,
   ``Score: 4 out of 5``). A number starting a range (``score of 1 to 10``) is skipped.
3. ``fraction``: ``n/scale`` or ``n out of scale`` anywhere, only with the judge's
   own ``scale`` as denominator (``3/4 of the facts`` is ignored for a 1..10 scale).
4. ``lone_number``: the whole output is one number, after stripping whitespace,
   markdown (``*``, ``_``, backticks), quotes, brackets and a trailing period.

A ``/d`` denominator other than ``scale`` in rules 1-2 is a failure.

Preference rules (verdict ``"a"``, ``"b"`` or ``"tie"``):

1. ``double_brackets``: ``[[A]]``, ``[[B]]``, ``[[C]]`` (tie, MT-Bench convention) or
   ``[[tie]]``, any case, spaces allowed.
2. ``exact``: the whole output is a verdict: ``A``, ``B``, ``C``, ``tie``, ``(a)``,
   ``Output (a)``, ``Assistant B``, ``Response A``, ``Answer (b)``.
3. ``statement``: ``<label> is (clearly|slightly|much)? (the)? better|superior|
   preferred|preferable``, ``I prefer <label>``, ``<label> wins``, or a tie
   statement (``it's a tie``, ``both outputs are equally good``), where
   ``<label>`` is ``Output (a)``, ``Assistant A``, ``Response B``, ``Answer (b)``.
4. ``leading_label``: the output starts with a label followed by a line break or
   ``.``, ``:``, ``,`` (LLMBar answers ``Output (b)`` then explain).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

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

Choice: TypeAlias = Literal["a", "b", "tie"]
"""A pairwise verdict: the first output, the second output, or a tie."""


@dataclass(frozen=True)
class RatingParse:
    """Result of :func:`parse_rating`.

    Attributes:
        score: The rating as a float, or ``None`` on failure.
        method: Name of the rule that matched (see :data:`RATING_RULES`), or
            ``"none"`` if no rule matched.
        error: Why parsing failed (``"no rating found"``, ``"rating 12 outside
            1..10"``, ...), or ``None`` on success.
        matched: The text the deciding rule matched, for error analysis.
    """

    score: float | None
    method: str
    error: str | None
    matched: str | None = None

    @property
    def ok(self) -> bool:
        """Whether a rating was found and is in range."""
        return self.score is not None


@dataclass(frozen=True)
class PreferenceParse:
    """Result of :func:`parse_preference`.

    Attributes:
        choice: ``"a"``, ``"b"``, ``"tie"``, or ``None`` on failure.
        method: Name of the rule that matched (see :data:`PREFERENCE_RULES`), or
            ``"none"``.
        error: Why parsing failed, or ``None`` on success.
        matched: The text the deciding rule matched.
    """

    choice: Choice | None
    method: str
    error: str | None
    matched: str | None = None

    @property
    def ok(self) -> bool:
        """Whether a verdict was found."""
        return self.choice is not None


# ------------------------------------------------------------------------- patterns

_NUM: Final[str] = r"[+-]?\d+(?:\.\d+)?"
_END_NUM: Final[str] = r"(?!\d)(?!\.\d)"  # no backtracking into a longer number
_DENOM: Final[str] = r"(?:\s*(?:/|out\s+of)\s*(?P<den>\d+)(?!\d))?"

_DOUBLE_BRACKETS: Final = re.compile(rf"\[\[\s*(?P<num>{_NUM})\s*(?:/\s*(?P<den>\d+)\s*)?\]\]")
_LABELLED: Final = re.compile(
    rf"\b(?:rating|score)\b[^\S\n]*+"  # possessive: no backtracking over long blanks
    rf"(?:(?::|=|-|is|of|would\s+be|will\s+be)[^\S\n]*+)?"
    rf"(?:\*\*|\*|__|_|\[\[|\[|\()?[^\S\n]*+"
    rf"(?P<num>{_NUM}){_END_NUM}(?!\s*(?:-|–|to)\s*\d){_DENOM}",
    re.IGNORECASE,
)
_FRACTION: Final = re.compile(
    rf"(?<![\d./])(?P<num>{_NUM})\s*(?:/|out\s+of)\s*(?P<den>\d+)(?![\d/])", re.IGNORECASE
)
_LONE: Final = re.compile(_NUM)
_STRIP_CHARS: Final[str] = " \t\r\n*_`'\"[]().:"

_LABEL: Final[str] = (
    r"(?i:output|response|assistant|answer)\s*(?:\(\s*(?P<{g}>[abAB])\s*\)|(?P<{g}2>[AB])\b)"
)
_VERDICT_BRACKETS: Final = re.compile(r"\[\[\s*(?P<v>[abcABC]|tie|TIE|Tie)\s*\]\]")
_EXACT: Final = re.compile(
    r"(?:(?:output|response|assistant|answer)\s*)?\(?\s*(?P<v>[abc]|tie)\s*\)?", re.IGNORECASE
)
_BETTER: Final = re.compile(
    _LABEL.format(g="x")
    + r"\s+(?:is|was)\s+(?:clearly\s+|slightly\s+|much\s+|significantly\s+)?(?:the\s+)?"
    r"(?:better|superior|preferred|preferable)\b"
    r"|\bprefer\s+" + _LABEL.format(g="y") + r"|" + _LABEL.format(g="z") + r"\s+wins\b"
    r"|(?P<tie>\b(?i:it\s*'?\s*i?s\s+a\s+tie|both\s+(?:outputs|responses|assistants|answers)"
    r"\s+are\s+equally\s+(?:good|bad|helpful)))"
)
_LEADING: Final = re.compile(_LABEL.format(g="x") + r"[*_`]*[^\S\n]*(?:\n|[.:,]|$)")

_VERDICTS: Final[dict[str, Choice]] = {"a": "a", "b": "b", "c": "tie", "tie": "tie"}


# ----------------------------------------------------------------------------- rules


@dataclass(frozen=True)
class _RatingHit:
    value: float
    denominator: int | None
    matched: str


@dataclass(frozen=True)
class Rule:
    """One parsing rule: its name (the ``method`` of a result) and a description."""

    name: str
    description: str


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    last: re.Match[str] | None = None
    for match in pattern.finditer(text):
        last = match
    return last


def _rating_hit(match: re.Match[str] | None) -> _RatingHit | None:
    if match is None:
        return None
    den = match.groupdict().get("den")
    return _RatingHit(float(match["num"]), int(den) if den else None, match.group(0))


def _rating_double_brackets(text: str, scale: int) -> _RatingHit | None:
    return _rating_hit(_last(_DOUBLE_BRACKETS, text))


def _rating_labelled(text: str, scale: int) -> _RatingHit | None:
    return _rating_hit(_last(_LABELLED, text))


def _rating_fraction(text: str, scale: int) -> _RatingHit | None:
    last: re.Match[str] | None = None
    for match in _FRACTION.finditer(text):
        if int(match["den"]) == scale:
            last = match
    return _rating_hit(last)


def _rating_lone_number(text: str, scale: int) -> _RatingHit | None:
    core = text.strip(_STRIP_CHARS)
    match = _LONE.fullmatch(core)
    return None if match is None else _RatingHit(float(match.group(0)), None, core)


_RatingFinder: TypeAlias = Callable[[str, int], _RatingHit | None]
_PreferenceFinder: TypeAlias = Callable[[str], tuple[Choice, str] | None]

_RATING_FINDERS: Final[tuple[tuple[Rule, _RatingFinder], ...]] = (
    (Rule("double_brackets", "last [[n]] (or [[n/scale]])"), _rating_double_brackets),
    (Rule("labelled", "last 'Rating: n' / 'score of n' (optionally n/scale)"), _rating_labelled),
    (Rule("fraction", "last 'n/scale' or 'n out of scale'"), _rating_fraction),
    (Rule("lone_number", "the whole output is one number"), _rating_lone_number),
)

RATING_RULES: Final[tuple[Rule, ...]] = tuple(rule for rule, _ in _RATING_FINDERS)
"""The rating rules in the order :func:`parse_rating` tries them."""


def _label_choice(match: re.Match[str]) -> Choice:
    if match.groupdict().get("tie"):
        return "tie"
    letter = next(v for k, v in match.groupdict().items() if k != "tie" and v)
    return _VERDICTS[letter.lower()]


def _pref_double_brackets(text: str) -> tuple[Choice, str] | None:
    match = _last(_VERDICT_BRACKETS, text)
    return None if match is None else (_VERDICTS[match["v"].lower()], match.group(0))


def _pref_exact(text: str) -> tuple[Choice, str] | None:
    core = text.strip(" \t\r\n*_`'\".:")
    match = _EXACT.fullmatch(core)
    return None if match is None else (_VERDICTS[match["v"].lower()], core)


def _pref_statement(text: str) -> tuple[Choice, str] | None:
    match = _last(_BETTER, text)
    return None if match is None else (_label_choice(match), match.group(0))


def _pref_leading_label(text: str) -> tuple[Choice, str] | None:
    match = _LEADING.match(text.lstrip(" \t\r\n*_`'\"#"))
    return None if match is None else (_label_choice(match), match.group(0).strip())


_PREFERENCE_FINDERS: Final[tuple[tuple[Rule, _PreferenceFinder], ...]] = (
    (Rule("double_brackets", "last [[A]] / [[B]] / [[C]] (tie)"), _pref_double_brackets),
    (Rule("exact", "the whole output is a verdict, e.g. 'Output (a)'"), _pref_exact),
    (Rule("statement", "last '<label> is better' / 'prefer <label>' / tie"), _pref_statement),
    (Rule("leading_label", "the output starts with a label line"), _pref_leading_label),
)

PREFERENCE_RULES: Final[tuple[Rule, ...]] = tuple(rule for rule, _ in _PREFERENCE_FINDERS)
"""The preference rules in the order :func:`parse_preference` tries them."""


# ---------------------------------------------------------------------------- parsers


def parse_rating(text: str | None, *, scale: int, rating_min: int = 1) -> RatingParse:
    """Extract a ``rating_min..scale`` (default ``1..scale``) rating from a judge's output.

    Args:
        text: The model output. ``None`` is treated like an empty output.
        scale: Top of the rating scale; an int above ``rating_min``. Also the only
            denominator accepted in ``n/scale``.
        rating_min: Bottom of the rating scale (1 unless the task asks for another,
            e.g. HPSS's ``0..1`` groundedness).

    Returns:
        A :class:`RatingParse`. On success ``score`` is a float in ``[rating_min, scale]``;
        otherwise ``score`` is ``None`` and ``error`` says why: ``"empty output"``,
        ``"no rating found"``, ``"rating 12 outside 1..10"`` or
        ``"rating 4/5 is not on the 1..10 scale"``.

    Raises:
        ValueError: If ``scale`` or ``rating_min`` is not an int or ``rating_min >=
            scale`` (a caller bug, not model text).
    """
    for name, value in (("scale", scale), ("rating_min", rating_min)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an int, got {value!r}")
    if rating_min >= scale:
        raise ValueError(f"scale must be above rating_min, got {rating_min}..{scale}")
    if text is None or not isinstance(text, str) or not text.strip():
        return RatingParse(None, "none", "empty output")
    for rule, finder in _RATING_FINDERS:
        hit = finder(text, scale)
        if hit is None:
            continue
        if hit.denominator is not None and hit.denominator != scale:
            error = (
                f"rating {hit.value:g}/{hit.denominator} is not on the {rating_min}..{scale} scale"
            )
            return RatingParse(None, rule.name, error, hit.matched)
        if not rating_min <= hit.value <= scale:
            error = f"rating {hit.value:g} outside {rating_min}..{scale}"
            return RatingParse(None, rule.name, error, hit.matched)
        return RatingParse(hit.value, rule.name, None, hit.matched)
    return RatingParse(None, "none", "no rating found")


def parse_preference(text: str | None) -> PreferenceParse:
    """Extract a pairwise verdict (``"a"``, ``"b"`` or ``"tie"``) from a judge's output.

    Args:
        text: The model output. ``None`` is treated like an empty output.

    Returns:
        A :class:`PreferenceParse`; on failure ``choice`` is ``None`` and ``error``
        is ``"empty output"`` or ``"no verdict found"``. Never raises.
    """
    if text is None or not isinstance(text, str) or not text.strip():
        return PreferenceParse(None, "none", "empty output")
    for rule, finder in _PREFERENCE_FINDERS:
        found = finder(text)
        if found is not None:
            choice, matched = found
            return PreferenceParse(choice, rule.name, None, matched)
    return PreferenceParse(None, "none", "no verdict found")
