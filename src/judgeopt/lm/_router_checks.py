"""The checks of a router config's fields, and of its ``litellm.Router`` settings.

Every field of a router config file is checked with a message that names the file, the
field, the value and what is allowed: :class:`RouterConfigError` is what they raise,
:func:`config_error` builds one, :func:`check_config_number` checks a count, a limit or a
duration. :func:`check_router_settings` checks the ``litellm.Router`` keyword arguments a
file sets (its ``router_settings``, and the ``litellm_settings`` a LiteLLM proxy hands on)
against ``litellm.Router``'s own signature: only its parameters, none that judgeopt sets
itself or that would bypass its cache, numbers in range, a known routing strategy, and
fallbacks that name model groups of the file. ``_router_config.py`` reads the file with
them; :class:`judgeopt.lm.RouterLM` checks its own arguments with them.
"""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import JudgeoptError

__all__ = [
    "RouterConfigError",
    "check_config_number",
    "check_router_settings",
    "config_error",
]

#: Router arguments a file may not set: they are given by judgeopt, or would bypass its cache.
_REFUSED_SETTINGS = {
    "model_list": "it is the top-level `model_list`",
    "cache_responses": "judgeopt has its own response cache (LiteLLM's would answer calls "
    "that judgeopt's accounting never sees)",
}


class RouterConfigError(JudgeoptError, ValueError):
    """A router config file is unreadable or invalid; the message names the file and field."""


def config_error(source: str, field: str, value: Any, allowed: str) -> RouterConfigError:
    shown = repr(value)
    if len(shown) > 120:
        shown = shown[:117] + "..."
    return RouterConfigError(f"{source}: `{field}` {allowed}. Got {shown} instead.")


def check_config_number(
    source: str, field: str, value: Any, *, integer: bool, minimum: float, strict: bool = False
) -> None:
    kinds = (int,) if integer else (int, float)
    bad = isinstance(value, bool) or not isinstance(value, kinds)
    if not bad:
        bad = value <= minimum if strict else value < minimum
    if bad:
        what = "an int" if integer else "a number"
        bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
        raise config_error(source, field, value, f"must be {what} {bound}")


def _check_fallbacks(source: str, field: str, value: Any, groups: Sequence[str]) -> None:
    if not isinstance(value, list):
        raise config_error(
            source, field, value, "must be a list of {model_group: [fallback groups]} mappings"
        )
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or len(item) != 1:
            raise config_error(
                source,
                f"{field}[{i}]",
                item,
                "must be a one-key mapping {model_group: [fallback groups]}",
            )
        ((key, targets),) = item.items()
        names = [targets] if isinstance(targets, str) else targets
        if not isinstance(names, list) or not all(isinstance(t, str) for t in names):
            raise config_error(
                source, f"{field}[{i}].{key}", targets, "must be a list of model groups"
            )
        for name in ([] if key == "*" else [key]) + names:
            if name not in groups:
                raise config_error(
                    source,
                    f"{field}[{i}]",
                    name,
                    f"names a model group that is not in `model_list` ({list(groups)})",
                )


def _router_parameters() -> dict[str, Any]:
    import inspect

    import litellm

    return dict(inspect.signature(litellm.Router.__init__).parameters)


def check_router_settings(source: str, settings: Mapping[str, Any], groups: Sequence[str]) -> None:
    parameters = _router_parameters()
    _check_setting_names(source, settings, parameters)
    _check_setting_numbers(source, settings)
    if "routing_strategy" in settings:
        strategies = _routing_strategies(parameters["routing_strategy"].annotation)
        if strategies and settings["routing_strategy"] not in strategies:
            raise config_error(
                source,
                "router_settings.routing_strategy",
                settings["routing_strategy"],
                f"must be one of {strategies}",
            )
    for key in ("fallbacks", "context_window_fallbacks", "content_policy_fallbacks"):
        if settings.get(key):
            _check_fallbacks(source, f"router_settings.{key}", settings[key], groups)
    if settings.get("default_fallbacks"):
        value = settings["default_fallbacks"]
        if not isinstance(value, list) or any(g not in groups for g in value):
            raise config_error(
                source,
                "router_settings.default_fallbacks",
                value,
                f"must be a list of model groups of `model_list` ({list(groups)})",
            )


def _check_setting_names(
    source: str, settings: Mapping[str, Any], parameters: Mapping[str, Any]
) -> None:
    """Every key is a setting of ``litellm.Router`` that judgeopt lets a config set."""
    allowed = sorted(set(parameters) - {"self"} - set(_REFUSED_SETTINGS))
    for key, value in settings.items():
        field = f"router_settings.{key}"
        if key in _REFUSED_SETTINGS:
            if key == "cache_responses" and not value:
                continue
            raise RouterConfigError(
                f"{source}: `{field}` cannot be set here: {_REFUSED_SETTINGS[key]}."
            )
        if key not in parameters or key == "self":
            raise RouterConfigError(
                f"{source}: `{field}` is not a setting of litellm.Router. Allowed: {allowed}."
            )


def _check_setting_numbers(source: str, settings: Mapping[str, Any]) -> None:
    """The counts and durations are numbers >= 0 (the timeout > 0)."""
    for key in ("num_retries", "allowed_fails", "max_fallbacks"):
        if settings.get(key) is not None:
            check_config_number(
                source, f"router_settings.{key}", settings[key], integer=True, minimum=0
            )
    for key in ("cooldown_time", "retry_after"):
        if settings.get(key) is not None:
            check_config_number(
                source, f"router_settings.{key}", settings[key], integer=False, minimum=0
            )
    if settings.get("timeout") is not None:
        check_config_number(
            source,
            "router_settings.timeout",
            settings["timeout"],
            integer=False,
            minimum=0,
            strict=True,
        )


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
