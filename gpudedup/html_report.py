"""report.html: a self-contained page describing one run.

    from gpudedup.html_report import render
    html = render(result)          # a str: one HTML page, nothing outside it

What it shows: the parameters and why b and r were chosen, the counts, the S-curve and the
candidate pairs by exact Jaccard (SVG figures, svg_figures.py, inline in the page), the largest clusters with example documents side by side, and the time and memory
of every stage. Inline CSS only: no scripts, no fonts, no links, no external resources.
``DedupResult.write`` writes it as report.html, with the figures as SVG files beside it.
"""

from __future__ import annotations

import difflib
import html
import math
import re
from pathlib import Path
from typing import Mapping, Optional

import numpy as np
import pyarrow as pa

from .core.lsh import collision_probability, steepest_similarity
from .core.shingling import ShingleSpec, shingle_sets
from .engine.shown import EXAMPLES_PER_CLUSTER, MEMBERS_LISTED, examples_of
from .stages import seconds_text
from .io.fields import content_of
from . import svg_figures

# name -> file written beside report.html
FIGURE_FILES = {"s_curve": "s_curve.svg", "candidates_histogram": "candidates_histogram.svg"}

EXCERPT_CHARS = 600
NOT_READ_LISTED = 1000  # entries under the inputs not read, listed by name (all are in report.json)

PARAMETER_NOTES = {
    "threshold": "pairs whose exact Jaccard similarity is at least this are near-duplicates",
    "shingle": "what a shingle is made of: words or characters (after normalisation)",
    "ngram": "units per shingle",
    "num_perm": "MinHash permutation budget K",
    "max_fn": "target when b and r are chosen: largest miss probability at the threshold",
    "low": "target when b and r are chosen: a similarity whose pairs should rarely be candidates",
    "max_fp": "target when b and r are chosen: largest chance that a pair at low becomes a candidate",
    "bands": "LSH bands b",
    "rows": "signature rows per band r",
    "permutations_computed": "b × r: the permutations actually computed",
    "seed": "seed of the permutations",
    "keep": "which document of a cluster is kept",
    "bucket_window": "each document of an LSH bucket is paired with at most this many that follow it",
    "batch_bytes": "text per batch (memory, not results)",
    "batch_rows": "rows per batch at most (memory, not results)",
}

STAGE_NOTES = {
    "read": "reading the input",
    "signature_pass": "shingling, MinHash signatures and band keys, batch by batch",
    "shingle": "shingle hashing",
    "signatures": "MinHash signatures",
    "band_keys": "band keys",
    "candidates": "pairs that share a band key; their signature filter",
    "verify": "exact Jaccard of the pairs the signature filter passed",
    "cluster": "connected components; the kept document of each",
    "write": "writing the outputs (before report.json)",
}


# --- public API ---------------------------------------------------------------------------------


def report_figures(result) -> dict[str, str]:
    """The report's figures as SVG files' text, {name: svg} (names as in FIGURE_FILES)."""
    p, r = result.report["parameters"], result.report["results"]
    bands, rows, threshold = p["bands"], p["rows"], p["threshold"]
    # Counted by the run over the verified pairs where they lay (engine/shown.py); the rest of
    # those checked were rejected.
    counts = result.outcome.shown.jaccard_counts
    rejected = r["exactly_checked_pairs"] - r["verified_pairs"]
    return {
        "s_curve": svg_figures.s_curve_svg(bands, rows, threshold),
        "candidates_histogram": svg_figures.candidates_histogram_svg(bands, rows, threshold, counts, rejected),
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
        _head(report),
        _summary(report),
        _parameters(report),
        _counts(report),
        _figures(report, figures),
        _clusters(result),
        _stages(report),
        _footer(report, figures),
    ]
    return "".join(parts) + "</main>\n</body>\n</html>\n"


