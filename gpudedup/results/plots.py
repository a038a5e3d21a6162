"""The evaluation's figure, recall against similarity, as PNG bytes; the palette, size and
margins every figure shares.

report.html's figures are SVG written directly (svg_figures.py), without matplotlib. matplotlib
is a dependency of the package (so ``gpudedup evaluate`` draws its figure). It is imported
inside the functions, never by ``import gpudedup`` nor by a run that writes its report; where it
cannot be imported (a broken or stripped environment) they raise ``PlottingUnavailable`` with the install command.
Figures are drawn on ``matplotlib.figure.Figure`` objects with the Agg canvas, never through
pyplot: no figure stays open, no backend is switched. Their style is set with
``matplotlib.rc_context``, which puts the global rcParams back when a figure is done.
"""

from __future__ import annotations

import io
from contextlib import contextmanager
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from ..core.lsh import collision_probability

INSTALL_HINT = "pip install matplotlib"

# One palette for every figure (colour-blind safe: Okabe-Ito blue, orange, vermillion, grey).
BLUE = "#0072B2"
ORANGE = "#E69F00"
RED = "#D55E00"
GREY = "#9AA5B1"
INK = "#1F2933"

FIGURE_SIZE = (6.4, 3.6)  # inches
# The report's figures (svg_figures.PLOT_BOX) have fixed margins, room for axis labels on both
# sides (a twin axis on the right) with tick labels of at most five characters
# (count_label).
MARGINS = dict(left=0.11, right=0.91, bottom=0.12, top=0.92)
DPI = 150  # 960 x 540 pixels: sharp when shown at half size on high-density screens

STYLE = {
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial", "Helvetica"],
    "font.size": 9.5,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.labelsize": 9.5,
    "axes.edgecolor": "#52606D",
    "axes.labelcolor": INK,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#E4E7EB",
    "grid.linewidth": 0.7,
    "xtick.color": "#52606D",
    "ytick.color": "#52606D",
    "text.color": INK,
}


class PlottingUnavailable(ImportError):
    """matplotlib cannot be imported."""


def matplotlib_available() -> bool:
    """Whether the figures can be drawn (matplotlib imports)."""
    try:
        _matplotlib()
    except PlottingUnavailable:
        return False
    return True


