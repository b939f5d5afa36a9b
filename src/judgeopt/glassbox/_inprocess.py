"""What the in-process backends (llama.cpp, transformers) share: argument checks, the decoding
loop over raw logits, and building a :class:`Generation` / :class:`ScoredText` from it."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from judgeopt.lm import LOCAL_MODELS, check_gguf, default_threads
from judgeopt.scoring import (
    FloatArray,
    Generation,
    ScoredText,
    char_offsets,
    log_softmax,
    topk_logprobs,
    topk_token_logprobs,
)

from .._validation import check_int, check_number

__all__ = [
    "Decoded",
    "LocalModelArgs",
    "check_decoding_args",
    "check_fits",
    "decode_tokens",
    "generation_from_decoded",
    "local_model_args",
    "pick_token",
    "scored_text",
]


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
    check_int(n_ctx, "n_ctx", min_value=16, owner=backend_class)
    threads = check_int(
        default_threads() if n_threads is None else n_threads,
        "n_threads",
        min_value=1,
        owner=backend_class,
    )
    if isinstance(model, str) and model in LOCAL_MODELS:
        return LocalModelArgs(model, None, model, threads)
    if folders and isinstance(model, (str, os.PathLike)) and Path(model).expanduser().is_dir():
        folder = Path(model).expanduser().resolve()
        if not (folder / "config.json").is_file():
            raise ValueError(
                f"The `model` folder {str(folder)!r} has no config.json: "
                f"{backend_class} loads a Hugging Face model folder, a .gguf file "
                "or a registry model."
            )
        return LocalModelArgs(None, folder, str(folder), threads)
    if isinstance(model, os.PathLike) or (
        isinstance(model, str) and (model.endswith(".gguf") or os.sep in model)
    ):
        path = check_gguf(model)
        return LocalModelArgs(None, path, str(path), threads)
    kinds = "the path of a .gguf file" + (" or a Hugging Face model folder" if folders else "")
    raise ValueError(
        f"The `model` argument of {backend_class} must be a local model name, one "
        f"of {sorted(LOCAL_MODELS)}, or {kinds}. Got {model!r} instead."
    )


def check_decoding_args(max_tokens: int, temperature: float, top_k: int | None) -> None:
    """Validate the decoding arguments of :meth:`LogprobBackend.generate`.

    Raises:
        ValueError: Naming the argument, the value and what is allowed.
    """
    check_int(max_tokens, "max_tokens", min_value=1)
    check_number(temperature, "temperature", min_value=0)
    check_int(top_k, "top_k", min_value=1, allow_none=True)


def check_fits(n_tokens: int, n_ctx: int, model: str, backend_class: str) -> None:
    """Raise :class:`judgeopt.lm.LMContextOverflow` if ``n_tokens`` exceed ``n_ctx``.

    An :class:`judgeopt.lm.LMError`, so :func:`compute_features` records the item as failed
    instead of stopping the run.
    """
    if n_tokens > n_ctx:
        from judgeopt.lm import LMContextOverflow  # lm's errors derive from DSPy's: load it late

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
    return Decoded(
        out_ids,
        np.asarray(token_lps, dtype=np.float64),
        tuple(tops) if top_logprobs and texts is not None else None,
        logits,
        finish,
    )


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
