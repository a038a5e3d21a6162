"""How an evaluation shows itself: the cells of a setting's row (shared by the terminal table,
output.format_table, and the notebook's tables), the line that names a recommendation, a repr
that fits a terminal and HTML for notebooks (``Evaluation._repr_html_``): the counts as cards
and one small table per ground truth with its recommended setting marked, in the style of a
result's display (display.py). Self-contained HTML: no script, no external style."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Optional

from ..display import STYLE
from ..core.lsh import similarity_text
from .grid import spec_label
from .scoring import Recommendation, SettingResult, criterion_field

if TYPE_CHECKING:
    from .run import Evaluation

# The columns of a setting's row in the terminal table (after its mark).
TABLE_COLUMNS = ["#", "shingle", "t", "K", "b x r", "true", "cand/doc", "cand P", "cand R",
                 "ver P", "ver R", "F1", "clus R", "seconds", "peak MB"]
# A notebook table is one ground truth's, whose shingles, threshold and true pairs its heading
# names: those columns are left out of its rows.
HTML_COLUMNS = [name for name in TABLE_COLUMNS if name not in ("shingle", "t", "true")]
MARK = "\u2605"  # a black star: the recommended row of a notebook table

SETTINGS_STYLE = ("<style>.gpudedup-settings td,.gpudedup-settings th{text-align:right;padding:.1em .6em}"
                  ".gpudedup-settings tr.gpudedup-recommended{font-weight:bold;background:rgba(0,114,178,.12)}"
                  ".gpudedup-truth{margin:.6em 0 .2em}</style>")


def number(value: Optional[float], digits: int = 4) -> str:
    """A ratio in a cell: '-' where it is undefined (None)."""
    return "-" if value is None else f"{value:.{digits}f}"


def table_cells(index: int, r: SettingResult) -> list[str]:
    """The cells of one setting's row, in TABLE_COLUMNS order."""
    s = r.setting
    banding = f"{r.bands}x{r.rows}" + ("" if s.bands is not None else " (auto)")
    return [str(index), spec_label(s.spec()), similarity_text(s.threshold), str(s.num_perm), banding, str(r.true_pairs),
            f"{r.candidates_per_document:.2f}", number(r.candidate_precision), number(r.candidate_recall),
            number(r.verified_precision), number(r.verified_recall), number(r.verified_f1),
            number(r.cluster_recall), f"{r.seconds:.3f}", f"{r.peak_rss_mb:.0f}"]


def setting_text(r: SettingResult) -> str:
    """'K=64 b x r=auto -> 9x7': a setting within its ground truth (its shingles and threshold
    named by the truth), with the banding chosen where it was left to the rule."""
    s = r.setting
    return (f"K={s.num_perm} b x r={s.banding_label}"
            + ("" if s.bands is not None else f" -> {r.bands}x{r.rows}"))


def recommendation_line(recommendation: Recommendation) -> str:
    """The line of format_table that names the recommended setting of one ground truth."""
    name = criterion_field(recommendation.criterion)[0]
    return (f"recommended for {recommendation.criterion} at {recommendation.label} "
            f"({name} = {number(recommendation.value)}, {recommendation.result.seconds:.3f} s): "
            f"#{recommendation.index} {setting_text(recommendation.result)}")


def evaluation_text(evaluation: Evaluation) -> str:
    """Evaluation.__repr__: the counts, then a line per ground truth naming its recommended
    setting (lines of about 70 characters), and how many combinations the grid skipped."""
    chosen = evaluation.recommended()
    counted = f"{len(evaluation.results)} settings on {evaluation.corpus.get('documents', 0):,} documents"
    name = criterion_field(evaluation.criterion)[0]
    lines = [f"  {r.label}: #{r.index} {setting_text(r.result)}, {name} {number(r.value)}, "
             f"{r.result.seconds:.3f} s" for r in chosen]
    if evaluation.notes:
        lines.append(f"  ({len(evaluation.notes)} combinations of the grid skipped: .notes)")
    if not chosen:
        return f"Evaluation({counted})" if not lines else "\n".join([f"Evaluation({counted}", *lines, ")"])
    return "\n".join([f"Evaluation({counted}; recommended for {evaluation.criterion}, per threshold:", *lines, ")"])


def evaluation_html(evaluation: Evaluation) -> str:
    """Evaluation._repr_html_: documents, settings, ground truths and seconds as cards; then per
    ground truth (shingle spec and threshold) a table of its settings with the recommended row
    marked (MARK, class gpudedup-recommended)."""
    chosen = evaluation.recommended()
    cards = [("documents", evaluation.corpus.get("documents", 0)), ("settings", len(evaluation.results)),
             ("ground truths", len(chosen))]
    out = [STYLE, SETTINGS_STYLE, '<div class="gpudedup-evaluation"><div class="gpudedup-cards">']
    out += [f'<div class="gpudedup-card"><b>{value:,}</b>{escape(name)}</div>' for name, value in cards]
    out.append("</div>")
    if not chosen:
        out.append("<p>No settings were evaluated.</p></div>")
        return "".join(out)
    field = criterion_field(evaluation.criterion)[0]
    out.append(f"<p>{MARK} recommended for {escape(evaluation.criterion)} ({escape(field)}; ties go to the faster) "
               "per threshold: each threshold is scored against its own exact pairs.</p>")
    keep = [TABLE_COLUMNS.index(name) for name in HTML_COLUMNS]
    head = "".join(f"<th>{escape(name)}</th>" for name in HTML_COLUMNS)
    for recommendation in chosen:
        out.append(f'<p class="gpudedup-truth"><b>{escape(recommendation.label)}</b>: '
                   f"{recommendation.result.true_pairs:,} true pairs</p>")
        out.append(f'<table class="gpudedup-settings"><thead><tr><th></th>{head}</tr></thead><tbody>')
        for index in recommendation.indices:
            cells = table_cells(index, evaluation.results[index])
            marked = index == recommendation.index
            out.append(('<tr class="gpudedup-recommended">' if marked else "<tr>")
                       + f"<td>{MARK if marked else ''}</td>"
                       + "".join(f"<td>{escape(cells[j])}</td>" for j in keep) + "</tr>")
        out.append("</tbody></table>")
    out.append("</div>")
    return "".join(out)
