"""The LM layer: every language model judgeopt talks to, as a DSPy LM.

* :func:`make_lm` turns a model string into an LM: ``"local"`` / ``"local:NAME"`` /
  ``"local:PATH.gguf"`` run a GGUF in process (:class:`LlamaCppLM`); anything else is a
  LiteLLM model string (:class:`JudgeLM`: hosted APIs, vLLM, llama.cpp servers);
  ``"router:FILE"`` is a LiteLLM Router over several servers (:class:`RouterLM`, configured
  by :func:`load_router_config`; ``judgeopt serve`` starts servers and writes the file).
* Both LMs share a persistent response cache (:class:`LMCache`, keyed by model, endpoint,
  messages and decoding parameters), thread-safe accounting (:meth:`stats` ->
  :class:`LMStats`) and one error tree (:class:`LMError`, see :mod:`judgeopt.lm._errors`).
  ``lm.limit_spending(max_calls=..., max_cost=...)`` sets a :class:`SpendLimit`: the request
  that would cross it is not sent, :class:`SpendLimitReached` (a ``KeyboardInterrupt``)
  stops the run instead.
* :func:`ensure_local_model` joins and verifies the GGUF of a registry model
  (:data:`LOCAL_MODELS`); :func:`start_llama_server` serves a GGUF on loopback;
  :func:`start_servers` starts several replicas and writes their router config.
* :func:`start_vllm_server` serves a model with vLLM from a separate Python environment
  (``$JUDGEOPT_VLLM_PYTHON``); :func:`convert_gguf_to_hf` turns a GGUF into the Hugging Face
  folder vLLM loads.

The names load lazily (PEP 562): ``import judgeopt.lm`` imports neither DSPy nor LiteLLM.
A name whose module needs neither (``load_llama``, ``ensure_local_model``, ``LOCAL_MODELS``,
``parse_local_model``, ``check_gguf``, ``load_router_config``, ``LMCache``...) loads its own
module only; the first name that needs DSPy (the LMs, the error classes, which derive from
DSPy's, the servers) loads the whole package, as an eager import would.

See ``docs/lm.md``.
"""

from __future__ import annotations

import importlib as _importlib
import importlib.util as _importlib_util
import typing as _typing

# Public name -> the submodule of this package that defines it.
_LAZY: dict[str, str] = {
    "LMCache": "_cache",
    "cache_key": "_cache",
    "default_cache_dir": "_cache",
    "LMAuthError": "_errors",
    "LMBadRequest": "_errors",
    "LMClosed": "_errors",
    "LMConnectionError": "_errors",
    "LMContextOverflow": "_errors",
    "LMError": "_errors",
    "LMRateLimit": "_errors",
    "LMServerError": "_errors",
    "LMTimeout": "_errors",
    "LMUnavailable": "_errors",
    "LocalModelError": "_errors",
    "TRANSIENT_KINDS": "_errors",
    "wrap_exception": "_errors",
    "make_lm": "_factory",
    "JudgeLM": "_litellm",
    "resolve_endpoint": "_endpoint",
    "RECOMMENDED_PARALLEL": "_local",
    "LlamaCppLM": "_local",
    "computed_tokens": "_prefix",
    "check_gguf": "_llama_load",
    "default_threads": "_llama_load",
    "effective_n_ctx": "_llama_load",
    "load_llama": "_llama_load",
    "LOOP_MAX_PERIOD": "_llama_decode",
    "LOOP_TIMES": "_llama_decode",
    "LOOP_TOKENS": "_llama_decode",
    "ends_in_loop": "_llama_decode",
    "DEFAULT_LOCAL_MODEL": "_models",
    "LOCAL_MODELS": "_models",
    "LocalModelSpec": "_models",
    "ModelPart": "_models",
    "ensure_local_model": "_models",
    "local_model_dir": "_models",
    "parse_local_model": "_models",
    "SERVE_ENGINES": "_router_config",
    "RouterConfig": "_router_config",
    "RouterConfigError": "_router_config",
    "RouterDeployment": "_router_config",
    "load_router_config": "_router_config",
    "write_router_config": "_router_config",
    "RouterLM": "_router",
    "DEFAULT_SERVE_SETTINGS": "_replicas",
    "ENGINES": "_replicas",
    "ServerGroup": "_replicas",
    "start_servers": "_replicas",
    "LlamaServer": "_server",
    "start_llama_server": "_server",
    "loadable_spec": "_spec",
    "model_spec": "_spec",
    "SpendLimit": "_spend",
    "SpendLimitReached": "_spend",
    "UnpricedModelError": "_spend",
    "price_of": "_spend",
    "DeploymentStats": "_stats",
    "LMStats": "_stats",
    "VLLMEnvironment": "_vllm",
    "VLLMServer": "_vllm",
    "convert_gguf_to_hf": "_vllm",
    "find_vllm_python": "_vllm",
    "start_vllm_server": "_vllm",
}

