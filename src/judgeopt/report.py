"""A compiled judge's report: one self-contained HTML page and its PNG figures.

``judgeopt report judge.json --out DIR`` (and ``judgeopt compile``, next to the judge as
``<judge stem>.report/``) writes:

* ``trace.png``: the score of every evaluated strategy in search order, the best so far, and
  the baseline's score as a line;
* ``factors.png``: each factor value's mean score over the evaluated strategies that use it,
  with a 95 % interval (normal approximation; none for a value seen once);
* ``gain.png``: the chosen judge's gain over the baseline per split (confirmation or
  validation, test) with its 95 % paired bootstrap interval (the export's ``comparisons``);
* ``scatter.png``: the judge's rating against the human score on the test items (when the
  export has ``test_items``, i.e. the compile had ``--test-data``);
* ``index.html``: the judge (task, aspect, model, strategy), the gain table, the figures
  (embedded as data URIs, so the file stands alone) and the chosen prompt's messages.

Everything is read from the exported JSON; nothing calls a model. Figures need matplotlib
(``pip install 'judgeopt[report]'``); without it the page is written without them.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._io import write_text_atomic

__all__ = ["factor_effects", "write_judge_report"]

FIGURES = ("trace", "factors", "gain", "scatter")


def _finite(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def factor_effects(trace: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each factor value's mean score over the evaluations that use it, with a 95 % interval.

    Returns:
        factor -> ``[{"value", "n", "mean", "lo", "hi"}]`` in first-seen order; ``lo``/``hi``
        are ``None`` for a value seen once. Failed evaluations (no score) are left out.
    """
    scores: dict[str, dict[str, list[float]]] = {}
    for t in trace:
        score = t.get("score")
        if not _finite(score):
            continue
        for factor, value in (t.get("strategy") or {}).items():
            scores.setdefault(factor, {}).setdefault(str(value), []).append(float(score))
    out: dict[str, list[dict[str, Any]]] = {}
    for factor, by_value in scores.items():
        rows = []
        for value, xs in by_value.items():
            arr = np.asarray(xs)
            mean = float(arr.mean())
            half = 1.96 * float(arr.std(ddof=1)) / math.sqrt(len(arr)) if len(arr) > 1 else None
            rows.append(
                {
                    "value": value,
                    "n": len(arr),
                    "mean": mean,
                    "lo": None if half is None else mean - half,
                    "hi": None if half is None else mean + half,
                }
            )
        out[factor] = rows
    return out


def _baseline_score(data: Mapping[str, Any], trace: Sequence[Mapping[str, Any]]) -> float | None:
    from .judge import JudgeTask, baseline_strategy  # lazy: judgeopt.judge loads DSPy

    try:
        task = JudgeTask.from_dict(data["task"])
        base = baseline_strategy(task).as_dict()
    except (KeyError, ValueError):
        return None
    for t in trace:
        strategy = t.get("strategy") or {}
        if all(strategy.get(k) == v for k, v in base.items() if k in strategy) and _finite(
            t.get("score")
        ):
            return float(t["score"])
    return None


