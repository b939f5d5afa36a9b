"""SIGTERM as Ctrl-C for long runs.

A run started in the background (``nohup judgeopt compile ... &``) ignores SIGINT, so
SIGTERM is how it is stopped. Python's default for SIGTERM ends the process at once, with
no word on what was kept; within :func:`sigterm_as_interrupt` SIGTERM raises
``KeyboardInterrupt`` instead, so the command can say where its checkpoint is and how to
resume. Judgements already written to a checkpoint survive either way.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["interrupt_reason", "sigterm_as_interrupt"]


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises ``KeyboardInterrupt("SIGTERM")`` in the main thread.

    The previous handler is restored on exit. Outside the main thread (a program calling
    ``judgeopt.cli.main`` from a worker thread) signal handlers cannot be set, and the block
    runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupt_reason(error: KeyboardInterrupt) -> str:
    """``"SIGTERM"`` for an interrupt raised by :func:`sigterm_as_interrupt`, else
    ``"Ctrl-C"`` (Python's own SIGINT handler raises it without arguments)."""
    return str(error.args[0]) if error.args else "Ctrl-C"
