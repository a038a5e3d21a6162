"""The package's figures as SVG text, written directly: the LSH S-curve, the verified pairs by
exact Jaccard with the S-curve over them and the clusters by size (report.html), and recall by
similarity (the evaluation's).

The figures are plain string building over numpy, no plotting library: drawing one takes a few
milliseconds and loads nothing.

Every figure is one ``<svg>`` element of FIGURE_PIXELS, drawn in a WIDTH x HEIGHT user space
(1 unit = 1/100 inch of a 6.4 x 3.6 inch figure) with the axes in PLOT_BOX. Nothing in it refers
to anything outside it (no ids, no ``url()``, no fonts to fetch), so it is embedded in
report.html as it is, and written beside it as a file with the XML declaration and the SVG
namespace. Its parts are named by data-* attributes (the bars' data-count, data-curve,
data-mark), never by classes, which the page's style sheet would reach.
"""

from __future__ import annotations

import math
import re
from html import escape, unescape
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from ..core.lsh import collision_probability, steepest_similarity
from ..pipeline.shown import verified_edges

# One palette for every figure (colour-blind safe: Okabe-Ito blue, orange, vermillion, grey).
BLUE = "#0072B2"
ORANGE = "#E69F00"
RED = "#D55E00"
GREY = "#9AA5B1"
INK = "#1F2933"
SERIES_COLOURS = (BLUE, RED, "#009E73", "#CC79A7", "#56B4E9", INK)  # the recall figure's lines, in turn

WIDTH, HEIGHT = 640.0, 360.0  # user units: hundredths of an inch
FIGURE_PIXELS = (960, 540)  # as the figures are shown: sharp at half size on high-density screens
# The axes' box (left, top, right, bottom) in user units: room for axis labels on both sides (a
# second axis on the right) with tick labels of at most five characters (count_label).
PLOT_BOX = (0.11 * WIDTH, (1 - 0.92) * HEIGHT, 0.91 * WIDTH, (1 - 0.12) * HEIGHT)
S_CURVE_LIMITS = (-0.02, 1.04)  # the probability axis of every figure that has one
CURVE_POINTS = 501  # points of every drawn S-curve, s from 0 to 1

FONT = '"DejaVu Sans", "Liberation Sans", Arial, Helvetica, sans-serif'
FONT_SIZE = 13.2  # 9.5 pt
SMALL = 11.8  # 8.5 pt: legends and annotations
EDGE = "#52606D"  # spines, ticks and tick labels
GRID = "#E4E7EB"
DASHES = "6.2,2.7"  # a threshold's dashed line
DOTS = "1.5,3.5"  # the S-curve's dotted line beside measured recall
SVG_NAMESPACE = "http://www.w3.org/2000/svg"


# --- the figures --------------------------------------------------------------------------------


def s_curve_svg(bands: int, rows: int, threshold: Optional[float] = None) -> str:
    """SVG of P(s) = 1 - (1 - s^r)^b for ``bands`` x ``rows``, with the threshold and the
    steepest point marked."""
    axes = Axes((0.0, 1.0), S_CURVE_LIMITS)
    parts = [axes.grid_and_ticks(linear_ticks(0.0, 1.0), linear_ticks(0.0, 1.0), decimal_label, decimal_label)]
    s = np.linspace(0.0, 1.0, CURVE_POINTS)
    parts.append(axes.curve(s, collision_probability(s, bands, rows), ORANGE, 2.2 * 100 / 72, "s-curve"))
    legend: list[tuple[str, str]] = [(_legend_line(ORANGE), _curve_formula(bands, rows))]

    steepest = steepest_similarity(bands, rows)
    p = float(collision_probability(steepest, bands, rows))
    x, y = axes.x(steepest), axes.y(p)
    parts.append(_diamond(x, y, 3.2, INK))
    left = steepest > 0.3  # the label on the left of the point, unless that is off the axes
    parts.append(_text(x - 11 if left else x + 11, y - 6, f"s = {steepest:.3f}, P = {p:.2f}", SMALL,
                       "end" if left else "start"))
    legend.append((_diamond(9, -4, 3.2, INK), escape(f"steepest point s = {steepest:.3f}")))

    if threshold is not None:
        parts.append(axes.vertical(threshold, RED, "threshold"))
        p = float(collision_probability(threshold, bands, rows))
        x, y = axes.x(threshold), axes.y(p)
        parts.append(f'<circle cx="{x:.2f}" cy="{y:.2f}" r="3.5" fill="{RED}"/>')
        parts.append(_text(x - 17, y + 25 + 4, f"P({threshold:g}) = {p:.4f}", SMALL, "end", RED))
        legend.append((_legend_line(RED, dashes=DASHES), escape(f"threshold {threshold:g}")))

    parts.append(axes.spines())
    parts.append(axes.labels("Jaccard similarity s of a pair", "P(pair becomes a candidate)"))
    parts.append(axes.title(f"LSH S-curve: {bands} bands × {rows} rows"))
    parts.append(_legend(legend))
    return _document("LSH S-curve", parts)


