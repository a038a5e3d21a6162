"""What a run knows of each input file as it read it, and the check that the file is still so
when the run writes its results (a file changed between the two is refused, nothing written).

A run decides on the rows it read; the kept rows it writes are copied from the files again
where it does not hold them (the lines of a JSONL file written as JSONL; every row of a staged
or Dask run). A file rewritten in between would give kept rows that were never deduplicated,
or that the clusters name as removed. So each file's ``FileStamp`` is taken just before it is
read: its size and modification time (``storage.size_and_time``, as ``--resume`` compares
them), and, where the file's bytes are read again at write time (a JSONL file's kept lines
copied; every file of a staged or Dask run, whose kept rows are read again), a SHA-256 of the
bytes read, since a local file's modification time can be set back (``os.utime``, ``touch
-r``, ``cp -p``, ``rsync -t``). Object stores replace an object whole with a modification
time no client sets, so there the digest is taken only where the store keeps no time at all
(http). The digest is of the bytes as stored (a gzipped file's compressed bytes): one read of
the file, at the speed of the disk and SHA-256 (about 1 GB/s), beside a read that parses it.
"""

from __future__ import annotations

import hashlib
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Optional

from ..errors import InputError
from . import storage
from .pieces import Piece, PieceGone, byte_ranges
from .storage import Location, Remote


DIGEST_BLOCK = 1 << 22  # bytes read at a time for the digest


@dataclass(frozen=True)
class FileStamp:
    """An input file as a run read it: size in bytes, modification time in ns (0 where its file
    system keeps none), and the SHA-256 (hex) of the bytes read (the whole file, or those
    that hold a piece of it: pieces.byte_ranges), or None where its bytes are not checked."""

    size: int
    mtime_ns: int
    digest: Optional[str] = None

    def as_list(self) -> list:
        """The stamp as JSON holds it (a staged run's shard info)."""
        return [self.size, self.mtime_ns, self.digest]

    @classmethod
    def of_list(cls, values: Optional[list]) -> Optional["FileStamp"]:
        """The stamp of as_list, or None for None (a shard that read nothing)."""
        return None if values is None else cls(int(values[0]), int(values[1]), values[2])


def stamp_of(location: Location, piece: Optional[Piece] = None, digest: bool = False) -> FileStamp:
    """The stamp of a file about to be read (or of the part ``piece`` of it a shard reads);
    digest: whether its bytes are read again at write time, so that they are to be checked
    then (taken where the file's modification time may be set back or is not kept: the
    module's docstring). OSError where the file cannot be found or read."""
    size, mtime_ns = storage.size_and_time(location)
    wanted = digest and (not isinstance(location, Remote) or mtime_ns == 0)
    return FileStamp(size, mtime_ns, content_digest(location, piece) if wanted else None)


def read_stamp(location: Location, format: str, piece: Optional[Piece] = None,
               read_again: bool = False) -> Optional[FileStamp]:
    """The stamp of a file of ``format`` (or of the part ``piece`` of it a shard reads) about
    to be read: with the digest of its bytes where they are read again at write time, that is
    for JSONL (its kept lines are copied) and wherever ``read_again`` (a staged run's shard)
    (stamp_of). None where the file cannot be looked at: the read that follows says what is
    wrong with it."""
    try:
        return stamp_of(location, piece, digest=read_again or format == "jsonl")
    except OSError:
        return None


def content_digest(location: Location, piece: Optional[Piece] = None) -> str:
    """SHA-256 (hex) of a file's bytes as stored, or of the bytes that hold a ``piece`` of it
    (pieces.byte_ranges), read a block at a time (local, or at a URL)."""
    digest = hashlib.sha256()
    # A whole file as a stream: some file systems (http's) read ranges only where the server does.
    if piece is None:
        with storage.open_stream(location) as handle:
            while block := handle.read(DIGEST_BLOCK):
                digest.update(block)
        return digest.hexdigest()
    with storage.open_random(location) as handle:
        for start, stop in byte_ranges(location, piece):
            handle.seek(start)
            while start < stop and (block := handle.read(min(DIGEST_BLOCK, stop - start))):
                digest.update(block)
                start += len(block)
    return digest.hexdigest()


def digest_now(location: Location, piece: Optional[Piece]) -> Optional[str]:
    """content_digest of a file read before, or None where the bytes that hold the piece can no
    longer be found (pieces.PieceGone): it changed."""
    try:
        return content_digest(location, piece)
    except PieceGone:
        return None


def change(location: Location, stamp: FileStamp, piece: Optional[Piece] = None,
           check_bytes: bool = True, digest: Optional[str] = None) -> Optional[str]:
    """How a file now differs from its ``stamp``, as a message's words ("changed since the run
    read it (its size differs)", "removed since the run read it", ...), or None where it does
    not; check_bytes: its bytes too, where the stamp holds their digest; digest: the whole
    file's SHA-256 as the caller just took it, compared rather than read again."""
    try:
        size, mtime_ns = storage.size_and_time(location)
        if (size, mtime_ns) != (stamp.size, stamp.mtime_ns):
            what = {(False, True): "size differs", (True, False): "modification time differs",
                    (False, False): "size and modification time differ"}[(size == stamp.size,
                                                                           mtime_ns == stamp.mtime_ns)]
        elif check_bytes and stamp.digest is not None and (
                digest if digest is not None and piece is None else digest_now(location, piece)) != stamp.digest:
            what = "bytes differ"
        else:
            return None
    except FileNotFoundError:
        return "removed since the run read it"
    except OSError as error:  # (a permission taken away, a lost mount)
        return f"cannot be read again ({error.strerror or error})"
    return f"changed since the run read it (its {what})"


def check_unchanged(location: Location, shown: str, stamp: Optional[FileStamp], piece: Optional[Piece] = None,
                    check_bytes: bool = True, consequence: str = "nothing was written: run again",
                    digest: Optional[str] = None) -> None:
    """Refuse a file that is not as its ``stamp`` says: an InputError naming ``shown`` (the
    file as messages name it), what changed and ``consequence``; a stamp None (a shard that
    read nothing) passes. digest: change's."""
    if stamp is None:
        return
    what = change(location, stamp, piece, check_bytes, digest)
    if what is not None:
        raise InputError(f"{shown}: {what}; {consequence}")


@contextmanager
def unchanged_while(location: Location, shown: str, stamp: Optional[FileStamp], piece: Optional[Piece] = None,
                    consequence: str = "nothing was written: run again") -> Iterator[None]:
    """A block that reads a file again (its kept rows, or lines, copied): the file is checked
    against its ``stamp`` by size and time before the block, and fully (its bytes too, where
    the stamp holds their digest) after it, so that what the block read is what the run read.
    An InputError the block raises about a file that changed (a line gone, a line that is not
    JSON any more) is raised as the change."""
    check_unchanged(location, shown, stamp, piece, check_bytes=False, consequence=consequence)
    try:
        yield
    except InputError:
        check_unchanged(location, shown, stamp, piece, consequence=consequence)
        raise
    check_unchanged(location, shown, stamp, piece, consequence=consequence)
