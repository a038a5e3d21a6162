"""The work directory of a staged run (--work-dir): what each stage has finished, kept so that
``--resume`` after an interruption redoes only what was not finished.

Layout::

    WORK/manifest.json          the run's fingerprint: version, parameters, the input files
    WORK/run.lock               flock'd by the run that uses it (work_dir_lock); says who
    WORK/plan.npy               the shards the input files are cut into (disk.encode_plan)
    WORK/shards/00000/          one finished shard: band keys, signatures, ids, ...
    WORK/indexed/               a run against a persistent index: the indexed documents it
                                matched, as a shard that leads the input's (WorkDir.lead)
    WORK/sets/<spill>/00000/    the shingle sets of one shard's documents that are in pairs
                                (or in groups of identical copies)
    WORK/stages/<name>/         one finished whole-corpus stage (copies, candidates, pairs)
    WORK/pairs/<kind>/00000/    on a cluster, one part of a stage's pairs (pipeline/pairparts.py:
                                likely, verified; pipeline/copyparts.py: groups, copies)
    WORK/clusters/00000/        on a cluster, the clusters of one range of rows
                                (pipeline/clusterparts.py; made again by every run)

A part is one Parquet file, part.parquet, so that each stage's folder under pairs/ and
clusters/ is a Parquet dataset that pyarrow.dataset or dask.dataframe.read_parquet reads whole.

Each folder under shards/, sets/, stages/, pairs/ and clusters/ is a **unit**: its files are written together,
and a unit that exists is a complete one; a run killed half way leaves at most units that do
not count, which the next run removes or writes again. The manifest ties the directory to one
run: a resume with other inputs (a file changed in size or time) or other parameters is
refused, because the finished stages would not belong to it.

The work directory is a local folder (or a shared mount every Dask worker sees at the same
path) or a URL on object storage; pipeline/workfolders.py writes and reads its units in each.
"""

from __future__ import annotations

import copy
import io
import json
import os
import shutil
import threading
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import OutputError, ParameterError
from ..io.storage import Given, Remote, location_of
from ..locks import exclusive_lock
from ..threads import map_parallel
from .manifest import (MANIFEST, describe_difference, holds_fingerprint, is_run_manifest, manifest_bytes,
                       started_elsewhere)
from .workfolders import (REQUEST_THREADS, TEMPORARY_PREFIX, BucketFolder, Folder,
                          folder_of, load_npy, read_work_file)

# The file of a part of a cluster's stage (WorkDir.write_part). Written without dictionaries or
# compression: parts of distinct integers gain little from either, and pyarrow's defaults make
# the write about three times slower (scripts/bench_work_formats.py, docs/performance.md).
PART_FILE = "part.parquet"
PART_OPTIONS = {"compression": "none", "use_dictionary": False}
PLAN = "plan.npy"
# The unit of the indexed documents a run against an index matched (WorkDir.lead).
LEAD_UNIT = "indexed"
# The lock file of a local work directory (work_dir_lock).
LOCK = "run.lock"


def resume_without_work_dir() -> ParameterError:
    """The error of a run asked to resume without a work directory (dedup, Index.add)."""
    return ParameterError("resume=True needs work_dir=, the work directory to resume from")


def may_hold_a_run(path: Path) -> bool:
    """Whether ``path`` is missing, or a directory that is empty or a work directory's (it holds
    a run's manifest, or the lock file; a killed run's half-written units aside): what
    work_dir_lock may make its lock file in."""
    if not os.path.lexists(path):
        return True
    if not path.is_dir():  # a file, or a link to none
        return False
    names = {entry.name for entry in path.iterdir() if not entry.name.startswith(TEMPORARY_PREFIX)}
    if MANIFEST in names:
        try:
            return is_run_manifest((path / MANIFEST).read_bytes())
        except OSError:
            return True  # (WorkDir says what is wrong with it)
    return not names or LOCK in names


# The work directories this process holds (work_dir_lock): (thread, resolved path) -> depth.
_held: dict[tuple[int, str], int] = {}