def candidates_histogram_svg(bands: int, rows: int, threshold: float, counts: np.ndarray, rejected: int,
                             bin_width: float = 0.02, log: Optional[bool] = None) -> str:
    """SVG of the verified pairs by exact Jaccard, with the S-curve on a second axis.

    counts: int (k,), the verified pairs in each bin of shown.verified_edges(threshold,
        bin_width) (shown.verified_histogram); rejected: how many pairs the exact check
        rejected (their Jaccard below the threshold, not computed), written left of it.
    log: log-scale counts; None: when the fullest bin holds over 100 times the emptiest
        non-empty one.
    """
    counts = np.asarray(counts, dtype=np.int64)
    edges = verified_edges(threshold, bin_width)
    if counts.shape != (edges.shape[0] - 1,):
        raise ValueError(f"{counts.shape[0]} counts for {edges.shape[0] - 1} bins")
    checked = int(counts.sum()) + rejected
    x_limits = (0.0, max(float(edges[-1]), 1.0))
    axes, y_ticks, log = count_axes(x_limits, counts, log, 1.05, 1.0)  # (5 % above the fullest bin)
    parts = [axes.grid_and_ticks(linear_ticks(*x_limits), y_ticks, decimal_label, count_label)]

    bars = []
    for left, right, count in zip(edges[:-1], edges[1:], counts):
        if count <= 0:
            continue  # (nothing to draw; on a log scale, no bar below its bottom)
        x0, x1 = axes.x(left), axes.x(right)
        y = axes.y(float(count))
        bars.append(f'<rect x="{x0:.3f}" y="{y:.3f}" width="{x1 - x0:.3f}" '
                    f'height="{axes.bottom - y:.3f}" data-count="{int(count)}"/>')
    parts.append(f'<g fill="{BLUE}" stroke="#FFFFFF" stroke-width="0.55">{"".join(bars)}</g>')
    parts.append(axes.vertical(threshold, RED, "threshold"))
    if threshold > 0.15:  # room left of the threshold for the count of rejected pairs
        lines = [f"{rejected:,} rejected", f"(Jaccard below {threshold:g},", "not computed in full)"]
        x, middle = axes.x(threshold / 2), (axes.top + axes.bottom) / 2
        for number, line in enumerate(lines):
            parts.append(_text(x, middle + (number - 1) * 15.5 + 4.5, line, 12.5, "middle", GREY))

    # The S-curve on its own axis, at the right.
    curve = Axes(x_limits, (0.0, 1.04))
    s = np.linspace(0.0, 1.0, CURVE_POINTS)
    parts.append(curve.curve(s, collision_probability(s, bands, rows), ORANGE, 2.0 * 100 / 72, "s-curve"))
    parts.append(curve.right_ticks(linear_ticks(0.0, 1.0), decimal_label, ORANGE))
    parts.append(axes.spines(right=ORANGE))
    parts.append(axes.labels("exact Jaccard similarity of the candidate pair",
                             "verified pairs" + (" (log scale)" if log else ""), right=("P(candidate)", ORANGE)))
    parts.append(axes.title(f"{checked:,} candidate pairs checked exactly, {rejected:,} rejected"))
    parts.append(_legend([(f'<rect x="2" y="-9" width="14" height="9" fill="{BLUE}"/>',
                           "at or above the threshold (verified)"),
                          (_legend_line(ORANGE), escape(f"S-curve P(s), b = {bands}, r = {rows}"))], size=11.1))
    return _document("Verified pairs by exact Jaccard", parts)