def write_report(result, directory, figures: Optional[Mapping[str, str]] = None) -> list[Path]:
    """Write report.html and the figures' SVG files (s_curve.svg, candidates_histogram.svg)
    into ``directory``; returns the paths written."""
    directory = Path(directory)
    if figures is None:
        figures = report_figures(result)
    written = []
    for name, svg in figures.items():
        path = directory / FIGURE_FILES[name]
        path.write_text(svg, encoding="utf-8")
        written.append(path)
    path = directory / "report.html"
    path.write_text(render(result, figures), encoding="utf-8")
    written.append(path)
    return written


# --- figures ------------------------------------------------------------------------------------


def _figures(report: dict, figures: Mapping[str, str]) -> str:
    p, r = report["parameters"], report["results"]
    bands, rows, threshold = p["bands"], p["rows"], p["threshold"]
    at_threshold = float(collision_probability(threshold, bands, rows))
    steepest = steepest_similarity(bands, rows)
    filtered = r["candidate_pairs"] - r["exactly_checked_pairs"]
    captions = {
        "s_curve": (
            "LSH S-curve",
            f"The chance P(s) = 1 − (1 − s<sup>{rows}</sup>)<sup>{bands}</sup> that a pair of Jaccard "
            f"similarity s shares at least one of the {bands:,} band keys and becomes a candidate. "
            f"At the threshold {_num(threshold)} it is {at_threshold:.4f}: "
            f"{_percent(1 - at_threshold)} of the pairs right at the threshold are missed, fewer above it. "
            f"The curve is steepest at s = {steepest:.3f} = ((r − 1)/(b·r − 1))<sup>1/r</sup>.",
        ),
        "candidates_histogram": (
            "Verified pairs by exact Jaccard",
            f"The {r['exactly_checked_pairs']:,} candidate pairs checked exactly"
            + (f" (of {r['candidate_pairs']:,} candidates; the signature filter dropped {filtered:,} "
               "whose signatures made J ≥ threshold implausible)" if filtered else "")
            + f", with the S-curve on the right axis. The {r['verified_pairs']:,} pairs at or above "
            f"{_num(threshold)} (blue) were verified and are shown by their exact Jaccard. The others were "
            "rejected by the exact check, which stops as soon as a pair cannot reach the threshold (its set "
            "sizes differ too much, or too many shingles went unmatched), so their Jaccard is not computed.",
        ),
    }
    if not figures:
        return ""
    out = ['<section id="figures">\n<h2>Figures</h2>\n<div class="figures">\n']
    for name, (title, caption) in captions.items():
        if name in figures:
            out.append(f"<figure>\n{svg_figures.inline(figures[name])}\n"
                       f"<figcaption><strong>{_e(title)}.</strong> {caption}</figcaption>\n</figure>\n")
    out.append("</div>\n</section>\n")
    return "".join(out)


# --- page parts ---------------------------------------------------------------------------------


