"""The report's PNG figures, and why a figure is absent when the data does not allow it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ._effects import baseline_score, factor_effects, finite, human_range, rating_range

__all__ = ["FIGURES", "draw_figures", "why_absent"]

FIGURES = ("trace", "factors", "gain", "scatter")

#: Jitter of the scatter's points, as a share of each axis's span (the ratings are discrete).
JITTER = 0.015


def _gains(data: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    comparisons = data.get("comparisons") or {}
    return [
        (split, c)
        for split, c in comparisons.items()
        if finite(c.get("gain")) and c.get("gain_ci") and all(finite(x) for x in c["gain_ci"])
    ]


def _scatter_items(data: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [
        i for i in data.get("test_items") or [] if finite(i.get("score")) and finite(i.get("human"))
    ]


def why_absent(data: Mapping[str, Any], name: str) -> str | None:
    """Why figure ``name`` cannot be drawn from ``data`` (``None``: it can)."""
    trace = (data.get("search") or {}).get("trace") or []
    if name == "trace":
        return None if trace else "the judge file has no search trace (it was not compiled)"
    if name == "factors":
        if not trace:
            return "the judge file has no search trace (it was not compiled)"
        effects = factor_effects(trace)
        if not effects:
            return "no evaluated strategy has a score (every one scored NaN)"
        if not any(len(rows) > 1 for rows in effects.values()):
            return "no factor took two values among the scored strategies"
        return None
    if name == "gain":
        comparisons = data.get("comparisons") or {}
        if not comparisons:
            return "the judge file has no comparison with the baseline"
        if not _gains(data):
            return (
                "the gain is undefined on every split ("
                + ", ".join(comparisons)
                + "): "
                + ("a score is undefined (too few rated answers, or one rating for every item)")
            )
        return None
    if name == "scatter":
        items = data.get("test_items") or []
        if not items:
            return "the judge has no test items (compile with --test-data to draw it)"
        if not _scatter_items(data):
            return f"none of the {len(items)} test items has a rating (every answer unparsed)"
        return None
    raise ValueError(f"figure: {name!r} is not one of {FIGURES}")


def draw_figures(data: Mapping[str, Any], out: Path) -> dict[str, Path]:
    """Draw the figures that the data allows; returns name -> PNG path.

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files: dict[str, Path] = {}

    def save(fig: Any, name: str) -> None:
        path = out / f"{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        files[name] = path

    for name, draw in (
        ("trace", _trace),
        ("factors", _factors),
        ("gain", _gain),
        ("scatter", _scatter),
    ):
        if why_absent(data, name) is None:
            save(draw(plt, data), name)
    return files


def _trace(plt: Any, data: Mapping[str, Any]) -> Any:
    import matplotlib.ticker

    search = data.get("search") or {}
    trace = search.get("trace") or []
    metric = search.get("metric") or "score"
    xs = [int(t.get("number", i)) + 1 for i, t in enumerate(trace)]
    ys = [float(t["score"]) if finite(t.get("score")) else math.nan for t in trace]
    best, running = [], -math.inf
    for y in ys:
        running = max(running, y) if not math.isnan(y) else running
        best.append(running if running > -math.inf else math.nan)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(xs, ys, "o", color="#4477aa", label="strategy")
    ax.step(xs, best, where="post", color="#228833", label="best so far")
    base = baseline_score(data, trace)
    if base is not None:
        ax.axhline(base, color="#cc6677", linestyle="--", label="baseline")
    failed = [x for x, y in zip(xs, ys, strict=True) if math.isnan(y)]
    if failed:
        ax.plot(
            failed,
            [np.nanmin(ys) if not all(map(math.isnan, ys)) else 0] * len(failed),
            "x",
            color="#999999",
            label="failed (no score)",
        )
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set_xlabel("evaluation")
    ax.set_ylabel(metric)
    ax.set_title("Search trace")
    ax.legend(loc="best", fontsize=8)
    return fig