def size_bins(largest: int) -> list[tuple[int, int]]:
    """The cluster-size histogram's bins up to a cluster of ``largest`` documents, as
    (smallest, largest size) inclusive: 2, 3, 4 and 5 alone, then 6-9, 10-19, 20-49, 50-99,
    100-199, ... (1, 2, 5 times powers of ten)."""
    bins = [(size, size) for size in range(2, 6)]
    low, power = 6, 10
    while low <= largest:
        for high in (power, 2 * power, 5 * power):
            if high > low and low <= largest:
                bins.append((low, high - 1))
                low = high
        power *= 10
    return bins


def cluster_sizes_svg(sizes: np.ndarray, clusters: np.ndarray, log: Optional[bool] = None) -> str:
    """SVG of the clusters by size: a bar per bin of size_bins, its height the clusters whose
    size falls in it. sizes: int (m,), every size that occurs; clusters: int (m,), how many
    clusters have it (pipeline/shown.Shown.size_values, size_clusters). log: log-scale counts;
    None: as candidates_histogram_svg decides."""
    sizes, clusters = np.asarray(sizes, np.int64), np.asarray(clusters, np.int64)
    bins = size_bins(int(sizes.max(initial=2)))
    counts = np.array([int(clusters[(sizes >= low) & (sizes <= high)].sum()) for low, high in bins], np.int64)
    axes, y_ticks, log = count_axes((0.0, float(len(bins))), counts, log, 1.08, 10.0)
    parts = [axes.grid_and_ticks([], y_ticks, decimal_label, count_label)]
    bars = []
    for place, ((low, high), count) in enumerate(zip(bins, counts.tolist())):
        x0, x1 = axes.x(place + 0.12), axes.x(place + 0.88)
        label = f"{low:,}" if low == high else f"{low:,}–{high:,}"
        parts.append(_text((x0 + x1) / 2, axes.bottom + 19.5, label, SMALL, "middle", EDGE))
        if count <= 0:
            continue
        y = axes.y(float(count))
        bars.append(f'<rect x="{x0:.3f}" y="{y:.3f}" width="{x1 - x0:.3f}" height="{axes.bottom - y:.3f}" '
                    f'data-count="{count}" data-sizes="{low}-{high}"/>')
        parts.append(_text((x0 + x1) / 2, y - 4, f"{count:,}", SMALL, "middle", GREY))
    parts.append(f'<g fill="{BLUE}">{"".join(bars)}</g>')
    if not counts.any():
        parts.append(_text((axes.left + axes.right) / 2, (axes.top + axes.bottom) / 2, "no clusters", 12.5,
                           "middle", GREY))
    parts.append(axes.spines())
    parts.append(axes.labels("documents in the cluster", "clusters" + (" (log scale)" if log else "")))
    parts.append(axes.title(f"{int(clusters.sum()):,} clusters by size, {int((sizes * clusters).sum()):,} documents "
                            "in them"))
    return _document("Clusters by size", parts)