CSS = """
:root { --ink: #1f2933; --muted: #616e7c; --line: #e4e7eb; --soft: #f5f7fa; --blue: #0072b2;
        --orange: #e69f00; --red: #d55e00; --kept: #e3f2e8; --kept-line: #2f855a; }
* { box-sizing: border-box; }
html { -webkit-text-size-adjust: 100%; }
body { margin: 0; background: #fff; color: var(--ink);
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", "DejaVu Sans", Arial, sans-serif; }
main { max-width: 1120px; margin: 0 auto; padding: 32px 28px 48px; }
h1 { font-size: 28px; line-height: 1.2; margin: 0 0 4px; letter-spacing: -0.01em; }
h2 { font-size: 20px; margin: 40px 0 12px; padding-bottom: 6px; border-bottom: 2px solid var(--line); }
h3 { font-size: 16px; margin: 22px 0 8px; }
p { margin: 8px 0; }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace; font-size: 0.9em; }
code { background: var(--soft); padding: 1px 5px; border-radius: 4px; }
.sub { color: var(--muted); margin: 0; }
.note { background: #fff8e6; border-left: 4px solid var(--orange); padding: 8px 12px; border-radius: 4px; }
details.note { margin: 12px 0; }
details.note summary { cursor: pointer; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(150px, 1fr)); gap: 12px; margin: 24px 0 8px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; background: var(--soft); }
.card .value { font-size: 26px; font-weight: 700; font-variant-numeric: tabular-nums; line-height: 1.2; }
.card .label { color: var(--muted); font-size: 13px; text-transform: uppercase; letter-spacing: 0.04em; }
.card .detail { color: var(--muted); font-size: 13px; }
.grid2 { display: grid; grid-template-columns: repeat(auto-fit, minmax(380px, 1fr)); gap: 8px 32px; align-items: start; }
table { border-collapse: collapse; width: 100%; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: 600; padding: 4px 0 6px; }
th, td { padding: 6px 10px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
thead th { font-size: 13px; color: var(--muted); font-weight: 600; border-bottom: 2px solid var(--line); }
td.num, th.num { text-align: right; white-space: nowrap; }
td.key { white-space: nowrap; font-weight: 600; }
td.why { color: var(--muted); font-size: 13.5px; }
tr.part td { color: var(--muted); font-size: 13.5px; }
tr.part td:first-child { padding-left: 28px; }
tr.total td { font-weight: 700; border-top: 2px solid var(--line); }
.bar { height: 10px; background: var(--blue); border-radius: 2px; min-width: 1px; }
.bar.busy { background: #9aa5b1; }
.rule { background: var(--soft); border-radius: 6px; padding: 10px 14px; }
.figures { display: grid; grid-template-columns: 1fr; gap: 28px; }
figure { margin: 0; max-width: 880px; }
figure svg { display: block; width: 100%; height: auto; border: 1px solid var(--line); border-radius: 6px; }
figcaption { color: var(--muted); font-size: 13.5px; margin-top: 6px; }
.cluster { border: 1px solid var(--line); border-radius: 8px; padding: 4px 18px 16px; margin: 18px 0; }
.cluster h3 { margin-top: 14px; }
.ids { color: var(--muted); font-size: 13.5px; overflow-wrap: anywhere; }
.docs { display: grid; grid-template-columns: repeat(auto-fit, minmax(280px, 1fr)); gap: 12px; margin-top: 10px;
        align-items: start; }
.doc { border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; background: #fff; min-width: 0; }
.doc.kept { background: var(--kept); border-color: var(--kept-line); }
.doc .head { font-size: 13px; margin-bottom: 6px; overflow-wrap: anywhere; }
.doc .tag { display: inline-block; font-size: 11.5px; font-weight: 700; text-transform: uppercase; letter-spacing: 0.05em;
            padding: 1px 7px; border-radius: 10px; margin-right: 6px; color: #fff; background: var(--red); }
.doc.kept .tag { background: var(--kept-line); }
.doc .sim { color: var(--muted); font-size: 13px; margin-bottom: 6px; }
.doc .text { white-space: pre-wrap; overflow-wrap: anywhere; font-size: 13.5px; line-height: 1.45; margin: 0;
             font-family: Georgia, "Times New Roman", "DejaVu Serif", serif; }
mark { background: #ffe08a; padding: 0 1px; border-radius: 2px; }
footer { margin-top: 40px; color: var(--muted); font-size: 13px; border-top: 1px solid var(--line); padding-top: 12px; }
@media print { main { max-width: none; padding: 0; } .cluster, figure { break-inside: avoid; } }
"""


def _head(report: dict) -> str:
    i = report["input"]
    files = i.get("files", [])
    source = ", ".join(_e(f["path"]) for f in files[:3])
    if len(files) > 3:
        source += f" and {len(files) - 3:,} more files"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>gpudedup report: {i['documents']:,} documents, "
        f"{report['results']['removed_documents']:,} removed</title>\n"
        f"<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        "<header>\n<h1>Near-duplicate report</h1>\n"
        f'<p class="sub">gpudedup {_e(report.get("gpudedup_version", ""))} · '
        f"{_e(_short_backend(report.get('backend', '')))}"
        + (f" · input: {source}" if source else "") + "</p>\n</header>\n"
    )


