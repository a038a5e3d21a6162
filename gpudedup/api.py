"""The notebook API: ``gpudedup.dedup(data, ...)`` on strings, tables, data frames or paths."""

from __future__ import annotations

import functools
import numbers
import os
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .backends import Backend, get_backend
from .errors import ClusterError, OutputError, ParameterError
from .io.cudf_reader import cudf_installed
from .io.corpus import Corpus
from .io.python_inputs import to_corpus
from .io.fields import TEXT_FIELD, TOKEN_FIELD, check_fields_read
from .io.inputs import EVERY_FILE, InputFiles, Selection, documents_read, scan_inputs
from .io.layout import check_output_names, output_bases
from .io.rules import sorted_records
from .io.commit import remove_abandoned
from .io.staging import temporary_work_dir
from .io import storage
from .io.storage import Given, Location, is_path, location_of
from .io.credentials import os_reason
from .io.outputdir import check_apart_from_inputs, check_apart_from_read, check_run_places
from .io.write import OUTPUT_FORMATS
from .core.cluster import KeepPolicy
from .params import DedupParams, and_listed, check_targets_read
from .core.shingling import ShingleKind, UnicodeForm
from .memory import MemoryBudget, parse_sizes, release_unused_memory
from .pipeline.job import run_job
from .pipeline.sourcecounts import check_group_field, with_source_counts
from .pipeline.outcome import Outcome
from .pipeline.protocols import Executor
from .pipeline.removedrows import check_removed_beside
from .pipeline.memory import dedup_corpus
from .pipeline.workdir import resume_without_work_dir, work_dir_lock
from .results.result import DedupResult
from .stages import Progress, StageLog, progress_display


