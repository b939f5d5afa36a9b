"""What a block of LM work spent (:func:`spent`: calls, cache hits, tokens, wall seconds) and a
clean start for the embedded model's batch engines (:func:`fresh_engines`), for the scripts
that time judging: ``cost.py``, ``compile_cost.py``, ``stop_at_score.py``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["fresh_engines", "spent"]


@contextmanager
def spent(lm: Any) -> Iterator[dict[str, Any]]:
    """Yield a dict that holds, once the block has run, what ``lm`` spent in it: ``calls``
    (requests that reached the backend), ``cache_hits``, ``prompt_tokens``,
    ``completion_tokens`` (as ``lm.stats()`` counts them) and the block's wall ``seconds``.

    Nothing is filled in when the block raises.
    """
    out: dict[str, Any] = {}
    s0, t0 = lm.stats(), time.perf_counter()
    yield out
    seconds, s1 = time.perf_counter() - t0, lm.stats()
    out.update(
        calls=s1.calls - s0.calls,
        cache_hits=s1.cache_hits - s0.cache_hits,
        prompt_tokens=s1.prompt_tokens - s0.prompt_tokens,
        completion_tokens=s1.completion_tokens - s0.completion_tokens,
        seconds=seconds,
    )


def fresh_engines(lm: Any) -> None:
    """Close the embedded model's batch engines, so that its next call starts one with empty
    slots (no prompt blocks left from earlier work to reuse); nothing for other LMs."""
    get_handle = getattr(lm, "_get_handle", None)
    if get_handle is None:
        return
    handle = get_handle()
    for engine in list(handle.engines.values()):
        engine.close()
    handle.engines.clear()
