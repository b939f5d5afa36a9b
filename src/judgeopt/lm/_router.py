"""Several servers as one judgeopt LM: a LiteLLM Router configured from one file.

The file is a LiteLLM proxy ``config.yaml`` (its ``model_list`` and ``router_settings``), so
an existing LiteLLM configuration works as it is. Load balancing, retries, fallbacks and
cooldowns are LiteLLM's (``litellm.Router``); judgeopt adds what every judgeopt LM has: the
persistent cache, the accounting (with per-deployment counters), the error tree, bounded
concurrency and the DSPy integration. See ``docs/lm.md``, "Several servers".
"""

from __future__ import annotations

import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import dspy
from dspy.clients.base_lm import LM_CLASS_STATE_KEY

from ._base import JudgeoptLMMixin, Messages, resolve_cache, to_plain, usage_of
from ._cache import LMCache
from ._errors import LMError, LMServerError, wrap_exception
from ._router_config import (
    PER_DEPLOYMENT_CONCURRENCY,
    ROUTER_PREFIX,
    RouterConfig,
    RouterConfigError,
    RouterDeployment,
    check_config_number,
    config_error,
    load_router_config,
    parse_router_model,
    write_router_config,
)
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

_RETRY_AFTER = re.compile(r"[Tt]ry again in (\d+(?:\.\d+)?) seconds")


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

    def __init__(
        self,
        stats: StatsRecorder,
        slots: threading.BoundedSemaphore,
        deployments: Mapping[str, RouterDeployment],
        describe: Callable[[RouterDeployment, int], str],
    ) -> None:
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
                error = wrap_exception(
                    exc,
                    model=deployment.model,
                    endpoint=self.describe(deployment, attempts),
                    timeout=_number(kwargs.get("timeout")),
                )
                self.stats.record_failure(
                    error.kind, time.monotonic() - started, deployment=deployment.id
                )
                if trace is not None:
                    trace.last_exc, trace.last_error = exc, error
                raise
            deployment = self._chosen.value
            self._count(trace)
            self.stats.record_call(
                time.monotonic() - started,
                usage_of(response),
                deployment=deployment.id if deployment else None,
            )
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
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


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
        raise RouterConfigError(
            f"{config.source}: litellm.Router refused the config: {type(exc).__name__}: {exc}"
        ) from exc


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
                raise config_error(
                    config.source,
                    "the model group",
                    model_name,
                    f"must be one of the file's model groups {list(config.groups)}",
                )
            config = replace(config, model_name=model_name)
        misplaced = sorted(
            set(kwargs) & {"api_base", "api_key", "base_url", "max_retries", "model_type"}
        )
        if misplaced:
            raise ValueError(
                f"RouterLM got {misplaced}: endpoints, keys and retries of a router come from "
                f"its config file ({config.source}), and it serves chat completions only."
            )
        settings = dict(config.router_settings)
        if timeout is not None:
            check_config_number(
                "RouterLM", "timeout", timeout, integer=False, minimum=0, strict=True
            )
            settings["timeout"] = float(timeout)
        if num_retries is not None:
            check_config_number("RouterLM", "num_retries", num_retries, integer=True, minimum=0)
            settings["num_retries"] = num_retries
        group = config.group()
        limit = max_concurrency or config.max_concurrency or PER_DEPLOYMENT_CONCURRENCY * len(group)
        check_config_number("RouterLM", "max_concurrency", limit, integer=True, minimum=1)
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
        self._observer = _Observer(
            self._stats, threading.BoundedSemaphore(self.max_concurrency), by_id, self._describe
        )
        self._router = _make_router(config, self._observer, settings)
        self._identity = "|".join(sorted({d.cache_identity for d in group}))

    def __repr__(self) -> str:
        return f"RouterLM({self.spec!r}, deployments={len(self.deployments)}, model={self.model!r})"

    @property
    def spec(self) -> str:
        """The model string that rebuilds this LM: ``"router:FILE#GROUP"``."""
        return f"{ROUTER_PREFIX}{self.config.source}#{self.model_name}"

    @property
    def deployments(self) -> tuple[RouterDeployment, ...]:
        """The deployments of the model group this LM calls."""
        return self.config.group()

    def priced_model(self) -> str | None:
        """The deployments' model when they all serve one (priced by LiteLLM), else ``None``."""
        models = {model for model, _ in self.endpoints}
        return next(iter(models)) if len(models) == 1 else None

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
            response = self._router.completion(model=self.model_name, messages=messages, **request)
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
        return (
            f"{deployment.api_base or 'the provider default'} (deployment "
            f"{deployment.id!r} of router {self.config.source}, model group "
            f"{deployment.model_name!r}, attempt {attempt})"
        )

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
                model=self.model,
                endpoint=where,
                retry_after=float(match.group(1)) if match else None,
            )
        return wrap_exception(exc, model=self.model, endpoint=where, timeout=_number(timeout))

    def dump_state(self) -> dict[str, Any]:
        """Return what rebuilds this LM: the config file, the group and the settings."""
        state = {k: v for k, v in self.kwargs.items() if k != LM_CLASS_STATE_KEY}
        state.update(
            {
                LM_CLASS_STATE_KEY: f"{type(self).__module__}.{type(self).__qualname__}",
                "config": str(self.config.path) if self.config.path is not None else None,
                "model_name": self.model_name,
                "max_concurrency": self.max_concurrency,
            }
        )
        return state

    @classmethod
    def load_state(cls, state: dict[str, Any], *, allow_custom_lm_class: bool = False) -> RouterLM:
        """Rebuild a RouterLM from :meth:`dump_state` output (reads the config file again)."""
        state = {k: v for k, v in state.items() if k != LM_CLASS_STATE_KEY}
        config = state.pop("config")
        if config is None:
            raise ValueError(
                "This RouterLM was built from an in-memory config; its state cannot be reloaded."
            )
        return cls(config, **state)