def _summary(report: dict) -> str:
    i, r, p = report["input"], report["results"], report["parameters"]
    documents = i["documents"]
    cards = [
        ("Documents", f"{documents:,}", f"{_bytes(i.get('text_bytes', 0))} of text"),
        ("Clusters", f"{r['clusters']:,}", f"{r['documents_in_clusters']:,} documents in them"),
        ("Removed", f"{r['removed_documents']:,}", f"{_percent(_ratio(r['removed_documents'], documents))} of the documents"),
        ("Kept", f"{r['kept_documents']:,}", "written to deduplicated"),
        ("Verified pairs", f"{r['verified_pairs']:,}",
         f"Jaccard ≥ {_num(p['threshold'])} of {r['candidate_pairs']:,} candidates"),
    ]
    if report.get("total_seconds") is not None:
        cards.append(("Time", f"{_seconds(report['total_seconds'])} s",
                      f"peak memory {_mib(report.get('peak_rss_mb'))}"))
    out = ['<section class="cards">\n']
    for label, value, detail in cards:
        out.append(f'<div class="card"><div class="label">{_e(label)}</div><div class="value">{value}</div>'
                   f'<div class="detail">{_e(detail)}</div></div>\n')
    out.append("</section>\n")
    return "".join(out)


def _parameters(report: dict) -> str:
    p = report["parameters"]
    bands, rows, threshold = p["bands"], p["rows"], p["threshold"]
    at_threshold = float(collision_probability(threshold, bands, rows))
    at_half = float(collision_probability(min(0.5, threshold), bands, rows))
    unit = {"word": "words", "token": "token ids"}.get(p.get("shingle"), "characters")
    rule = p.get("banding_rule", "")
    if rule == "given":
        rule = "given as parameters (--bands and --rows), not chosen"
    out = [
        '<section id="parameters">\n<h2>Parameters and why</h2>\n',
        f"<p>Two documents are near-duplicates when the exact Jaccard similarity of their sets of "
        f"{_e(p.get('ngram'))}-{_e(unit[:-1])} shingles is at least <strong>{_num(threshold)}</strong>. "
        f"Candidates come from LSH with <strong>{bands:,} bands × {rows:,} rows</strong> "
        f"({p.get('permutations_computed', bands * rows):,} of the {p.get('num_perm', bands * rows):,} "
        f"MinHash permutations computed); every candidate is then checked exactly.</p>\n",
        f'<p class="rule"><strong>Why {bands:,} × {rows:,}:</strong> {_e(rule)}. '
        f"A pair at the threshold becomes a candidate with probability {at_threshold:.4f}"
        + (f", a pair at 0.5 with {at_half:.4f}" if threshold > 0.5 else "")
        + f"; the S-curve is steepest at s = {steepest_similarity(bands, rows):.3f}.</p>\n",
        '<table class="params">\n<thead><tr><th>parameter</th><th class="num">value</th><th>meaning</th></tr></thead>\n<tbody>\n',
    ]
    for key, value in p.items():
        if key == "banding_rule":
            continue
        out.append(f'<tr><td class="key mono">{_e(key)}</td><td class="num">{_value(key, value)}</td>'
                   f'<td class="why">{_e(PARAMETER_NOTES.get(key, ""))}</td></tr>\n')
    out.append("</tbody>\n</table>\n</section>\n")
    return "".join(out)


