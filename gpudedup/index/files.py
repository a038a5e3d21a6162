"""A persistent index's files: immutable segments, the manifest that lists the live ones, the
tombstones of removed documents, and the lock that admits one writer at a time.

Layout::

    INDEX/manifest.json            the committed state: format, parameters, live segments with
                                   every file's SHA-256, the tombstone file, a generation number,
                                   and the SHA-256 of all that (checksum)
    INDEX/segments/<name>/         one segment: the documents one ``add`` kept (immutable)
        ids.arrow                  Arrow IPC, columns "id" (int64 or string) and "tag", one row
                                   per document (memory-mapped: a few ids are read, not all)
        keys.npy                   uint64 (bands, n): each band's keys, sorted
        rows.npy                   uint32 (bands, n): the row (0 .. n-1) of each sorted key
        signatures.npy             uint32 (n, bands * rows): for the signature filter
        signatures.blocks          the block size (BLOCKS_HEADER), then the SHA-256 of each
                                   block of signatures.npy: a run checks the blocks it reads
        lengths.npy                int64 (n,): units (code points, token ids) of each document
        set_offsets.npy            int64 (n + 1,) and
        set_columns.npy            int64 (S,): each document's shingle-hash set, sorted and
                                   distinct (shingling.hashes_to_columns), for exact Jaccard;
        set_columns.blocks         as signatures.blocks, of set_columns.npy;
                                   or, in an index made with verification "source", instead:
        sources.json,              the source files pointed into (path, format, field, size,
        source_file.npy,           SHA-256), uint32 (n,) each document's file in that list and
        source_row.npy             int64 (n,) its line or row there (index/sources.py)
        id_keys.npy, id_rows.npy   uint64 (n,) sorted id keys (id_keys) and uint32 (n,) their
                                   rows: whether a new id is taken, by binary search
    INDEX/tombstones/<name>.parquet  the removed documents (segment, row), applied when the
                                   index is read, dropped by compact
    INDEX/writer.lock              flock'd by the one writer; holds who it is

Every file's SHA-256 is in the manifest; a reader checks each file the first time it uses it
(checked.OpenedFile), whole, but for the two files read by document (BLOCKED_ARRAYS), whose
blocks a run checks as it reads them, so that its cost follows the documents it reads rather
than the size of the index (a segment written without them is checked whole).

Commit protocol: a writer builds every new file under a temporary name (``.tmp-*``), fsyncs it,
renames it into place, and then replaces manifest.json by rename (atomic on a POSIX file
system). Readers read manifest.json once and open only the files it names, which are never
changed after they are written, so a reader sees the last committed state whatever a writer
is doing, and a writer killed at any point leaves the last committed state plus files no
manifest names; the next writer removes those (``collect_garbage``).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import struct
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DamagedIndexError, GpudedupError, InputError, OutputError, ParameterError
from ..io.stamps import content_digest
from ..io.storage import not_utf8, readable
from ..io.credentials import os_reason
from ..locks import exclusive_lock
from .sources import write_sources

FORMAT = 1
MANIFEST = "manifest.json"
LOCK = "writer.lock"
TEMPORARY = ".tmp-"
# Every segment's arrays; the arrays for exact verification are sources.VERIFICATION_ARRAYS'.
SEGMENT_ARRAYS = ("keys", "rows", "signatures", "lengths", "id_keys", "id_rows")
# The arrays read by document, a few rows of many (the matched documents' signatures and sets):
# each has the SHA-256 of every BLOCK_BYTES of its file beside it (<name>.blocks). 16 KiB holds
# a few documents' sets, so that an add that reads a few rows hashes a few blocks.
BLOCKED_ARRAYS = ("signatures", "set_columns")
BLOCK_BYTES = 1 << 14
DIGEST_BYTES = 32  # (SHA-256)
BLOCKS_SUFFIX = ".blocks"
BLOCKS_HEADER = struct.Struct("<Q")  # a .blocks file's block size, before its digests
# What a writer that fails leaves (its message says so): a reader sees nothing of a change
# before its commit.
UNCHANGED = "it stays as its last commit left it"


def fsync_path(path: Path) -> None:
    """Flush a file or a directory's entries to stable storage."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


