"""PNG figures of an analysis (matplotlib, imported lazily; the ``report`` extra).

Figures are drawn on :class:`matplotlib.figure.Figure` objects with the Agg canvas, so
no pyplot state and no global backend are touched.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._table import FloatArray

__all__ = ["figures_available"]

_DPI = 110


def figures_available() -> bool:
    """Whether matplotlib is installed (``pip install 'judgeopt[report]'``)."""
    return importlib.util.find_spec("matplotlib") is not None


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=_DPI)
    return path


def _short(text: str, width: int = 22) -> str:
    return text if len(text) <= width else text[: width - 1] + "."


def plot_shares(
    path: Path,
    *,
    title: str,
    labels: Sequence[str],
    panels: Sequence[tuple[str, Sequence[tuple[str, Sequence[float]]]]],
    xlabel: str = "share (%)",
) -> Path:
    """Horizontal grouped bars, one panel per split (values in %).

    Every panel is ``(panel title, series)``; a series is ``(name, one value per label)``. The
    first series of a panel (the base rate) is drawn hatched grey.
    """
    n_lab = len(labels)
    n_ser = max((len(series) for _, series in panels), default=1)
    height = min(22.0, max(3.0, 0.13 * n_lab * n_ser + 0.3 * n_lab + 1.4))
    fig = _figure(max(7.0, 5.6 * len(panels) + 1.6), height)
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    fig.get_layout_engine().set(wspace=0.04)
    colors = [
        "#1f77b4",
        "#ff7f0e",
        "#2ca02c",
        "#d62728",
        "#9467bd",
        "#8c564b",
        "#e377c2",
        "#17becf",
        "#bcbd22",
        "#7f7f7f",
    ]
    y = np.arange(n_lab, dtype=float)
    top = max([max(v) for _, series in panels for _, v in series if len(v)] + [1.0])
    for ax, (panel, series) in zip(axes, panels, strict=True):
        bar = 0.8 / max(len(series), 1)
        for s, (name, vals) in enumerate(series):
            pos = y - 0.4 + bar * (s + 0.5)
            base = s == 0
            ax.barh(
                pos,
                list(vals),
                height=bar * 0.9,
                label=name,
                color="#bdbdbd" if base else colors[(s - 1) % len(colors)],
                hatch="///" if base else None,
                edgecolor="#757575" if base else "none",
                linewidth=0.4,
            )
        ax.set_yticks(y, [_short(v, 28) for v in labels])
        ax.set_xlim(0, min(100.0, top * 1.1 + 2))
        ax.set_xlabel(xlabel)
        ax.set_title(panel, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        # Outside the axes (constrained layout makes room), so no bar is hidden.
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    axes[0].set_ylim(n_lab - 0.5, -0.5)  # first label on top, no empty margin
    fig.suptitle(title, fontsize=11)
    return _save(fig, path)


def plot_heatmap(
    path: Path,
    matrix: FloatArray,
    *,
    rows: Sequence[str],
    cols: Sequence[str],
    title: str,
    xlabel: str = "",
    ylabel: str = "",
    lower_triangle: bool = False,
    vmin: float = -1.0,
    vmax: float = 1.0,
    cmap: str = "RdBu",
    fmt: str = "{:.2f}",
    colorbar: str = "Kendall tau",
) -> Path:
    """An annotated heatmap (annotations when the matrix is at most 14 x 14)."""
    m = np.array(matrix, dtype=np.float64)
    if lower_triangle:
        m[np.triu_indices(m.shape[0], k=0)] = np.nan
        # Drop the empty first row and last column of a strict lower triangle.
        m, rows, cols = m[1:, :-1], list(rows)[1:], list(cols)[:-1]
    n_r, n_c = m.shape
    cell = 0.55 if max(n_r, n_c) <= 14 else 0.32
    width = max(4.2, cell * n_c + 2.6)
    height = max(3.0, cell * n_r + 1.8)
    fig = _figure(width, height)
    ax = fig.add_subplot()
    masked = np.ma.masked_invalid(m)
    import matplotlib as mpl

    cm = mpl.colormaps[cmap].with_extremes(bad="white")
    im = ax.imshow(masked, cmap=cm, vmin=vmin, vmax=vmax, aspect="auto")
    size = 8 if max(n_r, n_c) <= 8 else 7
    ax.set_xticks(np.arange(n_c), [_short(c) for c in cols], rotation=45, ha="right", fontsize=size)
    ax.set_yticks(np.arange(n_r), [_short(r) for r in rows], fontsize=size)
    if max(n_r, n_c) <= 14:
        for i in range(n_r):
            for j in range(n_c):
                v = m[i, j]
                if math.isfinite(v):
                    r, g, b, _ = cm(im.norm(v))
                    dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
                    ax.text(
                        j,
                        i,
                        fmt.format(v),
                        ha="center",
                        va="center",
                        fontsize=size,
                        color="white" if dark else "black",
                    )
    ax.set_title(title, fontsize=10)
    if xlabel:
        ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    fig.colorbar(im, ax=ax, shrink=0.85, label=colorbar)
    return _save(fig, path)


def plot_grouped_bars(
    path: Path,
    *,
    title: str,
    categories: Sequence[str],
    series: Sequence[tuple[str, Sequence[float]]],
    ylabel: str,
) -> Path:
    """Vertical grouped bars (e.g. stability of each aggregation, one bar per target)."""
    n_cat, n_ser = len(categories), len(series)
    fig = _figure(min(12.0, max(6.0, 0.35 * n_cat * max(n_ser, 1) + 1.5)), 4.0)
    ax = fig.add_subplot()
    width = 0.8 / max(n_ser, 1)
    x = np.arange(n_cat, dtype=float)
    for s, (name, vals) in enumerate(series):
        clean = [v if math.isfinite(v) else 0.0 for v in vals]
        ax.bar(x - 0.4 + width * (s + 0.5), clean, width=width * 0.92, label=name)
    ax.set_xticks(x, list(categories))
    ax.axhline(0.0, color="black", linewidth=0.6)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=11)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)
