"""What a logprob backend is: its capabilities, its results and the error for a missing one.

A backend turns chat messages into token-level probabilities. Backends differ in what they can
return, so each declares :class:`Capability` flags and every method that needs a capability
checks it first: asking for something a backend cannot do raises :class:`CapabilityError`
naming the backend, the capability and the backends that have it. Nothing falls back silently
(a top-k approximation of a full-vocabulary feature is only used when asked for by name).

Exception tree::

    GlassBoxError (Exception)
    └── CapabilityError (GlassBoxError, ValueError)   a backend lacks a needed capability
"""

from __future__ import annotations

from .._errors import JudgeoptError
import enum
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import numpy as np
import numpy.typing as npt

from ._features import log_softmax, topk_logprobs

__all__ = [
    "BACKEND_CAPABILITIES",
    "Capability",
    "CapabilityError",
    "Generation",
    "GlassBoxError",
    "LogprobBackend",
    "Messages",
    "ScoredText",
]

Messages = Sequence[Mapping[str, str]]
"""OpenAI-style chat messages: ``[{"role": "user", "content": "..."}, ...]``."""

FloatArray = npt.NDArray[np.floating[Any]]


class Capability(enum.StrEnum):
    """What a backend can return."""

    #: Log-probabilities of the generated tokens and the top-k alternatives at each step.
    TOP_LOGPROBS = "top_logprobs"
    #: Log-probabilities of given prompt tokens (the basis of scoring a given text on a server).
    PROMPT_LOGPROBS = "prompt_logprobs"
    #: The whole next-token distribution (every vocabulary entry) at every position.
    FULL_VOCABULARY = "full_vocabulary"
    #: Scoring of a given response text by forced decoding (teacher forcing).
    FORCED_DECODING = "forced_decoding"
    #: Attention weights of every layer and head.
    ATTENTION = "attention"

    @property
    def description(self) -> str:
        """A phrase for error messages."""
        return _DESCRIPTIONS[self]


_DESCRIPTIONS: dict[Capability, str] = {
    Capability.TOP_LOGPROBS: "top-k log-probabilities of generated tokens",
    Capability.PROMPT_LOGPROBS: "log-probabilities of prompt tokens",
    Capability.FULL_VOCABULARY: "the full-vocabulary distribution at every position",
    Capability.FORCED_DECODING: "scoring of a given response by forced decoding",
    Capability.ATTENTION: "attention weights",
}

#: Which backend (by :attr:`LogprobBackend.name`) can have which capability, for the
#: "which backends have it" part of :class:`CapabilityError`. ``litellm`` gets prompt
#: logprobs and forced decoding only when built with ``prompt_logprobs=True`` (vLLM);
#: ``transformers`` has attention weights unless built with ``attention=False``.
BACKEND_CAPABILITIES: Mapping[str, tuple[frozenset[Capability], str]] = {
    "llama.cpp": (
        frozenset(
            {
                Capability.TOP_LOGPROBS,
                Capability.PROMPT_LOGPROBS,
                Capability.FULL_VOCABULARY,
                Capability.FORCED_DECODING,
            }
        ),
        "LlamaCppBackend, model 'local', 'local:NAME' or 'local:PATH.gguf'",
    ),
    "transformers": (
        frozenset(Capability),
        "TransformersBackend: make_backend(MODEL, backend='transformers') or judgeopt glassbox "
        "--backend transformers, with MODEL 'local', 'local:NAME', 'local:PATH.gguf' or "
        "'local:HF_FOLDER'; needs pip install 'judgeopt[transformers]'; attention weights "
        "unless built with attention=False",
    ),
    "litellm": (
        frozenset(
            {Capability.TOP_LOGPROBS, Capability.PROMPT_LOGPROBS, Capability.FORCED_DECODING}
        ),
        "LiteLLMBackend; prompt logprobs and forced decoding only with prompt_logprobs=True "
        "against a vLLM server",
    ),
}


class GlassBoxError(JudgeoptError):
    """Base class of the errors raised by :mod:`judgeopt.glassbox`."""


