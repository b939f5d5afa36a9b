"""Artifacts a strategy needs, made once per cache key and shared by every strategy and run.

Generated artifacts (self-generated criteria, AutoCoT steps, metrics questions, self-generated
references) come from the judge's own LM through the generation prompts of Tables 12-18;
in-context examples are selected from labelled data (App. D). The factor graph
(:func:`~judgeopt.judge._factors.hpss_graph`) says which a strategy needs, in which order,
and under which cache key; an :class:`ArtifactStore` keeps them (thread-safe, optionally
persisted as JSON) so a compile never generates the same artifact twice and an exported judge
carries the ones it uses.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from judgeopt._io import write_text_atomic
from judgeopt.data import Record
from judgeopt.search import Strategy

from .._errors import JudgeoptError
from ._examples import ExamplePool
from ._factors import artifact_key, hpss_graph
from ._render import criteria_for, generation_prompt
from ._task import JudgeTask

__all__ = [
    "ArtifactError",
    "ArtifactMaker",
    "ArtifactStore",
    "Artifacts",
    "pairwise_examples",
    "sample_id_of",
]


class ArtifactError(JudgeoptError, RuntimeError):
    """An artifact could not be made (its LM call failed or returned nothing)."""


def sample_id_of(inputs: Mapping[str, str], fields: Sequence[str]) -> str:
    """A stable id for a sample from its input texts (used when the data has no id)."""
    payload = json.dumps({f: inputs.get(f, "") for f in fields}, sort_keys=True, ensure_ascii=False)
    return "sha1:" + hashlib.sha1(payload.encode("utf-8")).hexdigest()[:16]


class ArtifactStore:
    """A thread-safe ``key -> text`` store, optionally persisted to a JSON file.

    Args:
        path: JSON file to load from (if it exists) and to save to on :meth:`save`.
        data: Initial content.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, data: Mapping[str, str] | None = None
    ) -> None:
        self.path = None if path is None else Path(path)
        self._data: dict[str, str] = {}
        self._lock = threading.RLock()
        self._key_locks: dict[str, threading.Lock] = {}
        if self.path is not None and self.path.is_file():
            loaded = json.loads(self.path.read_text(encoding="utf-8"))
            if not isinstance(loaded, dict):
                raise ValueError(f"Artifact store {self.path} must hold a JSON object.")
            self._data.update({str(k): str(v) for k, v in loaded.items()})
        if data:
            self._data.update(data)

    def get(self, key: str) -> str | None:
        """The stored text, or ``None``."""
        with self._lock:
            return self._data.get(key)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._data

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)

    def set(self, key: str, value: str) -> None:
        """Store ``value`` under ``key``."""
        with self._lock:
            self._data[key] = value

    def key_lock(self, key: str) -> threading.Lock:
        """A lock per key, so concurrent judges make each artifact once."""
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def to_dict(self) -> dict[str, str]:
        """A copy of the content."""
        with self._lock:
            return dict(self._data)

    def save(self, path: str | os.PathLike[str] | None = None) -> None:
        """Write the store as JSON (atomically) to ``path`` or the store's own path."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ValueError("ArtifactStore.save() needs a path (the store was made without one).")
        write_text_atomic(target, json.dumps(self.to_dict(), ensure_ascii=False, indent=1))


@dataclass
class Artifacts:
    """The artifacts one judgement needs, ready for the render functions."""

    criteria_text: str | None = None
    autocot_steps: str | None = None
    metrics: str | None = None
    reference: str | None = None
    examples: list[tuple[Mapping[str, str], int | float | str]] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)

    def render_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for the render functions."""
        return {
            "criteria_text": self.criteria_text,
            "autocot_steps": self.autocot_steps,
            "metrics": self.metrics,
            "reference": self.reference,
            "examples": self.examples,
        }


def _completion_text(output: Any) -> str:
    if isinstance(output, dict):
        output = output.get("text")
    return "" if output is None else str(output)


