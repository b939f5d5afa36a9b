"""What the glass-box transformers backend reads of a GGUF vocabulary, as llama.cpp does.

:class:`judgeopt.glassbox.TransformersBackend` must give the same tokens and texts as
:class:`judgeopt.glassbox.LlamaCppBackend` for the same GGUF. This module holds what that
takes besides transformers itself: :func:`gguf_metadata` reads a few metadata values of a GGUF
file (token types, end-of-generation ids) without parsing the rest; the end-of-generation and
control texts llama.cpp's vocabulary loader detects; and the byte tables of byte-level BPE and
``<0xNN>`` byte tokens that turn vocabulary entries back into bytes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "BYTE_TOKEN",
    "EOG_CONTROL_TEXTS",
    "EOG_FIM_TEXTS",
    "GGUF_KEYS",
    "byte_decoder",
    "gguf_metadata",
]

# Texts of vocabulary entries that end a generation besides the configured EOS, as the
# vocabulary loader of llama.cpp (llama-cpp-python 0.3.36) detects them: end-of-turn markers
# (which it also makes control tokens), and the FIM pad / repository / file-separator tokens.
EOG_CONTROL_TEXTS = frozenset(
    {
        "<|eot_id|>",
        "<|im_end|>",
        "<|end|>",
        "<|return|>",
        "<|call|>",
        "<|flush|>",
        "<|calls|>",
        "<end_of_turn>",
        "<|endoftext|>",
        "</s>",
        "<|eom_id|>",
        "<EOT>",
        "_<EOT>",
        "[EOT]",
        "[EOS]",
        "<|end_of_text|>",
        "<end_of_utterance>",
        "<eos>",
        "<turn|>",
        "<|tool_response>",
        "[e~[",
    }
)
EOG_FIM_TEXTS = frozenset(
    {
        "<|fim_pad|>",
        "<fim-pad>",
        "<PAD>",
        "<|fim_repo|>",
        "<|repo_name|>",
        "<fim-repo>",
        "<REPO>",
        "<reponame>",
        "<|file_sep|>",
    }
)

BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")

# GGUF metadata value types: struct format of the scalars (8 = string, 9 = array).
_GGUF_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
# The GGUF keys read for the vocabulary: token types (2 unknown, 3 control, 5 unused) and the
# end-of-generation ids llama.cpp adds to its end-of-generation set.
GGUF_KEYS = (
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
    "tokenizer.ggml.fim_pad_token_id",
    "tokenizer.ggml.fim_rep_token_id",
    "tokenizer.ggml.fim_sep_token_id",
)


def gguf_metadata(path: str | os.PathLike[str], keys: Sequence[str]) -> dict[str, Any]:
    """Read some metadata values of a GGUF file without parsing the others.

    The ``gguf`` package's reader builds every field (about 10 s for a 150k-token vocabulary
    with its merges); this walks the key/value section and decodes only ``keys`` (scalars as
    Python numbers, numeric arrays as numpy arrays, strings as ``str``).
    """
    import mmap
    import struct

    wanted, found = set(keys), {}
    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        if buf[:4] != b"GGUF":
            raise ValueError(f"{path} is not a GGUF file")
        version, _, n_kv = struct.unpack_from("<IQQ", buf, 4)
        if version < 2:
            raise ValueError(f"{path}: GGUF version {version} is not supported")
        pos = 24

        def string(at: int) -> tuple[bytes, int]:
            (size,) = struct.unpack_from("<Q", buf, at)
            return buf[at + 8 : at + 8 + size], at + 8 + size

        def value(kind: int, at: int, keep: bool) -> tuple[Any, int]:
            if kind in _GGUF_SCALARS:
                fmt = "<" + _GGUF_SCALARS[kind]
                return struct.unpack_from(fmt, buf, at)[0], at + struct.calcsize(fmt)
            if kind == 8:
                raw, at = string(at)
                return raw.decode("utf-8", errors="replace"), at
            if kind != 9:
                raise ValueError(f"{path}: unknown GGUF value type {kind}")
            inner, count = struct.unpack_from("<IQ", buf, at)
            at += 12
            if inner in _GGUF_SCALARS:
                width = struct.calcsize("<" + _GGUF_SCALARS[inner])
                data = (
                    np.frombuffer(
                        buf, dtype="<" + _GGUF_SCALARS[inner], count=count, offset=at
                    ).copy()
                    if keep
                    else None
                )
                return data, at + width * count
            items = []
            for _ in range(count):
                item, at = value(inner, at, keep)
                if keep:
                    items.append(item)
            return items if keep else None, at

        for _ in range(n_kv):
            key_raw, pos = string(pos)
            key = key_raw.decode("utf-8", errors="replace")
            (kind,) = struct.unpack_from("<I", buf, pos)
            item, pos = value(kind, pos + 4, key in wanted)
            if key in wanted:
                found[key] = item
                if len(found) == len(wanted):
                    break
    return found


def byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's byte-to-character table used by byte-level BPE vocabularies."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}
