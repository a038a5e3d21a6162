"""report.html's sections made of report.json alone (and the run's skipped records): the header,
the summary cards, where every record went, the counts, the figures' captions, the time per
stage, the parameters and the footer."""

from __future__ import annotations

from typing import Mapping

from ...core.lsh import collision_probability, steepest_similarity
from ...display import group_label
from ...params import MEANINGS
from .markup import byte_count, escaped, mib, number, percent, ratio, seconds, value_of
from .style import CSS

FILES_LISTED = 10  # input files named in the files table (all are in report.json)
NOT_READ_LISTED = 1000  # entries under the inputs not read, listed by name (all are in report.json)
OPEN_UP_TO = 20  # a list of entries not read opens by itself up to this many

STAGE_NOTES = {
    "read": "reading the input",
    "signature_pass": "shingling, MinHash signatures and band keys, batch by batch",
    "shingle": "shingle hashing",
    "signatures": "MinHash signatures",
    "band_keys": "band keys",
    "copies": "documents with identical shingle sets, paired without LSH",
    "candidates": "pairs that share a band key; their signature filter",
    "verify": "exact Jaccard of the pairs the signature filter passed",
    "cluster": "connected components; the kept document of each; what this page shows of them",
    "write": "writing the outputs (before report.json)",
    "compile": "compiling the CPU kernels, the first run after an install (taken out of the stages)",
    "spill": "writing each shard's band keys, signatures, ids and row facts to the work directory",
    "index_probe": "the indexed documents that share a band key with a new one",
}

# Where every record went (report.json's balance), each with its colour in the bar.
BALANCE_PARTS = (
    ("kept", "kept", "var(--kept-line)", "documents kept, written to deduplicated"),
    ("kept_empty", "kept, no shingles", "#9aa5b1", "documents empty once normalised (or null): kept, never "
                                                   "compared"),
    ("removed_duplicates", "removed as duplicates", "var(--red)", "each named with its cluster's kept document "
                                                                  "in clusters"),
    ("skipped", "skipped records", "var(--orange)", "left out by on_error=skip (errors.jsonl says why)"),
)


def head(report: Mapping) -> str:
    i = report["input"]
    files = i.get("files", [])
    source = ", ".join(escaped(f["path"]) for f in files[:3])
    if len(files) > 3:
        source += f" and {len(files) - 3:,} more files"
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>gpudedup report: {i['documents']:,} documents, "
        f"{report['results']['removed_documents']:,} removed</title>\n"
        f"<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        "<header>\n<h1>Near-duplicate report</h1>\n"
        f'<p class="sub">gpudedup {escaped(report.get("gpudedup_version", ""))} · '
        f"{escaped(str(report.get('backend', '')).split(' (')[0])}"
        + (f" · input: {source}" if source else "") + "</p>\n</header>\n"
    )


def in_clusters_words(report: Mapping) -> str:
    """What results.documents_in_clusters counts, in words: against an index, the new documents
    alone (its clusters hold indexed ones too, which the cluster-size figure counts)."""
    return "new documents" if "index" in report else "documents"


def summary(report: Mapping) -> str:
    i, r, p = report["input"], report["results"], report["parameters"]
    documents = i["documents"]
    cards = [
        ("Documents", f"{documents:,}", f"{byte_count(i.get('text_bytes', 0))} of text"),
        ("Clusters", f"{r['clusters']:,}", f"{r['documents_in_clusters']:,} {in_clusters_words(report)} in them"),
        ("Removed", f"{r['removed_documents']:,}",
         f"{percent(ratio(r['removed_documents'], documents))} of the documents"),
        ("Kept", f"{r['kept_documents']:,}", "written to deduplicated"),
        ("Verified pairs", f"{r['verified_pairs']:,}",
         f"Jaccard ≥ {number(p['threshold'])} of {r['candidate_pairs']:,} candidates"),
    ]
    if report.get("total_seconds") is not None:
        cards.append(("Time", f"{seconds(report['total_seconds'])} s",
                      f"peak memory {mib(report.get('peak_rss_mb'))}"))
    out = ['<section class="cards">\n']
    for label, value, detail in cards:
        out.append(f'<div class="card"><div class="label">{escaped(label)}</div><div class="value">{value}</div>'
                   f'<div class="detail">{escaped(detail)}</div></div>\n')
    out.append("</section>\n")
    return "".join(out)


