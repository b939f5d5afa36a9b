"""A model run in process by Hugging Face transformers on CPU torch: full vocabulary and
attention weights.

:class:`TransformersBackend` loads a registry GGUF (``"qwen2.5-coder-0.5b"``, ...), any GGUF
path (transformers dequantises it: ``gguf_file=``, needs the ``gguf`` and ``accelerate``
packages) or a Hugging Face model folder, and runs it with CPU torch. It has every capability
of :class:`judgeopt.glassbox.LlamaCppBackend` with the same semantics and return types, plus
:attr:`Capability.ATTENTION`: :meth:`TransformersBackend.attentions` returns the attention
weights of every layer and head, which AttnEnt-Min / AttnEnt-Avg need.

* The prompt is the model's own chat template (the GGUF's ``tokenizer.chat_template``) with the
  GGUF's BOS/EOS texts, tokenized without adding special tokens: for the registry models the
  prompt token ids equal :class:`LlamaCppBackend`'s (tested).
* Forced decoding is one forward pass over ``prompt + response[:-1]``; the distribution that
  predicted response token ``t`` is the logits row of the position before it.
* A KV cache keeps the last evaluated tokens, and a call reuses its longest common prefix
  (items that share a long instruction are scored much faster). The prompt part is evaluated
  in chunks of 512 tokens without attention output, so eager attention never materialises a
  ``prompt x prompt`` matrix for all layers at once.
* Weights are dequantised to ``dtype``: ``float32`` (default, the exact arithmetic of the
  numbers) or ``bfloat16`` (half the memory; logits and attention weights are then rounded to
  about 3 significant digits).

Install with ``pip install 'judgeopt[transformers]'`` (CPU ``torch==2.13.0``, transformers,
accelerate, gguf). Threads: ``torch.set_num_threads`` is process-wide; the backend sets it to
its ``n_threads`` before each call.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from judgeopt.lm import ensure_local_model
from judgeopt.scoring import (
    BACKEND_CAPABILITIES,
    Capability,
    FloatArray,
    Generation,
    LogprobBackend,
    Messages,
    ScoredText,
    log_softmax,
)

from .._optional import MissingDependencyError, install_hint, is_installed
from ._gguf_vocab import (
    BYTE_TOKEN,
    EOG_CONTROL_TEXTS,
    EOG_FIM_TEXTS,
    GGUF_KEYS,
    byte_decoder,
    gguf_metadata,
)
from ._inprocess import (
    check_decoding_args,
    check_fits,
    decode_tokens,
    generation_from_decoded,
    local_model_args,
    scored_text,
)

__all__ = ["TransformersBackend"]

logger = logging.getLogger(__name__)

INSTALL = install_hint("transformers")

#: The weight dtypes offered (CPU float16 matmuls are slow or missing, so not offered).
DTYPES = ("float32", "bfloat16")

# Prompt tokens evaluated per forward pass when filling the KV cache.
_PREFILL_CHUNK = 512


def missing_packages() -> list[str]:
    """The packages of the ``transformers`` extra that are not installed."""
    return [
        name for name in ("torch", "transformers", "accelerate", "gguf") if not is_installed(name)
    ]


class TransformersBackend(LogprobBackend):
    """transformers on CPU torch: full vocabulary, forced decoding, generation, attention.

    Args:
        model: A registry name (``"qwen2.5-coder-1.5b"``, ``"qwen2.5-coder-0.5b"``,
            ``"smollm2-135m"``; joined and verified on first use), a GGUF path, or a Hugging
            Face model folder (with ``config.json``).
        dtype: ``"float32"`` (default) or ``"bfloat16"``.
        attention: Load with ``attn_implementation="eager"`` so that attention weights can be
            returned (:attr:`Capability.ATTENTION`; the default). ``False`` uses PyTorch's
            fused ``"sdpa"`` attention and has no attention capability.
        n_ctx: The most tokens (prompt + response) one call may hold.
        n_threads: CPU threads; ``None`` reads ``$JUDGEOPT_THREADS`` (default 2).
        model_dir: Where registry models are joined (default ``$JUDGEOPT_MODEL_DIR`` or
            ``~/.cache/judgeopt/models``).

    Attributes:
        load_seconds: Wall time of loading the model (``None`` before it is loaded).

    Raises:
        ImportError: If torch, transformers, accelerate or gguf is missing (names the
            install command).
        ValueError: On an unknown registry name or an out-of-range argument.
        LocalModelError: If a GGUF path is not a GGUF (at construction), or the model
            cannot be loaded (at first use).

    Example:
        >>> backend = TransformersBackend("smollm2-135m", n_threads=1)  # doctest: +SKIP
        >>> backend.attentions([{"role": "user", "content": "2+2?"}], "4").shape  # doctest: +SKIP
        (30, 9, 1, 31)
    """

    name = "transformers"

    def __init__(
        self,
        model: str | os.PathLike[str] = "qwen2.5-coder-0.5b",
        *,
        dtype: str = "float32",
        attention: bool = True,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        model_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        missing = missing_packages()
        if missing:
            raise MissingDependencyError(
                f"TransformersBackend needs {', '.join(missing)}: {INSTALL} (CPU torch==2.13.0, "
                "transformers, accelerate, gguf).",
                name=missing[0],
            )
        if dtype not in DTYPES:
            raise ValueError(
                f"The `dtype` argument of TransformersBackend must be one of {list(DTYPES)}. "
                f"Got {dtype!r} instead."
            )
        if not isinstance(attention, bool):
            raise ValueError(f"The `attention` argument must be a bool. Got {attention!r}.")
        args = local_model_args(
            "TransformersBackend", model, n_ctx=n_ctx, n_threads=n_threads, folders=True
        )
        self._registry_name, self._path, label, threads = args
        self.model = f"local:{label}"
        self.dtype = dtype
        self.attention = attention
        self.n_ctx = n_ctx
        self.n_threads = threads
        self.model_dir = model_dir
        caps = BACKEND_CAPABILITIES["transformers"][0]
        self.capabilities = caps if attention else caps - {Capability.ATTENTION}
        self.load_seconds: float | None = None
        self._lock = threading.RLock()
        self._net: Any = None
        self._tok: Any = None
        self._bos_eos: tuple[str, str] = ("", "")
        self._eog: frozenset[int] = frozenset()
        self._gguf: dict[str, Any] = {}
        self._pieces: tuple[bytes, ...] | None = None
        self._texts: tuple[str, ...] | None = None
        self._cache: Any = None
        self._cached_ids: list[int] = []

    def __repr__(self) -> str:
        return (
            f"TransformersBackend({self.model!r}, dtype={self.dtype!r}, "
            f"attention={self.attention}, n_ctx={self.n_ctx}, n_threads={self.n_threads})"
        )

    # -- loading ------------------------------------------------------------------------

    def _threads(self) -> None:
        import torch

        if torch.get_num_threads() != self.n_threads:
            torch.set_num_threads(self.n_threads)

    def _get(self) -> Any:
        with self._lock:
            if self._net is None:
                self._load()
            self._threads()
            return self._net

    def _load(self) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from judgeopt.lm import LocalModelError  # DSPy-based error: loaded when needed

        if self._path is None:
            assert self._registry_name is not None
            self._path = ensure_local_model(self._registry_name, model_dir=self.model_dir)
        self._threads()
        if self._path.is_dir():
            where, extra = self._path, {}
        else:
            where, extra = self._path.parent, {"gguf_file": self._path.name}
        started = time.monotonic()
        net: Any
        try:
            tok = AutoTokenizer.from_pretrained(where, local_files_only=True, **extra)
            net = AutoModelForCausalLM.from_pretrained(
                where,
                local_files_only=True,
                dtype=getattr(torch, self.dtype),
                attn_implementation="eager" if self.attention else "sdpa",
                **extra,
            )
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise LocalModelError(
                f"transformers could not load {self._path}: {type(exc).__name__}: {exc}"
            ) from exc
        net.eval()
        if not tok.chat_template:
            raise LocalModelError(
                f"{self.model} has no chat template (tokenizer.chat_template); the glass-box "
                "backend needs one."
            )
        self.load_seconds = time.monotonic() - started
        logger.info(
            "loaded %s with transformers (%s) in %.1f s", self._path, self.dtype, self.load_seconds
        )
        self._tok, self._net = tok, net
        self._gguf = {} if self._path.is_dir() else gguf_metadata(self._path, GGUF_KEYS)
        # NOTE: a GGUF's tokenizer as transformers converts it can name the wrong EOS (SmolLM2:
        # <|im_start|>); the model config carries the GGUF's tokenizer.ggml.*_token_id.
        self._bos_eos = (
            self._config_token("bos_token_id", tok.bos_token),
            self._config_token("eos_token_id", tok.eos_token),
        )
        self._eog = self._eog_ids()

    def _config_token(self, key: str, fallback: str | None) -> str:
        value = getattr(self._net.config, key, None)
        if isinstance(value, (list, tuple)):
            value = value[0] if value else None
        if value is None:
            return fallback or ""
        return str(self._tok.convert_ids_to_tokens(int(value)))

    def _ids_of(self, texts: frozenset[str]) -> set[int]:
        """The ids of the vocabulary entries whose text is one of ``texts``."""
        vocab = self._tok.get_vocab()
        return {int(vocab[t]) for t in texts if t in vocab}

    def _eog_ids(self) -> frozenset[int]:
        """End-of-generation ids, as llama.cpp collects them for the same GGUF."""
        ids: set[int] = set()
        for config in (self._net.config, getattr(self._net, "generation_config", None)):
            value = getattr(config, "eos_token_id", None)
            if value is not None:
                ids.update(int(v) for v in (value if isinstance(value, (list, tuple)) else [value]))
        for key in GGUF_KEYS[1:]:
            if self._gguf.get(key) is not None:
                ids.add(int(self._gguf[key]))
        return frozenset(ids | self._ids_of(EOG_CONTROL_TEXTS | EOG_FIM_TEXTS))

    def _silent_ids(self) -> set[int]:
        """Tokens rendered as nothing: llama.cpp's unknown, control and unused tokens."""
        types = self._gguf.get("tokenizer.ggml.token_type")
        if types is not None:  # GGUF token types: 2 unknown, 3 control, 5 unused
            ids = {int(i) for i in np.flatnonzero(np.isin(types, (2, 3, 5)))}
        else:  # a Hugging Face folder: its special added tokens
            ids = {int(i) for i, t in self._tok.added_tokens_decoder.items() if t.special}
        return ids | self._ids_of(EOG_CONTROL_TEXTS)

    @property
    def vocab_size(self) -> int:
        """Number of vocabulary entries (the width of a logits row)."""
        return int(self._get().get_output_embeddings().weight.shape[0])

    @property
    def n_layers(self) -> int:
        """Number of decoder layers (the ``L`` of :meth:`attentions`)."""
        return int(self._get().config.num_hidden_layers)

    @property
    def n_heads(self) -> int:
        """Number of attention heads per layer (the ``H`` of :meth:`attentions`)."""
        return int(self._get().config.num_attention_heads)

    def close(self) -> None:
        """Drop the model, the tokenizer and the KV cache (the next call loads again)."""
        with self._lock:
            self._net = self._tok = self._cache = None
            self._cached_ids = []
            self._pieces = self._texts = None

    # -- text and tokens ----------------------------------------------------------------

    def prompt_ids(self, messages: Messages) -> list[int]:
        """Token ids of ``messages`` rendered with the model's chat template, ending with the
        assistant header (the ids :class:`LlamaCppBackend` builds for the same GGUF)."""
        self._get()
        bos, eos = self._bos_eos
        text = self._tok.apply_chat_template(
            [dict(m) for m in messages],
            tokenize=False,
            add_generation_prompt=True,
            bos_token=bos,
            eos_token=eos,
        )
        ids: list[int] = self._tok(text, add_special_tokens=False)["input_ids"]
        return ids

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` as plain text (no BOS, special-token texts not parsed)."""
        self._get()
        ids: list[int] = self._tok(text, add_special_tokens=False, split_special_tokens=True)[
            "input_ids"
        ]
        return ids

    def _token_bytes(self) -> tuple[bytes, ...]:
        """The bytes of every vocabulary entry; control, unknown and unused tokens give ``b""``
        (as llama.cpp's detokenizer without special tokens)."""
        if self._pieces is None:
            self._get()
            tok = self._tok
            spec = json.loads(tok.backend_tokenizer.to_str()).get("decoder") or {}
            kinds = {d.get("type") for d in spec.get("decoders", [spec])}
            table = byte_decoder() if "ByteLevel" in kinds else None
            silent = self._silent_ids()
            size = self.vocab_size
            names = tok.convert_ids_to_tokens(list(range(min(size, len(tok)))))
            pieces: list[bytes] = []
            for token_id in range(size):
                name = names[token_id] if token_id < len(names) else None
                if name is None or token_id in silent:
                    pieces.append(b"")
                elif (match := BYTE_TOKEN.fullmatch(name)) is not None:
                    pieces.append(bytes([int(match.group(1), 16)]))
                elif table is not None and all(c in table for c in name):
                    pieces.append(bytes(table[c] for c in name))
                else:
                    pieces.append(name.replace("\u2581", " ").encode("utf-8"))
            self._pieces = tuple(pieces)
        return self._pieces

    def token_texts(self) -> tuple[str, ...]:
        """The decoded text of every vocabulary entry (cached)."""
        if self._texts is None:
            self._texts = tuple(p.decode("utf-8", errors="replace") for p in self._token_bytes())
        return self._texts

    # -- evaluation ---------------------------------------------------------------------

    def _feed(self, ids: Sequence[int], *, keep: int = 0, attentions: bool = False) -> Any:
        """Evaluate ``ids`` after the cached tokens (caller holds the lock)."""
        import torch
        from transformers import DynamicCache

        if self._cache is None:
            self._cache = DynamicCache(config=self._net.config)
        try:
            out = self._net(
                input_ids=torch.tensor([list(ids)], dtype=torch.long),
                past_key_values=self._cache,
                use_cache=True,
                logits_to_keep=keep,
                output_attentions=attentions,
            )
        except BaseException:
            # The cache may hold some layers of the failed pass: forget it.
            self._cache, self._cached_ids = None, []
            raise
        self._cache = out.past_key_values
        self._cached_ids.extend(int(i) for i in ids)
        return out

    def _run(
        self, ids: Sequence[int], start: int, *, attentions: bool = False, logits: bool = True
    ) -> tuple[npt.NDArray[np.float32], FloatArray | None]:
        """Evaluate ``ids`` and return the logits rows (and attention weights) of positions
        ``start..len(ids)-1``; the KV cache keeps any common prefix with the last call.

        Returns:
            ``(len(ids) - start, V)`` float32 logits (``(0, V)`` when ``logits`` is false) and,
            with ``attentions``, ``(L, H, len(ids) - start, len(ids))`` float32 weights.
        """
        import torch

        check_fits(len(ids), self.n_ctx, self.model, "TransformersBackend")
        if not 0 <= start < len(ids):
            raise ValueError(f"start {start} is outside the {len(ids)} tokens to evaluate")
        self._get()
        with self._lock, torch.inference_mode():
            done = self._cached_ids
            common = 0
            for a, b in zip(done, ids[:start], strict=False):
                if a != b:
                    break
                common += 1
            if common == 0:
                self._cache, self._cached_ids = None, []
            elif common < len(done):
                self._cache.crop(common - len(done))  # a negative value drops that many
                del self._cached_ids[common:]
            for pos in range(common, start, _PREFILL_CHUNK):
                self._feed(ids[pos : min(pos + _PREFILL_CHUNK, start)], keep=1)
            out = self._feed(ids[start:], keep=0 if logits else 1, attentions=attentions)
            rows = (
                out.logits[0].float().numpy()
                if logits
                else np.empty((0, self.vocab_size), dtype=np.float32)
            )
            weights = None
            if attentions:
                weights = np.stack([layer[0].float().numpy() for layer in out.attentions])
            del out
        return rows, weights

    def next_logprobs(self, token_ids: Sequence[int]) -> FloatArray:
        """The ``(V,)`` log-probabilities of the token after ``token_ids``."""
        if not len(token_ids):
            raise ValueError("next_logprobs() needs at least one context token")
        rows, _ = self._run(list(token_ids), len(token_ids) - 1)
        return log_softmax(np.asarray(rows[-1], dtype=np.float64))

    def score(
        self,
        messages: Messages,
        response: str,
        *,
        top_logprobs: int = 0,
        full_vocabulary: bool = False,
    ) -> ScoredText:
        """Score ``response`` after ``messages`` by one forced-decoding pass.

        See :meth:`LogprobBackend.score`. ``logits`` holds the float32 logits of the ``T``
        response positions when ``full_vocabulary`` is true.
        """
        prompt = self.prompt_ids(messages)
        target = self.tokenize(response)
        check_fits(len(prompt) + len(target), self.n_ctx, self.model, "TransformersBackend")
        if target:
            rows, _ = self._run([*prompt, *target[:-1]], len(prompt) - 1)
        else:
            rows = np.empty((0, self.vocab_size), dtype=np.float32)
        return scored_text(
            rows,
            target,
            self.token_texts(),
            len(prompt),
            full_vocabulary=full_vocabulary,
            top_logprobs=top_logprobs,
        )

    def attentions(self, messages: Messages, response: str) -> FloatArray:
        """Attention weights ``(L, H, T, N)`` of the ``T`` response tokens after ``messages``.

        Row ``[l, h, t]`` is the attention distribution, in layer ``l`` and head ``h``, of the
        decoding step that predicted response token ``t`` (the query at the position before
        it) over every position it sees: the whole prompt (chat template, system prompt and
        instruction) and the response tokens before ``t``. ``N = P + T - 1`` for a prompt of
        ``P`` tokens; the positions after the query are zeros, so every row sums to 1. This is
        what :func:`judgeopt.glassbox.attention_entropy` takes.

        Raises:
            CapabilityError: If the backend was built with ``attention=False``.
        """
        self.require(Capability.ATTENTION, "attention entropy")
        prompt = self.prompt_ids(messages)
        target = self.tokenize(response)
        check_fits(len(prompt) + len(target), self.n_ctx, self.model, "TransformersBackend")
        if not target:
            return np.zeros((self.n_layers, self.n_heads, 0, len(prompt)), dtype=np.float32)
        _, weights = self._run(
            [*prompt, *target[:-1]], len(prompt) - 1, attentions=True, logits=False
        )
        assert weights is not None
        return weights

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

        The same loop as :class:`LlamaCppBackend` (greedy argmax, or sampling from
        ``softmax(logits / temperature)`` over the ``top_k`` largest with
        ``numpy.random.default_rng(seed)``); stops at an end-of-generation token (the
        configured EOS and the end-of-turn markers llama.cpp treats so, not included) or after
        ``max_tokens``.
        """
        import torch

        check_decoding_args(max_tokens, temperature, top_k)
        prompt = self.prompt_ids(messages)
        texts = self.token_texts() if top_logprobs else None
        with self._lock:
            first, _ = self._run(prompt, len(prompt) - 1)

            def advance(token: int) -> FloatArray:
                with torch.inference_mode():
                    out = self._feed([token], keep=1)
                    return np.asarray(out.logits[0, -1].float().numpy(), dtype=np.float64)

            decoded = decode_tokens(
                first[-1],
                advance,
                max_tokens=max_tokens,
                temperature=temperature,
                top_k=top_k,
                rng=np.random.default_rng(seed),
                is_eog=self._eog.__contains__,
                room=self.n_ctx - len(prompt),
                vocab_size=self.vocab_size,
                texts=texts,
                top_logprobs=top_logprobs,
                full_logprobs=full_logprobs,
            )
        table = self._token_bytes()
        return generation_from_decoded(decoded, [table[i] for i in decoded.ids], prompt)
