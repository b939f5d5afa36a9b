"""The LM layer: every language model judgeopt talks to, as a DSPy LM.

* :func:`make_lm` turns a model string into an LM: ``"local"`` / ``"local:NAME"`` /
  ``"local:PATH.gguf"`` run a GGUF in process (:class:`LlamaCppLM`); anything else is a
  LiteLLM model string (:class:`JudgeLM`: hosted APIs, vLLM, llama.cpp servers);
  ``"router:FILE"`` is a LiteLLM Router over several servers (:class:`RouterLM`, configured
  by :func:`load_router_config`; ``judgeopt serve`` starts servers and writes the file).
* Both LMs share a persistent response cache (:class:`LMCache`, keyed by model, endpoint,
  messages and decoding parameters), thread-safe accounting (:meth:`stats` ->
  :class:`LMStats`) and one error tree (:class:`LMError`, see :mod:`judgeopt.lm._errors`).
* :func:`ensure_local_model` joins and verifies the GGUF of a registry model
  (:data:`LOCAL_MODELS`); :func:`start_llama_server` serves a GGUF on loopback;
  :func:`start_servers` starts several replicas and writes their router config.
* :func:`start_vllm_server` serves a model with vLLM from a separate Python environment
  (``$JUDGEOPT_VLLM_PYTHON``); :func:`convert_gguf_to_hf` turns a GGUF into the Hugging Face
  folder vLLM loads.

See ``docs/lm.md``.
"""

from __future__ import annotations


# Before anything imports LiteLLM: otherwise it downloads a price list at start-up.

from ._cache import LMCache, cache_key, default_cache_dir
from ._errors import (
    LMAuthError,
    LMBadRequest,
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
from ._litellm import JudgeLM, resolve_endpoint
from ._local import RECOMMENDED_PARALLEL, LlamaCppLM
from ._models import (
    DEFAULT_LOCAL_MODEL,
    LOCAL_MODELS,
    LocalModelSpec,
    ModelPart,
    ensure_local_model,
    local_model_dir,
)
from ._router import (
    RouterConfig,
    RouterConfigError,
    RouterDeployment,
    RouterLM,
    load_router_config,
    write_router_config,
)
from ._serve import ServerGroup, start_servers
from ._server import LlamaServer, start_llama_server
from ._spec import model_spec
from ._errors import TRANSIENT_KINDS
from ._factory import parse_local_model
from ._serve import DEFAULT_SERVE_SETTINGS, ENGINES
from ._spec import loadable_spec
from ._local import check_gguf, default_threads, effective_n_ctx
from ._stats import DeploymentStats, LMStats
from ._vllm import (
    VLLMEnvironment,
    VLLMServer,
    convert_gguf_to_hf,
    find_vllm_python,
    start_vllm_server,
)

__all__ = [
    "TRANSIENT_KINDS",
    "parse_local_model",
    "DEFAULT_SERVE_SETTINGS",
    "ENGINES",
    "loadable_spec",
    "check_gguf",
    "default_threads",
    "effective_n_ctx",
    "DEFAULT_LOCAL_MODEL",
    "LOCAL_MODELS",
    "RECOMMENDED_PARALLEL",
    "DeploymentStats",
    "JudgeLM",
    "LMAuthError",
    "LMBadRequest",
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
    "resolve_endpoint",
    "start_llama_server",
    "start_servers",
    "start_vllm_server",
    "wrap_exception",
    "write_router_config",
]
