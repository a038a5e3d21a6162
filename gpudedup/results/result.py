"""What a run gives back: the DedupResult (ids attached to the pipeline's row-level outcome, the
one place where rows become ids) and the writing of its outputs (docs/output-formats.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Union, cast

import numpy as np
import pyarrow as pa

from ..core.copies import are_copies, implied_pairs
from ..pipeline.outcome import Outcome
from ..pipeline.kept import Kept
from ..pipeline.pairs import with_first_below
from ..pipeline.keptrows import HeldRows
from ..pipeline.removedrows import REMOVED_DIR, check_removed_columns, shingle_spec
from ..display import result_html
from ..errors import OutputError, ParameterError, in_interface_words
from ..pipeline.tables import NamedRows, pairs_parts, whole_table
from .html_report import report_figures, texts_read, write_report
from .inspection import ClusterView, PairView, cluster_view, pair_view, removed_rows
from ..ids import IdSource, id_source, wide
from ..io.storage import Given, Location, child_name
from ..io.layout import CLUSTERS_DIR, KEPT_DIR, PAIRS_DIR, output_names, part_name, part_rows
from ..io.commit import atomic_output_dir
from ..io.outputdir import check_apart_from_inputs, output_location
from ..io.staging import tasks_folder
from ..io.write import OUTPUT_FORMATS, write_json, write_jsonl, write_parquet
from ..pipeline.report import Report
from ..stages import StageLog

if TYPE_CHECKING:
    from ..pipeline.clusterparts import ClusterParts
    from ..pipeline.daskops import DaskExecutor
    from ..pipeline.protocols import Executor
    from ..pipeline.shardedrows import ShardedTable


@dataclass
class DedupResult:
    """What ``dedup`` found.

    pairs: pyarrow Table (id_a, id_b, jaccard): every verified pair, id_a < id_b; made when
        first asked for (``write`` writes it a part at a time: pairs_parts).
    clusters: pyarrow Table (id, cluster, keep, kept_id): every document in a cluster of two or
        more, with the id of its cluster's kept document; made when first asked for.
    keep: numpy bool (n,), aligned with the input: False for the removed duplicates (and for
        records given that on_error="skip" left out); made when first asked for from
        ``removed`` (int64 ascending: the input rows removed, made when first asked for: a
        cluster's run that writes its kept rows on its workers never holds them). Both
        read-only, as ``checked_jaccard``: ``deduplicated`` and ``write`` read them.
    deduplicated: the kept rows, in the input's own type (list, pandas or polars Series with
        the kept rows' index, pandas, polars, pyarrow, cuDF, Hugging Face Dataset); a list of
        the kept strings for an iterable of strings; a pyarrow Table for paths, an iterable
        of dicts and an IterableDataset.
    report: counts, parameters used, time and memory per stage (report.Report; report.json).
    table: all input rows as a pyarrow Table (what ``write`` filters).
    text_field: the column of ``table`` holding the text.
    checked_jaccard: numpy float64 (c,): every candidate pair verification checked, verified
        or not (the report's histogram of candidates): its exact Jaccard where that reaches the
        threshold, verify.BELOW_THRESHOLD (-1.0) where it does not (the check stops there).
        The same values in every runner, not in one order: a run with a work directory gives
        the verified pairs' first, then the others'.
    _outcome: the pipeline's results over row numbers (pipeline.outcome.Outcome), which ``pairs`` and
        ``clusters`` name by id.
    ids: the id of every row (pyarrow Array, in row order), read when first asked for (a
        staged run's stay in its shards until then: ids.IdSource).
    _named: the ids of the documents in clusters, the only ones pairs and clusters name
        (NamedRows): read when the result is made where its clusters are held (a run in one
        process, whose work directory may be gone when it writes), else when first asked for,
        from a cluster's parts or, once the result holds everything here (_hold_here), from the
        ids in memory (a cluster's run that writes its results never asks).
    """

    documents: int  # the input's rows (n)
    report: Report
    table: pa.Table = field(repr=False)
    _outcome: Outcome = field(repr=False)
    _id_source: IdSource = field(repr=False)  # the id of every row (ids.py)
    _inputs: list = field(default_factory=list, repr=False)
    text_field: str = "text"
    skipped_records: list = field(default_factory=list, repr=False)  # on_error="skip": what and why
    _on_error: str = "stop"
    _restore: Optional[Callable[[np.ndarray], Any]] = field(default=None, repr=False)
    # A run against a persistent index: the outcome's rows 0 .. indexed_rows-1 are indexed
    # documents (in ids, pairs and clusters, not in table or keep); the input's rows follow.
    indexed_rows: int = 0
    # An in-memory run over files: the files the rows of ``table`` came from, in order
    # (io.source.SourceFile), which ``write`` writes the kept rows back into (io/layout.py).
    _sources: list = field(default_factory=list, repr=False)
    # A run over files: every scanned file's output name (io.layout.output_bases).
    _output_bases: dict = field(default_factory=dict, repr=False)
    _names_read: Optional["NamedRows"] = field(default=None, repr=False)  # ``named``, where read already
    # Records given from Python of which on_error="skip" left some out: (int64 (n,), the
    # position among them of each row of ``table``; how many were given). None: every one read.
    _given_rows: Optional[tuple[np.ndarray, int]] = field(default=None, repr=False)
    # A run against an index made with verification "source": the files it reads its
    # documents from, which ``write`` must not write over (IndexReader.source_files).
    _index_files: list = field(default_factory=list, repr=False)
    # A table given in Python: its columns, in whose types ``write`` writes its rows back.
    _given_schema: Optional[pa.Schema] = field(default=None, repr=False)

    @classmethod
    def _of(cls, outcome: Outcome, ids: Union[pa.Array, IdSource], table: Any, restore: Callable[[np.ndarray], Any],
           inputs: list, text_field: str, id_field: Optional[str], skipped_records: list, on_error: str,
           indexed_rows: int = 0, sources: Optional[list] = None,
           output_bases: Optional[dict] = None,
           given_rows: Optional[tuple[np.ndarray, int]] = None) -> "DedupResult":
        """The result of a run: ``ids`` (the id of every row, in row order: an Arrow array or
        an ids.IdSource) attached to the outcome's rows, here and nowhere else; inputs: the paths read, as given ([] for
        in-memory data), which the report names with the fields read (Report.with_reading);
        indexed_rows: the leading rows that are a persistent index's documents, not the input's
        (``keep`` is the input's rows only); sources: the files of an in-memory run over files
        (DedupResult.sources); output_bases: a run over files' output names; given_rows:
        records given of which some were left out (DedupResult._given_rows)."""
        report = outcome.report.with_reading(text_field, id_field, on_error, inputs)
        source = id_source(ids)
        names_read = outcome.clustered.names_now(source)  # (held from now where the clusters are)
        return cls(documents=outcome.documents - indexed_rows, report=report, table=table, _inputs=inputs,
                   text_field=text_field, _id_source=source, skipped_records=skipped_records, _on_error=on_error,
                   _names_read=names_read,
                   _restore=restore, _outcome=outcome,
                   indexed_rows=indexed_rows, _sources=[s for s in sources or [] if s.location is not None],
                   _output_bases=output_bases or {}, _given_rows=given_rows,
                   _given_schema=next((s.schema for s in sources or [] if s.location is None), None))

    def _hold_here(self) -> None:
        """Hold the ids, the pairs, the clusters and the copies in this process from now on
        (a cluster's run without a work directory of its own: its temporary one is about to
        go; the input files are read again when the result writes)."""
        self._id_source = id_source(self.ids)
        self._outcome.read_now()

    @cached_property
    def _removed_rows(self) -> np.ndarray:
        """int64 ascending: the rows of ``table`` removed as duplicates."""
        removed = self._outcome.removed  # (an indexed document is never removed)
        return removed[removed >= self.indexed_rows] - self.indexed_rows

    @cached_property
    def _kept_rows(self) -> np.ndarray:
        """bool (documents,): the rows of ``table`` kept (``keep``, over the rows read)."""
        return Kept.leaving_out(self._removed_rows).mask(0, self.documents)

    @cached_property
    def removed(self) -> np.ndarray:
        """int64 ascending: the input rows removed as duplicates (made when first asked for);
        positions among the records given where on_error="skip" left some of them out.
        Read-only, as ``keep`` and ``checked_jaccard``: the result's own arrays, which
        ``deduplicated`` and ``write`` read (copy one to change it)."""
        if self._given_rows is None:
            return read_only(self._removed_rows)
        return read_only(self._given_rows[0][self._removed_rows])

    @cached_property
    def _named(self) -> "NamedRows":
        """The ids of the documents in clusters (the class docstring)."""
        if self._names_read is not None:
            return self._names_read
        return self._outcome.clustered.names(self._id_source, self._wide_id_type)

    def _ids_of(self, rows: np.ndarray) -> pa.Array:
        """The ids of some documents in clusters (rows: int64, of the outcome): from ``named``
        where the result holds it from when it was made, else from the id source (a cluster's
        run's shards, whose named would be every clustered document's; or the ids in memory
        after _hold_here)."""
        if self._names_read is None:
            return self._id_source.take(rows)
        return self._names_read.ids.take(pa.array(self._names_read.positions(rows)))

    @cached_property
    def pairs(self) -> pa.Table:
        """(id_a, id_b, jaccard): every verified pair, id_a < id_b, sorted; made when first asked
        for (a run that only writes its results writes it a part at a time)."""
        return whole_table(self._pairs_parts())

    @cached_property
    def clusters(self) -> pa.Table:
        """(id, cluster, keep, kept_id): every document in a cluster of two or more, in input
        order; made when first asked for, as ``pairs``."""
        return whole_table(self._clusters_parts())

    def _pairs_parts(self) -> Iterator[pa.Table]:
        """``pairs`` in parts of layout.part_rows() rows, in order."""
        o = self._outcome
        return pairs_parts(self._named, o.pair_a, o.pair_b, o.jaccard)

    def _clusters_parts(self) -> Iterator[pa.Table]:
        """``clusters`` in parts of layout.part_rows() rows, in order (a cluster's run's made
        from the parts it left in its work directory, which hold their ids)."""
        return self._outcome.clustered.table_in_parts(lambda: self._named, self._wide_id_type)

    @property
    def _wide_id_type(self) -> pa.DataType:
        """The ids' type as the tables hold them (ids.wide)."""
        return wide(pa.array([], self._id_source.type)).type

    @property
    def checked_jaccard(self) -> np.ndarray:
        """float64 (c,): every pair verification checked (the class docstring); read-only."""
        return read_only(self._outcome.checked_jaccard)

    @cached_property
    def keep(self) -> np.ndarray:
        """bool, aligned with the input: False for the removed duplicates, and for the records
        given that on_error="skip" left out (``skipped_records``), so that the input where
        ``keep`` is what ``deduplicated`` holds. Read-only (``removed``)."""
        if self._given_rows is None:
            return read_only(self._kept_rows)
        positions, given = self._given_rows
        keep = np.zeros(given, dtype=bool)
        keep[positions[self._kept_rows]] = True
        return read_only(keep)

    @cached_property
    def ids(self) -> pa.Array:
        """The id of every row, in row order (pyarrow Array)."""
        return self._id_source.all()

    @cached_property
    def deduplicated(self):
        """The kept rows in the input's own type, made on first use (a copy of the kept rows,
        which a run that only writes its results never needs) from the input as it was when
        the run read it: a list is copied then, a pandas or cuDF frame shallow-copied (with
        pandas' copy-on-write, pandas 3's default, changes made to the frame afterwards do not
        reach it)."""
        return self._restore(self._kept_rows)

    def _repr_html_(self) -> str:
        """The notebook's view: the counts, and the largest clusters' ids (display.py)."""
        return result_html(self)

    def __repr__(self) -> str:
        r = self.report["results"]
        return (f"DedupResult({self.report['input']['documents']} documents, {r['clusters']} clusters, "
                f"{r['removed_documents']} removed, {r['verified_pairs']} verified pairs)")

    def cluster(self, number: Optional[int] = None, *, id: Any = None) -> ClusterView:
        """A cluster with its documents' texts side by side, the words of each removed one that
        the kept one lacks marked (HTML in a notebook, text in a terminal): the cluster
        ``number`` (clusters' ``cluster`` column), or the cluster of the document whose id is
        ``id``. Every member is named; the texts of the first inspection.MEMBERS_SHOWN are
        shown, each with its exact Jaccard to the kept document (inspection.ClusterView)."""
        return cluster_view(self, number, id)

    def pair(self, id_a: Any, id_b: Any) -> PairView:
        """Two documents by their ids, a verified pair or not, their texts side by side with the
        words of each that the other lacks marked, their exact Jaccard, whether they are a
        verified pair and their clusters (inspection.PairView)."""
        return pair_view(self, id_a, id_b)

    def removed_rows(self) -> Any:
        """The removed rows, in input order, in the input's own type (as ``deduplicated``; a
        list as a list of dicts, a Series as a DataFrame), with the columns kept_id (the id
        of the document its cluster kept), cluster and jaccard (the exact Jaccard of the two
        shingle sets; null where the kept document is an indexed one that is no verified pair
        with it): the columns of the removed/ output (write_removed); and before them id, where
        the ids are not a column of the rows (id_field=None), which removed/ leaves out."""
        return removed_rows(self)

    def all_pairs(self) -> pa.Table:
        """``pairs`` with every group of identical copies spelled out.

        ``pairs`` lists documents with identical shingle sets as a star around the first of
        them (Jaccard 1.0; docs/output-formats.md). Here the copies are also paired with each
        other, and each copy with every document its text is paired with, at that pair's
        Jaccard: every pair at or above the threshold that the run found. Quadratic in the size
        of a group of copies; for inspection and for comparison with an all-pairs truth.
        """
        a, b, jaccard = self._outcome.pair_a, self._outcome.pair_b, self._outcome.jaccard
        copy = are_copies(jaccard)
        a, b, source = implied_pairs(a, b, a[copy], b[copy], len(self._id_source))  # indexed rows too
        # (Every document of an implied pair is in a cluster: named holds its id.)
        return whole_table(pairs_parts(self._named, a, b, np.where(source >= 0, jaccard[np.maximum(source, 0)], 1.0)))

    def write(self, output_dir: Given, format: str = "parquet", overwrite: bool = False,
              single_file: bool = False, write_removed: bool = False) -> Location:
        """Write the kept rows, clusters, pairs and report.json into ``output_dir`` (a folder, or
        a URL on object storage: io/commit.py, io/remote_output.py), atomically:
        for a run over files, deduplicated/ with one file per input file and pairs/ and
        clusters/ as Parquet datasets; for in-memory data or with ``single_file``,
        deduplicated.{parquet,jsonl}, clusters.parquet and pairs.parquet (io/layout.py,
        docs/output-formats.md). write_removed: also the removed rows, with kept_id, cluster and
        jaccard added, as removed/ beside deduplicated/ (or removed.{parquet,jsonl}:
        pipeline/removedrows.py)."""
        return self._write(output_dir, format, overwrite, single_file, write_removed)

    def _write(self, output_dir: Given, format: str = "parquet", overwrite: bool = False, single_file: bool = False,
               write_removed: bool = False, executor: Optional[Executor] = None, checked: bool = False) -> Location:
        """``write``, by the tasks of ``executor`` (the run's, where it is a cluster's still up:
        write_outputs) where they can, else in this process; checked: the run that made this
        result checked ``output_dir`` before its work (outputdir.check_output_dir)."""
        return write_outputs(output_dir, self, format, overwrite, single_file, write_removed, executor, checked)

    @cached_property
    def _rows(self) -> Union[HeldRows, ShardedTable]:
        """The input rows as ``write`` writes them, one form per runner: a staged run's shards
        (pipeline/shardedrows.py), or an in-memory run's table (pipeline/keptrows.py)."""
        if not isinstance(self.table, pa.Table):  # (a staged run's: shardedrows.ShardedTable)
            return self.table
        return HeldRows(self.table, self.text_field, self._sources, [f.documents for f in self.report.input.files],
                        self._given_schema)


# errors.jsonl: one object per record or file --on-error skip left out (line None: a file).
SKIPPED_RECORD_SCHEMA = pa.schema([("file", pa.string()), ("line", pa.int64()), ("reason", pa.string())])


def write_outputs(output_dir: Given, result: DedupResult, format: str, overwrite: bool,
                  single_file: bool = False, write_removed: bool = False,
                  executor: Optional[Executor] = None, checked: bool = False) -> Location:
    """DedupResult.write; executor: the run's, where it is a cluster's that is still up and
    its tasks are to write the files they can (the kept rows, removed rows, pairs and
    clusters of a staged run), else None: this process writes everything; checked: _write's."""
    if format not in OUTPUT_FORMATS:
        raise ParameterError(f"format= must be one of {', '.join(OUTPUT_FORMATS)}; got {format!r}")
    part_rows()  # (a bad setting refused before anything is written)
    # A run over files writes one file per input file (even none, when all were left out).
    # Before anything is written: two inputs that would share an output name are refused.
    names = (None if single_file or not result._inputs
             else output_names(result._rows.file_paths(), result._output_bases, format, output_location(output_dir)))
    if write_removed:
        check_removed_columns(result.table.schema, result.report["parameters"].get("id_field"))
    log = StageLog()
    try:
        with log.stage("write"):
            return _write_files(output_dir, result, format, overwrite, log, names, write_removed, executor, checked)
    except OSError as error:  # a full disk, a lost mount: the staging directory is already gone
        raise OutputError(f"{output_dir}: cannot write the results ({error.strerror or error}); "
                          "nothing was written") from None


def _write_files(output_dir: Given, result: DedupResult, format: str, overwrite: bool, log: StageLog,
                 names: Optional[list[str]], write_removed: bool = False,
                 executor: Optional[Executor] = None, checked: bool = False) -> Location:
    """names: the sharded layout's output names (output_names), or None for one file each;
    write_removed: the removed rows too (write_removed_rows); executor, checked: write_outputs'."""
    out = output_location(output_dir)
    # A staged run's work directory is kept apart from the output like an input: replacing an
    # output that holds it would delete what --resume needs.
    if result.report.work_dir:
        check_apart_from_inputs(out, [result.report.work_dir], "the output directory", "output=",
                                "the work directory", inside_allowed=True)
    # Apart from the inputs as given and the files read (links followed), and from the index a
    # run against one read or wrote: replacing an output that holds them would delete them.
    index = result.report["index"]["path"] if "index" in result.report else None
    with atomic_output_dir(output_dir, overwrite, result._inputs, index, result._rows.file_paths(),
                           result._index_files, checked) as staging:
        if names is not None:
            # (the kept rows need the removed documents alone, not their kept documents' ids)
            removed = result._outcome.clustered.removed_of(None, pa.null(), result.indexed_rows)
            # A staged run's tasks take report.html's texts as they read the shards.
            result._rows.write_files(staging, out, names, format, removed, executor, texts_read(result))
        else:
            result._rows.write_kept(staging / f"deduplicated.{format}", format, result._removed_rows,
                                    texts_read(result))
        if write_removed:
            write_removed_rows(result, staging, out, format, names, executor)
        write_pairs_and_clusters(result, staging, out, names is not None, executor)
        if result._on_error == "skip":  # written even when empty: "nothing was skipped"
            records = [{**record, "reason": in_interface_words(record["reason"])} for record in result.skipped_records]
            write_jsonl(pa.Table.from_pylist(records, schema=SKIPPED_RECORD_SCHEMA), staging / "errors.jsonl")
        # The report's figures are drawn within the write's time; the page itself needs the
        # finished report, so it comes after.
        figures = report_figures(result)
        # Time and memory of the write so far (the report itself is all that is left to write).
        def files_of(folder: str) -> list[str]:  # (of deduplicated/ or removed/)
            return [f"{folder}/{name}" for name in names] if names is not None else [f"{folder}.{format}"]

        result.report = result.report.with_write(log.snapshot("write"), str(out), format, names is None,
                                                 files_of(KEPT_DIR), files_of(REMOVED_DIR) if write_removed else None)
        write_report(result, staging, figures)  # report.html and its figures (html_report.FIGURE_FILES)
        # report.json last: a directory with a report is a finished one (and locally the rename
        # makes the whole directory appear at once anyway; on object storage it goes up last).
        write_json(result.report.as_dict(), staging / "report.json")
        # Last, before the commit: every input file as the run read it (the kept rows, and
        # report.html's texts, may have been read from the files again while writing).
        result._rows.check_unchanged()
    return out


def write_removed_rows(result: DedupResult, staging: Path, out: Location, format: str,
                       names: Optional[list[str]], executor: Optional[Executor] = None) -> None:
    """The removed rows with kept_id, cluster and jaccard (pipeline/removedrows.py): a file per
    input file under removed/, named as under deduplicated/ (names), by ``executor``'s tasks
    where a staged run writes its kept rows so; or one file removed.<format>."""
    o = result._outcome
    # The verified pairs of indexed documents give the Jaccard where the kept document is one.
    pairs = with_first_below(o.pairs, result.indexed_rows, executor) if result.indexed_rows else None
    removed = o.clustered.removed_of(result._ids_of, result._wide_id_type, result.indexed_rows, pairs)
    spec = shingle_spec(result.report["parameters"])
    if names is None:
        result._rows.write_removed(staging / f"{REMOVED_DIR}.{format}", format, removed, spec)
    else:
        result._rows.write_removed_files(staging, out, names, format, removed, spec, executor)


def write_pairs_and_clusters(result: DedupResult, staging: Path, out: Location, dataset: bool,
                             executor: Optional[Executor] = None) -> None:
    """Write clusters and pairs (write_table), here, a part at a time, unless ``executor`` is a
    cluster's, the tables a dataset and the run left its clusters in its work directory's parts:
    then clusters a task per part (each part made from the parts that hold its rows:
    clusterparts.clusters_table), pairs by pipeline/dask.write_pairs_by_tasks (the client holds
    none of the pairs or their ids)."""
    if not (dataset and result._outcome.clustered.in_parts and executor is not None and not executor.in_process):
        write_table(result._clusters_parts(), staging, CLUSTERS_DIR, dataset)
        write_table(result._pairs_parts(), staging, PAIRS_DIR, dataset)
        return
    clustered = cast("ClusterParts", result._outcome.clustered)
    # (start-up: a run in memory loads none of the Dask runner)
    from ..pipeline.clusterparts import write_clusters_table_part
    from ..pipeline.dask import write_pairs_by_tasks

    parts, = executor.share(clustered)  # (every task reads the parts' description)
    folder = tasks_folder(staging, out, CLUSTERS_DIR)
    executor.map(write_clusters_table_part,
                 [(parts, pieces, result._wide_id_type, child_name(folder, part_name(number)))
                  for number, pieces in enumerate(clustered.table_pieces())], "writing the clusters")
    write_pairs_by_tasks(cast("DaskExecutor", executor), result._outcome.pairs, clustered,
                         tasks_folder(staging, out, PAIRS_DIR), result._wide_id_type)


def write_table(parts: Iterator[pa.Table], staging: Path, name: str, dataset: bool) -> None:
    """Write pairs or clusters, given as their parts (DedupResult.pairs_parts), as
    ``name``/part-NNNNN.parquet, a Parquet dataset with a file per part, each made and written
    before the next (the sharded layout), or as one file ``name``.parquet."""
    if not dataset:
        write_parquet(whole_table(parts), staging / f"{name}.parquet")
        return
    (staging / name).mkdir()
    for number, part in enumerate(parts):
        write_parquet(part, staging / name / part_name(number))


def read_only(array: np.ndarray) -> np.ndarray:
    """A view of ``array`` that refuses writes: what a result hands out of its own arrays, so
    that a caller's ``mask &= other`` cannot change the rows it keeps or writes."""
    view = array.view()
    view.flags.writeable = False
    return view
