"""The ``judgeopt`` command line (entry point :func:`main`).

One module per command group, each adding its own subcommands to the parser:
``_compile`` (compile), ``_evaluate`` (evaluate, show), ``_init_report`` (init, report),
``_grid`` (grid, analyze), ``_glassbox`` (glassbox), ``_serve`` (serve), ``_bench``
(bench-search) and ``_demo`` (demo); ``_common`` holds what they share (:class:`CLIError`, the
argparse types, the model options) and ``_main`` the parser and :func:`main`.

The commands that judge through a DSPy LM (compile, evaluate, grid) get it from the model
options through :func:`load_lm`, looked up here when the command runs, so replacing that one
name (``monkeypatch.setattr("judgeopt.cli.load_lm", ...)``, as the tests do) reaches all of
them. ``glassbox`` builds a logprob backend instead (``judgeopt.glassbox.make_backend``), and
``demo`` its own embedded model (``judgeopt.demo``).
"""

from __future__ import annotations

from ._common import EXIT_UNAVAILABLE, EXIT_UNTRUSTED, CLIError, load_lm
from ._common import _model_string as _model_string
from ._evaluate import item_rows
from ._main import build_parser, main

__all__ = [
    "EXIT_UNAVAILABLE",
    "EXIT_UNTRUSTED",
    "CLIError",
    "build_parser",
    "item_rows",
    "load_lm",
    "main",
]
