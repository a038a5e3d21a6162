"""Looking into a result: a cluster, or any two documents, with their texts side by side and the
words that differ marked (``DedupResult.cluster``, ``DedupResult.pair``), and the removed rows
in the input's own type with the kept document's id, the cluster and the exact Jaccard to the
kept document (``DedupResult.removed_rows``, the columns of the removed/ output).

A view draws itself as HTML in a notebook (``_repr_html_``: report.html's document cards,
html_report.py, under a style scoped to the view) and as text in a terminal (``__repr__``: the
changed words in [brackets]). Texts are read from the run's input rows: held in memory, or
read again from the shards of a staged or Dask run (the input files must still be as the run
read them). An indexed document's text is not kept by the index: it is shown as such, and its
Jaccard is the verified pair's where the two are one.
"""

from __future__ import annotations

import html
import re
import shutil
import textwrap
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.cluster import kept_documents
from ..pipeline.removedrows import ADDED_COLUMNS, copies_jaccard, held_removed, plain, shingle_spec, texts_jaccard
from ..display import terminal_safe
from ..errors import ParameterError
from .html_report import CSS, NOT_STORED, document, marked_excerpt, shown_id
from .html_report.clusters import texts_of
from ..io.fields import content_of

MEMBERS_SHOWN = 20  # documents of a cluster shown with their texts (every member is named)

# The report's rules that draw documents, under the view's own class: a notebook's page has
# styles of its own, which report.html's page-wide rules (body, h1, table) would change.
SCOPE = ".gpudedup-view"
SCOPED_SELECTORS = (".docs", ".doc", "mark", ".mono", ".ids", ".cluster")


def scoped_css(css: str, scope: str, wanted: Sequence[str]) -> str:
    """The rules of ``css`` whose selectors start with one of ``wanted``, each selector under
    ``scope``, and its :root variables set on ``scope`` (@media blocks left out)."""
    css = re.sub(r"@media[^{]*\{(?:[^{}]*\{[^{}]*\})*[^{}]*\}", "", css)
    out = []
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        names = [name.strip() for name in selectors.split(",")]
        if names == [":root"]:
            out.append(f"{scope}{{{body.strip()}}}")
        elif any(leading_selector(name) in wanted for name in names):
            out.append(",".join(f"{scope} {name}" for name in names) + f"{{{body.strip()}}}")
    return "\n".join(out)


def leading_selector(selector: str) -> str:
    """The first element name or class of a selector: ".doc" of ".doc.kept .tag", "mark"."""
    head = re.split(r"[\s:>+~\[]", selector.strip())[0]
    return "." + head.split(".")[1] if head.startswith(".") else head.split(".")[0]


VIEW_CSS = scoped_css(CSS, SCOPE, SCOPED_SELECTORS) + f"\n{SCOPE} h3{{margin:.4em 0}}"


@dataclass(frozen=True)
class Document:
    """A document as a view shows it: its id; text (token ids as numbers between spaces; None
    for an indexed document, whose text the index does not keep); kept: whether the run kept
    it; cluster: its cluster's number, None where it is in none."""

    id: Any
    text: Optional[str]
    kept: bool
    cluster: Optional[int]