class CapabilityError(GlassBoxError, ValueError):
    """A backend was asked for something it cannot do.

    Attributes:
        backend: The backend's name (``"llama.cpp"``, ``"transformers"``, ``"litellm"``).
        model: The backend's model.
        capability: The missing capability.
        available_in: Names of the backends that can have it.
    """

    def __init__(
        self, backend: str, model: str, capability: Capability, purpose: str | None = None
    ) -> None:
        self.backend = backend
        self.model = model
        self.capability = capability
        self.available_in = tuple(
            name for name, (caps, _) in BACKEND_CAPABILITIES.items() if capability in caps
        )
        needed = f", needed for {purpose}" if purpose else ""
        if self.available_in:
            where = "; ".join(
                f"{name} ({BACKEND_CAPABILITIES[name][1]})" for name in self.available_in
            )
            hint = f" Backends that have it: {where}."
        else:
            hint = " No backend has it."
        super().__init__(
            f"the {backend} backend (model {model!r}) cannot give "
            f"{capability.description} [{capability.value}]{needed}.{hint}"
        )


@dataclass(frozen=True, eq=False)
class Generation:
    """One generated completion with its token-level probabilities.

    Attributes:
        text: The completion text.
        tokens: The text of each generated token (their concatenation is ``text``, up to
            bytes of a character split over two tokens).
        offsets: The character offset of each token in ``text``.
        token_logprobs: ``(T,)`` log-probability of each generated token under the model's
            own distribution (temperature 1, before any top-k/top-p truncation of sampling).
        top_logprobs: Per position, the top-k alternatives as ``{token text: logprob}``;
            ``None`` when not asked for.
        logits: ``(T, V)`` raw logits at each generated position, for full-vocabulary
            backends when asked for (``full_logprobs=True``); else ``None``.
        token_ids: The generated token ids, when the backend knows them.
        prompt_ids: The prompt's token ids, when the backend knows them.
        finish_reason: ``"stop"`` or ``"length"``.
    """

    text: str
    tokens: tuple[str, ...]
    offsets: tuple[int, ...]
    token_logprobs: FloatArray
    top_logprobs: tuple[dict[str, float], ...] | None = None
    logits: FloatArray | None = None
    token_ids: tuple[int, ...] | None = None
    prompt_ids: tuple[int, ...] | None = None
    finish_reason: str = "stop"

    def token_at(self, char_offset: int) -> int:
        """Return the index of the token that covers character ``char_offset`` of ``text``.

        Raises:
            ValueError: If the offset is outside the text.
        """
        if not 0 <= char_offset < len(self.text) or not self.offsets:
            raise ValueError(
                f"character offset {char_offset} is outside the completion "
                f"({len(self.text)} characters)"
            )
        index = int(np.searchsorted(np.asarray(self.offsets), char_offset, side="right")) - 1
        return max(index, 0)


def char_offsets(pieces: list[bytes]) -> tuple[int, ...]:
    """The character offset, in the decoded text, at which each token's bytes start.

    A character split over two tokens counts once it is complete, so a token that starts
    mid-character gets the offset of that character's end.
    """
    offsets: list[int] = []
    consumed = b""
    for piece in pieces:
        offsets.append(len(consumed.decode("utf-8", errors="ignore")))
        consumed += piece
    return tuple(offsets)


class LocalModelArgs(NamedTuple):
    """The validated model and threads of an in-process backend."""

    registry_name: str | None
    path: Path | None
    label: str
    n_threads: int


def local_model_args(
    backend_class: str,
    model: str | os.PathLike[str],
    *,
    n_ctx: int,
    n_threads: int | None,
    folders: bool = False,
) -> LocalModelArgs:
    """Validate the arguments shared by the in-process backends' constructors.

    Args:
        backend_class: The class name, for the messages.
        model: A registry name, a GGUF path or (with ``folders``) a Hugging Face folder.
        n_ctx: The context size (an int >= 16).
        n_threads: Threads, or ``None`` for ``$JUDGEOPT_THREADS`` (default 2).
        folders: Whether a model folder (with ``config.json``) is accepted.

    Raises:
        ValueError: Naming the argument, the value and what is allowed.
        LocalModelError: If a GGUF path is missing or not a GGUF.
    """
    from judgeopt.lm._local import check_gguf, default_threads
    from judgeopt.lm._models import LOCAL_MODELS

    if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 16:
        raise ValueError(f"The `n_ctx` argument of {backend_class} must be an int >= 16. Got "
                         f"{n_ctx!r} instead.")
    threads = default_threads() if n_threads is None else n_threads
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"The `n_threads` argument of {backend_class} must be an int >= 1. "
                         f"Got {n_threads!r} instead.")
    if isinstance(model, str) and model in LOCAL_MODELS:
        return LocalModelArgs(model, None, model, threads)
    if folders and isinstance(model, (str, os.PathLike)) and Path(model).expanduser().is_dir():
        folder = Path(model).expanduser().resolve()
        if not (folder / "config.json").is_file():
            raise ValueError(f"The `model` folder {str(folder)!r} has no config.json: "
                             f"{backend_class} loads a Hugging Face model folder, a .gguf file "
                             "or a registry model.")
        return LocalModelArgs(None, folder, str(folder), threads)
    if isinstance(model, os.PathLike) or (
        isinstance(model, str) and (model.endswith(".gguf") or os.sep in model)
    ):
        path = check_gguf(model)
        return LocalModelArgs(None, path, str(path), threads)
    kinds = "the path of a .gguf file" + (" or a Hugging Face model folder" if folders else "")
    raise ValueError(f"The `model` argument of {backend_class} must be a local model name, one "
                     f"of {sorted(LOCAL_MODELS)}, or {kinds}. Got {model!r} instead.")