@contextmanager
def work_dir_lock(given: Optional[Given]) -> Iterator[None]:
    """Hold the work directory ``given`` for the run that uses it, for the block: an flock on
    its lock file (LOCK, made with the folder where missing), which goes with the process, so
    that a killed run never leaves it locked. Another run (another process, or another thread
    of this one) that asks for it meanwhile is refused at once, told who holds it. Blocks of
    one thread over one folder nest (a run, the write of its results and an index's commit
    each hold it), the outermost holding the lock. Nothing for None, nor for what cannot be a
    work directory (may_hold_a_run: WorkDir refuses it, and nothing is written into it).

    A work directory on object storage cannot be locked (an object store has no lock, and a
    marker object would outlive a killed run): two runs must not share one there, and nothing
    stops them. (A result written later, after the call that made it has returned, reads its
    work directory without holding it.)"""
    location = None if given is None else location_of(given)
    if location is None or isinstance(location, Remote) or not may_hold_a_run(location):
        yield
        return
    key = (threading.get_ident(), os.path.realpath(location))
    if key in _held:
        _held[key] += 1
        try:
            yield
        finally:
            _held[key] -= 1
        return
    shown = location.absolute()

    def refused(holder: str) -> ParameterError:
        return ParameterError(f"{shown}: the work directory is in use by another run ({holder}); wait for it or "
                              "choose another work_dir=")

    with ExitStack() as held:
        try:
            location.mkdir(parents=True, exist_ok=True)
            held.enter_context(exclusive_lock(location / LOCK, refused))
        except OSError as error:  # (the block's own errors are not these)
            raise OutputError(f"{shown}: cannot write the work directory ({error.strerror or error})") from None
        _held[key] = 1
        try:
            yield
        finally:
            del _held[key]


