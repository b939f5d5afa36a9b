"""The factor graph: constraints between factor values and the artifacts factors need.

A :class:`FactorGraph` is a networkx ``DiGraph`` over two kinds of nodes:

* ``("factor", name)`` for every factor of the space, and
* ``("artifact", name)`` for every artifact (something generated once and reused, such as
  self-generated criteria or AutoCoT steps), with an edge from each of its inputs.

It answers three questions about a strategy:

1. Is it valid? Constraints are *forbidden partial assignments* ("reference=dialectic together
   with cot=none"); a strategy containing every pair of one of them is invalid and no search
   ever proposes it.
2. Which artifacts does it need, and in which order? An artifact is needed when its
   ``needed_when`` condition holds; needed artifacts come in topological order, so inputs are
   produced before the artifacts that read them.
3. What is an artifact's cache key? The artifact's name and the values, in the strategy, of
   every factor among its ancestors. Two strategies that agree on those factors share the
   artifact, so it is generated once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np

from ._space import FactorSpace, Strategy, Value, _same_value


@dataclass(frozen=True)
class Constraint:
    """A forbidden partial assignment: no valid strategy contains all of ``assignment``."""

    assignment: tuple[tuple[str, Value], ...]
    reason: str = ""

    def violated_by(self, strategy: Strategy) -> bool:
        """True when ``strategy`` contains every factor value of the assignment."""
        return all(_same_value(strategy[f], v) for f, v in self.assignment)

    def __str__(self) -> str:
        parts = " and ".join(f"{f}={v}" for f, v in self.assignment)
        return f"not ({parts})" + (f": {self.reason}" if self.reason else "")


@dataclass(frozen=True)
class Artifact:
    """An artifact some strategies need.

    Attributes:
        name: Unique artifact name (must not clash with a factor name).
        inputs: Factor and artifact names it is made from; they define its cache key.
        needed_when: ``{factor: allowed values}``; the artifact is needed by a strategy whose
            value for every listed factor is among the allowed ones. Empty: always needed.
        per_sample: True when one artifact is made per judged sample (a reference, metrics
            questions); its full cache key then also names the sample.
        description: Free text.
    """

    name: str
    inputs: tuple[str, ...]
    needed_when: tuple[tuple[str, tuple[Value, ...]], ...] = ()
    per_sample: bool = False
    description: str = ""

    def is_needed(self, strategy: Strategy) -> bool:
        """Whether ``strategy`` needs this artifact."""
        return all(
            any(_same_value(strategy[f], v) for v in allowed) for f, allowed in self.needed_when
        )


@dataclass(frozen=True)
class ArtifactRequest:
    """One artifact a strategy needs, with the key it is cached under."""

    name: str
    key: str
    inputs: dict[str, Value] = field(default_factory=dict)
    per_sample: bool = False

    def sample_key(self, sample_id: str) -> str:
        """The cache key of this artifact for one sample (per-sample artifacts only)."""
        return f"{self.key}@{sample_id}" if self.per_sample else self.key


class FactorGraph:
    """Constraints and artifact dependencies over a :class:`FactorSpace`.

    Args:
        space: The factor space the graph describes.

    Example:
        >>> space = FactorSpace({"criteria": ["human", "self"], "autocot": [False, True],
        ...                      "scale": [5, 10]})
        >>> g = FactorGraph(space)
        >>> g.forbid({"criteria": "self", "scale": 5}, reason="demo")
        >>> g.add_artifact("autocot_steps", inputs=["criteria", "scale"],
        ...                needed_when={"autocot": [True]})
        >>> s = space.strategy(criteria="human", autocot=True, scale=10)
        >>> g.is_valid(s), [a.key for a in g.artifacts_for(s)]
        (True, ['autocot_steps[criteria=human,scale=10]'])
    """

    def __init__(self, space: FactorSpace) -> None:
        self.space = space
        self._constraints: list[Constraint] = []
        self._artifacts: dict[str, Artifact] = {}
        self.graph: nx.DiGraph[tuple[str, str]] = nx.DiGraph()
        for name in space.names:
            self.graph.add_node(("factor", name), kind="factor")
        # Constraint edges live in an undirected graph over (factor, value) nodes so that
        # "which values conflict with this one" is a neighbourhood query.
        self.conflicts: nx.Graph[tuple[str, ...]] = nx.Graph()

    # Constraints -------------------------------------------------------------------------
    @property
    def constraints(self) -> tuple[Constraint, ...]:
        """All constraints, in the order they were added."""
        return tuple(self._constraints)

    def forbid(self, assignment: Mapping[str, Value], *, reason: str = "") -> None:
        """Forbid every strategy containing all factor values of ``assignment``.

        Args:
            assignment: One or more ``factor: value`` pairs (one pair removes a value).
            reason: Why; shown in :meth:`violations` messages.

        Raises:
            ValueError: On an empty assignment, an unknown factor or value.
        """
        if not assignment:
            raise ValueError("forbid() needs at least one factor value.")
        items = []
        for f, v in assignment.items():
            factor = self.space[f] if f in self.space else None
            if factor is None:
                raise ValueError(f"Unknown factor `{f}`. Factors: {list(self.space.names)!r}.")
            factor.index(v)  # raises ValueError naming the allowed values
            items.append((f, factor.values[factor.index(v)]))
        c = Constraint(tuple(items), reason)
        self._constraints.append(c)
        nodes = [("value", f, json.dumps(v)) for f, v in items]
        for i, a in enumerate(nodes):
            self.conflicts.add_node(a)
            for b in nodes[i + 1 :]:
                self.conflicts.add_edge(a, b, reason=reason)

    def require(
        self, when: Mapping[str, Value], then: Mapping[str, Sequence[Value]], *, reason: str = ""
    ) -> None:
        """Allow only ``then``'s values for their factors whenever ``when`` holds.

        Compiled into :meth:`forbid` constraints: for each factor in ``then``, each value not
        listed is forbidden together with ``when``.
        """
        for f, allowed in then.items():
            factor = self.space[f]
            for v in allowed:
                factor.index(v)
            for v in factor.values:
                if not any(_same_value(v, a) for a in allowed):
                    self.forbid({**dict(when), f: v}, reason=reason)

    def violations(self, strategy: Strategy) -> list[Constraint]:
        """The constraints ``strategy`` violates (empty when valid)."""
        return [c for c in self._constraints if c.violated_by(strategy)]

    def is_valid(self, strategy: Strategy) -> bool:
        """True when ``strategy`` violates no constraint."""
        return not any(c.violated_by(strategy) for c in self._constraints)

    def check(self, strategy: Strategy) -> None:
        """Raise ``ValueError`` naming the violated constraints, if any."""
        bad = self.violations(strategy)
        if bad:
            raise ValueError(
                f"Strategy {strategy} violates: " + "; ".join(str(c) for c in bad) + "."
            )

    # Artifacts ---------------------------------------------------------------------------
    @property
    def artifacts(self) -> tuple[Artifact, ...]:
        """All artifacts, in topological order."""
        order = [
            n[1] for n in nx.lexicographical_topological_sort(self.graph) if n[0] == "artifact"
        ]
        return tuple(self._artifacts[n] for n in order)

    def add_artifact(
        self,
        name: str,
        *,
        inputs: Iterable[str] = (),
        needed_when: Mapping[str, Sequence[Value]] | None = None,
        per_sample: bool = False,
        description: str = "",
    ) -> Artifact:
        """Declare an artifact, what it is made from, and when it is needed.

        Raises:
            ValueError: On a duplicate name, an unknown input or condition factor/value, or a
                dependency cycle.
        """
        if name in self._artifacts or name in self.space:
            raise ValueError(f"Artifact name `{name}` is already used by a factor or artifact.")
        inputs_t = tuple(inputs)
        for i in inputs_t:
            if i not in self.space and i not in self._artifacts:
                raise ValueError(
                    f"Input `{i}` of artifact `{name}` is neither a factor nor an artifact. "
                    f"Factors: {list(self.space.names)!r}; artifacts: {list(self._artifacts)!r}."
                )
        cond = []
        for f, allowed in (needed_when or {}).items():
            factor = self.space[f] if f in self.space else None
            if factor is None:
                raise ValueError(f"needed_when of `{name}` names unknown factor `{f}`.")
            cond.append((f, tuple(factor.values[factor.index(v)] for v in allowed)))
        art = Artifact(name, inputs_t, tuple(cond), bool(per_sample), description)
        node = ("artifact", name)
        self.graph.add_node(node, kind="artifact")
        for i in inputs_t:
            src = ("factor", i) if i in self.space else ("artifact", i)
            self.graph.add_edge(src, node)
        if not nx.is_directed_acyclic_graph(self.graph):  # pragma: no cover - inputs exist first
            self.graph.remove_node(node)
            raise ValueError(f"Artifact `{name}` would create a dependency cycle.")
        self._artifacts[name] = art
        return art

    def ancestor_factors(self, artifact: str) -> tuple[str, ...]:
        """Factors an artifact depends on, directly or through other artifacts, in space order."""
        if artifact not in self._artifacts:
            raise KeyError(f"Unknown artifact `{artifact}`. Artifacts: {list(self._artifacts)!r}.")
        anc = nx.ancestors(self.graph, ("artifact", artifact))
        names = {n[1] for n in anc if n[0] == "factor"}
        return tuple(n for n in self.space.names if n in names)

    def cache_key(self, artifact: str, strategy: Strategy) -> str:
        """The cache key of ``artifact`` for ``strategy``: ``name[factor=value,...]``."""
        parts = ",".join(f"{f}={strategy[f]}" for f in self.ancestor_factors(artifact))
        return f"{artifact}[{parts}]"

    def artifacts_for(self, strategy: Strategy) -> list[ArtifactRequest]:
        """The artifacts ``strategy`` needs, in topological (generation) order."""
        out = []
        for art in self.artifacts:
            if art.is_needed(strategy):
                factors = self.ancestor_factors(art.name)
                out.append(
                    ArtifactRequest(
                        art.name,
                        self.cache_key(art.name, strategy),
                        {f: strategy[f] for f in factors},
                        art.per_sample,
                    )
                )
        return out

    # Serialisation -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable description (space, constraints, artifacts)."""
        return {
            "space": self.space.to_dict(),
            "constraints": [
                {"assignment": dict(c.assignment), "reason": c.reason} for c in self._constraints
            ],
            "artifacts": [
                {
                    "name": a.name,
                    "inputs": list(a.inputs),
                    "needed_when": {f: list(v) for f, v in a.needed_when},
                    "per_sample": a.per_sample,
                    "description": a.description,
                }
                for a in self._artifacts.values()
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FactorGraph:
        """Inverse of :meth:`to_dict`."""
        g = cls(FactorSpace.from_dict(data["space"]))
        for c in data.get("constraints", []):
            g.forbid(c["assignment"], reason=c.get("reason", ""))
        for a in data.get("artifacts", []):
            g.add_artifact(
                a["name"],
                inputs=a.get("inputs", []),
                needed_when=a.get("needed_when") or None,
                per_sample=bool(a.get("per_sample", False)),
                description=a.get("description", ""),
            )
        return g


def sample_valid(graph: FactorGraph, n: int, rng: np.random.Generator) -> list[Strategy]:
    """Up to ``n`` strategies of ``graph``'s space that break no constraint, each drawn
    uniformly from the whole space with ``rng`` (the invalid draws are redrawn, at most
    ``50 * n`` draws in all, so a space with few valid strategies returns fewer)."""
    space = graph.space
    out: list[Strategy] = []
    for _ in range(50 * n):
        if len(out) == n:
            break
        strategy = space.from_index(int(rng.integers(space.size)))
        if graph.is_valid(strategy):
            out.append(strategy)
    return out
