"""report.html's example documents: the largest clusters, the verified pairs just above the
threshold and a random sample of clusters, each with its texts side by side and the words that
differ marked. What is shown is what the run chose (pipeline/shown.py, Outcome.shown); the page
reads the texts and ids of those few rows only."""

from __future__ import annotations

import difflib
import re
from typing import Any, Optional

import numpy as np
import pyarrow as pa

from ...core.shingling import ShingleSpec, shingle_hashes
from ...pipeline.removedrows import shingle_spec
from ...pipeline.shown import EXAMPLES_PER_CLUSTER, MEMBERS_LISTED
from ...io.fields import content_of
from ...display import shown_id
from .markup import escaped

EXCERPT_CHARS = 600
# What an indexed document shows for its text: the index keeps its shingles, not its text.
NOT_STORED = "text not stored in the index"


def cluster_sections(result) -> str:
    """The sections of example documents: the largest clusters, the pairs just above the
    threshold, a random sample of the other clusters."""
    # What the run counted of them (pipeline/shown.py), not result.clusters and result.pairs: a
    # run that writes its results never builds those.
    outcome, shown = result._outcome, result._outcome.shown
    if outcome.clustered.in_clusters == 0:
        return ('<section id="clusters">\n<h2>Clusters</h2>\n'
                "<p>No near-duplicates were found: every document was kept.</p>\n</section>\n")
    p = result.report["parameters"]
    every = np.concatenate([shown.numbers, shown.sampled.numbers]).tolist()  # (the clusters shown)
    stats = {int(c): (int(inside), float(low), float(high)) for c, inside, low, high in
             zip(every, np.concatenate([shown.inside, shown.sampled.inside]),
                 np.concatenate([shown.low, shown.sampled.low]), np.concatenate([shown.high, shown.sampled.high]))}
    view = ClusterView(result, stats, shown.example_jaccards())
    out = ['<section id="clusters">\n<h2>Largest clusters</h2>\n',
           f"<p>The {shown.numbers.shape[0]:,} largest of {outcome.clustered.count:,} clusters, by size. Each "
           f"shows its kept document and up to {EXAMPLES_PER_CLUSTER - 1} removed ones (the first "
           f"{EXCERPT_CHARS:,} characters; words that differ from the kept document are "
           "<mark>highlighted</mark>), with their exact Jaccard similarity to the kept one.</p>\n"]
    out += [view.block(c, size) for c, size in zip(shown.numbers.tolist(), shown.sizes.tolist())]
    out.append("</section>\n")
    out.append(near_pairs(result, view))
    sampled = shown.sampled
    if sampled.numbers.shape[0]:
        out.append('<section id="sampled">\n<h2>A random sample of clusters</h2>\n'
                   f"<p>{sampled.numbers.shape[0]:,} of the other clusters, drawn at random with the run's seed "
                   f"({escaped(p.get('seed'))}), so that the same run gives the same sample: the largest "
                   "clusters are mostly exact copies and boilerplate, a sample shows the typical ones.</p>\n")
        out += [view.block(c, size) for c, size in zip(sampled.numbers.tolist(), sampled.sizes.tolist())]
        out.append("</section>\n")
    return "".join(out)


def texts_read(result) -> np.ndarray:
    """int64, ascending: the rows of ``result.table`` whose texts the page shows (Shown.rows_shown,
    less the indexed documents of a run against an index: their texts are not stored)."""
    rows = result._outcome.shown.rows_shown() - result.indexed_rows
    return rows[rows >= 0]


def near_pairs(result, view: "ClusterView") -> str:
    """The verified pairs of the lowest Jaccard, each with its two texts side by side."""
    shown = result._outcome.shown
    if not shown.near_a.shape[0]:
        return ""
    threshold = result.report["parameters"]["threshold"]
    out = ['<section id="near-threshold">\n<h2>Pairs just above the threshold</h2>\n',
           f"<p>The {shown.near_a.shape[0]:,} verified pairs of the lowest exact Jaccard similarity, at or just "
           f"above the threshold {threshold:g}: the pairs a higher threshold would lose first. If these are "
           "duplicates, the threshold is not too low. Words of the second document that differ from the first "
           "are <mark>highlighted</mark>.</p>\n"]
    rows = np.concatenate([shown.near_a, shown.near_b])
    ids = result._ids_of(rows).to_pylist()
    texts, _ = view.texts(rows)
    count = shown.near_a.shape[0]
    for n, jaccard in enumerate(shown.near_jaccard.tolist()):
        first, second = texts[n], texts[count + n]
        out.append(f'<div class="cluster">\n<h3>Pair {n + 1} · exact Jaccard {jaccard:.4f}</h3>\n<div class="docs">\n')
        out.append(document(ids[n], first, None, None, "pair", "first"))
        out.append(document(ids[count + n], second, (jaccard, "a verified pair"), first, "pair", "second"))
        out.append("</div>\n</div>\n")
    out.append("</section>\n")
    return "".join(out)


