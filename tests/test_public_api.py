"""The public surface is deliberate: `__all__` lists exactly the public names."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["judgeopt.search", "judgeopt.metrics", "judgeopt.bench",
                                    "judgeopt.testing"])
def test_all_matches_public_names(module: str) -> None:
    mod = importlib.import_module(module)
    public = {n for n in vars(mod) if not n.startswith("_")} - {"annotations"}
    modules = {n for n in public if type(getattr(mod, n)).__name__ == "module"}
    assert set(mod.__all__) == public - modules
    for name in mod.__all__:
        assert getattr(mod, name) is not None


def test_search_core_imports_no_llm_stack() -> None:
    """The search core and metrics stay pure: importing them loads neither DSPy nor LiteLLM."""
    code = ("import sys, judgeopt.search, judgeopt.metrics, judgeopt.bench; "
            "print(sorted(m for m in ('dspy', 'litellm', 'openai') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