def balance(report: Mapping, skipped_records: list) -> str:
    """Where every input record went, as a bar and a table (report.json's balance), and what
    under the inputs was not read, by name: the entries passed over, the files left out whole."""
    b = report.get("balance")
    out = ['<section id="balance">\n<h2>Where every record went</h2>\n']
    if b:
        whole = b["input_records"]
        out.append('<div class="balance">' + "".join(
            f'<div style="width:{100.0 * ratio(b[key], whole):.3f}%;background:{colour}" '
            f'title="{escaped(label)}: {b[key]:,}"></div>' for key, label, colour, _ in BALANCE_PARTS if b[key])
            + "</div>\n")
        out.append('<table>\n<tbody>\n')
        for key, label, colour, why in BALANCE_PARTS:
            out.append(f'<tr><td><span class="swatch" style="background:{colour}"></span>{escaped(label)}</td>'
                       f'<td class="num">{b[key]:,}</td><td class="num">{percent(ratio(b[key], whole))}</td>'
                       f'<td class="why">{escaped(why)}</td></tr>\n')
        out.append(f'<tr class="total"><td>input records</td><td class="num">{whole:,}</td><td></td>'
                   f'<td class="why">{"every record accounted for" if b.get("balanced") else "the outcomes do not add up"}'
                   "</td></tr>\n</tbody>\n</table>\n")
    out.append(not_read(report["input"]))
    out.append(left_out(skipped_records))
    out.append("</section>\n")
    return "".join(out)


# Groups whose rows and columns the matrix shows one by one; the rest are summed into "other".
MATRIX_LISTED = 10


def sources(report: Mapping) -> str:
    """Where the removed documents come from: per input file (with more than one) and per
    group (report.json's input.files[] and groups), the documents in, kept and removed, and
    removed as duplicates of the same file (group) or another; the sizes in and kept; and
    which groups' documents were removed as duplicates of which (the matrix)."""
    files = [f for f in report["input"].get("files", []) if "removed" in f]
    groups = report.get("groups")
    if len(files) < 2 and not groups:
        return ""
    out = ['<section id="sources">\n<h2>Where the duplicates come from</h2>\n']
    if len(files) > 1:
        ranked = sorted(files, key=lambda f: -f["removed"])
        out.append(source_table("Files, most removed first", [(f["path"], f) for f in ranked[:FILES_LISTED]],
                                "file", len(files) - FILES_LISTED))
    if groups:
        out.append(source_table(f"By {groups['field']} ({groups['count']:,} values)",
                                [(group_label(row), row) for row in groups["rows"]], "group", 0))
        out.append(matrix_table(groups, group_label))
    out.append("</section>\n")
    return "".join(out)


def source_table(caption: str, rows: list, kind: str, more: int) -> str:
    """A table of counts (report.json's files or groups rows, each with its name)."""
    unit = next((u for u in ("bytes", "tokens") if rows and u in rows[0][1]), None)
    heads = ["documents", "kept", "removed", f"of the same {kind}", f"of another {kind}"]
    keys = ["documents", "kept", "removed", "removed_within", "removed_across"]
    if unit:
        heads += [unit, f"{unit} kept"]
        keys += [unit, f"kept_{unit}"]
    out = [f'<table>\n<caption>{escaped(caption)}</caption>\n<thead><tr><th>{kind}</th>'
           + "".join(f'<th class="num">{escaped(h)}</th>' for h in heads) + "</tr></thead>\n<tbody>\n"]
    for name, row in rows:
        out.append(f'<tr><td class="mono">{escaped(name)}</td>'
                   + "".join(f'<td class="num">{row.get(k, 0):,}</td>' for k in keys) + "</tr>\n")
    if more > 0:
        out.append(f'<tr><td colspan="{len(keys) + 1}">and {more:,} more (all in report.json)</td></tr>\n')
    out.append("</tbody>\n</table>\n")
    return "".join(out)


def matrix_table(groups: Mapping, label) -> str:
    """The groups' matrix: a row per removed document's group, a column per its kept
    document's group (the first MATRIX_LISTED rows of report.json's, the rest summed)."""
    rows, matrix = groups["rows"], groups["matrix"]
    shown = min(len(rows), MATRIX_LISTED)
    rest = len(rows) > shown

    def at(i: int) -> int:
        return min(i, shown)  # (the rows and columns beyond are summed into one)

    size = shown + rest
    cells = [[0] * size for _ in range(size)]
    for i, line in enumerate(matrix):
        for j, count in enumerate(line):
            cells[at(i)][at(j)] += count
    names = [label(row) for row in rows[:shown]] + (["the rest"] if rest else [])
    index = groups.get("matrix_index")
    out = ['<table class="matrix">\n<caption>Removed (row: the removed document\'s group) as duplicates of '
           "(column: its kept document's group)</caption>\n<thead><tr><th></th>"
           + "".join(f'<th class="num">{escaped(n)}</th>' for n in names)
           + ('<th class="num">indexed</th>' if index else "") + "</tr></thead>\n<tbody>\n"]
    for i, name in enumerate(names):
        extra = ""
        if index:
            extra = f'<td class="num">{sum(index[k] for k in range(len(index)) if at(k) == i):,}</td>'
        out.append(f'<tr><th class="mono">{escaped(name)}</th>'
                   + "".join(f'<td class="num">{count:,}</td>' for count in cells[i]) + extra + "</tr>\n")
    out.append("</tbody>\n</table>\n")
    return "".join(out)


