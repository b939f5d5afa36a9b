"""The router config file: a LiteLLM proxy ``config.yaml`` read, checked and written.

:func:`load_router_config` reads a file (its ``model_list``, ``router_settings``,
``litellm_settings`` and judgeopt's own ``judgeopt`` block) into a :class:`RouterConfig`,
checking every field with a message that names the file and the field;
:func:`write_router_config` writes one (``judgeopt serve`` does). :class:`judgeopt.lm.RouterLM`
runs a config. See ``docs/lm.md``, "Several servers".
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._io import write_text_atomic
from ._endpoint import NO_KEY, OPENAI_COMPATIBLE, provider_of
from ._router_checks import (
    RouterConfigError,
    check_config_number,
    check_router_settings,
    config_error,
)

__all__ = [
    "SERVE_ENGINES",
    "MODEL_ID_KEY",
    "PER_DEPLOYMENT_CONCURRENCY",
    "ROUTER_PREFIX",
    "RouterConfig",
    "RouterConfigError",
    "RouterDeployment",
    "build_router_config",
    "check_config_number",
    "config_error",
    "load_router_config",
    "parse_router_model",
    "write_router_config",
]

#: The inference servers ``judgeopt serve`` starts (:data:`judgeopt.lm.ENGINES` holds how);
#: named here, in a module without DSPy, so the command line can list them cheaply.
SERVE_ENGINES: tuple[str, ...] = ("llama.cpp", "vllm")

logger = logging.getLogger(__name__)

#: Model strings of the form ``"router:FILE"`` or ``"router:FILE#GROUP"`` name a RouterLM.
ROUTER_PREFIX = "router:"

#: ``model_info`` key naming what a deployment serves, for the cache: deployments with the
#: same value (replicas of one model on one engine) share cache entries.
MODEL_ID_KEY = "judgeopt_model_id"

#: Default requests in flight per deployment when ``max_concurrency`` is not given.
PER_DEPLOYMENT_CONCURRENCY = 8

_TOP_LEVEL = (
    "model_list",
    "router_settings",
    "litellm_settings",
    "judgeopt",
    "general_settings",
    "environment_variables",
)
_IGNORED_TOP_LEVEL = frozenset({"general_settings", "environment_variables"})
_ENTRY_KEYS = ("model_name", "litellm_params", "model_info")
_JUDGEOPT_KEYS = ("model_name", "max_concurrency", "supports_logprobs")
#: ``litellm_settings`` a LiteLLM proxy hands on to its Router (``router_settings`` wins).
_LITELLM_TO_ROUTER = {
    "num_retries": "num_retries",
    "request_timeout": "timeout",
    "fallbacks": "fallbacks",
    "context_window_fallbacks": "context_window_fallbacks",
    "content_policy_fallbacks": "content_policy_fallbacks",
    "default_fallbacks": "default_fallbacks",
    "allowed_fails": "allowed_fails",
}


@dataclass(frozen=True)
class RouterDeployment:
    """One deployment (one server) of a router config.

    Attributes:
        id: Its ``model_info.id`` (given in the file, or ``MODEL@API_BASE``): the name of its
            counters in :attr:`judgeopt.lm.LMStats.deployments`.
        model_name: The model group it belongs to.
        model: Its LiteLLM model string (``litellm_params.model``).
        api_base: Its endpoint, or ``None`` for the provider's default.
        model_id: What it serves, for the cache (``model_info.judgeopt_model_id``), or
            ``None`` when the file does not say.
    """

    id: str
    model_name: str
    model: str
    api_base: str | None
    model_id: str | None

    @property
    def cache_identity(self) -> str:
        """The deployment's share of a cache key: its model id, else ``MODEL@ENDPOINT``."""
        if self.model_id is not None:
            return self.model_id
        return f"{self.model}@{self.api_base or 'default:' + provider_of(self.model)}"


