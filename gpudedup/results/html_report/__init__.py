"""report.html: a self-contained page describing one run.

    from gpudedup.results.html_report import render
    html = render(result)          # a str: one HTML page, nothing outside it

What it shows, top to bottom: the summary cards; where every record went, with what under the
inputs was not read, by name; the counts; the figures (the S-curve, the candidate pairs by exact
Jaccard and the clusters by size: SVG, svg_figures.py, inline in the page); example documents
side by side (the largest clusters, the pairs just above the threshold, a random sample of
clusters: clusters.py); the time and memory of every stage; and, folded, the parameters with
what each means and why b and r were chosen (sections.py). It renders what the run computed
(the report, and Outcome.shown: pipeline/shown.py) and reads the texts and ids of the few
documents it shows. Inline CSS only: no scripts, no fonts, no links, no external resources.
``DedupResult.write`` writes it as report.html, with the figures as SVG files beside it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional

from .. import svg_figures
from ...display import shown_id
from . import sections
from .clusters import (NOT_STORED, cluster_sections, document, exact_jaccard, highlight, marked_excerpt,
                       texts_read)
from .style import CSS

__all__ = ["CSS", "FIGURE_FILES", "NOT_STORED", "document", "exact_jaccard", "highlight", "marked_excerpt", "render",
           "report_figures", "shown_id", "texts_read", "write_report"]

# name -> file written beside report.html
FIGURE_FILES = {"s_curve": "s_curve.svg", "candidates_histogram": "candidates_histogram.svg",
                "cluster_sizes": "cluster_sizes.svg"}


def report_figures(result) -> dict[str, str]:
    """The report's figures as SVG files' text, {name: svg} (names as in FIGURE_FILES)."""
    p, r = result.report["parameters"], result.report["results"]
    bands, rows, threshold = p["bands"], p["rows"], p["threshold"]
    # Counted by the run where the pairs and clusters lay (pipeline/shown.py); the rest of the
    # pairs checked were rejected.
    shown = result._outcome.shown
    rejected = r["exactly_checked_pairs"] - r["verified_pairs"]
    return {
        "s_curve": svg_figures.s_curve_svg(bands, rows, threshold),
        "candidates_histogram": svg_figures.candidates_histogram_svg(bands, rows, threshold, shown.jaccard_counts,
                                                                     rejected),
        "cluster_sizes": svg_figures.cluster_sizes_svg(shown.size_values, shown.size_clusters),
    }


def render(result, figures: Optional[Mapping[str, str]] = None) -> str:
    """The HTML report of a DedupResult, as one self-contained page.

    figures: SVG text by name (``report_figures``), shown inline; None draws them now, and an
    empty mapping leaves the figures out.
    """
    if figures is None:
        figures = report_figures(result)
    report = result.report
    parts = [
        sections.head(report),
        sections.summary(report),
        sections.balance(report, result.skipped_records),
        sections.sources(report),
        sections.counts(report),
        sections.figures_section(report, figures, svg_figures.inline),
        cluster_sections(result),
        sections.stages(report),
        sections.parameters(report),
        sections.footer(report, [FIGURE_FILES[name] for name in figures]),
    ]
    return "".join(parts) + "</main>\n</body>\n</html>\n"


def write_report(result, directory: Path, figures: Mapping[str, str]) -> None:
    """Write report.html and the figures' SVG files (``report_figures``; FIGURE_FILES) into
    ``directory``."""
    for name, svg in figures.items():
        (directory / FIGURE_FILES[name]).write_text(svg, encoding="utf-8")
    (directory / "report.html").write_text(render(result, figures), encoding="utf-8")
