"""Greedy chat completions with token logprobs from a llama.cpp model loaded *without*
``logits_all``.

llama.cpp computes the output projection (hidden state x vocabulary) only for the positions a
batch asks for. With ``logits_all=True`` that is every prompt position: for a 700-token judge
prompt and Qwen's 151,936-token vocabulary about 160 GFLOP spent on rows nobody reads, a
``n_ctx x vocabulary`` float32 buffer (2.5 GB at ``n_ctx=4096``), and llama-cpp-python then
normalises every row of the prompt and sorts the whole vocabulary in Python for every generated
token. The expected rating needs the distribution only at the generated positions.

:func:`greedy_with_logprobs` therefore evaluates the prompt with the logits of its *last*
position only (reusing the longest prefix shared with the previous call, as llama-cpp-python's
own ``generate`` does), then runs a greedy decoding loop that evaluates one token at a time and
reads that token's full-vocabulary logits. The response is the OpenAI chat-completion shape that
``Llama.create_chat_completion(logprobs=True, top_logprobs=K)`` returns on a ``logits_all``
model, with the same values: the same prompt tokens (the model's own chat handler builds them),
argmax decoding of the raw logits (what llama.cpp's greedy sampler does with the default,
neutral penalties), log-probabilities by llama-cpp-python's own float32 ``logits_to_logprobs``,
and the top-``K`` entries built the way llama-cpp-python builds them (descending, keyed by the
token's text, the chosen token added). ``tests/test_local_logprobs.py`` checks the equality
against the ``logits_all`` path on real models.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "LOOP_MAX_PERIOD",
    "LOOP_TIMES",
    "LOOP_TOKENS",
    "DecodingSequence",
    "Sampling",
    "chat_prompt",
    "completion_budget",
    "ends_in_loop",
    "greedy_with_logprobs",
    "prompt_and_stops",
    "sample_token",
]


class _Captured(Exception):
    """Raised by :class:`_PromptProbe` to hand back the prompt a chat handler built."""

    def __init__(self, prompt: list[int], stop: list[str]) -> None:
        super().__init__("prompt captured")
        self.prompt = prompt
        self.stop = stop


class _PromptProbe:
    """Stands in for the ``Llama`` a chat handler receives: every attribute is the real
    model's, but ``create_completion`` returns the prompt tokens and stop strings instead of
    generating. So the prompt is built by the model's own chat handler (GGUF template, a
    registered format or a user's ``chat_handler``), exactly as ``create_chat_completion`` does.
    """

    def __init__(self, llama: Any) -> None:
        self._llama = llama

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llama, name)

    def create_completion(self, *, prompt: Any, stop: Any = None, **_: Any) -> Any:
        if isinstance(prompt, str):
            prompt = self._llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        stops = [] if stop is None else [stop] if isinstance(stop, str) else list(stop)
        raise _Captured([int(t) for t in prompt], [s for s in stops if s])


def chat_prompt(llama: Any, messages: Sequence[Mapping[str, Any]]) -> tuple[list[int], list[str]]:
    """The prompt token ids and stop strings ``create_chat_completion`` would use.

    Args:
        llama: A loaded ``llama_cpp.Llama``.
        messages: OpenAI-style chat messages.

    Raises:
        ValueError: If the model's chat handler does not build a text prompt (a handler that
            generates by other means, such as a multimodal one).
    """
    from llama_cpp import llama_chat_format

    handler = (
        llama.chat_handler
        or llama._chat_handlers.get(llama.chat_format)
        or llama_chat_format.get_chat_completion_handler(llama.chat_format)
    )
    try:
        handler(
            llama=_PromptProbe(llama),
            messages=[dict(m) for m in messages],
            temperature=0.0,
            max_tokens=1,
        )
    except _Captured as captured:
        return captured.prompt, captured.stop
    raise ValueError(
        f"the chat handler of {llama.chat_format!r} does not build a token prompt; logprobs "
        "without logits_all need one (load the model with logits_all=True instead)"
    )


def _prefill(llama: Any, prompt: Sequence[int]) -> None:
    """Evaluate ``prompt`` so that llama.cpp holds the logits of its last position.

    The longest prefix shared with the tokens evaluated last is kept in the KV cache; when
    the whole prompt is already there, its last token is evaluated again (its logits were
    not kept). These are the rules of llama-cpp-python's ``Llama.generate``: llama.cpp's
    logits depend slightly on how a prompt was split into evaluated batches (up to a few
    tenths in log-probability on the quantised models here), so the decoding loop splits
    exactly as the ``create_chat_completion`` path would after the same calls.
    """
    done = int(llama.n_tokens)
    known = np.asarray(llama.input_ids[:done], dtype=np.int64)
    target = np.asarray(prompt, dtype=np.int64)
    upto = min(done, target.size)
    differ = np.flatnonzero(known[:upto] != target[:upto])
    common = int(differ[0]) if differ.size else upto
    if common == target.size == done and not getattr(llama, "_requires_eval", True):
        # Exactly this prompt was evaluated last and its logits are live (the rule of
        # llama-cpp-python's own generate, so both paths split the work the same way).
        return
    common = min(common, target.size - 1)
    # NOTE: Llama.eval drops the KV cells from n_tokens on, so moving n_tokens back is
    # enough to keep only the shared prefix.
    llama.n_tokens = common
    llama.eval(list(prompt[common:]))


def _last_logits(llama: Any) -> np.ndarray:
    """A float32 copy of the logits of the last evaluated position."""
    pointer = llama._ctx.get_logits_ith(-1)
    row = np.ctypeslib.as_array(pointer, shape=(llama.n_vocab(),))
    return np.array(row, dtype=np.single)


def _top_entries(
    llama: Any, logprobs: np.ndarray, k: int, chosen: int, chosen_text: str, texts: dict[int, str]
) -> list[dict[str, Any]]:
    """The ``top_logprobs`` list of one position, built as llama-cpp-python builds it."""
    n = logprobs.size
    k = min(k, n)
    top = np.argpartition(logprobs, n - k)[n - k :]
    # Descending by logprob, ties by the larger id first (llama-cpp-python sorts
    # (logprob, id) pairs in reverse).
    top = top[np.lexsort((-top, -logprobs[top]))]
    entries: dict[str, float] = {}
    for i in top:
        text = texts.get(int(i))
        if text is None:
            text = texts[int(i)] = llama.detokenize([int(i)]).decode("utf-8", errors="ignore")
        entries[text] = float(logprobs[i])
    entries[chosen_text] = float(logprobs[chosen])
    return [{"token": t, "logprob": lp, "bytes": None} for t, lp in entries.items()]


@dataclass(frozen=True)
class Sampling:
    """Random sampling of the next token, with llama.cpp's default sampler chain for a
    chat completion at ``temperature > 0``: top-k, then top-p, then min-p (each on the raw
    logits, as llama.cpp applies them before the temperature), then the temperature, then a
    draw from the remaining distribution.

    Attributes:
        temperature: > 0.
        top_k: Keep the ``top_k`` most likely tokens (<= 0: all).
        top_p: Then keep the most likely tokens whose probabilities sum to ``top_p`` (the
            token that reaches it included; >= 1: all).
        min_p: Then keep the tokens at least ``min_p`` times as likely as the most likely one
            (<= 0: all).
        seed: Seed of the draws (``None``: fresh entropy, not reproducible).
    """

    temperature: float
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.temperature, (int, float)) and self.temperature > 0):
            raise ValueError(f"Sampling needs a temperature > 0. Got {self.temperature!r}.")

    def generator(self) -> np.random.Generator:
        """The draws' random generator (a fresh one per completion: the same seed gives
        the same completion, whatever else is decoded at the same time)."""
        return np.random.default_rng(self.seed)


def sample_token(logits: np.ndarray, sampling: Sampling, rng: np.random.Generator) -> int:
    """Draw the next token from ``logits`` (one row, the whole vocabulary) by ``sampling``."""
    x = np.asarray(logits, dtype=np.float64)
    k = int(sampling.top_k)
    candidates = np.argpartition(-x, k - 1)[:k] if 0 < k < x.size else np.arange(x.size)
    order = candidates[np.argsort(-x[candidates], kind="stable")]
    values = x[order]
    if sampling.top_p < 1.0:
        p = np.exp(values - values[0])
        cumulative = np.cumsum(p / p.sum())
        keep = int(np.searchsorted(cumulative, sampling.top_p)) + 1
        order, values = order[:keep], values[:keep]
    if sampling.min_p > 0.0:
        kept = values >= values[0] + math.log(sampling.min_p)
        order, values = order[kept], values[kept]
    z = values / float(sampling.temperature)
    p = np.exp(z - z[0])
    return int(order[int(rng.choice(p.size, p=p / p.sum()))])


#: A greedy completion that ends in one block of at most ``LOOP_MAX_PERIOD`` tokens written
#: ``LOOP_TIMES`` times in a row, the repeats together at least ``LOOP_TOKENS`` tokens long,
#: is looping, and is stopped there (``finish_reason`` ``"length"``: it would have run to
#: its budget). Measured on 20,471 stored explanations of the embedded 1.5B (the judgement
#: bank's and five more pairs' e2e runs; ``benchmarks/loop_stop.py``, docs/lm.md "Batched
#: decoding"): none of the 957 answers it stops had a rating; it saves 5 % of their written
#: tokens, 10-15 % where the model loops most.
LOOP_TIMES, LOOP_TOKENS, LOOP_MAX_PERIOD = 3, 24, 64


def ends_in_loop(
    tokens: Sequence[int],
    times: int = LOOP_TIMES,
    least: int = LOOP_TOKENS,
    max_period: int = LOOP_MAX_PERIOD,
) -> bool:
    """Whether ``tokens`` end in one block of at most ``max_period`` tokens written ``times``
    times in a row, the ``times`` blocks at least ``least`` tokens long.

    A phrase that recurs with other words between (the items of a list) is no loop; only a
    verbatim repeat that has already been written ``times`` times is.
    """
    n = len(tokens)
    if n < least:
        return False
    last = tokens[-1]
    for period in range(max(1, -(-least // times)), max_period + 1):
        if times * period > n:
            break
        if tokens[n - 1 - period] != last:
            continue
        block = tokens[n - period :]
        if all(tokens[n - (j + 1) * period : n - j * period] == block for j in range(1, times)):
            return True
    return False


class DecodingSequence:
    """The state of one decoding (greedy, or sampled): the tokens so far, their logprob
    entries, the text, the stop rules and the completion budget.

    :func:`greedy_with_logprobs` drives one of these with a single ``Llama``; the batched
    engine (:mod:`judgeopt.lm._llama_batch`) drives several with one context. Each call of
    :meth:`step` takes the logits of the position after the last token and returns the next
    token to evaluate, or ``None`` when the completion is finished.

    Args:
        llama: The loaded ``llama_cpp.Llama`` (its vocabulary and detokenizer).
        prompt: The prompt token ids.
        stops: Stop strings (the returned text ends before the first one found).
        budget: Maximum completion tokens (>= 1).
        top_logprobs: Alternatives reported per position, or ``None`` for no logprobs (the
            next token is then the argmax of the raw logits, as llama.cpp's greedy sampler
            takes it). Greedy decoding only.
        sampling: Draw each token by :class:`Sampling` instead of taking the argmax.
        stop_loops: Greedy decoding only: end the completion once it loops
            (:func:`ends_in_loop`; ``finish`` ``"length"``, :attr:`looped` set). A loop at
            temperature 0 runs to the budget; sampled decodings can leave one, and are not
            stopped.

    Raises:
        ValueError: If both ``top_logprobs`` and ``sampling`` are given.
    """

    def __init__(
        self,
        llama: Any,
        prompt: Sequence[int],
        stops: Sequence[str],
        budget: int,
        top_logprobs: int | None,
        sampling: Sampling | None = None,
        stop_loops: bool = True,
    ) -> None:
        if top_logprobs and sampling is not None:
            raise ValueError("logprobs are given for greedy decoding only, not with sampling")
        self.llama = llama
        self.prompt = [int(t) for t in prompt]
        self.stops = list(stops)
        self.budget = int(budget)
        self.top_logprobs = top_logprobs
        self.sampling = sampling
        self._rng = sampling.generator() if sampling is not None else None
        self.tokens: list[int] = []
        self.content: list[dict[str, Any]] | None = [] if top_logprobs else None
        self.text = ""
        self.finish = "length"
        self.done = False
        self.stop_loops = stop_loops and sampling is None
        #: Whether the completion was stopped for looping.
        self.looped = False
        self._texts: dict[int, str] = {}

    def step(self, row: np.ndarray) -> int | None:
        """Take the next token from ``row`` (float32 logits); return it when it must be
        evaluated to go on, ``None`` when the completion is finished."""
        from llama_cpp import llama_cpp

        llama = self.llama
        if self.content is not None:
            logprobs = llama.logits_to_logprobs(row)
            token = int(np.argmax(logprobs))
        elif self.sampling is not None:
            assert self._rng is not None
            logprobs = None
            token = sample_token(row, self.sampling, self._rng)
        else:
            logprobs = None
            token = int(np.argmax(row))
        if bool(llama_cpp.llama_vocab_is_eog(llama._model.vocab, token)):
            self.finish = "stop"
            self.done = True
            return None
        token_text = llama.detokenize([token], prev_tokens=self.prompt + self.tokens).decode(
            "utf-8", errors="ignore"
        )
        self.tokens.append(token)
        if self.content is not None and logprobs is not None:
            self.content.append(
                {
                    "token": token_text,
                    "logprob": float(logprobs[token]),
                    "bytes": None,
                    "top_logprobs": _top_entries(
                        llama, logprobs, int(self.top_logprobs or 1), token, token_text, self._texts
                    ),
                }
            )
        self.text = llama.detokenize(self.tokens, prev_tokens=self.prompt).decode(
            "utf-8", errors="ignore"
        )
        hit = [s for s in self.stops if s in self.text]
        if hit:
            # NOTE: the text ends before the stop string; the logprobs keep every generated
            # token, the one that completed the stop string included, as llama-cpp-python's
            # logits_all path and vLLM report them. A rating read at the end of the text
            # (``10`` after ``1``, or ``1`` alone) needs the distribution of that last token.
            self.text = self.text[: self.text.index(hit[0])]
            self.finish = "stop"
            self.done = True
            return None
        if len(self.tokens) >= self.budget:
            self.done = True
            return None
        if self.stop_loops and ends_in_loop(self.tokens):
            self.looped = True
            self.done = True
            return None
        return token

    def response(self, model: str) -> dict[str, Any]:
        """The OpenAI-shaped chat completion of the finished decoding."""
        logprobs = None if self.content is None else {"content": self.content, "refusal": None}
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": self.text},
                    "logprobs": logprobs,
                    "finish_reason": self.finish,
                }
            ],
            "usage": {
                "prompt_tokens": len(self.prompt),
                "completion_tokens": len(self.tokens),
                "total_tokens": len(self.prompt) + len(self.tokens),
            },
        }


def completion_budget(prompt_tokens: int, n_ctx: int, max_tokens: int | None) -> int:
    """The completion budget of a prompt in a context window of ``n_ctx`` tokens.

    Raises:
        ValueError: If the prompt does not fit (llama-cpp-python's own message, which
            :func:`judgeopt.lm._errors.overflow_from_llama` recognises).
    """
    if prompt_tokens >= n_ctx:
        raise ValueError(f"Requested tokens ({prompt_tokens}) exceed context window of {n_ctx}")
    budget = n_ctx - prompt_tokens if max_tokens is None or max_tokens <= 0 else int(max_tokens)
    return min(budget, n_ctx - prompt_tokens)


def prompt_and_stops(
    llama: Any, messages: Sequence[Mapping[str, Any]], stop: Sequence[str] | str | None
) -> tuple[list[int], list[str]]:
    """The prompt tokens and every stop string (the caller's first, then the format's)."""
    prompt, format_stops = chat_prompt(llama, messages)
    stops = list(format_stops)
    if stop:
        stops = ([stop] if isinstance(stop, str) else list(stop)) + stops
    return prompt, stops


def greedy_with_logprobs(
    llama: Any,
    messages: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int | None,
    top_logprobs: int,
    stop: Sequence[str] | str | None = None,
    model: str = "local",
) -> dict[str, Any]:
    """Decode greedily and return a chat completion with ``top_logprobs`` at every token.

    The caller holds the model's lock. Only the last position's logits are computed for the
    prompt, and one row per generated token.

    Args:
        llama: A loaded ``llama_cpp.Llama`` (``logits_all`` may be False).
        messages: The chat messages.
        max_tokens: Completion budget (``None``: up to the context window).
        top_logprobs: Alternatives reported per position (>= 1).
        stop: Extra stop strings (the chat format's own are added).
        model: The ``model`` field of the response.

    Returns:
        An OpenAI-shaped chat completion (``choices[0].message.content``,
        ``choices[0].logprobs.content[i].top_logprobs``, ``usage``).

    Raises:
        ValueError: If the prompt and budget do not fit the context window (the message
            names both), or the chat handler builds no token prompt.
    """
    prompt, stops = prompt_and_stops(llama, messages, stop)
    budget = completion_budget(len(prompt), int(llama.n_ctx()), max_tokens)
    seq = DecodingSequence(llama, prompt, stops, budget, max(1, int(top_logprobs)))
    _prefill(llama, prompt)
    while True:
        token = seq.step(_last_logits(llama))
        if token is None:
            break
        llama.eval([token])
    return seq.response(model)
