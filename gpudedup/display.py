"""How a result shows itself in a notebook (``DedupResult._repr_html_``): the run's counts as
cards, then its largest clusters with the ids of their kept and removed documents, as the run
counted them (engine/shown.py). Small, self-contained HTML: no script, no external style."""

from __future__ import annotations

from html import escape
from typing import Any

REMOVED_LISTED = 4  # removed ids named per cluster (the rest are counted)

STYLE = ("<style>.gpudedup-cards{display:flex;gap:.5em;flex-wrap:wrap;margin:.3em 0}"
         ".gpudedup-card{border:1px solid #ccc;border-radius:4px;padding:.3em .7em;min-width:7em}"
         ".gpudedup-card b{display:block;font-size:1.3em}"
         ".gpudedup-clusters td,.gpudedup-clusters th{text-align:left;padding:.1em .6em}</style>")


def result_html(result: Any) -> str:
    """A DedupResult as HTML: documents in, kept, removed, clusters, verified pairs; the largest
    clusters (number, size, kept ids, removed ids)."""
    r, documents = result.report["results"], result.report["input"]["documents"]
    cards = [("documents", documents), ("kept", r["kept_documents"]), ("removed", r["removed_documents"]),
             ("clusters", r["clusters"]), ("verified pairs", r["verified_pairs"])]
    out = [STYLE, '<div class="gpudedup-result"><div class="gpudedup-cards">']
    out += [f'<div class="gpudedup-card"><b>{value:,}</b>{escape(name)}</div>' for name, value in cards]
    out.append("</div>")
    rows = largest_cluster_rows(result)
    if rows:
        out.append('<table class="gpudedup-clusters"><thead><tr><th>cluster</th><th>size</th><th>kept</th>'
                   "<th>removed</th></tr></thead><tbody>")
        for number, size, kept, removed, more in rows:
            listed = ", ".join(escape(str(i)) for i in removed) + (f" and {more:,} more" if more else "")
            out.append(f"<tr><td>{number:,}</td><td>{size:,}</td><td>{escape(', '.join(map(str, kept)))}</td>"
                       f"<td>{listed}</td></tr>")
        out.append("</tbody></table>")
    else:
        out.append("<p>No near-duplicates were found: every document was kept.</p>")
    out.append("</div>")
    return "".join(out)


def largest_cluster_rows(result: Any) -> list[tuple[int, int, list, list, int]]:
    """(cluster, size, kept ids, the first REMOVED_LISTED removed ids, how many more were removed)
    for each of the run's largest clusters, largest first (Outcome.shown)."""
    shown = result.outcome.shown
    members = shown.members
    ids = result.ids_of(members.docs).to_pylist()
    rows = []
    for number, size in zip(shown.numbers.tolist(), shown.sizes.tolist()):
        mine = [(i, k) for i, c, k in zip(ids, members.cluster.tolist(), members.keep.tolist()) if c == number]
        kept = [i for i, k in mine if k]
        removed = [i for i, k in mine if not k]
        listed = removed[:REMOVED_LISTED]
        rows.append((number, size, kept, listed, size - len(kept) - len(listed)))
    return rows