def check_decoding_args(max_tokens: int, temperature: float, top_k: int | None) -> None:
    """Validate the decoding arguments of :meth:`LogprobBackend.generate`.

    Raises:
        ValueError: Naming the argument, the value and what is allowed.
    """
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"The `max_tokens` argument must be an int >= 1. Got {max_tokens!r}.")
    if temperature < 0:
        raise ValueError(f"The `temperature` argument must be >= 0. Got {temperature!r}.")
    if top_k is not None and (isinstance(top_k, bool) or top_k < 1):
        raise ValueError(f"The `top_k` argument must be None or >= 1. Got {top_k!r}.")


def check_fits(n_tokens: int, n_ctx: int, model: str, backend_class: str) -> None:
    """Raise :class:`judgeopt.lm.LMContextOverflow` if ``n_tokens`` exceed ``n_ctx``.

    An :class:`judgeopt.lm.LMError`, so :func:`compute_features` records the item as failed
    instead of stopping the run.
    """
    if n_tokens > n_ctx:
        from judgeopt.lm import LMContextOverflow

        raise LMContextOverflow(
            f"prompt and response have {n_tokens} tokens but the context window (n_ctx) is "
            f"{n_ctx}: shorten the texts or use {backend_class}(..., n_ctx=...)",
            model=model,
            endpoint="in-process",
            prompt_tokens=n_tokens,
            n_ctx=n_ctx,
        )


def pick_token(
    logits: FloatArray, temperature: float, top_k: int | None, rng: np.random.Generator
) -> int:
    """Choose the next token from a ``(V,)`` row of logits, as the in-process backends do.

    Greedy (``temperature == 0``) takes the argmax; otherwise one draw from
    ``softmax(logits / temperature)`` restricted to the ``top_k`` largest logits.
    """
    if temperature == 0:
        return int(np.argmax(logits))
    candidates = np.arange(logits.size)
    values = logits
    if top_k is not None and top_k < logits.size:
        candidates = np.argpartition(logits, logits.size - top_k)[-top_k:]
        values = logits[candidates]
    probs = np.exp(log_softmax(values / temperature))
    return int(candidates[rng.choice(candidates.size, p=probs / probs.sum())])


@dataclass(frozen=True, eq=False)
class ScoredText:
    """A given response scored by forced decoding after the prompt.

    Attributes:
        tokens: The text of each response token.
        token_logprobs: ``(T,)`` log-probability of each response token given everything
            before it.
        logits: ``(T, V)`` raw logits of the distribution that predicted each response
            token (full-vocabulary backends), else ``None``.
        top_logprobs: ``(T, k)`` top-k log-probabilities of those distributions, sorted
            descending and padded with ``-inf`` (servers' prompt logprobs), else ``None``.
        token_ids: The response's token ids, when known.
        prompt_tokens: Number of prompt tokens before the response.
    """

    tokens: tuple[str, ...]
    token_logprobs: FloatArray
    logits: FloatArray | None = None
    top_logprobs: FloatArray | None = None
    token_ids: tuple[int, ...] | None = None
    prompt_tokens: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.tokens)


