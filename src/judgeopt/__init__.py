"""judgeopt: find the best prompting strategy for an LLM-as-a-judge evaluator.

The search core (:mod:`judgeopt.search`) and the metrics (:mod:`judgeopt.metrics`) are pure
numpy/scipy/networkx and import neither DSPy nor LiteLLM. The names below that need DSPy
(the judge, the teleprompters, the LM layer) are imported lazily on first use::

    import judgeopt
    lm = judgeopt.make_lm("local")
    judge = judgeopt.JudgeProgram("topical_chat", "naturalness", lm=lm)
    best = judgeopt.Auto(budget=20).compile(judge, trainset=records)
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from ._errors import JudgeoptError
from ._renamed import renamed_names

# LiteLLM reads this when it is first imported: without it, it fetches a price list from the
# network at import time (and stalls offline). Every judgeopt module is imported after this file,
# so this is the one place that sets the default.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"

_LAZY = {
    "load_judge": "judgeopt.judge",
    "load_judges": "judgeopt.judge",
    "JudgeProgram": "judgeopt.judge",
    "JudgeEnsemble": "judgeopt.judge",
    "JudgeTask": "judgeopt.judge",
    "load_task": "judgeopt.judge",
    "make_lm": "judgeopt.lm",
    "evaluate": "judgeopt.evaluate",
    "EvalResult": "judgeopt.evaluate",
    "load_records": "judgeopt.data",
    "Auto": "judgeopt.teleprompt",
    "HPSS": "judgeopt.teleprompt",
    "Greedy": "judgeopt.teleprompt",
    "StepwiseGreedy": "judgeopt.teleprompt",
    "RandomJudgeSearch": "judgeopt.teleprompt",
    "GridJudgeSearch": "judgeopt.teleprompt",
    "JudgeSearch": "judgeopt.teleprompt",
    "load_optimizer": "judgeopt.teleprompt",
    "RacingConfig": "judgeopt.racing",
    "SelectionConfig": "judgeopt.selection",
    "CheckpointMismatchError": "judgeopt._checkpoint",
}

__all__ = ["JudgeoptError", "__version__", *_LAZY]


#: Names renamed (old -> new); the old ones still work, with a DeprecationWarning.
_RENAMED = {"RandomSearch": "RandomJudgeSearch", "GridSearch": "GridJudgeSearch"}


def __getattr__(name: str) -> Any:
    if name in _RENAMED:
        return _renamed(name)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'judgeopt' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


_renamed = renamed_names(__name__, _RENAMED, __getattr__, stacklevel=3)
