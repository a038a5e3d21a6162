"""The work directory of a staged run (--work-dir): what each stage has finished, kept on disk
so that ``--resume`` after an interruption redoes only what was not finished.

Layout::

    WORK/manifest.json          the run's fingerprint: version, parameters, the input files
    WORK/shards/00000/          one finished input file (shard): band keys, signatures, ...
    WORK/stages/<name>.npz      one finished whole-corpus stage (copies, candidates, pairs)

Everything is written under a temporary name in WORK and renamed into place when complete,
so a stage result that exists is a complete one; a run killed half way leaves at most
temporary files, which the next run removes. The manifest ties the directory to one run: a
resume with other inputs (a file changed in size or time) or other parameters is refused,
because the finished stages would not belong to it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import ParameterError

MANIFEST = "manifest.json"
TEMPORARY_PREFIX = ".tmp-"


class WorkDir:
    """A work directory bound to one run's fingerprint (a JSON-able dict)."""

    @classmethod
    def attach(cls, root: Path) -> "WorkDir":
        """The work directory a run has already opened (checked), as a Dask worker sees it."""
        work = cls.__new__(cls)
        work.root, work.fingerprint = Path(root), None
        return work

    fingerprint: Optional[dict]  # None when attached (a worker): the client checked it

    def __init__(self, root: Path, fingerprint: dict, resume: bool):
        self.root = Path(root).absolute()  # workers may run elsewhere
        self.fingerprint = fingerprint
        if self.root.exists() and not self.root.is_dir():
            raise ParameterError(f"{root}: the work directory exists and is not a directory")
        manifest = self.root / MANIFEST
        if manifest.exists():
            if not resume:
                raise ParameterError(f"{self.root}: the work directory holds an earlier run; pass --resume to "
                                     "go on with it, or choose an empty directory")
            previous = json.loads(manifest.read_text(encoding="utf-8"))
            if previous != fingerprint:
                raise ParameterError(f"{self.root}: the work directory belongs to another run "
                                     f"({describe_difference(previous, fingerprint)}); use a new directory")
        elif self.root.exists() and any(p.name != MANIFEST for p in self.root.iterdir()
                                        if not p.name.startswith(TEMPORARY_PREFIX)):
            raise ParameterError(f"{self.root}: not a gpudedup work directory (no {MANIFEST}) and not empty")
        self.root.mkdir(parents=True, exist_ok=True)
        for leftover in self.root.glob(f"{TEMPORARY_PREFIX}*"):  # a killed run's half-written parts
            shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
        if not manifest.exists():
            self._write_text(MANIFEST, json.dumps(fingerprint, indent=2, sort_keys=True) + "\n")

    # --- shards -------------------------------------------------------------------------

    def shard_dir(self, index: int) -> Path:
        return self.root / "shards" / f"{index:05d}"

    def shard_done(self, index: int) -> bool:
        return self.shard_dir(index).is_dir()

    def write_shard(self, index: int, arrays: dict[str, np.ndarray], info: dict,
                    tables: dict | None = None) -> None:
        """Store one shard's arrays (.npy, memory-mappable), tables (Parquet) and info (JSON)
        at once."""
        self.write_dir(Path("shards") / f"{index:05d}", arrays, tables, info)

    def write_dir(self, relative: Path, arrays: dict[str, np.ndarray], tables: dict | None = None,
                  info: dict | None = None) -> None:
        """Store arrays (.npy), tables (.parquet) and info (info.json) as the directory
        WORK/relative, all at once (written beside it, then renamed into place)."""
        import pyarrow.parquet as pq

        final = self.root / relative
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=TEMPORARY_PREFIX, dir=self.root))
        for name, array in arrays.items():
            np.save(staging / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
        for name, table in (tables or {}).items():
            pq.write_table(table, staging / f"{name}.parquet")
        if info is not None:
            (staging / "info.json").write_text(json.dumps(info, sort_keys=True) + "\n", encoding="utf-8")
        _sync_dir(staging)
        os.rename(staging, final)
        _sync_dir(final.parent)

    def shard_array(self, index: int, name: str, mmap: bool = True) -> np.ndarray:
        return np.load(self.shard_dir(index) / f"{name}.npy", mmap_mode="r" if mmap else None,
                       allow_pickle=False)

    def shard_info(self, index: int) -> dict:
        return json.loads((self.shard_dir(index) / "info.json").read_text(encoding="utf-8"))

    # --- the shards' plan (io/pieces.py) -------------------------------------------------

    def load_plan(self) -> Optional[np.ndarray]:
        """The shards a run reads (int64 (s, 4), disk.WorkDirStore.plan_shards), or None
        before they are planned."""
        path = self.root / "plan.npy"
        return np.load(path, allow_pickle=False) if path.exists() else None

    def save_plan(self, shards: np.ndarray) -> None:
        """Store (or replace: a file found to need reading whole) the shards' plan at once."""
        handle, temporary = tempfile.mkstemp(prefix=TEMPORARY_PREFIX, dir=self.root)
        with os.fdopen(handle, "wb") as out:
            np.save(out, shards, allow_pickle=False)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, self.root / "plan.npy")
        _sync_dir(self.root)

    def remove_shard(self, index: int) -> None:
        """Delete shard ``index``'s spill (it is to be signed again, differently)."""
        shutil.rmtree(self.shard_dir(index), ignore_errors=True)
        _sync_dir(self.shard_dir(index).parent)

    # --- whole-corpus stages ---------------------------------------------------------------

    def stage_path(self, name: str) -> Path:
        return self.root / "stages" / f"{name}.npz"

    def load_stage(self, name: str) -> Optional[dict[str, np.ndarray]]:
        """A finished stage's arrays, or None when it has not finished."""
        path = self.stage_path(name)
        if not path.exists():
            return None
        with np.load(path, allow_pickle=False) as stored:
            return {key: stored[key] for key in stored.files}

    def save_stage(self, name: str, arrays: dict[str, np.ndarray]) -> None:
        path = self.stage_path(name)
        path.parent.mkdir(exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=TEMPORARY_PREFIX, dir=self.root)
        with os.fdopen(handle, "wb") as out:
            np.savez(out, **arrays)  # type: ignore[arg-type]  # numpy's stub takes **arrays for allow_pickle
            out.flush()
            os.fsync(out.fileno())
        os.rename(temporary, path)
        _sync_dir(path.parent)

    def _write_text(self, name: str, text: str) -> None:
        handle, temporary = tempfile.mkstemp(prefix=TEMPORARY_PREFIX, dir=self.root)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.rename(temporary, self.root / name)


def describe_difference(previous: dict, now: dict) -> str:
    """The first field that differs between two fingerprints, for the message (in the order
    of ``now``, where the parameters a user gives come before those derived from them)."""
    for key in list(now) + [key for key in previous if key not in now]:
        if previous.get(key) != now.get(key):
            if key == "inputs":
                return describe_inputs(previous.get(key) or [], now.get(key) or [])
            if isinstance(previous.get(key), dict) and isinstance(now.get(key), dict):
                return describe_difference(previous[key], now[key])
            return f"{key} was {previous.get(key)!r}, now {now.get(key)!r}"
    return "the fingerprints differ"


def describe_inputs(previous: list, now: list) -> str:
    """Which input file was added, removed or changed ([path, size, mtime_ns] lists)."""
    before, after = {p[0]: p[1:] for p in previous}, {p[0]: p[1:] for p in now}
    for path in after:
        if path not in before:
            return f"the input files differ: {path} was added"
    for path in before:
        if path not in after:
            return f"the input files differ: {path} was removed"
        if before[path] != after[path]:
            what = "size" if before[path][0] != after[path][0] else "modification time"
            return f"the input files differ: {path} changed ({what})"
    return "the input files differ"


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
