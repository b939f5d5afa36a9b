"""The run journal: what a compile writes to its checkpoint directory, and how it resumes.

A checkpoint directory holds

* ``fingerprint.json``: what the results belong to (:func:`judgeopt._checkpoint.run_fingerprint`);
* ``search_state.json``: the search after its last told evaluation;
* ``evaluations.jsonl``: one summary per told evaluation;
* ``artifacts.json``: the generated prompt artifacts (:class:`judgeopt.judge.ArtifactStore`);
* ``pending.jsonl``: the judged items of the candidate in progress (:class:`PendingItems`);
* ``items.jsonl``: every judged item of every strategy (:class:`ItemStore`),

so an interrupted compile resumes where it stopped without repeating a finished judge call.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .._checkpoint import FINGERPRINT_FILE, check_fingerprint
from .._io import write_text_atomic
from ..evaluate import ItemResult
from ..lm import LMUnavailable
from ..search import Search, Strategy
from ._summary import StrategySummary

__all__ = ["ItemStore", "PendingItems", "RunJournal", "progress_log", "strategy_key"]

#: One line per finished strategy and where a run resumes; ``judgeopt compile`` prints it.
progress_log = logging.getLogger("judgeopt.progress")


def strategy_key(strategy: Strategy | Mapping[str, Any]) -> str:
    """A strategy's identity as text (its values, sorted by factor): the key of the judged
    items and of the distinct strategies."""
    values = strategy.as_dict() if isinstance(strategy, Strategy) else dict(strategy)
    return json.dumps(values, sort_keys=True, default=str)


@dataclass(frozen=True)
class JournalFiles:
    """The files of a checkpoint directory."""

    state: Path
    evals: Path
    artifacts: Path
    pending: Path
    items: Path
    fingerprint: Path

    @classmethod
    def under(cls, d: Path) -> JournalFiles:
        """The files of checkpoint directory ``d``."""
        return cls(
            state=d / "search_state.json",
            evals=d / "evaluations.jsonl",
            artifacts=d / "artifacts.json",
            pending=d / "pending.jsonl",
            items=d / "items.jsonl",
            fingerprint=d / FINGERPRINT_FILE,
        )

    def results(self) -> tuple[Path, ...]:
        """The files that hold a run's results (all but the fingerprint)."""
        return (self.state, self.evals, self.artifacts, self.pending, self.items)


class RunJournal:
    """The checkpoint of one compile (``None`` directory: nothing is written or resumed).

    Args:
        directory: The checkpoint directory, or ``None``.
    """

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.files = None if directory is None else JournalFiles.under(directory)
        files = self.files
        self.pending = PendingItems(None if files is None else files.pending)
        # Every judged item of every strategy (search, confirmation, comparison), so that no
        # judgement is made twice, with or without the LM's cache.
        self.items = ItemStore(None if files is None else files.items)
        self.resuming = False
        #: Judged items of the candidate in progress kept from an interrupted run (as many
        #: judge calls fewer for the run that resumes).
        self.pending_kept = 0

    @property
    def artifacts_path(self) -> Path | None:
        """Where the generated artifacts are kept (``None``: in memory only)."""
        return None if self.files is None else self.files.artifacts

    def open(self, fingerprint: Mapping[str, Any], *, restart: bool) -> None:
        """Check the directory against this run's ``fingerprint`` and record it.

        ``restart`` discards the directory's results first.

        Raises:
            CheckpointMismatchError: When the directory holds results of another run.
        """
        if self.directory is None or self.files is None:
            return
        if restart:
            self._discard(self.files)
        has_results = any(p.is_file() for p in self.files.results())
        self.resuming = check_fingerprint(self.directory, fingerprint, has_results=has_results)
        # The stores were read before a restart could discard their files: read them again.
        self.items = ItemStore(self.files.items)

    def resume(
        self, search: Search, *, name: str, seed: int, budget: int
    ) -> tuple[Search, list[StrategySummary]]:
        """The search and evaluation summaries to continue from (``search`` and none when
        there is nothing to resume).

        Raises:
            ValueError: When the saved search is another search or seed.
        """
        files = self.files
        if files is None or not files.state.is_file():
            if self.resuming:
                progress_log.info(
                    "resuming from %s (0 of %d strategies done; the judgements "
                    "made so far are kept)",
                    self.directory,
                    budget,
                )
            return search, []
        state = json.loads(files.state.read_text(encoding="utf-8"))
        saved_name, saved_seed = state.get("search"), (state.get("params") or {}).get("seed")
        if (saved_name, saved_seed) != (name, seed):
            raise ValueError(
                f"Checkpoint {files.state} is for search {saved_name!r} seed {saved_seed!r}; "
                f"this compile is {name!r} seed {seed}. Use another checkpoint_dir."
            )
        search = Search.from_state(state, budget=budget)
        summaries: list[StrategySummary] = []
        if files.evals.is_file():
            # A line written just before an interruption, for an evaluation the state does
            # not hold yet, is dropped: that candidate is judged again (from the pending
            # items, so with no repeated call).
            summaries = [
                s
                for s in (
                    StrategySummary.from_dict(json.loads(line))
                    for line in files.evals.read_text(encoding="utf-8").splitlines()
                    if line
                )
                if s.number < search.n_evaluations
            ]
        note = ""
        if files.pending.is_file():
            n_pending = max(0, len(files.pending.read_text(encoding="utf-8").splitlines()) - 1)
            self.pending_kept = n_pending
            if n_pending:
                note = f"; {n_pending} judged item(s) of strategy {search.n_evaluations + 1} kept"
        progress_log.info(
            "resuming from %s (%d of %d strategies done%s)",
            self.directory,
            search.n_counted,
            budget,
            note,
        )
        return search, summaries

    def record(self, search: Search, summary: StrategySummary, *, artifacts: Any = None) -> None:
        """Save a told evaluation: the generated ``artifacts`` (an ``ArtifactStore``), its
        summary, then the search's state; and forget the candidate's pending items."""
        if self.files is not None:
            if artifacts is not None:
                artifacts.save()
            with self.files.evals.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(summary.to_dict(), ensure_ascii=False) + "\n")
            write_text_atomic(self.files.state, json.dumps(search.state_dict()))
        self.pending.clear()

    def stopped(self, error: LMUnavailable, where: str, done: int) -> LMUnavailable:
        """``error`` with where the compile stopped and what is kept."""
        kept = (
            f"{done} finished strategies and every judgement made so far are kept in "
            f"{self.directory}; run the same command again to continue from there"
            if self.directory is not None
            else "no checkpoint_dir was given, so the judgements made are lost"
        )
        return LMUnavailable(
            f"the compile stopped at {where}: {error}. {kept}.",
            model=error.model,
            endpoint=error.endpoint,
            last=error,
        )

    def _discard(self, files: JournalFiles) -> None:
        """Delete the checkpoint's files (``restart``)."""
        paths = (*files.results(), files.fingerprint)
        removed = [p.name for p in paths if p.is_file()]
        for p in paths:
            p.unlink(missing_ok=True)
        if removed:
            progress_log.info(
                "restart: discarded the checkpoint in %s (%s)", self.directory, ", ".join(removed)
            )


