"""How results show themselves in a notebook and in a terminal: a DedupResult
(``_repr_html_``: the run's counts as cards, then its largest clusters with the ids of their
kept and removed documents, as the run counted them, pipeline/shown.py), a Report (the same
cards, the parameters in a line, the time) and an Index (its path, documents, size and
parameters), each also as a few lines of text that fit a terminal. Small, self-contained HTML:
no script, no external style. Nothing here imports the package: the objects are read by the
names they share with report.json."""

from __future__ import annotations

import json
import re
import textwrap
from html import escape
from typing import Any, Mapping, Optional

from .stages import seconds_text

REMOVED_LISTED = 4  # removed ids named per cluster (the rest are counted)
SOURCES_LISTED = 5  # files and groups with most removed, shown in a notebook and the terminal

STYLE = ("<style>.gpudedup-cards{display:flex;gap:.5em;flex-wrap:wrap;margin:.3em 0}"
         ".gpudedup-card{border:1px solid #ccc;border-radius:4px;padding:.3em .7em;min-width:7em}"
         ".gpudedup-card b{display:block;font-size:1.3em}"
         ".gpudedup-clusters td,.gpudedup-clusters th{text-align:left;padding:.1em .6em}"
         ".gpudedup-note{color:#616e7c;margin:.2em 0}</style>")

# Characters that steer a terminal rather than print: C0 controls but the tab (ESC starts
# colours, hyperlinks and cursor moves, BEL rings it, a carriage return writes over the line),
# DEL and C1, the bidirectional embeddings, overrides and isolates (they reorder the text
# around them) and the line and paragraph separators.
_STEERING = "\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"  # (line feeds apart)
STEERING = re.compile(f"[\n{_STEERING}]")
STEERING_BUT_LINE_BREAKS = re.compile(f"[{_STEERING}]")


def terminal_safe(text: str, line_breaks: bool = False) -> str:
    """``text`` with each character that would steer a terminal (STEERING) written as its
    escape (``\\x1b``, ``\\u202e``); line_breaks: keep its line breaks (a document's text,
    which the views lay out in lines), else they are escaped too (a name on one line)."""
    pattern = STEERING_BUT_LINE_BREAKS if line_breaks else STEERING
    return pattern.sub(lambda found: ascii(found.group())[1:-1], text)


# The characters of an id a page shows (report.json and the tables hold it whole): an id of
# megabytes would make every page that names it as large.
ID_CHARS = 120


def shown_id(value) -> str:
    """An id as a page shows it: escaped, cut to ID_CHARS characters ("…"), and isolated from
    the text around it (<bdi>: a right-to-left override in an id stays inside it)."""
    text = str(value)
    return f"<bdi>{escape(text if len(text) <= ID_CHARS else text[:ID_CHARS] + '…')}</bdi>"


def summary_cards(report: Mapping) -> list[tuple[str, str]]:
    """(name, value) of the cards a result and its report show: documents in, kept, removed,
    clusters, verified pairs, and the run's time where the report has one."""
    r, documents = report["results"], report["input"]["documents"]
    cards = [("documents", f"{documents:,}"), ("kept", f"{r['kept_documents']:,}"),
             ("removed", f"{r['removed_documents']:,}"), ("clusters", f"{r['clusters']:,}"),
             ("verified pairs", f"{r['verified_pairs']:,}")]
    if report.get("total_seconds") is not None:
        cards.append(("seconds", seconds_shown(report["total_seconds"])))
    return cards


def cards_html(cards: list[tuple[str, str]]) -> str:
    """Cards of (name, value): the value large, its name under it."""
    return ('<div class="gpudedup-cards">'
            + "".join(f'<div class="gpudedup-card"><b>{escape(value)}</b>{escape(name)}</div>' for name, value in cards)
            + "</div>")