def _counts(report: dict) -> str:
    i, r = report["input"], report["results"]
    files = i.get("files", [])
    skipped = i.get("skipped_files", [])
    input_rows = [
        ("documents", f"{i['documents']:,}"),
        ("files", f"{len(files):,}"),
        ("text", _bytes(i.get("text_bytes", 0), exact=True)),
        ("null texts", f"{i.get('null_texts', 0):,}"),
        ("empty documents (no shingles)", f"{i.get('empty_documents', 0):,}"),
        ("entries not read", f"{len(skipped):,}"),
    ]
    result_rows = [
        ("candidate pairs (share a band key)", r["candidate_pairs"]),
        ("exactly checked (after the signature filter)", r["exactly_checked_pairs"]),
        ("verified pairs (Jaccard ≥ threshold)", r["verified_pairs"]),
        ("clusters", r["clusters"]),
        ("documents in clusters", r["documents_in_clusters"]),
        ("removed documents", r["removed_documents"]),
        ("kept documents", r["kept_documents"]),
    ]
    known = {"candidate_pairs", "exactly_checked_pairs", "verified_pairs", "clusters",
             "documents_in_clusters", "removed_documents", "kept_documents"}
    result_rows += [(key.replace("_", " "), value) for key, value in r.items() if key not in known]
    out = ['<section id="counts">\n<h2>Counts</h2>\n<div class="grid2">\n',
           "<table>\n<caption>Input</caption>\n<tbody>\n"]
    out += [f'<tr><td>{_e(k)}</td><td class="num">{v}</td></tr>\n' for k, v in input_rows]
    out.append("</tbody>\n</table>\n<table>\n<caption>Results</caption>\n<tbody>\n")
    out += [f'<tr><td>{_e(k)}</td><td class="num">{_value(k, v)}</td></tr>\n' for k, v in result_rows]
    out.append("</tbody>\n</table>\n</div>\n")
    if len(files) > 1 or skipped:
        shown = files[:10]
        out.append('<table>\n<caption>Files</caption>\n<thead><tr><th>path</th><th>format</th>'
                   '<th class="num">documents</th></tr></thead>\n<tbody>\n')
        out += [f'<tr><td class="mono">{_e(f["path"])}</td><td>{_e(f.get("format", ""))}</td>'
                f'<td class="num">{f.get("documents", 0):,}</td></tr>\n' for f in shown]
        if len(files) > len(shown):
            rest = sum(f.get("documents", 0) for f in files[len(shown):])
            out.append(f'<tr><td colspan="2">and {len(files) - len(shown):,} more files</td>'
                       f'<td class="num">{rest:,}</td></tr>\n')
        out.append("</tbody>\n</table>\n")
        if skipped:
            out.append(_not_read(i))
    out.append("</section>\n")
    return "".join(out)


def _not_read(i: Mapping) -> str:
    """The entries inside the input directories that were not read, each with why, as a list
    that opens on a click (report.json's input.skipped_file_reasons; a report written before
    it had them gives the paths alone)."""
    entries = i.get("skipped_file_reasons") or [{"path": str(path), "reason": ""} for path in i["skipped_files"]]
    reasons: dict[str, int] = {}
    for entry in entries:
        reasons[entry["reason"]] = reasons.get(entry["reason"], 0) + 1
    told = ", ".join(f"{count:,} {_e(reason)}" for reason, count in reasons.items() if reason)
    out = [f'<details class="note">\n<summary><strong>{len(entries):,} '
           f'{"entry" if len(entries) == 1 else "entries"} under the inputs not read</strong>'
           + (f" ({told})" if told else "") + "</summary>\n"
           '<table>\n<thead><tr><th>path</th><th>why not read</th></tr></thead>\n<tbody>\n']
    out += [f'<tr><td class="mono">{_e(entry["path"] + ("/" if entry.get("folder") else ""))}</td>'
            f'<td>{_e(entry["reason"])}</td></tr>\n' for entry in entries[:NOT_READ_LISTED]]
    if len(entries) > NOT_READ_LISTED:
        out.append(f'<tr><td colspan="2">and {len(entries) - NOT_READ_LISTED:,} more (all in report.json, '
                   "input.skipped_file_reasons)</td></tr>\n")
    out.append("</tbody>\n</table>\n</details>\n")
    return "".join(out)


