"""The notebook API: ``gpudedup.dedup(data, ...)`` on strings, tables, data frames or paths."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from functools import cached_property
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .backends import get_backend
from .errors import InputError, OutputError, ParameterError
from .io.cudf_reader import concat_device_utf8, cudf_installed, device_utf8
from .io.reader import Corpus, SourceFile, check_unique_ids, read_corpus, scan_inputs, sorted_records
from .normalize import strings_to_arrow
from .io.writer import OUTPUT_FORMATS, atomic_output_dir, check_apart_from_inputs, write_json, write_jsonl, write_parquet
from .params import DedupParams
from .memory import MemoryBudget, parse_size, release_unused_memory
from .copies import implied_pairs
from .pipeline import DedupOutcome, run_dedup
from .stages import Progress, RichProgress, StageLog


@dataclass
class DedupResult:
    """What ``dedup`` found.

    pairs: pyarrow Table (id_a, id_b, jaccard): every verified pair, id_a < id_b.
    clusters: pyarrow Table (id, cluster, keep, kept_id): every document in a cluster of two or
        more, with the id of its cluster's kept document.
    keep: numpy bool (n,), aligned with the input: False for the removed duplicates.
    deduplicated: the kept rows, in the input's own type (list, pandas, polars, pyarrow,
        cuDF, Hugging Face Dataset; a pyarrow Table for paths).
    report: counts, parameters used, time and memory per stage (as written to report.json).
    table: all input rows as a pyarrow Table (what ``write`` filters).
    text_field: the column of ``table`` holding the text.
    checked_jaccard: numpy float64 (c,): exact Jaccard of every candidate pair verification
        computed, verified or not (the report's histogram of candidates).
    """

    pairs: pa.Table
    clusters: pa.Table
    keep: np.ndarray
    report: dict
    table: pa.Table = field(repr=False)
    inputs: list = field(default_factory=list, repr=False)
    text_field: str = "text"
    ids: Optional[pa.Array] = field(default=None, repr=False)  # the id of every input row
    skipped_records: list = field(default_factory=list, repr=False)  # on_error="skip": what and why
    on_error: str = "stop"
    checked_jaccard: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    restore: Callable[[np.ndarray], Any] = field(default=None, repr=False)

    @cached_property
    def deduplicated(self):
        """The kept rows in the input's own type, made on first use (a copy of the kept rows,
        which a run that only writes its results never needs)."""
        return self.restore(self.keep)

    def __repr__(self) -> str:
        r = self.report["results"]
        return (f"DedupResult({self.report['input']['documents']} documents, {r['clusters']} clusters, "
                f"{r['removed_documents']} removed, {r['verified_pairs']} verified pairs)")

    def all_pairs(self) -> pa.Table:
        """``pairs`` with every group of identical copies spelled out.

        ``pairs`` lists documents with identical shingle sets as a star around the first of
        them (Jaccard 1.0; README, "Output formats"). Here the copies are also paired with each
        other, and each copy with every document its text is paired with, at that pair's
        Jaccard: every pair at or above the threshold that the run found. Quadratic in the size
        of a group of copies; for inspection and for comparison with an all-pairs truth.
        """
        ids = wide_ids(self.ids)
        a = pc.index_in(self.pairs["id_a"], value_set=ids).to_numpy(zero_copy_only=False).astype(np.int64)
        b = pc.index_in(self.pairs["id_b"], value_set=ids).to_numpy(zero_copy_only=False).astype(np.int64)
        jaccard = self.pairs["jaccard"].to_numpy()
        copy = jaccard == 1.0  # only identical sets have Jaccard 1.0
        a, b, source = implied_pairs(a, b, a[copy], b[copy], len(ids))
        return pairs_table(ids, a, b, np.where(source >= 0, jaccard[np.maximum(source, 0)], 1.0))

    def write(self, output_dir: str | os.PathLike, format: str = "parquet", overwrite: bool = False) -> Path:
        """Write deduplicated.{parquet,jsonl}, clusters.parquet, pairs.parquet and report.json
        into ``output_dir``, atomically (see README, "Output formats")."""
        return write_outputs(output_dir, self, format, overwrite)


def dedup(
    data,
    *,
    text_field: str = "text",
    id_field: Optional[str] = None,
    threshold: float = DedupParams.threshold,
    shingle: str = DedupParams.shingle,
    ngram: int = DedupParams.ngram,
    num_perm: int = DedupParams.num_perm,
    bands: Optional[int] = None,
    rows: Optional[int] = None,
    max_fn: float = DedupParams.max_fn,
    low: Optional[float] = None,
    max_fp: Optional[float] = None,
    seed: int = DedupParams.seed,
    keep: str = DedupParams.keep,
    bucket_window: int = DedupParams.bucket_window,
    backend: str = "auto",
    progress: bool = False,
    batch_bytes: Optional[int] = None,
    batch_rows: int = DedupParams.batch_rows,
    max_memory: int | str | None = None,
    on_error: str = "stop",
    work_dir: str | os.PathLike | None = None,
    resume: bool = False,
    client=None,
    scheduler: Optional[str] = None,
    workers: Optional[int] = None,
) -> DedupResult:
    """Find near-duplicate documents and keep one per cluster.

    data: a list of strings (ids are the positions 0..n-1); one path (str or pathlib.Path) or a
        list of pathlib.Path, to JSONL / Parquet / .txt files or directories; a pyarrow Table; a cuDF,
        pandas or polars DataFrame, a DuckDB result or anything else that exports the Arrow
        PyCapsule stream interface; a Hugging Face ``datasets.Dataset``.
    text_field / id_field: the columns holding the text and the ids (tables and files); without
        id_field, ids are row positions (in-memory data) or ``<path>:<row>`` (files).
    on_error: "stop" (the default): a bad record or unreadable file stops the run with an
        InputError naming it; "skip": files only -- bad records and unreadable files are left
        out, counted in the report's balance and listed with their reasons in
        ``skipped_records`` (errors.jsonl when written).
    work_dir: files only -- run in stages over one input file at a time, keeping each stage's
        results in this directory (streaming.py), so that the corpus is never in memory as a
        whole; resume=True goes on with the finished stages of an interrupted run there.
    client / scheduler / workers: run the staged job's signatures, candidates and verification
        on a Dask cluster (distributed.py): a ``dask.distributed.Client``, a scheduler's
        address, or a local cluster of this many worker processes. The work directory (needed
        with client and scheduler; a temporary one otherwise) and the files must be visible to
        every worker at the same path. The results are the single process's.
    The other parameters are described in README ("Parameters") and params.DedupParams.
    """
    if on_error not in ("stop", "skip"):
        raise ParameterError(f"on_error must be 'stop' or 'skip'; got {on_error!r}")
    params = DedupParams(threshold=threshold, shingle=shingle, ngram=ngram, num_perm=num_perm,
                         bands=bands, rows=rows, max_fn=max_fn, low=low, max_fp=max_fp, seed=seed,
                         keep=keep, bucket_window=bucket_window, batch_bytes=batch_bytes,
                         batch_rows=batch_rows,
                         max_memory=None if max_memory is None else parse_size(max_memory))
    chosen_backend = get_backend(backend)
    if client is not None or scheduler is not None or workers is not None:
        return dask_dedup(data, params, chosen_backend, work_dir, resume, text_field, id_field, on_error,
                          RichProgress() if progress else Progress(), client, scheduler, workers)
    if work_dir is not None:
        return staged_dedup(data, params, chosen_backend, Path(work_dir), resume, text_field, id_field, on_error,
                            RichProgress() if progress else Progress())
    if resume:
        raise ParameterError("resume needs a work_dir (--work-dir) to resume from")
    log = StageLog()
    budget = MemoryBudget(params.max_memory)
    with log.stage("read"):
        # cuDF, where installed, reads files (and takes cuDF frames) straight to the GPU.
        corpus, restore = to_corpus(data, text_field, id_field,
                                    use_cudf=chosen_backend.name == "gpu" and cudf_installed(),
                                    on_error=on_error, budget=budget)
        release_unused_memory()
    budget.check(
        "the run", 0, "the input alone fills the budget: deduplicate it in parts or raise --max-memory")
    outcome = run_dedup(corpus, params, chosen_backend, RichProgress() if progress else Progress(), log)
    result = to_result(corpus, outcome, restore)
    result.on_error = on_error
    return result


def dask_dedup(data, params: DedupParams, backend, work_dir, resume: bool, text_field: str,
               id_field: Optional[str], on_error: str, progress: Progress, client, scheduler, workers) -> DedupResult:
    """``dedup`` through a work directory with its heavy stages on a Dask cluster."""
    import tempfile

    from .distributed import DaskRunner, dask_client

    if sum(x is not None for x in (client, scheduler, workers)) > 1:
        raise ParameterError("give one of client, scheduler (--scheduler) and workers (--workers)")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 1):
        raise ParameterError(f"workers must be an integer >= 1; got {workers!r}")
    if work_dir is None and workers is None:
        raise ParameterError("a Dask cluster needs a work directory (--work-dir) that every worker sees")
    with dask_client(client, scheduler, workers, gpu=backend.name == "gpu") as connected:
        runner = DaskRunner(connected)
        if work_dir is not None:
            result = staged_dedup(data, params, backend, Path(work_dir), resume, text_field, id_field, on_error,
                                  progress, runner)
        else:
            # The result reads the input files again when it writes; the spills are not needed.
            with tempfile.TemporaryDirectory(prefix="gpudedup-work-") as temporary:
                result = staged_dedup(data, params, backend, Path(temporary) / "work", False, text_field, id_field,
                                      on_error, progress, runner)
            result.report["work_dir"] = None
        result.report["dask"] = {"scheduler": connected.scheduler.address,
                                 "workers": len(connected.scheduler_info()["workers"])}
        return result


def staged_dedup(data, params: DedupParams, backend, work_dir: Path, resume: bool, text_field: str,
                 id_field: Optional[str], on_error: str, progress: Progress, runner=None) -> DedupResult:
    """``dedup`` through a work directory (streaming.run_staged); data: paths only."""
    from .streaming import ShardedTable, fingerprint, run_staged
    from .workdir import WorkDir

    paths = [Path(data)] if isinstance(data, (str, os.PathLike)) else data
    if not (isinstance(paths, (list, tuple)) and paths and all(isinstance(p, os.PathLike) for p in paths)):
        raise ParameterError("work_dir (--work-dir) runs over files: pass a path or a list of pathlib.Path")
    check_apart_from_inputs(work_dir, paths, "the work directory", "--work-dir")
    found = scan_inputs(paths, on_error)
    try:
        work = WorkDir(work_dir, fingerprint(found, params, text_field, id_field, on_error), resume)
        outcome, shards, reader, ids = run_staged(found.files, found, params, backend, work, text_field, id_field,
                                                  on_error, progress, runner=runner)
    except OSError as error:  # a full disk, a lost mount, no permission in the work directory
        raise OutputError(f"{work_dir}: cannot write the work directory ({error.strerror or error}); the "
                          "stages it finished are kept: run again with --resume") from None
    records = list(found.records)
    for index in range(shards.count):
        records.extend(work.shard_info(index)["records"])
    table = ShardedTable(shards, reader)
    return DedupResult(
        pairs=pairs_table(ids, outcome.pair_a, outcome.pair_b, outcome.jaccard),
        clusters=clusters_table(ids, outcome), keep=outcome.keep, report=outcome.report, table=table,
        inputs=[str(p) for p in paths], text_field=text_field, ids=ids,
        skipped_records=sorted_records(records, found), on_error=on_error,
        checked_jaccard=outcome.checked_jaccard, restore=table.kept_table)


# errors.jsonl: one object per record or file --on-error skip left out (line None: a file).
SKIPPED_RECORD_SCHEMA = pa.schema([("file", pa.string()), ("line", pa.int64()), ("reason", pa.string())])


def to_result(corpus: Corpus, outcome: DedupOutcome, restore) -> DedupResult:
    return DedupResult(
        pairs=pairs_table(corpus.ids, outcome.pair_a, outcome.pair_b, outcome.jaccard),
        clusters=clusters_table(corpus.ids, outcome),
        keep=outcome.keep,
        report=outcome.report,
        table=corpus.table,
        inputs=corpus.inputs,
        text_field=corpus.text_field,
        ids=corpus.ids,
        skipped_records=corpus.skipped_records,
        checked_jaccard=outcome.checked_jaccard,
        restore=restore,
    )


def pairs_table(ids: pa.Array, pair_a: np.ndarray, pair_b: np.ndarray, jaccard: np.ndarray) -> pa.Table:
    """(id_a, id_b, jaccard) with id_a < id_b, sorted by (id_a, id_b), for the pairs of rows
    (pair_a[i], pair_b[i]) (int64 (p,), host) of Jaccard jaccard[i] (float64 (p,))."""
    ids = wide_ids(ids)  # millions of pairs of string ids can pass 2 GiB: 64-bit offsets
    a = ids.take(pa.array(pair_a))
    b = ids.take(pa.array(pair_b))
    swap = pc.greater(a, b)
    table = pa.table({"id_a": pc.if_else(swap, b, a), "id_b": pc.if_else(swap, a, b),
                      "jaccard": pa.array(jaccard, pa.float64())})
    return table.sort_by([("id_a", "ascending"), ("id_b", "ascending")])


def wide_ids(ids: pa.Array) -> pa.Array:
    """String ids as large_string, so that gathering them for pairs and clusters (an id per
    pair member) cannot overflow 32-bit offsets; integer ids as they are."""
    return ids.cast(pa.large_string()) if pa.types.is_string(ids.type) else ids


def clusters_table(ids: pa.Array, outcome: DedupOutcome) -> pa.Table:
    """(id, cluster, keep, kept_id) for every document in a cluster, in input order: kept_id
    names the document its cluster kept (itself for the kept one)."""
    c = outcome.clusters
    ids = wide_ids(ids)
    kept_doc = np.zeros(c.count, dtype=np.int64)
    kept_doc[c.cluster[c.keep]] = c.docs[c.keep]  # one kept document per cluster
    return pa.table({"id": ids.take(pa.array(c.docs)), "cluster": pa.array(c.cluster, pa.int64()),
                     "keep": pa.array(c.keep, pa.bool_()),
                     "kept_id": ids.take(pa.array(kept_doc[c.cluster]))})


def write_outputs(output_dir, result: DedupResult, format: str, overwrite: bool) -> Path:
    if format not in OUTPUT_FORMATS:
        raise ParameterError(f"format must be one of {', '.join(OUTPUT_FORMATS)}; got {format!r}")
    log = StageLog()
    try:
        with log.stage("write"):
            return _write_files(output_dir, result, format, overwrite, log)
    except OSError as error:  # a full disk, a lost mount: the staging directory is already gone
        raise OutputError(f"{output_dir}: cannot write the results ({error.strerror or error}); "
                          "nothing was written") from None


def _write_files(output_dir, result: DedupResult, format: str, overwrite: bool, log: StageLog) -> Path:
    # A staged run's work directory is kept apart from the output like an input: replacing an
    # output that holds it would delete what --resume needs.
    if result.report.get("work_dir"):
        check_apart_from_inputs(Path(output_dir), [result.report["work_dir"]], "the output directory", "--output",
                                "the work directory", inside_allowed=True)
    with atomic_output_dir(output_dir, overwrite, result.inputs) as staging:
        if hasattr(result.table, "write_kept"):  # a staged run's shards (streaming.ShardedTable)
            result.table.write_kept(staging / f"deduplicated.{format}", format, result.keep)
        elif format == "parquet":
            write_parquet(result.table, staging / "deduplicated.parquet", keep=result.keep)
        else:
            write_jsonl(result.table, staging / "deduplicated.jsonl", keep=result.keep)
        write_parquet(result.clusters, staging / "clusters.parquet")
        if result.on_error == "skip":  # written even when empty: "nothing was skipped"
            write_jsonl(pa.Table.from_pylist(result.skipped_records, schema=SKIPPED_RECORD_SCHEMA),
                        staging / "errors.jsonl")
        write_parquet(result.pairs, staging / "pairs.parquet")
        # The report's figures (the slow part of report.html; none without matplotlib) are drawn
        # within the write's time; the page itself needs the finished report, so it comes after.
        from .html_report import report_figures, write_report

        figures = report_figures(result)
        # Time and memory of the write so far (the report itself is all that is left to write).
        result.report["stages"]["write"] = log.snapshot("write")
        result.report["peak_rss_mb"] = max(result.report["peak_rss_mb"],
                                           result.report["stages"]["write"]["peak_rss_mb"])
        result.report["output"] = {"directory": str(Path(output_dir)), "format": format}
        write_report(result, staging, figures)  # report.html, s_curve.png, candidates_histogram.png
        # report.json last: a directory with a report is a finished one (and the rename makes
        # the whole directory appear at once anyway).
        write_json(result.report, staging / "report.json")
    return Path(output_dir)


# --- input adaptation ---------------------------------------------------------------------------


def to_corpus(data, text_field: str, id_field: Optional[str], use_cudf: bool = False, on_error: str = "stop",
              budget: Optional[MemoryBudget] = None):
    """(Corpus, restore): restore(keep mask) gives the kept rows in the input's own type.
    use_cudf: keep the text of files and cuDF frames on the GPU (Corpus.device_text);
    budget: --max-memory, checked before files are read."""
    # One str is a path (a single text has nothing to deduplicate against); a list of str is
    # texts; paths in a list must be pathlib.Path (or os.PathLike) objects.
    if isinstance(data, (str, os.PathLike)):
        data = [Path(data)]
    if isinstance(data, (list, tuple)):
        if data and all(isinstance(item, os.PathLike) for item in data):
            corpus = read_corpus(data, text_field, id_field, use_cudf=use_cudf, on_error=on_error, budget=budget)
            return corpus, lambda keep: corpus.table.filter(pa.array(keep))
        return strings_corpus(data), lambda keep: [t for t, k in zip(data, keep) if k]
    module = type(data).__module__.split(".")[0]
    if module == "cudf":
        corpus = table_corpus(data.to_arrow(), text_field, id_field)
        if use_cudf:
            corpus.device_text = concat_device_utf8([device_utf8(data[text_field])])
        return corpus, lambda keep: data[keep]
    if module == "datasets" and hasattr(data, "select"):
        table = data.data.table if hasattr(data.data, "table") else pa.table(data.data)
        return table_corpus(table, text_field, id_field), lambda keep: data.select(np.flatnonzero(keep))
    if module == "pandas":
        try:
            table = pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowTypeError, pa.ArrowInvalid) as error:
            raise InputError(f"cannot read the DataFrame: {error}") from None
        return table_corpus(table, text_field, id_field), lambda keep: data[keep]
    if module == "polars":
        import polars

        return table_corpus(data.to_arrow(), text_field, id_field), lambda keep: data.filter(polars.Series(keep))
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table) or hasattr(data, "__arrow_c_stream__"):
        corpus = table_corpus(data if isinstance(data, pa.Table) else pa.table(data), text_field, id_field)
        # The corpus table, whose text column may have been cast (string_view -> large_string).
        return corpus, lambda keep: corpus.table.filter(pa.array(keep))
    raise InputError(
        f"cannot deduplicate a {type(data).__name__}: pass a list of strings, paths, a pyarrow "
        "Table, a DataFrame (pandas, polars, cuDF) or an object with __arrow_c_stream__"
    )


def strings_corpus(texts: Sequence) -> Corpus:
    table = pa.table({"text": strings_to_arrow(texts)})
    ids = pa.array(np.arange(len(texts), dtype=np.int64))
    return Corpus(table, "text", ids, [SourceFile("<list>", "list", len(texts))])


def table_corpus(table: pa.Table, text_field: str, id_field: Optional[str]) -> Corpus:
    if text_field not in table.column_names:
        raise InputError(f"no column {text_field!r} (columns: {', '.join(table.column_names)}); "
                         "choose it with text_field=")
    text_type = table.schema.field(text_field).type
    if not (pa.types.is_large_string(text_type) or pa.types.is_string(text_type)
            or pa.types.is_null(text_type) or getattr(pa.types, "is_string_view", bool)(text_type)):
        raise InputError(f"column {text_field!r} has type {text_type}, expected strings")
    if id_field is None:
        ids = pa.array(np.arange(table.num_rows, dtype=np.int64))
    elif id_field not in table.column_names:
        raise InputError(f"no column {id_field!r} for ids (columns: {', '.join(table.column_names)})")
    else:
        ids = table[id_field].combine_chunks()
        if ids.null_count:
            raise InputError(f"id column {id_field!r} has {ids.null_count} null values; ids must be unique")
    corpus = Corpus(table, text_field, ids, [SourceFile("<table>", "table", table.num_rows)])
    check_unique_ids(corpus)
    return corpus
