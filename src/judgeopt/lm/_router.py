"""Several servers as one judgeopt LM: a LiteLLM Router configured from one file.

The file is a LiteLLM proxy ``config.yaml`` (its ``model_list`` and ``router_settings``), so
an existing LiteLLM configuration works as it is. Load balancing, retries, fallbacks and
cooldowns are LiteLLM's (``litellm.Router``); judgeopt adds what every judgeopt LM has: the
persistent cache, the accounting (with per-deployment counters), the error tree, bounded
concurrency and the DSPy integration. See ``docs/lm.md``, "Several servers".
"""

from __future__ import annotations

from .._errors import JudgeoptError
import json
import logging
import os
import re
import threading
import time
import typing
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any


import dspy
from dspy.clients.base_lm import LM_CLASS_STATE_KEY

from ._base import JudgeoptLMMixin, Messages, resolve_cache, to_plain, usage_of
from ._cache import LMCache
from ._errors import LMError, LMServerError, wrap_exception
from ._litellm import _OPENAI_COMPATIBLE, NO_KEY, _provider_of
from ._stats import StatsRecorder

__all__ = [
    "ROUTER_PREFIX",
    "RouterConfig",
    "RouterConfigError",
    "RouterDeployment",
    "RouterLM",
    "load_router_config",
    "parse_router_model",
    "write_router_config",
]

logger = logging.getLogger(__name__)

#: Model strings of the form ``"router:FILE"`` or ``"router:FILE#GROUP"`` name a RouterLM.
ROUTER_PREFIX = "router:"

#: ``model_info`` key naming what a deployment serves, for the cache: deployments with the
#: same value (replicas of one model on one engine) share cache entries.
MODEL_ID_KEY = "judgeopt_model_id"

#: Default requests in flight per deployment when ``max_concurrency`` is not given.
PER_DEPLOYMENT_CONCURRENCY = 8

_TOP_LEVEL = ("model_list", "router_settings", "litellm_settings", "judgeopt",
              "general_settings", "environment_variables")
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
#: Router arguments a file may not set: they are given by judgeopt, or would bypass its cache.
_REFUSED_SETTINGS = {
    "model_list": "it is the top-level `model_list`",
    "cache_responses": "judgeopt has its own response cache (LiteLLM's would answer calls "
                       "that judgeopt's accounting never sees)",
}
_RETRY_AFTER = re.compile(r"[Tt]ry again in (\d+(?:\.\d+)?) seconds")


class RouterConfigError(JudgeoptError, ValueError):
    """A router config file is unreadable or invalid; the message names the file and field."""


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
        return f"{self.model}@{self.api_base or 'default:' + _provider_of(self.model)}"


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


def _fail(source: str, field: str, value: Any, allowed: str) -> RouterConfigError:
    shown = repr(value)
    if len(shown) > 120:
        shown = shown[:117] + "..."
    return RouterConfigError(f"{source}: `{field}` {allowed}. Got {shown} instead.")


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


def _check_number(source: str, field: str, value: Any, *, integer: bool, minimum: float,
                  strict: bool = False) -> None:
    kinds = (int,) if integer else (int, float)
    bad = isinstance(value, bool) or not isinstance(value, kinds)
    if not bad:
        bad = value <= minimum if strict else value < minimum
    if bad:
        what = "an int" if integer else "a number"
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise _fail(source, field, value, f"must be {what} {bound}")


def _check_fallbacks(source: str, field: str, value: Any, groups: Sequence[str]) -> None:
    if not isinstance(value, list):
        raise _fail(source, field, value,
                    "must be a list of {model_group: [fallback groups]} mappings")
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or len(item) != 1:
            raise _fail(source, f"{field}[{i}]", item,
                        "must be a one-key mapping {model_group: [fallback groups]}")
        ((key, targets),) = item.items()
        names = [targets] if isinstance(targets, str) else targets
        if not isinstance(names, list) or not all(isinstance(t, str) for t in names):
            raise _fail(source, f"{field}[{i}].{key}", targets, "must be a list of model groups")
        for name in ([] if key == "*" else [key]) + names:
            if name not in groups:
                raise _fail(source, f"{field}[{i}]", name,
                            f"names a model group that is not in `model_list` ({list(groups)})")


