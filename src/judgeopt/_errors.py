"""The root of judgeopt's exception tree.

Every exception the library raises on purpose derives from :class:`JudgeoptError`, and keeps the
built-in base it had before (``ValueError``, ``RuntimeError``, DSPy's LM errors, ...), as Optuna's
``OptunaError`` does: ``except judgeopt.JudgeoptError`` catches everything judgeopt reports,
``except ValueError`` keeps working where it worked.
"""

from __future__ import annotations

__all__ = ["JudgeoptError"]


class JudgeoptError(Exception):
    """Base class of every exception judgeopt raises on purpose."""