def result_html(result: Any) -> str:
    """A DedupResult as HTML: documents in, kept, removed, clusters, verified pairs (summary_cards,
    without the time: report.html's); the largest clusters (number, size, kept ids, removed ids)."""
    cards = [card for card in summary_cards(result.report) if card[0] != "seconds"]
    out = [STYLE, '<div class="gpudedup-result">', cards_html(cards)]
    out.append(sources_html(result.report))
    rows = largest_cluster_rows(result)
    if rows:
        out.append('<table class="gpudedup-clusters"><thead><tr><th>cluster</th><th>size</th><th>kept</th>'
                   "<th>removed</th></tr></thead><tbody>")
        for number, size, kept, removed, more in rows:
            listed = ", ".join(shown_id(i) for i in removed) + (f" and {more:,} more" if more else "")
            out.append(f"<tr><td>{number:,}</td><td>{size:,}</td><td>{', '.join(map(shown_id, kept))}</td>"
                       f"<td>{listed}</td></tr>")
        out.append("</tbody></table>")
        out.append('<p class="gpudedup-note">result.cluster(number) shows a cluster\'s texts side by side; '
                   "result.removed_rows() the removed rows.</p>")
    else:
        out.append("<p>No near-duplicates were found: every document was kept.</p>")
    out.append("</div>")
    return "".join(out)


def group_label(row: Mapping) -> str:
    """A row of report.json's groups as it is named where shown: its value, "(null)" for the
    null group, "other (N groups)" for the groups folded into one row."""
    if row.get("other"):
        return f"other ({row.get('groups', 0):,} groups)"
    value = row.get("group")
    return "(null)" if value is None else value if isinstance(value, str) else json.dumps(value)


def source_rows(report: Mapping, listed: int = SOURCES_LISTED) -> tuple[str, list[tuple[str, list[str]]]]:
    """(what the rows are, [(name, [documents, kept, removed, within, across])]) of the files,
    or of the groups where the report counts by a column, with most removed (the first
    ``listed``): what a notebook and the terminal show of where duplicates come from."""
    groups = report.get("groups")
    if groups:
        rows = [(group_label(row), row) for row in groups["rows"]]
        kind = f"by {groups['field']}"
    else:
        files = [f for f in report["input"].get("files", []) if "removed" in f]
        rows = [(f["path"], f) for f in sorted(files, key=lambda f: -f["removed"])]
        kind = "by file"
    return kind, [(name, [f"{row[key]:,}" for key in ("documents", "kept", "removed", "removed_within",
                                                        "removed_across")]) for name, row in rows[:listed]]


SOURCE_HEADINGS = ("documents", "kept", "removed", "of the same", "of another")


def sources_html(report: Mapping) -> str:
    """source_rows as a small table ('' where there is nothing to show: one input, no column)."""
    kind, rows = source_rows(report)
    if len(rows) < 2 and not report.get("groups"):
        return ""
    head = "".join(f"<th>{escape(name)}</th>" for name in SOURCE_HEADINGS)
    body = "".join(f"<tr><td>{escape(name)}</td>" + "".join(f"<td>{v}</td>" for v in values) + "</tr>"
                   for name, values in rows)
    return (f'<table class="gpudedup-clusters gpudedup-sources"><caption>Removed {escape(kind)} (most first)</caption>'
            f"<thead><tr><th></th>{head}</tr></thead><tbody>{body}</tbody></table>")


def parameters_line(parameters: Mapping) -> str:
    """The parameters results depend on, in one line: threshold, shingles, bands × rows, seed,
    and keep where it is one (an index's runs keep "first")."""
    p = parameters
    unit = {"char": "character"}.get(str(p["shingle"]), str(p["shingle"]))  # word, character, token
    return (f"threshold {p['threshold']}, {p['ngram']}-{unit} shingles, "
            f"{p['bands']} bands × {p['rows']} rows of {p['num_perm']} permutations, seed {p['seed']}"
            + (f", keep {p['keep']}" if "keep" in p else ""))


