"""Chat completions of several requests decoded together by one llama.cpp context.

Generating a token on a CPU is bound by memory bandwidth: every step reads all the weights
(1.1 GB for the embedded Qwen2.5-Coder-1.5B) to compute one column. Decoding several
sequences in the same step reads them once for all columns, so a judge that writes an
explanation before its rating (the MT-Bench baseline, every chain-of-thought strategy) is
judged several times faster per item when a few items are in flight at once
(``benchmarks/batch_decode.py`` measures it). :class:`BatchEngine` does that for the greedy
and the plainly sampled requests (self-consistency's samples) of a
:class:`~judgeopt.lm.LlamaCppLM` built with ``parallel > 1``: callers in several threads
submit requests; one worker thread admits them into free sequence slots, evaluates their
prompts and then decodes all active sequences together, one token each per step, until each
finishes (continuous batching).

Determinism. llama.cpp's CPU kernels give slightly different floating-point results
depending on how a computation is laid out: a matrix product's column goes through the
vector kernel below 4 columns and through tiled kernels from 4 on, and the attention sums
a sequence's cached keys tile by tile in the order of their cells (up to a few tenths in a
logit on the quantised models here). A naively batched request would therefore depend on
which other requests happened to be in flight and on where its cells landed. Three rules
make every response a function of its request alone:

* every decoding step evaluates exactly ``width`` columns (``parallel`` rounded up to a
  multiple of 4, the number of slots), every column asks for its logits, and a slot with
  nothing to decode contributes a padding token that is removed after the step, so each
  real column always meets the same kernels;
* every slot has its own KV stream (``kv_unified = False``) in which cell ``i`` holds
  position ``i``: the stream is only ever truncated and appended to, and a shared prefix is
  copied in whole from another stream, so the cells keep the positions' order;
* a prompt is evaluated in blocks of :data:`BLOCK` tokens aligned to its start, one block
  per call, then the rest (at least one token) in a last call that reads the logits of its
  last position. Blocks another slot already holds (the same tokens from position 0, e.g.
  the judge's instructions, or the dialogue shared by a group of items) are reused instead
  of evaluated: a block's values depend only on the tokens up to its end, so reusing it
  changes nothing. A slot also keeps the logits of its prompt's last position: a request
  whose prompt a slot holds whole (self-consistency's next sample of the same item, the
  same judgement asked again with other answer settings) copies its cells and starts from
  those logits, evaluating nothing: the values its own last call would give.

The responses have the OpenAI chat-completion shape of :func:`greedy_with_logprobs` (the
same rules for stop strings, the budget and ``top_logprobs``). They are not bit-identical
to the one-request-at-a-time path, whose prompt split depends on the previous call and
whose steps use the vector kernel: the two paths give the same greedy answer up to
floating-point rounding (``tests/test_llama_batch.py`` and the benchmark compare them).

Sampled requests (``temperature > 0``) draw each token with llama.cpp's default chain
(top-k 40, top-p 0.95, min-p 0.05, then the temperature; :class:`~judgeopt.lm._llama_decode.
Sampling`) from a random generator of their own, seeded by the request: the same request and
seed give the same completion whatever else is in flight. The draws are numpy's, not
llama.cpp's, so a sampled answer differs from the one-at-a-time path's for the same seed
(same distribution, other random numbers); the cache keeps the two apart.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._errors import JudgeoptError
from .._validation import check_int
from ._llama_decode import DecodingSequence, Sampling, completion_budget, prompt_and_stops

__all__ = [
    "BLOCK",
    "BatchEngine",
    "EngineClosed",
    "batch_width",
    "close_engines",
    "engines_running",
]

logger = logging.getLogger(__name__)

#: Whether a request whose prompt a slot holds whole starts from that slot's kept logits
#: (``benchmarks/shared_calls.py`` turns it off for the arm it compares against).
HOLD_PROMPTS = True

#: Tokens per prompt block: the unit of prompt evaluation and of prefix sharing.
BLOCK = 64

_KERNEL_TILE = 4


class EngineClosed(JudgeoptError, RuntimeError):
    """A request the engine never answered because it was closed (at exit, after an
    interrupt): not a failure of the request, and no judgement."""

    def __init__(self) -> None:
        super().__init__("the batch engine was closed")


def batch_width(parallel: int) -> int:
    """The number of columns every decoding step evaluates for ``parallel`` sequences."""
    return -(-parallel // _KERNEL_TILE) * _KERNEL_TILE


@dataclass
class _Request:
    messages: list[dict[str, Any]]
    max_tokens: int | None
    top_logprobs: int | None
    stop: Sequence[str] | str | None
    model: str
    sampling: Sampling | None = None
    future: Future[dict[str, Any]] = field(default_factory=Future)


@dataclass
class _Slot:
    """One sequence id of the context: the request it decodes (if any) and the tokens whose
    values its KV cells hold (kept after the request ends, for prefix sharing)."""

    seq_id: int
    tokens: list[int] = field(default_factory=list)
    blocks: int = 0  # leading BLOCK-aligned blocks of `tokens` evaluated as whole blocks
    request: _Request | None = None
    seq: DecodingSequence | None = None
    next_token: int | None = None
    started: float = 0.0
    #: The logits of the last prompt position of the request this slot holds (cells
    #: ``0 .. prompt_len - 1``), kept after the request ends: a request with the same prompt
    #: starts from them without evaluating anything (``None``: nothing kept).
    logits: np.ndarray | None = None
    prompt_len: int = 0


class BatchEngine:
    """Continuous batching of greedy and sampled requests over one llama.cpp context.

    The engine owns a context on the model of ``llama`` (the weights are shared) with room
    for ``parallel`` sequences of ``n_ctx`` tokens each, and a daemon worker thread that is
    started on the first request. Use :meth:`submit` from any thread.

    Args:
        llama: The loaded ``llama_cpp.Llama`` (its model, tokenizer and chat handler).
        parallel: Sequences decoded together (>= 1).
        n_ctx: Context window of each sequence (the prompt plus its completion).
        n_threads: CPU threads of the context.
        lock: The model's compute lock: held around every evaluation, so that the engine
            and one-at-a-time calls on the same model never compute at the same time.
    """

    def __init__(
        self, llama: Any, *, parallel: int, n_ctx: int, n_threads: int, lock: threading.Lock
    ) -> None:
        check_int(parallel, "parallel", min_value=1, owner="BatchEngine")
        self._llama = llama
        self.parallel = parallel
        self.width = batch_width(parallel)
        self.n_ctx = -(-n_ctx // 256) * 256
        self.n_threads = n_threads
        self._lock = lock
        self._cv = threading.Condition()
        self._queue: deque[_Request] = deque()
        self._slots = [_Slot(i) for i in range(self.width)]
        self._thread: threading.Thread | None = None
        self._closed = False
        self._ctx: Any = None
        self._batch: Any = None
        self._n_vocab = int(llama.n_vocab())
        self.steps = 0
        self.prompt_tokens_evaluated = 0
        self.prompt_tokens_shared = 0
        self.prompts_held = 0  # requests started from a prompt a slot held whole
        # Seconds the worker spent computing prompts (every evaluated block of a request's
        # start) and in steps (one token for every slot): with ``steps`` and ``width``, what
        # a cost plan times a run's calls from (the steps' cost does not depend on how many
        # slots are busy: idle ones are padded).
        self.prompt_seconds = 0.0
        self.step_seconds = 0.0
        _engines.add(self)

    # ----------------------------------------------------------------------------- API
    def submit(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        max_tokens: int | None,
        top_logprobs: int | None,
        stop: Sequence[str] | str | None = None,
        model: str = "local",
        sampling: Sampling | None = None,
    ) -> Future[dict[str, Any]]:
        """Queue a chat completion; the future holds its OpenAI-shaped response.

        Args:
            messages: The chat messages.
            max_tokens: Completion budget (``None``: up to the sequence's context window).
            top_logprobs: Alternatives per generated token, or ``None`` for no logprobs
                (greedy decoding only).
            stop: Extra stop strings (the chat format's own are added).
            model: The ``model`` field of the response.
            sampling: Sample each token (its own seeded generator: the response still
                depends on the request only); ``None``: greedy.

        Returns:
            A future; its exception is a ``ValueError`` with llama-cpp-python's own message
            when the prompt does not fit, a ``RuntimeError`` when llama.cpp failed, or
            :class:`EngineClosed` when the engine was closed first.

        Raises:
            EngineClosed: When the engine is already closed.
        """
        top = None if top_logprobs is None else max(1, int(top_logprobs))
        if top is not None and sampling is not None:
            raise ValueError("logprobs are given for greedy decoding only, not with sampling")
        request = _Request([dict(m) for m in messages], max_tokens, top, stop, model, sampling)
        with self._cv:
            if self._closed:
                raise EngineClosed()
            self._queue.append(request)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="judgeopt-llama-batch", daemon=True
                )
                self._thread.start()
            self._cv.notify()
        return request.future

    def close(self, timeout: float | None = 30.0) -> None:
        """Stop the worker; queued and unfinished requests fail with :class:`EngineClosed`."""
        with self._cv:
            self._closed = True
            queued = list(self._queue)
            self._queue.clear()
            self._cv.notify()
        for r in queued:
            r.future.set_exception(EngineClosed())
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # -------------------------------------------------------------------------- worker
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._queue and not self._active() and not self._closed:
                    self._cv.wait()
                if self._closed:
                    break
                free = [s for s in self._slots if s.request is None]
                admit = [self._queue.popleft() for _ in range(min(len(free), len(self._queue)))]
            for slot, request in zip(free, admit, strict=False):
                try:
                    self._start(slot, request)
                except Exception as exc:  # noqa: BLE001 - a failed decode fails its requests
                    self._fail_all(exc, also=request)
            if self._active():
                try:
                    self._step()
                except Exception as exc:  # noqa: BLE001
                    self._fail_all(exc)
        self._fail_all(EngineClosed(), log=False)
        self._free_context()

    def _active(self) -> list[_Slot]:
        return [s for s in self._slots if s.request is not None]

    def _context(self) -> Any:
        if self._ctx is None:
            import llama_cpp
            from llama_cpp import _internals

            params = llama_cpp.llama_context_default_params()
            params.n_ctx = self.width * self.n_ctx
            params.n_batch = params.n_ubatch = max(512, self.width, BLOCK)
            params.n_seq_max = self.width
            params.kv_unified = False  # one stream per slot: cell i holds position i
            params.n_threads = params.n_threads_batch = self.n_threads
            params.embeddings = False
            self._ctx = _internals.LlamaContext(
                model=self._llama._model, params=params, verbose=False
            )
            self._batch = _internals.LlamaBatch(
                n_tokens=params.n_batch, embd=0, n_seq_max=1, verbose=False
            )
            self._memory = llama_cpp.llama_get_memory(self._ctx.ctx)
        return self._ctx

    def _free_context(self) -> None:
        if self._batch is not None:
            self._batch.close()
            self._batch = None
        if self._ctx is not None:
            self._ctx.close()
            self._ctx = None

    def _decode(self, columns: Sequence[tuple[int, int, int, bool]]) -> None:
        """Evaluate ``(token, position, seq_id, wants_logits)`` columns in one call."""
        ctx = self._context()
        batch = self._batch.batch
        batch.n_tokens = len(columns)
        for i, (token, pos, seq_id, logits) in enumerate(columns):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.seq_id[i][0] = seq_id
            batch.n_seq_id[i] = 1
            batch.logits[i] = logits
        with self._lock:
            ctx.decode(self._batch)

    def _row(self, index: int) -> np.ndarray:
        import llama_cpp

        pointer = llama_cpp.llama_get_logits_ith(self._ctx.ctx, index)
        return np.array(np.ctypeslib.as_array(pointer, shape=(self._n_vocab,)), dtype=np.single)

    def _start(self, slot: _Slot, request: _Request) -> None:
        """Build the prompt, share the blocks another slot holds, evaluate the rest and take
        the first token; a request that cannot start gets its exception."""

        try:
            with self._lock:
                prompt, stops = prompt_and_stops(self._llama, request.messages, request.stop)
            budget = completion_budget(len(prompt), self.n_ctx, request.max_tokens)
        except Exception as exc:  # noqa: BLE001 - handed to the caller
            request.future.set_exception(exc)
            return
        self._context()
        n = len(prompt)
        if (holder := self._holder(prompt)) is not None:
            self._start_held(slot, request, prompt, stops, budget, holder)
            return
        reusable = (n - 1) // BLOCK
        source, shared = slot, 0
        for other in self._slots:
            k = _shared_blocks(other, prompt, reusable)
            if k > shared or (k == shared and other is slot):
                source, shared = other, k
        self._take_cells(slot, source if shared else slot, shared * BLOCK)
        slot.tokens = list(prompt[: shared * BLOCK])
        slot.blocks = shared
        slot.logits, slot.prompt_len = None, 0
        slot.request, slot.started = request, time.monotonic()
        self.prompt_tokens_shared += shared * BLOCK
        began = time.perf_counter()
        try:
            pos = shared * BLOCK
            while pos < n:
                end = min(pos + BLOCK, n)
                last = end == n
                self._decode(
                    [(prompt[i], i, slot.seq_id, last and i == end - 1) for i in range(pos, end)]
                )
                slot.tokens.extend(prompt[pos:end])
                if end - pos == BLOCK and end % BLOCK == 0:
                    slot.blocks = end // BLOCK
                self.prompt_tokens_evaluated += end - pos
                pos = end
            row = self._row(-1)
        except Exception:
            self._release(slot)
            raise
        finally:
            self.prompt_seconds += time.perf_counter() - began
        slot.logits, slot.prompt_len = row.copy(), n
        self._begin(slot, request, prompt, stops, budget, row)

    def _take_cells(self, slot: _Slot, source: _Slot, keep: int) -> None:
        """Make ``slot``'s stream hold ``source``'s first ``keep`` cells (its own when
        ``source`` is ``slot``), and nothing after them."""
        import llama_cpp

        if source is not slot:
            # NOTE: a copy between streams takes the whole source stream (llama.cpp copies
            # the buffers before the next evaluation); the cells past `keep` are then
            # dropped, so this stream holds positions 0.. in cells 0.. again.
            llama_cpp.llama_memory_seq_cp(self._memory, source.seq_id, slot.seq_id, -1, -1)
        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, keep, -1)

    def _begin(
        self,
        slot: _Slot,
        request: _Request,
        prompt: Sequence[int],
        stops: Any,
        budget: int,
        row: np.ndarray,
    ) -> None:
        """Start decoding ``request`` in ``slot``, whose cells hold ``prompt``: its first
        token from ``row`` (the logits of the prompt's last position); a request that is done
        at once is finished, one that cannot start frees the slot."""
        try:
            seq = DecodingSequence(
                self._llama, prompt, stops, budget, request.top_logprobs, request.sampling
            )
            slot.seq = seq
            slot.next_token = seq.step(row)
        except Exception:
            self._release(slot)
            raise
        if slot.next_token is None:
            self._finish(slot)

    def _holder(self, prompt: Sequence[int]) -> _Slot | None:
        """A slot whose cells hold the whole of ``prompt`` with its last position's logits
        (the prompt of its current or last request), or ``None``."""
        n = len(prompt)
        if not HOLD_PROMPTS:
            return None
        for other in self._slots:
            if other.logits is not None and other.prompt_len == n and other.tokens[:n] == prompt:
                return other
        return None

    def _start_held(
        self,
        slot: _Slot,
        request: _Request,
        prompt: Sequence[int],
        stops: Any,
        budget: int,
        holder: _Slot,
    ) -> None:
        """Start ``request`` on a prompt that ``holder`` holds whole: its cells are copied
        (or, in the same slot, cut back to the prompt) and the first token is taken from the
        kept logits. Nothing is evaluated: the cells and the logits are the values the
        prompt's own evaluation gives (the same tokens in the same blocks and last call)."""
        n, logits = len(prompt), holder.logits
        assert logits is not None
        self._take_cells(slot, holder, n)
        slot.tokens, slot.blocks = list(prompt), holder.blocks
        slot.logits, slot.prompt_len = logits, n
        slot.request, slot.started = request, time.monotonic()
        self.prompt_tokens_shared += n
        self.prompts_held += 1
        self._begin(slot, request, prompt, stops, budget, logits.copy())

    def _step(self) -> None:
        """One token for every active sequence, in a call of exactly ``width`` columns."""
        import llama_cpp

        began = time.perf_counter()
        # NOTE: the columns go in the order of the slots' sequence ids (0, 1, ...): llama.cpp
        # splits a batch over several KV streams into one micro-batch only when its
        # sequence ids increase by one from column to column; any other order would split
        # the step into smaller batches, whose kernels round differently.
        columns = []
        for s in self._slots:
            if s.request is not None:
                columns.append((int(s.next_token), len(s.tokens), s.seq_id, True))  # type: ignore[arg-type]
            else:
                # Padding: one token at the end of an idle slot's stream, removed after.
                columns.append((0, len(s.tokens), s.seq_id, True))
        self._decode(columns)
        self.steps += 1
        for i, slot in enumerate(self._slots):
            if slot.request is None:
                llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, len(slot.tokens), -1)
                continue
            slot.tokens.append(int(slot.next_token))  # type: ignore[arg-type]
            assert slot.seq is not None
            slot.next_token = slot.seq.step(self._row(i))
            if slot.next_token is None:
                self._finish(slot)
        self.step_seconds += time.perf_counter() - began

    def _finish(self, slot: _Slot) -> None:
        request, seq = slot.request, slot.seq
        slot.request, slot.seq, slot.next_token = None, None, None
        if request is not None and seq is not None:
            response = seq.response(request.model)
            response["_seconds"] = time.monotonic() - slot.started
            request.future.set_result(response)

    def _release(self, slot: _Slot) -> None:
        """Forget a slot's cells (after a failure in the middle of its prompt)."""
        import llama_cpp

        if self._ctx is not None:
            llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, -1, -1)
        slot.tokens, slot.blocks = [], 0
        slot.logits, slot.prompt_len = None, 0
        slot.request, slot.seq, slot.next_token = None, None, None

    def _fail_all(
        self, exc: BaseException, *, also: _Request | None = None, log: bool = True
    ) -> None:
        """A failed evaluation: every active request (and ``also``) gets the error; the KV
        cache is reset."""
        import llama_cpp

        requests = [s.request for s in self._slots if s.request is not None]
        if also is not None and also not in requests:
            requests.append(also)
        if log and requests:
            logger.warning(
                "batched decoding failed (%s: %s); %d request(s) fail with it",
                type(exc).__name__,
                exc,
                len(requests),
            )
        for slot in self._slots:
            slot.tokens, slot.blocks = [], 0
            slot.logits, slot.prompt_len = None, 0
            slot.request, slot.seq, slot.next_token = None, None, None
        error = (
            exc
            if isinstance(exc, (ValueError, RuntimeError))
            else RuntimeError(f"{type(exc).__name__}: {exc}")
        )
        for request in requests:
            if not request.future.done():
                request.future.set_exception(error)
        if self._ctx is not None:
            llama_cpp.llama_memory_clear(self._memory, True)


def _shared_blocks(slot: _Slot, prompt: Sequence[int], limit: int) -> int:
    """Leading whole blocks of ``prompt`` that ``slot`` holds (evaluated as blocks)."""
    k = 0
    upto = min(slot.blocks, limit)
    while k < upto and slot.tokens[k * BLOCK : (k + 1) * BLOCK] == list(
        prompt[k * BLOCK : (k + 1) * BLOCK]
    ):
        k += 1
    return k


_engines: weakref.WeakSet[BatchEngine] = weakref.WeakSet()


@atexit.register
def close_engines() -> None:
    """Stop every batch engine's worker (at exit: a daemon worker still decoding when the
    interpreter tears the model down would crash the exit)."""
    for engine in list(_engines):
        try:
            engine.close(timeout=5.0)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def engines_running(llama: Any) -> bool:
    """Whether a batch engine's worker over ``llama`` is still alive (its context open)."""
    return any(
        e._llama is llama and e._thread is not None and e._thread.is_alive() for e in _engines
    )