@dataclass(frozen=True)
class ClusterView:
    """A cluster (``DedupResult.cluster``): number; ids: every member's id, the kept document
    first, then the others in input order; kept: whether the run kept each of them (a run
    against an index keeps every indexed one); documents: the first MEMBERS_SHOWN of them with
    their texts; jaccard: each shown one's exact Jaccard with the kept document (None for the kept
    one itself, or where it cannot be known: an indexed document that is no verified pair with
    it); verified: whether each shown one and the kept document are a verified pair."""

    number: int
    ids: tuple
    kept: tuple[bool, ...]
    documents: tuple[Document, ...]
    jaccard: tuple[Optional[float], ...]
    verified: tuple[bool, ...]

    def _title(self) -> str:
        kept = sum(self.kept)
        return (f"Cluster {self.number:,} · {len(self.ids):,} documents"
                + (f" ({kept} kept)" if kept > 1 else ""))

    def _members(self, first: Callable[[Any], str], other: Callable[[Any], str]) -> str:
        """The members' ids, each kept one marked, the first as ``first`` shows it."""
        return ", ".join((first if n == 0 else other)(i) + (" (kept)" if kept else "")
                         for n, (i, kept) in enumerate(zip(self.ids, self.kept)))

    def _similarity(self, position: int) -> Optional[tuple[float, str]]:
        value = self.jaccard[position]
        if value is None or position == 0:
            return None
        return value, ("a verified pair" if self.verified[position] else
                       "computed here: not a verified pair; the two are joined through other members")

    def _repr_html_(self) -> str:
        kept, *others = self.documents
        listed = self._members(lambda i: f"<strong>{shown_id(i)}</strong>", shown_id)
        notes = [f'<p class="ids">Members: {listed}.</p>']
        if len(self.ids) > len(self.documents):
            notes.append(f'<p class="ids">The texts of the first {len(self.documents):,} are shown.</p>')
        cards = [document(kept.id, kept.text, None, None, "kept", "kept")]
        for position, other in enumerate(others, start=1):
            kind = "kept" if other.kept else "removed"  # (a run against an index keeps every indexed one)
            cards.append(document(other.id, other.text, self._similarity(position), kept.text, kind, kind))
        return _view_html(self._title(), notes, cards)

    def __repr__(self) -> str:
        width = _terminal_width()
        kept = self.documents[0]
        lines = [self._title(), *textwrap.wrap("Members: " + self._members(str, str), width)]
        for position, shown in enumerate(self.documents):
            head = f"{'kept' if shown.kept else 'removed'}: {shown.id}"
            similarity = self._similarity(position)
            if similarity is not None:
                head += f" · Jaccard {similarity[0]:.4f} with the kept one ({similarity[1]})"
            lines += ["", *textwrap.wrap(head, width)]
            reference = kept.text if position else None
            lines += textwrap.wrap(_marked_text(shown.text, reference), width, initial_indent="  ",
                                   subsequent_indent="  ") or ["  (empty)"]
        if len(self.ids) > len(self.documents):
            lines += ["", f"(the texts of the first {len(self.documents):,} of {len(self.ids):,} are shown)"]
        return terminal_safe("\n".join(lines), line_breaks=True)

    __str__ = __repr__


