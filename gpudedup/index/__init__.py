"""A persistent index: deduplicate new data against everything kept before.

    index = gpudedup.Index.create("idx/", threshold=0.8, shingle="word", ngram=5)
    result = index.add(Path("week1/"), tag="week1")   # dedup week1 against the index, keep its rest
    result = index.dedup(Path("week2/"))              # the same, adding nothing
    index.query("some text")                          # the indexed documents near a text
    index.remove(tag="week1"); index.compact(); index.info()

Semantics (docs/index.md): adding new data is the batch job over (the indexed documents, then
the new data) with keep "first", except that an indexed document is never removed. Files and
the commit protocol: index/files.py; reading and the probe: index/reader.py; a lookup
(``query``): index/lookup.py; the pipeline's store over indexed and new documents:
index/store.py in memory, index/staged.py through a work directory (index/against.py chooses).
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from contextlib import ExitStack
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..pipeline.sourcecounts import check_group_field
from ..api import (TEXT_FIELD, TOKEN_FIELD, check_output_options, check_run_options, content_field, corpus_result,
                   dask_dedup, given_paths, inputs_and_places, on_dask, removed_columns_check)
from ..backends import Backend, get_backend
from ..core.hashing import Permutations, draw_permutations
from ..core.normalize import unicode_form_version
from ..core.ragged import offsets_from_counts
from ..display import index_html, index_text
from ..pipeline.job import run_job
from ..pipeline.memory import MemoryStore
from ..pipeline.workdir import resume_without_work_dir, work_dir_lock
from ..pipeline.workfolders import clear_cache
from ..errors import GpudedupError, OutputError, ParameterError
from ..io import storage
from ..io.inputs import InputFiles, Selection, documents_read
from ..io.python_inputs import to_corpus
from ..io.storage import Given, local_folder, location_of
from ..interrupts import note_index
from ..io.outputdir import check_run_places
from ..io.staging import temporary_work_dir
from ..memory import MemoryBudget, parse_sizes
from ..params import RESULT_PARAMETERS, DedupParams, check_targets_read
from ..results.result import DedupResult
from ..stages import StageLog, progress_display
from .files import (FORMAT, UNTAGGED, Manifest, changing, check_tag, collect_garbage, file_on, index_os_error,
                    interrupted_create, read_manifest, write_manifest, write_segment, write_tombstones, writer_lock)
from .lookup import matches
from .reader import IndexReader, as_index_ids, check_id_type, segment_arrays
from .sources import check_verification, merge_sources
from .adding import commit_new_segment, new_segment_writer
from .against import Against, AgainstStore

# The parameters an index fixes at create: every run against it uses them (results depend on
# them). keep is not among them: a run against an index keeps "first" (indexed documents first).
INDEX_PARAMETERS = tuple(name for name in RESULT_PARAMETERS if name != "keep")

__all__ = ["Index", "UNTAGGED"]

class Index:
    """A persistent index at ``path`` (made by ``Index.create``); see the module docstring."""

    def __init__(self, path: str | os.PathLike):
        self.path = local_folder(path, "an index")
        read_manifest(self.path)  # refuses what is not an index, naming the file
        self._reader: Optional[IndexReader] = None
        # Segments this object wrote: name -> its files' stamps (reader.Segment: not hashed again).
        self._written: dict[str, dict[str, Optional[tuple]]] = {}
        self._cached_permutations: Optional[tuple[tuple[int, int], Permutations]] = None  # (count, seed), drawn

    # --- making one ---------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike, *, verification: str = "sets", **parameters: Any) -> "Index":
        """Make an empty index at ``path`` (a new or empty directory) with the parameters that
        results depend on (DedupParams' names: threshold, shingle, ngram, num_perm, ...).

        verification: how a match with an indexed document is checked exactly: "sets" stores
        each document's shingle-hash set (self-contained); "source" stores where each document
        came from and shingles it again from there (a fraction of the size, but the source files
        must be kept as they were, and documents must be added from files; index/sources.py)."""
        check_verification(verification)
        unknown = set(parameters) - set(INDEX_PARAMETERS) - {"bands", "rows"}
        if unknown:
            raise ParameterError(f"unknown index parameters: {', '.join(sorted(unknown))}")
        params = DedupParams(**parameters)
        check_targets_read(params)
        root = local_folder(path, "an index")
        # A new or empty directory, or one where a create stopped before its commit (made again).
        if root.exists() and (not root.is_dir() or any(root.iterdir()) and not interrupted_create(root)):
            raise ParameterError(f"{root}: exists and is not an empty directory; an index needs a new one")
        if (file := file_on(root)) is not None:
            raise ParameterError(f"{root}: {file} is a file, not a directory; choose another path for the index")
        fixed = {key: value for key, value in params.result_parameters().items() if key != "keep"} | {"id_type": None}
        again = f"run `gpudedup index create {root}` again once that is fixed"
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise index_os_error(root, error, writing=True, outcome=again) from None
        with writer_lock(root, outcome=again), changing(root, again):
            # Again under the lock: another create may have committed meanwhile.
            if not interrupted_create(root):
                raise ParameterError(f"{root}: exists and is not an empty directory; an index needs a new one")
            manifest = Manifest(fixed, (), None, 0, verification)
            write_manifest(root, manifest)
            collect_garbage(root, manifest)  # an interrupted create's temporary manifests
        return cls(root)

    # --- what it holds ------------------------------------------------------------------------

    def params(self, manifest: Optional[Manifest] = None, **speed: Any) -> DedupParams:
        """The index's DedupParams, from ``manifest`` (None: the one committed now; ``speed``:
        batch_bytes, batch_rows, max_memory, shard_bytes)."""
        fixed = (manifest or read_manifest(self.path)).parameters
        recorded = fixed.get("unicode_version")
        if recorded is not None and recorded != unicode_form_version():
            raise ParameterError(
                f"{self.path}: the index's {fixed['unicode'].upper()} forms follow Unicode {recorded}, this pyarrow's "
                f"follow Unicode {unicode_form_version()}: text with characters assigned in between would hash "
                "differently; use the pyarrow the index was made with, or make a new index")
        return DedupParams(**{name: fixed[name] for name in INDEX_PARAMETERS}, bands=fixed["bands"],
                           rows=fixed["rows"], keep="first", **speed)

    def info(self, check: bool = False) -> dict:
        """Documents, segments, tags, bytes and parameters, as the last commit left them; check:
        every file read whole against its SHA-256 first (an add or a query checks what it reads)."""
        reader = IndexReader(self.path)
        if check:
            reader.check_files()
        manifest = reader.manifest
        tags: dict[str, int] = {}  # live documents per tag (removed ones left out)
        removed = reader.removed()
        for segment in reader.segments:
            column = segment.ids()["tag"]
            live = np.ones(len(column), dtype=bool)
            live[removed.get(segment.entry.name, np.zeros(0, np.int64))] = False
            for entry in pc.value_counts(column.filter(pa.array(live))).to_pylist():
                name = UNTAGGED if entry["values"] is None else str(entry["values"])
                tags[name] = tags.get(name, 0) + entry["counts"]
        size = sum(s.bytes for s in manifest.segments)
        documents = reader.documents
        return {"path": str(self.path), "format": FORMAT, "documents": documents,
                "removed_not_compacted": manifest.documents - documents,
                "segments": len(manifest.segments), "tags": tags, "bytes": size,
                "bytes_per_document": round(size / documents, 1) if documents else None,
                "generation": manifest.generation, "parameters": manifest.parameters,
                "verification": manifest.verification}

    def _overview(self) -> dict:
        """What the displays show: info() but the tags (which read every segment's ids)."""
        reader = IndexReader(self.path)
        manifest = reader.manifest
        return {"path": str(self.path), "documents": reader.documents, "segments": len(manifest.segments),
                "bytes": sum(s.bytes for s in manifest.segments), "generation": manifest.generation,
                "parameters": manifest.parameters, "verification": manifest.verification}

    def _repr_html_(self) -> str:
        """The notebook's view: path, documents, size, parameters (display.py)."""
        return index_html(self._overview())

    def __repr__(self) -> str:
        """A few lines that fit a terminal: path, documents, size, parameters (display.py)."""
        return index_text(self._overview())

    # --- runs against it ----------------------------------------------------------------------

    def dedup(self, data, *, text_field: str = TEXT_FIELD, id_field: Optional[str] = None,
              token_field: str = TOKEN_FIELD, backend: str | Backend = "auto", progress: Optional[bool] = None,
              on_error: str = "stop", batch_bytes: int | str | None = None, max_memory: int | str | None = None,
              shard_bytes: int | str | None = None, work_dir: Given | None = None, resume: bool = False,
              client=None, scheduler: Optional[str] = None, workers: Optional[int] = None,
              include: str | Sequence[str] | None = None, exclude: str | Sequence[str] | None = None,
              group_field: Optional[str] = None, output: Optional[Given] = None, format: str = "parquet",
              overwrite: bool = False, single_file: bool = False, write_removed: bool = False) -> DedupResult:
        """Deduplicate ``data`` (what gpudedup.dedup takes) against the index, adding nothing:
        the result's pairs and clusters name indexed documents by their ids; ``deduplicated``
        holds the new documents kept. batch_bytes, max_memory, shard_bytes, work_dir, resume,
        client, scheduler, workers, include, exclude, group_field, and output with format,
        overwrite, single_file and write_removed: as gpudedup.dedup takes them, the results
        written there by this process once the run is done (as ``add`` writes them). The output
        and the work directory must not be, hold or lie inside the index or an input
        (io.outputdir.check_run_places), checked before any work."""
        found = self._check_places(data, (output, format, overwrite, single_file, write_removed),
                                   (max_memory, shard_bytes, work_dir, client, scheduler, workers), on_error,
                                   Selection.of(include, exclude))
        with work_dir_lock(work_dir):  # (held while the results are written from it too)
            result, _ = self._run(self.reader(), data, text_field, id_field, token_field, backend, progress,
                                  on_error, (batch_bytes, max_memory, shard_bytes), work_dir, resume, client,
                                  scheduler, workers, found, group_field,
                                  removed_columns_check(output, write_removed, id_field))
            if output is not None:
                result._write(output, format, overwrite, single_file, write_removed, checked=True)
        return result

    def add(self, data, *, tag: Optional[str] = None, text_field: str = TEXT_FIELD, id_field: Optional[str] = None,
            token_field: str = TOKEN_FIELD, backend: str | Backend = "auto", progress: Optional[bool] = None,
            on_error: str = "stop", batch_bytes: int | str | None = None, max_memory: int | str | None = None,
            shard_bytes: int | str | None = None, output: Optional[Given] = None,
            format: str = "parquet", overwrite: bool = False,
            work_dir: Given | None = None, resume: bool = False, client=None,
            scheduler: Optional[str] = None, workers: Optional[int] = None,
            single_file: bool = False, include: str | Sequence[str] | None = None,
            exclude: str | Sequence[str] | None = None, write_removed: bool = False,
            group_field: Optional[str] = None) -> DedupResult:
        """``dedup``, then commit the new documents kept (those with shingles) to the index as
        one new segment tagged ``tag``. With ``output`` the results are written there first
        (atomically; DedupResult.write with ``format``, ``overwrite``, ``single_file``,
        ``write_removed``; group_field: as gpudedup.dedup takes it), so that an interrupted add
        never leaves an index that holds documents whose results were not written. The output
        and the work directory must not be, hold or lie inside the index or an input
        (io.outputdir.check_run_places), checked before any work."""
        check_tag(tag)
        found = self._check_places(data, (output, format, overwrite, single_file, write_removed),
                                   (max_memory, shard_bytes, work_dir, client, scheduler, workers), on_error,
                                   Selection.of(include, exclude))
        with writer_lock(self.path), work_dir_lock(work_dir), ExitStack() as stack:
            temporary = work_dir is None and workers is not None
            if temporary:  # (a local cluster's run spills into a work directory of its own, which
                # dedup deletes when it returns; the commit reads the spills after it: this one lasts)
                work_dir = os.path.join(stack.enter_context(temporary_work_dir()), "work")
            manifest = read_manifest(self.path)
            with changing(self.path):
                collect_garbage(self.path, manifest)  # what a killed writer left
            reader = IndexReader(self.path, manifest, earlier=self._reader, written=self._written)
            self._reader = reader  # the state before this add: the next reader takes its segments over
            try:
                result, store = self._run(reader, data, text_field, id_field, token_field, backend, progress,
                                          on_error, (batch_bytes, max_memory, shard_bytes), work_dir, resume, client,
                                          scheduler, workers, found, group_field,
                                          removed_columns_check(output, write_removed, id_field))
                if temporary:  # (gone with this call: reported as dedup reports a temporary one)
                    result.report = dataclasses.replace(result.report, work_dir=None)
                # Everything that can refuse the commit, before anything is written.
                check_id_type(manifest, store.inner.ids)
                kept = self._kept_new_rows(result, store)
                pointers = store.inner.source_pointers(kept) if manifest.verification == "source" else None
                index_entry = result.report["index"]
                result.report = result.report.with_index(index_entry["path"], index_entry["generation"],
                                                         index_entry["indexed_documents_checked"],
                                                         added=kept.shape[0] > 0)  # (none kept: no commit)
                unchanged = None if kept.shape[0] == 0 else f"nothing was added to the index {self.path}"
                again = unchanged and f"{unchanged}: run the add again with --overwrite"
                with new_segment_writer(self.path, manifest, self.params(manifest), store, tag, kept, pointers,
                                        alongside=output is not None) as new_segment:
                    if output is not None:
                        note_index(None, once_written=again)  # (said from the instant the output is written)
                        try:
                            result._write(output, format, overwrite, single_file, write_removed,
                                          checked=True)  # (checked before the run: check_run_places)
                        except OutputError as error:  # (the outputs come before the commit)
                            raise OutputError(f"{error}; nothing was added to the index") from None
                    note_index(again if output is not None else unchanged)
                    try:
                        with changing(self.path):
                            new = new_segment()
                            commit_new_segment(self.path, manifest, new)
                    except GpudedupError as error:
                        if output is None:
                            raise
                        raise type(error)(f"{error}; the run's results are in {output}: once that is fixed, run "
                                          "the add again with overwrite=True") from None
                if new is not None:  # (the stamps the next reader checks the segment's files by)
                    self._written[new.entry.name] = new.stamps
                if temporary:
                    result._hold_here()  # (the work directory goes with this call)
            finally:
                if work_dir is not None:  # the commit read the work directory again: this machine's copies
                    clear_cache(storage.full_name(location_of(work_dir)))
        return result

    def _check_places(self, data, writing: tuple, running: tuple, on_error: str,
                      selection: Selection) -> Optional[InputFiles]:
        """dedup's and add's checks before any work: the output options ``writing`` (output,
        format, overwrite, single_file, write_removed), the run options ``running``
        (api.check_run_options'), and where the run writes, as api.inputs_and_places checks it
        (apart from the inputs, no two inputs with one output name), and apart from the index
        and the files it verifies from too. Returns that scan of the inputs (None for data that
        is not paths), which the run reads by."""
        output, format, overwrite, single_file, write_removed = writing
        check_output_options(output, format, overwrite, single_file, write_removed)
        check_run_options(*running)
        work_dir, writes = running[2], output is not None or running[2] is not None
        index_files = self.reader().source_files() if writes else []
        if writes:  # (first what needs no scan, the index and its files named where they are in the way)
            check_run_places(given_paths(data), output, overwrite, work_dir, index=self.path, scan=False,
                             index_files=index_files)
        found = inputs_and_places(data, on_error, output, overwrite, work_dir, format, single_file, selection)
        if writes:
            check_run_places(given_paths(data), output, overwrite, work_dir, index=self.path, found=found,
                             index_files=index_files)
        return found

    def _run(self, reader: IndexReader, data, text_field: str, id_field: Optional[str], token_field: str,
             backend, progress: Optional[bool], on_error: str, speed: tuple, work_dir=None, resume: bool = False,
             client=None, scheduler: Optional[str] = None, workers: Optional[int] = None,
             found: Optional[InputFiles] = None, group_field: Optional[str] = None,
             check_columns: Optional[Callable] = None) -> tuple[DedupResult, AgainstStore]:
        """The run against ``reader``'s state, in memory or on Dask (a work directory or a cluster), through
        the api's own entry points with the store wrapped (store.Against); found: the scan of
        the inputs (_check_places); check_columns: as api.staged_dedup takes it."""

        batch_bytes, max_memory, shard_bytes = speed
        params = self.params(reader.manifest,
                             **parse_sizes(batch_bytes=batch_bytes, max_memory=max_memory, shard_bytes=shard_bytes))
        chosen = get_backend(backend)
        field = content_field(params, text_field, token_field, id_field)
        against = Against(reader, chosen, params.bucket_window)
        shown = progress_display(progress)
        if on_dask(work_dir, client, scheduler, workers):
            result = dask_dedup(data, params, chosen, work_dir, resume, field, id_field, on_error, shown, client,
                                scheduler, workers, against, found=found, group_field=group_field,
                                check_columns=check_columns)
        else:
            if resume:
                raise resume_without_work_dir()
            log = StageLog()
            with log.stage("read"):
                corpus, restore = to_corpus(data, field, id_field, on_error=on_error,
                                            budget=MemoryBudget(params.max_memory), found=found)
            documents_read(found, corpus.num_rows, [source.path for source in corpus.files], corpus.skipped_records)
            check_group_field(corpus.input_schemas(), group_field)
            if check_columns is not None:
                check_columns(corpus.input_schemas())
            # The sets made while signing serve the copies, verification and the commit.
            outcome = run_job(against.wrap(MemoryStore(corpus, params, chosen, kept_sets_bytes=None)), params,
                              chosen, progress=shown, log=log)
            assert against.store is not None
            result = corpus_result(corpus, outcome, restore, id_field, on_error, store=against.store,
                                   group_field=group_field)
        assert against.store is not None  # (its first stage refused ids the index holds: store.refuse_indexed_ids)
        result.report = result.report.with_index(str(self.path.absolute()), reader.manifest.generation,
                                                 against.store.pinned, added=False)
        result._index_files = reader.source_files()  # (what its write must keep off)
        return result, against.store

    @staticmethod
    def _kept_new_rows(result: DedupResult, store: AgainstStore) -> np.ndarray:
        """int64 (k,) ascending: the new documents' rows that an add commits (kept, with
        shingles)."""
        active = np.asarray(store.inner.active)
        return active[result._kept_rows[active]]

    # --- lookups ------------------------------------------------------------------------------

    def query(self, documents, *, backend: str | Backend = "cpu") -> list[list[tuple[Any, float]]]:
        """For each query document (texts, or token-id lists for a token index), the indexed
        documents whose exact Jaccard with it reaches the threshold, as (id, jaccard), highest
        Jaccard first (lookup.matches). A lookup, not a run: nothing is written. The numpy
        backend by default: a handful of documents is not worth a device round trip."""
        def state() -> tuple[IndexReader, DedupParams, Permutations]:
            reader = self.reader()
            params = self.params(reader.manifest)
            return reader, params, self._permutations(params)

        return matches(documents, backend, state)

    def reader(self) -> IndexReader:
        """A reader of the last committed state, kept while that state is the committed one (its
        files are checked once, on first use): the whole manifest is compared, since an index
        made again at the path (deleted, or restored from a backup) may reach the generation of
        the one read."""
        manifest = read_manifest(self.path)
        if self._reader is None or self._reader.manifest != manifest:
            self._reader = IndexReader(self.path, manifest, earlier=self._reader, written=self._written)
        return self._reader

    def _permutations(self, params: DedupParams) -> Permutations:
        """The MinHash permutations of ``params`` (the index's), drawn again only where their
        count or seed differs from the last drawn (an index made again at the path)."""
        banding = params.banding()
        key = (banding.bands * banding.rows, params.seed)
        if self._cached_permutations is None or self._cached_permutations[0] != key:
            self._cached_permutations = (key, draw_permutations(*key))
        return self._cached_permutations[1]

    # --- changes ------------------------------------------------------------------------------

    def remove(self, *, tag: Optional[str] = None, ids=None) -> int:
        """Remove the indexed documents of ``tag``, or whose id is in ``ids`` (a sequence or
        pyarrow array); returns how many were removed. Removal is a tombstone, applied when
        the index is read and dropped by ``compact``."""
        if (tag is None) == (ids is None):
            raise ParameterError("remove needs exactly one of tag= and ids=")
        check_tag(tag)
        if ids is not None and (isinstance(ids, (str, bytes)) or not hasattr(ids, "__iter__")):
            raise ParameterError(f"ids= takes a list of ids (or a pyarrow array); got {ids!r}: pass [{ids!r}] to "
                                 "remove one")
        with writer_lock(self.path), changing(self.path):
            manifest = read_manifest(self.path)
            collect_garbage(self.path, manifest)
            reader = IndexReader(self.path, manifest)
            wanted = None if ids is None else as_index_ids(ids if isinstance(ids, pa.Array) else pa.array(ids),
                                                           reader)
            segments, rows = [], []
            for segment in reader.segments:
                table = segment.ids()
                if tag is not None:
                    hit = pc.equal(table["tag"], tag).to_numpy(zero_copy_only=False)
                else:
                    assert wanted is not None
                    hit = pc.is_in(table["id"], value_set=wanted.cast(table["id"].type)).to_numpy(
                        zero_copy_only=False)
                local = np.flatnonzero(np.nan_to_num(hit).astype(bool))
                already = reader.removed().get(segment.entry.name)
                if already is not None:
                    local = np.union1d(local, already)
                segments += [segment.entry.name] * len(local)
                rows.append(local)
            removed = pa.table({"segment": pa.array(segments, pa.string()),
                                "row": pa.array(np.concatenate(rows) if rows else np.zeros(0, np.int64))})
            before = manifest.documents - reader.documents
            if removed.num_rows == before:
                return 0
            generation = manifest.generation + 1
            entry = write_tombstones(self.path, f"removed-{generation:06d}-{uuid.uuid4().hex[:8]}", removed)
            write_manifest(self.path, dataclasses.replace(manifest, tombstones=entry, generation=generation))
            collect_garbage(self.path, read_manifest(self.path))
            return removed.num_rows - before

    def compact(self) -> None:
        """Merge every live segment into one, dropping removed documents, so that a run probes
        one segment; the index's documents and results are unchanged."""
        with writer_lock(self.path), changing(self.path):
            manifest = read_manifest(self.path)
            collect_garbage(self.path, manifest)
            reader = IndexReader(self.path, manifest)
            if len(manifest.segments) <= 1 and not manifest.tombstones:
                return
            tables = []
            arrays: dict[str, list[np.ndarray]] = {"signatures": [], "lengths": [], "set_counts": [],
                                                   "set_columns": [], "source_row": []}
            sources: list[tuple[list[dict], np.ndarray]] = []
            for segment in reader.segments:
                keep = np.ones(segment.entry.documents, dtype=bool)
                removed = reader.removed().get(segment.entry.name)
                if removed is not None:
                    keep[removed] = False
                rows = np.flatnonzero(keep)
                tables.append(segment.ids().take(pa.array(rows)))
                arrays["signatures"].append(np.asarray(segment.array("signatures")[rows]))
                arrays["lengths"].append(np.asarray(segment.array("lengths")[rows]))
                if manifest.verification == "source":
                    sources.append((segment.sources(), np.asarray(segment.array("source_file")[rows])))
                    arrays["source_row"].append(np.asarray(segment.array("source_row")[rows]))
                else:
                    counts, columns = segment.sets(rows, reader.spec)
                    arrays["set_counts"].append(counts)
                    arrays["set_columns"].append(columns)
            generation = manifest.generation + 1
            entries: tuple = ()
            table = pa.concat_tables(tables)
            if table.num_rows:
                signatures = np.concatenate(arrays["signatures"])
                merged_sources = None
                if manifest.verification == "source":
                    merged_sources, source_file = merge_sources(sources)
                    material = {"source_file": source_file, "source_row": np.concatenate(arrays["source_row"])}
                else:
                    material = {"set_offsets": offsets_from_counts(np.concatenate(arrays["set_counts"])),
                                "set_columns": np.concatenate(arrays["set_columns"])}
                name = f"seg-{generation:06d}-{uuid.uuid4().hex[:8]}"
                entry, self._written[name] = write_segment(self.path, name, table,
                                                           segment_arrays(table["id"].combine_chunks(), signatures,
                                                                          np.concatenate(arrays["lengths"]), material,
                                                                          self.params(manifest)), merged_sources)
                entries = (entry,)
            write_manifest(self.path, dataclasses.replace(manifest, segments=entries, tombstones=None,
                                                          generation=generation))
            collect_garbage(self.path, read_manifest(self.path))