class WorkDir:
    """A work directory bound to one run's fingerprint (a JSON-able dict).

    lead: whether the shards its stages read start with the indexed documents a run against a
    persistent index matched (LEAD_UNIT, written after the probe): shard 0 is that unit, shard
    i the input's shard i - 1, so that those documents are rows 0 .. k-1 and every stage reads
    them as it reads a shard (with_lead). The input side reads the input's shards alone."""

    fingerprint: Optional[dict]  # None when attached (a worker): the client checked it
    folder: Folder
    lead = False

    @classmethod
    def attach(cls, location: Union["WorkDir", "LeadAt", Given]) -> "WorkDir":
        """The work directory a run has already opened (checked), as a task sees it:
        ``location`` is WorkDir.location on a worker, or the run's WorkDir itself in its own
        process (which then shares what it has read: a remote unit's marker is read once)."""
        if isinstance(location, WorkDir):
            return location
        work = cls.__new__(cls)
        given = location.location if isinstance(location, LeadAt) else location
        work.folder, work.fingerprint = folder_of(location_of(given)), None
        work.lead = isinstance(location, LeadAt)
        return work

    def __init__(self, given: Given, fingerprint: dict, resume: bool):
        self.folder = folder = folder_of(location_of(given))
        self.fingerprint = fingerprint
        shown = self.shown
        if folder.is_file():
            raise ParameterError(f"{shown}: the work directory exists and is not a directory")
        manifest = folder.read_small(MANIFEST)
        if manifest is not None and not is_run_manifest(manifest):
            raise ParameterError(f"{shown}: not a gpudedup work directory (its {MANIFEST} is not a run's) and not "
                                 "empty; choose another directory")
        if manifest is not None:
            if not resume:
                raise ParameterError(f"{shown}: the work directory holds an earlier run; pass resume=True to "
                                     "go on with it, or choose an empty directory")
            previous = read_work_file(f"{shown}/{MANIFEST}", lambda: json.loads(manifest.decode("utf-8")))
            started = started_elsewhere(previous, fingerprint)
            if started is not None:
                where = f" ({started})" if started else ""
                raise ParameterError(f"{shown}: the work directory's run was started from another working "
                                     f"directory{where}; its ids and messages name the input files from there, "
                                     "so resume it from there")
            if previous != fingerprint:
                raise ParameterError(f"{shown}: the work directory belongs to another run "
                                     f"({describe_difference(previous, fingerprint)}); use a new directory")
        elif folder.holds_more_than({MANIFEST, LOCK}):
            raise ParameterError(f"{shown}: not a gpudedup work directory (no {MANIFEST}) and not empty")
        folder.prepare()
        if manifest is None:
            folder.write_small(MANIFEST, manifest_bytes(fingerprint))

    def for_tasks(self, in_process: bool) -> "WorkAt":
        """What a task is given to attach this work directory by: itself, to a task in this
        process; task_location, to a worker."""
        return self if in_process else self.task_location

    @property
    def task_location(self) -> "WorkAt":
        """The work directory as a worker's task attaches it: its location, marked where its
        shards have a lead (LeadAt)."""
        return LeadAt(self.location) if self.lead else self.location

    def with_lead(self) -> "WorkDir":
        """This work directory as the stages of a run against an index read it (lead)."""
        work = copy.copy(self)
        work.lead = True
        return work

    def check_holds_this_run(self, what: str) -> None:
        """OutputError unless the work directory still holds the run it was opened for (its
        manifest, the run's fingerprint): a result that reads ``what`` there after its run
        would otherwise read another run's, or fail on files that are gone. A task's
        attached work directory (no fingerprint) is its run's."""
        if self.fingerprint is None:
            return
        manifest = self.folder.read_small(MANIFEST)
        if manifest is None:
            raise self.gone(what)
        if not holds_fingerprint(manifest, self.fingerprint):
            raise OutputError(f"{self.shown}: the work directory holds another run now; the result of a run with "
                              f"work_dir= reads {what} there: write the result before its work directory is reused")

    def gone(self, what: str) -> OutputError:
        """The error of a result that reads ``what`` in its work directory after its run, once
        the work directory is gone."""
        return OutputError(f"{self.shown}: the work directory is gone; the result of a run with work_dir= reads {what} "
                           "there: write the result before removing it")

    @property
    def location(self) -> str:
        """The work directory as tasks are given it (WorkDir.attach): a path, or the whole URL."""
        return self.folder.location

    @property
    def shown(self) -> str:
        """The work directory as messages and reports name it (a URL without its secrets)."""
        folder = self.folder
        return str(folder.remote) if isinstance(folder, BucketFolder) else str(folder.root)

    # --- units ------------------------------------------------------------------------------

    def done(self, relative: str) -> bool:
        """Whether the unit ``relative`` ("shards/00000") is there, complete."""
        return self.folder.unit_done(relative)

    def file(self, relative: str, name: str) -> Path:
        """The local path of the file ``name`` of the finished unit ``relative``."""
        return self.folder.unit_file(relative, name)

    def done_of(self, relatives: list[str]) -> list[bool]:
        """``done`` of each unit, asked side by side on object storage (REQUEST_THREADS)."""
        return list(map_parallel(self.done, relatives, self.request_threads))

    @property
    def request_threads(self) -> int:
        return REQUEST_THREADS if isinstance(self.folder, BucketFolder) else 1

    def write_dir(self, relative: str, arrays: dict[str, np.ndarray], tables: dict | None = None,
                  info: dict | None = None, more: Optional[Callable[[Path], None]] = None) -> None:
        """Store arrays (.npy), tables (.parquet), info (info.json) and what ``more`` writes
        into the folder as the unit WORK/relative, all at once."""

        def fill(staging: Path) -> None:
            if more is not None:
                more(staging)
            for name, array in arrays.items():
                np.save(staging / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
            for name, table in (tables or {}).items():
                # Lists keep their item's name as read (Parquet's compliant "element" would
                # read back as another type than the in-memory run's reader gives).
                pq.write_table(table, staging / f"{name}.parquet", use_compliant_nested_type=False)
            if info is not None:
                (staging / "info.json").write_text(json.dumps(info, sort_keys=True) + "\n", encoding="utf-8")

        self.write_unit(relative, fill)

    def write_unit(self, relative: str, fill: Callable[[Path], None]) -> None:
        """The unit WORK/relative, its files made by ``fill`` in a staging folder, committed at
        once (the folder's way: a rename, or a marker last)."""
        staging = self.folder.staging()
        try:
            fill(staging)
            self.folder.commit_unit(relative, staging)
        finally:
            shutil.rmtree(staging, ignore_errors=True)  # (gone already once committed)

    def remove(self, relative: str) -> None:
        """Delete the unit ``relative`` (it is to be written again, differently)."""
        self.folder.remove_unit(relative)

    # --- shards -----------------------------------------------------------------------------

    def shard_unit(self, index: int) -> str:
        if self.lead:
            return LEAD_UNIT if index == 0 else f"shards/{index - 1:05d}"
        return f"shards/{index:05d}"

    def shards_done(self, indices) -> list[bool]:
        """Whether each shard of ``indices`` is done (its unit, shard_unit), asked side by side
        (done_of)."""
        return self.done_of([self.shard_unit(index) for index in indices])

    def fetch_shards(self, indices, names: list[str]) -> None:
        """Bring the files ``names`` of the shards ``indices`` into this machine's cache side by
        side (object storage; locally they are there), for a loop that reads them in turn next."""
        if self.request_threads > 1:
            wanted = [(self.shard_unit(index), name) for index in indices for name in names]
            list(map_parallel(lambda unit: self.file(*unit), wanted, self.request_threads))

    def write_shard(self, index: int, arrays: dict[str, np.ndarray], info: dict,
                    tables: dict | None = None, columns: Optional[pa.Schema] = None) -> None:
        """Store one shard's arrays (.npy, memory-mappable), tables (Parquet), info (JSON) and
        the columns it read (an Arrow IPC file of no rows, columns.arrow: Arrow stores every
        type, Parquet not some, a struct of no fields among them) at once."""

        def schema_file(staging: Path) -> None:
            if columns is not None:
                pa.ipc.new_file(str(staging / "columns.arrow"), columns).close()

        self.write_dir(self.shard_unit(index), arrays, tables, info, schema_file)

    def shard_file(self, index: int, name: str) -> Path:
        return self.file(self.shard_unit(index), name)

    def shard_table(self, index: int, name: str):
        """The Parquet file ``name`` of shard ``index`` (a pyarrow Table), read where it is
        (on object storage, not through the cache)."""
        return self.folder.read_table(self.shard_unit(index), name)

    def shard_array(self, index: int, name: str, mmap: bool = True) -> np.ndarray:
        return self.array(self.shard_unit(index), f"{name}.npy", mmap)

    def shard_info(self, index: int) -> dict:
        path = self.shard_file(index, "info.json")
        return read_work_file(path, lambda: json.loads(path.read_text(encoding="utf-8")))

    def shard_schema(self, index: int):
        """The schema of shard ``index``'s spilled columns (columns.arrow, write_shard)."""

        path = self.shard_file(index, "columns.arrow")
        return read_work_file(path, lambda: pa.ipc.open_file(str(path)).schema)

    def array(self, relative: str, name: str, mmap: bool = False) -> np.ndarray:
        """The .npy file ``name`` of the finished unit ``relative``, loaded or (mmap)
        memory-mapped where this machine has it (file)."""
        path = self.file(relative, name)
        return read_work_file(path, lambda: load_npy(path, mmap))

    # --- the shards' plan (io/pieces.py) -------------------------------------------------

    def load_plan(self) -> Optional[np.ndarray]:
        """The shards a run reads (int64 (s, 4), disk.WorkDirStore.plan_shards), or None
        before they are planned."""
        data = self.folder.read_small(PLAN)
        return None if data is None else read_work_file(f"{self.shown}/{PLAN}",
                                                        lambda: load_npy(io.BytesIO(data)))

    def save_plan(self, shards: np.ndarray) -> None:
        """Store (or replace: a file found to need reading whole) the shards' plan at once."""
        buffer = io.BytesIO()
        np.save(buffer, shards, allow_pickle=False)
        self.folder.write_small(PLAN, buffer.getvalue())

    # --- whole-corpus stages ---------------------------------------------------------------

    def load_stage(self, name: str) -> Optional[dict[str, np.ndarray]]:
        """A finished stage's arrays, or None when it has not finished; every array its
        info.json names (save_stage) must be there, or the work directory is damaged
        (DamagedWorkDirError naming the file, as for one that cannot be read)."""
        relative = f"stages/{name}"
        if not self.done(relative):
            return None
        path = self.file(relative, "info.json")
        names = read_work_file(path, lambda: json.loads(path.read_text(encoding="utf-8"))["arrays"])
        return {array: self.array(relative, f"{array}.npy") for array in names}

    # --- a cluster's parts: Parquet datasets -----------------------------------------------

    def write_part(self, relative: str, table: pa.Table) -> None:
        """Store ``table`` as the unit ``relative``, one file (PART_FILE) of a stage's dataset
        (WORK/pairs/<kind>/, WORK/clusters/: pyarrow.dataset or dask.dataframe.read_parquet
        reads the folder whole); a unit an interrupted run left is replaced."""
        if self.done(relative):
            self.remove(relative)
        self.write_unit(relative, lambda staging: pq.write_table(table, staging / PART_FILE, **PART_OPTIONS))

    def read_part(self, relative: str, columns: Optional[list[str]] = None) -> pa.Table:
        """The table of the part ``relative`` (its ``columns``, where given), read from where
        it is: on object storage not through the cache, for a part read once, often after the
        run (whose end empties the caches)."""
        return self.folder.read_table(relative, PART_FILE, columns)

    def keep_parts(self, folder: str, numbers: Iterable[int]) -> None:
        """Remove the units under ``folder`` but parts ``numbers`` (those a stage has just
        written): what an interrupted run that cut the stage otherwise left, so that the
        folder read as a dataset holds this run's parts alone."""
        kept = {f"{number:05d}" for number in numbers}
        for name in self.folder.unit_children(folder):
            if name not in kept:
                self.remove(f"{folder}/{name}")

    def read_parts(self, relatives: list[str], columns: Optional[list[str]] = None) -> list[pa.Table]:
        """read_part of each part of ``relatives``, side by side on object storage."""
        return list(map_parallel(lambda relative: self.read_part(relative, columns), relatives,
                                 self.request_threads))

    def save_stage(self, name: str, arrays: dict[str, np.ndarray]) -> None:
        """The stage's arrays as WORK/stages/<name>/, with an info.json naming them (load_stage)."""
        self.write_dir(f"stages/{name}", arrays, info={"arrays": sorted(arrays)})


# A task's way to the work directory (WorkDir.attach): the run's own WorkDir, or its location.
@dataclass(frozen=True)
class LeadAt:
    """A work directory whose shards have a lead (WorkDir.lead), as a worker's task is given it."""

    location: str


WorkAt = Union[WorkDir, str, LeadAt]


def arrays_of(table: pa.Table) -> dict[str, np.ndarray]:
    """A part's columns of numbers (WorkDir.read_part) as numpy arrays, host, by name."""
    return {name: table[name].to_numpy() for name in table.column_names}