def report_html(report: Mapping) -> str:
    """A Report as HTML: summary_cards, the parameters in a line, where its outputs are."""
    out = [STYLE, '<div class="gpudedup-report">', cards_html(summary_cards(report)), sources_html(report),
           f'<p class="gpudedup-note">{escape(parameters_line(report["parameters"]))}; '
           f'backend {escape(short_backend(report.get("backend", "")))}.</p>']
    written = report.get("output")
    if written:
        out.append(f'<p class="gpudedup-note">Written to <code>{escape(str(written["directory"]))}</code> '
                   "(report.html there has the figures and the largest clusters).</p>")
    out.append("</div>")
    return "".join(out)


def report_text(report: Mapping) -> str:
    """A Report in a few lines of at most 80 columns: the cards, the parameters, the time."""
    cards = dict(summary_cards(report))
    lines = [f"Report: {cards['documents']} documents, {cards['kept']} kept, {cards['removed']} removed",
             f"        {cards['clusters']} clusters, {cards['verified pairs']} verified pairs"
             + (f", {cards['seconds']} s" if "seconds" in cards else ""),
             *wrapped(parameters_line(report["parameters"]), "        ")]
    if report.get("output"):
        lines.append(f"        written to {report['output']['directory']}")
    lines.append("        (report[\"results\"], report.as_dict(): report.json)")
    return "\n".join(lines)


def index_html(overview: Mapping) -> str:
    """An Index as HTML (overview: Index's path, documents, segments, bytes, generation,
    verification and parameters)."""
    o = overview
    cards = [("documents", f"{o['documents']:,}"), ("segments", f"{o['segments']:,}"),
             ("size", bytes_shown(o["bytes"])), ("generation", f"{o['generation']:,}")]
    return (f'{STYLE}<div class="gpudedup-index"><p><b>Index</b> <code>{escape(str(o["path"]))}</code></p>'
            f"{cards_html(cards)}<p class=\"gpudedup-note\">{escape(parameters_line(o['parameters']))}; "
            f"verification by {escape(str(o['verification']))}.</p></div>")


def index_text(overview: Mapping) -> str:
    """An Index in a few lines of at most 80 columns (index_html's overview)."""
    o = overview
    return "\n".join([f"Index({o['path']})",
                      f"  {o['documents']:,} documents in {o['segments']:,} "
                      f"segment{'' if o['segments'] == 1 else 's'}, {bytes_shown(o['bytes'])}, "
                      f"generation {o['generation']:,}",
                      *wrapped(parameters_line(o["parameters"]) + f"; verification by {o['verification']}", "  ")])


def wrapped(text: str, indent: str, width: int = 80) -> list[str]:
    """``text`` in lines of at most ``width`` columns, each after ``indent``."""
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent)


def seconds_shown(value: float) -> str:
    """Seconds as the terminal and report.html show them (stages.seconds_text)."""
    return seconds_text(value)


def bytes_shown(count: Optional[int]) -> str:
    """A size in bytes, KiB, MiB, GiB or TiB."""
    value, units = float(count or 0), ["bytes", "KiB", "MiB", "GiB", "TiB"]
    unit = 0
    while value >= 1024 and unit < len(units) - 1:
        value /= 1024
        unit += 1
    return f"{int(value):,} bytes" if unit == 0 else f"{value:,.1f} {units[unit]}"


def short_backend(backend: str) -> str:
    """The backend's name without its details in parentheses."""
    return backend.split(" (")[0]


def largest_cluster_rows(result: Any) -> list[tuple[int, int, list, list, int]]:
    """(cluster, size, kept ids, the first REMOVED_LISTED removed ids, how many more were removed)
    for each of the run's largest clusters, largest first (Outcome.shown)."""
    shown = result._outcome.shown
    members = shown.members
    ids = result._ids_of(members.docs).to_pylist()
    rows = []
    for number, size in zip(shown.numbers.tolist(), shown.sizes.tolist()):
        mine = [(i, k) for i, c, k in zip(ids, members.cluster.tolist(), members.keep.tolist()) if c == number]
        kept = [i for i, k in mine if k]
        removed = [i for i, k in mine if not k]
        listed = removed[:REMOVED_LISTED]
        rows.append((number, size, kept, listed, size - len(kept) - len(listed)))
    return rows