def dedup(
    data,
    *,
    text_field: str = TEXT_FIELD,
    id_field: Optional[str] = None,
    threshold: float = DedupParams.threshold,
    shingle: ShingleKind = DedupParams.shingle,
    ngram: int = DedupParams.ngram,
    token_field: str = TOKEN_FIELD,
    unicode: Optional[UnicodeForm] = None,
    strip_punctuation: bool = False,
    strip_symbols: bool = False,
    num_perm: int = DedupParams.num_perm,
    bands: Optional[int] = None,
    rows: Optional[int] = None,
    max_fn: float = DedupParams.max_fn,
    low: Optional[float] = None,
    max_fp: Optional[float] = None,
    seed: int = DedupParams.seed,
    keep: KeepPolicy = DedupParams.keep,
    bucket_window: int = DedupParams.bucket_window,
    backend: str | Backend = "auto",
    progress: Optional[bool] = None,
    batch_bytes: int | str | None = None,
    batch_rows: int = DedupParams.batch_rows,
    max_memory: int | str | None = None,
    shard_bytes: int | str | None = None,
    on_error: str = "stop",
    include: str | Sequence[str] | None = None,
    exclude: str | Sequence[str] | None = None,
    work_dir: Given | None = None,
    resume: bool = False,
    client=None,
    scheduler: Optional[str] = None,
    workers: Optional[int] = None,
    output: Given | None = None,
    format: str = "parquet",
    overwrite: bool = False,
    single_file: bool = False,
    write_removed: bool = False,
    group_field: Optional[str] = None,
) -> DedupResult:
    """Find near-duplicate documents and keep one per cluster.

    data: a list of strings, a pandas or polars Series (or a pandas Index) of strings, or any other iterable of
        strings (a generator, an iterator, a map object; ids are the positions 0..n-1); a list
        or any iterable of dicts, records read as JSON Lines records are (text_field, id_field);
        one path (str or pathlib.Path) or a list of pathlib.Path, to JSONL / Parquet / .txt
        files or directories; a pyarrow Table; a cuDF, pandas or polars DataFrame, a DuckDB
        result or anything else that exports the Arrow PyCapsule stream interface; a Hugging
        Face ``datasets.Dataset`` or ``datasets.IterableDataset`` (streaming included; a
        DatasetDict is refused: pick a split). An iterable or an IterableDataset is read
        once, in batches of 10,000 converted to Arrow, and held in memory as a whole for the
        run (a work directory runs over files only). ``deduplicated`` gives back the input's
        own type (a list of the kept strings or dicts, a Series with the kept rows' index
        labels, ...); for an iterable of strings a list of the kept strings, for an iterable
        of dicts or an IterableDataset a pyarrow Table of the kept rows.
    text_field / id_field: the columns holding the text and the ids (tables, records and
        files); without id_field, ids are row positions (in-memory data) or ``<path>:<row>``
        (files). A dotted name (also token_field) is a path into struct columns and JSON
        objects ("content.text", "meta.id"), except where a top-level column has that very
        name: that column wins (io/fields.py).
    shingle="token": n-grams of token ids instead of text, read from the column token_field
        (a list of integers from 0 to 2**32 - 1 per row); a list of lists of ids works too.
    unicode ("nfc", "nfkc"), strip_punctuation, strip_symbols: text normalisation beyond the
        canonical lower-casing and white space (docs/hash-spec.md).
    on_error: "stop" (the default): a bad record or unreadable file stops the run with an
        InputError naming it; "skip": files and records (dicts) only -- bad records and
        unreadable files are left out, counted in the report's balance and listed with their
        reasons in ``skipped_records`` (errors.jsonl when written; a record passed in is named
        by its position from 0, as "line"). Either way, paths that give no document at all
        (no input file under them, or every record left out or none there) are an InputError
        naming what was not read.
    include / exclude: files only -- glob patterns (one str or a list; fnmatch: ``*``, ``?``,
        ``[seq]``, case-sensitive, ``*`` matching "/" too) that choose the files inside input
        directories, each matched against the file's path relative to the directory given and
        against its name: a file is read when it matches an include pattern (or none is given)
        and no exclude pattern; a folder matching an exclude pattern is left out whole. A file
        given by name is always read. What is not read is listed in the report
        (``input.skipped_files``, with reasons in ``input.skipped_file_reasons``).
    work_dir: files only -- run in stages on Dask (its local scheduler, without client=,
        scheduler= or workers=) over one input file at a time, keeping each stage's results in
        this directory (pipeline/disk.py), so that the corpus is never in memory as a whole; the
        result reads it (write it before the directory goes); resume=True goes on with the
        finished stages of an interrupted run there. A folder, or a URL on object storage
        (pipeline/workdir.py).
    shard_bytes: in a staged or Dask run (refused in memory), plain JSONL and Parquet files
        larger than this (bytes, or a size such as "256MB"; default 512 MiB) are cut into pieces
        of about this size (byte ranges at line ends, runs of row groups), each read by a task of
        its own. The results are those of the files read whole.
    client / scheduler / workers: run the staged job's signatures, candidates and verification
        on a Dask cluster (pipeline/dask.py): a ``dask.distributed.Client``, a scheduler's
        address, or a local cluster of this many worker processes. The work directory (needed
        with client and scheduler; a temporary one otherwise) and the files must be visible to
        every worker at the same path or URL. The results are the single process's.
    backend: "auto", "cpu" or "gpu", or a backend made before (gpudedup.backends.get_backend), to
        reuse its start-up (numba's kernels, a device's compiled kernels) across calls.
    progress: a progress display per stage: True, False, or None (the default) where a notebook
        shows it (an IPython kernel; lines of text where ipywidgets, which rich's bars need
        there, is not installed).
    output / format / overwrite / single_file / write_removed: write the results there too, as
        ``DedupResult.write`` does (write_removed: the removed rows too, under removed/; the
        four without output= are refused, as they would say nothing); on a
        Dask cluster that this call starts or connects to, before it closes, so that each worker
        writes the kept rows of the shards it reads (a result written later, after the cluster
        is gone, is written by this process).
    group_field: a column (a dotted path as text_field takes) whose values the report counts
        by, beside its counts per input file: documents in, kept and removed, removed as
        duplicates of the same value or another, and which values' documents were removed as
        duplicates of which (report.json's "groups"); an input without it is an InputError.
    The other parameters are described in README ("Command line") and params.DedupParams.
    """
    if on_error not in ("stop", "skip"):
        raise ParameterError(f"on_error= must be 'stop' or 'skip'; got {on_error!r}")
    params = DedupParams(threshold=threshold, shingle=shingle, ngram=ngram, unicode=unicode,
                         strip_punctuation=strip_punctuation, strip_symbols=strip_symbols, num_perm=num_perm,
                         bands=bands, rows=rows, max_fn=max_fn, low=low, max_fp=max_fp, seed=seed,
                         keep=keep, bucket_window=bucket_window, batch_rows=batch_rows,
                         **parse_sizes(batch_bytes=batch_bytes, max_memory=max_memory, shard_bytes=shard_bytes))
    check_targets_read(params)
    check_run_options(max_memory, shard_bytes, work_dir, client, scheduler, workers)
    # Below, the content column is "text_field" whatever it holds (core/content.py).
    text_field = content_field(params, text_field, token_field, id_field)
    check_output_options(output, format, overwrite, single_file, write_removed)
    found = inputs_and_places(data, on_error, output, overwrite, work_dir, format, single_file,
                              Selection.of(include, exclude))
    chosen_backend = get_backend(backend)
    if found is None and on_dask(work_dir, client, scheduler, workers):
        raise files_only(data)  # before a work directory is made or a cluster started

    def written(result: DedupResult, executor: Optional[Executor] = None) -> DedupResult:
        """The result, its outputs written where ``output`` is given (on a cluster's run, by
        its ``executor``'s tasks where they can be)."""
        if output is not None:
            result._write(output, format, overwrite, single_file, write_removed, executor, checked=True)
        return result

    if on_dask(work_dir, client, scheduler, workers):
        with work_dir_lock(work_dir):  # (held while the results are written from it too)
            return dask_dedup(data, params, chosen_backend, work_dir, resume, text_field, id_field, on_error,
                              progress_display(progress), client, scheduler, workers, finish=written,
                              found=found, group_field=group_field,
                              check_columns=removed_columns_check(output, write_removed, id_field))
    if resume:
        raise resume_without_work_dir()
    log = StageLog()
    budget = MemoryBudget(params.max_memory)
    with log.stage("read"):
        # cuDF, where installed, reads files (and takes cuDF frames) straight to the GPU.
        corpus, restore = to_corpus(data, text_field, id_field,
                                    # (cuDF's readers would bring text, not token ids, to the device)
                                    use_cudf=chosen_backend.name == "gpu" and cudf_installed()
                                    and params.shingle != "token",
                                    on_error=on_error, budget=budget, found=found)
        release_unused_memory()
    documents_read(found, corpus.num_rows, [source.path for source in corpus.files], corpus.skipped_records)
    budget.check("the run", 0, "the process (its libraries and the input read) fills the budget: raise "
                 "max_memory=, or deduplicate the input in parts")
    check_group_field(corpus.input_schemas(), group_field)
    if (check := removed_columns_check(output, write_removed, id_field)) is not None:
        check(corpus.input_schemas())  # (the write refuses the same; here, before the run)
    outcome = dedup_corpus(corpus, params, chosen_backend, progress_display(progress), log)
    return written(corpus_result(corpus, outcome, restore, id_field, on_error, group_field=group_field))