@dataclass(frozen=True)
class RouterConfig:
    """A validated router config (see :func:`load_router_config`).

    Attributes:
        path: The file it was read from (``None`` when built in memory).
        model_list: The deployments as LiteLLM takes them (``model_info.id`` filled in).
        router_settings: Keyword arguments of ``litellm.Router``.
        model_name: The model group a :class:`RouterLM` calls.
        max_concurrency: ``judgeopt.max_concurrency`` of the file, if given.
        supports_logprobs: ``judgeopt.supports_logprobs`` of the file, if given.
        deployments: Every deployment, in file order.
    """

    path: Path | None
    model_list: tuple[dict[str, Any], ...]
    router_settings: Mapping[str, Any]
    model_name: str
    max_concurrency: int | None
    supports_logprobs: bool | None
    deployments: tuple[RouterDeployment, ...]

    @property
    def source(self) -> str:
        """How error messages name the config: its path, or ``"<in-memory router config>"``."""
        return str(self.path) if self.path is not None else "<in-memory router config>"

    def group(self, name: str | None = None) -> tuple[RouterDeployment, ...]:
        """The deployments of model group ``name`` (default: :attr:`model_name`)."""
        name = name or self.model_name
        return tuple(d for d in self.deployments if d.model_name == name)

    @property
    def groups(self) -> tuple[str, ...]:
        """Every model group, in file order."""
        return tuple(dict.fromkeys(d.model_name for d in self.deployments))


def parse_router_model(model: str) -> tuple[str, str | None] | None:
    """Split a ``"router:FILE"`` / ``"router:FILE#GROUP"`` model string.

    Returns:
        ``(file, group or None)``, or ``None`` when ``model`` is not a router string.

    Raises:
        ValueError: If the file or the group part is empty.
    """
    if not model.startswith(ROUTER_PREFIX):
        return None
    rest = model[len(ROUTER_PREFIX) :]
    path, _, group = rest.partition("#")
    if not path or (rest.endswith("#") or ("#" in rest and not group)):
        raise ValueError(
            f"The `model` argument {model!r} must be 'router:FILE' or 'router:FILE#GROUP', with "
            "FILE a router config (YAML or JSON) and GROUP one of its model_name groups."
        )
    return path, (group or None)


# -- loading and validation --------------------------------------------------------------------


def _read_document(path: Path) -> Any:
    if not path.is_file():
        raise RouterConfigError(
            f"Router config {str(path)!r} not found (a YAML or JSON file with a `model_list`; "
            "`judgeopt serve --out FILE` writes one)."
        )
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        import yaml

        return yaml.safe_load(text)
    except Exception as exc:  # yaml.YAMLError / json.JSONDecodeError
        kind = "JSON" if path.suffix.lower() == ".json" else "YAML"
        raise RouterConfigError(f"{path}: invalid {kind}: {exc}") from exc


def _check_entry(source: str, i: int, entry: Any) -> RouterDeployment:
    where = f"model_list[{i}]"
    if not isinstance(entry, Mapping):
        raise config_error(
            source, where, entry, "must be a mapping with model_name, litellm_params and model_info"
        )
    unknown = sorted(set(entry) - set(_ENTRY_KEYS))
    if unknown:
        raise RouterConfigError(
            f"{source}: `{where}` has unknown key(s) {unknown}; a "
            f"deployment has {list(_ENTRY_KEYS)}."
        )
    name = entry.get("model_name")
    if not isinstance(name, str) or not name.strip():
        raise config_error(
            source,
            f"{where}.model_name",
            name,
            "must be a non-empty string (the model group the deployment serves)",
        )
    params = entry.get("litellm_params")
    if not isinstance(params, Mapping):
        raise config_error(
            source,
            f"{where}.litellm_params",
            params,
            "must be a mapping with at least `model` (a LiteLLM model string)",
        )
    model = params.get("model")
    try:
        provider_of(model)
    except ValueError:
        raise config_error(
            source,
            f"{where}.litellm_params.model",
            model,
            "must be a LiteLLM model string naming a provider, like 'openai/NAME' "
            "for an OpenAI-compatible server (vLLM, llama.cpp) or "
            "'openai/gpt-4o-mini'",
        ) from None
    api_base = params.get("api_base")
    if api_base is not None and not (
        isinstance(api_base, str) and (api_base.startswith(("http://", "https://", "os.environ/")))
    ):
        raise config_error(
            source,
            f"{where}.litellm_params.api_base",
            api_base,
            "must be an http:// or https:// URL (or 'os.environ/VARIABLE')",
        )
    info = entry.get("model_info", {})
    if not isinstance(info, Mapping):
        raise config_error(source, f"{where}.model_info", info, "must be a mapping")
    model_id = info.get(MODEL_ID_KEY)
    if model_id is not None and (not isinstance(model_id, str) or not model_id.strip()):
        raise config_error(
            source,
            f"{where}.model_info.{MODEL_ID_KEY}",
            model_id,
            "must be a non-empty string naming what the deployment serves",
        )
    given_id = info.get("id")
    if given_id is not None and (not isinstance(given_id, str) or not given_id.strip()):
        raise config_error(source, f"{where}.model_info.id", given_id, "must be a non-empty string")
    base = api_base.rstrip("/") if isinstance(api_base, str) else None
    default_id = f"{model}@{base or 'default:' + provider_of(model)}"
    return RouterDeployment(
        id=given_id or default_id, model_name=name, model=model, api_base=base, model_id=model_id
    )