def not_read(i: Mapping) -> str:
    """The entries inside the input directories that were not read, each with why, by name
    (report.json's input.skipped_file_reasons)."""
    entries = i["skipped_file_reasons"]
    if not entries:
        return '<p class="ids">Every file found under the inputs was read.</p>\n'
    reasons: dict[str, int] = {}
    for entry in entries:
        reasons[entry["reason"]] = reasons.get(entry["reason"], 0) + 1
    told = ", ".join(f"{count:,} {escaped(reason)}" for reason, count in reasons.items() if reason)
    return folded_table(f'<strong>{len(entries):,} {"entry" if len(entries) == 1 else "entries"} under the inputs '
                        "not read</strong>" + (f" ({told})" if told else ""), ("path", "why not read"),
                        [(e["path"] + ("/" if e.get("folder") else ""), e["reason"]) for e in entries],
                        "report.json, input.skipped_file_reasons")


def left_out(skipped_records: list) -> str:
    """The files left out whole under on_error=skip, by name, with why (the records of
    errors.jsonl without a line), and how many single records were left out."""
    files = [(r.get("file"), r.get("reason")) for r in skipped_records if r.get("line") is None]
    records = len(skipped_records) - len(files)
    out = []
    if files:
        out.append(folded_table(f'<strong>{len(files):,} {"file" if len(files) == 1 else "files"} left out whole '
                                "(on_error=skip)</strong>", ("file", "why left out"), files, "errors.jsonl"))
    if records:
        out.append(f'<p class="note">{records:,} {"record was" if records == 1 else "records were"} left out '
                   "(on_error=skip); errors.jsonl gives each one's file, line and why.</p>\n")
    return "".join(out)


def folded_table(summary: str, heads: tuple[str, str], rows: list[tuple], where: str) -> str:
    """A folded table (open up to OPEN_UP_TO rows) under ``summary`` (markup) of (name, why)
    ``rows``, the first NOT_READ_LISTED of them listed, the rest counted (all in ``where``)."""
    out = [f'<details class="note"{" open" if len(rows) <= OPEN_UP_TO else ""}>\n<summary>{summary}</summary>\n'
           f"<table>\n<thead><tr><th>{heads[0]}</th><th>{heads[1]}</th></tr></thead>\n<tbody>\n"]
    out += [f'<tr><td class="mono">{escaped(name)}</td><td>{escaped(why)}</td></tr>\n'
            for name, why in rows[:NOT_READ_LISTED]]
    if len(rows) > NOT_READ_LISTED:
        out.append(f'<tr><td colspan="2">and {len(rows) - NOT_READ_LISTED:,} more (all in {where})</td></tr>\n')
    return "".join(out) + "</tbody>\n</table>\n</details>\n"


