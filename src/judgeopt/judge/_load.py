"""Loading an exported judge file as a :class:`~judgeopt.judge.JudgeProgram`.

:mod:`._export` reads and validates the file for any judge class; this module binds it to
:class:`JudgeProgram`, so ``load_program(path)`` needs no class argument (``load_judge`` loads a
judge or an ensemble, whichever the file holds).
"""

from __future__ import annotations

import os
from typing import Any

from ._export import build_judge, read_judge
from ._program import JudgeProgram

__all__ = ["judge_from_dict", "load_program"]


def load_program(path: str | os.PathLike[str], **kwargs: Any) -> JudgeProgram:
    """Validate an exported single judge and rebuild the program (no pickle); an ensemble
    file is refused (:func:`~judgeopt.judge.load_judge` loads either).

    Args:
        path: The JSON file.
        **kwargs: Passed to :class:`JudgeProgram` (e.g. ``lm=``).

    Raises:
        ValueError: On a missing file, malformed JSON, an unsupported ``format_version``, an
            ensemble file, or an invalid field (naming it).
    """
    return read_judge(JudgeProgram, path, **kwargs)


def judge_from_dict(raw: dict[str, Any], *, source: str = "<dict>", **kwargs: Any) -> JudgeProgram:
    """Validate the exported form of one judge and rebuild the program (see
    :func:`load_program`; ``source`` names the origin in error messages)."""
    return build_judge(JudgeProgram, raw, source=source, **kwargs)
