"""The check call made before a run judges anything: a dead endpoint stops at once.

Compile (:mod:`judgeopt.teleprompt`) and grid runs (:mod:`judgeopt.grid`) both make it, so it
lives here, below both.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .._validation import check_number

__all__ = ["CHECK_TIMEOUT", "ENDPOINT_CHECK", "check_endpoint", "one_token_call"]

log = logging.getLogger("judgeopt.evaluate")

#: The messages of the check call made before a run judges anything.
ENDPOINT_CHECK: tuple[dict[str, str], ...] = ({"role": "user", "content": "Reply with OK."},)

#: Seconds the check call waits for its one-token answer (apart from the judge calls' own
#: ``timeout``, 120 s by default): a server that accepts connections but never answers is
#: declared dead after about this long.
CHECK_TIMEOUT = 30.0


def check_endpoint(
    lm: Any, *, timeout: float | None = CHECK_TIMEOUT, before: str = "the search"
) -> None:
    """One short call, uncached, before any judging: a dead endpoint stops at once.

    The call asks for one token and waits at most ``timeout`` seconds for it (not the LM's
    per-call timeout). A refused connection, a 5xx or a rate limit is tried once more after
    the LM's backoff (when the LM retries at all); a timed-out check is not: it already waited
    ``timeout`` seconds. In-process models (nothing to reach) are not checked.

    Args:
        lm: The LM the run will judge with.
        timeout: Seconds to wait for the answer (``None``: the LM's own timeout).
        before: What the check comes before, as the error message names it.

    Raises:
        LMUnavailable: When the endpoint does not answer (connection, timeout, 5xx, auth,
            a rejected request).
        ValueError: When ``timeout`` is not a positive number.
    """
    # lazy: judgeopt.lm loads DSPy and LiteLLM (evaluate loads without them)
    from ..lm import TRANSIENT_KINDS, JudgeLM, LMError, LMUnavailable, RouterLM

    timeout = check_number(
        timeout, "timeout", min_value=0, min_open=True, allow_none=True, owner="check_endpoint"
    )
    if not isinstance(lm, (JudgeLM, RouterLM)):
        # In process (nothing to reach) or not a judgeopt LM: the breaker still guards it.
        return
    quiet = _quiet_copy(lm)
    attempts = 1
    if isinstance(quiet, JudgeLM):
        # One retry at most, made here: a dead endpoint is reported in about a second, not
        # after the full backoff of a judge call, and a timeout is not waited for twice.
        attempts = 1 + min(1, quiet.num_retries)
        quiet.num_retries = 0
    extra = {} if timeout is None else {"timeout": timeout}
    for attempt in range(attempts):
        try:
            quiet.forward(
                messages=[dict(m) for m in ENDPOINT_CHECK], max_tokens=1, cache=False, **extra
            )
            return
        except LMError as e:
            error = e
        if error.kind == "timeout" or not error.retryable or attempt + 1 >= attempts:
            break
        time.sleep(quiet.backoff_delay(0, error.retry_after))
    if error.kind not in TRANSIENT_KINDS | {"auth", "bad_request"}:
        # Not a sign of an unusable endpoint (e.g. an odd answer to the odd question):
        # the judge calls will tell.
        log.warning("the check call before %s failed (%s); judging anyway", before, error)
        return
    raise LMUnavailable(
        f"the model does not answer a check call made before {before}, so nothing "
        f"was judged: {error}",
        model=error.model,
        endpoint=error.endpoint,
        last=error,
    ) from error


def _quiet_copy(lm: Any) -> Any:
    """A copy of ``lm`` for one-token calls: a one-token answer ends with
    ``finish_reason="length"`` by design, which is not a truncated judgement."""
    quiet = lm.copy()
    quiet._check_truncation = lambda *_a, **_k: None
    return quiet


def one_token_call(
    lm: Any, messages: Sequence[Mapping[str, str]] = ENDPOINT_CHECK
) -> tuple[float, int] | None:
    """Time one uncached call of ``messages`` that writes one token: its seconds and the
    prompt tokens the endpoint counted. With the check call's messages this is the part of
    every call on the endpoint that depends on neither its prompt nor its answer (round
    trip, queueing, the first token); with a judge's prompt, it adds the time of reading
    that prompt. A cost plan measures both (:func:`~judgeopt.evaluate.time_judgement`).

    No retry. ``None`` for in-process models (no round trip: their time is their tokens')
    and when the call fails.
    """
    from ..lm import JudgeLM, LMError, RouterLM  # lazy: judgeopt.lm loads DSPy and LiteLLM

    if not isinstance(lm, (JudgeLM, RouterLM)):
        return None
    quiet = _quiet_copy(lm)
    if isinstance(quiet, JudgeLM):
        quiet.num_retries = 0
    before = quiet.stats().prompt_tokens
    started = time.perf_counter()
    try:
        quiet.forward(messages=[dict(m) for m in messages], max_tokens=1, cache=False)
    except LMError:
        return None
    return time.perf_counter() - started, quiet.stats().prompt_tokens - before