def recall_by_similarity_svg(bin_edges, recall_per_bin: Union[Sequence[float], Mapping[str, Sequence[float]]],
                             label: str = "recall", *, pair_counts=None, threshold: Optional[float] = None,
                             bands: Optional[int] = None, rows: Optional[int] = None,
                             title: Optional[str] = None) -> str:
    """SVG of recall against similarity.

    bin_edges: float (k + 1,), ascending similarity bin edges.
    recall_per_bin: float (k,), recall in each bin (NaN where a bin has no true pairs), or a
        mapping {label: float (k,)} to compare several pipelines on one figure; each a line
        through its bins' centres, with a dot at each.
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
    x_limits = (float(edges[0]), float(edges[-1]))
    axes = Axes(x_limits, S_CURVE_LIMITS)
    x_ticks = linear_ticks(*x_limits)
    parts = [axes.grid_and_ticks(x_ticks, linear_ticks(0.0, 1.0), telling_label(x_ticks), decimal_label)]
    if pair_counts is not None:
        counts = np.asarray(pair_counts, dtype=np.float64)
        if counts.shape != centers.shape:
            raise ValueError(f"pair_counts has {counts.shape[0]} bins, bin_edges give {centers.shape[0]}")
        top = float(counts.max()) * 1.05 if counts.size and counts.max() > 0 else 1.0
        bars_axes = Axes(x_limits, (0.0, top))
        bars = [f'<rect x="{bars_axes.x(left):.3f}" y="{bars_axes.y(count):.3f}" '
                f'width="{bars_axes.x(right) - bars_axes.x(left):.3f}" '
                f'height="{bars_axes.bottom - bars_axes.y(count):.3f}" data-count="{int(count)}"/>'
                for left, right, count in zip(edges[:-1].tolist(), edges[1:].tolist(), counts.tolist()) if count > 0]
        # (behind the recall lines, which are drawn after them)
        parts.append(f'<g fill="{GREY}" fill-opacity="0.35" stroke="#FFFFFF" stroke-width="0.55">{"".join(bars)}</g>')
        parts.append(bars_axes.right_ticks(linear_ticks(0.0, top, whole=True), count_label, EDGE))
    legend: list[tuple[str, str]] = []
    for number, (name, listed) in enumerate(series.items()):
        values = np.asarray(listed, dtype=np.float64)
        if values.shape != centers.shape:
            raise ValueError(f"recall of {name!r} has {values.shape[0]} bins, bin_edges give {centers.shape[0]}")
        shown = ~np.isnan(values)
        colour = SERIES_COLOURS[number % len(SERIES_COLOURS)]
        parts.append(axes.curve(centers[shown], values[shown], colour, 1.8 * 100 / 72, f"recall-{number}"))
        parts.append(f'<g fill="{colour}">' + "".join(
            f'<circle cx="{axes.x(x):.2f}" cy="{axes.y(y):.2f}" r="2.4"/>'
            for x, y in zip(centers[shown].tolist(), values[shown].tolist())) + "</g>")
        legend.append((_legend_line(colour), escape(str(name))))
    if bands is not None and rows is not None:
        s = np.linspace(x_limits[0], x_limits[1], CURVE_POINTS)
        parts.append(axes.curve(s, collision_probability(s, bands, rows), ORANGE, 1.6 * 100 / 72, "s-curve",
                                dashes=DOTS))
        legend.append((_legend_line(ORANGE, dashes=DOTS), escape(f"S-curve P(s), b = {bands}, r = {rows}")))
    if threshold is not None:
        parts.append(axes.vertical(threshold, RED, "threshold"))
        legend.append((_legend_line(RED, dashes=DASHES), escape(f"threshold {threshold:g}")))
    parts.append(axes.spines(right=EDGE if pair_counts is not None else None))
    parts.append(axes.labels("exact Jaccard similarity", "recall",
                             right=("true pairs per bin", EDGE) if pair_counts is not None else None))
    parts.append(axes.title(title or "Recall by similarity"))
    # Recall is mostly near 1, so the legend goes low, where it hides bars rather than lines,
    # on a white ground that keeps it legible over what it does hide.
    parts.append(_legend(legend, low=True))
    return _document(title or "Recall by similarity", parts)


def count_axes(x_limits: tuple[float, float], counts: np.ndarray, log: Optional[bool], headroom: float,
               log_top: float) -> tuple["Axes", list[float], bool]:
    """The axes of a histogram of ``counts`` (int (k,), none negative), their y ticks and whether
    they are log-scale: where ``log``, or where None and the fullest bin holds over 100 times the
    emptiest non-empty one; up to 1.6 times the fullest bin on a log scale (at least
    ``log_top``), else ``headroom`` times it."""
    nonzero = counts[counts > 0]
    if log is None:
        log = bool(nonzero.size > 0 and nonzero.max() > 100 * nonzero.min())
    if log:
        axes = Axes(x_limits, (0.7, max(float(nonzero.max()) * 1.6 if nonzero.size else 10.0, log_top)), log=True)
        return axes, [10.0 ** k for k in range(0, int(math.floor(math.log10(axes.y_limits[1]))) + 1)], True
    top = float(nonzero.max()) * headroom if nonzero.size else 1.0
    return Axes(x_limits, (0.0, top)), linear_ticks(0.0, top, whole=bool(nonzero.size)), False


def count_label(value: float) -> str:
    """A count's tick label in at most five characters (800, 9,500, 120k, 2.5M), so that the
    axes' margins (PLOT_BOX) hold it."""
    # (from, unit, suffix): thousands are written out up to 9,999.
    for start, unit, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "k")):
        if abs(value) >= start:
            return f"{value / unit:.3g}{suffix}"
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