def _router_parameters() -> dict[str, Any]:
    import inspect

    import litellm

    return dict(inspect.signature(litellm.Router.__init__).parameters)


def _check_router_settings(source: str, settings: Mapping[str, Any], groups: Sequence[str]
                           ) -> None:
    parameters = _router_parameters()
    allowed = sorted(set(parameters) - {"self"} - set(_REFUSED_SETTINGS))
    for key, value in settings.items():
        field = f"router_settings.{key}"
        if key in _REFUSED_SETTINGS:
            if key == "cache_responses" and not value:
                continue
            raise RouterConfigError(f"{source}: `{field}` cannot be set here: "
                                    f"{_REFUSED_SETTINGS[key]}.")
        if key not in parameters or key == "self":
            raise RouterConfigError(
                f"{source}: `{field}` is not a setting of litellm.Router. Allowed: {allowed}."
            )
    for key in ("num_retries", "allowed_fails", "max_fallbacks"):
        if settings.get(key) is not None:
            _check_number(source, f"router_settings.{key}", settings[key], integer=True,
                          minimum=0)
    for key in ("cooldown_time", "retry_after"):
        if settings.get(key) is not None:
            _check_number(source, f"router_settings.{key}", settings[key], integer=False,
                          minimum=0)
    if settings.get("timeout") is not None:
        _check_number(source, "router_settings.timeout", settings["timeout"], integer=False,
                      minimum=0, strict=True)
    if "routing_strategy" in settings:
        strategies = _routing_strategies(parameters["routing_strategy"].annotation)
        if strategies and settings["routing_strategy"] not in strategies:
            raise _fail(source, "router_settings.routing_strategy", settings["routing_strategy"],
                        f"must be one of {strategies}")
    for key in ("fallbacks", "context_window_fallbacks", "content_policy_fallbacks"):
        if settings.get(key):
            _check_fallbacks(source, f"router_settings.{key}", settings[key], groups)
    if settings.get("default_fallbacks"):
        value = settings["default_fallbacks"]
        if not isinstance(value, list) or any(g not in groups for g in value):
            raise _fail(source, "router_settings.default_fallbacks", value,
                        f"must be a list of model groups of `model_list` ({list(groups)})")


def _routing_strategies(annotation: Any) -> list[str]:
    """The values of the ``RoutingStrategyName`` literal (empty if it cannot be read)."""
    if isinstance(annotation, str):
        try:
            from litellm.types.router import RoutingStrategyName

            annotation = RoutingStrategyName
        except ImportError:  # pragma: no cover - depends on LiteLLM's layout
            return []
    values = [v for v in typing.get_args(annotation) if isinstance(v, str)]
    return sorted(values)


