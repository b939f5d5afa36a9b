"""Build the logprob backend a model string names (:func:`make_backend`)."""

from __future__ import annotations

import os
from typing import Any

from judgeopt.lm import parse_local_model
from judgeopt.scoring import LogprobBackend

from ._litellm import LiteLLMBackend
from ._llamacpp import LlamaCppBackend
from ._transformers import TransformersBackend

__all__ = ["BACKENDS", "make_backend"]

#: The backends :func:`make_backend` can build, by :attr:`LogprobBackend.name`.
BACKENDS: tuple[str, ...] = ("llama.cpp", "transformers", "litellm")


def make_backend(
    model: str = "local",
    *,
    backend: str | None = None,
    api_base: str | None = None,
    api_key: str | None = None,
    n_threads: int | None = None,
    n_ctx: int | None = None,
    dtype: str | None = None,
    prompt_logprobs: bool = False,
    cache: bool | str | os.PathLike[str] = True,
) -> LogprobBackend:
    """Build the backend a model string names.

    With ``backend=None`` the model string decides: ``"local"`` / ``"local:NAME"`` /
    ``"local:PATH.gguf"`` run llama.cpp in process (:class:`LlamaCppBackend`, full
    vocabulary); anything else is a LiteLLM model (:class:`LiteLLMBackend`, top-k logprobs of
    generated tokens). ``backend="transformers"`` runs the same local models with
    transformers on CPU torch instead (:class:`TransformersBackend`: full vocabulary and
    attention weights; also ``"local:FOLDER"`` for a Hugging Face model folder).

    Args:
        model: The model string.
        backend: ``None`` (by the model string), ``"llama.cpp"``, ``"transformers"`` or
            ``"litellm"``.
        api_base: Endpoint of a LiteLLM model.
        api_key: Key of a LiteLLM model.
        n_threads: CPU threads of a local model (default ``$JUDGEOPT_THREADS`` or 2).
        n_ctx: Context window of a local model (default 4096).
        dtype: Weights of the transformers backend: ``"float32"`` (default) or
            ``"bfloat16"``.
        prompt_logprobs: LiteLLM against vLLM only: score given texts through its prompt
            logprobs.
        cache: LiteLLM's persistent cache (see :class:`LiteLLMBackend`).

    Raises:
        ValueError: On a malformed model string, an unknown backend, or an option that does
            not apply to the chosen backend.
        ImportError: For ``backend="transformers"`` without its packages (names the install
            command).
    """
    if backend is not None and backend not in BACKENDS:
        raise ValueError(
            f"The `backend` argument must be None or one of {list(BACKENDS)}. "
            f"Got {backend!r} instead."
        )
    local = parse_local_model(model)
    chosen = backend or ("litellm" if local is None else "llama.cpp")
    if chosen == "litellm":
        if local is not None:
            raise ValueError(
                f"The local model {model!r} runs in process: use backend='llama.cpp' or "
                "backend='transformers' (a local server is a LiteLLM model such as "
                "'openai/NAME' with api_base)."
            )
        given = [
            k
            for k, v in {"n_threads": n_threads, "n_ctx": n_ctx, "dtype": dtype}.items()
            if v is not None
        ]
        if given:
            raise ValueError(f"{given} only apply to local models, not to {model!r}.")
        return LiteLLMBackend(
            model, api_base=api_base, api_key=api_key, prompt_logprobs=prompt_logprobs, cache=cache
        )
    wrong = {"api_base": api_base, "api_key": api_key}
    return _local_backend(chosen, model, local, wrong, prompt_logprobs, n_threads, n_ctx, dtype)


def _local_backend(
    chosen: str,
    model: str,
    local: str | None,
    wrong: dict[str, Any],
    prompt_logprobs: bool,
    n_threads: int | None,
    n_ctx: int | None,
    dtype: str | None,
) -> LogprobBackend:
    if local is None:
        raise ValueError(
            f"The {chosen} backend runs local models: 'local', 'local:NAME' or 'local:PATH'. "
            f"Got {model!r} instead."
        )
    given = sorted(k for k, v in wrong.items() if v is not None)
    if given or prompt_logprobs:
        raise ValueError(
            f"{given or ['prompt_logprobs']} only apply to LiteLLM models, not to the local "
            f"model {model!r}."
        )
    kwargs: dict[str, Any] = {"n_threads": n_threads}
    if n_ctx is not None:
        kwargs["n_ctx"] = n_ctx
    if chosen == "transformers":
        return TransformersBackend(local, dtype=dtype or "float32", **kwargs)
    if dtype is not None:
        raise ValueError(
            f"`dtype` only applies to backend='transformers' (the llama.cpp "
            f"backend runs the GGUF's own quantised weights). Got {dtype!r}."
        )
    return LlamaCppBackend(local, **kwargs)
