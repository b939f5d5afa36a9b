"""judgeopt: find the best prompting strategy for an LLM-as-a-judge evaluator.

The search core (:mod:`judgeopt.search`) and the metrics (:mod:`judgeopt.metrics`) are pure
numpy/scipy/networkx and import neither DSPy nor LiteLLM.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