def inputs_and_places(data, on_error: str, output=None, overwrite: bool = False, work_dir=None,
                      format: str = "parquet", single_file: bool = False,
                      selection: Selection = EVERY_FILE) -> Optional[InputFiles]:
    """The run's one scan of the paths ``data`` names (None for data of another kind), with
    every rule on where it writes checked against it before any work: the output and the work
    directory apart from the inputs and from what they resolve to (check_run_places), and no
    two input files with one output name (check_output_names). selection: the include and
    exclude patterns (io.inputs.Selection), which only paths take."""
    paths = given_paths(data)
    if not paths:
        if selection != EVERY_FILE:
            raise ParameterError("include and exclude choose the files inside input directories; the data given "
                                 "is not paths")
        if output is not None or work_dir is not None:
            check_run_places([], output, overwrite, work_dir)
        return None
    if output is not None or work_dir is not None:  # what needs no scan first: a wrong place costs nothing
        check_run_places(paths, output, overwrite, work_dir, scan=False)
    found = scan_inputs(paths, on_error, selection)
    if output is not None or work_dir is not None:
        check_run_places(paths, output, overwrite, work_dir, found=found)
    if output is not None and not single_file:
        check_output_names(found, format, location_of(output))
    return found


def given_paths(data) -> list[Location]:
    """The paths (and URLs) ``data`` names, as dedup takes them: one str or os.PathLike, or a
    list of os.PathLike and Remote; [] for data of any other kind (texts, tables)."""
    if isinstance(data, (str, os.PathLike)):
        return [location_of(data)]
    if isinstance(data, (list, tuple)) and data and all(is_path(item) for item in data):
        return [location_of(item) for item in data]
    return []