def scored_text(
    rows: npt.NDArray[np.float32],
    target: Sequence[int],
    texts: Sequence[str],
    prompt_tokens: int,
    *,
    full_vocabulary: bool,
    top_logprobs: int,
) -> ScoredText:
    """Build the :class:`ScoredText` of a forced-decoding pass of an in-process backend.

    Args:
        rows: ``(T, V)`` raw logits of the distributions that predicted the ``T`` tokens.
        target: The response's token ids.
        texts: The text of every vocabulary entry.
        prompt_tokens: Number of prompt tokens before the response.
        full_vocabulary: Keep ``rows`` as :attr:`ScoredText.logits`.
        top_logprobs: Also report this many top log-probabilities per position.
    """
    token_lps = np.empty(len(target), dtype=np.float64)
    for start in range(0, len(target), 64):
        lp = log_softmax(rows[start : start + 64])
        token_lps[start : start + 64] = lp[np.arange(lp.shape[0]), target[start : start + 64]]
    return ScoredText(
        tokens=tuple(texts[i] for i in target),
        token_logprobs=token_lps,
        logits=rows if full_vocabulary else None,
        top_logprobs=topk_logprobs(rows, top_logprobs) if top_logprobs and target else None,
        token_ids=tuple(target),
        prompt_tokens=prompt_tokens,
    )


class Decoded(NamedTuple):
    """What :func:`decode_tokens` chose, before the tokens are turned into text."""

    ids: list[int]
    token_logprobs: FloatArray
    top_logprobs: tuple[dict[str, float], ...] | None
    logits: npt.NDArray[np.float32] | None
    finish_reason: str


def decode_tokens(
    first: FloatArray,
    advance: Callable[[int], FloatArray],
    *,
    max_tokens: int,
    temperature: float,
    top_k: int | None,
    rng: np.random.Generator,
    is_eog: Callable[[int], bool],
    room: int,
    vocab_size: int,
    texts: Sequence[str] | None = None,
    top_logprobs: int = 0,
    full_logprobs: bool = False,
) -> Decoded:
    """The decoding loop of the in-process backends, over rows of raw logits.

    Args:
        first: ``(V,)`` logits of the token after the prompt.
        advance: Evaluates a chosen token and returns the logits of the token after it.
        max_tokens: Completion budget.
        temperature: 0 for greedy (see :func:`pick_token`).
        top_k: Sample from the ``top_k`` largest logits only.
        rng: The sampling generator.
        is_eog: Whether a token ends the generation (it is not included).
        room: How many tokens fit in the context after the prompt; a chosen token is
            evaluated only while there is room for it.
        vocab_size: ``V``, for an empty ``logits``.
        texts: The text of every vocabulary entry (needed when ``top_logprobs``).
        top_logprobs: Report this many alternatives per position.
        full_logprobs: Keep every position's raw logits.
    """
    from ._rating import topk_token_logprobs

    out_ids: list[int] = []
    token_lps: list[float] = []
    rows: list[npt.NDArray[np.float32]] = []
    tops: list[dict[str, float]] = []
    finish = "length"
    raw = np.asarray(first, dtype=np.float64)
    for _ in range(max_tokens):
        lp = log_softmax(raw)
        token = pick_token(raw, temperature, top_k, rng)
        if is_eog(token):
            finish = "stop"
            break
        out_ids.append(token)
        token_lps.append(float(lp[token]))
        if full_logprobs:
            rows.append(raw.astype(np.float32))
        if top_logprobs and texts is not None:
            tops.append(topk_token_logprobs(lp, texts, top_logprobs))
        if len(out_ids) == max_tokens or len(out_ids) >= room:
            break  # no room (or no need) to evaluate the token just chosen
        raw = np.asarray(advance(token), dtype=np.float64)
    logits = None
    if full_logprobs:
        logits = np.stack(rows) if rows else np.empty((0, vocab_size), dtype=np.float32)
    return Decoded(out_ids, np.asarray(token_lps, dtype=np.float64),
                   tuple(tops) if top_logprobs and texts is not None else None, logits, finish)


def generation_from_decoded(
    decoded: Decoded, pieces: Sequence[bytes], prompt: Sequence[int]
) -> Generation:
    """The :class:`Generation` of :func:`decode_tokens`' tokens, whose bytes are ``pieces``."""
    return Generation(
        text=b"".join(pieces).decode("utf-8", errors="replace"),
        tokens=tuple(p.decode("utf-8", errors="replace") for p in pieces),
        offsets=char_offsets(list(pieces)),
        token_logprobs=decoded.token_logprobs,
        top_logprobs=decoded.top_logprobs,
        logits=decoded.logits,
        token_ids=tuple(decoded.ids),
        prompt_ids=tuple(prompt),
        finish_reason=decoded.finish_reason,
    )


