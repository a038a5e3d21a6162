"""The removed documents as an output (``removed/`` beside ``deduplicated/``, or one file
``removed.<format>``): each removed row with every column of its input, and three columns
added: ``kept_id``, the id of the document its cluster keeps; ``cluster``, the cluster's number
(clusters/'s); ``jaccard``, the exact Jaccard of the two documents' shingle sets.

The Jaccard is computed here from the two texts, by the verification's own code (the shingle
sets of core/shingling.py, core.verify.pair_jaccard), because a removed document need not be a
verified pair with the kept one (a cluster is a connected component of the pairs). Where the
kept document is a persistent index's (a run against an index keeps the indexed documents; the
index keeps their shingles, not their text), the verified pair's Jaccard is given where the
two are a pair, else null.

Which documents are removed, their clusters and their kept documents come from the clusters
held (held_removed) or, in a cluster's run, from the parts its tasks left in the work directory
(PartsRemoved), as each form of the clusters gives them (removed_of): a task that writes an
input file's removed rows reads the parts of its own documents alone, and the texts of their
kept documents from the shards that hold them.
"""

from __future__ import annotations

import itertools
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Optional, Union

import numpy as np
import pyarrow as pa

from ..backends import get_backend
from ..core.cluster import Clusters, kept_documents
from ..core.content import gathered_type
from ..core.content import unit_buffers
from ..core.copies import are_copies, first_copies
from ..core.shingling import ShingleBatch, ShingleSpec
from ..core.verify import document_sets, pair_jaccard
from ..errors import OutputError
from ..io.layout import as_input
from ..io.stamps import FileStamp
from ..io.write import ROWS_PER_WRITE, parquet_writer, write_jsonl_batches, write_to
from .kept import Kept

if TYPE_CHECKING:
    from .clusterparts import ClusterParts

REMOVED_DIR = "removed"
ADDED_COLUMNS = ("kept_id", "cluster", "jaccard")
# Text units (bytes, or token ids) shingled at once for the removed rows' Jaccard.
SET_BATCH_UNITS = 1 << 24


@dataclass
class RemovedDocs:
    """Removed documents, ascending: docs, int64 (k,), numbered as the input's (a run against
    an index: its own rows, after the indexed ones); cluster, int64 (k,); kept, int64 (k,), the
    document each one's cluster keeps, numbered as docs (negative: an indexed document);
    kept_id, its id (pyarrow Array (k,); None where not asked for); jaccard, float64 (k,): nan
    where it is computed from the texts (kept >= 0), else the verified pair's, nan where there
    is none or it was not asked for."""

    docs: np.ndarray
    cluster: np.ndarray
    kept: np.ndarray
    kept_id: Optional[pa.Array]
    jaccard: np.ndarray

    def of(self, start: int, stop: int) -> "RemovedDocs":
        """Those among the documents start .. stop-1 (RemovedOf's: held, sent once to each worker)."""
        first, last = np.searchsorted(self.docs, [start, stop])
        kept_id = None if self.kept_id is None else self.kept_id.slice(first, last - first)
        return RemovedDocs(self.docs[first:last], self.cluster[first:last], self.kept[first:last], kept_id,
                           self.jaccard[first:last])

    @property
    def id_type(self) -> pa.DataType:
        assert self.kept_id is not None, "the kept documents' ids were asked for"
        return self.kept_id.type