def build_router_config(
    document: Any,
    *,
    source: str = "<in-memory router config>",
    path: Path | None = None,
    model_name: str | None = None,
) -> RouterConfig:
    """Validate a parsed router config document (the mapping a config file holds).

    Args:
        document: The parsed file: ``model_list`` (required), ``router_settings``,
            ``litellm_settings``, ``judgeopt``.
        source: How error messages name the document.
        path: The file it came from, if any.
        model_name: The model group to call; default ``judgeopt.model_name`` of the file,
            else its only group.

    Raises:
        RouterConfigError: Naming the field, the value and what is allowed.
    """
    entries = _check_top_level(source, document)
    deployments = [_check_entry(source, i, e) for i, e in enumerate(entries)]
    ids = [d.id for d in deployments]
    duplicates = sorted({x for x in ids if ids.count(x) > 1})
    if duplicates:
        raise RouterConfigError(
            f"{source}: several deployments have the id(s) {duplicates}: give each its own "
            "`model_info.id` (deployments without one are named MODEL@API_BASE)."
        )
    groups = list(dict.fromkeys(d.model_name for d in deployments))
    settings = _router_settings(source, document, groups)
    own = _judgeopt_section(source, document)
    chosen = _chosen_group(source, model_name, own, groups)
    return RouterConfig(
        path=path,
        model_list=_model_list(entries, deployments),
        router_settings=settings,
        model_name=chosen,
        max_concurrency=own.get("max_concurrency"),
        supports_logprobs=own.get("supports_logprobs"),
        deployments=tuple(deployments),
    )


def _check_top_level(source: str, document: Any) -> list[Any]:
    if not isinstance(document, Mapping):
        raise config_error(
            source,
            "(top level)",
            document,
            "must be a mapping with a `model_list` (a LiteLLM router/proxy config)",
        )
    unknown = sorted(set(document) - set(_TOP_LEVEL))
    if unknown:
        raise RouterConfigError(
            f"{source}: unknown top-level key(s) {unknown}. Allowed: {list(_TOP_LEVEL)}."
        )
    for key in sorted(_IGNORED_TOP_LEVEL & set(document)):
        logger.warning(
            "%s: `%s` (a LiteLLM proxy-server setting) is ignored by judgeopt%s",
            source,
            key,
            "; set those variables in the environment instead"
            if key == "environment_variables"
            else "",
        )
    entries = document.get("model_list")
    if not isinstance(entries, list) or not entries:
        raise config_error(
            source,
            "model_list",
            entries,
            "must be a non-empty list of deployments "
            "({model_name, litellm_params: {model, api_base, ...}, model_info})",
        )
    return entries