def recall_by_similarity_figure(bin_edges, recall_per_bin: Union[Sequence[float], Mapping[str, Sequence[float]]],
                                label: str = "recall", *, pair_counts=None,
                                threshold: Optional[float] = None, bands: Optional[int] = None,
                                rows: Optional[int] = None, title: Optional[str] = None) -> bytes:
    """PNG of recall against similarity.

    bin_edges: float (k + 1,), ascending similarity bin edges.
    recall_per_bin: float (k,), recall in each bin (NaN where a bin has no true pairs), or a
        mapping {label: float (k,)} to compare several pipelines on one figure.
    label: the legend entry of a single series.
    pair_counts: optional int (k,), the true pairs in each bin, drawn as light bars on a
        second axis.
    threshold: marked with a dashed line. bands, rows: also draw the S-curve P(s), the recall
        of the candidate stage that LSH theory predicts.
    """
    edges = np.asarray(bin_edges, dtype=np.float64)
    if edges.ndim != 1 or edges.shape[0] < 2 or np.any(np.diff(edges) <= 0):
        raise ValueError("bin_edges must be an ascending 1-D array of at least 2 edges")
    series = dict(recall_per_bin) if isinstance(recall_per_bin, Mapping) else {label: recall_per_bin}
    centers = (edges[:-1] + edges[1:]) / 2
    # Counts of any width on a second axis: margins fitted to the labels (not a report figure).
    with _drawing(fit_labels=True) as (figure, axes):
        if pair_counts is not None:
            counts = np.asarray(pair_counts, dtype=np.float64)
            if counts.shape != centers.shape:
                raise ValueError(f"pair_counts has {counts.shape[0]} bins, bin_edges give {centers.shape[0]}")
            bars = axes.twinx()
            bars.grid(False)
            bars.bar(edges[:-1], counts, width=np.diff(edges), align="edge", color=GREY, alpha=0.35,
                     edgecolor="white", linewidth=0.4, label="true pairs per bin")
            bars.set_ylabel("true pairs per bin", color="#52606D")
            bars.yaxis.set_major_formatter(_count_formatter())
            bars.spines["right"].set_visible(True)
            bars.spines["top"].set_visible(False)
            # The recall lines go in front of the bars of the second axis.
            axes.set_zorder(bars.get_zorder() + 1)
            axes.patch.set_visible(False)
        colours = [BLUE, RED, "#009E73", "#CC79A7", "#56B4E9", INK]
        for number, (name, listed) in enumerate(series.items()):
            values = np.asarray(listed, dtype=np.float64)
            if values.shape != centers.shape:
                raise ValueError(f"recall of {name!r} has {values.shape[0]} bins, bin_edges give {centers.shape[0]}")
            shown = ~np.isnan(values)
            axes.plot(centers[shown], values[shown], marker="o", markersize=3.5, linewidth=1.8,
                      color=colours[number % len(colours)], label=name)
        if bands is not None and rows is not None:
            s = np.linspace(edges[0], edges[-1], 501)
            axes.plot(s, collision_probability(s, bands, rows), color=ORANGE, linewidth=1.6,
                      linestyle=":", label=f"S-curve P(s), b = {bands}, r = {rows}")
        if threshold is not None:
            axes.axvline(threshold, color=RED, linestyle="--", linewidth=1.2, label=f"threshold {threshold:g}")
        axes.set_xlim(edges[0], edges[-1])
        axes.set_ylim(-0.02, 1.04)
        axes.set_xlabel("exact Jaccard similarity")
        axes.set_ylabel("recall")
        axes.set_title(title or "Recall by similarity", loc="left")
        # Recall is mostly near 1, so the legend goes low, where it hides bars, not lines.
        axes.legend(loc="lower left", frameon=True, framealpha=0.9, edgecolor="none", fontsize=8.5)
        return _png(figure)


# --- drawing helpers ----------------------------------------------------------------------------


def _matplotlib():
    try:
        # (start-up: matplotlib, heavy, is loaded to draw)
        import matplotlib
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as error:
        raise PlottingUnavailable(f"the recall figure needs matplotlib ({error}); "
                                  f"install it with: {INSTALL_HINT}") from None
    return matplotlib, Figure, FigureCanvasAgg


@contextmanager
def _drawing(fit_labels: bool = False):
    """(Figure, the figure's Axes) inside the figure style: the rc values are read when
    artists are made, so everything is drawn and saved within it; rc_context restores the
    global rcParams afterwards, and no pyplot figure manager is involved. Margins are fixed
    (MARGINS), or fitted to the labels by constrained layout (fit_labels: slower)."""
    matplotlib, Figure, FigureCanvasAgg = _matplotlib()
    with matplotlib.rc_context(STYLE):
        figure = Figure(figsize=FIGURE_SIZE, dpi=DPI, layout="constrained" if fit_labels else None)
        if not fit_labels:
            figure.subplots_adjust(**MARGINS)
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        axes.set_axisbelow(True)
        yield figure, axes


def _count_formatter():
    """Tick labels of counts in at most five characters (800, 9,500, 120k, 2.5M), so that the
    fixed margins (MARGINS) hold them."""
    # (start-up: matplotlib, heavy, is loaded to draw)
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _: count_label(value))


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, facecolor="white", metadata={"Software": None})
    return buffer.getvalue()


def count_label(value: float) -> str:
    """A count's tick label in at most five characters (800, 9,500, 120k, 2.5M), so that the
    fixed margins (plots.MARGINS) hold it."""
    # (from, unit, suffix): thousands are written out up to 9,999.
    for start, unit, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if abs(value) >= start:
            return f"{value / unit:.3g}{suffix}"
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"