@dataclass(frozen=True)
class PairView:
    """Two documents (``DedupResult.pair``): first, second; jaccard: their exact Jaccard (None
    where it cannot be known: an indexed document that is no verified pair with the other, or
    two documents without shingles); verified: whether they are a verified pair."""

    first: Document
    second: Document
    jaccard: Optional[float]
    verified: bool

    def _summary(self) -> str:
        a, b = self.first, self.second
        value = "unknown" if self.jaccard is None else f"{self.jaccard:.4f}"
        if self.verified:
            how = "a verified pair"
        elif a.cluster is not None and a.cluster == b.cluster:
            how = "not a verified pair: joined through other members of their cluster"
        else:
            how = "not a verified pair"
        where = (f"both in cluster {a.cluster:,}" if a.cluster is not None and a.cluster == b.cluster else
                 "; ".join(f"{d.id} in " + ("no cluster" if d.cluster is None else f"cluster {d.cluster:,}")
                           for d in (a, b)))
        return f"exact Jaccard {value} ({how}; {where})"

    def _repr_html_(self) -> str:
        a, b = self.first, self.second
        cards = [document(d.id, d.text, None, other.text, "kept" if d.kept else "removed",
                          "kept" if d.kept else "removed") for d, other in ((a, b), (b, a))]
        title = f"Documents {shown_id(a.id)} and {shown_id(b.id)}"
        notes = [f'<p class="ids">{html.escape(self._summary())}; the words of each that the other lacks are '
                 "highlighted.</p>"]
        return _view_html(title, notes, cards)

    def __repr__(self) -> str:
        width = _terminal_width()
        column = max((width - 3) // 2, 20)
        a, b = self.first, self.second
        lines = textwrap.wrap(f"Documents {a.id} and {b.id}: {self._summary()}", width)
        sides = [[f"{'kept' if d.kept else 'removed'}: {d.id}"[:column], "-" * column] + (textwrap.wrap(
            _marked_text(d.text, other.text), column) or ["(empty)"])
            for d, other in ((a, b), (b, a))]
        lines.append("")
        lines += [f"{left:<{column}} | {right}".rstrip() for left, right in zip_longest(*sides, fillvalue="")]
        return terminal_safe("\n".join(lines), line_breaks=True)

    __str__ = __repr__


def _view_html(title: str, notes: list[str], cards: list[str]) -> str:
    """A view as HTML: report.html's cluster block (a title, markup; notes, the document cards
    side by side) under the view's scoped style."""
    return (f'<div class="gpudedup-view"><style>{VIEW_CSS}</style><div class="cluster"><h3>{title}</h3>'
            + "".join(notes) + '<div class="docs">' + "".join(cards) + "</div></div></div>")


def _marked_text(text: Optional[str], reference: Optional[str]) -> str:
    """``text`` as a terminal shows it (report.html's excerpt), its words that ``reference``
    lacks in [brackets] (html_report.highlight's alignment), a run of them in one pair; none
    where either is an indexed document's (None: its text is not stored)."""
    if text is None:
        return f"({NOT_STORED}: the index keeps its shingles)"
    marked, truncated = marked_excerpt(text, reference)
    marked = re.sub(r"</mark>(\s+)<mark>", r"\1", marked)
    marked = re.sub(r"<mark>(.*?)</mark>", r"[\1]", marked, flags=re.S)
    # Escaped before the layout, so that an escape is counted in the columns it takes.
    return terminal_safe(html.unescape(marked), line_breaks=True) + ("…" if truncated else "")


def _terminal_width() -> int:
    return min(max(shutil.get_terminal_size((100, 24)).columns, 60), 160)


# --- reading what the views show ---------------------------------------------------------------


def _content(result, rows: np.ndarray) -> pa.Array:
    """The content (text or token ids) of the outcome's rows ``rows``, none of them indexed."""
    return plain(content_of(result.table, result.text_field).take(pa.array(rows - result.indexed_rows, pa.int64())))


def _jaccard(result, first: np.ndarray, second: np.ndarray) -> tuple[list[Optional[float]], list[bool]]:
    """The exact Jaccard of the outcome's rows first[i] and second[i]: from their texts, by the
    verification's code (removedrows.texts_jaccard); where one is an indexed document, the
    verified pair's (None where they are no verified pair, or both have no shingles); and
    whether the two are a verified pair (removedrows.copies_jaccard over the run's pairs)."""
    first, second = np.asarray(first, np.int64), np.asarray(second, np.int64)
    o = result._outcome
    verified = copies_jaccard(o.pair_a, o.pair_b, o.jaccard, first, second)
    values = verified.copy()
    here = np.flatnonzero((first >= result.indexed_rows) & (second >= result.indexed_rows))
    if here.shape[0]:
        values[here] = texts_jaccard(_content(result, first[here]), _content(result, second[here]),
                                     np.arange(here.shape[0]), shingle_spec(result.report["parameters"]))
    return [None if np.isnan(value) else float(value) for value in values], (~np.isnan(verified)).tolist()


def _row_of(result, doc_id: Any) -> int:
    """The outcome's row of the document ``doc_id`` (ParameterError where no document has it)."""
    ids = result.ids
    integers = pa.types.is_integer(ids.type)
    if isinstance(doc_id, bool) or not isinstance(doc_id, (int, np.integer) if integers else str):
        raise ParameterError(f"the ids of this run are {'integers' if integers else 'strings'}; got {doc_id!r}")
    try:
        at = pc.index_in(pa.array([doc_id], ids.type), value_set=ids)[0].as_py()
    except (OverflowError, pa.ArrowInvalid):  # (an integer no id of the run's type holds)
        at = None
    if at is None:
        raise ParameterError(f"no document of this run has the id {doc_id!r}")
    return int(at)


def _place_in_clusters(clusters, row: int) -> Optional[int]:
    """The place of ``row`` among the clusters' documents, None where it is in no cluster."""
    at = int(np.searchsorted(clusters.docs, row))
    return at if at < clusters.docs.shape[0] and clusters.docs[at] == row else None


# --- the helpers DedupResult calls -------------------------------------------------------------


def cluster_view(result, number: Optional[int] = None, doc_id: Any = None) -> ClusterView:
    """The cluster ``number``, or the cluster of the document whose id is ``doc_id``."""
    if (number is None) == (doc_id is None):
        raise ParameterError("cluster() takes a cluster's number, or id= of one of its documents (one of the two)")
    clusters = result._outcome.clusters
    if doc_id is not None:
        at = _place_in_clusters(clusters, _row_of(result, doc_id))
        if at is None:
            raise ParameterError(f"the document {doc_id!r} is in no cluster: the run found no near-duplicate of it")
        number = int(clusters.cluster[at])
    elif isinstance(number, bool) or not isinstance(number, (int, np.integer)) or not 0 <= number < clusters.count:
        numbered = f"numbered 0 to {clusters.count - 1:,}" if clusters.count else "none: no near-duplicates were found"
        raise ParameterError(f"no cluster {number!r}: the run's clusters are {numbered}")
    members = np.flatnonzero(clusters.cluster == number)
    kept_at = members[np.flatnonzero(clusters.docs[members] == kept_documents(clusters)[members[0]])[0]]
    order = np.concatenate([[kept_at], members[members != kept_at]])
    rows = clusters.docs[order]
    ids = result._ids_of(rows).to_pylist()
    shown = rows[:MEMBERS_SHOWN]
    texts, _ = texts_of(result, shown)
    jaccard, verified = _jaccard(result, np.full(shown.shape[0] - 1, rows[0]), shown[1:])
    documents = tuple(Document(ids[n], texts[n], bool(clusters.keep[order[n]]), int(number))
                      for n in range(shown.shape[0]))
    return ClusterView(int(number), tuple(ids), tuple(clusters.keep[order].tolist()), documents, (None, *jaccard),
                       (False, *verified))


def pair_view(result, id_a: Any, id_b: Any) -> PairView:
    """The documents whose ids are ``id_a`` and ``id_b``, a verified pair or not."""
    rows = np.array([_row_of(result, id_a), _row_of(result, id_b)], np.int64)
    if rows[0] == rows[1]:
        raise ParameterError(f"pair() takes two documents; got the id {id_a!r} twice")
    clusters = result._outcome.clusters
    texts, _ = texts_of(result, rows)
    at = [_place_in_clusters(clusters, int(row)) for row in rows]
    first, second = (Document(doc_id, text, True if n is None else bool(clusters.keep[n]),
                              None if n is None else int(clusters.cluster[n]))
                     for n, doc_id, text in zip(at, (id_a, id_b), texts))
    (jaccard,), (verified,) = _jaccard(result, rows[:1], rows[1:])
    return PairView(first, second, jaccard, verified)


def removed_rows(result) -> Any:
    """The removed rows in the input's own type (DedupResult.removed_rows), in input order,
    with the columns ``id`` (where the ids are not a column of the rows: id_field=None),
    kept_id, cluster and jaccard."""
    o, spec = result._outcome, shingle_spec(result.report["parameters"])
    removed = held_removed(o.clusters, result._ids_of, result.indexed_rows, (o.pair_a, o.pair_b, o.jaccard))
    jaccard = removed.jaccard.copy()
    here = np.flatnonzero(removed.kept >= 0)  # kept documents of the input (not indexed ones)
    if here.shape[0]:
        kept, at = np.unique(removed.kept[here], return_inverse=True)
        shift = result.indexed_rows  # (_content takes the outcome's rows)
        jaccard[here] = texts_jaccard(_content(result, removed.docs[here] + shift), _content(result, kept + shift),
                                      at, spec)
    columns: dict[str, pa.Array] = {}
    if result.report["parameters"].get("id_field") is None:
        columns["id"] = result._ids_of(removed.docs + result.indexed_rows)
    assert removed.kept_id is not None, "held_removed was given ids_of"
    columns.update(zip(ADDED_COLUMNS, (removed.kept_id, pa.array(removed.cluster, pa.int64()),
                                       pa.array(jaccard, pa.float64(), mask=np.isnan(jaccard)))))
    mask = np.zeros(result.documents, bool)
    mask[removed.docs] = True
    return with_columns(result._restore(mask), columns, result.text_field)


def with_columns(rows: Any, columns: dict[str, pa.Array], text_field: str) -> Any:
    """``rows`` (what DedupResult.restore gives: a list, a pandas or polars Series or
    DataFrame, a pyarrow Table or Array, a Hugging Face Dataset, a cuDF DataFrame) with
    ``columns`` added, in its own type: a list as a list of dicts (a text under ``text_field``),
    a Series as a DataFrame (its values under its name, where it has one, else ``text_field``)
    and an Arrow array as a Table (its values under ``text_field``)."""
    module = type(rows).__module__.split(".")[0]
    if isinstance(rows, list):
        items = [dict(item) if isinstance(item, dict) else {text_field: item} for item in rows]
        _refuse_clash({name for item in items for name in item}, columns, text_field)
        values = {name: column.to_pylist() for name, column in columns.items()}
        for n, item in enumerate(items):
            item.update((name, column[n]) for name, column in values.items())
        return items
    if module == "pandas":
        texts = text_field if rows.ndim > 1 or rows.name is None else rows.name
        frame = rows.to_frame(name=texts) if rows.ndim == 1 else rows
        _refuse_clash(set(frame.columns), columns, texts)
        return frame.assign(**{name: column.to_numpy(zero_copy_only=False) if pa.types.is_floating(column.type)
                               else column.to_pylist() for name, column in columns.items()})
    if module == "polars":
        import polars

        texts = rows.name or text_field if isinstance(rows, polars.Series) else text_field
        frame = rows.to_frame(texts) if isinstance(rows, polars.Series) else rows
        _refuse_clash(set(frame.columns), columns, texts)
        return frame.with_columns([polars.Series(name, column) for name, column in columns.items()])
    if module == "datasets":
        _refuse_clash(set(rows.column_names), columns, text_field)
        for name, column in columns.items():
            rows = rows.add_column(name, column.to_pylist())
        return rows
    if module == "cudf":
        import cudf

        _refuse_clash(set(rows.columns), columns, text_field)
        frame = rows.copy()
        for name, column in columns.items():
            frame[name] = cudf.Series.from_arrow(column).values
        return frame
    if isinstance(rows, (pa.Array, pa.ChunkedArray)):  # texts, as a Series' (a table of them)
        rows = pa.table({text_field: rows})
    assert isinstance(rows, pa.Table), f"rows of type {type(rows).__name__}"
    _refuse_clash(set(rows.column_names), columns, text_field)
    for name, column in columns.items():
        rows = rows.append_column(name, column)
    return rows


def _refuse_clash(present: set, columns: dict, texts: str) -> None:
    """ParameterError where the rows have a column (``present``) that ``columns`` would add;
    texts: the column that holds the texts, which id_field= cannot name."""
    clash = [name for name in columns if name in present]
    if clash:
        hint = (" (the run's ids are not that column, no id_field= given: pass id_field='id' to name the documents "
                "by it)" if clash[0] == "id" != texts else "")
        raise ParameterError(f"the input has a column {clash[0]!r}, which removed_rows() adds; rename it to see "
                             f"the removed rows{hint}")