class ItemStore:
    """Judged items per strategy (``items.jsonl``), so a resumed compile repeats no call.

    A failed call is not stored: it is tried again on resume.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._items: dict[str, dict[str, ItemResult]] = {}
        if path is not None and path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    row = json.loads(line)
                    item = ItemResult(**row["item"])
                except (ValueError, TypeError, KeyError):
                    continue  # a line cut by an interruption
                self._items.setdefault(row["strategy"], {})[item.id] = item

    def items(self, strategy: Strategy | Mapping[str, Any]) -> dict[str, ItemResult]:
        """The stored items of ``strategy`` (or its plain-data form) by id."""
        return dict(self._items.get(strategy_key(strategy), {}))

    def add(self, strategy: Strategy, item: ItemResult) -> None:
        """Store one judged item (not a failed call)."""
        if item.error is not None:
            return
        key = strategy_key(strategy)
        self._items.setdefault(key, {})[item.id] = item
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(
                    json.dumps({"strategy": key, "item": asdict(item)}, ensure_ascii=False) + "\n"
                )


class PendingItems:
    """The judged items of the candidate in progress, one JSON line each (``pending.jsonl``).

    The first line names the candidate (evaluation number and strategy); a resumed compile
    reuses the items only for that same candidate, so an interruption mid-candidate repeats
    no finished judge call even without the LM's cache. Cleared once the candidate is told.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._active = False

    def resume(self, number: int, strategy: Strategy) -> dict[str, ItemResult]:
        """Items judged earlier for this candidate; starts a fresh file otherwise."""
        done: dict[str, ItemResult] = {}
        if self.path is None:
            return done
        header = {"number": number, "strategy": strategy.as_dict()}
        if self.path.is_file():
            lines = self.path.read_text(encoding="utf-8").splitlines()
            try:
                if lines and json.loads(lines[0]) == header:
                    for line in lines[1:]:
                        item = ItemResult(**json.loads(line))
                        done[item.id] = item
            except (ValueError, TypeError):
                # A line cut by the interruption ends the usable part.
                pass
        lines = [json.dumps(header, ensure_ascii=False)] + [
            json.dumps(asdict(item), ensure_ascii=False) for item in done.values()
        ]
        write_text_atomic(self.path, "\n".join(lines) + "\n")
        self._active = True
        return done

    def add(self, item: ItemResult) -> None:
        """Record one judged item (a failed call is not recorded: it is retried on resume)."""
        if self.path is None or not self._active or item.error is not None:
            return
        # NOTE: opened per item, so an interruption leaves no open handle and at most one
        # cut line (ignored on resume); negligible next to a judge call.
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(asdict(item), ensure_ascii=False) + "\n")

    def clear(self) -> None:
        """The candidate was told: forget its items."""
        self._active = False
        if self.path is not None:
            self.path.unlink(missing_ok=True)