class ArtifactMaker:
    """Makes (or fetches) the artifacts of a strategy for one (task, aspect).

    Args:
        task: The task.
        aspect: The aspect.
        store: Where artifacts are kept; shared by every strategy of a compile.
        pool: Labelled records for in-context examples (``None``: strategies with examples
            need ``fixed_examples``).
        example_seed: Seed of the stratified example selection.
        fixed_examples: ``{cache key: [{"id", "inputs", "rating", "spare"?}]}`` as exported
            with a judge, used instead of ``pool``.
    """

    def __init__(
        self,
        task: JudgeTask,
        aspect: str,
        store: ArtifactStore,
        *,
        pool: ExamplePool | None = None,
        example_seed: int = 0,
        fixed_examples: Mapping[str, list[dict[str, Any]]] | None = None,
    ) -> None:
        self.task = task
        self.aspect = aspect
        self.store = store
        self.pool = pool
        self.example_seed = example_seed
        self.fixed_examples = dict(fixed_examples or {})
        self.graph = hpss_graph(task)

    def _generate(self, key: str, messages_text: str, lm: Any) -> str:
        cached = self.store.get(key)
        if cached is not None:
            return cached
        with self.store.key_lock(key):
            cached = self.store.get(key)
            if cached is not None:
                return cached
            messages = [{"role": "system", "content": self.task.system}] if self.task.system else []
            messages.append({"role": "user", "content": messages_text})
            try:
                outputs = lm(messages=messages)
            except Exception as e:  # noqa: BLE001 - any LM failure fails this artifact only
                raise ArtifactError(f"Could not make artifact {key}: {e}") from e
            text = _completion_text(outputs[0] if outputs else None).strip()
            if not text:
                raise ArtifactError(f"Artifact {key}: the LM returned an empty text.")
            self.store.set(key, text)
            return text

    def prepare(
        self, strategy: Strategy, inputs: Mapping[str, str], *, sample_id: str, lm: Any
    ) -> Artifacts:
        """The artifacts ``strategy`` needs for one sample, made in dependency order.

        Raises:
            ArtifactError: When a generated artifact's LM call fails.
            ValueError: When in-context examples are needed but no pool was given.
        """
        out = Artifacts()
        task, aspect = self.task, self.aspect
        scale = int(strategy["scale"]) if "scale" in strategy else None
        for req in self.graph.artifacts_for(strategy):
            key = artifact_key(task, aspect, req, sample_id if req.per_sample else None)
            out.keys[req.name] = key
            if req.name == "self_criteria":
                out.criteria_text = self._generate(
                    key, generation_prompt(task, aspect, "criteria", scale=scale), lm
                )
            elif req.name == "autocot_steps":
                crit = criteria_for(task, aspect, strategy, out.criteria_text)
                out.autocot_steps = self._generate(
                    key,
                    generation_prompt(task, aspect, "autocot", scale=scale, criteria_text=crit),
                    lm,
                )
            elif req.name == "metrics_questions":
                crit = criteria_for(task, aspect, strategy, out.criteria_text)
                out.metrics = self._generate(
                    key,
                    generation_prompt(
                        task, aspect, "metrics", scale=scale, criteria_text=crit, inputs=inputs
                    ),
                    lm,
                )
            elif req.name == "self_reference":
                out.reference = self._generate(
                    key, generation_prompt(task, aspect, "reference", inputs=inputs), lm
                )
            elif req.name == "icl_examples":
                out.examples = self._examples(strategy, key=key, sample_id=sample_id, inputs=inputs)
        # Self-generated criteria are shown in the judge prompt itself too.
        return out

    def examples_shown(
        self, strategy: Strategy, inputs: Mapping[str, str], *, sample_id: str
    ) -> list[tuple[Mapping[str, str], int | float | str]]:
        """The in-context examples ``strategy`` shows when it judges the sample (those
        :meth:`prepare` gives, without making any other artifact: no LM call); empty when
        it shows none.

        Raises:
            ValueError: When in-context examples are needed but no pool was given.
        """
        for req in self.graph.artifacts_for(strategy):
            if req.name == "icl_examples":
                key = artifact_key(
                    self.task, self.aspect, req, sample_id if req.per_sample else None
                )
                return self._examples(strategy, key=key, sample_id=sample_id, inputs=inputs)
        return []

    def examples_for_export(self, strategy: Strategy) -> dict[str, list[dict[str, Any]]]:
        """The strategy's example selection with one spare per slot, for the exported judge."""
        reqs = [r for r in self.graph.artifacts_for(strategy) if r.name == "icl_examples"]
        if not reqs:
            return {}
        key = artifact_key(self.task, self.aspect, reqs[0])
        if key in self.fixed_examples:
            return {key: self.fixed_examples[key]}
        names = self.task.input_names
        items = []
        default = self._select(strategy, ())
        for i, (rec, rating) in enumerate(default):
            spare_rec, spare_rating = self._select(strategy, (rec.id,))[i]
            items.append(
                {
                    "id": sample_id_of(rec.inputs, names),
                    "inputs": dict(rec.inputs),
                    "rating": rating,
                    "spare": {
                        "id": sample_id_of(spare_rec.inputs, names),
                        "inputs": dict(spare_rec.inputs),
                        "rating": spare_rating,
                    },
                }
            )
        return {key: items}

    # In-context examples -------------------------------------------------------------------
    def _example_scale(self, strategy: Strategy) -> int:
        if self.task.mode == "pairwise":
            return 0
        return int(strategy["scale"])

    def _select_kwargs(self, n: int, scale: int) -> dict[str, Any]:
        lo, hi = self.task.human_range(self.aspect)
        rmin, rmax = self.task.rating_bounds(self.aspect, scale)
        # Ratings are rescaled to the rating range the judge is asked for at this scale.
        return {
            "aspect": self.aspect,
            "n": n,
            "scale": rmax,
            "score_range": (lo, hi),
            "seed": self.example_seed,
            "rating_min": rmin,
        }

    def _select(
        self, strategy: Strategy, exclude_ids: Sequence[str]
    ) -> list[tuple[Record, int | float | str]]:
        n = int(strategy["examples"])
        if self.pool is None:
            raise ValueError(
                f"Strategy uses {n} in-context examples but the judge has no labelled pool: "
                "compile it with a trainset, or load an exported judge that carries them."
            )
        if self.task.mode == "pairwise":
            return [
                *pairwise_examples(
                    self.pool.records, n=n, seed=self.example_seed, exclude_ids=exclude_ids
                )
            ]
        sel = self.pool.select(
            **self._select_kwargs(n, self._example_scale(strategy)), exclude_ids=list(exclude_ids)
        )
        return [(rec, rating) for rec, rating in sel]

    def _examples(
        self, strategy: Strategy, *, key: str, sample_id: str, inputs: Mapping[str, str]
    ) -> list[tuple[Mapping[str, str], int | float | str]]:
        if key in self.fixed_examples:
            # An item never serves as its own example: swap in the slot's spare.
            own = sample_id_of(inputs, self.task.input_names)
            chosen = []
            for item in self.fixed_examples[key]:
                use = item["spare"] if item["id"] == own and "spare" in item else item
                chosen.append((use["inputs"], use["rating"]))
            return chosen
        return [(rec.inputs, rating) for rec, rating in self._select(strategy, (sample_id,))]