def counts(report: Mapping) -> str:
    i, r = report["input"], report["results"]
    files = i.get("files", [])
    input_rows = [
        ("documents", f"{i['documents']:,}"),
        ("files", f"{len(files):,}"),
        ("text", byte_count(i.get("text_bytes", 0), exact=True)),
        ("null texts", f"{i.get('null_texts', 0):,}"),
        ("empty documents (no shingles)", f"{i.get('empty_documents', 0):,}"),
        ("entries not read", f"{len(i.get('skipped_files', [])):,}"),
    ]
    labels = {"candidate_pairs": "candidate pairs (share a band key)",
              "exactly_checked_pairs": "exactly checked (after the signature filter)",
              "verified_pairs": "verified pairs (Jaccard ≥ threshold)", "clusters": "clusters",
              "documents_in_clusters": f"{in_clusters_words(report)} in clusters",
              "removed_documents": "removed documents", "kept_documents": "kept documents"}
    result_rows = [(labels[key], r[key]) for key in labels]
    result_rows += [(key.replace("_", " "), value) for key, value in r.items() if key not in labels]
    out = ['<section id="counts">\n<h2>Counts</h2>\n<div class="grid2">\n',
           "<table>\n<caption>Input</caption>\n<tbody>\n"]
    out += [f'<tr><td>{escaped(k)}</td><td class="num">{v}</td></tr>\n' for k, v in input_rows]
    out.append("</tbody>\n</table>\n<table>\n<caption>Results</caption>\n<tbody>\n")
    out += [f'<tr><td>{escaped(k)}</td><td class="num">{value_of(k, v)}</td></tr>\n' for k, v in result_rows]
    out.append("</tbody>\n</table>\n</div>\n")
    if len(files) > 1:
        shown = files[:FILES_LISTED]
        out.append('<table>\n<caption>Files</caption>\n<thead><tr><th>path</th><th>format</th>'
                   '<th class="num">documents</th></tr></thead>\n<tbody>\n')
        out += [f'<tr><td class="mono">{escaped(f["path"])}</td><td>{escaped(f.get("format", ""))}</td>'
                f'<td class="num">{f.get("documents", 0):,}</td></tr>\n' for f in shown]
        if len(files) > len(shown):
            rest = sum(f.get("documents", 0) for f in files[len(shown):])
            out.append(f'<tr><td colspan="2">and {len(files) - len(shown):,} more files (all in report.json, '
                       f'input.files)</td><td class="num">{rest:,}</td></tr>\n')
        out.append("</tbody>\n</table>\n")
    out.append("</section>\n")
    return "".join(out)


def figure_captions(report: Mapping) -> dict[str, tuple[str, str]]:
    """{figure name: (title, caption markup)} of the report's figures."""
    p, r = report["parameters"], report["results"]
    bands, rows, threshold = p["bands"], p["rows"], p["threshold"]
    at_threshold = float(collision_probability(threshold, bands, rows))
    steepest = steepest_similarity(bands, rows)
    filtered = r["candidate_pairs"] - r["exactly_checked_pairs"]
    return {
        "s_curve": (
            "LSH S-curve",
            f"The chance P(s) = 1 − (1 − s<sup>{rows}</sup>)<sup>{bands}</sup> that a pair of Jaccard "
            f"similarity s shares at least one of the {bands:,} band keys and becomes a candidate. "
            f"At the threshold {number(threshold)} it is {at_threshold:.4f}: "
            f"{percent(1 - at_threshold)} of the pairs right at the threshold are missed, fewer above it. "
            f"The curve is steepest at s = {steepest:.3f} = ((r − 1)/(b·r − 1))<sup>1/r</sup>.",
        ),
        "candidates_histogram": (
            "Verified pairs by exact Jaccard",
            f"The {r['exactly_checked_pairs']:,} candidate pairs checked exactly"
            + (f" (of {r['candidate_pairs']:,} candidates; the signature filter dropped {filtered:,} "
               "whose signatures made J ≥ threshold implausible)" if filtered else "")
            + f", with the S-curve on the right axis. The {r['verified_pairs']:,} pairs at or above "
            f"{number(threshold)} (blue) were verified and are shown by their exact Jaccard. The others were "
            "rejected by the exact check, which stops as soon as a pair cannot reach the threshold (its set "
            "sizes differ too much, or too many shingles went unmatched), so their Jaccard is not computed.",
        ),
        "cluster_sizes": (
            "Clusters by size",
            f"The {r['clusters']:,} clusters by how many documents each holds (sizes 2 to 5 alone, then "
            "ranges). Each cluster keeps one document and removes the others: many large clusters usually "
            "mean boilerplate or copies, many of size 2 near-duplicates in pairs.",
        ),
    }


def figures_section(report: Mapping, figures: Mapping[str, str], inline) -> str:
    """The figures (SVG text by name; inline: svg_figures.inline) with their captions."""
    if not figures:
        return ""
    out = ['<section id="figures">\n<h2>Figures</h2>\n<div class="figures">\n']
    for name, (title, caption) in figure_captions(report).items():
        if name in figures:
            out.append(f'<figure id="figure-{name}">\n{inline(figures[name])}\n'
                       f"<figcaption><strong>{escaped(title)}.</strong> {caption}</figcaption>\n</figure>\n")
    out.append("</div>\n</section>\n")
    return "".join(out)