def _stages(report: dict) -> str:
    stages = report.get("stages", {})
    main = [(name, s) for name, s in stages.items() if "seconds" in s]
    parts = [(name, s) for name, s in stages.items() if "seconds" not in s and "busy_seconds" in s]
    longest = max([s["seconds"] for _, s in main] + [s["busy_seconds"] for _, s in parts] + [1e-9])
    rows = []
    for name, s in main:
        rows.append(("", name, s["seconds"], s.get("peak_rss_mb")))
        if name == "signature_pass":
            rows += [("part", n, p["busy_seconds"], None) for n, p in parts]
    if "signature_pass" not in stages:
        rows += [("part", n, p["busy_seconds"], None) for n, p in parts]
    out = ['<section id="stages">\n<h2>Time and memory per stage</h2>\n',
           '<table>\n<thead><tr><th>stage</th><th>what it does</th><th class="num">seconds</th>'
           '<th style="width:22%"></th><th class="num">peak RSS</th></tr></thead>\n<tbody>\n']
    for kind, name, seconds, rss in rows:
        width = max(0.0, min(100.0, 100.0 * seconds / longest))
        note = STAGE_NOTES.get(name, "")
        if kind == "part":
            note = (note + "; " if note else "") + "busy seconds, summed over the worker threads"
        out.append(
            f'<tr class="{kind}"><td class="mono">{_e(name)}</td><td class="why">{_e(note)}</td>'
            f'<td class="num">{_seconds(seconds)}</td>'
            f'<td><div class="bar{" busy" if kind == "part" else ""}" style="width:{width:.1f}%"></div></td>'
            f'<td class="num">{_mib(rss) if rss is not None else ""}</td></tr>\n'
        )
    total = report.get("total_seconds")
    if total is not None:
        out.append(f'<tr class="total"><td colspan="2">total</td><td class="num">{_seconds(total)}</td>'
                   f'<td></td><td class="num">{_mib(report.get("peak_rss_mb"))}</td></tr>\n')
    out.append("</tbody>\n</table>\n<p class=\"ids\">Peak RSS is the process's resident-memory high-water "
               "mark while the stage ran (everything alive then, not only what the stage allocated), "
               "in MiB; the total row gives the run's peak.</p>\n</section>\n")
    return "".join(out)


def _footer(report: dict, figures: Mapping[str, str]) -> str:
    out = report.get("output")
    format = out.get("format", "parquet") if out else "parquet"
    if out and out.get("layout") == "files":
        files = ["deduplicated/", "clusters/", "pairs/"]
    else:
        files = [f"deduplicated.{format}", "clusters.parquet", "pairs.parquet"]
    files += ["report.json", "report.html"]
    files += [FIGURE_FILES[name] for name in figures]
    where = f" in <code>{_e(out['directory'])}</code>" if out and out.get("directory") else ""
    return (f"<footer>Backend: {_e(report.get('backend', ''))}.<br>"
            f"Files of this run{where}: {', '.join(f'<code>{_e(f)}</code>' for f in files)}. "
            "The numbers on this page are those of report.json.</footer>\n")


# --- the largest clusters -----------------------------------------------------------------------


def _clusters(result) -> str:
    # What the run counted of its largest clusters (engine/shown.py), not result.clusters and
    # result.pairs: a run that writes its results never builds those.
    outcome, shown = result.outcome, result.outcome.shown
    out = ['<section id="clusters">\n<h2>Largest clusters</h2>\n']
    if outcome.clustered.in_clusters == 0:
        out.append("<p>No near-duplicates were found: every document was kept.</p>\n</section>\n")
        return "".join(out)
    members = shown.members
    number, kept, rows = members.cluster, members.keep, members.docs
    p = result.report["parameters"]
    out.append(f"<p>The {shown.numbers.shape[0]:,} largest of {outcome.clustered.count:,} clusters, by size. Each "
               f"shows its kept document and up to {EXAMPLES_PER_CLUSTER - 1} removed ones (the first "
               f"{EXCERPT_CHARS:,} characters; words that differ from the kept document are "
               "<mark>highlighted</mark>), with their exact Jaccard similarity to the kept one.</p>\n")
    stats = ({int(c): (int(inside), float(low), float(high))
              for c, inside, low, high in zip(shown.numbers, shown.inside, shown.low, shown.high)},
             shown.example_jaccards())
    for c, size in zip(shown.numbers.tolist(), shown.sizes.tolist()):
        out.append(_cluster_block(result, c, np.flatnonzero(number == c), size, kept, rows, stats, p))
    out.append("</section>\n")
    return "".join(out)


