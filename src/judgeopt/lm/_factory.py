"""One entry point from a model string to a DSPy LM."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dspy

from ._cache import LMCache
from ._litellm import JudgeLM
from ._local import LlamaCppLM
from ._models import parse_local_model
from ._router import ROUTER_PREFIX, RouterLM, parse_router_model

__all__ = ["make_lm", "parse_local_model"]


def make_lm(
    model: str = "local",
    *,
    api_base: str | None = None,
    api_key: str | None = None,
    temperature: float = 0.0,
    max_tokens: int = 1024,
    cache: bool | str | os.PathLike[str] | LMCache | None = True,
    max_concurrency: int | None = None,
    timeout: float | None = None,
    num_retries: int | None = None,
    n_threads: int | None = None,
    n_ctx: int | None = None,
    logits_all: bool | None = None,
    parallel: int | None = None,
    **kwargs: Any,
) -> dspy.BaseLM:
    """Build the LM a model string names.

    * ``"local"``: the embedded default model (Qwen2.5-Coder-1.5B-Instruct) run in process;
    * ``"local:NAME"``: a registry model (``qwen2.5-coder-1.5b``, ``qwen2.5-coder-0.5b``,
      ``smollm2-135m``);
    * ``"local:PATH.gguf"``: any GGUF file, run in process;
    * ``"router:FILE"`` / ``"router:FILE#GROUP"``: a LiteLLM Router over the servers of a
      config file (``judgeopt serve`` writes one), through :class:`RouterLM`;
    * anything else: a LiteLLM model string (``"openai/gpt-4o-mini"``, or ``"openai/NAME"``
      with ``api_base`` for a vLLM / llama.cpp server), sent through :class:`JudgeLM`.

    Args:
        model: The model string.
        api_base: Endpoint of a LiteLLM model (default from the environment).
        api_key: Key of a LiteLLM model (default from the environment).
        temperature: Default sampling temperature.
        max_tokens: Default completion budget.
        cache: ``True`` (default directory), ``False``, a directory, or an :class:`LMCache`.
        max_concurrency: LiteLLM and router: requests in flight at once (default 8; a
            router: the file's ``judgeopt.max_concurrency``, else 8 per deployment).
        timeout: LiteLLM and router: per-request timeout in seconds (default 120; a
            router: ``router_settings.timeout``).
        num_retries: LiteLLM and router: retries of transient failures (default 3; a
            router: ``router_settings.num_retries``, retried by the Router).
        n_threads: Local only: CPU threads (default ``$JUDGEOPT_THREADS`` or 2).
        n_ctx: Local only: context window in tokens (default 4096).
        logits_all: Local only: keep every position's logits (sampling with ``logprobs``).
        parallel: Local only: requests decoded together (default 1); give as many
            calls in flight (``evaluate``/compile ``threads``, which default to it).
        **kwargs: Further default decoding parameters (``seed``, ``top_p``, ``stop``...).

    Returns:
        A :class:`LlamaCppLM`, a :class:`RouterLM` or a :class:`JudgeLM`.

    Raises:
        ValueError: If the model string is malformed, or an option does not apply to it
            (:class:`RouterConfigError`, a ``ValueError``, for an invalid router file).
        LocalModelError: If a local GGUF path does not exist or is not a GGUF file, or a
            registry model's packages are not installed.

    Example:
        >>> lm = make_lm("openai/qwen", api_base="http://127.0.0.1:8080/v1", cache=False)
        >>> type(lm).__name__, lm.api_base
        ('JudgeLM', 'http://127.0.0.1:8080/v1')
    """
    build = _builder(model)
    options = _LMOptions(
        api_base=api_base,
        api_key=api_key,
        temperature=temperature,
        max_tokens=max_tokens,
        cache=cache,
        max_concurrency=max_concurrency,
        timeout=timeout,
        num_retries=num_retries,
        n_threads=n_threads,
        n_ctx=n_ctx,
        logits_all=logits_all,
        parallel=parallel,
        extra=kwargs,
    )
    return build(model, options)


def _builder(model: object) -> _Builder:
    """The builder of the first backend in :data:`_BACKENDS` that takes ``model``."""
    if not isinstance(model, str) or not model:
        raise ValueError(f"The `model` argument must be a non-empty string. Got {model!r} instead.")
    return next(build for matches, build in _BACKENDS if matches(model))


@dataclass(frozen=True)
class _LMOptions:
    """:func:`make_lm`'s options, as the backends' builders read them."""

    api_base: str | None
    api_key: str | None
    temperature: float
    max_tokens: int
    cache: bool | str | os.PathLike[str] | LMCache | None
    max_concurrency: int | None
    timeout: float | None
    num_retries: int | None
    n_threads: int | None
    n_ctx: int | None
    logits_all: bool | None
    parallel: int | None
    extra: dict[str, Any]

    def given(self, *names: str) -> dict[str, Any]:
        """The options among ``names`` that were given (not ``None``), by name, sorted."""
        return {n: getattr(self, n) for n in sorted(names) if getattr(self, n) is not None}


_Builder = Callable[[str, _LMOptions], dspy.BaseLM]


def _reject_local_options(model: str, options: _LMOptions) -> None:
    given = list(options.given("n_threads", "n_ctx", "logits_all", "parallel"))
    if given:
        raise ValueError(
            f"{given} only apply to local models ('local', 'local:...'), not to {model!r}."
        )


def _local_lm(model: str, options: _LMOptions) -> dspy.BaseLM:
    local = parse_local_model(model)
    assert local is not None
    given = list(options.given("api_base", "api_key", "max_concurrency", "timeout", "num_retries"))
    if given:
        raise ValueError(f"{given} only apply to LiteLLM models, not to the local model {model!r}.")
    return LlamaCppLM(
        local,
        temperature=options.temperature,
        max_tokens=options.max_tokens,
        n_threads=options.n_threads,
        cache=options.cache,
        **options.given("n_ctx", "logits_all", "parallel"),
        **options.extra,
    )


def _router_lm(model: str, options: _LMOptions) -> dspy.BaseLM:
    _reject_local_options(model, options)
    routed = parse_router_model(model)
    assert routed is not None
    endpoint = list(options.given("api_base", "api_key"))
    if endpoint:
        raise ValueError(
            f"{endpoint} do not apply to the router {model!r}: its endpoints "
            "and keys come from its config file."
        )
    path, group = routed
    return RouterLM(
        path,
        model_name=group,
        temperature=options.temperature,
        max_tokens=options.max_tokens,
        cache=options.cache,
        max_concurrency=options.max_concurrency,
        timeout=options.timeout,
        num_retries=options.num_retries,
        **options.extra,
    )


def _litellm_lm(model: str, options: _LMOptions) -> dspy.BaseLM:
    _reject_local_options(model, options)
    return JudgeLM(
        model,
        api_base=options.api_base,
        api_key=options.api_key,
        temperature=options.temperature,
        max_tokens=options.max_tokens,
        cache=options.cache,
        **options.given("max_concurrency", "timeout", "num_retries"),
        **options.extra,
    )


def _is_local(model: str) -> bool:
    return parse_local_model(model) is not None


def _is_router(model: str) -> bool:
    return model.startswith(ROUTER_PREFIX)


def _any_model(model: str) -> bool:
    return True


# Tried in order; the first whose predicate accepts the model string builds its LM.
_BACKENDS: tuple[tuple[Callable[[str], bool], _Builder], ...] = (
    (_is_local, _local_lm),
    (_is_router, _router_lm),
    (_any_model, _litellm_lm),
)
