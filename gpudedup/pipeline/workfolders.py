"""Where a work directory's files live (pipeline/workdir.py's WorkDir goes through one of these):

- a **local folder** (or a shared mount that every Dask worker sees at the same path,
  ``LocalFolder``): a unit is written under a temporary name and renamed into place; the
  stages memory-map its .npy files where they are;
- a **URL on object storage** (``BucketFolder``), which has no rename: a unit's files are
  uploaded, then its marker (``complete.json``: a token and every file's size), last. A unit
  without its marker does not exist for readers, and is deleted whole before it is written
  again. Each machine reads the files through a cache of its own (``cache_folder``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Callable, Optional, TypeVar, Union

import numpy as np
import pyarrow.parquet as pq
import pyarrow.fs as pafs

from ..errors import GpudedupError
from ..io import storage
from ..io.credentials import first_line
from ..io.storage import Location, Remote, location_of
from ..threads import map_parallel


# The names of what a run writes before it is complete (a unit, a small file): a killed run's
# are removed by the next run (prepare), and a folder that holds nothing else counts as empty,
# so the prefix is one that only gpudedup makes, never a user's own ".tmp-" file.
TEMPORARY_PREFIX = ".gpudedup-tmp-"


# The object a unit on object storage is complete with (written after its files). Its leading
# "_" keeps it out of a Parquet dataset over the units (pyarrow.dataset's ignore_prefixes).
MARKER = "_complete.json"


# Where a machine keeps its copies of a remote work directory's files: this variable's folder,
# else gpudedup-work-cache in the system's temporary folder (TMPDIR).
CACHE_VARIABLE = "GPUDEDUP_WORK_CACHE"


# How many of a unit's files go up at once.
UPLOAD_THREADS = 8


# How many requests about units (markers, small files) the client has in flight at once on
# object storage: asked one after the other, a request per shard takes hours at 160,000 shards.
REQUEST_THREADS = 16


Read = TypeVar("Read")


class DamagedWorkDirError(GpudedupError):
    """A file of a work directory that cannot be read as a run wrote it (truncated, garbage, gone
    from a finished unit): no run can go on from it (exit code 2, one line naming the file)."""


# numpy parses a .npy header with ast.literal_eval, whose AST construction in CPython 3.11 keeps
# its recursion depth per interpreter, not per thread: two threads parsing at once can fail with
# "SystemError: AST constructor recursion depth mismatch" (python/cpython#106905). The loads
# of this process's threads take turns.
NPY_LOAD_LOCK = threading.Lock()


def load_npy(source: Union[Path, str, io.BytesIO], mmap: bool = False) -> np.ndarray:
    """The array of the .npy file (or bytes) ``source``, loaded or (mmap) memory-mapped; one
    thread at a time (NPY_LOAD_LOCK)."""
    with NPY_LOAD_LOCK:
        return np.load(source, mmap_mode="r" if mmap else None, allow_pickle=False)


def read_work_file(path: Union[Path, str, Remote], read: Callable[[], Read]) -> Read:
    """``read()``, which reads the work directory's file ``path`` (a path or URL, as messages
    name it); DamagedWorkDirError naming it where its contents are not what a run writes:
    numpy's, Arrow's and json's errors over the bytes are ValueErrors; a JSON file without the
    fields a run writes gives KeyError or TypeError."""
    try:
        return read()
    except (ValueError, EOFError, FileNotFoundError, IsADirectoryError, NotADirectoryError, KeyError,
            TypeError) as error:
        if "pickled" in str(error):  # (numpy takes a file without the .npy magic for a pickle)
            reason = "not a .npy file"
        elif isinstance(error, FileNotFoundError):
            reason = "it is missing"
        elif isinstance(error, KeyError):
            reason = f"it has no field {error}"
        else:
            reason = first_line(error)
        raise DamagedWorkDirError(f"{path}: cannot be read ({reason}); the work directory is damaged: delete it, "
                                  "or choose another work_dir=, and run again without resume=True") from None


class LocalFolder:
    """A work directory on a local (or mounted) file system, ``root``: units are committed by
    a rename, and read where they are."""

    def __init__(self, root: Path):
        self.root = Path(root).absolute()  # workers may run elsewhere

    @property
    def location(self) -> str:
        return str(self.root)

    def is_file(self) -> bool:
        return self.root.exists() and not self.root.is_dir()

    def holds_more_than(self, names: set[str]) -> bool:
        return self.root.exists() and any(p.name not in names for p in self.root.iterdir()
                                          if not p.name.startswith(TEMPORARY_PREFIX))

    def prepare(self) -> None:
        """Make the folder, and remove a killed run's half-written units."""
        self.root.mkdir(parents=True, exist_ok=True)
        for leftover in self.root.glob(f"{TEMPORARY_PREFIX}*"):
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()

    def read_small(self, name: str) -> Optional[bytes]:
        path = self.root / name
        return path.read_bytes() if path.exists() else None

    def write_small(self, name: str, data: bytes) -> None:
        """Write (or replace) the file ``name`` at once."""
        handle, temporary = tempfile.mkstemp(prefix=TEMPORARY_PREFIX, dir=self.root)
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.root / name)
        _sync_dir(self.root)

    def staging(self) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX, dir=self.root))

    def unit_done(self, relative: str) -> bool:
        return (self.root / relative).is_dir()

    def unit_file(self, relative: str, name: str) -> Path:
        return self.root / relative / name

    def read_table(self, relative: str, name: str, columns: Optional[list[str]] = None):
        path = self.root / relative / name
        return read_work_file(path, lambda: pq.read_table(path, columns=columns))

    def unit_children(self, relative: str) -> list[str]:
        folder = self.root / relative
        return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []

    def commit_unit(self, relative: str, staging: Path) -> None:
        final = self.root / relative
        final.parent.mkdir(parents=True, exist_ok=True)
        _sync_dir(staging)
        os.rename(staging, final)
        _sync_dir(final.parent)

    def remove_unit(self, relative: str) -> None:
        shutil.rmtree(self.root / relative, ignore_errors=True)
        _sync_dir((self.root / relative).parent)


