"""Small file helpers shared by the checkpoint, the artifact store and the judge export."""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename.

    A reader (or a resumed run after a crash) sees the old file or the new one, never a
    half-written one. Parent directories are created.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, target)
    return target