def _factors(plt: Any, data: Mapping[str, Any]) -> Any:
    search = data.get("search") or {}
    metric = search.get("metric") or "score"
    effects = factor_effects(search.get("trace") or [])
    varied = {f: rows for f, rows in effects.items() if len(rows) > 1}
    n = len(varied)
    cols = min(3, n)
    rows_n = math.ceil(n / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4 * cols, 0.6 + 2.6 * rows_n), squeeze=False)
    for ax, (factor, rows) in zip(axes.flat, varied.items(), strict=False):
        ys = np.arange(len(rows))
        for y, r in zip(ys, rows, strict=True):
            if r["lo"] is None:  # seen once: a hollow point, no interval
                ax.plot([r["mean"]], [y], "o", mfc="white", color="#4477aa")
            else:
                ax.errorbar(
                    [r["mean"]],
                    [y],
                    xerr=[[r["mean"] - r["lo"]], [r["hi"] - r["mean"]]],
                    fmt="o",
                    color="#4477aa",
                    capsize=4,
                    elinewidth=1.5,
                )
        ax.set_yticks(ys, [f"{r['value']} (n={r['n']})" for r in rows], fontsize=8)
        ax.set_ylim(-0.6, len(rows) - 0.4)
        ax.set_title(factor, fontsize=9)
        ax.set_xlabel(f"mean {metric}", fontsize=8)
        ax.grid(axis="x", color="#eeeeee")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(
        "Mean score per factor value, bar: 95 % interval (hollow: seen once, no interval)",
        fontsize=9,
    )
    return fig


def _gain(plt: Any, data: Mapping[str, Any]) -> Any:
    metric = (data.get("search") or {}).get("metric") or "score"
    gains = _gains(data)
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
    ax.set_ylim(-0.6, len(gains) - 0.4)
    ax.set_xlabel(f"gain over the baseline ({gains[0][1].get('metric', metric)}), 95 % interval")
    ax.set_title("Chosen judge against the baseline")
    return fig


def _scatter(plt: Any, data: Mapping[str, Any]) -> Any:
    items = _scatter_items(data)
    human = np.asarray([float(i["human"]) for i in items])
    judge = np.asarray([float(i["score"]) for i in items])
    # Axes fixed to the scales (the human score range, the rating scale); the data's own
    # range where the export does not say.
    hx = human_range(data) or (float(human.min()), float(human.max()))
    ry = rating_range(data) or (float(judge.min()), float(judge.max()))
    hx = (min(hx[0], float(human.min())), max(hx[1], float(human.max())))
    ry = (min(ry[0], float(judge.min())), max(ry[1], float(judge.max())))
    span_x, span_y = max(hx[1] - hx[0], 1.0), max(ry[1] - ry[0], 1.0)
    rng = np.random.default_rng(0)
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter(
        human + rng.uniform(-JITTER, JITTER, len(human)) * span_x,
        judge + rng.uniform(-JITTER, JITTER, len(judge)) * span_y,
        alpha=0.6,
        color="#4477aa",
    )
    ax.set_xlim(hx[0] - 0.05 * span_x, hx[1] + 0.05 * span_x)
    ax.set_ylim(ry[0] - 0.05 * span_y, ry[1] + 0.05 * span_y)
    if ry[1] - ry[0] <= 10 and float(ry[0]).is_integer():
        ax.set_yticks(np.arange(ry[0], ry[1] + 1))
    ax.set_xlabel(f"human score ({hx[0]:g} to {hx[1]:g})")
    ax.set_ylabel(f"judge rating ({ry[0]:g} to {ry[1]:g})")
    ax.grid(color="#eeeeee")
    rho = (data.get("test") or {}).get("spearman")
    unrated = len(data.get("test_items") or []) - len(items)
    ax.set_title(
        f"Test items (n={len(items)}"
        + (f", {unrated} without a rating not drawn" if unrated else "")
        + (f", Spearman {rho:.3f})" if finite(rho) else ")"),
        fontsize=9,
    )
    return fig
