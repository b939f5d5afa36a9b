"""RouterLM (a LiteLLM Router over several servers), its config file, and `judgeopt serve`.

The unit tests run the real ``litellm.Router`` against scripted OpenAI-compatible HTTP
servers on 127.0.0.1 (``judgeopt.testing.ScriptedServer``): the HTTP status and the reply of
each request are scripted, so retries, fallbacks, cooldowns and the accounting are checked
through LiteLLM's real code path. The ``slow`` tests start real llama.cpp servers of SmolLM2
(1 thread each) through the code ``judgeopt serve`` uses.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dspy
import pytest
import yaml

from judgeopt.data import load_records
from judgeopt.evaluate import evaluate
from judgeopt.judge import JudgeProgram, baseline_strategy, load_task, logprob_support
from judgeopt.lm import (
    LMBadRequest,
    LMCache,
    LMConnectionError,
    LMServerError,
    LocalModelError,
    RouterConfigError,
    RouterLM,
    load_router_config,
    make_lm,
    start_servers,
    write_router_config,
)
from judgeopt.lm import _replicas as serve_mod
from judgeopt.lm._router import parse_router_model
from judgeopt.testing import Activity, ScriptedServer

THREADS = 1  # llama.cpp threads per server in the slow tests (shared 2-core machines)


# -- scripted servers --------------------------------------------------------------------------


@pytest.fixture
def servers() -> Iterator[Callable[..., ScriptedServer]]:
    made: list[ScriptedServer] = []

    def make(name: str, **kwargs: Any) -> ScriptedServer:
        made.append(ScriptedServer(name, **kwargs))
        return made[-1]

    yield make
    for server in made:
        server.close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def deployment(
    api_base: str, group: str = "judge", model_id: str | None = "fake-model", **info: Any
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "model_name": group,
        "litellm_params": {"model": "openai/fake", "api_base": api_base},
    }
    model_info = {**({"judgeopt_model_id": model_id} if model_id else {}), **info}
    if model_info:
        entry["model_info"] = model_info
    return entry


def write_config(path: Path, entries: list[dict[str, Any]], **sections: Any) -> Path:
    path.write_text(yaml.safe_dump({"model_list": entries, **sections}), encoding="utf-8")
    return path


MESSAGES = [{"role": "user", "content": "Rate this."}]


# -- the config file --------------------------------------------------------------------------


def test_config_reads_litellm_model_list_and_router_settings(tmp_path: Path) -> None:
    path = write_config(
        tmp_path / "servers.yaml",
        [
            deployment("http://127.0.0.1:8081/v1"),
            deployment("https://gpu-node-3.example.org:8000/v1/", model_id=None, id="node3"),
        ],
        router_settings={"routing_strategy": "least-busy", "num_retries": 1, "cooldown_time": 5},
        litellm_settings={"num_retries": 7, "request_timeout": 30, "drop_params": True},
    )
    config = load_router_config(path)
    assert config.model_name == "judge" and config.groups == ("judge",)
    first, second = config.deployments
    assert first.id == "openai/fake@http://127.0.0.1:8081/v1" and first.model_id == "fake-model"
    # A remote (non-loopback) endpoint is fine; the trailing slash is dropped.
    assert second.id == "node3" and second.api_base == "https://gpu-node-3.example.org:8000/v1"
    # router_settings win over the litellm_settings a proxy hands to its Router.
    assert config.router_settings == {
        "num_retries": 1,
        "timeout": 30,
        "routing_strategy": "least-busy",
        "cooldown_time": 5,
    }
    # The Router gets ids and the placeholder key OpenAI-compatible servers need.
    assert [e["model_info"]["id"] for e in config.model_list] == [first.id, "node3"]
    assert config.model_list[0]["litellm_params"]["api_key"] == "sk-no-key-required"


def test_config_json_and_group_choice(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(
        json.dumps(
            {
                "model_list": [
                    deployment("http://127.0.0.1:1/v1"),
                    deployment("http://127.0.0.1:2/v1", group="backup"),
                ],
                "judgeopt": {
                    "model_name": "backup",
                    "max_concurrency": 3,
                    "supports_logprobs": True,
                },
            }
        ),
        encoding="utf-8",
    )
    config = load_router_config(path)
    assert config.model_name == "backup" and config.max_concurrency == 3
    assert config.supports_logprobs is True
    assert load_router_config(path, model_name="judge").model_name == "judge"
    assert parse_router_model(f"router:{path}#judge") == (str(path), "judge")
    assert parse_router_model(f"router:{path}") == (str(path), None)
    assert parse_router_model("openai/x") is None
    for bad in ("router:", "router:x.yaml#"):
        with pytest.raises(ValueError, match="router:FILE#GROUP"):
            parse_router_model(bad)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (["not", "a", "mapping"], r"`\(top level\)` must be a mapping with a `model_list`"),
        ({"model_list": []}, r"`model_list` must be a non-empty list of deployments"),
        ({"model_list": [], "routers": {}}, r"unknown top-level key\(s\) \['routers'\]"),
        (
            {"model_list": [{"model_name": "j"}]},
            r"`model_list\[0\].litellm_params` must be a mapping with at least `model`",
        ),
        (
            {"model_list": [{"model_name": "j", "litellm_params": {"model": "smol"}}]},
            r"`model_list\[0\].litellm_params.model` must be a LiteLLM model string naming a "
            r"provider.*Got 'smol'",
        ),
        (
            {
                "model_list": [
                    {
                        "model_name": "j",
                        "litellm_params": {"model": "openai/x", "api_base": "127.0.0.1:80"},
                    }
                ]
            },
            r"`model_list\[0\].litellm_params.api_base` must be an http:// or https:// URL",
        ),
        (
            {"model_list": [{"model_name": "", "litellm_params": {"model": "openai/x"}}]},
            r"`model_list\[0\].model_name` must be a non-empty string",
        ),
        (
            {
                "model_list": [
                    {"model_name": "j", "litellm_params": {"model": "openai/x"}, "weights": 1}
                ]
            },
            r"`model_list\[0\]` has unknown key\(s\) \['weights'\]",
        ),
        (
            {"model_list": [deployment("http://h:1/v1")], "router_settings": {"num_retires": 2}},
            r"`router_settings.num_retires` is not a setting of litellm.Router. Allowed: \[.*"
            r"'num_retries'",
        ),
        (
            {
                "model_list": [deployment("http://h:1/v1")],
                "router_settings": {"routing_strategy": "fastest"},
            },
            r"`router_settings.routing_strategy` must be one of \[.*'least-busy'.*'simple-shuffle'"
            r".*\]. Got 'fastest'",
        ),
        (
            {"model_list": [deployment("http://h:1/v1")], "router_settings": {"num_retries": -1}},
            r"`router_settings.num_retries` must be an int >= 0. Got -1",
        ),
        (
            {"model_list": [deployment("http://h:1/v1")], "router_settings": {"timeout": 0}},
            r"`router_settings.timeout` must be a number > 0. Got 0",
        ),
        (
            {
                "model_list": [deployment("http://h:1/v1")],
                "router_settings": {"fallbacks": [{"judge": ["backup"]}]},
            },
            r"`router_settings.fallbacks\[0\]` names a model group that is not in `model_list`",
        ),
        (
            {
                "model_list": [deployment("http://h:1/v1")],
                "router_settings": {"cache_responses": True},
            },
            r"`router_settings.cache_responses` cannot be set here: judgeopt has its own",
        ),
        (
            {"model_list": [deployment("http://h:1/v1"), deployment("http://h:2/v1", group="b")]},
            r"has several model groups \['judge', 'b'\]: say which one judges",
        ),
        (
            {"model_list": [deployment("http://h:1/v1")], "judgeopt": {"model_name": "jdge"}},
            r"`judgeopt.model_name` must be one of the file's model groups \['judge'\]. Got 'jdge'",
        ),
        (
            {"model_list": [deployment("http://h:1/v1")], "judgeopt": {"threads": 2}},
            r"unknown key\(s\) \['threads'\] in `judgeopt`",
        ),
        (
            {"model_list": [deployment("http://h:1/v1")], "judgeopt": {"max_concurrency": 0}},
            r"`judgeopt.max_concurrency` must be an int >= 1. Got 0",
        ),
        (
            {"model_list": [deployment("http://h:1/v1"), deployment("http://h:1/v1")]},
            r"several deployments have the id\(s\) \['openai/fake@http://h:1/v1'\]",
        ),
    ],
)
def test_config_errors_name_file_field_value_and_what_is_allowed(
    tmp_path: Path, document: Any, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(document), encoding="utf-8")
    with pytest.raises(RouterConfigError, match=message) as info:
        load_router_config(path)
    assert str(info.value).startswith(str(path))


def test_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(RouterConfigError, match="not found .*judgeopt serve --out FILE"):
        load_router_config(tmp_path / "missing.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("model_list: [\n", encoding="utf-8")
    with pytest.raises(RouterConfigError, match=f"{re.escape(str(broken))}: invalid YAML"):
        load_router_config(broken)
    broken_json = tmp_path / "broken.json"
    broken_json.write_text("{", encoding="utf-8")
    with pytest.raises(RouterConfigError, match="invalid JSON"):
        load_router_config(broken_json)
    # RouterConfigError is a ValueError: the CLI reports it as a user error.
    assert issubclass(RouterConfigError, ValueError)


def test_litellm_refusing_a_setting_value_names_the_file(tmp_path: Path) -> None:
    path = write_config(
        tmp_path / "s.yaml",
        [deployment("http://127.0.0.1:1/v1")],
        router_settings={"model_group_alias": "not-a-mapping"},
    )
    with pytest.raises(RouterConfigError, match="litellm.Router refused the config"):
        RouterLM(path, cache=False)


def test_write_router_config_round_trips(tmp_path: Path) -> None:
    path = write_router_config(
        tmp_path / "sub" / "servers.yaml",
        [
            {
                "model": "openai/qwen",
                "api_base": "http://127.0.0.1:8081/v1",
                "model_id": "m",
                "id": "llama.cpp-1:8081",
            },
            {"model": "openai/qwen", "api_base": "http://127.0.0.1:8082/v1", "model_id": "m"},
        ],
        model_name="qwen",
        router_settings={"num_retries": 2},
        header="written by a test",
    )
    assert path.read_text().startswith("# written by a test\n")
    config = load_router_config(path)
    assert config.model_name == "qwen" and config.router_settings == {"num_retries": 2}
    assert [d.id for d in config.deployments] == [
        "llama.cpp-1:8081",
        "openai/qwen@http://127.0.0.1:8082/v1",
    ]


def test_make_lm_router_strings_and_misplaced_options(tmp_path: Path) -> None:
    path = write_config(
        tmp_path / "s.yaml",
        [deployment("http://127.0.0.1:1/v1"), deployment("http://127.0.0.1:2/v1", group="b")],
        judgeopt={"model_name": "b"},
    )
    lm = make_lm(f"router:{path}", cache=False, max_concurrency=4, num_retries=5, timeout=9)
    assert isinstance(lm, RouterLM) and lm.model_name == "b" and lm.max_concurrency == 4
    assert lm.router.num_retries == 5 and lm.timeout == 9
    assert lm.spec == f"router:{path}#b" and lm.model == "openai/fake"
    assert make_lm(f"router:{path}#judge", cache=False).model_name == "judge"
    with pytest.raises(ValueError, match=r"\['api_base'\] do not apply to the router"):
        make_lm(f"router:{path}", api_base="http://127.0.0.1:3/v1")
    with pytest.raises(ValueError, match=r"\['n_threads'\] only apply to local models"):
        make_lm(f"router:{path}", n_threads=1)
    with pytest.raises(RouterConfigError, match=r"the model group.*Got 'nope'"):
        make_lm(f"router:{path}#nope")
    # Default concurrency: 8 per deployment of the group.
    assert make_lm(f"router:{path}", cache=False).max_concurrency == 8


# -- requests, accounting, retries and fallbacks ----------------------------------------------


def router_lm(
    tmp_path: Path, entries: list[dict[str, Any]], *, cache: Any = False, **settings: Any
) -> RouterLM:
    own = settings.pop("judgeopt", None)
    sections: dict[str, Any] = {"router_settings": {"retry_after": 0, **settings}}
    if own:
        sections["judgeopt"] = own
    path = write_config(
        tmp_path / f"router-{len(list(tmp_path.iterdir()))}.yaml", entries, **sections
    )
    return RouterLM(path, cache=cache, max_tokens=16)


def test_a_failed_attempt_is_retried_on_another_deployment_and_counted(
    tmp_path: Path, servers: Callable[..., ScriptedServer]
) -> None:
    a = servers("A", statuses=(500,))
    b = servers("B")
    lm = router_lm(
        tmp_path,
        [deployment(a.api_base, id="A"), deployment(b.api_base, id="B")],
        num_retries=2,
        routing_strategy="simple-shuffle",
    )
    texts = [lm.forward(messages=MESSAGES).choices[0].message.content for _ in range(4)]
    while not a.requests or not b.requests:  # the shuffle may leave a server out at first
        texts.append(lm.forward(messages=MESSAGES).choices[0].message.content)
    n = len(texts)
    assert all(t.startswith("Rating: [[3]]") for t in texts)
    stats = lm.stats()
    # n answers + 1 failed attempt (A's scripted 500, wherever it fell), retried once.
    assert stats.calls == n + 1 and dict(stats.failures) == {"server": 1}
    assert stats.retries == 1 and stats.deployments["A"].failures == {"server": 1}
    assert stats.deployments["A"].calls + stats.deployments["B"].calls == n + 1
    assert len(a.requests) + len(b.requests) == n + 1
    assert stats.prompt_tokens == 10 * n and stats.completion_tokens == 2 * n
    # judgeopt's call marker never reaches the server.
    assert "metadata" not in a.requests[0] and set(b.requests[0]) >= {"model", "messages"}


def test_no_double_retries_one_budget_the_routers(
    tmp_path: Path, servers: Callable[..., ScriptedServer]
) -> None:
    a = servers("A", statuses=(503,) * 10)
    lm = router_lm(tmp_path, [deployment(a.api_base, id="A")], num_retries=1)
    with pytest.raises(LMServerError) as info:
        lm.forward(messages=MESSAGES)
    # num_retries=1: exactly two requests (no openai-SDK retries, no judgeopt retries).
    assert len(a.requests) == 2
    stats = lm.stats()
    assert stats.calls == 2 and stats.retries == 1 and dict(stats.failures) == {"server": 2}
    assert "deployment 'A'" in str(info.value) and "attempt 2)" in str(info.value)
    assert info.value.__cause__ is not None


def test_bad_request_is_not_retried(tmp_path: Path, servers: Callable[..., ScriptedServer]) -> None:
    a = servers("A", statuses=(400,))
    b = servers("B", statuses=(400,))
    lm = router_lm(
        tmp_path, [deployment(a.api_base, id="A"), deployment(b.api_base, id="B")], num_retries=3
    )
    with pytest.raises(LMBadRequest):
        lm.forward(messages=MESSAGES)
    assert len(a.requests) + len(b.requests) == 1
    assert lm.stats().calls == 1 and dict(lm.stats().failures) == {"bad_request": 1}


def test_a_dead_server_fails_over_and_is_cooled_down(
    tmp_path: Path, servers: Callable[..., ScriptedServer]
) -> None:
    b = servers("B")
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    lm = router_lm(
        tmp_path,
        [deployment(dead, id="dead"), deployment(b.api_base, id="B")],
        num_retries=2,
        allowed_fails=0,
        cooldown_time=60,
    )
    for _ in range(6):
        assert lm.forward(messages=MESSAGES).choices[0].message.content.endswith("from B")
    stats = lm.stats()
    # The dead server is tried at most once: its first failure puts it in cooldown.
    assert stats.deployments["B"].calls == 6
    assert stats.deployments.get("dead") is None or (
        stats.deployments["dead"].calls == 1
        and dict(stats.deployments["dead"].failures) == {"connection": 1}
    )
    assert stats.calls == 6 + stats.retries


def test_all_deployments_cooling_down_is_a_clear_server_error(
    tmp_path: Path, servers: Callable[..., ScriptedServer]
) -> None:
    a = servers("A", statuses=(500,) * 20)
    b = servers("B", statuses=(500,) * 20)
    lm = router_lm(
        tmp_path,
        [deployment(a.api_base, id="A"), deployment(b.api_base, id="B")],
        num_retries=1,
        allowed_fails=0,
        cooldown_time=60,
    )
    with pytest.raises(LMServerError):
        lm.forward(messages=MESSAGES)
    calls = lm.stats().calls
    with pytest.raises(LMServerError, match="all 2 are cooling down after failures") as info:
        lm.forward(messages=MESSAGES)
    assert info.value.retryable and info.value.retry_after == 60
    assert lm.stats().calls == calls  # no request was sent


def test_fallback_group_answers_but_is_not_cached(
    tmp_path: Path, servers: Callable[..., ScriptedServer]
) -> None:
    backup = servers("backup")
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    lm = router_lm(
        tmp_path,
        [
            deployment(dead, id="dead"),
            deployment(backup.api_base, group="backup", id="backup", model_id="another-model"),
        ],
        cache=tmp_path / "cache",
        num_retries=0,
        fallbacks=[{"judge": ["backup"]}],
        judgeopt={"model_name": "judge"},
    )
    for _ in range(2):
        out = lm.forward(messages=MESSAGES)
        assert out.choices[0].message.content.endswith("from backup")
        assert not getattr(out, "cache_hit", False)
    # Another model's answer is never stored under this group's key.
    assert len(backup.requests) == 2 and len(LMCache(tmp_path / "cache")) == 0
    stats = lm.stats()
    assert stats.deployments["dead"].failures == {"connection": 2}
    assert stats.deployments["backup"].calls == 2 and stats.retries == 2


def test_connection_refused_everywhere_is_a_connection_error(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{closed_port()}/v1"
    lm = router_lm(tmp_path, [deployment(dead, id="dead")], num_retries=0)
    with pytest.raises(
        LMConnectionError,
        match=f"could not connect to {re.escape(dead)} "
        r"\(deployment 'dead' of router .*attempt 1\)",
    ):
        lm.forward(messages=MESSAGES)


def test_max_concurrency_bounds_requests_in_flight(
    tmp_path: Path, servers: Callable[..., ScriptedServer]
) -> None:
    activity = Activity()
    a = servers("A", delay=0.3, activity=activity)
    b = servers("B", delay=0.3, activity=activity)
    lm = router_lm(
        tmp_path,
        [deployment(a.api_base, id="A"), deployment(b.api_base, id="B")],
        judgeopt={"max_concurrency": 2},
    )
    assert lm.max_concurrency == 2
    threads = [threading.Thread(target=lm.forward, kwargs={"messages": MESSAGES}) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert activity.peak == 2 and lm.stats().calls == 6


# -- the cache identity -----------------------------------------------------------------------


def test_replicas_of_one_model_share_cache_entries(
    tmp_path: Path, servers: Callable[..., ScriptedServer]
) -> None:
    a, b, c = servers("A"), servers("B"), servers("C")
    cache = tmp_path / "cache"
    first = router_lm(tmp_path, [deployment(a.api_base), deployment(b.api_base)], cache=cache)
    first.forward(messages=MESSAGES)
    # Other ports, another group name, one replica only: the same model, so a hit.
    other = router_lm(tmp_path, [deployment(c.api_base, group="qwen")], cache=cache)
    out = other.forward(messages=MESSAGES)
    assert out.cache_hit and not c.requests
    assert other.stats().cache_hits == 1 and other.stats().calls == 0
    # Another model id: no hit.
    third = router_lm(tmp_path, [deployment(c.api_base, model_id="other-model")], cache=cache)
    assert not getattr(third.forward(messages=MESSAGES), "cache_hit", False)


def test_without_a_model_id_each_endpoint_is_its_own_model(
    tmp_path: Path, servers: Callable[..., ScriptedServer]
) -> None:
    a, b = servers("A"), servers("B")
    cache = tmp_path / "cache"
    one = router_lm(tmp_path, [deployment(a.api_base, model_id=None)], cache=cache)
    two = router_lm(tmp_path, [deployment(b.api_base, model_id=None)], cache=cache)
    assert one._cache_identity() != two._cache_identity()
    one.forward(messages=MESSAGES)
    assert not getattr(two.forward(messages=MESSAGES), "cache_hit", False)
    both = router_lm(
        tmp_path,
        [deployment(b.api_base, model_id=None), deployment(a.api_base, model_id=None)],
        cache=cache,
    )
    again = router_lm(
        tmp_path,
        [deployment(a.api_base, model_id=None), deployment(b.api_base, model_id=None)],
        cache=cache,
    )
    assert both._cache_identity() == again._cache_identity()  # order does not matter


# -- DSPy, logprobs, state --------------------------------------------------------------------


def test_dspy_predict_history_copies_and_state(
    tmp_path: Path, servers: Callable[..., ScriptedServer]
) -> None:
    a = servers("A", reply=lambda body: "[[ ## answer ## ]]\nfour\n\n[[ ## completed ## ]]")
    lm = router_lm(tmp_path, [deployment(a.api_base, id="A")])
    with dspy.context(lm=lm, adapter=dspy.ChatAdapter()):
        assert dspy.Predict("question -> answer")(question="2+2?").answer == "four"
    assert lm.history and lm.stats().calls == 1
    copy = lm.copy(temperature=0.5)
    copy.forward(messages=MESSAGES)
    assert lm.stats().calls == 2  # copies share the router and the counters
    state = lm.dump_state()
    assert "api_key" not in json.dumps(state)
    rebuilt = RouterLM.load_state(state)
    assert rebuilt.model_name == lm.model_name and rebuilt.config.path == lm.config.path


def test_logprob_support_from_file_or_probe(
    tmp_path: Path, servers: Callable[..., ScriptedServer]
) -> None:
    a = servers("A")
    flagged = router_lm(tmp_path, [deployment(a.api_base)], judgeopt={"supports_logprobs": False})
    assert logprob_support(flagged) == (False, "its supports_logprobs flag is False")
    assert not a.requests
    probed = router_lm(tmp_path, [deployment(a.api_base)])
    ok, reason = logprob_support(probed)
    assert not ok and "carried no logprobs" in reason and a.requests[-1]["logprobs"] is True


# -- evaluate with threads through a router ---------------------------------------------------


def rating_reply(body: dict[str, Any]) -> str:
    text = str(body["messages"][-1]["content"])
    return f"Rating: [[{1 + len(text) % 3}]]"


def test_evaluate_with_threads_through_the_router_keeps_accounting_exact(
    tmp_path: Path, servers: Callable[..., ScriptedServer], shared_data: Path
) -> None:
    a = servers("A", reply=rating_reply, delay=0.02)
    b = servers("B", reply=rating_reply, delay=0.02)
    lm = router_lm(
        tmp_path,
        [deployment(a.api_base, id="A"), deployment(b.api_base, id="B")],
        cache=tmp_path / "cache",
        routing_strategy="least-busy",
    )
    records = load_records(shared_data / "topical_chat" / "valid.jsonl")[:12]
    judge = JudgeProgram(load_task("topical_chat"), "naturalness", lm=lm)
    seen: list[str] = []
    res = evaluate(judge, records, threads=4, progress=False, on_item=lambda i: seen.append(i.id))
    assert [i.id for i in res.items] == [r.id for r in records]
    assert sorted(seen) == sorted(r.id for r in records)
    stats = lm.stats()
    assert res.calls == stats.calls == 12 and res.call_failures == 0
    assert sum(d.calls for d in stats.deployments.values()) == 12
    assert len(a.requests) + len(b.requests) == 12 and a.requests and b.requests
    assert res.prompt_tokens == 120 and res.completion_tokens == 24
    again = evaluate(judge, records, threads=4, progress=False)
    assert again.cache_hits == 12 and again.calls == 0
    assert [i.score for i in again.items] == [i.score for i in res.items]


# -- judgeopt serve with a scripted engine ----------------------------------------------------


class FakeProcessServer:
    """A ScriptedServer with the server interface `start_servers` expects."""

    def __init__(self, name: str, port: int | None, alias: str) -> None:
        self._fake = ScriptedServer(name)
        self.api_base, self.port = self._fake.api_base, self._fake.port
        self.alias, self.model = alias, f"openai/{alias}"
        self.pid = 100000 + self.port
        self.stopped = False

    def is_running(self) -> bool:
        return not self.stopped

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self._fake.close()


@pytest.fixture
def fake_engine(monkeypatch: pytest.MonkeyPatch) -> list[FakeProcessServer]:
    started: list[FakeProcessServer] = []

    def start(model: str, *, port: int | None, alias: str, **_: Any) -> FakeProcessServer:
        if model == "fails-second" and len(started) == 1:
            raise LocalModelError("the second server did not start")
        if model == "slow" and len(started) == 1:
            time.sleep(30)  # interrupted by the test's signal
        started.append(FakeProcessServer(f"S{len(started) + 1}", port, alias))
        return started[-1]

    monkeypatch.setitem(
        serve_mod.ENGINES, "fake", serve_mod.Engine("fake", start, lambda model: f"fake:{model}")
    )
    yield started
    for server in started:
        server.stop()


def test_start_servers_writes_a_config_the_router_uses(
    tmp_path: Path, fake_engine: list[Any]
) -> None:
    path = tmp_path / "servers.yaml"
    with start_servers("some-model", replicas=2, engine="fake", config_path=path) as group:
        assert group.spec == f"router:{path}" and len(group.servers) == 2
        config = load_router_config(path)
        assert config.router_settings == dict(serve_mod.DEFAULT_SERVE_SETTINGS)
        assert {d.model_id for d in config.deployments} == {"fake:some-model"}
        assert [d.api_base for d in config.deployments] == [s.api_base for s in fake_engine]
        lm = make_lm(group.spec, cache=False, max_tokens=8)
        for _ in range(4):
            lm.forward(messages=MESSAGES)
        assert sum(d.calls for d in lm.stats().deployments.values()) == 4
    assert all(s.stopped for s in fake_engine)


def test_start_servers_stops_the_started_ones_when_one_fails(
    tmp_path: Path, fake_engine: list[Any]
) -> None:
    with pytest.raises(LocalModelError, match="second server"):
        start_servers("fails-second", replicas=3, engine="fake", config_path=tmp_path / "s.yaml")
    assert len(fake_engine) == 1 and fake_engine[0].stopped
    assert not (tmp_path / "s.yaml").exists()


def test_start_servers_argument_errors(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"`engine` argument must be one of \['llama.cpp', 'vllm'\]"
    ):
        start_servers("m", engine="sglang")
    with pytest.raises(ValueError, match="one port per replica"):
        start_servers("m", replicas=2, ports=[8081])
    with pytest.raises(ValueError, match="`replicas` argument must be an int >= 1"):
        start_servers("m", replicas=0)


def test_vllm_engine_without_a_vllm_environment_says_how_to_get_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("JUDGEOPT_VLLM_PYTHON", raising=False)
    path = tmp_path / "s.yaml"
    with pytest.raises(LocalModelError, match=r"JUDGEOPT_VLLM_PYTHON.*install_vllm\.sh"):
        start_servers("qwen2.5-coder-0.5b", replicas=2, engine="vllm", config_path=path)
    assert not path.exists()


def test_default_alias_keeps_dotted_names() -> None:
    assert serve_mod.default_alias("qwen2.5-coder-0.5b") == "qwen2.5-coder-0.5b"
    assert serve_mod.default_alias("/m/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf") == (
        "qwen2.5-coder-0.5b-instruct-q4_k_m"
    )
    assert serve_mod.default_alias("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen2.5-0.5B-Instruct"
    assert serve_mod.default_alias("/models/Qwen2.5-0.5B-Instruct/") == "Qwen2.5-0.5B-Instruct"


def test_vllm_engine_model_ids(tmp_path: Path) -> None:
    from judgeopt.lm._local import gguf_identity

    vllm = serve_mod.ENGINES["vllm"]
    assert vllm.model_id("qwen2.5-coder-0.5b") == "vllm:" + gguf_identity("qwen2.5-coder-0.5b")
    # Not the llama.cpp servers' id: the two engines' answers differ, so they share no entry.
    assert vllm.model_id("qwen2.5-coder-0.5b") != (
        serve_mod.ENGINES["llama.cpp"].model_id("qwen2.5-coder-0.5b")
    )
    folder = tmp_path / "hf-model"
    folder.mkdir()
    assert vllm.model_id(str(folder)) == f"vllm:folder:{folder.resolve()}"
    assert vllm.model_id("Qwen/Qwen2.5-0.5B-Instruct") == "vllm:hub:Qwen/Qwen2.5-0.5B-Instruct"


def test_cli_serve_lists_both_engines(capsys: pytest.CaptureFixture[str]) -> None:
    from judgeopt.cli import main

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "{llama.cpp,vllm}" in out and "JUDGEOPT_VLLM_PYTHON" in out


def signal_when(ready: Callable[[], bool], sig: int) -> threading.Thread:
    """Send ``sig`` to this process 0.3 s after ``ready()`` turns true (waiting 60 s at most)."""

    def wait_and_signal() -> None:
        deadline = time.monotonic() + 60
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        os.kill(os.getpid(), sig)

    thread = threading.Thread(target=wait_and_signal, daemon=True)
    thread.start()
    return thread


def test_cli_serve_stops_every_server_on_sigterm(
    tmp_path: Path, fake_engine: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from judgeopt.cli import main

    path = tmp_path / "servers.yaml"
    killer = signal_when(path.exists, signal.SIGTERM)  # once the servers are up
    status = main(
        [
            "serve",
            "--model",
            "m",
            "--replicas",
            "2",
            "--engine",
            "fake",
            "--out",
            str(path),
            "--routing-strategy",
            "simple-shuffle",
        ]
    )
    killer.join()
    out = capsys.readouterr().out
    assert status == 0 and len(fake_engine) == 2 and all(s.stopped for s in fake_engine)
    assert f"judgeopt compile --router {path} --threads 4" in out and "SIGTERM: stopping" in out
    assert load_router_config(path).router_settings["routing_strategy"] == "simple-shuffle"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_cli_evaluate_through_a_router(
    tmp_path: Path,
    servers: Callable[..., ScriptedServer],
    shared_data: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from judgeopt.cli import main

    monkeypatch.setenv("JUDGEOPT_CACHE_DIR", str(tmp_path / "cache"))
    a = servers("A", reply=rating_reply)
    b = servers("B", reply=rating_reply)
    config = write_config(
        tmp_path / "servers.yaml", [deployment(a.api_base, id="A"), deployment(b.api_base, id="B")]
    )
    judge_path = tmp_path / "judge.json"
    JudgeProgram(load_task("topical_chat"), "naturalness").save(judge_path)
    data = shared_data / "topical_chat" / "valid.jsonl"
    status = main(
        [
            "evaluate",
            str(judge_path),
            "--router",
            str(config),
            "--threads",
            "3",
            "--data",
            str(data),
            "--limit",
            "9",
            "--no-progress",
        ]
    )
    summary = json.loads(capsys.readouterr().out)
    assert status == 0 and summary["n"] == 9
    judged = [r for r in a.requests + b.requests if r["max_tokens"] != 1]
    # 9 judge calls spread over both servers, the one-token check call before them and the
    # plan's one-token latency probe: the plan judged (and timed) the first 3 items together,
    # as the run keeps 3 calls in flight, and the evaluation read them back.
    assert summary["call_failures"] == 0 and len(judged) == 9 and summary["calls"] == 6
    assert len(a.requests) + len(b.requests) == 11
    assert (
        main(
            [
                "evaluate",
                str(judge_path),
                "--router",
                str(config),
                "--api-base",
                a.api_base,
                "--data",
                str(data),
            ]
        )
        == 2
    )
    assert "--api-base does not apply with --router" in capsys.readouterr().err


def test_cli_serve_interrupted_during_start_up_stops_the_started_servers(
    tmp_path: Path, fake_engine: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from judgeopt.cli import main

    # NOTE: pytest started in the background (`nohup ... &`, some CI runners) inherits SIGINT
    # ignored; the test installs the handler it checks `serve` restores, and then puts back
    # whatever it found.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        killer = signal_when(lambda: bool(fake_engine), signal.SIGINT)  # during the 2nd start
        status = main(
            [
                "serve",
                "--model",
                "slow",
                "--replicas",
                "2",
                "--engine",
                "fake",
                "--out",
                str(tmp_path / "s.yaml"),
            ]
        )
        killer.join()
        assert status == 130 and len(fake_engine) == 1 and fake_engine[0].stopped
        assert "SIGINT during start-up" in capsys.readouterr().err
        assert not (tmp_path / "s.yaml").exists()
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_cli_router_option_builds_the_model_string(tmp_path: Path) -> None:
    import argparse

    from judgeopt.cli import CLIError, _model_string

    def ns(**kw: Any) -> argparse.Namespace:
        return argparse.Namespace(**{"model": None, "router": None, "api_base": None, **kw})

    assert _model_string(ns(router="s.yaml")) == "router:s.yaml"
    assert _model_string(ns(router="s.yaml", model="qwen")) == "router:s.yaml#qwen"
    assert _model_string(ns(), "router:old.yaml#g") == "router:old.yaml#g"
    with pytest.raises(CLIError, match="--api-base does not apply with --router"):
        _model_string(ns(router="s.yaml", api_base="http://127.0.0.1:1/v1"))
    with pytest.raises(CLIError, match="names a model group of s.yaml"):
        _model_string(ns(router="s.yaml", model="openai/qwen"))


# -- real llama.cpp servers (slow) ------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_two_smollm2_servers_behind_the_router(tmp_path: Path, shared_data: Path) -> None:
    # SFRES: short prompts; no explanation and 8 output tokens keep each call short.
    records = load_records(shared_data / "sfres" / "valid.jsonl")[:10]
    task = load_task("sfres")
    group = start_servers(
        "smollm2-135m",
        replicas=2,
        n_threads=THREADS,
        n_ctx=1024,
        config_path=tmp_path / "servers.yaml",
        logits_all=False,
    )
    pids = group.pids
    try:
        assert len(set(pids)) == 2 and all(_alive(p) for p in pids)
        lm = make_lm(group.spec, cache=False)
        strategy = {**baseline_strategy(task).as_dict(), "cot": "none"}
        judge = JudgeProgram(task, "naturalness", strategy, lm=lm, max_tokens=8)
        res = evaluate(judge, records[:6], threads=2, progress=False)
        stats = lm.stats()
        assert res.call_failures == 0 and res.calls == stats.calls == 6
        per = stats.deployments
        assert len(per) == 2 and all(d.calls > 0 for d in per.values()), per
        assert sum(d.calls for d in per.values()) == 6
        assert sum(d.prompt_tokens for d in per.values()) == stats.prompt_tokens > 0
        assert res.prompt_tokens == stats.prompt_tokens

        group.servers[0].stop()  # one replica goes away: the other serves everything
        lm.reset_stats()
        res = evaluate(judge, records[6:], threads=2, progress=False)
        assert res.call_failures == 0 and res.n == 4
        stats = lm.stats()
        survivor = stats.deployments[f"llama.cpp-2:{group.servers[1].port}"]
        assert survivor.calls == 4 and survivor.failed == 0
        # The dead replica fails (connection refused) at most once per thread in flight,
        # then sits out its cooldown.
        assert stats.calls == 4 + stats.failed and stats.failed <= 2
        assert stats.retries == stats.failed and set(stats.failures) <= {"connection"}
    finally:
        group.stop()
    time.sleep(0.2)
    assert not any(_alive(p) for p in pids)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_cli_serve_process_writes_the_config_and_stops_on_sigint(tmp_path: Path) -> None:
    path = tmp_path / "servers.yaml"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "judgeopt",
            "serve",
            "--model",
            "smollm2-135m",
            "--replicas",
            "2",
            "--threads",
            str(THREADS),
            "--n-ctx",
            "1024",
            "--no-logits-all",
            "--out",
            str(path),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "stops every server" in line:
                break
        output = "".join(lines)
        pids = [int(p) for p in re.findall(r"pid (\d+)", output)]
        assert len(pids) == 2 and all(_alive(p) for p in pids), output
        config = load_router_config(path)
        assert len(config.deployments) == 2
        lm = make_lm(f"router:{path}", cache=False, max_tokens=4)
        assert lm.forward(messages=MESSAGES).choices
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output + rest
    assert "SIGINT: stopping 2 server(s)" in rest
    time.sleep(0.2)
    assert not any(_alive(p) for p in pids)
