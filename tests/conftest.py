"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

# Before any test module imports DSPy or LiteLLM: otherwise LiteLLM tries to download a price
# list at import time (and stalls on this network).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Directory of the shared meta-evaluation data (``../shared/data`` beside the repo).

    Skips the requesting test when the directory is not present (e.g. a fresh clone
    without the data checkout).
    """
    path = Path(__file__).resolve().parents[1].parent / "shared" / "data"
    if not path.is_dir():
        pytest.skip(f"shared data directory not found at {path}; it lives beside the project root")
    return path