def inline(svg: str) -> str:
    """A figure's file text as an element of an HTML page: no XML declaration, and no namespace
    attribute (HTML gives ``<svg>`` its namespace)."""
    element = svg[svg.index("<svg"):]
    return element.replace(f' xmlns="{SVG_NAMESPACE}"', "", 1).rstrip("\n")


# --- ticks and their labels ---------------------------------------------------------------------


def linear_ticks(low: float, high: float, most: int = 7, whole: bool = False) -> list[float]:
    """Round tick values from ``low`` to ``high`` (both inside), at most ``most`` of them, a
    step of 1, 2, 2.5 or 5 times a power of ten; whole numbers only where ``whole`` (counts)
    and the range holds two."""
    if high <= low:
        return [low]
    raw = (high - low) / (most - 1)
    if whole and high - low >= 1:
        raw = max(raw, 1.0)
    power = 10.0 ** math.floor(math.log10(raw))
    multiples = (1, 2, 5, 10) if whole and power < 10 else (1, 2, 2.5, 5, 10)  # (no 2.5 counts)
    step = next(m * power for m in multiples if m * power >= raw * (1 - 1e-9))
    first = math.ceil(low / step - 1e-9)
    ticks = []
    k = first
    while k * step <= high * (1 + 1e-9) + 1e-12:
        ticks.append(round(k * step, 10))
        k += 1
    return ticks


def decimal_label(value: float) -> str:
    """A similarity or probability tick label: one decimal (0.0, 0.2, ..., 1.0)."""
    return f"{value:.1f}"


def telling_label(ticks: Sequence[float]):
    """The tick label of ``ticks`` with as few decimals as write each exactly, one at least
    (0.80, 0.85, ..., 1.00 where an axis starts at a threshold of 0.8)."""
    digits = next((d for d in range(1, 7) if all(abs(float(f"{v:.{d}f}") - v) < 1e-9 for v in ticks)), 6)
    return lambda value: f"{value:.{digits}f}"


# --- drawing ------------------------------------------------------------------------------------