def _check_entry(source: str, i: int, entry: Any) -> RouterDeployment:
    where = f"model_list[{i}]"
    if not isinstance(entry, Mapping):
        raise _fail(source, where, entry,
                    "must be a mapping with model_name, litellm_params and model_info")
    unknown = sorted(set(entry) - set(_ENTRY_KEYS))
    if unknown:
        raise RouterConfigError(f"{source}: `{where}` has unknown key(s) {unknown}; a "
                                f"deployment has {list(_ENTRY_KEYS)}.")
    name = entry.get("model_name")
    if not isinstance(name, str) or not name.strip():
        raise _fail(source, f"{where}.model_name", name,
                    "must be a non-empty string (the model group the deployment serves)")
    params = entry.get("litellm_params")
    if not isinstance(params, Mapping):
        raise _fail(source, f"{where}.litellm_params", params,
                    "must be a mapping with at least `model` (a LiteLLM model string)")
    model = params.get("model")
    try:
        _provider_of(model)
    except ValueError:
        raise _fail(source, f"{where}.litellm_params.model", model,
                    "must be a LiteLLM model string naming a provider, like 'openai/NAME' "
                    "for an OpenAI-compatible server (vLLM, llama.cpp) or "
                    "'openai/gpt-4o-mini'") from None
    api_base = params.get("api_base")
    if api_base is not None and not (
        isinstance(api_base, str)
        and (api_base.startswith(("http://", "https://", "os.environ/")))
    ):
        raise _fail(source, f"{where}.litellm_params.api_base", api_base,
                    "must be an http:// or https:// URL (or 'os.environ/VARIABLE')")
    info = entry.get("model_info", {})
    if not isinstance(info, Mapping):
        raise _fail(source, f"{where}.model_info", info, "must be a mapping")
    model_id = info.get(MODEL_ID_KEY)
    if model_id is not None and (not isinstance(model_id, str) or not model_id.strip()):
        raise _fail(source, f"{where}.model_info.{MODEL_ID_KEY}", model_id,
                    "must be a non-empty string naming what the deployment serves")
    given_id = info.get("id")
    if given_id is not None and (not isinstance(given_id, str) or not given_id.strip()):
        raise _fail(source, f"{where}.model_info.id", given_id, "must be a non-empty string")
    base = api_base.rstrip("/") if isinstance(api_base, str) else None
    default_id = f"{model}@{base or 'default:' + _provider_of(model)}"
    return RouterDeployment(id=given_id or default_id, model_name=name, model=model,
                            api_base=base, model_id=model_id)


