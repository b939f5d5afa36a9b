"""Shared pytest fixtures, for the product's tests (`tests/`) and the research harness's
(`benchmarks/tests/`)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

# Before any test module imports DSPy or LiteLLM: otherwise LiteLLM tries to download a price
# list at import time (and stalls on this network).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# The tests' own LM response cache, fresh for each run: never the user's ~/.cache/judgeopt/lm, so
# a warm machine runs the same suite as a cold one (calls repeated within the run still hit it).
# The joined model files ($JUDGEOPT_MODEL_DIR) are an install product and stay shared.
_TEST_CACHE = tempfile.TemporaryDirectory(prefix="judgeopt-test-cache-")
os.environ["JUDGEOPT_CACHE_DIR"] = _TEST_CACHE.name


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Directory of the shared meta-evaluation data (``../shared/data`` beside the repo).

    Skips the requesting test when the directory is not present (e.g. a fresh clone
    without the data checkout).
    """
    path = Path(__file__).resolve().parent.parent / "shared" / "data"
    if not path.is_dir():
        pytest.skip(f"shared data directory not found at {path}; it lives beside the project root")
    return path


#: The smallest task file a user writes (the README's, docs/tasks.md's "A task of your own"):
#: a support-answer task with one aspect. Tests write it where they need a task of their own.
SUPPORT_TASK = """\
name = "support"
score_range = [1, 5]

[[inputs]]
name = "question"

[[inputs]]
name = "answer"

[aspects.helpfulness]
criteria = "Helpfulness: does the answer solve the customer's problem?"
"""


@pytest.fixture(scope="session")
def support_task() -> str:
    """The text of :data:`SUPPORT_TASK` (a minimal task TOML, one aspect: ``helpfulness``)."""
    return SUPPORT_TASK


def _softmax_reference(logits: np.ndarray) -> tuple[float, float, np.ndarray]:
    """Softmax-Ent, Softmax-Var and the log-softmax of raw logits, in plain numpy (float64)."""
    x = logits.astype(np.float64)
    x = x - x.max(axis=1, keepdims=True)
    logp = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    p = np.exp(logp)
    ent = float(np.mean(-(p * logp).sum(axis=1)))
    var = float(np.mean(((logp - logp.mean(axis=1, keepdims=True)) ** 2).mean(axis=1)))
    return ent, var, logp


@pytest.fixture(scope="session")
def softmax_reference() -> Callable[[np.ndarray], tuple[float, float, np.ndarray]]:
    """The glass-box softmax features computed directly in numpy, independent of judgeopt:
    ``softmax_reference(logits) -> (Softmax-Ent, Softmax-Var, log-probabilities)``."""
    return _softmax_reference


@pytest.fixture(autouse=True)
def _dspy_global_lm_restored() -> object:
    """A test that calls ``dspy.configure(lm=...)`` (the README's snippet does) must not leave
    that LM behind for the tests after it (a judge without an LM must still raise NoLMError)."""
    import sys

    dspy = sys.modules.get("dspy")
    before = dspy.settings.lm if dspy is not None else None
    yield
    dspy = sys.modules.get("dspy")
    if dspy is not None and dspy.settings.lm is not before:
        dspy.configure(lm=before)


@pytest.fixture(autouse=True)
def _logging_restored() -> object:
    """A test that runs a benchmark script's ``main`` (``logging.basicConfig(force=True)``)
    must not leave its root handler behind: it writes to this test's captured stderr, which
    is closed after the test, and every later log record would print a "Logging error"
    into the stderr a later test reads. Logger levels set by the test are put back too."""
    import logging

    root = logging.getLogger()
    handlers, level = set(root.handlers), root.level
    levels = {
        name: lg.level
        for name, lg in logging.root.manager.loggerDict.items()
        if isinstance(lg, logging.Logger)
    }
    yield
    for handler in list(root.handlers):  # pytest's own handlers change with each phase
        if handler not in handlers and not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)
    root.setLevel(level)
    for name, lg in list(logging.root.manager.loggerDict.items()):
        if isinstance(lg, logging.Logger) and name in levels and lg.level != levels[name]:
            lg.setLevel(levels[name])


@pytest.fixture(autouse=True, scope="module")
def _batch_engines_closed() -> object:
    """Close the embedded models' batch engines after each test module.

    An idle engine keeps a llama.cpp context of its own, and the one-at-a-time path of the
    same model runs about twice as slowly beside it (measured with SmolLM2 on two threads):
    a module that leaves one behind would slow every real-model test after it. The engines
    are made again on first use.
    """
    yield
    import sys

    loader = sys.modules.get("judgeopt.lm._llama_load")
    if loader is None:
        return
    with loader._handles_guard:
        handles = list(loader._handles.values())
    for handle in handles:
        engines = getattr(handle, "engines", None)
        if not engines:
            continue
        for engine in list(engines.values()):
            engine.close()
        engines.clear()
