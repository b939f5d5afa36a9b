"""Where a LiteLLM model's requests go: its provider, API base and key (no DSPy needed)."""

from __future__ import annotations

import os

__all__ = ["NO_KEY", "OPENAI_COMPATIBLE", "provider_of", "resolve_endpoint"]

#: Placeholder key sent to an OpenAI-compatible server given by api_base when no key is set
#: (the openai SDK refuses to send a request without one; local servers ignore it).
NO_KEY = "sk-no-key-required"

OPENAI_COMPATIBLE = frozenset({"openai", "hosted_vllm", "text-completion-openai", "custom_openai"})
"""Providers that speak the OpenAI API (a server given by ``api_base`` may need no key)."""


def provider_of(model: str) -> str:
    """The LiteLLM provider of a model string (``"openai"`` for ``"openai/gpt-4o-mini"``).

    Raises:
        ValueError: If ``model`` is not a LiteLLM model string (empty, a model file, or no
            known provider).
    """
    import litellm  # slow to import: loaded when a provider must be named

    if not isinstance(model, str) or not model.strip() or model != model.strip():
        raise ValueError(
            f"The `model` argument must be a non-empty LiteLLM model string. Got {model!r} instead."
        )
    if model.lower().endswith(".gguf") or (os.sep in model and os.path.isfile(model)):
        # NOTE: checked before LiteLLM, which would print its provider banner for a path.
        raise ValueError(
            f"The `model` argument {model!r} is a model file, not a LiteLLM model string: run "
            f"it in process with 'local:{model}', or serve it (`judgeopt serve --model "
            f"{model}`) and use the printed router or 'openai/<alias>' with api_base."
        )
    try:
        return str(litellm.get_llm_provider(model)[1])
    except Exception as exc:  # LiteLLM raises its BadRequestError for an unknown provider
        raise ValueError(
            f"The `model` argument must name a LiteLLM provider, like 'openai/gpt-4o-mini' or, for "
            f"an OpenAI-compatible server (vLLM, llama.cpp), 'openai/<served model name>'. "
            f"Got {model!r} instead."
        ) from exc


def resolve_endpoint(
    model: str, api_base: str | None = None, api_key: str | None = None
) -> tuple[str | None, str | None]:
    """Return the (api_base, api_key) a :class:`JudgeLM` for ``model`` will use.

    Order: the arguments; then ``JUDGEOPT_API_BASE`` / ``JUDGEOPT_API_KEY``; then the
    provider's own variables (``<PROVIDER>_API_BASE``, and ``OPENAI_BASE_URL`` for OpenAI;
    ``<PROVIDER>_API_KEY`` is left for LiteLLM to read). An OpenAI-compatible endpoint given
    without any key gets a placeholder key, since such servers usually need none.

    Args:
        model: The LiteLLM model string.
        api_base: An explicit API base URL.
        api_key: An explicit API key.

    Returns:
        ``(api_base or None, api_key or None)``; ``api_base`` has no trailing slash.
    """
    provider = provider_of(model)
    prefix = provider.upper().replace("-", "_")
    base = api_base or os.environ.get("JUDGEOPT_API_BASE") or os.environ.get(f"{prefix}_API_BASE")
    if not base and provider == "openai":
        base = os.environ.get("OPENAI_BASE_URL")
    key = api_key or os.environ.get("JUDGEOPT_API_KEY")
    if (
        base
        and not key
        and provider in OPENAI_COMPATIBLE
        and not os.environ.get(f"{prefix}_API_KEY")
    ):
        key = NO_KEY
    return (base.rstrip("/") if base else None), (key or None)