class BucketFolder:
    """A work directory on object storage, ``remote``: a unit is complete when its marker
    (MARKER, written after its files) is there; files are read from this machine's cache
    (cache_folder), downloaded when first asked for. The markers read are remembered for the
    life of this object (a task's, or a run's, which forgets those it writes or removes)."""

    def __init__(self, remote: Remote):
        self.remote = remote
        self.cache = cache_folder(remote)
        self.markers: dict[str, dict] = {}

    @property
    def location(self) -> str:
        return storage.full_name(self.remote)

    def is_file(self) -> bool:
        return storage.info(self.remote).type == pafs.FileType.File

    def holds_more_than(self, names: set[str]) -> bool:
        prefix = self.remote.filesystem()[1].rstrip("/") + "/"
        return any(entry.path[len(prefix):] not in names for entry in storage.file_entries(self.remote))

    def prepare(self) -> None:
        self.cache.mkdir(parents=True, exist_ok=True)

    def read_small(self, name: str) -> Optional[bytes]:
        try:
            return storage.read_bytes(self.remote.child(name))
        except FileNotFoundError:
            return None

    def write_small(self, name: str, data: bytes) -> None:
        """Write (or replace) the object ``name``: one request, so whole or not at all."""
        filesystem, path = self.remote.child(name).filesystem()
        with filesystem.open_output_stream(path) as out:
            out.write(data)

    def staging(self) -> Path:
        # Not inside the cache, which the end of a run deletes while a task may still be
        # writing (a LocalCluster's workers share this machine's cache).
        return Path(tempfile.mkdtemp(prefix="gpudedup-unit-"))

    def marker(self, relative: str) -> Optional[dict]:
        if relative not in self.markers:
            data = self.read_small(f"{relative}/{MARKER}")
            if data is None:
                return None
            try:
                marker = json.loads(data)
                if not isinstance(marker.get("token"), str) or not isinstance(marker.get("sizes"), dict):
                    raise ValueError("no token or sizes")
            except (ValueError, AttributeError) as error:
                raise OSError(f"{self.remote.child(relative)}/{MARKER}: not a marker of a gpudedup work directory "
                              f"({error})") from None
            self.markers[relative] = marker
        return self.markers[relative]

    def read_table(self, relative: str, name: str, columns: Optional[list[str]] = None):
        """The Parquet file ``name`` of the unit ``relative`` (its ``columns``, where given),
        read from the store (not kept in the cache: a table needs no memory map, and results
        read their parts after the run)."""
        self._marker_of(relative)  # (a complete unit's only)
        remote = self.remote.child(f"{relative}/{name}")
        return read_work_file(remote, lambda: storage.read_parquet(remote, columns))

    def unit_done(self, relative: str) -> bool:
        return self.marker(relative) is not None

    def unit_children(self, relative: str) -> list[str]:
        """The folders under ``relative``, units complete or not (a listing: one request)."""
        filesystem, path = self.remote.child(relative).filesystem()
        entries = filesystem.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        return sorted(entry.base_name for entry in entries if entry.type == pafs.FileType.Directory)

    def unit_file(self, relative: str, name: str) -> Path:
        marker = self._marker_of(relative)
        local = self.cache / relative / marker["token"] / name
        if not local.exists():
            local.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(prefix=TEMPORARY_PREFIX, dir=local.parent)
            try:
                with os.fdopen(handle, "wb") as out, storage.open_stream(self.remote.child(f"{relative}/{name}")) \
                        as source:
                    copied = storage.copy_stream(source, out)
                if copied != marker["sizes"][name]:
                    raise OSError(f"{self.remote.child(relative)}/{name}: {copied} bytes, its unit's marker "
                                  f"says {marker['sizes'][name]}")
                os.replace(temporary, local)  # (another process of this machine may fetch it too)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
        return local

    def _marker_of(self, relative: str) -> dict:
        marker = self.marker(relative)
        if marker is None:
            raise FileNotFoundError(f"{self.remote.child(relative)}: no such unit of the work directory")
        return marker

    def commit_unit(self, relative: str, staging: Path) -> None:
        """Upload the files of ``staging`` as the unit ``relative`` (what an earlier, killed
        writer left of it deleted first), its marker last; then keep them as the cache's copy."""
        self._delete(relative)
        files = sorted(staging.iterdir())
        # Side by side: each object is a request's round trip, most of them small.
        list(map_parallel(lambda path: storage.upload(path, self.remote.child(f"{relative}/{path.name}")), files,
                          UPLOAD_THREADS))
        sizes = {path.name: path.stat().st_size for path in files}
        token = uuid.uuid4().hex
        marker = {"token": token, "sizes": sizes}
        self.write_small(f"{relative}/{MARKER}", json.dumps(marker, sort_keys=True).encode())
        self.markers[relative] = marker
        cached = self.cache / relative / token
        cached.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(staging, cached)  # (a rename where the cache is on the same file system)

    def remove_unit(self, relative: str) -> None:
        """The marker first, so that a unit half deleted is not taken for a complete one."""
        filesystem, path = self.remote.child(f"{relative}/{MARKER}").filesystem()
        try:
            filesystem.delete_file(path)
        except FileNotFoundError:
            pass
        self._delete(relative)
        shutil.rmtree(self.cache / relative, ignore_errors=True)

    def _delete(self, relative: str) -> None:
        self.markers.pop(relative, None)
        filesystem, path = self.remote.child(relative).filesystem()
        filesystem.delete_dir_contents(path, missing_dir_ok=True)


Folder = Union[LocalFolder, BucketFolder]


def folder_of(location: Location) -> Folder:
    return BucketFolder(location) if isinstance(location, Remote) else LocalFolder(location)


def cache_folder(remote: Remote) -> Path:
    """This machine's cache of the remote work directory ``remote``: a folder of its own (named
    by a digest of its URL) under $GPUDEDUP_WORK_CACHE, or gpudedup-work-cache in the
    temporary folder."""
    base = os.environ.get(CACHE_VARIABLE) or os.path.join(tempfile.gettempdir(), "gpudedup-work-cache")
    return Path(base) / hashlib.sha256(str(remote).encode()).hexdigest()[:16]


def clear_cache(location: str) -> None:
    """Delete this machine's cache of the work directory ``location`` (a URL; nothing for a
    local folder). Safe at any time: a file is fetched again when next asked for."""
    remote = location_of(location)
    if isinstance(remote, Remote):
        shutil.rmtree(cache_folder(remote), ignore_errors=True)


def _sync_dir(path: Path) -> None:
    """fsync a directory, so that a rename into it survives a crash (where supported)."""
    try:
        handle = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)
