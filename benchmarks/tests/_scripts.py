"""Load a benchmark script (``benchmarks/<stem>.py``, a script, not a package) as a module.

The tests import it as ``from _scripts import load_script``: pytest's default import mode
puts this directory on ``sys.path`` when it collects a test module here. The scripts' own
``import judgeopt_lab`` resolves through ``benchmarks/`` on pytest's ``pythonpath``.
"""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

#: The directory of the benchmark scripts (``benchmarks/``).
SCRIPTS = Path(__file__).resolve().parents[1]


def load_script(file_stem: str, module_name: str | None = None) -> types.ModuleType:
    """Execute ``benchmarks/<file_stem>.py`` and return it as a fresh module.

    The module is named ``module_name`` (``file_stem`` when omitted); it is not put into
    ``sys.modules``, so each call runs the script again and gets a module of its own.
    """
    spec = importlib.util.spec_from_file_location(
        module_name or file_stem, SCRIPTS / f"{file_stem}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
