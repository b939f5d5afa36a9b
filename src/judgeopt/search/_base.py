"""The ask/tell contract shared by every search strategy.

A search is written as a generator, :meth:`Search._run`, that yields proposals
``(strategy, kind)`` and receives each proposal's score back. This keeps each algorithm's
code as close to its paper listing as possible, while :class:`Search` enforces the
contract around it:

* ``ask()`` returns the next strategy to evaluate, or ``None`` once the budget (counted in
  unique evaluations) is spent or the algorithm has nothing left to propose. Asking again
  before telling returns the same pending strategy.
* ``tell(strategy, score)`` records the score of the pending strategy. ``score`` may be NaN
  for a failed evaluation: it is recorded, never proposed again and ranked last.
  ``tell(..., counted=False)`` records a strategy that could not be evaluated at all (its
  prompts do not fit the model, say) without spending the budget on it.
* Every evaluation is kept in :attr:`trials` (the trace).
* :meth:`state_dict` is plain JSON; :meth:`Search.from_state` rebuilds the search
  by replaying the recorded history into a fresh instance with the same seed, which
  reproduces the internal state (random generator included) exactly, so the continuation is
  the one the original search would have had. The replay checks every proposal against the
  record and refuses a state that does not match.
"""

from __future__ import annotations

import abc
import json
import math
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeAlias

import numpy as np

from .._validation import check_int
from ._graph import FactorGraph
from ._space import FactorSpace, Strategy

Kind: TypeAlias = Literal["init", "explore", "exploit", "random", "grid", "model"]
"""Why a strategy was proposed: ``init`` (initialisation pass), ``explore`` (a mutation or
perturbation of a known strategy), ``exploit`` (HPSS's best-advantage pick), ``random``
(uniform sampling), ``grid`` (exhaustive enumeration), ``model`` (a surrogate model's pick)."""

Proposal: TypeAlias = tuple[Strategy, Kind]
SearchGenerator: TypeAlias = Generator[Proposal, float, None]

STATE_FORMAT_VERSION = 1