def content_field(params: DedupParams, text_field: str, token_field: str, id_field: Optional[str] = None) -> str:
    """The column the shingles are cut from: token_field for token shingles, else text_field;
    ParameterError unless the fields are names (id_field None: the row numbers or positions)."""
    for name, value in (("text_field", text_field), ("token_field", token_field), ("id_field", id_field)):
        if not (isinstance(value, str) or (value is None and name == "id_field")):
            raise ParameterError(f"{name}= must be a column or field name (a string); got {value!r}")
    check_fields_read([params.shingle], text_field, token_field)  # (the other field would be read by nothing)
    return token_field if params.shingle == "token" else text_field


def corpus_result(corpus: Corpus, outcome: Outcome, restore: Callable[[np.ndarray], Any],
                  id_field: Optional[str] = None, on_error: str = "stop", store=None,
                  group_field: Optional[str] = None) -> DedupResult:
    """The result of the in-memory run over ``corpus``; restore(keep) gives the kept rows in the
    input's own type (to_corpus); store: the run's store when it holds rows besides the
    corpus's (a run against a persistent index: its ids, and how many rows lead); its report
    counts by input and by group_field (pipeline/sourcecounts.py)."""
    ids, indexed_rows = (corpus.ids, 0) if store is None else (store.ids, store.pinned)
    result = DedupResult._of(outcome, ids, corpus.table, restore, corpus.inputs, corpus.text_field, id_field,
                             corpus.skipped_records, on_error, indexed_rows=indexed_rows, sources=corpus.files,
                             output_bases=corpus.output_bases, given_rows=corpus.given_rows)
    with_source_counts(result, group_field)
    return result


# The most local Dask workers a run starts per core: each is a process of some 100 MB before it
# works, and more of them than this only share the cores (a cluster of its own: scheduler=).
LOCAL_WORKERS_PER_CORE = 4


