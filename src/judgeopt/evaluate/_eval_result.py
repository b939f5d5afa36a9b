"""What an evaluation returns: each judged item, its scores against the humans, merging."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, cast

import numpy as np

from ..data import Record
from ..metrics import correlation

__all__ = [
    "EvalResult",
    "ItemResult",
    "correct",
    "item_predictions",
    "merge_results",
    "result_of",
    "score_items",
]


@dataclass(frozen=True)
class ItemResult:
    """One judged item.

    Attributes:
        id: The record id.
        human: The human score (pointwise) or label (pairwise).
        score: The judge's rating or verdict; ``None`` when the call failed or the output
            could not be parsed.
        parse_error: Why the output could not be parsed.
        error: Why the call failed (LM error, artifact error).
        raw: The judge's output text.
        error_kind: The failure's :attr:`judgeopt.lm.LMError.kind` (``"connection"``,
            ``"timeout"``, ``"context_overflow"``...; ``"error"`` for another exception).
    """

    id: str
    human: float | str | None
    score: float | str | None
    parse_error: str | None = None
    error: str | None = None
    raw: str | None = None
    error_kind: str | None = None

    @property
    def transient(self) -> bool:
        """The call failed for a reason outside the request (endpoint down, timeout,
        overload): trying again later may succeed (:data:`judgeopt.lm.TRANSIENT_KINDS`)."""
        from ..lm import TRANSIENT_KINDS  # lazy: lm's error module loads DSPy

        return self.error is not None and self.error_kind in TRANSIENT_KINDS


@dataclass(frozen=True)
class EvalResult:
    """The outcome of :func:`evaluate`.

    Correlations (pointwise) are computed with unparsed or failed items imputed by the
    mean of the parsed ratings (PrExMe's "template average" fallback), so that a judge is
    not rewarded for failing on hard items; a judge whose ratings are all equal gets 0.
    ``accuracy`` (pairwise) counts unparsed verdicts as wrong.
    """

    n: int
    parse_failures: int
    call_failures: int
    level: str
    spearman: float | None = None
    kendall: float | None = None
    pearson: float | None = None
    accuracy: float | None = None
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    items: list[ItemResult] = field(default_factory=list, repr=False)
    #: Of ``prompt_tokens``, those the model computed (its prefix cache reused the rest):
    #: the embedded model's batch engine counts them; ``None`` where nothing counts them.
    computed_tokens: int | None = None

    def metric(self, name: str) -> float:
        """A metric by name (``spearman``, ``kendall``, ``pearson``, ``accuracy``); NaN if none."""
        value = getattr(self, name, None)
        if name not in ("spearman", "kendall", "pearson", "accuracy"):
            raise ValueError(
                f"Unknown metric {name!r}. Allowed: spearman, kendall, pearson, accuracy."
            )
        return math.nan if value is None else float(value)

    def summary(self) -> dict[str, Any]:
        """The JSON summary printed by ``judgeopt evaluate``."""
        out: dict[str, Any] = {
            "n": self.n,
            "parse_failures": self.parse_failures,
            "call_failures": self.call_failures,
        }
        if self.accuracy is not None:
            out["accuracy"] = self.accuracy
        else:
            out.update(spearman=self.spearman, kendall=self.kendall, pearson=self.pearson)
        out.update(
            level=self.level,
            calls=self.calls,
            cache_hits=self.cache_hits,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            seconds=round(self.seconds, 3),
        )
        if self.computed_tokens is not None:
            out["computed_tokens"] = self.computed_tokens
        return out

    def to_dict(self) -> dict[str, Any]:
        """Summary plus every item."""
        return {**self.summary(), "items": [asdict(i) for i in self.items]}


def score_items(
    items: Sequence[ItemResult], *, pairwise: bool, level: str, groups: Sequence[Any] | None = None
) -> dict[str, float | None]:
    """Correlations (pointwise) or accuracy (pairwise) of judged items with the humans."""
    if pairwise:
        # An unparsed verdict counts as wrong.
        correct = sum(i.score is not None and str(i.score) == str(i.human) for i in items)
        return {"accuracy": correct / len(items) if items else None}
    human = np.asarray([_number(i.human) for i in items], dtype=float)
    parsed = [_number(i.score) for i in items if i.score is not None]
    out: dict[str, float | None] = {"spearman": None, "kendall": None, "pearson": None}
    if len(parsed) < 3 or len(items) < 3:
        return out
    fill = float(np.mean(parsed))
    pred = np.asarray([fill if i.score is None else _number(i.score) for i in items])
    use_groups = list(groups) if level == "group" and groups is not None else None
    for method in ("spearman", "kendall", "pearson"):
        try:
            out[method] = correlation(human, pred, method=method, groups=use_groups)
        except ValueError as e:
            # A judge that gives one rating to every item cannot rank anything: 0. Constant
            # human scores leave every correlation undefined: None, never a fake 0.
            human_constant = _constant(human, use_groups)
            out[method] = 0.0 if "constant" in str(e).lower() and not human_constant else None
    return out


def _constant(values: np.ndarray, groups: Sequence[Any] | None) -> bool:
    """No variation to correlate with: constant overall, or within every group."""
    if groups is None:
        return bool(np.all(values == values[0])) if len(values) else True
    by: dict[Any, list[float]] = {}
    for g, v in zip(groups, values, strict=True):
        by.setdefault(g, []).append(float(v))
    return all(len(set(vs)) < 2 for vs in by.values())


def result_of(
    items: Sequence[ItemResult],
    records: Sequence[Record],
    *,
    pairwise: bool,
    level: str,
    seconds: float,
    **counters: int,
) -> EvalResult:
    """The :class:`EvalResult` of judged ``items`` (aligned with ``records``)."""
    metrics = score_items(
        items, pairwise=pairwise, level=level, groups=[r.group_id or r.id for r in records]
    )
    return EvalResult(
        n=len(items),
        parse_failures=sum(i.error is None and i.score is None for i in items),
        call_failures=sum(i.error is not None for i in items),
        level="dataset" if pairwise else level,
        seconds=seconds,
        items=list(items),
        **metrics,  # type: ignore[arg-type]
        **counters,
    )


def merge_results(
    parts: Sequence[EvalResult], records: Sequence[Record], *, pairwise: bool, level: str
) -> EvalResult:
    """One :class:`EvalResult` from evaluations of disjoint parts of ``records``.

    Items are put in the order of ``records`` (matched by id; every record must have been
    judged in exactly one part); the correlations are computed over all of them and the
    counters (calls, tokens, seconds) are summed.

    Raises:
        ValueError: When a record has no judged item.
    """
    by_id = {i.id: i for p in parts for i in p.items}
    missing = [r.id for r in records if r.id not in by_id]
    if missing:
        raise ValueError(f"merge_results: no judged item for records {missing[:5]!r}.")
    items = [by_id[r.id] for r in records]
    counters = {
        k: sum(getattr(p, k) for p in parts)
        for k in ("calls", "cache_hits", "prompt_tokens", "completion_tokens")
    }
    merged = result_of(
        items,
        records,
        pairwise=pairwise,
        level=level,
        seconds=sum(p.seconds for p in parts),
        **counters,
    )
    return replace(merged, computed_tokens=_computed_sum(parts))


def _computed_sum(parts: Sequence[EvalResult]) -> int | None:
    """The parts' computed prompt tokens added up; ``None`` unless every part counted them."""
    counted = [p.computed_tokens for p in parts]
    if not counted or any(c is None for c in counted):
        return None
    return sum(c for c in counted if c is not None)


def _number(value: float | str | None) -> float:
    """A pointwise rating or human score as a float (a pairwise verdict is a string and is
    never read here; ``None`` is filtered out before)."""
    return float(cast(float, value))


def item_predictions(items: Sequence[ItemResult]) -> list[float]:
    """The judge's ratings as scored: unparsed or failed items take the mean of the parsed
    ratings (as :func:`score_items` imputes them); all failed gives zeros."""
    parsed = [_number(i.score) for i in items if i.score is not None]
    fill = float(np.mean(parsed)) if parsed else 0.0
    return [fill if i.score is None else _number(i.score) for i in items]


def correct(items: Sequence[ItemResult]) -> list[float]:
    """1.0 where a pairwise verdict equals the human label, else 0.0 (unparsed: wrong)."""
    return [float(i.score is not None and str(i.score) == str(i.human)) for i in items]


def ensemble_result(
    ensemble: Any, members: Sequence[EvalResult], records: Sequence[Record]
) -> EvalResult:
    """An ensemble's evaluation on ``records`` from its members' judged items (no call).

    ``ensemble`` is a :class:`judgeopt.judge.JudgeEnsemble` (anything with its ``combine``
    and ``aspect``); ``members`` are its members' evaluations on ``records``, in the
    ensemble's member order. Each item's ratings are combined as the ensemble combines them
    when it judges (an item no member rated is an unparsed item); the counters (calls,
    tokens, seconds) are the members' sums, what the ensemble costs.

    Raises:
        ValueError: When the number of members differs from the ensemble's, or a record
            has no item in a member's evaluation.
    """
    if len(members) != len(ensemble.members):
        raise ValueError(
            f"ensemble_result: {len(members)} member evaluations for an ensemble of "
            f"{len(ensemble.members)}"
        )
    by_member = [{i.id: i for i in m.items} for m in members]
    items = []
    for r in records:
        if any(r.id not in bm for bm in by_member):
            raise ValueError(f"ensemble_result: record {r.id!r} was not judged by every member")
        ratings = [None if bm[r.id].score is None else _number(bm[r.id].score) for bm in by_member]
        score, _ = ensemble.combine(ratings)
        items.append(
            ItemResult(
                r.id,
                r.scores.get(ensemble.aspect),
                score,
                parse_error=None if score is not None else "no member parsed",
            )
        )
    level = members[0].level if members else "dataset"
    part = EvalResult(n=len(items), parse_failures=0, call_failures=0, level=level, items=items)
    merged = merge_results([part], records, pairwise=False, level=level)
    counters = ("calls", "cache_hits", "prompt_tokens", "completion_tokens", "seconds")
    summed = {k: sum(getattr(m, k) for m in members) for k in counters}
    return replace(merged, computed_tokens=_computed_sum(members), **summed)