def stages(report: Mapping) -> str:
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
    for kind, name, spent, rss in rows:
        width = max(0.0, min(100.0, 100.0 * spent / longest))
        note = STAGE_NOTES.get(name, "")
        if kind == "part":
            note = (note + "; " if note else "") + "busy seconds, summed over the worker threads"
        out.append(
            f'<tr class="{kind}"><td class="mono">{escaped(name)}</td><td class="why">{escaped(note)}</td>'
            f'<td class="num">{seconds(spent)}</td>'
            f'<td><div class="bar{" busy" if kind == "part" else ""}" style="width:{width:.1f}%"></div></td>'
            f'<td class="num">{mib(rss) if rss is not None else ""}</td></tr>\n'
        )
    total = report.get("total_seconds")
    if total is not None:
        out.append(f'<tr class="total"><td colspan="2">total</td><td class="num">{seconds(total)}</td>'
                   f'<td></td><td class="num">{mib(report.get("peak_rss_mb"))}</td></tr>\n')
    out.append("</tbody>\n</table>\n<p class=\"ids\">Peak RSS is the process's resident-memory high-water "
               "mark while the stage ran (everything alive then, not only what the stage allocated), "
               "in MiB; the total row gives the run's peak.</p>\n</section>\n")
    return "".join(out)


def parameters(report: Mapping) -> str:
    """The parameters and why b and r, folded: every row with what it means (params.MEANINGS)."""
    p = report["parameters"]
    bands, rows, threshold = p["bands"], p["rows"], p["threshold"]
    at_threshold = float(collision_probability(threshold, bands, rows))
    at_half = float(collision_probability(min(0.5, threshold), bands, rows))
    unit = {"word": "words", "token": "token ids"}.get(p.get("shingle"), "characters")
    rule = p.get("banding_rule", "")
    if rule == "given":
        rule = "given as parameters (--bands and --rows), not chosen"
    out = [
        '<details class="section" id="parameters">\n<summary><h2>Parameters and why</h2> '
        f'<span class="sub">({len([k for k in p if k != "banding_rule"]):,} parameters; '
        f"{bands:,} bands × {rows:,} rows, threshold {number(threshold)})</span></summary>\n",
        f"<p>Two documents are near-duplicates when the exact Jaccard similarity of their sets of "
        f"{escaped(p.get('ngram'))}-{escaped(unit[:-1])} shingles is at least <strong>{number(threshold)}</strong>. "
        f"Candidates come from LSH with <strong>{bands:,} bands × {rows:,} rows</strong> "
        f"({p.get('permutations_computed', bands * rows):,} of the {p.get('num_perm', bands * rows):,} "
        f"MinHash permutations computed); every candidate is then checked exactly.</p>\n",
        f'<p class="rule"><strong>Why {bands:,} × {rows:,}:</strong> {escaped(rule)}. '
        f"A pair at the threshold becomes a candidate with probability {at_threshold:.4f}"
        + (f", a pair at 0.5 with {at_half:.4f}" if threshold > 0.5 else "")
        + f"; the S-curve is steepest at s = {steepest_similarity(bands, rows):.3f}.</p>\n",
        '<table class="params">\n<thead><tr><th>parameter</th><th class="num">value</th><th>meaning</th></tr></thead>\n'
        "<tbody>\n",
    ]
    for key, value in p.items():
        if key == "banding_rule":
            continue
        out.append(f'<tr><td class="key mono">{escaped(key)}</td><td class="num">{value_of(key, value)}</td>'
                   f'<td class="why">{escaped(MEANINGS.get(key, ""))}</td></tr>\n')
    out.append("</tbody>\n</table>\n</details>\n")
    return "".join(out)


def footer(report: Mapping, figure_files: list[str]) -> str:
    out = report.get("output")
    format = out.get("format", "parquet") if out else "parquet"
    in_files = out is not None and out.get("layout") == "files"
    if in_files:
        files = ["deduplicated/", "clusters/", "pairs/"]
    else:
        files = [f"deduplicated.{format}", "clusters.parquet", "pairs.parquet"]
    if out and out.get("removed_files") is not None:  # (written with --write-removed)
        files.append("removed/" if in_files else f"removed.{format}")
    if report.get("parameters", {}).get("on_error") == "skip":  # (written even when nothing was skipped)
        files.append("errors.jsonl")
    files += ["report.json", "report.html"] + figure_files
    where = f" in <code>{escaped(out['directory'])}</code>" if out and out.get("directory") else ""
    return (f"<footer>Backend: {escaped(report.get('backend', ''))}.<br>"
            f"Files of this run{where}: {', '.join(f'<code>{escaped(f)}</code>' for f in files)}. "
            "The numbers on this page are those of report.json.</footer>\n")
