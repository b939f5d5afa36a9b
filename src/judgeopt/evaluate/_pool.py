"""Judge calls on daemon threads: an interrupted run ends without waiting for its calls in flight.

``concurrent.futures.ThreadPoolExecutor`` joins its worker threads when the interpreter exits,
so a run stopped by Ctrl-C went on for as long as its calls in flight took (an embedded
model's explanations, a hung server's 120 s timeout) after it said it had stopped, and a second
Ctrl-C in that wait printed an ``Exception ignored ... threading`` traceback. Here the workers
are daemon threads: the interpreter does not wait for them, and a call still in flight at exit
is simply never answered (its judgement was not kept, so a re-run makes it). Signals reach
only the main thread, which is the only one that takes results.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

__all__ = ["CallPool"]

T = TypeVar("T")


class CallPool(Generic[T]):
    """Run ``calls`` on up to ``threads`` daemon threads, started when iteration begins.

    Iterate to take ``(index, result)`` pairs in completion order (in the calling thread); an
    exception a call raised (any ``BaseException``) is raised there when its turn comes.
    :meth:`stop` drops the calls not yet started.

    Args:
        calls: The calls (no arguments; e.g. ``functools.partial`` or ``Context.run``).
        threads: Threads to run them on (at most one per call).
        name: Prefix of the threads' names.
    """

    def __init__(self, calls: Sequence[Callable[[], T]], threads: int, *, name: str) -> None:
        self._calls = list(calls)
        self._todo: queue.SimpleQueue[int] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[tuple[int, T | None, BaseException | None]] = (
            queue.SimpleQueue()
        )
        self._stopped = threading.Event()
        self._left = len(self._calls)
        for i in range(len(self._calls)):
            self._todo.put(i)
        self._threads = min(threads, len(self._calls))
        self._name = name
        self._started = False

    def _start(self) -> None:
        """Start the threads (at the first iteration, so that an interrupt while they start
        reaches the caller's ``try`` and its :meth:`stop`: a KeyboardInterrupt raised in the
        main thread while it waits for a new thread to start would otherwise leave the
        workers running every call with nobody to stop them)."""
        self._started = True
        for k in range(self._threads):
            threading.Thread(target=self._work, name=f"{self._name}_{k}", daemon=True).start()

    def _work(self) -> None:
        while not self._stopped.is_set():
            try:
                i = self._todo.get_nowait()
            except queue.Empty:
                return
            try:
                result = self._calls[i]()
            except BaseException as exc:  # noqa: BLE001 - handed to the calling thread
                self._done.put((i, None, exc))
            else:
                self._done.put((i, result, None))

    def __iter__(self) -> Iterator[tuple[int, T]]:
        if not self._started:
            self._start()
        while self._left:
            # NOTE: a short timeout, not one blocking get: the main thread runs a signal's
            # handler only between waits, and a SimpleQueue wait without a timeout let a
            # SIGTERM wait until the calls in flight had all finished.
            try:
                i, result, exc = self._done.get(timeout=0.05)
            except queue.Empty:
                continue
            self._left -= 1
            if exc is not None:
                raise exc
            yield i, result  # type: ignore[misc]

    def stop(self) -> list[tuple[int, T]]:
        """Start no further call; the ``(index, result)`` pairs finished but not yet taken
        (calls that raised are left out). Calls in flight finish in the background."""
        self._stopped.set()
        out: list[tuple[int, T]] = []
        while True:
            try:
                i, result, exc = self._done.get_nowait()
            except queue.Empty:
                return out
            if exc is None:
                out.append((i, result))  # type: ignore[arg-type]