def _router_settings(source: str, document: Mapping[str, Any], groups: list[str]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    litellm_settings = document.get("litellm_settings") or {}
    if not isinstance(litellm_settings, Mapping):
        raise config_error(source, "litellm_settings", litellm_settings, "must be a mapping")
    ignored = sorted(set(litellm_settings) - set(_LITELLM_TO_ROUTER))
    if ignored:
        logger.warning(
            "%s: litellm_settings %s are ignored by judgeopt (it passes only %s on to the Router)",
            source,
            ignored,
            sorted(_LITELLM_TO_ROUTER),
        )
    for key, target in _LITELLM_TO_ROUTER.items():
        if key in litellm_settings:
            settings[target] = litellm_settings[key]
    router_settings = document.get("router_settings") or {}
    if not isinstance(router_settings, Mapping):
        raise config_error(
            source,
            "router_settings",
            router_settings,
            "must be a mapping of litellm.Router settings",
        )
    settings.update(router_settings)
    check_router_settings(source, settings, groups)
    return settings


def _judgeopt_section(source: str, document: Mapping[str, Any]) -> Mapping[str, Any]:
    own = document.get("judgeopt") or {}
    if not isinstance(own, Mapping):
        raise config_error(
            source, "judgeopt", own, f"must be a mapping with keys {list(_JUDGEOPT_KEYS)}"
        )
    unknown = sorted(set(own) - set(_JUDGEOPT_KEYS))
    if unknown:
        raise RouterConfigError(
            f"{source}: unknown key(s) {unknown} in `judgeopt`. Allowed: {list(_JUDGEOPT_KEYS)}."
        )
    if own.get("max_concurrency") is not None:
        check_config_number(
            source, "judgeopt.max_concurrency", own["max_concurrency"], integer=True, minimum=1
        )
    logprobs = own.get("supports_logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise config_error(source, "judgeopt.supports_logprobs", logprobs, "must be true or false")
    return own


def _chosen_group(
    source: str, model_name: str | None, own: Mapping[str, Any], groups: list[str]
) -> str:
    chosen = model_name or own.get("model_name")
    if chosen is None:
        if len(groups) > 1:
            raise RouterConfigError(
                f"{source} has several model groups {groups}: say which one judges, with "
                "`judgeopt: {model_name: GROUP}` in the file, 'router:FILE#GROUP', or "
                "--router FILE --model GROUP."
            )
        chosen = groups[0]
    if chosen not in groups:
        field = "judgeopt.model_name" if model_name is None else "the model group"
        raise config_error(
            source, field, chosen, f"must be one of the file's model groups {groups}"
        )
    return str(chosen)


def _model_list(
    entries: list[Any], deployments: list[RouterDeployment]
) -> tuple[dict[str, Any], ...]:
    model_list = []
    for entry, deployment in zip(entries, deployments, strict=True):
        params = dict(entry["litellm_params"])
        provider = provider_of(params["model"])
        if (
            params.get("api_base")
            and provider in OPENAI_COMPATIBLE
            and not params.get("api_key")
            and not os.environ.get(f"{provider.upper().replace('-', '_')}_API_KEY")
        ):
            # The openai SDK refuses to send a request without a key; local servers need none.
            params["api_key"] = NO_KEY
        info = dict(entry.get("model_info") or {})
        info["id"] = deployment.id
        model_list.append(
            {"model_name": deployment.model_name, "litellm_params": params, "model_info": info}
        )
    return tuple(model_list)


def load_router_config(
    path: str | os.PathLike[str], *, model_name: str | None = None
) -> RouterConfig:
    """Read and validate a router config file (YAML, or JSON for a ``.json`` file).

    The file is a LiteLLM proxy config: ``model_list`` (required; LiteLLM's schema),
    ``router_settings`` (keyword arguments of ``litellm.Router``: ``routing_strategy``,
    ``num_retries``, ``fallbacks``, ``allowed_fails``, ``cooldown_time``, ``timeout``...),
    ``litellm_settings`` (only the keys a LiteLLM proxy hands on to its Router are used), and
    judgeopt's own ``judgeopt`` section (``model_name``, ``max_concurrency``,
    ``supports_logprobs``).

    Args:
        path: The file.
        model_name: The model group to call (default: ``judgeopt.model_name``, else the
            file's only group).

    Raises:
        RouterConfigError: For a missing or unreadable file or an invalid field (naming the
            file, the field, the value and what is allowed).
    """
    file = Path(path).expanduser()
    return build_router_config(
        _read_document(file), source=str(file), path=file, model_name=model_name
    )


def write_router_config(
    path: str | os.PathLike[str],
    deployments: Sequence[Mapping[str, Any]],
    *,
    model_name: str = "judge",
    router_settings: Mapping[str, Any] | None = None,
    header: str | None = None,
) -> Path:
    """Write a router config file (YAML) that :func:`load_router_config` reads.

    Args:
        path: Where to write (parent directories are created; replaced atomically).
        deployments: One mapping per server: ``model`` (LiteLLM model string), ``api_base``,
            and optionally ``model_id`` (what it serves, for the cache) and ``id``.
        model_name: The model group of every deployment.
        router_settings: ``litellm.Router`` settings.
        header: A comment put at the top of the file.

    Returns:
        The path written.
    """
    import yaml

    entries = []
    for d in deployments:
        info = {
            k: v
            for k, v in (("id", d.get("id")), (MODEL_ID_KEY, d.get("model_id")))
            if v is not None
        }
        entry: dict[str, Any] = {
            "model_name": model_name,
            "litellm_params": {"model": d["model"], "api_base": d["api_base"]},
        }
        if info:
            entry["model_info"] = info
        entries.append(entry)
    document: dict[str, Any] = {"model_list": entries}
    if router_settings:
        document["router_settings"] = dict(router_settings)
    document["judgeopt"] = {"model_name": model_name}
    text = yaml.safe_dump(document, sort_keys=False, default_flow_style=False)
    if header:
        text = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines()) + text
    out = Path(path)
    build_router_config(yaml.safe_load(text), source=str(out), path=out)  # never write junk
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out, text)
    return out