class ClusterView:
    """Cluster blocks of one result: stats, {cluster: (verified pairs inside, least and
    greatest Jaccard)} of every cluster shown; verified, {(a, b): Jaccard} of the examples that
    are verified pairs. The texts of every row the page shows (Shown.rows_shown) are read when
    it is made, at once: a staged run's were taken as its kept rows were written
    (shardedrows.ShardedTable.write_files), or else are read from its input files, each file once
    for all of them rather than once per cluster."""

    def __init__(self, result, stats: dict, verified: dict):
        self.result, self.stats, self.verified = result, stats, verified
        self.spec = shingle_spec(result.report["parameters"])
        shown = result._outcome.shown
        # Each shown cluster's examples, chosen once: their texts are read now, their blocks later.
        self.examples = {cluster: shown.example_rows(cluster) for cluster in stats}
        rows = shown.rows_shown()
        self.read: dict[int, tuple[Optional[str], Any]] = dict(zip(rows.tolist(), zip(*texts_of(result, rows))))

    def texts(self, rows: np.ndarray) -> tuple[list[Optional[str]], list]:
        """texts_of ``rows``, from those read when the view was made."""
        shown, contents = zip(*(self.read[row] for row in rows.tolist())) if rows.shape[0] else ((), ())
        return list(shown), list(contents)

    def block(self, cluster: int, size: int) -> str:
        """A cluster: its pairs' figures, its members' ids, and its kept document beside a few
        removed ones."""
        members_all = self.result._outcome.shown.members
        members, keep_position, example_rows = self.examples[cluster]
        others = [n for n in range(len(members)) if n != keep_position]
        named = members[[keep_position] + others[: MEMBERS_LISTED - 1]]
        kept_id, *listed_ids = self.result._ids_of(members_all.docs[named]).to_pylist()
        # (a run against an index keeps every indexed member, not the first alone)
        kept = members_all.keep[named].tolist()
        inside, low, high = self.stats[cluster]
        out = [f'<div class="cluster">\n<h3>Cluster {cluster:,} · {size:,} documents</h3>\n']
        if inside:
            out.append(f'<p class="ids">{inside:,} verified pairs inside it, exact Jaccard '
                       f"{low:.4f} to {high:.4f}.</p>\n")
        listed = [f"<strong>{shown_id(kept_id)}</strong> (kept)"] + [
            shown_id(i) + (" (kept)" if keep else "") for i, keep in zip(listed_ids, kept[1:])]
        more = size - len(listed)
        out.append(f'<p class="ids">Members: {", ".join(listed)}{f" and {more:,} more" if more > 0 else ""}.</p>\n')
        # The kept document and a few removed ones, with their similarity to the kept one.
        texts, contents = self.texts(example_rows)
        out.append('<div class="docs">\n')
        out.append(document(kept_id, texts[0], None, None, "kept", "kept"))
        for doc_id, row, text, content, keep in zip(listed_ids, example_rows[1:], texts[1:], contents[1:], kept[1:]):
            pair = (min(int(example_rows[0]), int(row)), max(int(example_rows[0]), int(row)))
            similarity: Optional[tuple[float, str]] = None
            if pair in self.verified:
                similarity = (self.verified[pair], "a verified pair")
            elif texts[0] is not None and text is not None:  # (an indexed document's shingles are not here)
                similarity = (exact_jaccard(contents[0], content, self.spec),
                              "computed for this page: not a verified pair; the two are joined through other "
                              "members")
            kind = "kept" if keep else "removed"
            out.append(document(doc_id, text, similarity, texts[0], kind, kind))
        out.append("</div>\n</div>\n")
        return "".join(out)


def texts_of(result, rows: np.ndarray) -> tuple[list[Optional[str]], list]:
    """The texts of the outcome's ``rows`` as shown (token ids as numbers separated by spaces;
    None for an indexed document, whose text the index does not keep), and their contents as
    shingled (exact_jaccard's input)."""
    # A run against an index: rows below indexed_rows are indexed documents.
    table_rows = np.asarray(rows, np.int64) - result.indexed_rows
    stored = np.flatnonzero(table_rows >= 0)
    contents: list = [None] * table_rows.shape[0]
    shown: list[Optional[str]] = [None] * table_rows.shape[0]
    read = content_of(result.table, result.text_field).take(pa.array(table_rows[stored])).to_pylist()
    for place, content in zip(stored.tolist(), read):
        contents[place] = content
        shown[place] = (" ".join(map(str, content)) if isinstance(content, list) else content) or ""
    return shown, contents


