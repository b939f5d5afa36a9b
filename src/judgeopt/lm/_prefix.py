"""Prompt tokens a model computes when it keeps the prefixes of earlier prompts.

A model served with a prefix cache reads only the part of a prompt that no prompt before it
shares: the judge's instructions are read once per strategy, an article judged for several
of its summaries once per article. What a call costs in time is then not its prompt tokens
but the ones it computes, and the order of a prompt's parts decides how many those are (the
item first: little is shared). :func:`computed_tokens` counts them for prompts judged in a
given order, under the two caches of the embedded model (:class:`judgeopt.lm.LlamaCppLM`):

* the batch engine (``parallel`` above 1) shares whole blocks of ``block`` tokens aligned to a
  prompt's start with any earlier prompt a slot holds (its slots keep every prefix a later
  prompt of the same strategy needs: ``benchmarks/results/prefix_cache.json``);
* one call at a time, llama.cpp reuses the longest prefix shared with the previous prompt.

The last token of a prompt is computed (its logits start the answer), except on the batch
engine when a slot holds the same prompt whole (``whole=True``): it keeps that prompt's last
logits, so a prompt sent again (self-consistency's samples of one item) computes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["computed_tokens"]


def _shared(prompt: Sequence[int], other: Sequence[int], block: int) -> int:
    """Tokens of ``prompt`` reusable from ``other``: their common prefix, in whole blocks of
    ``other`` (a cache holds whole blocks only), the last token of ``prompt`` excluded."""
    limit = min(len(prompt) - 1, len(other))
    n = 0
    while n < limit and prompt[n] == other[n]:
        n += 1
    if block > 1:
        n = min(n, len(other) // block * block) // block * block
    return n


def computed_tokens(
    prompts: Sequence[Sequence[int]],
    *,
    block: int = 1,
    window: int | None = None,
    whole: bool = False,
) -> list[int]:
    """Per prompt (token ids, in the order they are judged, on an empty cache): the tokens a
    prefix cache leaves to compute.

    Args:
        prompts: The prompts' token ids, in judging order.
        block: The cache's unit: a prefix is reused in whole blocks of this many tokens
            aligned to the prompt's start (1: any prefix).
        window: How many of the prompts just before a prompt the cache holds (``None``: all
            of them; 1: the previous one only).
        whole: A prompt equal to one the cache holds computes nothing (the cache keeps its
            last logits too: the batch engine).

    Raises:
        ValueError: On ``block`` below 1 or ``window`` below 1.
    """
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"computed_tokens(): `block` must be an integer >= 1; got {block!r}.")
    bad_window = isinstance(window, bool) or not isinstance(window, int) or window < 1
    if window is not None and bad_window:
        raise ValueError(
            f"computed_tokens(): `window` must be None or an integer >= 1; got {window!r}."
        )
    out = []
    for i, prompt in enumerate(prompts):
        earlier = prompts[:i] if window is None else prompts[max(0, i - window) : i]
        if whole and any(list(other) == list(prompt) for other in earlier):
            out.append(0)
            continue
        reused = max((_shared(prompt, other, block) for other in earlier), default=0)
        out.append(len(prompt) - reused)
    return out