def _figures(data: Mapping[str, Any], out: Path) -> dict[str, Path]:
    """Draw the figures that the data allows; returns name -> PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    files: dict[str, Path] = {}
    search = data.get("search") or {}
    trace = search.get("trace") or []
    metric = search.get("metric") or "score"

    def save(fig: Any, name: str) -> None:
        path = out / f"{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        files[name] = path

    if trace:
        xs = [int(t.get("number", i)) + 1 for i, t in enumerate(trace)]
        ys = [float(t["score"]) if _finite(t.get("score")) else math.nan for t in trace]
        best, running = [], -math.inf
        for y in ys:
            running = max(running, y) if not math.isnan(y) else running
            best.append(running if running > -math.inf else math.nan)
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot(xs, ys, "o", color="#4477aa", label="strategy")
        ax.step(xs, best, where="post", color="#228833", label="best so far")
        base = _baseline_score(data, trace)
        if base is not None:
            ax.axhline(base, color="#cc6677", linestyle="--", label="baseline")
        failed = [x for x, y in zip(xs, ys, strict=True) if math.isnan(y)]
        if failed:
            ax.plot(
                failed,
                [np.nanmin(ys) if not all(map(math.isnan, ys)) else 0] * len(failed),
                "x",
                color="#999999",
                label="failed",
            )
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_xlabel("evaluation")
        ax.set_ylabel(metric)
        ax.set_title("Search trace")
        ax.legend(loc="best", fontsize=8)
        save(fig, "trace")
        effects = factor_effects(trace)
        varied = {f: rows for f, rows in effects.items() if len(rows) > 1}
        if varied:
            n = len(varied)
            cols = min(3, n)
            rows_n = math.ceil(n / cols)
            fig, axes = plt.subplots(rows_n, cols, figsize=(4 * cols, 2.6 * rows_n), squeeze=False)
            for ax, (factor, rows) in zip(axes.flat, varied.items(), strict=False):
                ys_ = np.arange(len(rows))
                means = [r["mean"] for r in rows]
                err = [
                    [r["mean"] - r["lo"] if r["lo"] is not None else 0 for r in rows],
                    [r["hi"] - r["mean"] if r["hi"] is not None else 0 for r in rows],
                ]
                ax.errorbar(means, ys_, xerr=err, fmt="o", color="#4477aa", capsize=3)
                ax.set_yticks(ys_, [f"{r['value']} (n={r['n']})" for r in rows], fontsize=8)
                ax.set_title(factor, fontsize=9)
                ax.set_xlabel(f"mean {metric}", fontsize=8)
            for ax in list(axes.flat)[len(varied) :]:
                ax.axis("off")
            save(fig, "factors")
    comparisons = data.get("comparisons") or {}
    gains = [
        (split, c)
        for split, c in comparisons.items()
        if _finite(c.get("gain")) and c.get("gain_ci")
    ]
    if gains:
        fig, ax = plt.subplots(figsize=(6, 1.2 + 0.6 * len(gains)))
        for i, (_split, c) in enumerate(gains):
            lo, hi = c["gain_ci"]
            ax.errorbar(
                [c["gain"]],
                [i],
                xerr=[[c["gain"] - lo], [hi - c["gain"]]],
                fmt="o",
                color="#228833" if lo > 0 else ("#cc6677" if hi < 0 else "#4477aa"),
                capsize=4,
            )
        ax.axvline(0, color="#999999", linewidth=1)
        ax.set_yticks(range(len(gains)), [f"{s} (n={c.get('n')})" for s, c in gains])
        ax.set_xlabel(
            f"gain over the baseline ({gains[0][1].get('metric', metric)}), 95 % interval"
        )
        ax.set_title("Chosen judge against the baseline")
        save(fig, "gain")
    items = [
        i
        for i in data.get("test_items") or []
        if _finite(i.get("score")) and _finite(i.get("human"))
    ]
    if items:
        rng = np.random.default_rng(0)
        human = np.asarray([float(i["human"]) for i in items])
        judge = np.asarray([float(i["score"]) for i in items])
        fig, ax = plt.subplots(figsize=(5, 4))
        ax.scatter(
            human + rng.uniform(-0.08, 0.08, len(human)),
            judge + rng.uniform(-0.08, 0.08, len(judge)),
            alpha=0.6,
            color="#4477aa",
        )
        ax.set_xlabel("human score")
        ax.set_ylabel("judge rating")
        test = data.get("test") or {}
        rho = test.get("spearman")
        ax.set_title(
            f"Test items (n={len(items)}" + (f", Spearman {rho:.3f})" if _finite(rho) else ")")
        )
        save(fig, "scatter")
    return files


def _table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _fmt(x: Any) -> str:
    return f"{x:.3f}" if _finite(x) else "-"


def _html(data: Mapping[str, Any], files: Mapping[str, Path]) -> str:
    title = f"judgeopt report: {data.get('task_name')} / {data.get('aspect')}"
    search = data.get("search") or {}
    parts = [
        f"<h1>{html.escape(title)}</h1>",
        _table(
            [
                ["task", data.get("task_name")],
                ["aspect", data.get("aspect")],
                ["mode", data.get("mode")],
                ["model", data.get("model") or "-"],
                [
                    "search",
                    f"{search.get('search', '-')}, {search.get('evaluations', '-')} "
                    f"evaluations, seed {search.get('seed', '-')}",
                ],
                ["judgeopt", data.get("judgeopt_version")],
            ],
            ["", ""],
        ),
    ]
    parts.append("<h2>Chosen strategy</h2>")
    parts.append(
        _table(sorted((k, v) for k, v in (data.get("strategy") or {}).items()), ["factor", "value"])
    )
    comparisons = data.get("comparisons") or {}
    parts.append("<h2>Gain over the baseline</h2>")
    if comparisons:
        rows = []
        for split, c in comparisons.items():
            ci = c.get("gain_ci") or [None, None]
            rows.append(
                [
                    split,
                    c.get("metric"),
                    c.get("n"),
                    _fmt((c.get("baseline") or {}).get("score")),
                    _fmt((c.get("chosen") or {}).get("score")),
                    _fmt(c.get("gain")),
                    f"[{_fmt(ci[0])}, {_fmt(ci[1])}]",
                    c.get("note") or "",
                ]
            )
        parts.append(
            _table(
                rows,
                ["split", "metric", "n", "baseline", "chosen", "gain", "95 % interval", "note"],
            )
        )
    else:
        parts.append("<p>No comparison with the baseline in this judge file.</p>")
    for key in ("validation", "test"):
        summary = data.get(key)
        if summary:
            parts.append(f"<h2>{key.capitalize()}</h2>")
            parts.append(
                _table(
                    [[k, v] for k, v in summary.items() if not isinstance(v, dict | list)], ["", ""]
                )
            )
    captions = {
        "trace": "Search trace: each evaluated strategy's score, the best so far, and "
        "the baseline's score.",
        "factors": "Mean score of the evaluated strategies with each factor value (95 % interval).",
        "gain": "The chosen judge's gain over the baseline with its 95 % paired "
        "bootstrap interval.",
        "scatter": "The judge's ratings against the human scores on the test items.",
    }
    if files:
        parts.append("<h2>Figures</h2>")
    for name in FIGURES:
        if name in files:
            b64 = base64.b64encode(files[name].read_bytes()).decode("ascii")
            parts.append(
                f'<figure><img id="fig-{name}" alt="{name}" '
                f'src="data:image/png;base64,{b64}"><figcaption>'
                f"{html.escape(captions[name])} ({files[name].name})</figcaption>"
                "</figure>"
            )
    messages = data.get("messages") or (
        [{"role": "user", "content": data.get("template")}] if data.get("template") else []
    )
    if messages:
        parts.append("<h2>The chosen prompt</h2>")
        if data.get("placeholders"):
            parts.append(
                "<p>Placeholders: "
                + ", ".join(f"<code>{{{html.escape(p)}}}</code>" for p in data["placeholders"])
                + "</p>"
            )
        for m in messages:
            parts.append(
                f"<h3>{html.escape(str(m.get('role')))}</h3>"
                f"<pre>{html.escape(str(m.get('content')))}</pre>"
            )
    style = (
        "body{font-family:sans-serif;max-width:60em;margin:2em auto;padding:0 1em}"
        "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;"
        "padding:.2em .6em;text-align:left}pre{white-space:pre-wrap;background:#f6f6f6;"
        "padding:.6em}img{max-width:100%}"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{style}</style></head><body>\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )


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
        from .judge import read_judge_file  # lazy: judgeopt.judge loads DSPy

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
    if figures:
        try:
            files = _figures(data, directory)
        except ImportError:
            files = {}
    index = write_text_atomic(directory / "index.html", _html(data, files))
    (directory / "report.json").write_text(
        json.dumps(
            {
                "factor_effects": factor_effects((data.get("search") or {}).get("trace") or []),
                "figures": sorted(p.name for p in files.values()),
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    return [index, *files.values(), directory / "report.json"]
