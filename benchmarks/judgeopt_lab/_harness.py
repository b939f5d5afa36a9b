"""Plumbing shared by the benchmark scripts (``benchmarks/*.py``): where the data is, seeded
samples of whole groups, intervals, markdown tables, JSON results, and runs that Ctrl-C or
SIGTERM stop cleanly (exit status 130) so the same command resumes them."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

__all__ = [
    "EXIT_INTERRUPTED",
    "markdown_table",
    "normal_interval",
    "pair_file",
    "provenance",
    "run_interruptible",
    "sample_groups",
    "shared_data_dir",
    "write_json",
]

#: The exit status of a run stopped by Ctrl-C or SIGTERM (as a shell reports SIGINT).
EXIT_INTERRUPTED = 130


class _Grouped(Protocol):
    """What :func:`sample_groups` reads of a record (:class:`judgeopt.data.Record` has it)."""

    @property
    def id(self) -> str: ...

    @property
    def group_id(self) -> str | None: ...


R = TypeVar("R", bound=_Grouped)


def shared_data_dir() -> Path:
    """The shared datasets: ``$JUDGEOPT_DATA``, else ``../shared/data`` beside the project
    checkout (the path is returned whether or not it exists)."""
    env = os.environ.get("JUDGEOPT_DATA")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"


def pair_file(task: str, split: str) -> Path:
    """A task's ``split`` file (``valid`` or ``test``) in the shared data, else its only file
    (``full.jsonl``: SummEval has no split)."""
    folder = shared_data_dir() / task
    path = folder / f"{split}.jsonl"
    return path if path.is_file() else folder / "full.jsonl"


def sample_groups(records: Sequence[R], n_items: int, seed: int, *, cut: bool = False) -> list[R]:
    """Whole groups of ``records``, in a seeded random order, until ``n_items`` are reached.

    A record without a group is a group of its own. By default the chosen records keep their
    order in ``records`` (at least ``n_items`` of them, whole groups only); with ``cut`` they
    come group by group in the order drawn and are cut to ``n_items``.
    """

    def key(r: R) -> str:
        return r.group_id or r.id

    groups = sorted({key(r) for r in records})
    chosen: list[str] = []
    count = 0
    for i in np.random.default_rng(seed).permutation(len(groups)):
        if count >= n_items:
            break
        g = groups[int(i)]
        chosen.append(g)
        count += sum(key(r) == g for r in records)
    if not cut:
        keep = set(chosen)
        return [r for r in records if key(r) in keep]
    order = {g: k for k, g in enumerate(chosen)}
    picked = sorted((r for r in records if key(r) in order), key=lambda r: order[key(r)])
    return picked[:n_items]


def normal_interval(values: Sequence[float]) -> list[float]:
    """The mean +- 1.96 standard errors of ``values`` (``[nan, nan]`` below two values)."""
    if len(values) < 2:
        return [float("nan"), float("nan")]
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / len(values) ** 0.5
    return [mean - 1.96 * se, mean + 1.96 * se]


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A markdown table: ``| a | b |``, ``|---|---|``, then one line per row (cells as
    ``str``)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def provenance() -> dict[str, Any]:
    """What made a result: the project's commit (``+dirty`` when the checkout had uncommitted
    changes; ``None`` outside a git checkout) and the command line (the script and its
    arguments, the settings)."""
    root = Path(__file__).resolve().parents[2]
    commit: str | None = None
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        commit = head + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return {"commit": commit, "command": [Path(sys.argv[0]).name, *sys.argv[1:]]}


def write_json(
    path: str | os.PathLike[str],
    payload: Any,
    *,
    indent: int | None = 2,
    default: Callable[[Any], Any] | None = None,
    provenance_key: str | None = "provenance",
) -> Path:
    """Write ``payload`` as JSON (and a final newline) to ``path``, creating its folder; the
    file is replaced atomically, so an interrupted run never leaves half a result.

    A mapping payload gets, under ``provenance_key`` (``None``: not at all), the commit and
    the command that made it (:func:`provenance`), unless it holds that key already.
    """
    if provenance_key is not None and isinstance(payload, dict) and provenance_key not in payload:
        payload = {**payload, provenance_key: provenance()}
    text = json.dumps(payload, indent=indent, default=default) + "\n"
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)
    return target


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises ``KeyboardInterrupt("SIGTERM")`` in the main thread
    (once); the previous handler is put back after. Outside the main thread, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = False

    def stop(signum: int, frame: object) -> None:
        nonlocal fired
        if not fired:
            fired = True
            raise KeyboardInterrupt("SIGTERM")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_interruptible(
    body: Callable[[], int], *, on_stop: Callable[[], None], sigterm: bool = True
) -> int:
    """Run ``body`` and return its exit status; Ctrl-C (and, with ``sigterm``, SIGTERM: how a
    ``nohup ... &`` run is stopped) calls ``on_stop`` (say what was kept and how to resume)
    and returns :data:`EXIT_INTERRUPTED`. The previous SIGTERM handler is put back after."""
    try:
        with _sigterm_as_interrupt() if sigterm else nullcontext():
            return body()
    except KeyboardInterrupt:
        on_stop()
        return EXIT_INTERRUPTED
