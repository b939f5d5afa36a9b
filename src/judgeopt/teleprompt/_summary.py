"""One evaluated strategy's summary: what the compile keeps of each strategy it judged.

The run journal writes one per line (``evaluations.jsonl``), a resumed compile reads them back,
the choice reads their unrated counts, and the exported report lists them
(``search_result.evaluation_summaries``, :meth:`StrategySummary.to_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._config import OptimizerConfig

__all__ = [
    "PassedOver",
    "RaceCheck",
    "RaceRecord",
    "StrategySummary",
    "racing_summary",
    "search_trace",
]


@dataclass(frozen=True)
class PassedOver:
    """A strategy the choice passed over: it gave no rating for ``unrated`` of its ``n``
    search items, more than ``max_parse_failures`` allows, though its search score (which
    rests on the answers that parsed) was high. ``key``: its number as the summary table
    shows it (``#1`` first)."""

    key: str
    search_score: float
    unrated: int
    n: int

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form (an entry of the selection record's ``excluded``)."""
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.key} ({self.unrated} of {self.n}; search score {self.search_score:.3f})"


@dataclass(frozen=True)
class RaceCheck:
    """One of racing's checks: after ``items`` items, the ``estimate`` and the upper
    ``bound`` it was compared with (``None``: no check at the last chunk)."""

    items: int
    estimate: float | None
    bound: float | None


@dataclass(frozen=True)
class RaceRecord:
    """A raced strategy: dropped (or not) after judging ``items`` of ``of`` items, its
    estimate there, the bound that dropped it, the bar it was held to and every check."""

    dropped: bool
    items: int
    of: int
    estimate: float | None
    bound: float | None
    threshold: float | None
    checks: tuple[RaceCheck, ...]

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RaceRecord:
        """Read :meth:`to_dict` output."""
        checks = tuple(RaceCheck(**c) for c in raw.get("checks") or ())
        fields = {k: raw.get(k) for k in ("estimate", "bound", "threshold")}
        return cls(bool(raw["dropped"]), int(raw["items"]), int(raw["of"]), **fields, checks=checks)

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form (a summary's and a trace entry's ``racing``)."""
        return {**asdict(self), "checks": [asdict(c) for c in self.checks]}


@dataclass(frozen=True)
class StrategySummary:
    """A judged strategy: its number in the search, its factor values, its evaluation on the
    search items and, when racing judged it, the race's record.

    Attributes:
        number: Its place in the search (0 first; the summary table shows ``number + 1``).
        strategy: Factor -> value.
        evaluation: ``EvalResult.summary()``: ``n``, ``parse_failures``,
            ``call_failures``, the scores (``spearman``, ``kendall``, ``pearson`` or
            ``accuracy``), ``level``, ``calls``, ``cache_hits``, the tokens and ``seconds``.
        racing: The race's record (``dropped``, ``bound``, ...), or ``None``.
    """

    number: int
    strategy: dict[str, Any]
    evaluation: dict[str, Any]
    racing: RaceRecord | None = None

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> StrategySummary:
        """Read :meth:`to_dict` output (a journal line)."""
        evaluation = {k: v for k, v in raw.items() if k not in ("number", "strategy", "racing")}
        racing = raw.get("racing")
        race = None if racing is None else RaceRecord.from_dict(racing)
        return cls(int(raw["number"]), dict(raw["strategy"]), evaluation, race)

    def to_dict(self) -> dict[str, Any]:
        """The plain-data form: ``number``, ``strategy``, the evaluation's fields, ``racing``
        (when raced)."""
        out = {"number": self.number, "strategy": self.strategy, **self.evaluation}
        return out if self.racing is None else {**out, "racing": self.racing.to_dict()}

    def count(self, name: str) -> int:
        """One of the evaluation's counts (``n``, ``parse_failures``, ``call_failures``,
        ``calls``, ``prompt_tokens``, ``completion_tokens``); 0 when absent."""
        return int(self.evaluation.get(name) or 0)

    @property
    def n(self) -> int:
        """Items judged."""
        return self.count("n")

    @property
    def unrated(self) -> int:
        """Items without a rating: unparsed answers and failed calls."""
        return self.count("parse_failures") + self.count("call_failures")

    @property
    def dropped(self) -> bool:
        """Whether racing dropped the strategy before all its items were judged."""
        return self.racing is not None and self.racing.dropped

    def score(self, metric: str) -> float | None:
        """Its score by ``metric`` (``None``: undefined)."""
        value = self.evaluation.get(metric)
        return None if value is None else float(value)


def search_trace(
    search: Any, summaries: Sequence[StrategySummary], raced: bool
) -> list[dict[str, Any]]:
    """The search's trace (``search.trace()``), each raced evaluation with its racing record."""
    trace: list[dict[str, Any]] = search.trace()
    if not raced:
        return trace
    records = {s.number: s.racing for s in summaries if s.racing}
    return [
        {**entry, "racing": records[t.number].to_dict()} if t.number in records else entry
        for t, entry in zip(search.trials, trace, strict=True)
    ]


def racing_summary(
    config: OptimizerConfig, summaries: Sequence[StrategySummary], dropped: int, n_items: int
) -> dict[str, Any] | None:
    """What racing saved: its settings, the strategies ``dropped`` and the judgements made
    against the ``n_items`` search items each strategy would have been judged on (``None``
    without racing)."""
    race = config.racing
    if not race.enabled:
        return None
    return {
        **race.model_dump(mode="json"),
        "top": config.race_top(),
        "dropped": dropped,
        "items_judged": sum(s.n for s in summaries),
        "items_full": n_items * len(summaries),
    }