@dataclass(frozen=True)
class SegmentEntry:
    """A live segment as the manifest lists it: name (its directory under segments/),
    documents, files (file name -> SHA-256), bytes (their total)."""

    name: str
    documents: int
    files: dict
    bytes: int

    def as_dict(self) -> dict:
        return {"name": self.name, "documents": self.documents, "files": self.files, "bytes": self.bytes}


@dataclass(frozen=True)
class Manifest:
    """The committed state of an index (manifest.json).

    parameters: what results depend on (fixed at create; every command checks them);
    segments: the live segments, oldest first (index order is segment order, then row);
    tombstones: {"name": file under tombstones/, "sha256": ...} of the removed ids, or None;
    generation: counts commits (names new files; helps readers tell states apart);
    verification: how matches are checked exactly ("sets": shingle sets stored per document;
        "source": pointers into source files the user keeps, index/sources.py).
    """

    parameters: dict
    segments: tuple[SegmentEntry, ...]
    tombstones: Optional[dict]
    generation: int
    verification: str = "sets"

    def as_dict(self) -> dict:
        return {"format": FORMAT, "parameters": self.parameters, "verification": self.verification,
                "generation": self.generation, "segments": [s.as_dict() for s in self.segments],
                "tombstones": self.tombstones}

    @property
    def documents(self) -> int:
        return sum(s.documents for s in self.segments)


def read_manifest(root: Path) -> Manifest:
    """The committed manifest of the index at ``root``; DamagedIndexError naming the file when it is
    missing, unreadable or of another format."""
    path = root / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        if interrupted_create(root):
            raise DamagedIndexError(f"{root}: an index whose creation was interrupted (no {MANIFEST}); run "
                                    f"`gpudedup index create {root}` again") from None
        raise DamagedIndexError(f"{root}: not a gpudedup index (no {MANIFEST}); make one with "
                                "`gpudedup index create`") from None
    except OSError as error:
        raise index_os_error(root, error, writing=False) from None
    except ValueError as error:  # (not UTF-8)
        raise DamagedIndexError(f"{path}: not a valid index manifest ({type(error).__name__}: {error})") from None
    try:
        data = json.loads(text)
        if data.get("format") != FORMAT:
            raise DamagedIndexError(f"{path}: index format {data.get('format')!r}, this gpudedup reads {FORMAT}")
        if data.pop("checksum", None) != manifest_checksum(data):
            raise DamagedIndexError(f"{path}: its checksum does not match its contents (corrupt or edited)")
        segments = tuple(SegmentEntry(s["name"], int(s["documents"]), dict(s["files"]), int(s["bytes"]))
                         for s in data["segments"])
        return Manifest(dict(data["parameters"]), segments, data.get("tombstones"), int(data["generation"]),
                        data.get("verification", "sets"))
    except DamagedIndexError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise DamagedIndexError(f"{path}: not a valid index manifest ({type(error).__name__}: {error})") from None