@dataclass(frozen=True)
class Trial:
    """One evaluation in a search's trace.

    Attributes:
        number: 0-based position in the trace.
        strategy: The evaluated strategy.
        score: The told score (NaN for a failed evaluation).
        kind: Why it was proposed (see :data:`Kind`).
        advantages: For searches that keep advantages (HPSS), their values after this
            evaluation's update, as ``{factor: {value_json: advantage}}``; else ``None``.
        counted: Whether the evaluation spent the budget (``False``: a strategy that could
            not be evaluated at all, told with ``counted=False``).
    """

    number: int
    strategy: Strategy
    score: float
    kind: Kind
    advantages: dict[str, dict[str, float]] | None = None
    counted: bool = True

    @property
    def failed(self) -> bool:
        """True when the evaluation failed (NaN score)."""
        return math.isnan(self.score)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (NaN becomes ``null``; ``counted`` only when false)."""
        out = {
            "number": self.number,
            "strategy": self.strategy.as_dict(),
            "score": None if self.failed else self.score,
            "kind": self.kind,
            "advantages": self.advantages,
        }
        if not self.counted:
            out["counted"] = False
        return out


def rank_key(score: float, number: int) -> tuple[int, float, int]:
    """Sort key that ranks higher scores first, failed (NaN) ones last, ties by age."""
    if math.isnan(score):
        return (1, 0.0, number)
    return (0, -score, number)


class Search(abc.ABC):
    """Base class of all searches: ask/tell over a :class:`FactorSpace`.

    Subclasses implement :meth:`_run` and :meth:`get_params`; everything else (budget,
    duplicate and constraint checks, the trace, state and resume) lives here.

    Args:
        space: The factor space to search.
        budget: Maximum number of unique evaluations (initialisation included); an
            evaluation told with ``counted=False`` does not spend it.
        seed: Seed of the search's ``numpy.random.Generator``. ``None`` draws fresh entropy,
            which is then stored in :attr:`seed` so the run can still be resumed.
        graph: Optional :class:`FactorGraph` whose constraints every proposal satisfies.

    Raises:
        ValueError: If ``budget`` is not an int >= 1, or ``graph`` describes another space.
    """

    name: ClassVar[str] = "base"

    def __init__(
        self,
        space: FactorSpace,
        *,
        budget: int,
        seed: int | None = None,
        graph: FactorGraph | None = None,
    ) -> None:
        owner = type(self).__name__
        budget = check_int(budget, "budget", min_value=1, owner=owner)
        seed = check_int(seed, "seed", min_value=0, allow_none=True, owner=owner)
        if graph is not None and graph.space != space:
            raise ValueError("`graph` was built for a different FactorSpace than `space`.")
        self.space = space
        self.budget = budget
        self.graph = graph
        self.seed: int = int(np.random.SeedSequence().entropy) if seed is None else seed  # type: ignore[arg-type]
        self.rng = np.random.default_rng(self.seed)
        self._trials: list[Trial] = []
        self._spent = 0
        self._scores: dict[Strategy, float] = {}
        self._gen: SearchGenerator | None = None
        self._pending: Proposal | None = None
        self._exhausted = False

    # To implement ------------------------------------------------------------------------
    @abc.abstractmethod
    def _run(self) -> SearchGenerator:
        """The algorithm: yield ``(strategy, kind)`` proposals and receive each score.

        Called once, lazily, at the first :meth:`ask`. Never yield an already evaluated or an
        invalid strategy (use :meth:`is_explored` and :meth:`is_valid`). Return to signal that
        nothing is left to propose. Scores are received exactly as told (NaN for failures).
        """

    @abc.abstractmethod
    def get_params(self) -> dict[str, Any]:
        """Constructor keyword arguments (except ``space`` and ``graph``), JSON-serialisable."""

    def advantages(self) -> dict[str, dict[str, float]] | None:
        """Current per-value advantages, for searches that keep them (recorded in the trace)."""
        return None

    # Public API --------------------------------------------------------------------------
    def ask(self) -> Strategy | None:
        """The next strategy to evaluate, or ``None`` when the search is over.

        Calling ``ask()`` again before :meth:`tell` returns the same pending strategy.
        """
        if self._exhausted or self._spent >= self.budget:
            return None
        if self._pending is not None:
            return self._pending[0]
        if self._gen is None:
            self._gen = self._run()
            self._advance(None)
        return self._pending[0] if self._pending is not None else None

    def tell(self, strategy: Strategy, score: float, *, counted: bool = True) -> None:
        """Record the score of the pending strategy.

        Args:
            strategy: The strategy returned by the last :meth:`ask`.
            score: Its score (higher is better); ``float("nan")`` for a failed evaluation.
            counted: ``False`` for a strategy that could not be evaluated at all (every
                call refused, its prompts too long for the model): it is recorded and never
                proposed again like any failure, but does not spend the budget.

        Raises:
            ValueError: If nothing is pending, ``strategy`` is not the pending one, or the
                score is infinite or not a number.
        """
        if self._pending is None or self.finished:
            raise ValueError("tell() called with no pending strategy; call ask() first.")
        if strategy != self._pending[0]:
            raise ValueError(
                f"tell() got {strategy}, but the pending strategy is {self._pending[0]}."
            )
        try:
            value = float(score)
        except (TypeError, ValueError):
            raise ValueError(
                f"`score` must be a float (NaN for a failure). Got {score!r}."
            ) from None
        if math.isinf(value):
            raise ValueError(f"`score` must be finite or NaN. Got {value!r}.")
        if not isinstance(counted, bool):
            raise TypeError(f"`counted` must be a bool. Got {counted!r}.")
        if not counted and not math.isnan(value):
            raise ValueError(
                f"`counted=False` is for a strategy that could not be evaluated; its score "
                f"must be NaN. Got {value!r}."
            )
        _, kind = self._pending
        self._pending = None
        self._scores[strategy] = value
        self._spent += counted
        number = len(self._trials)
        # The trial is appended before the generator resumes so that `_run` sees it.
        self._trials.append(Trial(number, strategy, value, kind, None, counted))
        self._advance(value)
        adv = self.advantages()
        if adv is not None:
            self._trials[number] = Trial(number, strategy, value, kind, adv, counted)

    def _advance(self, score: float | None) -> None:
        assert self._gen is not None  # internal invariant, not user input
        try:
            proposal = next(self._gen) if score is None else self._gen.send(score)
        except StopIteration:
            self._exhausted = True
            self._pending = None
            return
        strategy, kind = proposal
        if strategy in self._scores:
            raise RuntimeError(f"{type(self).__name__} proposed {strategy} twice (a bug).")
        if not self.is_valid(strategy):
            raise RuntimeError(f"{type(self).__name__} proposed invalid {strategy} (a bug).")
        self._pending = (strategy, kind)

    @property
    def trials(self) -> list[Trial]:
        """Every evaluation so far, in order (a copy)."""
        return list(self._trials)

    @property
    def n_evaluations(self) -> int:
        """Number of unique evaluations told so far (those told uncounted included)."""
        return len(self._trials)

    @property
    def n_counted(self) -> int:
        """Number of evaluations that spent the budget (told with ``counted=True``)."""
        return self._spent

    @property
    def finished(self) -> bool:
        """True when :meth:`ask` would return ``None``."""
        return self._exhausted or self._spent >= self.budget

    @property
    def best_trial(self) -> Trial | None:
        """The best evaluation so far (failed ones rank last; ties go to the earliest)."""
        if not self._trials:
            return None
        return min(self._trials, key=lambda t: rank_key(t.score, t.number))

    @property
    def best_strategy(self) -> Strategy | None:
        """Strategy of :attr:`best_trial`."""
        t = self.best_trial
        return None if t is None else t.strategy

    @property
    def best_score(self) -> float | None:
        """Score of :attr:`best_trial`."""
        t = self.best_trial
        return None if t is None else t.score

    def is_explored(self, strategy: Strategy) -> bool:
        """True when ``strategy`` has been evaluated."""
        return strategy in self._scores

    def score_of(self, strategy: Strategy) -> float:
        """The told score of an evaluated strategy."""
        return self._scores[strategy]

    def is_valid(self, strategy: Strategy) -> bool:
        """True when ``strategy`` satisfies the graph's constraints (if any)."""
        return self.graph is None or self.graph.is_valid(strategy)

    def trace(self) -> list[dict[str, Any]]:
        """The trace as JSON-serialisable dicts."""
        return [t.to_dict() for t in self._trials]

    # State -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A JSON-serialisable snapshot from which :meth:`from_state` resumes exactly."""
        return {
            "format_version": STATE_FORMAT_VERSION,
            "search": self.name,
            "params": self.get_params(),
            "space": self.space.to_dict(),
            "graph": None if self.graph is None else self.graph.to_dict(),
            "history": [
                {
                    "strategy": t.strategy.as_dict(),
                    "score": None if t.failed else t.score,
                    **({} if t.counted else {"counted": False}),
                }
                for t in self._trials
            ],
        }

    def to_json(self) -> str:
        """:meth:`state_dict` as JSON text."""
        return json.dumps(self.state_dict())

    @classmethod
    def from_state(cls, state: Mapping[str, Any] | str, **params: Any) -> Search:
        """Rebuild a search from :meth:`state_dict` output (a dict or JSON text).

        Called on :class:`Search` it picks the class named in the state; called on a
        subclass it requires that class. ``params`` replace the saved parameters of the same
        name (``budget=`` to go on past the saved budget).

        Raises:
            ValueError: On an unknown search name, a format version mismatch, or a history
                that the search would not have produced (a corrupted or foreign state).
        """
        searches = search_classes()
        data = json.loads(state) if isinstance(state, str) else dict(state)
        if data.get("format_version") != STATE_FORMAT_VERSION:
            raise ValueError(
                f"Unsupported search state format_version {data.get('format_version')!r}; "
                f"this version reads {STATE_FORMAT_VERSION}."
            )
        name = data.get("search")
        if name not in searches:
            raise ValueError(f"Unknown search {name!r}. Allowed: {sorted(searches)!r}.")
        klass = searches[name]
        if cls is not Search and klass is not cls:
            raise ValueError(f"State is for search {name!r}, not {cls.name!r}.")
        space = FactorSpace.from_dict(data["space"])
        graph = None if data.get("graph") is None else FactorGraph.from_dict(data["graph"])
        search = klass(space, graph=graph, **{**data["params"], **params})
        for i, item in enumerate(data.get("history", [])):
            expected = space.strategy(item["strategy"])
            got = search.ask()
            if got != expected:
                raise ValueError(
                    f"Search state does not replay: evaluation {i} was {expected}, "
                    f"but the search proposes {got}."
                )
            score = item["score"]
            counted = bool(item.get("counted", True))
            search.tell(got, float("nan") if score is None else float(score), counted=counted)
        return search

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(budget={self.budget}, seed={self.seed}, "
            f"evaluations={len(self._trials)})"
        )


def search_classes() -> dict[str, type[Search]]:
    """The searches of this package by name, for :meth:`Search.from_state`.

    Found among the subclasses of :class:`Search` (so this module needs no import of
    the algorithms, which import it): only classes defined in ``judgeopt.search`` that set
    their own ``name`` count, so the set is closed, the one :data:`judgeopt.search.SEARCHES`
    lists; a user's subclass is never picked by the name in a state.
    """
    found: dict[str, type[Search]] = {}
    stack = list(Search.__subclasses__())
    while stack:
        klass = stack.pop()
        stack.extend(klass.__subclasses__())
        if klass.__module__.startswith(f"{__package__}.") and "name" in vars(klass):
            found[klass.name] = klass
    return found
