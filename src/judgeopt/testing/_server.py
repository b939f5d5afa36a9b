"""A scripted OpenAI-compatible chat server on loopback, for tests and overhead benchmarks."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

__all__ = ["Activity", "ScriptedServer"]


class Activity:
    """Requests in flight across several scripted servers (to check a concurrency bound)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.active = 0
        self.peak = 0

    def enter(self) -> None:
        """A request starts."""
        with self._lock:
            self.active += 1
            self.peak = max(self.peak, self.active)

    def leave(self) -> None:
        """A request ends."""
        with self._lock:
            self.active -= 1


class ScriptedServer:
    """An OpenAI-compatible ``/v1/chat/completions`` server on 127.0.0.1 with scripted replies.

    Every request goes through real HTTP, so LiteLLM (and its Router) run their whole code
    path: use it to test retries, fallbacks and accounting, or to measure a client's own
    overhead per call with instant replies. A context manager that closes the server.

    Args:
        name: Put into the default reply (``"Rating: [[3]] from NAME"``).
        statuses: HTTP statuses of the first requests (then 200); a non-200 status answers
            with an OpenAI-style error body.
        reply: ``reply(request_body) -> text`` of a 200 answer.
        delay: Seconds each request takes.
        slots: Requests processed at once (the others wait their turn, like the one slot
            of a llama.cpp server); ``None``: no limit.
        activity: A shared in-flight counter.
        port: The TCP port (0: a free one); give the port of a closed server to bring
            "the same endpoint" back after it went down.

    Attributes:
        api_base: ``http://127.0.0.1:PORT/v1``.
        port: The TCP port.
        requests: Every request body received, in arrival order.
    """

    def __init__(
        self,
        name: str = "scripted",
        *,
        statuses: tuple[int, ...] = (),
        reply: Callable[[dict[str, Any]], str] | None = None,
        delay: float = 0.0,
        slots: int | None = None,
        activity: Activity | None = None,
        port: int = 0,
    ) -> None:
        self.name = name
        self.statuses = list(statuses)
        self.reply = reply or (lambda body: f"Rating: [[3]] from {name}")
        self.delay = delay
        self._slots = threading.Semaphore(slots) if slots else None
        self.activity = activity or Activity()
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self.api_base = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def _answer(self, body: dict[str, Any]) -> tuple[int, bytes]:
        if self._slots is None:
            return self._process(body)
        with self._slots:
            return self._process(body)

    def _process(self, body: dict[str, Any]) -> tuple[int, bytes]:
        self.activity.enter()
        try:
            with self._lock:
                self.requests.append(body)
                status = self.statuses.pop(0) if self.statuses else 200
            if self.delay:
                time.sleep(self.delay)
            if status == 200:
                payload: dict[str, Any] = {
                    "id": "scripted",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model", "scripted"),
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": self.reply(body)},
                        }
                    ],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
                }
            else:
                payload = {"error": {"message": f"scripted {status}", "type": "server_error"}}
            return status, json.dumps(payload).encode()
        finally:
            self.activity.leave()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                status, data = server._answer(body)
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def close(self) -> None:
        """Stop serving and release the port. Idempotent."""
        if self._thread.is_alive():
            self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> ScriptedServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
