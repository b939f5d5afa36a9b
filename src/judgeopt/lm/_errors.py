"""The LM error tree and the translation of LiteLLM / openai / llama.cpp failures into it.

Every failure of a language-model call surfaces as one of these classes::

    LMError                      (dspy.LMError)               retryable = False
    ├── LMTimeout                (dspy.LMTimeoutError)        retryable = True
    ├── LMConnectionError        (dspy.LMTransportError)      retryable = True
    ├── LMRateLimit              (dspy.LMRateLimitError)      retryable = True
    ├── LMServerError            (dspy.LMServerError)         retryable = True
    ├── LMContextOverflow        (dspy.ContextWindowExceededError)
    ├── LMBadRequest             (dspy.LMInvalidRequestError)
    ├── LMAuthError              (dspy.LMAuthError)
    ├── LocalModelError          (dspy.LMConfigurationError)  a local GGUF cannot be prepared
    ├── LMClosed                                              the LM was closed before it answered
    └── LMUnavailable            (dspy.LMTransportError)      the endpoint is down: a check
                                                              call failed, or N calls in a row

Each class also derives from the matching DSPy class, so DSPy code that reacts to DSPy's own
errors (``dspy.ReAct`` shortening a trajectory on ``ContextWindowExceededError``,
``dspy.utils.exceptions.is_retryable_lm_error``) treats ours the same way. The ``kind``
attribute is the stable key used by :class:`judgeopt.lm.LMStats` to count failures, and
``retryable`` says whether :class:`judgeopt.lm.JudgeLM` retries the call.

Every wrapped error is raised ``from`` the original exception and its message says what to do.
"""

from __future__ import annotations

import re
from typing import Any

from dspy.utils import exceptions as _dspy_exc

from .._errors import JudgeoptError

__all__ = [
    "LMAuthError",
    "LMBadRequest",
    "LMClosed",
    "LMConnectionError",
    "LMContextOverflow",
    "LMError",
    "LMRateLimit",
    "LMServerError",
    "LMTimeout",
    "LMUnavailable",
    "LocalModelError",
    "TRANSIENT_KINDS",
    "wrap_exception",
]


class LMError(JudgeoptError, _dspy_exc.LMError):
    """Base class of every judgeopt LM failure.

    Args:
        message: What went wrong and what to do about it.
        model: The model string of the LM that failed.
        endpoint: The API base (or ``"in-process"``) the call went to.
        status: The HTTP status code, when the failure came from an HTTP response.
        retry_after: A server-suggested delay in seconds before retrying, when known.

    Attributes:
        kind: Stable short name of the failure class (``"timeout"``, ``"connection"``...).
        retryable: Whether a retry may succeed (transient failure).
    """

    kind: str = "error"
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        model: str | None = None,
        endpoint: str | None = None,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        # NOTE: keyword-only call: ContextWindowExceededError's __init__ takes no positionals.
        super().__init__(message=message, model=model, status=status, retry_after=retry_after)
        self.endpoint = endpoint


class LMTimeout(LMError, _dspy_exc.LMTimeoutError):
    """The call did not finish within its timeout."""

    kind = "timeout"
    retryable = True


class LMConnectionError(LMError, _dspy_exc.LMTransportError):
    """The endpoint could not be reached (refused, reset, DNS, TLS)."""

    kind = "connection"
    retryable = True


class LMRateLimit(LMError, _dspy_exc.LMRateLimitError):
    """The endpoint rate-limited the call (HTTP 429)."""

    kind = "rate_limit"
    retryable = True


class LMServerError(LMError, _dspy_exc.LMServerError):
    """The endpoint failed while handling the call (HTTP 5xx)."""

    kind = "server"
    retryable = True


