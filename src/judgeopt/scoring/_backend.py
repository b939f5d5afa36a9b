"""The logprob-backend protocol: what a backend can do, and the error for what it cannot.

A backend turns chat messages into token-level probabilities (:class:`Generation`,
:class:`ScoredText`). Backends differ in what they can return, so each declares
:class:`Capability` flags and every method that needs a capability checks it first: asking for
something a backend cannot do raises :class:`CapabilityError` naming the backend, the capability
and the backends that have it. Nothing falls back silently (a top-k approximation of a
full-vocabulary feature is only used when asked for by name). The concrete backends live in
:mod:`judgeopt.glassbox`.

Exception tree::

    GlassBoxError (JudgeoptError)
    └── CapabilityError (GlassBoxError, ValueError)   a backend lacks a needed capability
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import ClassVar

from .._errors import JudgeoptError
from ._generation import FloatArray, Generation, Messages, ScoredText

__all__ = [
    "BACKEND_CAPABILITIES",
    "Capability",
    "CapabilityError",
    "GlassBoxError",
    "LogprobBackend",
]


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