class Axes:
    """Data to user units over PLOT_BOX: x from ``x_limits``, y from ``y_limits`` (upwards),
    on a log scale where ``log``."""

    def __init__(self, x_limits: tuple[float, float], y_limits: tuple[float, float], log: bool = False):
        self.x_limits, self.y_limits, self.log = x_limits, y_limits, log
        self.left, self.top, self.right, self.bottom = PLOT_BOX

    def x(self, value: Any) -> Any:  # (a float, or numpy float64 (k,): Axes.curve)
        low, high = self.x_limits
        return self.left + (value - low) / (high - low) * (self.right - self.left)

    def y(self, value: Any) -> Any:  # (as x; never an array on a log scale)
        low, high = self.y_limits
        if self.log:
            value, low, high = math.log10(value), math.log10(low), math.log10(high)
        return self.bottom - (value - low) / (high - low) * (self.bottom - self.top)

    def curve(self, x: np.ndarray, y: np.ndarray, colour: str, width: float, name: str,
              dashes: Optional[str] = None) -> str:
        """A polyline through the points (x, y) of the data, dashed where ``dashes`` gives the
        pattern."""
        points = " ".join(f"{a:.2f},{b:.2f}" for a, b in zip(self.x(x).tolist(), self.y(y).tolist()))
        dash = f' stroke-dasharray="{dashes}"' if dashes else ""
        return (f'<polyline data-curve="{name}" points="{points}" fill="none" stroke="{colour}" '
                f'stroke-width="{width:.2f}" stroke-linejoin="round" stroke-linecap="round"{dash}/>')

    def vertical(self, value: float, colour: str, name: str) -> str:
        """A dashed line across the axes at x = ``value``."""
        x = self.x(value)
        return (f'<line data-mark="{name}" x1="{x:.2f}" y1="{self.top:.2f}" x2="{x:.2f}" y2="{self.bottom:.2f}" '
                f'stroke="{colour}" stroke-width="1.67" stroke-dasharray="{DASHES}"/>')

    def grid_and_ticks(self, x_ticks: Sequence[float], y_ticks: Sequence[float], x_label, y_label) -> str:
        """Grid lines, tick marks and tick labels of the bottom and left axes."""
        out = [f'<g stroke="{GRID}" stroke-width="0.97">']
        out += [f'<line x1="{self.x(v):.2f}" y1="{self.top:.2f}" x2="{self.x(v):.2f}" y2="{self.bottom:.2f}"/>'
                for v in x_ticks]
        out += [f'<line x1="{self.left:.2f}" y1="{self.y(v):.2f}" x2="{self.right:.2f}" y2="{self.y(v):.2f}"/>'
                for v in y_ticks]
        out.append(f'</g><g stroke="{EDGE}" stroke-width="1.1">')
        out += [f'<line x1="{self.x(v):.2f}" y1="{self.bottom:.2f}" x2="{self.x(v):.2f}" y2="{self.bottom + 4.9:.2f}"/>'
                for v in x_ticks]
        out += [f'<line x1="{self.left - 4.9:.2f}" y1="{self.y(v):.2f}" x2="{self.left:.2f}" y2="{self.y(v):.2f}"/>'
                for v in y_ticks]
        out.append("</g>")
        out += [_text(self.x(v), self.bottom + 19.5, x_label(v), FONT_SIZE, "middle", EDGE) for v in x_ticks]
        out += [_text(self.left - 9, self.y(v) + 4.6, y_label(v), FONT_SIZE, "end", EDGE) for v in y_ticks]
        return "".join(out)

    def right_ticks(self, ticks: Sequence[float], label, colour: str) -> str:
        """Tick marks and labels of a second axis at the right, in ``colour``."""
        out = [f'<g stroke="{colour}" stroke-width="1.1">']
        out += [f'<line x1="{self.right:.2f}" y1="{self.y(v):.2f}" x2="{self.right + 4.9:.2f}" y2="{self.y(v):.2f}"/>'
                for v in ticks]
        out.append("</g>")
        out += [_text(self.right + 9, self.y(v) + 4.6, label(v), FONT_SIZE, "start", colour) for v in ticks]
        return "".join(out)

    def spines(self, right: Optional[str] = None) -> str:
        """The left and bottom axis lines, and the right one in colour ``right`` where given."""
        out = (f'<path d="M{self.left:.2f},{self.top:.2f} V{self.bottom:.2f} H{self.right:.2f}" fill="none" '
               f'stroke="{EDGE}" stroke-width="1.1"/>')
        if right is not None:
            out += (f'<line x1="{self.right:.2f}" y1="{self.top:.2f}" x2="{self.right:.2f}" y2="{self.bottom:.2f}" '
                    f'stroke="{right}" stroke-width="1.1"/>')
        return out

    def labels(self, x_label: str, y_label: str, right: Optional[tuple[str, str]] = None) -> str:
        """The axis labels (bottom, left, and optionally (text, colour) at the right)."""
        middle_x, middle_y = (self.left + self.right) / 2, (self.top + self.bottom) / 2
        out = _text(middle_x, HEIGHT - 6, x_label, FONT_SIZE, "middle")
        out += _text(14, middle_y, y_label, FONT_SIZE, "middle", rotate=True)
        if right is not None:
            out += _text(WIDTH - 8, middle_y, right[0], FONT_SIZE, "middle", right[1], rotate=True)
        return out

    def title(self, text: str) -> str:
        """The figure's title, bold, left-aligned above the axes."""
        return _text(self.left, self.top - 8, text, 15.3, "start", weight="bold")