class LMContextOverflow(LMError, _dspy_exc.ContextWindowExceededError):
    """The prompt (plus the requested completion) does not fit the model's context window.

    Attributes:
        prompt_tokens: Tokens in the prompt, when known.
        n_ctx: The context window in tokens, when known.
    """

    kind = "context_overflow"
    retryable = False

    def __init__(
        self,
        message: str,
        *,
        prompt_tokens: int | None = None,
        n_ctx: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.prompt_tokens = prompt_tokens
        self.n_ctx = n_ctx


class LMBadRequest(LMError, _dspy_exc.LMInvalidRequestError):
    """The endpoint rejected the request itself (unknown model, invalid parameter)."""

    kind = "bad_request"
    retryable = False


class LMAuthError(LMError, _dspy_exc.LMAuthError):
    """The endpoint rejected the credentials (HTTP 401/403)."""

    kind = "auth"
    retryable = False


class LocalModelError(LMError, _dspy_exc.LMConfigurationError):
    """A local model file cannot be prepared: packages missing, hash mismatch, not a GGUF."""

    kind = "local_model"
    retryable = False


class LMClosed(LMError):
    """The LM was closed before it answered (the embedded model's batch engine, stopped as the
    process ends after an interrupt): the call was never made, so it is not a judgement and
    nothing to warn about; a re-run makes it."""

    kind = "closed"
    retryable = False


class LMUnavailable(LMError, _dspy_exc.LMTransportError):
    """The endpoint is down: its check call before a run failed, or a run stopped after
    too many judge calls in a row failed with transient errors (circuit breaker).

    Attributes:
        last: The last underlying failure, when known.
    """

    kind = "unavailable"
    retryable = True

    def __init__(self, message: str, *, last: BaseException | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.last = last


#: Failure kinds that say nothing about the request itself (the endpoint was unreachable,
#: slow or overloaded even after retries, or the LM was closed before it answered): the call
#: may succeed later, so a judgement that failed this way is retried on a resume, and a
#: streak of them stops a run.
TRANSIENT_KINDS = frozenset(
    {"connection", "timeout", "server", "rate_limit", "unavailable", "closed"}
)


# Phrases servers use for an over-long prompt when they answer with a plain 400.
_OVERFLOW_PATTERNS = re.compile(
    r"context (length|window)|maximum context|exceed(s|ed)? (the )?context|too many tokens"
    r"|prompt is too long|requested tokens",
    re.IGNORECASE,
)
_LLAMA_OVERFLOW = re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)")


def _status_of(exc: BaseException) -> int | None:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def _retry_after_of(exc: BaseException) -> float | None:
    headers: Any = getattr(exc, "headers", None)
    if not headers:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    try:
        raw = headers.get("retry-after") or headers.get("Retry-After")
        return float(raw) if raw is not None else None
    except (TypeError, ValueError, AttributeError):
        return None


def _chain(exc: BaseException, limit: int = 10) -> list[BaseException]:
    """Return ``exc`` and its causes/contexts, outermost first (cycle-safe)."""
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(seen) < limit and all(current is not e for e in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _short(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def overflow_from_llama(
    exc: BaseException, *, model: str, n_ctx: int | None, max_tokens: int | None
) -> LMContextOverflow | None:
    """Recognise llama.cpp's context-window error and turn it into :class:`LMContextOverflow`.

    Args:
        exc: The exception raised by ``llama_cpp`` (or the text of a server's 400 reply).
        model: The model string, for the message.
        n_ctx: The context window the model was loaded with, if known.
        max_tokens: The completion budget that was asked for, if known.

    Returns:
        The wrapped error, or ``None`` when ``exc`` is not a context-window error.
    """
    match = _LLAMA_OVERFLOW.search(str(exc))
    if match is None:
        return None
    prompt_tokens, window = int(match.group(1)), int(match.group(2))
    return LMContextOverflow(
        f"the prompt has {prompt_tokens} tokens but the context window (n_ctx) is {window} "
        f"tokens (max_tokens={max_tokens}): shorten the prompt, or load the model with a "
        "larger n_ctx (make_lm(..., n_ctx=...))",
        model=model,
        endpoint="in-process",
        prompt_tokens=prompt_tokens,
        n_ctx=n_ctx if n_ctx is not None else window,
    )


def wrap_exception(
    exc: BaseException, *, model: str, endpoint: str | None, timeout: float | None = None
) -> LMError:
    """Translate a LiteLLM / openai / httpx / builtin failure into the :class:`LMError` tree.

    Args:
        exc: The exception raised by the backend call.
        model: The model string of the call.
        endpoint: The API base the call went to (``None``: the provider's default).
        timeout: The per-call timeout in seconds, quoted in timeout messages.

    Returns:
        The matching :class:`LMError` (``exc`` itself when it already is one). The caller
        raises it ``from exc``.
    """
    if isinstance(exc, LMError):
        return exc
    where = endpoint or "the provider's default endpoint"
    common: dict[str, Any] = {"model": model, "endpoint": endpoint, "status": _status_of(exc)}
    transport = _transport_error(exc, where, timeout, common)
    return transport if transport is not None else _http_error(exc, where, common)


def _transport_error(
    exc: BaseException, where: str, timeout: float | None, common: dict[str, Any]
) -> LMError | None:
    """A timeout or a failed connection anywhere in ``exc``'s cause chain, else ``None``."""
    import httpx
    import openai

    model = common["model"]
    chain = _chain(exc)

    def caused_by(*types: type[BaseException]) -> bool:
        return any(isinstance(e, types) for e in chain)

    # LiteLLM reports a refused connection as an InternalServerError (HTTP 500) whose cause is
    # openai.APIConnectionError, so the cause chain is read before the status code.
    if (
        caused_by(openai.APITimeoutError, httpx.TimeoutException, TimeoutError)
        or common["status"] == 408
    ):
        limit = f" after {timeout:g} s" if timeout is not None else ""
        return LMTimeout(
            f"the call to {where} (model {model}) timed out{limit}: make fewer calls at once "
            "(--threads on the command line, max_concurrency= in Python), allow more time "
            f"(timeout= in Python), or check the server's load ({_short(chain[-1])})",
            **{**common, "status": None},
        )
    if caused_by(openai.APIConnectionError, httpx.TransportError, ConnectionError):
        return LMConnectionError(
            f"could not connect to {where} (model {model}): is the server running and is "
            f"api_base right? ({_short(chain[-1])})",
            **{**common, "status": None},
        )
    return None


def _http_error(exc: BaseException, where: str, common: dict[str, Any]) -> LMError:
    """The LMError for what the endpoint answered: by exception type, else by HTTP status."""
    import openai
    from litellm import exceptions as lx

    model, status, detail = common["model"], common["status"], _short(exc)
    if isinstance(exc, lx.ContextWindowExceededError) or (
        isinstance(exc, openai.BadRequestError) and _OVERFLOW_PATTERNS.search(str(exc))
    ):
        return LMContextOverflow(
            f"{where} says the prompt does not fit model {model}'s context window: shorten the "
            f"prompt or lower max_tokens ({detail})",
            **common,
        )
    if isinstance(exc, openai.RateLimitError) or status == 429:
        return LMRateLimit(
            f"{where} rate-limited model {model}: make fewer calls at once (--threads on the "
            "command line, max_concurrency= in Python) or retry more (num_retries= in Python, "
            f"router_settings.num_retries in a router config) ({detail})",
            retry_after=_retry_after_of(exc),
            **common,
        )
    if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)) or status in (
        401,
        403,
    ):
        return LMAuthError(
            f"{where} rejected the credentials for model {model}: pass api_key= or set "
            f"JUDGEOPT_API_KEY (or the provider's own variable, e.g. OPENAI_API_KEY) ({detail})",
            **common,
        )
    if isinstance(exc, openai.NotFoundError) or status == 404:
        return LMBadRequest(
            f"{where} does not know model {model} (HTTP 404): check the model string (for an "
            f"OpenAI-compatible server 'openai/<served name or alias>') and api_base ({detail})",
            **common,
        )
    if isinstance(
        exc, (lx.ServiceUnavailableError, lx.BadGatewayError, openai.InternalServerError)
    ) or (status is not None and status >= 500):
        return LMServerError(
            f"{where} failed while serving model {model} (HTTP {status}): retry later or check "
            f"the server's logs ({detail})",
            **common,
        )
    if isinstance(exc, (openai.BadRequestError, openai.UnprocessableEntityError)) or (
        status is not None and 400 <= status < 500
    ):
        return LMBadRequest(
            f"{where} rejected the request for model {model} (HTTP {status}): check the model "
            f"name and the decoding parameters ({detail})",
            **common,
        )
    return LMError(
        f"the call to {where} (model {model}) failed with {type(exc).__name__}: {detail}",
        **common,
    )
