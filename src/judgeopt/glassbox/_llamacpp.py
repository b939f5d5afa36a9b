"""A GGUF model run in process by llama.cpp, with the full vocabulary at every position.

The model is loaded with ``logits_all=True`` (llama.cpp keeps the logits of every evaluated
position in ``Llama.scores``), and shared with any :class:`judgeopt.lm.LlamaCppLM` of the
process that has the same file, ``n_ctx``, ``n_threads`` and ``logits_all=True``.

* Scoring a given response (forced decoding) is one ``eval`` over prompt + response tokens;
  the distribution that predicted response token ``t`` is the row of the position before it.
* Generation is a small decoding loop over the same logits (greedy argmax, or sampling with
  temperature and top-k from a seeded ``numpy.random.Generator``), so every generated token's
  full distribution is available too.
* Consecutive calls reuse the longest common token prefix with what was evaluated last (as
  llama-cpp-python's own ``generate`` does): items that share a long instruction are scored
  much faster.

Memory: ``n_ctx x vocabulary`` float32 logits (Qwen2.5, 151,936 entries: 2.5 GB at
``n_ctx=4096``). Speed: see ``docs/glassbox.md``.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from judgeopt.lm import effective_n_ctx, ensure_local_model, load_llama
from judgeopt.scoring import (
    BACKEND_CAPABILITIES,
    FloatArray,
    Generation,
    LogprobBackend,
    Messages,
    ScoredText,
    log_softmax,
)

from ._inprocess import (
    check_decoding_args,
    check_fits,
    decode_tokens,
    generation_from_decoded,
    local_model_args,
    scored_text,
)

__all__ = ["LlamaCppBackend"]

logger = logging.getLogger(__name__)


class LlamaCppBackend(LogprobBackend):
    """llama.cpp in process: full vocabulary, forced decoding, generation with logprobs.

    Args:
        model: A registry name (``"qwen2.5-coder-1.5b"``, ``"qwen2.5-coder-0.5b"``,
            ``"smollm2-135m"``; joined and verified on first use) or a GGUF path.
        n_ctx: Context window in tokens (rounded up to a multiple of 256).
        n_threads: CPU threads; ``None`` reads ``$JUDGEOPT_THREADS`` (default 2).
        model_dir: Where registry models are joined (default ``$JUDGEOPT_MODEL_DIR`` or
            ``~/.cache/judgeopt/models``).

    Raises:
        ValueError: On an unknown registry name or an out-of-range argument.
        LocalModelError: If the GGUF is missing or not a GGUF (checked at construction for
            paths, at first use for registry models).

    Example:
        >>> backend = LlamaCppBackend("smollm2-135m", n_threads=1)  # doctest: +SKIP
        >>> scored = backend.score([{"role": "user", "content": "2+2?"}], "4",
        ...                        full_vocabulary=True)  # doctest: +SKIP
        >>> scored.logits.shape  # doctest: +SKIP
        (1, 49152)
    """

    name = "llama.cpp"

    def __init__(
        self,
        model: str | os.PathLike[str] = "qwen2.5-coder-1.5b",
        *,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        model_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        args = local_model_args("LlamaCppBackend", model, n_ctx=n_ctx, n_threads=n_threads)
        self._registry_name, self._path, label, threads = args
        self.model = f"local:{label}"
        self.n_ctx = effective_n_ctx(n_ctx)
        self.n_threads = threads
        self.model_dir = model_dir
        self.capabilities = BACKEND_CAPABILITIES["llama.cpp"][0]
        self._handle: Any = None
        self._formatter: Any = None
        self._texts: tuple[str, ...] | None = None
        self._eog: set[int] | None = None

    def __repr__(self) -> str:
        return f"LlamaCppBackend({self.model!r}, n_ctx={self.n_ctx}, n_threads={self.n_threads})"

    # -- loading ------------------------------------------------------------------------

    def _get(self) -> Any:
        if self._handle is None:
            if self._path is None:
                assert self._registry_name is not None
                self._path = ensure_local_model(self._registry_name, model_dir=self.model_dir)
            # NOTE: the LM layer's loader, so a LlamaCppLM(logits_all=True) with the same
            # settings shares this Llama (and its lock) instead of loading a second copy.
            self._handle = load_llama(self._path, self.n_ctx, self.n_threads, True)
        return self._handle

    @property
    def vocab_size(self) -> int:
        """Number of vocabulary entries."""
        return int(self._get().llama.n_vocab())

    def _chat_formatter(self) -> Any:
        if self._formatter is None:
            from llama_cpp import llama_chat_format

            from judgeopt.lm import LocalModelError  # DSPy-based error: loaded when needed

            llama = self._get().llama
            template = llama.metadata.get("tokenizer.chat_template")
            if not template:
                raise LocalModelError(
                    f"{self.model} has no chat template in its GGUF metadata "
                    "(tokenizer.chat_template); the glass-box backend needs one."
                )
            eos, bos = llama.token_eos(), llama.token_bos()
            self._formatter = llama_chat_format.Jinja2ChatFormatter(
                template=template,
                eos_token=llama._model.token_get_text(eos) if eos != -1 else "",
                bos_token=llama._model.token_get_text(bos) if bos != -1 else "",
                add_generation_prompt=True,
            )
        return self._formatter

    def prompt_ids(self, messages: Messages) -> list[int]:
        """Token ids of ``messages`` rendered with the model's chat template, ending with the
        assistant header (the same prompt ``create_chat_completion`` builds)."""
        result = self._chat_formatter()(messages=[dict(m) for m in messages])
        llama = self._get().llama
        ids: list[int] = llama.tokenize(
            result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True
        )
        return ids

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` as plain text (no BOS, special tokens not parsed)."""
        ids: list[int] = self._get().llama.tokenize(
            text.encode("utf-8"), add_bos=False, special=False
        )
        return ids

    def _piece(self, token: int) -> bytes:
        """The bytes of one token (control tokens give ``b""``).

        NOTE: llama-cpp-python's ``detokenize`` reads each piece through a 32-byte buffer and
        returns nothing for longer tokens (runs of spaces or dashes in code vocabularies);
        this asks again with the size llama.cpp reports.
        """
        from llama_cpp import llama_cpp

        vocab = self._get().llama._model.vocab
        size = 32
        while True:
            buffer = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_token_to_piece(
                vocab, llama_cpp.llama_token(token), buffer, size, 0, False
            )
            if n >= 0:
                return buffer.raw[:n]
            size = -n

    def token_texts(self) -> tuple[str, ...]:
        """The decoded text of every vocabulary entry (cached)."""
        if self._texts is None:
            llama = self._get().llama
            self._texts = tuple(
                self._piece(i).decode("utf-8", errors="replace") for i in range(llama.n_vocab())
            )
        return self._texts

    def _is_eog(self, token: int) -> bool:
        from llama_cpp import llama_cpp

        if self._eog is None:
            self._eog = set()
        if token in self._eog:
            return True
        llama = self._get().llama
        if bool(llama_cpp.llama_vocab_is_eog(llama._model.vocab, int(token))):
            self._eog.add(int(token))
            return True
        return False

    # -- evaluation ---------------------------------------------------------------------

    def _check_fits(self, n_tokens: int) -> None:
        check_fits(n_tokens, self.n_ctx, self.model, "LlamaCppBackend")

    def _forward(self, ids: Sequence[int]) -> Any:
        """Make ``llama.scores[:len(ids)]`` the logits of ``ids`` (caller holds the lock)."""
        llama = self._get().llama
        self._check_fits(len(ids))
        current = int(llama.n_tokens)
        target = np.asarray(ids, dtype=np.intc)
        done = llama.input_ids[: min(current, target.size)]
        differ = np.flatnonzero(done != target[: done.size])
        common = int(differ[0]) if differ.size else done.size
        if common == target.size:
            # Every row already holds the logits of this prefix. Forget what follows it, so
            # that a next eval() (generation) appends right after it.
            llama.n_tokens = common
            return llama
        llama.n_tokens = common
        llama.eval(target[common:].tolist())
        return llama

    def next_logprobs(self, token_ids: Sequence[int]) -> FloatArray:
        """The ``(V,)`` log-probabilities of the token after ``token_ids``."""
        if not len(token_ids):
            raise ValueError("next_logprobs() needs at least one context token")
        handle = self._get()
        with handle.lock:
            llama = self._forward(token_ids)
            row = np.array(llama.scores[len(token_ids) - 1], dtype=np.float64)
        return log_softmax(row)

    def score(
        self,
        messages: Messages,
        response: str,
        *,
        top_logprobs: int = 0,
        full_vocabulary: bool = False,
    ) -> ScoredText:
        """Score ``response`` after ``messages`` by one forced-decoding pass.

        See :meth:`LogprobBackend.score`. ``logits`` holds the raw float32 logits of the
        ``T`` response positions when ``full_vocabulary`` is true.
        """
        prompt = self.prompt_ids(messages)
        target = self.tokenize(response)
        handle = self._get()
        with handle.lock:
            llama = self._forward([*prompt, *target])
            rows = np.array(llama.scores[len(prompt) - 1 : len(prompt) + len(target) - 1])
        return scored_text(
            rows,
            target,
            self.token_texts(),
            len(prompt),
            full_vocabulary=full_vocabulary,
            top_logprobs=top_logprobs,
        )

    def generate(
        self,
        messages: Messages,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        top_k: int | None = None,
        seed: int | None = None,
        top_logprobs: int = 0,
        full_logprobs: bool = False,
    ) -> Generation:
        """Decode a completion token by token; see :meth:`LogprobBackend.generate`.

        Greedy decoding takes the argmax; sampling draws from ``softmax(logits /
        temperature)`` restricted to the ``top_k`` most probable tokens, with
        ``numpy.random.default_rng(seed)``. ``token_logprobs`` are always from the model's
        untempered distribution. Generation stops at an end-of-generation token (not
        included) or after ``max_tokens``.
        """
        check_decoding_args(max_tokens, temperature, top_k)
        prompt = self.prompt_ids(messages)
        texts = self.token_texts() if top_logprobs else None
        handle = self._get()
        with handle.lock:
            llama = self._forward(prompt)
            n_vocab = int(llama.n_vocab())

            def advance(token: int) -> FloatArray:
                llama.eval([token])
                return np.array(llama.scores[int(llama.n_tokens) - 1], dtype=np.float64)

            decoded = decode_tokens(
                np.array(llama.scores[len(prompt) - 1], dtype=np.float64),
                advance,
                max_tokens=max_tokens,
                temperature=temperature,
                top_k=top_k,
                rng=np.random.default_rng(seed),
                is_eog=self._is_eog,
                room=self.n_ctx - len(prompt),
                vocab_size=n_vocab,
                texts=texts,
                top_logprobs=top_logprobs,
                full_logprobs=full_logprobs,
            )
        pieces = [self._piece(i) for i in decoded.ids]
        return generation_from_decoded(decoded, pieces, prompt)
