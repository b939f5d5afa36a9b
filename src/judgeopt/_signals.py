"""SIGTERM as Ctrl-C for long runs, either of them only once, and the spending limit that
stops a run the same way.

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

__all__ = ["SpendLimitReached", "interrupt_reason", "sigterm_as_interrupt"]


class SpendLimitReached(KeyboardInterrupt):
    """The next LM call would cross a spending limit (``max_calls``, ``max_cost``).

    A ``KeyboardInterrupt`` on purpose: a run stops as it does on Ctrl-C, keeping what it has
    judged (a compile's checkpoint, ``evaluate``'s finished items), and the same command with
    a higher limit resumes. ``limit`` names the limit reached.
    """

    def __init__(self, message: str, *, limit: str) -> None:
        super().__init__(message)
        self.limit = limit


@contextmanager
def sigterm_as_interrupt(*, ignore_after: bool = False) -> Iterator[None]:
    """Within the block, SIGTERM raises ``KeyboardInterrupt("SIGTERM")`` in the main thread,
    and SIGINT (Ctrl-C) ``KeyboardInterrupt()`` as Python's own handler does; once only.

    A signal that comes while the first interrupt is being handled is ignored: Ctrl-C pressed
    twice (or a SIGINT sent to the process and again to its group) no longer cuts the clean-up
    or the line that says what was kept, with a traceback. SIGINT is left alone when it is
    not Python's default handler's (ignored in a ``nohup ... &`` run, or the program's own).

    The previous handlers are restored on exit; with ``ignore_after`` (the command owns the
    process), after an interrupt both signals stay ignored, so the exit that follows is not
    cut either (it waits for no judge call: they run on daemon threads). Outside the main
    thread (a program calling ``judgeopt.cli.main`` from a worker thread) signal handlers
    cannot be set, and the block runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = False

    def stop(signum: int, frame: object) -> None:
        nonlocal fired
        if fired:
            return  # the run is stopping already
        fired = True
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signals = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signals.append(signal.SIGINT)
    previous = {signum: signal.signal(signum, stop) for signum in signals}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_IGN if ignore_after and fired else handler)


def interrupt_reason(error: KeyboardInterrupt) -> str:
    """``"SIGTERM"`` for an interrupt raised by :func:`sigterm_as_interrupt`, the limit's
    message for :class:`SpendLimitReached`, else ``"Ctrl-C"`` (Python's own SIGINT handler
    raises it without arguments)."""
    return str(error.args[0]) if error.args else "Ctrl-C"