class LogprobBackend(ABC):
    """A language model that reports token probabilities.

    Subclasses set :attr:`name` and :attr:`capabilities` and implement :meth:`generate`;
    they override the other methods for the capabilities they declare. The base versions
    raise :class:`CapabilityError`.

    Attributes:
        name: Short backend name used in error messages (``"llama.cpp"``,
            ``"transformers"``, ``"litellm"``).
        model: The model the backend runs.
        capabilities: The :class:`Capability` flags of this instance.
    """

    name: ClassVar[str] = "backend"
    model: str
    capabilities: frozenset[Capability]

    def supports(self, capability: Capability) -> bool:
        """Whether this backend has ``capability``."""
        return capability in self.capabilities

    def require(self, capability: Capability, purpose: str | None = None) -> None:
        """Raise :class:`CapabilityError` unless this backend has ``capability``.

        Args:
            capability: The capability needed.
            purpose: What it is needed for (a feature name), for the message.
        """
        if capability not in self.capabilities:
            raise CapabilityError(self.name, self.model, capability, purpose)

    @abstractmethod
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
        """Generate one completion of ``messages`` and report its token probabilities.

        Called for greedy ratings (``temperature=0``), self-consistency samples and the
        decoding-based ensemble (``temperature>0``, ``top_k``).

        Args:
            messages: The chat messages.
            max_tokens: Completion budget in tokens.
            temperature: 0 for greedy decoding.
            top_k: Sample only from the ``top_k`` most probable tokens (``None``: all).
            seed: Sampling seed (ignored when greedy).
            top_logprobs: Report this many alternatives per position (needs
                :attr:`Capability.TOP_LOGPROBS` when > 0).
            full_logprobs: Keep the full-vocabulary logits of every position (needs
                :attr:`Capability.FULL_VOCABULARY`).

        Returns:
            The :class:`Generation`.
        """

    def score(
        self,
        messages: Messages,
        response: str,
        *,
        top_logprobs: int = 0,
        full_vocabulary: bool = False,
    ) -> ScoredText:
        """Score a given ``response`` as the assistant's answer to ``messages``.

        Args:
            messages: The chat messages before the response.
            response: The response text to score.
            top_logprobs: Also return this many top log-probabilities per position.
            full_vocabulary: Also return the raw logits of every response position.

        Returns:
            The :class:`ScoredText`.

        Raises:
            CapabilityError: Without :attr:`Capability.FORCED_DECODING` (or without
                :attr:`Capability.FULL_VOCABULARY` when ``full_vocabulary``).
        """
        self.require(Capability.FORCED_DECODING, "scoring a given response")
        raise NotImplementedError  # pragma: no cover - subclasses with the capability override

    def next_logprobs(self, token_ids: Sequence[int]) -> FloatArray:
        """Return the ``(V,)`` log-probabilities of the token after ``token_ids``.

        Raises:
            CapabilityError: Without :attr:`Capability.FULL_VOCABULARY`.
        """
        self.require(Capability.FULL_VOCABULARY, "the distribution after a given context")
        raise NotImplementedError  # pragma: no cover

    def tokenize(self, text: str) -> list[int]:
        """Return the token ids of ``text`` (no special tokens, no BOS).

        Raises:
            CapabilityError: Without :attr:`Capability.FULL_VOCABULARY`.
        """
        self.require(Capability.FULL_VOCABULARY, "tokenizing text")
        raise NotImplementedError  # pragma: no cover

    def token_texts(self) -> tuple[str, ...]:
        """Return the text of every vocabulary entry, indexed by token id.

        Raises:
            CapabilityError: Without :attr:`Capability.FULL_VOCABULARY`.
        """
        self.require(Capability.FULL_VOCABULARY, "the vocabulary")
        raise NotImplementedError  # pragma: no cover

    def attentions(self, messages: Messages, response: str) -> FloatArray:
        """Return attention weights ``(L, H, T, N)`` of the ``T`` response tokens.

        Row ``[l, h, t]`` is the attention distribution of response token ``t`` over the
        ``N`` positions before it (prompt and earlier response tokens; padded with zeros).

        Raises:
            CapabilityError: Without :attr:`Capability.ATTENTION`.
        """
        self.require(Capability.ATTENTION, "attention entropy")
        raise NotImplementedError  # pragma: no cover

    def close(self) -> None:  # noqa: B027 - optional hook, a no-op by default
        """Release resources (servers, file handles); the default does nothing."""

    def __enter__(self) -> LogprobBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
