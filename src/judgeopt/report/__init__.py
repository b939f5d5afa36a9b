"""A compiled judge's report: one self-contained HTML page and its PNG figures.

``judgeopt report judge.json --out DIR`` (and ``judgeopt compile``, next to the judge as
``<judge stem>.report/``) writes:

* ``trace.png``: the score of every evaluated strategy in search order, the best so far, and
  the baseline's score as a line;
* ``factors.png``: each factor value's mean score over the evaluated strategies that use it,
  with a 95 % interval (normal approximation; a hollow point without one for a value seen
  once);
* ``gain.png``: the chosen judge's gain over the baseline per split (confirmation or
  validation, test) with its 95 % paired bootstrap interval (the export's ``comparisons``);
* ``scatter.png``: the judge's rating against the human score on the test items (when the
  export has ``test_items``, i.e. the compile had ``--test-data``), on axes fixed to the
  human score range and the rating scale;
* ``index.html``: first the verdict (chosen against the baseline, the gain with its interval
  and n per split, each judge's cost per judged item, every problem the compile reported,
  "not trustworthy" when it exited with 1, the selection's messages and the strategies it
  passed over), then the judge (task,
  aspect, model, strategy), its results, the figures (embedded as data URIs, so the file
  stands alone; an absent figure is explained) and the chosen prompt's messages.

Everything is read from the exported JSON; nothing calls a model. Figures need matplotlib
(``pip install 'judgeopt[report]'``); without it the page is written without them and says so.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._io import write_text_atomic
from ._effects import factor_effects
from ._figures import FIGURES, draw_figures, why_absent
from ._page import page, verdict

__all__ = ["factor_effects", "verdict", "write_judge_report"]


def write_judge_report(
    judge: str | os.PathLike[str] | Mapping[str, Any] | Any,
    out: str | os.PathLike[str],
    *,
    figures: bool = True,
) -> list[Path]:
    """Write ``out/index.html`` and the PNG figures of a compiled judge.

    Args:
        judge: An exported judge file, its dict, or a :class:`~judgeopt.judge.JudgeProgram`.
        out: The report directory (created).
        figures: Draw the PNG figures (needs matplotlib).

    Returns:
        The written files, ``index.html`` first.

    Raises:
        ValueError: On a missing or invalid judge file, or an ensemble file (report its
            single judge, ``OUT stem + .single.json``).
    """
    if isinstance(judge, Mapping):
        data = dict(judge)
    elif isinstance(judge, str | os.PathLike):
        from ..judge import read_judge_file  # lazy: judgeopt.judge loads DSPy

        data = read_judge_file(judge)
    else:
        data = judge.export()
    if data.get("format") == "judgeopt-ensemble":
        raise ValueError(
            "This is a judge ensemble: report its chosen single judge "
            "(the compile wrote it as OUT stem + .single.json)."
        )
    if "strategy" not in data or "task" not in data:
        raise ValueError("Not an exported judge: it has no `strategy` / `task`.")
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    absent: dict[str, str] = {}
    if not figures:
        absent = dict.fromkeys(FIGURES, "figures were not asked for (--no-figures)")
    else:
        try:
            files = draw_figures(data, directory)
        except ImportError:
            absent = dict.fromkeys(
                FIGURES, "matplotlib is not installed (pip install 'judgeopt[report]')"
            )
        else:
            for name in FIGURES:
                if name not in files:
                    absent[name] = why_absent(data, name) or "not drawn"
    for name in FIGURES:  # an earlier report's figure that this one does not have
        if name not in files:
            (directory / f"{name}.png").unlink(missing_ok=True)
    index = write_text_atomic(directory / "index.html", page(data, files, absent))
    v = verdict(data)
    (directory / "report.json").write_text(
        json.dumps(
            {
                "verdict": {k: v[k] for k in ("state", "headline", "split", "problems")},
                "factor_effects": factor_effects((data.get("search") or {}).get("trace") or []),
                "figures": sorted(p.name for p in files.values()),
                "absent_figures": absent,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    return [index, *files.values(), directory / "report.json"]