@dataclass
class PartsRemoved:
    """The removed documents of a cluster's run, read from the parts of its work directory
    (clusterparts.py: docs, cluster, keep, kept_doc and kept_id) that hold the
    documents asked for. id_type: the ids' wide type (ids.wide), which the parts hold; with_ids:
    read the kept documents' ids (kept_id) too. indexed_rows: the leading rows of the parts
    that are a persistent index's documents (none of them removed), numbered out of the
    RemovedDocs as held_removed does; indexed_pairs: the verified pairs (a, b, jaccard) whose a
    is one of them, for the Jaccard of a removed document whose kept one is (None: not asked
    for).

    read: the removed documents of each part read so far, by its number. Neighbouring ranges
    share parts (on Dask's local scheduler one part holds every clustered document), and the
    tasks that share this object (in this process, or on one worker) read each part once."""

    clustered: ClusterParts
    id_type: pa.DataType
    with_ids: bool = True
    indexed_rows: int = 0
    indexed_pairs: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]] = None
    read: dict[int, RemovedDocs] = field(default_factory=dict, repr=False, compare=False)

    def of(self, start: int, stop: int) -> RemovedDocs:
        k = self.indexed_rows
        found = [self.part(number).of(start, stop) for number in self.clustered.parts_removing(start + k, stop + k)]
        if not found:
            empty = np.zeros(0, np.int64)
            return RemovedDocs(empty, empty, empty, pa.array([], self.id_type) if self.with_ids else None, np.zeros(0))
        return RemovedDocs(np.concatenate([f.docs for f in found]), np.concatenate([f.cluster for f in found]),
                           np.concatenate([f.kept for f in found]),
                           pa.concat_arrays([f.kept_id for f in found]) if self.with_ids else None,
                           np.concatenate([f.jaccard for f in found]))

    def part(self, number: int) -> RemovedDocs:
        """The removed documents of part ``number`` (ascending, as the part holds its rows)."""
        if number not in self.read:
            names = ["docs", "cluster", "keep", "kept_doc"] + (["kept_id"] if self.with_ids else [])
            part = self.clustered.read_table(number, names)
            docs, cluster, keep, kept = (part[name].to_numpy() for name in ("docs", "cluster", "keep", "kept_doc"))
            ids = part["kept_id"].combine_chunks() if self.with_ids else None
            self.read[number] = removed_docs(docs, cluster, keep, kept,
                                             lambda gone: None if ids is None else ids.take(pa.array(gone, pa.int64())),
                                             self.indexed_rows, self.indexed_pairs)
        return self.read[number]


RemovedOf = Union[RemovedDocs, PartsRemoved]


def held_removed(clusters: Clusters, ids_of: Optional[Callable[[np.ndarray], pa.Array]], indexed_rows: int,
                 pairs: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]] = None) -> RemovedDocs:
    """The removed documents of ``clusters`` (over the outcome's rows, the first ``indexed_rows``
    of them an index's documents); ids_of(rows) gives the ids of documents in clusters (None: no
    kept_id); pairs: the verified pairs (a < b, jaccard; those of indexed documents suffice),
    whose Jaccard is given where the kept document is an indexed one (None: not asked for)."""
    kept = kept_documents(clusters)
    return removed_docs(clusters.docs, clusters.cluster, clusters.keep, kept,
                        lambda gone: None if ids_of is None else ids_of(kept[gone]), indexed_rows, pairs)