INDEXED_TEXT = "(a document of the index: the index keeps its shingles, not its text)"


def _cluster_block(result, cluster: int, members, size: int, kept, rows, stats, p: dict) -> str:
    keep_position, examples = examples_of(members, kept)
    others = [n for n in range(len(members)) if n != keep_position]
    kept_id, *listed_ids = result.ids_of(rows[members[[keep_position] + others[: MEMBERS_LISTED - 1]]]).to_pylist()
    (inside, low, high), verified_pairs = stats[0][cluster], stats[1]
    out = [f'<div class="cluster">\n<h3>Cluster {cluster:,} · {size:,} documents</h3>\n']
    if inside:
        out.append(f'<p class="ids">{inside:,} verified pairs inside it, exact Jaccard '
                   f"{low:.4f} to {high:.4f}.</p>\n")
    listed = [f"<strong>{_e(str(kept_id))}</strong> (kept)"] + [_e(str(i)) for i in listed_ids]
    more = size - len(listed)
    out.append(f'<p class="ids">Members: {", ".join(listed)}{f" and {more:,} more" if more > 0 else ""}.</p>\n')
    # The kept document and a few removed ones, with their similarity to the kept one.
    positions = [keep_position] + examples
    # A run against an index: rows below indexed_rows are indexed documents, whose text the
    # index does not keep (their similarity is the verified pair's).
    outcome_rows = rows[members[positions]] - result.indexed_rows
    table_rows = np.flatnonzero(outcome_rows >= 0)
    contents: list = [None] * len(positions)
    for position, content in zip(table_rows, content_of(result.table, result.text_field).take(
            pa.array(outcome_rows[table_rows])).to_pylist()):
        contents[position] = content

    spec = ShingleSpec(p["shingle"], int(p["ngram"]), p.get("unicode"), bool(p.get("strip_punctuation")),
                       bool(p.get("strip_symbols")))
    # Token ids are shown as numbers separated by spaces.
    texts = ([None if c is None else " ".join(map(str, c)) for c in contents] if spec.kind == "token"
             else contents)
    indexed = outcome_rows < 0
    texts = [INDEXED_TEXT if old else text for old, text in zip(indexed, texts)]
    kept_text = texts[0] or ""
    out.append('<div class="docs">\n')
    out.append(_document(kept_id, kept_text, None, None, kept=True))
    example_rows = rows[members[positions]]
    for doc_id, row, text, content in zip(listed_ids, example_rows[1:], texts[1:], contents[1:]):
        verified = verified_pairs.get((min(int(example_rows[0]), int(row)), max(int(example_rows[0]), int(row))))
        if verified is not None:
            similarity = (verified, "a verified pair")
        elif indexed[0] or text == INDEXED_TEXT:
            similarity = None  # an indexed document's shingles are in the index, not here
        else:
            value = exact_jaccard(contents[0], content, spec)
            similarity = (value, "computed for this page: not a verified pair; "
                                 "the two are joined through other members")
        out.append(_document(doc_id, text or "", similarity, kept_text, kept=False))
    out.append("</div>\n")
    out.append("</div>\n")
    return "".join(out)


def _document(doc_id, text: str, similarity, kept_text: Optional[str], kept: bool) -> str:
    excerpt, truncated = _excerpt(text, EXCERPT_CHARS)
    body = _e(excerpt) if kept_text is None else _highlight(excerpt, _excerpt(kept_text, 2 * EXCERPT_CHARS)[0])
    tag = "kept" if kept else "removed"
    sim = ""
    if similarity is not None:
        value, source = similarity
        sim = f'<div class="sim">Jaccard with the kept document: <strong>{value:.4f}</strong> ({_e(source)})</div>\n'
    length = f"{len(text):,} characters"
    return (f'<div class="doc{" kept" if kept else ""}">\n'
            f'<div class="head"><span class="tag">{tag}</span><span class="mono">{_e(str(doc_id))}</span> '
            f'<span class="sim">· {length}</span></div>\n{sim}'
            f'<p class="text">{body}{"…" if truncated else ""}</p>\n</div>\n')