__all__ = [
    "TRANSIENT_KINDS",
    "parse_local_model",
    "DEFAULT_SERVE_SETTINGS",
    "ENGINES",
    "loadable_spec",
    "check_gguf",
    "computed_tokens",
    "default_threads",
    "effective_n_ctx",
    "load_llama",
    "DEFAULT_LOCAL_MODEL",
    "LOCAL_MODELS",
    "LOOP_MAX_PERIOD",
    "LOOP_TIMES",
    "LOOP_TOKENS",
    "ends_in_loop",
    "RECOMMENDED_PARALLEL",
    "SERVE_ENGINES",
    "DeploymentStats",
    "JudgeLM",
    "LMAuthError",
    "LMBadRequest",
    "LMClosed",
    "LMCache",
    "LMConnectionError",
    "LMContextOverflow",
    "LMError",
    "LMRateLimit",
    "LMServerError",
    "LMStats",
    "LMTimeout",
    "LMUnavailable",
    "LlamaCppLM",
    "LlamaServer",
    "LocalModelError",
    "LocalModelSpec",
    "ModelPart",
    "RouterConfig",
    "RouterConfigError",
    "RouterDeployment",
    "RouterLM",
    "ServerGroup",
    "SpendLimit",
    "SpendLimitReached",
    "UnpricedModelError",
    "VLLMEnvironment",
    "VLLMServer",
    "cache_key",
    "convert_gguf_to_hf",
    "default_cache_dir",
    "ensure_local_model",
    "find_vllm_python",
    "load_router_config",
    "local_model_dir",
    "make_lm",
    "model_spec",
    "price_of",
    "resolve_endpoint",
    "start_llama_server",
    "start_servers",
    "start_vllm_server",
    "wrap_exception",
    "write_router_config",
]

if _typing.TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports lazily
    from ._cache import LMCache, cache_key, default_cache_dir
    from ._endpoint import resolve_endpoint
    from ._errors import (
        TRANSIENT_KINDS,
        LMAuthError,
        LMBadRequest,
        LMClosed,
        LMConnectionError,
        LMContextOverflow,
        LMError,
        LMRateLimit,
        LMServerError,
        LMTimeout,
        LMUnavailable,
        LocalModelError,
        wrap_exception,
    )
    from ._factory import make_lm
    from ._litellm import JudgeLM
    from ._llama_load import check_gguf, default_threads, effective_n_ctx, load_llama
    from ._local import RECOMMENDED_PARALLEL, LlamaCppLM
    from ._models import (
        DEFAULT_LOCAL_MODEL,
        LOCAL_MODELS,
        LocalModelSpec,
        ModelPart,
        ensure_local_model,
        local_model_dir,
        parse_local_model,
    )
    from ._prefix import computed_tokens
    from ._replicas import DEFAULT_SERVE_SETTINGS, ENGINES, ServerGroup, start_servers
    from ._router import RouterLM
    from ._router_config import (
        SERVE_ENGINES,
        RouterConfig,
        RouterConfigError,
        RouterDeployment,
        load_router_config,
        write_router_config,
    )
    from ._server import LlamaServer, start_llama_server
    from ._spec import loadable_spec, model_spec
    from ._spend import SpendLimit, SpendLimitReached, UnpricedModelError, price_of
    from ._stats import DeploymentStats, LMStats
    from ._vllm import (
        VLLMEnvironment,
        VLLMServer,
        convert_gguf_to_hf,
        find_vllm_python,
        start_vllm_server,
    )


# The submodules that import neither DSPy nor LiteLLM: their names load one module at a time.
_LIGHT = frozenset(
    {"_cache", "_endpoint", "_llama_load", "_models", "_router_config", "_spec", "_stats"}
)


def _load(module: str) -> None:
    """Import ``module`` and bind the public names it provides in this package."""
    loaded = _importlib.import_module(f"{__name__}.{module}")
    for name, where in _LAZY.items():
        if where == module:
            globals()[name] = getattr(loaded, name)


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is not None:
        # A DSPy-based name costs DSPy's import anyway: bind the whole face at once.
        for each in [module] if module in _LIGHT else dict.fromkeys(_LAZY.values()):
            _load(each)
        return globals()[name]
    if name.startswith("_") and _importlib_util.find_spec(f"{__name__}.{name}") is not None:
        # A private submodule (``judgeopt.lm._local``): loaded on first attribute access, as
        # when this package imported every submodule eagerly.
        return _importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
