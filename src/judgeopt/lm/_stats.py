"""Call accounting shared by every judgeopt LM: a thread-safe recorder and its frozen snapshot."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = ["DeploymentStats", "LMStats", "StatsRecorder"]


class _Totals:
    """``total_tokens`` and ``failed`` of a frozen counters dataclass."""

    failures: Mapping[str, int]
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens

    @property
    def failed(self) -> int:
        """Failed backend requests, all kinds together."""
        return sum(self.failures.values())


@dataclass(frozen=True)
class DeploymentStats(_Totals):
    """The share of one deployment (one server of a :class:`judgeopt.lm.RouterLM`) in an LM's
    accounting.

    Attributes:
        calls: Requests sent to this deployment, retries included.
        failures: Failed requests by error kind.
        prompt_tokens: Prompt tokens it reported.
        completion_tokens: Completion tokens it reported.
        seconds: Wall-clock seconds inside its requests, summed over threads.
    """

    calls: int = 0
    failures: Mapping[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict of the counters."""
        return {
            "calls": self.calls,
            "failures": dict(self.failures),
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class LMStats(_Totals):
    """A snapshot of one LM's accounting since it was built or last reset.

    Attributes:
        calls: Requests actually sent to the backend, retries included.
        cache_hits: Calls answered from the persistent cache (no backend request).
        failures: Failed backend requests by error kind (``"timeout"``, ``"connection"``...,
            see :class:`judgeopt.lm.LMError`). A call that failed, was retried and then
            succeeded counts one failure.
        retries: Backend requests that were retries of a failed one.
        prompt_tokens: Prompt tokens reported by the backend (cache hits add none).
        completion_tokens: Completion tokens reported by the backend.
        seconds: Wall-clock seconds spent inside backend requests, summed over threads.
        deployments: Per-deployment counters (:class:`DeploymentStats`) by deployment id, for
            LMs that spread requests over several servers (:class:`judgeopt.lm.RouterLM`);
            empty for the others.
    """

    calls: int = 0
    cache_hits: int = 0
    failures: Mapping[str, int] = field(default_factory=dict)
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    deployments: Mapping[str, DeploymentStats] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict of the snapshot (with ``total_tokens``)."""
        return {
            "calls": self.calls,
            "cache_hits": self.cache_hits,
            "failures": dict(self.failures),
            "retries": self.retries,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "seconds": self.seconds,
            "deployments": {k: v.to_dict() for k, v in self.deployments.items()},
        }


class _DeploymentCounters:
    """Mutable per-deployment counters (guarded by the recorder's lock)."""

    __slots__ = ("calls", "completion_tokens", "failures", "prompt_tokens", "seconds")

    def __init__(self) -> None:
        self.calls = 0
        self.failures: dict[str, int] = {}
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.seconds = 0.0

    def freeze(self) -> DeploymentStats:
        return DeploymentStats(
            calls=self.calls,
            failures=MappingProxyType(dict(self.failures)),
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            seconds=self.seconds,
        )


class StatsRecorder:
    """Thread-safe counters behind :class:`LMStats`; one per LM, shared by its copies.

    ``limit`` is the spending limit the LM and its copies obey (a
    :class:`judgeopt.lm.SpendLimit`, or ``None``).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.limit: Any = None
        self._reset_unlocked()

    def _reset_unlocked(self) -> None:
        self._calls = 0
        self._cache_hits = 0
        self._failures: dict[str, int] = {}
        self._retries = 0
        self._prompt_tokens = 0
        self._completion_tokens = 0
        self._seconds = 0.0
        self._deployments: dict[str, _DeploymentCounters] = {}

    def _deployment(self, name: str) -> _DeploymentCounters:
        counters = self._deployments.get(name)
        if counters is None:
            counters = self._deployments[name] = _DeploymentCounters()
        return counters

    def record_call(
        self,
        seconds: float,
        usage: Mapping[str, Any] | None = None,
        *,
        deployment: str | None = None,
    ) -> None:
        """Count one successful backend request with its duration and token usage.

        Args:
            seconds: Wall-clock duration of the request.
            usage: The response's ``usage`` block.
            deployment: The deployment that answered, for per-deployment counters.
        """
        prompt, completion = _tokens(usage)
        with self._lock:
            self._calls += 1
            self._seconds += seconds
            self._prompt_tokens += prompt
            self._completion_tokens += completion
            if deployment is not None:
                counters = self._deployment(deployment)
                counters.calls += 1
                counters.seconds += seconds
                counters.prompt_tokens += prompt
                counters.completion_tokens += completion

    def record_failure(self, kind: str, seconds: float, *, deployment: str | None = None) -> None:
        """Count one failed backend request of error kind ``kind`` (of ``deployment``)."""
        with self._lock:
            self._calls += 1
            self._seconds += seconds
            self._failures[kind] = self._failures.get(kind, 0) + 1
            if deployment is not None:
                counters = self._deployment(deployment)
                counters.calls += 1
                counters.seconds += seconds
                counters.failures[kind] = counters.failures.get(kind, 0) + 1

    def record_retry(self) -> None:
        """Count one retry of a failed backend request."""
        with self._lock:
            self._retries += 1

    def record_cache_hit(self) -> None:
        """Count one call answered from the cache."""
        with self._lock:
            self._cache_hits += 1

    def snapshot(self) -> LMStats:
        """Return the current counters as a frozen :class:`LMStats`."""
        with self._lock:
            return LMStats(
                calls=self._calls,
                cache_hits=self._cache_hits,
                failures=MappingProxyType(dict(self._failures)),
                retries=self._retries,
                prompt_tokens=self._prompt_tokens,
                completion_tokens=self._completion_tokens,
                seconds=self._seconds,
                deployments=MappingProxyType(
                    {name: c.freeze() for name, c in sorted(self._deployments.items())}
                ),
            )

    def reset(self) -> None:
        """Set every counter back to zero."""
        with self._lock:
            self._reset_unlocked()


def _tokens(usage: Mapping[str, Any] | None) -> tuple[int, int]:
    if not usage:
        return 0, 0
    prompt = usage.get("prompt_tokens") or 0
    completion = usage.get("completion_tokens") or 0
    return int(prompt), int(completion)
