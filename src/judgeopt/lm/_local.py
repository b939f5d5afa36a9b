"""The embedded model: a GGUF run in process by llama-cpp-python, as a DSPy LM."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import dspy
from dspy.clients.base_lm import LM_CLASS_STATE_KEY

from .._validation import check_int
from ._base import JudgeoptLMMixin, Messages, attributes, resolve_cache
from ._cache import LMCache
from ._errors import (
    LMBadRequest,
    LMClosed,
    LMContextOverflow,
    LMError,
    overflow_from_llama,
)
from ._llama_batch import BLOCK, BatchEngine, EngineClosed, batch_width
from ._llama_decode import Sampling, chat_prompt, greedy_with_logprobs
from ._llama_load import LlamaHandle as _Handle
from ._llama_load import _handles as _handles  # tests release loaded models through it
from ._llama_load import (
    _handles_guard,
    check_gguf,
    default_threads,
    effective_n_ctx,
    gguf_identity,
)
from ._llama_load import load_llama as _load
from ._models import DEFAULT_LOCAL_MODEL, LOCAL_MODELS, ensure_local_model
from ._prefix import computed_tokens
from ._stats import StatsRecorder

__all__ = ["RECOMMENDED_PARALLEL", "LlamaCppLM", "check_gguf", "default_threads", "effective_n_ctx"]

logger = logging.getLogger(__name__)

#: The endpoint recorded in cache keys for in-process generation.
IN_PROCESS = "in-process:llama.cpp"

#: Greedy requests the command line and ``judgeopt demo`` decode together with an embedded
#: model (``--parallel``; ``LlamaCppLM`` itself defaults to 1). Measured by
#: ``benchmarks/batch_decode.py`` side by side with 8 (docs/lm.md, "Batched decoding"): on
#: two cores a decoding step of 16 columns costs little more than one of 8 (0.27 against
#: 0.24 s on an AVX-512 machine), so the MT-Bench baseline was judged 1.31x [1.21, 1.41]
#: faster per item on SFRES and 1.07x on Topical-Chat there, 1.08x [0.98, 1.18] on an AVX2
#: machine; never slower. The price: a KV cache of 16 slots (1.8 GB at ``n_ctx`` 4096).
RECOMMENDED_PARALLEL = 16

# Decoding parameters passed through to Llama.create_chat_completion.
_PASSTHROUGH = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "typical_p",
        "stop",
        "seed",
        "max_tokens",
        "presence_penalty",
        "frequency_penalty",
        "repeat_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "response_format",
        "tools",
        "tool_choice",
    }
)
# Accepted and not sent: they shape the cache key or are DSPy/LiteLLM client settings.
_IGNORED = frozenset({"n", "rollout_id", "num_retries", "timeout", "max_retries", "headers"})


class LlamaCppLM(JudgeoptLMMixin, dspy.BaseLM):
    """A GGUF model run in this process by llama.cpp, usable wherever DSPy takes an LM.

    The model is loaded on the first call (or :meth:`load`) and shared by every LlamaCppLM of
    the process with the same file, ``n_ctx``, ``n_threads`` and ``logits_all``. Responses go
    through the persistent cache.

    With ``parallel=1`` (the default) calls are served one at a time (a lock serialises
    them). With ``parallel=N > 1`` greedy and sampled calls made from several threads at once
    (``evaluate`` or a compile with ``threads=N``, ``dspy.Parallel``) are decoded together, N
    sequences per step, by a batch engine (:mod:`judgeopt.lm._llama_batch`): a judge that
    writes an explanation is then judged about twice as fast per item on a CPU, and each
    response still depends on its request (and seed) only, not on what else was in flight.
    ``response_format``, tools, ``logit_bias``, penalties, ``typical_p`` and sampled
    logprobs are always served one at a time.

    Args:
        model: A registry name (``"qwen2.5-coder-1.5b"``, ``"qwen2.5-coder-0.5b"``,
            ``"smollm2-135m"``; joined and verified on first use) or a path to a GGUF file.
        temperature: Default sampling temperature (0 is greedy).
        max_tokens: Default completion budget in tokens.
        n_ctx: Context window in tokens (rounded up to a multiple of 256, as llama.cpp does).
        n_threads: CPU threads; ``None`` reads ``$JUDGEOPT_THREADS`` (default 2).
        seed: Default sampling seed (matters only when ``temperature > 0``).
        logits_all: Keep the logits of every position (memory: ``n_ctx`` x vocabulary
            floats). Not needed for greedy ``logprobs`` (the expected rating): those come
            from a decoding loop that computes only the rows it reads. Needed for sampling
            with logprobs, and shared with the glass-box backend, which scores given text.
        cache: ``True`` (default directory), ``False``, a directory, or an :class:`LMCache`.
        model_dir: Where registry models are joined; ``None`` uses ``$JUDGEOPT_MODEL_DIR``
            or ``~/.cache/judgeopt/models``.
        parallel: Requests decoded together (greedy or sampled; 1: one at a time). Give the
            caller as many calls in flight (``threads``); ``evaluate`` and compiles default
            to it.
        **kwargs: Further default decoding parameters (``top_p``, ``stop``, ...).

    Raises:
        ValueError: If an argument is out of range or the registry name is unknown.
        LocalModelError: If the GGUF path does not exist or is not a GGUF, or the registry
            model's packages are not installed.

    Example:
        >>> lm = LlamaCppLM("smollm2-135m", max_tokens=16)  # doctest: +SKIP
        >>> dspy.configure(lm=lm)  # doctest: +SKIP
    """

    def __init__(
        self,
        model: str | os.PathLike[str] = DEFAULT_LOCAL_MODEL,
        *,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        seed: int = 0,
        logits_all: bool = False,
        cache: bool | str | os.PathLike[str] | LMCache | None = True,
        model_dir: str | os.PathLike[str] | None = None,
        parallel: int = 1,
        **kwargs: Any,
    ) -> None:
        for name, value, minimum in (
            ("n_ctx", n_ctx, 16),
            ("max_tokens", max_tokens, 1),
            ("parallel", parallel, 1),
        ):
            check_int(value, name, min_value=minimum, owner="LlamaCppLM")
        threads = check_int(
            default_threads() if n_threads is None else n_threads,
            "n_threads",
            min_value=1,
            owner="LlamaCppLM",
        )
        unknown = set(kwargs) - _PASSTHROUGH - _IGNORED
        if unknown:
            raise ValueError(
                f"LlamaCppLM does not take the decoding parameter(s) {sorted(unknown)}; allowed: "
                f"{sorted(_PASSTHROUGH | {'n', 'rollout_id'})}."
            )

        self._registry_name: str | None
        self._path: Path | None
        if isinstance(model, str) and model in LOCAL_MODELS:
            self._registry_name, self._path = model, None
            name = model
        elif isinstance(model, os.PathLike) or (
            isinstance(model, str) and (model.endswith(".gguf") or os.sep in model)
        ):
            self._registry_name, self._path = None, check_gguf(model)
            name = self._path.name
        else:
            raise ValueError(
                f"The `model` argument of LlamaCppLM must be a local model name, one of "
                f"{sorted(LOCAL_MODELS)}, or the path of a .gguf file. Got {model!r} instead."
            )
        super().__init__(
            model=f"local/{name}",
            model_type="chat",
            temperature=temperature,
            max_tokens=max_tokens,
            cache=False,  # DSPy's own cache: never used for forward()-based LMs anyway
            num_retries=0,
            seed=seed,
            **kwargs,
        )
        self.n_ctx = effective_n_ctx(n_ctx)
        self.n_threads = threads
        self.logits_all = logits_all
        self.parallel = parallel
        self.model_dir = model_dir
        self._stats = StatsRecorder()
        self._response_cache = resolve_cache(cache)
        self._handle: _Handle | None = None
        self._handle_lock = threading.Lock()
        self._identity: str | None = None

    def __repr__(self) -> str:
        extra = f", parallel={self.parallel}" if self.parallel > 1 else ""
        return f"LlamaCppLM({self.model!r}, n_ctx={self.n_ctx}, n_threads={self.n_threads}{extra})"

    @property
    def preferred_threads(self) -> int:
        """Calls in flight that keep this LM busy: ``parallel`` (``evaluate`` and compiles
        use it when their ``threads`` is not given)."""
        return self.parallel

    @property
    def spec(self) -> str:
        """The model string that rebuilds this LM: ``"local:NAME"`` or ``"local:/PATH.gguf"``."""
        if self._registry_name is not None:
            return f"local:{self._registry_name}"
        return f"local:{Path(self._path).resolve()}"  # type: ignore[arg-type]

    def copy(self, **kwargs: Any) -> LlamaCppLM:
        """Return a copy sharing the loaded model, cache and counters (``BaseLM.copy``).

        Changing ``n_ctx``, ``n_threads`` or ``logits_all`` gives the copy its own model handle.
        """
        copied: LlamaCppLM = super().copy(**kwargs)
        if {"n_ctx", "n_threads", "logits_all"} & set(kwargs):
            copied.n_ctx = effective_n_ctx(copied.n_ctx)
            copied._handle = None
            copied._handle_lock = threading.Lock()
        return copied

    def dump_state(self) -> dict[str, Any]:
        """Return the constructor arguments needed to rebuild this LM.

        ``n_threads`` and ``parallel`` are left out: they belong to the machine that loads
        the state.
        """
        state = {k: v for k, v in self.kwargs.items() if k != LM_CLASS_STATE_KEY}
        state.update(
            {
                LM_CLASS_STATE_KEY: f"{type(self).__module__}.{type(self).__qualname__}",
                "model": self._registry_name or str(self._path),
                "n_ctx": self.n_ctx,
                "logits_all": self.logits_all,
            }
        )
        return state

    @classmethod
    def load_state(
        cls, state: dict[str, Any], *, allow_custom_lm_class: bool = False
    ) -> LlamaCppLM:
        """Rebuild a LlamaCppLM from :meth:`dump_state` output."""
        return cls(**{k: v for k, v in state.items() if k != LM_CLASS_STATE_KEY})

    #: In process on this machine's CPU: a spending limit counts calls, never dollars.
    runs_in_process = True

    def priced_model(self) -> str | None:
        """``None``: the embedded model has no price (it runs here)."""
        return None

    def count_prompt_tokens(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """The prompt tokens of ``messages``, exactly: the model's chat template applied and
        tokenized (loads the model); estimated as any model's when the chat handler builds
        no token prompt."""
        try:
            return len(self.prompt_token_ids(messages))
        except Exception:  # noqa: BLE001 - a chat handler without a token prompt: estimate
            return super().count_prompt_tokens(messages)

    def prompt_token_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """The token ids the model evaluates for ``messages`` (its chat template applied and
        tokenized; loads the model)."""
        handle = self._get_handle()
        with handle.lock:
            tokens, _ = chat_prompt(handle.llama, messages)
        return list(tokens)

    def computed_prompt_tokens(
        self, prompts: Sequence[Sequence[int]], *, in_flight: int | None = None
    ) -> list[int]:
        """Per prompt (token ids, judged in this order from an empty cache): the tokens this
        model computes, the rest reused from a prefix it holds
        (:func:`judgeopt.lm.computed_tokens`).

        On the batch engine (``parallel`` above 1) a call takes the first free slot, so the
        slots hold the prompts of about the last ``in_flight`` calls (``None``: ``parallel``)
        and a prompt reuses every whole block of :data:`BLOCK` tokens it shares with one of
        them, or all of it when it is one of them (nothing computed); calls made one after
        another reuse the previous prompt's blocks only. One call
        at a time (``parallel`` 1), llama.cpp reuses the prefix shared with the previous
        prompt. A cost plan times calls on these tokens."""
        if self.parallel > 1:
            held = min(self.parallel, in_flight or self.parallel)
            return computed_tokens(prompts, block=BLOCK, window=max(1, held), whole=True)
        return computed_tokens(prompts, window=1)

    def _engine_if_started(self) -> Any:
        """This model's batch engine for ``parallel``, or ``None`` (``parallel`` 1, or none
        started yet; the model is not loaded to find out)."""
        if self.parallel == 1:
            return None
        with self._handle_lock:
            handle = self._handle
        if handle is None:
            return None
        with _handles_guard:
            return handle.engines.get(self.parallel)

    def prompt_reuse(self) -> dict[str, int] | None:
        """What the batch engine of this model and ``parallel`` has done with prompts since it
        started: ``evaluated`` (prompt tokens computed), ``shared`` (prompt tokens whose
        values were copied from a prefix another sequence held, not computed) and ``held``
        (requests whose whole prompt a sequence held: nothing evaluated); ``None``
        without an engine (``parallel`` 1, or no batched call yet; the model is not loaded
        to ask). Engines are shared by every LM on the same model file with the same
        ``parallel``."""
        engine = self._engine_if_started()
        if engine is None:
            return None
        return {
            "evaluated": engine.prompt_tokens_evaluated,
            "shared": engine.prompt_tokens_shared,
            "held": engine.prompts_held,
        }

    def batch_work(self) -> dict[str, float] | None:
        """What the batch engine of this model and ``parallel`` has spent since it started:
        ``steps`` (each one token for every slot, ``width`` columns, idle slots padded, so a
        step costs the same however many slots are busy), ``step_seconds`` (in them),
        ``prompt_seconds`` (computing prompts, one request's at a time) and ``evaluated``
        (the prompt tokens computed); ``None`` without an engine (as :meth:`prompt_reuse`).
        A cost plan times a run's calls from the difference over a timed batch."""
        engine = self._engine_if_started()
        if engine is None:
            return None
        return {
            "steps": float(engine.steps),
            "step_seconds": engine.step_seconds,
            "prompt_seconds": engine.prompt_seconds,
            "evaluated": float(engine.prompt_tokens_evaluated),
            "width": float(engine.width),
        }

    @property
    def supports_logprobs(self) -> bool:  # type: ignore[override]
        """Whether calls can ask for ``logprobs``: always.

        Without ``logits_all`` a greedy request with ``logprobs`` runs a decoding loop that
        computes the logits of the last prompt position and of each generated token only
        (:mod:`judgeopt.lm._llama_decode`): the same values as the ``logits_all`` path at
        about the cost of a plain greedy call. Sampling with logprobs needs ``logits_all``.
        """
        return True

    @property
    def logprobs_hint(self) -> str | None:
        """How to get logprobs from this LM, when it has none (it always has)."""
        return None

    @property
    def model_path(self) -> Path | None:
        """The GGUF file, once known (a registry model's is known after :meth:`load`)."""
        return self._path

    def load(self) -> Path:
        """Prepare the GGUF (join and verify a registry model) and load it; return its path.

        Raises:
            LocalModelError: If the model cannot be prepared or loaded.
        """
        self._get_handle()
        assert self._path is not None  # set by _get_handle
        return self._path

    def _get_handle(self) -> _Handle:
        with self._handle_lock:
            if self._handle is None:
                if self._path is None:
                    assert self._registry_name is not None
                    self._path = ensure_local_model(self._registry_name, model_dir=self.model_dir)
                self._handle = _load(self._path, self.n_ctx, self.n_threads, self.logits_all)
            return self._handle

    def _cache_identity(self) -> tuple[str, str | None]:
        if self._identity is None:
            model = self._registry_name if self._registry_name is not None else self._path
            assert model is not None
            self._identity = gguf_identity(model)
        # NOTE: batched decoding gives the same greedy answers up to floating-point rounding,
        # not bit for bit: its answers are cached apart, so a cached response is always
        # exactly what this configuration computes.
        endpoint = (
            IN_PROCESS
            if self.parallel == 1
            else (f"{IN_PROCESS}:batch{batch_width(self.parallel)}")
        )
        return self._identity, endpoint

    def _batchable(self, params: Mapping[str, Any]) -> bool:
        """Whether a call goes to the batch engine: ``parallel > 1``, plain text, greedy or
        sampled with llama.cpp's default chain (top-k, top-p, min-p; no typical-p), and no
        penalties."""
        if self.parallel == 1:
            return False
        if params.get("logprobs") and float(params.get("temperature") or 0.0) > 0:
            return False  # sampled logprobs: the logits_all path, one at a time
        if any(
            params.get(k) is not None
            for k in ("response_format", "tools", "tool_choice", "logit_bias")
        ):
            return False
        neutral = {
            "repeat_penalty": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "typical_p": 1.0,
        }
        return all(params.get(k) is None or float(params[k]) == v for k, v in neutral.items())

    @staticmethod
    def _sampling(params: Mapping[str, Any]) -> Sampling | None:
        """The batch engine's sampler for a call at ``temperature > 0`` (llama-cpp-python's
        defaults for what the call leaves out), else ``None`` (greedy)."""
        temperature = float(params.get("temperature") or 0.0)
        if temperature <= 0:
            return None
        seed = params.get("seed")
        return Sampling(
            temperature=temperature,
            top_k=40 if params.get("top_k") is None else int(params["top_k"]),
            top_p=0.95 if params.get("top_p") is None else float(params["top_p"]),
            min_p=0.05 if params.get("min_p") is None else float(params["min_p"]),
            seed=None if seed is None or int(seed) < 0 else int(seed),
        )

    def _engine(self, handle: _Handle) -> BatchEngine:
        with _handles_guard:
            engine = handle.engines.get(self.parallel)
            if engine is None:
                engine = handle.engines[self.parallel] = BatchEngine(
                    handle.llama,
                    parallel=self.parallel,
                    n_ctx=handle.n_ctx,
                    n_threads=self.n_threads,
                    lock=handle.lock,
                )
            return engine

    def _llama_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(params) - _PASSTHROUGH - _IGNORED - {"max_completion_tokens"}
        if unknown:
            raise LMBadRequest(
                f"LlamaCppLM cannot honour the decoding parameter(s) {sorted(unknown)}; it takes "
                f"{sorted(_PASSTHROUGH | {'n', 'rollout_id'})}.",
                model=self.model,
                endpoint=IN_PROCESS,
            )
        out = {k: v for k, v in params.items() if k in _PASSTHROUGH and v is not None}
        if params.get("max_completion_tokens") is not None and "max_tokens" not in out:
            out["max_tokens"] = params["max_completion_tokens"]
        if out.get("logprobs"):
            # llama.cpp returns chat logprobs only when top_logprobs is set.
            out["top_logprobs"] = max(1, int(out.get("top_logprobs") or 1))
            if not self.logits_all:
                unsupported = sorted(
                    k
                    for k in ("response_format", "tools", "tool_choice", "logit_bias")
                    if out.get(k) is not None
                )
                if float(out.get("temperature") or 0.0) > 0 or unsupported:
                    what = (
                        f"the parameter(s) {unsupported}"
                        if unsupported
                        else f"temperature={out.get('temperature')!r}"
                    )
                    raise LMBadRequest(
                        "logprobs without logits_all come from a greedy decoding loop "
                        f"(temperature 0, plain text), which cannot honour {what}; load the "
                        "model with LlamaCppLM(..., logits_all=True) for that.",
                        model=self.model,
                        endpoint=IN_PROCESS,
                    )
        elif "top_logprobs" in out:
            del out["top_logprobs"]
        response_format = out.get("response_format")
        if response_format is not None:
            out["response_format"] = _llama_response_format(response_format)
        return out

    def _generate(self, messages: Messages, params: dict[str, Any]) -> Any:
        n = params.get("n") or 1
        check_int(n, "n", min_value=1, kind="decoding parameter")
        llama_params = self._llama_params(params)
        handle = self._get_handle()
        seed = llama_params.get("seed")
        choices: list[dict[str, Any]] = []
        usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        first: dict[str, Any] | None = None
        for index in range(n):
            call_params = dict(llama_params)
            if seed is not None and n > 1:
                call_params["seed"] = int(seed) + index  # distinct samples, reproducibly
            out = self._complete(handle, messages, call_params)
            call_usage = out.get("usage") or {}
            for key in usage:
                usage[key] += int(call_usage.get(key) or 0)
            for choice in out.get("choices", []):
                choices.append({**choice, "index": len(choices)})
            if first is None:
                first = out
        assert first is not None
        response = {**first, "choices": choices, "usage": usage}
        return attributes(response)

    def _complete(
        self, handle: _Handle, messages: Messages, call_params: dict[str, Any]
    ) -> dict[str, Any]:
        """One completion, timed into the stats; llama.cpp's errors raised as LMErrors."""
        batched = self._batchable(call_params)
        started = time.monotonic()
        try:
            if batched:
                out = self._complete_batched(handle, messages, call_params)
            else:
                with handle.lock:
                    started = time.monotonic()
                    if call_params.get("logprobs") and not self.logits_all:
                        out = greedy_with_logprobs(
                            handle.llama,
                            messages,
                            max_tokens=call_params.get("max_tokens"),
                            top_logprobs=int(call_params["top_logprobs"]),
                            stop=call_params.get("stop"),
                            model=self.model,
                        )
                    else:
                        out = handle.llama.create_chat_completion(messages=messages, **call_params)
        except EngineClosed as exc:
            # Closed at exit (after an interrupt): the request was never decoded.
            raise LMClosed(
                f"{self.model} was closed before it answered (the process is stopping)",
                model=self.model,
                endpoint=IN_PROCESS,
            ) from exc
        except ValueError as exc:
            elapsed = time.monotonic() - started
            error = self._rejected(exc, handle.n_ctx, call_params)
            self._stats.record_failure(error.kind, elapsed)
            raise error from exc
        except Exception as exc:
            self._stats.record_failure("error", time.monotonic() - started)
            raise LMError(
                f"llama.cpp failed on {self.model}: {type(exc).__name__}: {exc}",
                model=self.model,
                endpoint=IN_PROCESS,
            ) from exc
        self._stats.record_call(time.monotonic() - started, dict(out.get("usage") or {}))
        return out

    def _complete_batched(
        self, handle: _Handle, messages: Messages, call_params: dict[str, Any]
    ) -> dict[str, Any]:
        top = int(call_params["top_logprobs"]) if call_params.get("logprobs") else None
        out: dict[str, Any] = (
            self._engine(handle)
            .submit(
                messages,
                max_tokens=call_params.get("max_tokens"),
                top_logprobs=top,
                stop=call_params.get("stop"),
                model=self.model,
                sampling=self._sampling(call_params),
            )
            .result()
        )
        out.pop("_seconds", None)
        return out

    def _rejected(self, exc: ValueError, n_ctx: int, call_params: dict[str, Any]) -> LMError:
        """The LMError for a request llama.cpp rejected with ``exc``."""
        overflow = overflow_from_llama(
            exc,
            model=self.model,
            n_ctx=n_ctx,
            max_tokens=call_params.get("max_tokens"),
        )
        if overflow is None and "could not broadcast input array" in str(exc):
            overflow = LMContextOverflow(
                f"the prompt does not fit the context window (n_ctx={n_ctx}): "
                "shorten the prompt or load the model with a larger n_ctx",
                model=self.model,
                endpoint=IN_PROCESS,
                n_ctx=n_ctx,
            )
        return overflow or LMBadRequest(
            f"llama.cpp rejected the request: {exc}",
            model=self.model,
            endpoint=IN_PROCESS,
        )


def _llama_response_format(value: Any) -> dict[str, Any]:
    """Translate an OpenAI ``response_format`` into the form llama-cpp-python takes."""
    import pydantic

    if isinstance(value, type) and issubclass(value, pydantic.BaseModel):
        return {"type": "json_object", "schema": value.model_json_schema()}
    if isinstance(value, Mapping):
        kind = value.get("type")
        if kind == "json_schema":
            schema = (value.get("json_schema") or {}).get("schema")
            return {"type": "json_object", "schema": schema} if schema else {"type": "json_object"}
        if kind in ("json_object", "text"):
            return dict(value)
    raise ValueError(
        "The `response_format` decoding parameter must be "
        "{'type': 'text'|'json_object'|'json_schema', ...} "
        f"or a pydantic model class. Got {value!r} instead."
    )