def manifest_checksum(contents: dict) -> str:
    """SHA-256 of a manifest's contents (without its own "checksum"), as canonical JSON."""
    canonical = json.dumps(contents, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def write_manifest(root: Path, manifest: Manifest) -> None:
    """Commit ``manifest``: written under a temporary name, fsynced, renamed over manifest.json
    (atomic), and the directory entry fsynced."""
    temporary = root / f"{TEMPORARY}{uuid.uuid4().hex}-{MANIFEST}"
    contents = manifest.as_dict()
    contents["checksum"] = manifest_checksum(contents)
    temporary.write_text(json.dumps(contents, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    fsync_path(temporary)
    os.replace(temporary, root / MANIFEST)
    fsync_path(root)


def file_stamp(path: Path) -> Optional[tuple]:
    """(inode, size, modification time in ns) of ``path``; None where it is gone."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_ino, found.st_size, found.st_mtime_ns)


def write_segment(root: Path, name: str, ids: pa.Table, arrays: dict[str, np.ndarray],
                  sources: Optional[list[dict]] = None,
                  go_on: Callable[[], None] = lambda: None) -> tuple[SegmentEntry, dict[str, Optional[tuple]]]:
    """Write one segment (``arrays``: SEGMENT_ARRAYS and the verification arrays; ``ids``:
    columns id and tag; ``sources``: sources.json's entries, for verification "source") under a
    temporary directory, fsync its files, rename it to segments/<name>; returns its manifest
    entry (not yet committed) and each file's stamp (file_stamp) taken once it was written,
    which stays the same through the rename (reader.Segment's ``written``).

    Every file is written first; then a second thread takes each one's SHA-256 while this one
    fsyncs the files (hashing and flushing are the two costs of a commit, and they overlap
    rather than add up): an array's from the bytes that were written, not read back; the ids'
    (written by Arrow) read back in blocks. The block digests of BLOCKED_ARRAYS come first on
    that thread; their files are written, flushed and hashed once they are made. ``go_on`` is
    called before each file is written and before the flushes: it raises to stop the writing
    (index/adding.py's writer on a thread of its own), which leaves what a killed writer does."""
    parent = root / "segments"
    parent.mkdir(exist_ok=True)
    temporary = parent / f"{TEMPORARY}{name}"
    temporary.mkdir()
    # File name -> the bytes written to it, in pieces; or None: hash the file (Arrow wrote it).
    contents: dict[str, Optional[list[bytes | memoryview]]] = {}
    blocked: dict[str, list[bytes | memoryview]] = {}  # a .blocks file's name -> its array file's bytes
    for key, array in arrays.items():
        go_on()
        contents[f"{key}.npy"] = pieces = write_npy(temporary / f"{key}.npy", array)
        if key in BLOCKED_ARRAYS:
            blocked[f"{key}{BLOCKS_SUFFIX}"] = pieces
    with pa.OSFile(str(temporary / "ids.arrow"), "wb") as sink, pa.ipc.new_file(sink, ids.schema) as writer:
        writer.write_table(ids)
    contents["ids.arrow"] = None
    if sources is not None:
        path, written = write_sources(temporary, sources)
        contents[path.name] = [written]
    go_on()
    with ThreadPoolExecutor(max_workers=1) as hashing:
        made = {file: hashing.submit(blocks_file, pieces) for file, pieces in blocked.items()}
        digests = {file: hashing.submit(content_digest, temporary / file) if pieces is None
                   else hashing.submit(sha256_of, pieces) for file, pieces in contents.items()}
        for file in list(contents):
            fsync_path(temporary / file)
        for file, future in made.items():
            data = future.result()
            (temporary / file).write_bytes(data)
            fsync_path(temporary / file)
            contents[file], digests[file] = [data], hashing.submit(sha256_of, [data])
        files = {file: digests[file].result() for file in sorted(contents)}
    stamps = {file: file_stamp(temporary / file) for file in contents}
    fsync_path(temporary)
    os.replace(temporary, parent / name)
    fsync_path(parent)
    size = sum((parent / name / f).stat().st_size for f in files)
    return SegmentEntry(name, ids.num_rows, files, size), stamps


def write_npy(path: Path, array: np.ndarray) -> list[bytes | memoryview]:
    """Write ``array`` (at least one dimension) as a .npy file of format 1.0, as np.save
    writes a C-ordered array (a Fortran-ordered one is written C-ordered); returns the bytes
    written, as [header bytes, a memoryview of the array's data] (for sha256_of)."""
    array = np.ascontiguousarray(array)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(array))
    pieces: list[bytes | memoryview] = [header.getvalue(), array.reshape(-1).view(np.uint8).data]
    with open(path, "wb") as sink:
        for piece in pieces:
            sink.write(piece)
    return pieces


def sha256_of(pieces: list[bytes | memoryview]) -> str:
    """SHA-256 (hex) of the bytes of ``pieces`` (bytes-like) one after the other."""
    digest = hashlib.sha256()
    for piece in pieces:
        digest.update(piece)
    return digest.hexdigest()


def blocks_file(pieces: list[bytes | memoryview]) -> bytes:
    """A .blocks file of the bytes of ``pieces`` one after the other: BLOCKS_HEADER (the block
    size, BLOCK_BYTES), then the SHA-256 digest (DIGEST_BYTES) of every block of them in order,
    the last one as long as what is left."""
    digests, digest, filled = bytearray(BLOCKS_HEADER.pack(BLOCK_BYTES)), None, 0
    for piece in pieces:
        view = memoryview(piece).cast("B")
        at = 0
        while at < len(view):
            if digest is None:
                digest, filled = hashlib.sha256(), 0
            take = min(BLOCK_BYTES - filled, len(view) - at)
            digest.update(view[at:at + take])
            filled, at = filled + take, at + take
            if filled == BLOCK_BYTES:
                digests += digest.digest()
                digest = None
    if digest is not None:
        digests += digest.digest()
    return bytes(digests)


def write_tombstones(root: Path, name: str, removed: pa.Table) -> dict:
    """Write the removed documents (columns segment: string, row: int64) as
    tombstones/<name>.parquet (temporary name, fsync, rename); returns the manifest's
    tombstones entry (not yet committed)."""
    parent = root / "tombstones"
    parent.mkdir(exist_ok=True)
    temporary = parent / f"{TEMPORARY}{name}.parquet"
    pq.write_table(removed, temporary)
    fsync_path(temporary)
    final = parent / f"{name}.parquet"
    os.replace(temporary, final)
    fsync_path(parent)
    return {"name": final.name, "sha256": content_digest(final)}


def collect_garbage(root: Path, manifest: Manifest) -> list[Path]:
    """Remove what no committed manifest names: temporary files and directories of killed
    writers, segments and tombstone files replaced by a later commit. Only the writer (who
    holds the lock) calls this. Returns what was removed."""
    live_segments = {s.name for s in manifest.segments}
    live_tombstones = {manifest.tombstones["name"]} if manifest.tombstones else set()
    removed = []
    candidates = [p for p in root.iterdir() if p.name.startswith(TEMPORARY)]
    for folder, live in (("segments", live_segments), ("tombstones", live_tombstones)):
        if (root / folder).is_dir():
            candidates += [p for p in (root / folder).iterdir() if p.name not in live]
    for path in candidates:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        removed.append(path)
    return removed


@contextmanager
def writer_lock(root: Path, wait: bool = False, outcome: str = UNCHANGED) -> Iterator[None]:
    """Hold the index's writer lock (locks.exclusive_lock on INDEX/writer.lock) for the block.
    A second writer is refused at once with a ParameterError naming the holder (or waits, with
    ``wait``). The lock goes with the process, so a killed writer never leaves the index
    locked. outcome: what a failure to take it leaves, for the message (changing)."""
    def refused(holder: str) -> Exception:
        return ParameterError(f"{root}: the index is being changed by {holder}; try again when it is done")

    with ExitStack() as held:
        try:
            held.enter_context(exclusive_lock(root / LOCK, refused, wait))
        except IsADirectoryError:
            # No writer holds a directory: it is safe to remove.
            raise DamagedIndexError(f"{root / LOCK}: a directory where the index has its lock file; remove it, "
                                    "then run the command again") from None
        except OSError as error:  # (a full disk, no permission, no locks on this file system)
            raise index_os_error(root, error, writing=True, outcome=outcome) from None
        yield


def interrupted_create(root: Path) -> bool:
    """Whether ``root`` holds what an ``index create`` stopped before its commit leaves, and
    nothing else: no manifest.json, only the writer's lock file and temporary manifests (at
    least one of them)."""
    try:
        entries = list(root.iterdir())
    except OSError:
        return False
    return bool(entries) and all(
        entry.is_file() and not entry.is_symlink()
        and (entry.name == LOCK or entry.name.startswith(TEMPORARY) and entry.name.endswith(f"-{MANIFEST}"))
        for entry in entries)


@contextmanager
def changing(root: Path, outcome: str = UNCHANGED) -> Iterator[None]:
    """A block of the writer that holds the lock of the index at ``root``, changing it: an
    OSError it meets (a full disk, no permission, a file of the index of the wrong kind) becomes
    one line naming the path, what is wrong and ``outcome``, what the failure leaves
    (index_os_error). What the block wrote and no committed manifest names is removed first, as
    the next writer would (collect_garbage): on a full disk it holds the room the next command
    needs."""
    try:
        yield
    except OSError as error:
        remove_uncommitted(root)
        raise index_os_error(root, error, writing=True, outcome=outcome) from None


def remove_uncommitted(root: Path) -> None:
    """After a writer's failure: what no manifest committed now names is removed
    (collect_garbage against the manifest read again, whether or not the writer got as far as
    its commit); where that fails too, it is the next writer's to remove."""
    try:
        collect_garbage(root, read_manifest(root))
    except (GpudedupError, OSError):
        pass


def index_os_error(root: Path, error: OSError, writing: bool, outcome: str = UNCHANGED) -> GpudedupError:
    """The one-line error for an OSError met on the files of the index at ``root``:
    DamagedIndexError where one of them is of the wrong kind (a file where a segment's
    directory should be, a directory where a file should be); otherwise, writing, an
    OutputError (a full disk, no permission) ending with ``outcome``, what the failure leaves;
    reading, an InputError naming the file."""
    kind = wrong_kind(error)
    if kind is not None:
        return DamagedIndexError(f"{kind}; the index is damaged")
    where = f" at {os.fsdecode(error.filename)}" if error.filename is not None else ""
    if writing:
        return OutputError(f"{root}: cannot change the index ({os_reason(error)}{where}); {outcome}")
    return InputError(f"{root}: cannot read the index ({os_reason(error)}{where})")


def wrong_kind(error: OSError) -> Optional[str]:
    """The path an OSError found of the wrong kind, and which, in words ("P: a file where the
    index has a directory"); None where the error is of another sort. A path under a file
    (NotADirectoryError, or mkdir's FileExistsError) names the file."""
    if isinstance(error, IsADirectoryError) and error.filename is not None:
        return f"{os.fsdecode(error.filename)}: a directory where the index has a file"
    if isinstance(error, (NotADirectoryError, FileExistsError)):
        for name in (error.filename, error.filename2):
            step = None if name is None else file_on(Path(os.fsdecode(name)))
            if step is not None:
                return f"{step}: a file where the index has a directory"
    return None


def file_on(path: Path) -> Optional[Path]:
    """The first of ``path``'s folders, from the root, or ``path`` itself, that exists and is
    not a directory (a file where a directory would have to be); None where there is none."""
    return next((step for step in [*reversed(path.parents), path] if step.exists() and not step.is_dir()), None)


# How an index's info counts the documents of adds given no tag.
UNTAGGED = "(untagged)"


def check_tag(tag) -> None:
    """ParameterError unless ``tag`` (an add's, a remove's) is None or a string that is not
    empty and not UNTAGGED, the name info() gives the adds without one."""
    if tag is not None and not isinstance(tag, str):
        raise ParameterError(f"tag= must be a string (or None); got {tag!r}")
    if tag in ("", UNTAGGED):
        raise ParameterError(f"tag= {tag!r} is not a tag: the index's info counts the documents added without one "
                             f"as {UNTAGGED!r}; name a tag")
    if tag is not None and not_utf8(tag) is not None:  # (a shell's bytes of another encoding)
        raise ParameterError(f"tag= {readable(tag)!r} is not valid UTF-8, in which the index stores its tags; "
                             "name a tag in UTF-8")