def build_router_config(document: Any, *, source: str = "<in-memory router config>",
                        path: Path | None = None, model_name: str | None = None
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
    if not isinstance(document, Mapping):
        raise _fail(source, "(top level)", document,
                    "must be a mapping with a `model_list` (a LiteLLM router/proxy config)")
    unknown = sorted(set(document) - set(_TOP_LEVEL))
    if unknown:
        raise RouterConfigError(f"{source}: unknown top-level key(s) {unknown}. Allowed: "
                                f"{list(_TOP_LEVEL)}.")
    for key in sorted(_IGNORED_TOP_LEVEL & set(document)):
        logger.warning("%s: `%s` (a LiteLLM proxy-server setting) is ignored by judgeopt%s",
                       source, key, "; set those variables in the environment instead"
                       if key == "environment_variables" else "")
    entries = document.get("model_list")
    if not isinstance(entries, list) or not entries:
        raise _fail(source, "model_list", entries,
                    "must be a non-empty list of deployments "
                    "({model_name, litellm_params: {model, api_base, ...}, model_info})")
    deployments = [_check_entry(source, i, e) for i, e in enumerate(entries)]
    ids = [d.id for d in deployments]
    duplicates = sorted({x for x in ids if ids.count(x) > 1})
    if duplicates:
        raise RouterConfigError(
            f"{source}: several deployments have the id(s) {duplicates}: give each its own "
            "`model_info.id` (deployments without one are named MODEL@API_BASE).")
    groups = list(dict.fromkeys(d.model_name for d in deployments))

    settings: dict[str, Any] = {}
    litellm_settings = document.get("litellm_settings") or {}
    if not isinstance(litellm_settings, Mapping):
        raise _fail(source, "litellm_settings", litellm_settings, "must be a mapping")
    ignored = sorted(set(litellm_settings) - set(_LITELLM_TO_ROUTER))
    if ignored:
        logger.warning("%s: litellm_settings %s are ignored by judgeopt (it passes only %s "
                       "on to the Router)", source, ignored, sorted(_LITELLM_TO_ROUTER))
    for key, target in _LITELLM_TO_ROUTER.items():
        if key in litellm_settings:
            settings[target] = litellm_settings[key]
    router_settings = document.get("router_settings") or {}
    if not isinstance(router_settings, Mapping):
        raise _fail(source, "router_settings", router_settings,
                    "must be a mapping of litellm.Router settings")
    settings.update(router_settings)
    _check_router_settings(source, settings, groups)

    own = document.get("judgeopt") or {}
    if not isinstance(own, Mapping):
        raise _fail(source, "judgeopt", own, f"must be a mapping with keys {list(_JUDGEOPT_KEYS)}")
    unknown = sorted(set(own) - set(_JUDGEOPT_KEYS))
    if unknown:
        raise RouterConfigError(f"{source}: unknown key(s) {unknown} in `judgeopt`. Allowed: "
                                f"{list(_JUDGEOPT_KEYS)}.")
    if own.get("max_concurrency") is not None:
        _check_number(source, "judgeopt.max_concurrency", own["max_concurrency"], integer=True,
                      minimum=1)
    logprobs = own.get("supports_logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise _fail(source, "judgeopt.supports_logprobs", logprobs, "must be true or false")
    chosen = model_name or own.get("model_name")
    if chosen is None:
        if len(groups) > 1:
            raise RouterConfigError(
                f"{source} has several model groups {groups}: say which one judges, with "
                "`judgeopt: {model_name: GROUP}` in the file, 'router:FILE#GROUP', or "
                "--router FILE --model GROUP.")
        chosen = groups[0]
    if chosen not in groups:
        field = "judgeopt.model_name" if model_name is None else "the model group"
        raise _fail(source, field, chosen, f"must be one of the file's model groups {groups}")

    model_list = []
    for entry, deployment in zip(entries, deployments, strict=True):
        params = dict(entry["litellm_params"])
        provider = _provider_of(params["model"])
        if (params.get("api_base") and provider in _OPENAI_COMPATIBLE
                and not params.get("api_key")
                and not os.environ.get(f"{provider.upper().replace('-', '_')}_API_KEY")):
            # The openai SDK refuses to send a request without a key; local servers need none.
            params["api_key"] = NO_KEY
        info = dict(entry.get("model_info") or {})
        info["id"] = deployment.id
        model_list.append({"model_name": deployment.model_name, "litellm_params": params,
                           "model_info": info})
    return RouterConfig(path=path, model_list=tuple(model_list), router_settings=settings,
                        model_name=chosen, max_concurrency=own.get("max_concurrency"),
                        supports_logprobs=logprobs, deployments=tuple(deployments))


def load_router_config(path: str | os.PathLike[str], *, model_name: str | None = None
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
    return build_router_config(_read_document(file), source=str(file), path=file,
                               model_name=model_name)


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

    from .._io import write_text_atomic

    entries = []
    for d in deployments:
        info = {k: v for k, v in (("id", d.get("id")), (MODEL_ID_KEY, d.get("model_id")))
                if v is not None}
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


# -- the LM ------------------------------------------------------------------------------------


class _CallTrace:
    """What one RouterLM call went through: its attempts and its last failure."""

    __slots__ = ("attempts", "last_error", "last_exc")

    def __init__(self) -> None:
        self.attempts = 0
        self.last_exc: BaseException | None = None
        self.last_error: LMError | None = None


class _Observer:
    """Counts every attempt the Router makes, per deployment, under the LM's concurrency
    bound; shared by a RouterLM, its copies and its Router."""

    def __init__(self, stats: StatsRecorder, slots: threading.BoundedSemaphore,
                 deployments: Mapping[str, RouterDeployment],
                 describe: Callable[[RouterDeployment, int], str]) -> None:
        self.stats = stats
        self.slots = slots
        self.deployments = dict(deployments)
        self.describe = describe
        self._chosen = threading.local()
        self._calls: dict[str, _CallTrace] = {}
        self._lock = threading.Lock()

    def open(self, token: str) -> _CallTrace:
        trace = _CallTrace()
        with self._lock:
            self._calls[token] = trace
        return trace

    def close(self, token: str) -> None:
        with self._lock:
            self._calls.pop(token, None)

    def chosen(self, deployment: Mapping[str, Any]) -> None:
        info = deployment.get("model_info") or {}
        self._chosen.value = self.deployments.get(str(info.get("id")))

    def attempt(self, send: Any, model: str, messages: Any, kwargs: dict[str, Any]) -> Any:
        metadata = kwargs.get("metadata") if isinstance(kwargs.get("metadata"), Mapping) else {}
        with self._lock:
            trace = self._calls.get(str(metadata.get("judgeopt_call")))
        self._chosen.value = None
        with self.slots:
            started = time.monotonic()
            try:
                response = send(model, messages, **kwargs)
            except Exception as exc:
                deployment = self._chosen.value
                if deployment is None:
                    raise  # no deployment was available: no request was sent
                attempts = self._count(trace)
                # NOTE: classified here, while the exception still has its cause chain (the
                # Router re-raises it inside an `except`, which replaces its __context__).
                error = wrap_exception(exc, model=deployment.model,
                                       endpoint=self.describe(deployment, attempts),
                                       timeout=_number(kwargs.get("timeout")))
                self.stats.record_failure(error.kind, time.monotonic() - started,
                                          deployment=deployment.id)
                if trace is not None:
                    trace.last_exc, trace.last_error = exc, error
                raise
            deployment = self._chosen.value
            self._count(trace)
            self.stats.record_call(time.monotonic() - started, usage_of(response),
                                   deployment=deployment.id if deployment else None)
            return response

    def _count(self, trace: _CallTrace | None) -> int:
        """Count an attempt of a call (a retry unless it is the first); return its number."""
        if trace is None:
            return 1
        if trace.attempts:
            self.stats.record_retry()
        trace.attempts += 1
        return trace.attempts


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def _make_router(config: RouterConfig, observer: _Observer, settings: Mapping[str, Any]) -> Any:
    import litellm

    class JudgeoptRouter(litellm.Router):  # type: ignore[misc]
        """``litellm.Router`` that reports each attempt to judgeopt's accounting.

        NOTE: ``_completion`` (one attempt on one deployment) and
        ``get_available_deployment`` are LiteLLM internals of the pinned 1.106.2;
        tests/test_router.py checks both hooks still see every attempt.
        """

        def get_available_deployment(self, *args: Any, **kwargs: Any) -> Any:
            deployment = super().get_available_deployment(*args, **kwargs)
            if isinstance(deployment, Mapping):
                observer.chosen(deployment)
            return deployment

        def _completion(self, model: str, messages: Any, **kwargs: Any) -> Any:
            return observer.attempt(super()._completion, model, messages, kwargs)

    try:
        return JudgeoptRouter(model_list=[dict(e) for e in config.model_list], **settings)
    except Exception as exc:  # LiteLLM validates types and values of its settings
        raise RouterConfigError(f"{config.source}: litellm.Router refused the config: "
                                f"{type(exc).__name__}: {exc}") from exc


class RouterLM(JudgeoptLMMixin, dspy.LM):
    """One model group of a LiteLLM Router (several servers) as a judgeopt LM.

    ``litellm.Router`` chooses a deployment for each request (``routing_strategy``), retries
    on another deployment, falls back to other model groups and cools failing deployments
    down, as the config file says. judgeopt adds its persistent cache, accounting (every
    attempt is counted, per deployment too: ``stats().deployments``), error classification
    and a bound on the requests in flight. judgeopt itself never retries a RouterLM call:
    the Router's ``num_retries`` is the only retry budget.

    Args:
        config: A :class:`RouterConfig`, or the path of a config file.
        model_name: The model group to call (default: the config's).
        temperature: Default sampling temperature.
        max_tokens: Default completion budget.
        cache: ``True`` (default directory), ``False``, a directory, or an :class:`LMCache`.
        max_concurrency: At most this many requests in flight (default:
            ``judgeopt.max_concurrency`` of the file, else 8 per deployment of the group).
        timeout: Per-attempt timeout in seconds (overrides ``router_settings.timeout``).
        num_retries: The Router's retries (overrides ``router_settings.num_retries``).
        supports_logprobs: ``True``/``False`` to skip the logprob probe (default: the
            file's ``judgeopt.supports_logprobs``, else ``None``: probe when needed).
        **kwargs: Further default decoding parameters (``seed``, ``top_p``, ``logprobs``...).

    Raises:
        RouterConfigError: If the config is invalid.
        ValueError: If an argument is out of range.
    """

    def __init__(
        self,
        config: RouterConfig | str | os.PathLike[str],
        *,
        model_name: str | None = None,
        temperature: float | None = 0.0,
        max_tokens: int | None = 1024,
        cache: bool | str | os.PathLike[str] | LMCache | None = True,
        max_concurrency: int | None = None,
        timeout: float | None = None,
        num_retries: int | None = None,
        supports_logprobs: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(config, RouterConfig):
            config = load_router_config(config, model_name=model_name)
        elif model_name is not None and model_name != config.model_name:
            if model_name not in config.groups:
                raise _fail(config.source, "the model group", model_name,
                            f"must be one of the file's model groups {list(config.groups)}")
            config = replace(config, model_name=model_name)
        misplaced = sorted(set(kwargs) & {"api_base", "api_key", "base_url", "max_retries",
                                           "model_type"})
        if misplaced:
            raise ValueError(
                f"RouterLM got {misplaced}: endpoints, keys and retries of a router come from "
                f"its config file ({config.source}), and it serves chat completions only.")
        settings = dict(config.router_settings)
        if timeout is not None:
            _check_number("RouterLM", "timeout", timeout, integer=False, minimum=0, strict=True)
            settings["timeout"] = float(timeout)
        if num_retries is not None:
            _check_number("RouterLM", "num_retries", num_retries, integer=True, minimum=0)
            settings["num_retries"] = num_retries
        group = config.group()
        limit = max_concurrency or config.max_concurrency or PER_DEPLOYMENT_CONCURRENCY * len(
            group)
        _check_number("RouterLM", "max_concurrency", limit, integer=True, minimum=1)
        super().__init__(
            model=group[0].model,  # DSPy asks the LM about its model's capabilities
            model_type="chat",
            temperature=temperature,
            max_tokens=max_tokens,
            cache=False,  # judgeopt's cache is used instead of DSPy's
            num_retries=0,  # the Router retries; DSPy and judgeopt never do
            **kwargs,
        )
        self.config = config
        self.model_name = config.model_name
        self.max_concurrency = int(limit)
        self.timeout = settings.get("timeout")
        self.router_num_retries = settings.get("num_retries")
        if supports_logprobs is None:
            supports_logprobs = config.supports_logprobs
        self.supports_logprobs = supports_logprobs
        self._stats = StatsRecorder()
        self._response_cache = resolve_cache(cache)
        by_id = {d.id: d for d in config.deployments}
        self._observer = _Observer(self._stats, threading.BoundedSemaphore(self.max_concurrency),
                                   by_id, self._describe)
        self._router = _make_router(config, self._observer, settings)
        self._identity = "|".join(sorted({d.cache_identity for d in group}))

    def __repr__(self) -> str:
        return (f"RouterLM({self.spec!r}, deployments={len(self.deployments)}, "
                f"model={self.model!r})")

    @property
    def spec(self) -> str:
        """The model string that rebuilds this LM: ``"router:FILE#GROUP"``."""
        return f"{ROUTER_PREFIX}{self.config.source}#{self.model_name}"

    @property
    def deployments(self) -> tuple[RouterDeployment, ...]:
        """The deployments of the model group this LM calls."""
        return self.config.group()

    @property
    def endpoints(self) -> tuple[tuple[str, str | None], ...]:
        """``(model, api_base)`` of every deployment of the group (the logprob check reads
        them)."""
        return tuple((d.model, d.api_base) for d in self.deployments)

    @property
    def router(self) -> Any:
        """The underlying ``litellm.Router`` (shared with this LM's copies)."""
        return self._router

    def _cache_identity(self) -> tuple[str, str | None]:
        # NOTE: the group's deployments are interchangeable by the config's own word (the
        # Router spreads requests over them), so they share entries; what each serves comes
        # from model_info.judgeopt_model_id, else from its model string and endpoint.
        return self._identity, "router"

    def _to_cacheable(self, response: Any) -> dict[str, Any]:
        hidden = getattr(response, "_hidden_params", None) or {}
        deployment = self._observer.deployments.get(str(hidden.get("model_id")))
        if deployment is None or deployment.model_name != self.model_name:
            # An answer of a fallback group (another model) must not be stored under this
            # group's key; an answer of an unknown deployment neither.
            return {}
        plain = to_plain(response)
        return plain if isinstance(plain, dict) else {}

    def _generate(self, messages: Messages, params: dict[str, Any]) -> Any:
        request = {k: v for k, v in params.items() if k not in ("rollout_id", "num_retries")}
        token = uuid.uuid4().hex
        request["metadata"] = {**(request.get("metadata") or {}), "judgeopt_call": token}
        trace = self._observer.open(token)
        try:
            response = self._router.completion(model=self.model_name, messages=messages,
                                               **request)
        except Exception as exc:  # noqa: BLE001 - classified below
            error = self._wrap(exc, trace, request.get("timeout", self.timeout))
            if error is exc:
                raise
            raise error from exc
        finally:
            self._observer.close(token)
        self._check_truncation(response, request.get("max_tokens"))
        return response

    def _describe(self, deployment: RouterDeployment, attempt: int) -> str:
        """The endpoint of a failed attempt, as error messages show it."""
        return (f"{deployment.api_base or 'the provider default'} (deployment "
                f"{deployment.id!r} of router {self.config.source}, model group "
                f"{deployment.model_name!r}, attempt {attempt})")

    def _wrap(self, exc: BaseException, trace: _CallTrace, timeout: Any) -> LMError:
        if trace.last_exc is exc and trace.last_error is not None:
            return trace.last_error  # the last attempt's failure, classified when it happened
        where = f"router {self.config.source} (model group {self.model_name!r})"
        if type(exc).__name__ in ("RouterRateLimitError", "RouterRateLimitErrorBasic"):
            match = _RETRY_AFTER.search(str(exc))
            return LMServerError(
                f"no deployment of model group {self.model_name!r} in {self.config.source} is "
                f"available: all {len(self.deployments)} are cooling down after failures "
                f"(router_settings.cooldown_time / allowed_fails). Check the servers; "
                f"{' '.join(str(exc).split())[:300]}",
                model=self.model, endpoint=where,
                retry_after=float(match.group(1)) if match else None,
            )
        return wrap_exception(exc, model=self.model, endpoint=where, timeout=_number(timeout))

    def dump_state(self) -> dict[str, Any]:
        """Return what rebuilds this LM: the config file, the group and the settings."""
        state = {k: v for k, v in self.kwargs.items() if k != LM_CLASS_STATE_KEY}
        state.update({
            LM_CLASS_STATE_KEY: f"{type(self).__module__}.{type(self).__qualname__}",
            "config": str(self.config.path) if self.config.path is not None else None,
            "model_name": self.model_name,
            "max_concurrency": self.max_concurrency,
        })
        return state

    @classmethod
    def load_state(cls, state: dict[str, Any], *, allow_custom_lm_class: bool = False
                   ) -> RouterLM:
        """Rebuild a RouterLM from :meth:`dump_state` output (reads the config file again)."""
        state = {k: v for k, v in state.items() if k != LM_CLASS_STATE_KEY}
        config = state.pop("config")
        if config is None:
            raise ValueError("This RouterLM was built from an in-memory config; its state "
                             "cannot be reloaded.")
        return cls(config, **state)