def _text(x: float, y: float, text: str, size: float, anchor: str = "start", colour: str = INK,
          weight: Optional[str] = None, rotate: bool = False) -> str:
    """A line of text at (x, y) (its baseline; turned a quarter left about that point where
    ``rotate``), escaped."""
    extra = f' font-weight="{weight}"' if weight else ""
    if rotate:
        extra += f' transform="rotate(-90 {x:.2f} {y:.2f})"'
    fill = "" if colour == INK else f' fill="{colour}"'
    return (f'<text x="{x:.2f}" y="{y:.2f}" font-size="{size}" text-anchor="{anchor}"{fill}{extra}>'
            f"{escape(text)}</text>")


def _diamond(x: float, y: float, radius: float, colour: str) -> str:
    return (f'<path d="M{x:.2f},{y - radius:.2f} L{x + radius:.2f},{y:.2f} L{x:.2f},{y + radius:.2f} '
            f'L{x - radius:.2f},{y:.2f} Z" fill="{colour}"/>')


def _legend_line(colour: str, dashes: Optional[str] = None) -> str:
    dash = f' stroke-dasharray="{dashes}"' if dashes else ""
    return f'<line x1="0" y1="-4" x2="18" y2="-4" stroke="{colour}" stroke-width="2.2"{dash}/>'


def _curve_formula(bands: int, rows: int) -> str:
    """P(s) = 1 − (1 − s^r)^b, with its exponents raised (SVG markup)."""
    def raised(value: int) -> str:
        return f'<tspan dy="-5" font-size="8.5">{value}</tspan><tspan dy="5">'

    return f"P(s) = 1 − (1 − s{raised(rows)})</tspan>{raised(bands)}</tspan>"


def _legend(entries: list[tuple[str, str]], size: float = SMALL, low: bool = False) -> str:
    """A frameless legend at the upper left of the axes (the lower left where ``low``): (symbol
    drawn about (9, -4), label markup) per row."""
    left, top = PLOT_BOX[0] + 8, PLOT_BOX[1] + 18
    out = []
    if low:
        top = PLOT_BOX[3] - 10 - (len(entries) - 1) * (size + 6)
        # (a white ground, as wide as the longest label's characters at about 0.55 em each)
        longest = max((len(unescape(re.sub("<[^>]*>", "", label))) for _, label in entries), default=0)
        out.append(f'<rect x="{left - 4:.2f}" y="{top - size - 4:.2f}" width="{30 + longest * size * 0.55:.2f}" '
                   f'height="{len(entries) * (size + 6) + 4:.2f}" fill="#FFFFFF" fill-opacity="0.9"/>')
    for number, (symbol, label) in enumerate(entries):
        y = top + number * (size + 6)
        out.append(f'<g transform="translate({left:.2f} {y:.2f})">{symbol}'
                   f'<text x="26" y="0" font-size="{size}">{label}</text></g>')
    return "".join(out)


def _document(title: str, parts: list[str]) -> str:
    """The figure as an SVG file's text."""
    width, height = FIGURE_PIXELS
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<svg xmlns="{SVG_NAMESPACE}" width="{width}" height="{height}" viewBox="0 0 {WIDTH:g} {HEIGHT:g}" '
            f'role="img" aria-label="{escape(title)}" font-family=\'{FONT}\' fill="{INK}">\n'
            f"<title>{escape(title)}</title>\n"
            f'<rect width="{WIDTH:g}" height="{HEIGHT:g}" fill="#FFFFFF"/>\n'
            + "\n".join(parts) + "\n</svg>\n")
