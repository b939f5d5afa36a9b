"""A persistent response cache shared by every judgeopt LM (sqlite in WAL mode, JSON values).

The key is the sha256 of a canonical JSON document of everything that decides a response:
the model identity, the endpoint, the API kind, the messages and the decoding parameters
(temperature, max_tokens, top_p, n, seed, logprobs, response_format, rollout_id...). Client
settings that do not change the answer (api_key, timeout, retries, headers) never enter it;
the api_key in particular is neither hashed nor stored.

Values are plain JSON (never pickles), so reading a cache file can run no code. sqlite's WAL
mode and a busy timeout make the file safe to share between threads and processes; each
operation opens its own short-lived connection, while one idle connection per cache object
stays open so that closing them does not checkpoint the WAL each time. A cache failure
(locked for too long, a corrupt file, an unserialisable parameter) is logged and the call goes
to the backend.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Mapping, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

__all__ = ["LMCache", "cache_key", "default_cache_dir"]

logger = logging.getLogger(__name__)

#: Bumped when the key document or the stored value changes shape.
CACHE_FORMAT = 1

#: Request settings that never change the response and are left out of the key.
NON_KEY_PARAMS = frozenset(
    {
        "api_key",
        "api_base",
        "base_url",
        "api_version",
        "organization",
        "project",
        "headers",
        "extra_headers",
        "timeout",
        "num_retries",
        "max_retries",
        "cache",
    }
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    created REAL NOT NULL,
    value TEXT NOT NULL
)
"""