def pairwise_examples(
    records: Sequence[Record], *, n: int, seed: int, exclude_ids: Sequence[str] = ()
) -> list[tuple[Record, str]]:
    """``n`` labelled pairs balanced over the labels (a, b, tie), deterministic for a seed.

    The pairwise analogue of App. D's stratification: labels take turns (a, b, tie, a, ...),
    each label's items in a seeded random order; excluded ids are never returned.

    Raises:
        ValueError: When fewer than ``n`` labelled records remain after exclusion.
    """
    import numpy as np

    excluded = set(exclude_ids)
    by_label: dict[str, list[Record]] = {}
    for r in records:
        if r.label is not None and r.id not in excluded:
            by_label.setdefault(r.label, []).append(r)
    if sum(len(v) for v in by_label.values()) < n:
        raise ValueError(
            f"Need {n} labelled pairs for in-context examples; only "
            f"{sum(len(v) for v in by_label.values())} are available."
        )
    rng = np.random.default_rng(seed)
    queues = {
        lab: [items[i] for i in rng.permutation(len(items))]
        for lab, items in sorted(by_label.items())
    }
    out: list[tuple[Record, str]] = []
    while len(out) < n:
        for lab, q in queues.items():
            if q and len(out) < n:
                out.append((q.pop(0), lab))
    return out