def document(doc_id, text: Optional[str], similarity: Optional[tuple[float, str]], reference: Optional[str],
             kind: str, tag: str) -> str:
    """A document's box: its tag and id, its similarity to the reference where given, and the
    start of its text with the words that differ from ``reference`` marked (none where either
    text is not stored); kind: "kept", "removed" or "pair" (its colours)."""
    sim = ""
    if similarity is not None:
        value, source = similarity
        against = "the first" if kind == "pair" else "the kept document"
        sim = (f'<div class="sim">Jaccard with {against}: <strong>{value:.4f}</strong> ({escaped(source)})'
               "</div>\n")
    if text is None:
        length, body = NOT_STORED, f'<p class="text absent">({NOT_STORED}: the index keeps its shingles)</p>\n'
    else:
        marked, truncated = marked_excerpt(text, reference)
        length, body = f"{len(text):,} characters", f'<p class="text">{marked}{"…" if truncated else ""}</p>\n'
    return (f'<div class="doc {kind}">\n'
            f'<div class="head"><span class="tag">{tag}</span><span class="mono">{shown_id(doc_id)}</span> '
            f'<span class="sim">· {length}</span></div>\n{sim}{body}</div>\n')


def marked_excerpt(text: str, reference: Optional[str]) -> tuple[str, bool]:
    """The excerpt of ``text`` that report.html and a terminal show (text_excerpt), HTML-escaped,
    its words that differ from ``reference`` marked (highlight; none where it is None), and
    whether it was cut."""
    excerpt, truncated = text_excerpt(text, EXCERPT_CHARS)
    if reference is None:
        return escaped(excerpt), truncated
    cut_word = truncated and not text[len(excerpt)].isspace()  # (it ends in part of a word)
    return highlight(excerpt, text_excerpt(reference, 2 * EXCERPT_CHARS)[0], cut_word), truncated


def text_excerpt(text: str, limit: int) -> tuple[str, bool]:
    """The first ``limit`` characters of ``text``, cut at a word boundary when one is near, and
    whether it was cut."""
    if len(text) <= limit:
        return text, False
    cut = text[:limit]
    space = max(cut.rfind(" "), cut.rfind("\n"))
    if space > limit * 0.8:
        cut = cut[:space]
    return cut.rstrip(), True


_TOKEN = re.compile(r"\S+|\s+")


def highlight(text: str, reference: str, cut_word: bool = False) -> str:
    """``text`` HTML-escaped, its words that are not aligned with equal words of ``reference``
    (compared lower-cased, as shingling does) wrapped in <mark>. The caller passes a reference
    longer than ``text``, so that the end of ``text`` is not marked for words the reference
    merely did not reach; cut_word: ``text`` ends in part of a word, which is marked only where
    it does not begin the reference's word it stands against."""
    tokens = _TOKEN.findall(text)
    words = [n for n, t in enumerate(tokens) if not t.isspace()]
    reference_words = [t.lower() for t in _TOKEN.findall(reference) if not t.isspace()]
    matcher = difflib.SequenceMatcher(None, reference_words, [tokens[n].lower() for n in words], autojunk=False)
    marked = set()
    last = len(words) - 1
    for op, first, end, start, stop in matcher.get_opcodes():
        if op in ("replace", "insert"):
            marked.update(words[start:stop])
        if (cut_word and op == "replace" and start <= last < stop and first + last - start < end
                and reference_words[first + last - start].startswith(tokens[words[last]].lower())):
            marked.discard(words[last])
    return "".join(f"<mark>{escaped(token)}</mark>" if n in marked else escaped(token)
                   for n, token in enumerate(tokens))


def exact_jaccard(first, second, spec: ShingleSpec) -> float:
    """The exact Jaccard similarity of two documents' shingle sets (the verification's measure);
    first, second: texts, or token-id lists for token shingles (None: empty)."""
    shingles = shingle_hashes([first, second], spec)
    offsets, hashes = shingles.offsets, shingles.hashes
    a, b = np.unique(hashes[offsets[0]:offsets[1]]), np.unique(hashes[offsets[1]:offsets[2]])
    common = np.intersect1d(a, b, assume_unique=True).shape[0]
    union = a.shape[0] + b.shape[0] - common
    return common / union if union else 0.0