def default_cache_dir() -> Path:
    """Return the cache directory: ``$JUDGEOPT_CACHE_DIR`` or ``~/.cache/judgeopt/lm``."""
    env = os.environ.get("JUDGEOPT_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "judgeopt" / "lm"


def _jsonable(value: Any) -> Any:
    """``json.dumps`` fallback for the few non-JSON values of requests and responses.

    DSPy passes pydantic classes and sets in requests; llama-cpp-python's logprobs are numpy
    scalars (``float32``), which become plain numbers, so logprob responses are cached too.
    """
    import numpy as np
    import pydantic

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()

    if isinstance(value, type) and issubclass(value, pydantic.BaseModel):
        return {"__pydantic_schema__": value.model_json_schema()}
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


def _normalise(value: Any) -> Any:
    """Make equal settings hash equally: 0 and 0.0 alike, None-valued keys dropped."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(k): _normalise(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    return value


def cache_key(
    *,
    model: str,
    endpoint: str | None,
    messages: Sequence[Mapping[str, Any]] | str,
    params: Mapping[str, Any],
    api: str = "chat",
) -> str:
    """Return the cache key of one request.

    Args:
        model: The model identity (the LiteLLM model string, or ``gguf-sha256:<hash>`` for an
            in-process GGUF).
        endpoint: The API base the request goes to (``None`` for the provider's default).
        messages: The chat messages (or the prompt text of a text completion).
        params: The decoding parameters. Client settings listed in ``NON_KEY_PARAMS``
            (api_key, timeout, ...) and ``None`` values are ignored.
        api: The API kind (``"chat"`` or ``"text"``).

    Returns:
        A 64-character hex sha256.

    Raises:
        TypeError: If a parameter cannot be represented as JSON (the call is then not cached).
    """
    document = {
        "format": CACHE_FORMAT,
        "model": model,
        "endpoint": endpoint,
        "api": api,
        "messages": messages,
        "params": _normalise({k: v for k, v in params.items() if k not in NON_KEY_PARAMS}),
    }
    text = json.dumps(
        document,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_jsonable,
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class LMCache:
    """A persistent, process- and thread-safe map from :func:`cache_key` keys to responses.

    Args:
        directory: Where the ``lm_cache.sqlite3`` file lives. ``None`` uses
            :func:`default_cache_dir` (``$JUDGEOPT_CACHE_DIR`` or ``~/.cache/judgeopt/lm``).
        busy_timeout: Seconds a writer waits for another process's lock before giving up
            (the entry is then simply not stored).

    Example:
        >>> import tempfile
        >>> cache = LMCache(tempfile.mkdtemp())
        >>> key = cache_key(model="m", endpoint=None, messages=[], params={"temperature": 0})
        >>> cache.put(key, {"choices": []}, model="m")
        >>> cache.get(key)
        {'choices': []}
    """

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, *, busy_timeout: float = 30.0
    ):
        self.directory = (
            Path(directory).expanduser() if directory is not None else default_cache_dir()
        )
        self.path = self.directory / "lm_cache.sqlite3"
        self.busy_timeout = busy_timeout
        self.directory.mkdir(parents=True, exist_ok=True)
        with closing(self._connect()) as conn, conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(_SCHEMA)
        self._keep_open()

    def _keep_open(self) -> None:
        # NOTE: when the last connection to a WAL database closes, sqlite checkpoints the WAL
        # into the database, deletes it and syncs, which made every get/put cost about 15 ms
        # (measured: benchmarks/throughput.py's profile, docs/benchmarks.md section 9). One
        # idle connection held open for the object's life keeps the WAL, so the per-operation
        # connections open and close cheaply; sqlite still checkpoints every 1000 pages.
        try:
            keeper = sqlite3.connect(self.path, timeout=self.busy_timeout, check_same_thread=False)
            keeper.execute("SELECT 1 FROM responses LIMIT 1").fetchall()  # opens the WAL
            self._keeper: sqlite3.Connection | None = keeper
        except sqlite3.Error as exc:  # the cache still works, only slower
            logger.warning("LM cache %s: could not keep a connection open: %s", self.path, exc)
            self._keeper = None

    def close(self) -> None:
        """Close the connection this cache keeps open (it is reopened when unpickled)."""
        keeper, self._keeper = getattr(self, "_keeper", None), None
        if keeper is not None:
            keeper.close()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_keeper"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._keep_open()

    def __repr__(self) -> str:
        return f"LMCache({str(self.directory)!r})"

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=self.busy_timeout)
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    def get(self, key: str) -> dict[str, Any] | None:
        """Return the stored response for ``key``, or ``None`` (also on any cache failure)."""
        try:
            with closing(self._connect()) as conn:
                row = conn.execute("SELECT value FROM responses WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            logger.warning("LM cache read failed (%s): %s; calling the backend", self.path, exc)
            return None
        if row is None:
            return None
        try:
            value = json.loads(row[0])
        except ValueError:
            logger.warning("LM cache entry %s in %s is not valid JSON; ignoring it", key, self.path)
            return None
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: Mapping[str, Any], *, model: str) -> None:
        """Store a successful response (a JSON-serialisable mapping) under ``key``."""
        try:
            text = json.dumps(value, ensure_ascii=False, default=_jsonable)
        except (TypeError, ValueError) as exc:
            logger.warning(
                "LM response for %s is not JSON-serialisable (%s); not cached", model, exc
            )
            return
        try:
            with closing(self._connect()) as conn, conn:
                conn.execute(
                    "INSERT OR REPLACE INTO responses (key, model, created, value) "
                    "VALUES (?, ?, ?, ?)",
                    (key, model, time.time(), text),
                )
        except sqlite3.Error as exc:
            logger.warning("LM cache write failed (%s): %s; response not cached", self.path, exc)

    def __len__(self) -> int:
        with closing(self._connect()) as conn:
            (count,) = conn.execute("SELECT COUNT(*) FROM responses").fetchone()
        return int(count)

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        with closing(self._connect()) as conn:
            row = conn.execute("SELECT 1 FROM responses WHERE key = ?", (key,)).fetchone()
        return row is not None

    def clear(self, *, model: str | None = None) -> int:
        """Delete every entry (or only ``model``'s); return how many were deleted."""
        with closing(self._connect()) as conn, conn:
            if model is None:
                cursor = conn.execute("DELETE FROM responses")
            else:
                cursor = conn.execute("DELETE FROM responses WHERE model = ?", (model,))
        return int(cursor.rowcount)