def removed_docs(docs: np.ndarray, cluster: np.ndarray, keep: np.ndarray, kept: np.ndarray,
                 kept_ids: Callable[[np.ndarray], Optional[pa.Array]], indexed_rows: int,
                 pairs: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> RemovedDocs:
    """The removed documents among clustered ones (docs int64, cluster, keep bool, kept: the
    document each one's cluster keeps, all (c,) over the outcome's rows, the first
    ``indexed_rows`` of them an index's documents, which RemovedDocs numbers out); kept_ids(gone):
    the ids of the kept documents of the removed ones at ``gone`` (int64 positions among the
    c), or None; pairs: the verified pairs (a, b, jaccard) for the Jaccard where the kept
    document is an indexed one (None: not asked for, nan)."""
    gone = np.flatnonzero(~keep)
    docs, cluster, kept = docs[gone], cluster[gone], kept[gone]
    jaccard = np.full(docs.shape[0], np.nan)
    indexed = np.flatnonzero(kept < indexed_rows)
    if indexed.shape[0] and pairs is not None:
        jaccard[indexed] = copies_jaccard(*pairs, kept[indexed], docs[indexed])
    return RemovedDocs(docs - indexed_rows, cluster.astype(np.int64, copy=False), kept - indexed_rows,
                       kept_ids(gone), jaccard)


def copies_jaccard(pair_a: np.ndarray, pair_b: np.ndarray, jaccard: np.ndarray, first: np.ndarray,
                   second: np.ndarray) -> np.ndarray:
    """float64: the Jaccard of rows first[i], second[i] where the run found them a pair, nan
    where it did not: a verified pair, or one the pairs imply through identical copies (listed
    as a star around the first copy, Jaccard 1.0: a copy pairs as its first does, and with the
    other copies; copies.first_copies), as DedupResult.all_pairs spells them out."""
    copy = are_copies(jaccard)
    a, b = (first_copies(pair_a[copy], pair_b[copy], rows) for rows in (first, second))
    return np.where(a == b, 1.0, verified_jaccard(pair_a, pair_b, jaccard, np.minimum(a, b), np.maximum(a, b)))


def verified_jaccard(pair_a: np.ndarray, pair_b: np.ndarray, jaccard: np.ndarray, first: np.ndarray,
                     second: np.ndarray) -> np.ndarray:
    """float64: the Jaccard of the verified pair (first[i], second[i]) (first < second), nan
    where the two are no verified pair."""
    pairs, asked = pair_keys(pair_a, pair_b), pair_keys(first, second)
    order = np.argsort(pairs, kind="stable")  # (structured: ordered by a, then b)
    if order.shape[0] == 0:
        return np.full(first.shape[0], np.nan)
    at = np.minimum(np.searchsorted(pairs[order], asked), order.shape[0] - 1)
    return np.where(pairs[order][at] == asked, jaccard[order][at], np.nan)


def pair_keys(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The pairs (a[i], b[i]) as one structured array, which sorts and compares as tuples."""
    keys = np.empty(a.shape[0], dtype=[("a", np.int64), ("b", np.int64)])
    keys["a"], keys["b"] = a, b
    return keys


def shingle_spec(parameters: Mapping) -> ShingleSpec:
    """The shingling of a run, from its report's parameters."""
    p = parameters
    return ShingleSpec(p["shingle"], int(p["ngram"]), p.get("unicode"), bool(p.get("strip_punctuation")),
                       bool(p.get("strip_symbols")))


def check_removed_columns(schema: pa.Schema, id_field: Optional[str]) -> None:
    """OutputError where removed/ cannot stand beside input rows of columns ``schema``
    (refuse_added_columns, refuse_other_ids_beside): checked where the rows are known, before
    a run on data given in Python and before any write."""
    refuse_added_columns(schema)
    refuse_other_ids_beside(schema, id_field)


def check_removed_beside(schemas: list[tuple[str, pa.Schema]], id_field: Optional[str]) -> None:
    """check_removed_columns of each input's columns (``schemas``: (path as shown, columns), as
    Store.input_schemas gives them): a staged run's, once its signature stage has read them."""
    for _, schema in schemas:
        check_removed_columns(schema, id_field)


def refuse_added_columns(schema: pa.Schema) -> None:
    """OutputError where the rows have a column that removed/ adds (ADDED_COLUMNS)."""
    clash = [name for name in ADDED_COLUMNS if name in schema.names]
    if clash:
        raise OutputError(f"the input has a column {clash[0]!r}, which removed/ adds; rename it to write the "
                          "removed documents")


def refuse_other_ids_beside(schema: pa.Schema, id_field: Optional[str]) -> None:
    """OutputError where the rows have a column ``id`` but the run's ids are not it (id_field
    None: row positions, or file:line): removed/'s kept_id would stand beside ids of another
    kind, and join to the wrong rows by them."""
    if id_field is None and "id" in schema.names:
        raise OutputError("the input has a column 'id', but the run's ids are not it (no id_field= given): removed/'s "
                          "kept_id would name the kept documents by other ids than that column; pass id_field='id' "
                          "to name documents by it, or rename the column")


def removed_schema(schema: pa.Schema, removed_of: RemovedOf) -> pa.Schema:
    """The columns of removed/'s files of inputs of columns ``schema``: those, then ADDED_COLUMNS;
    the schema's metadata kept (pandas' own, which gives its columns their dtypes back)."""
    return pa.schema(list(schema) + [pa.field("kept_id", removed_of.id_type), pa.field("cluster", pa.int64()),
                                     pa.field("jaccard", pa.float64())], metadata=schema.metadata)


def removed_table(rows: pa.Table, texts: pa.Array, removed: RemovedDocs, kept_texts: Callable[[np.ndarray], pa.Array],
                  spec: ShingleSpec, schema: pa.Schema) -> pa.Table:
    """The rows of removed/ for ``removed``: ``rows``, their input rows (in that order), with
    the columns of ``schema`` (layout.as_input), then ADDED_COLUMNS; texts: their content
    (text, or token ids); kept_texts(docs) gives the content of the kept documents ``docs``
    (int64 ascending, distinct)."""
    refuse_added_columns(schema)
    jaccard = removed.jaccard.copy()
    here = np.flatnonzero(removed.kept >= 0)
    if here.shape[0]:
        kept, at = np.unique(removed.kept[here], return_inverse=True)
        jaccard[here] = texts_jaccard(texts.take(pa.array(here)), kept_texts(kept), at, spec)
    table = as_input(rows, schema)
    assert removed.kept_id is not None, "removed/ names the kept documents"
    added = [removed.kept_id, pa.array(removed.cluster, pa.int64()),
             pa.array(jaccard, pa.float64(), mask=np.isnan(jaccard))]
    for name, column in zip(ADDED_COLUMNS, added):
        table = table.append_column(name, column)
    return table


def texts_jaccard(first: pa.Array, second: pa.Array, at: np.ndarray, spec: ShingleSpec) -> np.ndarray:
    """float64 (k,): the exact Jaccard of the shingle sets of first[i] and second[at[i]] (text
    or token ids; null: the empty document), as verification computes it (two empty sets:
    nan): the sets made by the CPU backend's kernels, a batch at a time, as a run's are."""
    content = pa.concat_arrays([plain(first), plain(second)])
    backend = get_backend("cpu")
    units = np.diff(unit_buffers(content)[1])  # (a bound on each document's shingles)

    def shingles_of(docs: np.ndarray) -> ShingleBatch:
        return backend.shingle_sets(*unit_buffers(content.take(pa.array(docs, pa.int64()))), spec)

    sets = document_sets(shingles_of, np.arange(len(content), dtype=np.int64), units, SET_BATCH_UNITS)
    return pair_jaccard(sets, np.arange(len(first)), len(first) + np.asarray(at, np.int64))


def plain(content: Union[pa.Array, pa.ChunkedArray]) -> pa.Array:
    """Content as one array of the type content gathered from several files has."""
    if isinstance(content, pa.ChunkedArray):
        content = content.combine_chunks()
    return content.cast(gathered_type(content.type))


def in_memory_removed(table: pa.Table, texts: pa.ChunkedArray, start: int, stop: int, removed_of: RemovedOf,
                      spec: ShingleSpec, schema: pa.Schema) -> pa.Table:
    """removed_table of the rows start .. stop-1 of an in-memory run's ``table`` (every row a
    document; texts: its content column whole, which the kept documents are read from)."""
    removed = removed_of.of(start, stop)
    local = pa.array(removed.docs - start, pa.int64())
    rows = table.slice(start, stop - start).take(local)
    return removed_table(rows, texts.slice(start, stop - start).take(local), removed,
                         lambda docs: texts.take(pa.array(docs, pa.int64())), spec, schema)


def shard_removed(reader, shard_rows: np.ndarray, rows: Kept, index: int, removed_of: RemovedOf, spec: ShingleSpec,
                  schema: Optional[pa.Schema] = None) -> pa.Table:
    """removed_table of shard ``index`` of a staged run (reader: its shardreader.ShardReader;
    shard_rows: Shards.rows; rows: which rows are documents, ShardDocuments.rows), the kept
    documents' texts read from the shards that hold them; schema: the columns written, the
    shard's file's own where None."""
    start, stop = int(shard_rows[index]), int(shard_rows[index + 1])
    documents = np.flatnonzero(rows.mask(start, stop))  # the shard's rows that are documents
    first = rows.count(0, start)  # the shard's first document
    removed = removed_of.of(first, first + documents.shape[0])
    corpus = reader.corpus(index)
    local = pa.array(documents[removed.docs - first], pa.int64())
    if schema is None:
        assert corpus.files and corpus.files[0].schema is not None, "a file as read_one_file read it"
        schema = corpus.files[0].schema
    return removed_table(corpus.table.take(local), corpus.text_array().take(local), removed,
                         lambda docs: reader.texts_of_rows(shard_rows, rows.spilled(docs)), spec, schema)


def write_file_removed(reader, shard_rows: np.ndarray, rows: Kept, indices: list[int], path: str, format: str,
                       removed_of: RemovedOf, spec: ShingleSpec, stamps: list[Optional[FileStamp]],
                       consequence: str) -> None:
    """Task: one input file's removed rows (shard_removed of each of its shards ``indices``,
    in order) into ``path`` (a path or URL), refused as shardedrows.write_file_rows refuses a
    file that is no longer as each shard's stamp says."""

    def write(local: Path) -> None:
        with ExitStack() as checks:
            for index, stamp in zip(indices, stamps, strict=True):
                checks.enter_context(reader.unchanged(index, stamp, consequence))
            write_tables((shard_removed(reader, shard_rows, rows, index, removed_of, spec) for index in indices),
                         local, format)

    write_to(path, write)


def write_tables(tables, path: Path, format: str, schema: Optional[pa.Schema] = None) -> None:
    """Tables of one file's rows (an iterator, read one at a time; the columns of the first,
    or ``schema``) into ``path`` as Parquet or JSON Lines, its folders made; a file with no row
    is written too (with its columns, for Parquet)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tables = iter(tables)
    if format == "jsonl":
        write_jsonl_batches((batch for table in tables for batch in table.to_batches(ROWS_PER_WRITE)), path)
        return
    first = next(tables, None)
    columns = schema if schema is not None else first.schema if first is not None else None
    assert columns is not None, "a file with no table has a schema given"
    with parquet_writer(path, columns) as writer:
        for table in itertools.chain([first] if first is not None else [], tables):
            if table.num_rows:  # (no empty row groups)
                writer.write_table(table)