def dask_dedup(data, params: DedupParams, backend, work_dir, resume: bool, text_field: str,
               id_field: Optional[str], on_error: str, progress: Progress, client, scheduler, workers,
               against=None, finish: Callable[[DedupResult, Executor], DedupResult] = lambda result, _: result,
               found: Optional[InputFiles] = None, group_field: Optional[str] = None,
               check_columns: Optional[Callable] = None) -> DedupResult:
    """``dedup`` through a work directory with its heavy stages on Dask: a cluster's (client,
    scheduler, workers), or without one Dask's local scheduler (daskops.dask_client); against:
    a run against a persistent index (index.against.Against), or None; finish: what to do with
    the result while the cluster is still up (dedup's output), given the run's executor (the
    result holds none); found: the inputs' scan, where the caller made it; group_field,
    check_columns: as staged_dedup takes them."""
    # (start-up: a run in memory loads none of the Dask runner)
    from .pipeline.daskops import DaskExecutor
    from .pipeline.daskops import clear_worker_caches, dask_client, in_temporary_work_dir, worker_count

    most = LOCAL_WORKERS_PER_CORE * (os.cpu_count() or 1)
    if workers is not None and (not isinstance(workers, numbers.Integral) or isinstance(workers, bool)
                                or not 1 <= int(workers) <= most):
        raise ParameterError(f"workers= must be an integer from 1 to {most} ({LOCAL_WORKERS_PER_CORE} per core of "
                             f"this machine: each is a process of its own); got {workers!r}")
    workers = None if workers is None else int(workers)  # (numpy's integers as Python's, for Dask)
    if work_dir is None and workers is None:
        raise ParameterError("a Dask cluster needs a work directory (work_dir=) that every worker sees")
    if work_dir is None and resume:
        raise resume_without_work_dir()
    with ExitStack() as temporary_dirs:
        # Without a work directory (workers of the run's own) the run works in a temporary one,
        # removed once its cluster is closed: the tasks of a stage that failed may be writing;
        # so may the tasks of an output's write that failed, into its staging directory.
        temporary_dirs.callback(remove_abandoned)
        temporary = None if work_dir is not None else Path(temporary_dirs.enter_context(
            temporary_work_dir())) / "work"
        with dask_client(client, scheduler, workers, gpu=backend.name == "gpu") as connected:
            executor = DaskExecutor(connected)
            try:
                result = staged_dedup(data, params, backend, temporary or location_of(work_dir),
                                      resume, text_field, id_field, on_error, progress,
                                      executor, against, found, group_field, check_columns)
                if temporary is not None:
                    # The result reads the input files again when it writes; of the spills it
                    # needs only the ids, the verified pairs and the clusters, read into memory
                    # before the temporary folder goes.
                    result._hold_here()
                if connected is not None:
                    result.report = result.report.with_dask(connected.scheduler.address,
                                                            worker_count(connected),
                                                            work_dir is not None)
                return finish(result, executor)
            except ClusterError as error:
                if temporary is None:
                    raise
                raise in_temporary_work_dir(error) from None
            finally:
                if work_dir is not None:  # the workers' copies of a work directory on object storage
                    clear_worker_caches(connected, location_of(work_dir))


def removed_columns_check(output, write_removed: bool, id_field: Optional[str]) -> Optional[Callable]:
    """Where the run writes removed/ (output= and write_removed=), the check of the inputs'
    columns that the write would refuse (removedrows.check_removed_beside), for the run to
    make as soon as it knows them rather than after its work; else None."""
    if output is None or not write_removed:
        return None
    return functools.partial(check_removed_beside, id_field=id_field)


def check_output_options(output, format: str, overwrite: bool, single_file: bool, write_removed: bool) -> None:
    """Refuse, before the run: a format that is none; options of how ``output`` is written
    without it (a result written later takes its own: DedupResult.write)."""
    if output is None:
        given = [name for name, value in (("format=", format != "parquet"), ("overwrite=", overwrite),
                                          ("single_file=", single_file), ("write_removed=", write_removed)) if value]
        if given:
            raise ParameterError(f"{and_listed(given)} {'says' if len(given) == 1 else 'say'} how output= is "
                                 "written, and no output= is given: give output=, or pass "
                                 f"{'it' if len(given) == 1 else 'them'} to result.write()")
    elif format not in OUTPUT_FORMATS:
        raise ParameterError(f"format= must be one of {', '.join(OUTPUT_FORMATS)}; got {format!r}")


def check_run_options(max_memory, shard_bytes, work_dir, client, scheduler, workers) -> None:
    """Refuse, before a work directory is made or a cluster started: more than one way to a
    cluster; a memory budget (max_memory=, as given) on a cluster's run; shard_bytes= for a run
    in memory, which reads each file whole."""
    if shard_bytes is not None and not on_dask(work_dir, client, scheduler, workers):
        raise ParameterError("shard_bytes= cuts the input files of a run with work_dir= or on Dask, and this run "
                             "reads each file whole in memory: give work_dir=, or leave it out")
    if client is not None and (scheduler, workers) != (None, None):
        raise ParameterError("client= runs on that client's cluster: leave out scheduler= and workers=")
    if scheduler is not None and workers is not None:  # (the command line has no client=)
        raise ParameterError("give one of scheduler= and workers=")
    if max_memory is not None and (client, scheduler, workers) != (None, None, None):
        # (the budget is checked against this process's memory, which a cluster's tasks do not use)
        raise ParameterError("max_memory= bounds a run in this process, but on a Dask cluster the workers read and "
                             "hash the input, each within its Dask memory limit: leave out max_memory=, or run "
                             "without a cluster")