def _excerpt(text: str, limit: int) -> tuple[str, bool]:
    """The first ``limit`` characters of ``text``, cut at a word boundary when one is near."""
    if len(text) <= limit:
        return text, False
    cut = text[:limit]
    space = max(cut.rfind(" "), cut.rfind("\n"))
    if space > limit * 0.8:
        cut = cut[:space]
    return cut.rstrip(), True


_TOKEN = re.compile(r"\S+|\s+")


def _highlight(text: str, reference: str) -> str:
    """``text`` HTML-escaped, its words that are not aligned with equal words of ``reference``
    (compared lower-cased, as shingling does) wrapped in <mark>. The caller passes a reference
    longer than ``text``, so that the end of ``text`` is not marked for words the reference
    merely did not reach."""
    tokens = _TOKEN.findall(text)
    words = [n for n, t in enumerate(tokens) if not t.isspace()]
    reference_words = [t.lower() for t in _TOKEN.findall(reference) if not t.isspace()]
    matcher = difflib.SequenceMatcher(None, reference_words, [tokens[n].lower() for n in words], autojunk=False)
    marked = set()
    for op, _, _, start, stop in matcher.get_opcodes():
        if op in ("replace", "insert"):
            marked.update(words[start:stop])
    out = []
    for n, token in enumerate(tokens):
        out.append(f"<mark>{_e(token)}</mark>" if n in marked else _e(token))
    return "".join(out)


def exact_jaccard(first, second, spec: ShingleSpec) -> float:
    """The exact Jaccard similarity of two documents' shingle sets (the verification's measure);
    first, second: texts, or token-id lists for token shingles (None: empty)."""

    sets = shingle_sets([first, second], spec)
    offsets, hashes = sets.offsets, sets.hashes
    a, b = hashes[offsets[0]:offsets[1]], hashes[offsets[1]:offsets[2]]
    common = np.intersect1d(a, b, assume_unique=True).shape[0]
    union = a.shape[0] + b.shape[0] - common
    return common / union if union else 0.0


# --- formatting ---------------------------------------------------------------------------------


def _e(value) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _num(value) -> str:
    """A parameter number as written: 0.8, 5, 1,024."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.6g}" if abs(value) < 1e6 else f"{value:,.0f}"
    return _e(value)


def _value(key: str, value) -> str:
    if value is None:
        return '<span class="why">—</span>'
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key == "batch_bytes" and isinstance(value, int):
        return f"{value:,} <span class=\"why\">({_bytes(value)})</span>"
    if isinstance(value, (int, float)):
        return _num(value)
    if isinstance(value, (list, tuple)):
        return _e(", ".join(str(v) for v in value))
    if isinstance(value, dict):
        return _e(", ".join(f"{k}: {v}" for k, v in value.items()))
    return _e(value)


def _bytes(count, exact: bool = False) -> str:
    count = int(count or 0)
    units = ["bytes", "KiB", "MiB", "GiB", "TiB"]
    value, unit = float(count), 0
    while value >= 1024 and unit < len(units) - 1:
        value /= 1024
        unit += 1
    short = f"{count:,} bytes" if unit == 0 else f"{value:,.1f} {units[unit]}"
    return f"{count:,} bytes ({short})" if exact and unit else short


def _mib(value) -> str:
    return "" if value is None else f"{value:,.1f}\u00a0MiB"  # no break before the unit


def _seconds(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return seconds_text(value)


def _percent(fraction: float) -> str:
    if fraction == 0:
        return "0 %"
    if fraction < 0.001:
        return f"{fraction * 100:.3f} %"
    return f"{fraction * 100:.1f} %" if fraction >= 0.01 else f"{fraction * 100:.2f} %"


def _ratio(part, whole) -> float:
    return part / whole if whole else 0.0


def _short_backend(backend: str) -> str:
    return backend.split(" (")[0]