def on_dask(work_dir, client, scheduler, workers) -> bool:
    """Whether a run goes through dask_dedup: every run with a work directory (without a
    cluster on Dask's local scheduler) and every run on a cluster."""
    return any(given is not None for given in (work_dir, client, scheduler, workers))


def files_only(data) -> ParameterError:
    """The error for in-memory ``data`` given to a run that reads files (a work directory, Dask)."""
    return ParameterError(f"a run with work_dir= or on Dask runs over files: pass a path or URL, or a "
                          f"list of pathlib.Path (or gpudedup.Remote); in-memory data (here of type "
                          f"{type(data).__name__}) is deduplicated without work_dir, client, scheduler and workers")


def staged_dedup(data, params: DedupParams, backend, work_dir: Location, resume: bool, text_field: str,
                 id_field: Optional[str], on_error: str, progress: Progress, executor: Executor,
                 against=None, found: Optional[InputFiles] = None, group_field: Optional[str] = None,
                 check_columns: Optional[Callable] = None) -> DedupResult:
    """``dedup`` through a work directory (pipeline/disk.py), dask_dedup's; data: paths only;
    executor: who runs the store's tasks (pipeline.daskops.DaskExecutor); against: a run against a persistent index
    (index.against.Against: it wraps the store), or None; found: the scan of the paths, where the
    caller made it (else it is made here); group_field: the column the report counts by, beside
    the input files (pipeline/sourcecounts.py: a task per file, while the work directory is
    there); check_columns: what the inputs' columns must pass once read (job.run_job)."""
    from .pipeline.disk import WorkDirStore, fingerprint  # (start-up: loaded by a run with a work directory)
    from .pipeline.workdir import WorkDir
    from .pipeline.workfolders import clear_cache

    paths = [location_of(data)] if isinstance(data, (str, os.PathLike)) else data
    if not (isinstance(paths, (list, tuple)) and paths and all(is_path(p) for p in paths)):
        raise files_only(data)
    check_apart_from_inputs(work_dir, paths, "the work directory", "work_dir=")
    if against is not None:
        check_apart_from_inputs(work_dir, [against.reader.root], "the work directory", "work_dir=", "the index")
    if found is None:
        found = scan_inputs(paths, on_error)
    # The files found and the folders walked as they resolve, before any is read.
    check_apart_from_read(work_dir, found.files, found.seen_dirs.values(), "the work directory", "work_dir=")
    try:
        with work_dir_lock(work_dir):  # from here on no other run uses it
            prints = fingerprint(found, params, text_field, id_field, on_error)
            if against is not None:  # the stages kept belong to one state of the index
                prints["index"] = against.fingerprint()
            work = WorkDir(work_dir, prints, resume)
            base = WorkDirStore(work, found, params, backend, text_field, id_field, on_error)
            store = base if against is None else against.wrap(base)
            outcome = run_job(store, params, backend, executor, progress, group_field=group_field,
                              check_columns=check_columns)
            table = base.table()
            # The ids stay in the shards until the results take them (a run against an index joins its own).
            ids = base.id_source if against is None else store.ids
            result = DedupResult._of(outcome, ids, table, table.kept_table, [str(p) for p in paths], text_field,
                                     id_field, sorted_records(base.skipped_records(), found), on_error,
                                     indexed_rows=store.pinned, output_bases=output_bases(found.files, found.given))
            with_source_counts(result, group_field, executor)
            return result
    except OSError as error:  # a full disk, a lost mount or bucket, no permission in the work directory
        raise OutputError(f"{work_dir}: cannot write the work directory ({os_reason(error)}); the "
                          "stages it finished are kept: run again with resume=True") from None
    finally:
        # This machine's copies of a work directory on object storage (fetched again if asked for).
        clear_cache(storage.full_name(work_dir))
