"""An index file checked against its SHA-256 in the manifest before its bytes are used
(OpenedFile): whole, or for a file read by document (files.BLOCKED_ARRAYS) by the blocks that
hold what a run reads, so that an add or a query that reads a few documents of a large index
hashes those, not the index."""

from __future__ import annotations

import hashlib
import io
import mmap
import os
from functools import cached_property
from pathlib import Path
from typing import Optional

import numpy as np

from ..core.lsh import sorted_unique
from ..core.ragged import ragged_arange
from ..errors import DamagedIndexError
from .files import BLOCKS_HEADER, DIGEST_BYTES, file_stamp

# The most a .npy header of ours takes (files.write_npy: format 1.0, one short line).
NPY_HEADER_BYTES = 4096


class OpenedFile:
    """One index file, open from the start, checked against its SHA-256 on first use: whole
    (check), or where ``blocks`` (its .blocks file: files.BLOCKED_ARRAYS) is given, by the
    blocks that hold the bytes a reader asks for (check_bytes)."""

    def __init__(self, path: Path, expected: str, blocks: Optional["OpenedFile"] = None):
        self.path, self.expected, self.blocks = path, expected, blocks
        self.handle = open(path, "rb")  # an OSError (a file gone, a directory): the reader's caller decides
        self.checked = False
        self.stamp: Optional[tuple] = None  # the file's (inode, size, mtime) when it was checked
        self.digests: Optional[bytes] = None  # each block's SHA-256, as its .blocks file holds them
        self.block_bytes = 0  # the blocks' size, as the .blocks file says
        self.verified: Optional[np.ndarray] = None  # bool (blocks,): the blocks checked so far

    def still_as_checked(self) -> bool:
        """Unchecked, or checked (whole or some blocks) and, by inode, size and modification
        time, the same file now."""
        return self.stamp is None or self.stamp == file_stamp(self.path)

    def check(self) -> None:
        if self.checked:
            return
        stamp = file_stamp(self.path)
        digest, offset, descriptor = hashlib.sha256(), 0, self.handle.fileno()
        while True:
            block = os.pread(descriptor, 1 << 20, offset)
            if not block:
                break
            digest.update(block)
            offset += len(block)
        if digest.hexdigest() != self.expected:
            raise self.damaged()
        self.checked, self.stamp = True, stamp

    def check_bytes(self, starts: np.ndarray, stops: np.ndarray) -> None:
        """The bytes starts[i] .. stops[i]-1 (int64 (k,) each) checked: the blocks that hold
        them, each once, against its digest; a file without blocks whole (check)."""
        if self.checked:
            return
        if self.blocks is None:
            self.check()
            return
        if self.verified is None:
            self.stamp = file_stamp(self.path)
            self.block_bytes, self.digests = block_digests(self.blocks, os.fstat(self.handle.fileno()).st_size)
            self.verified = np.zeros(len(self.digests) // DIGEST_BYTES, bool)
        assert self.digests is not None
        size = self.block_bytes
        wanted = stops > starts
        first, last = starts[wanted] // size, (stops[wanted] - 1) // size
        run, within = ragged_arange(last - first + 1)
        numbers = sorted_unique(first[run] + within)
        numbers = numbers[~self.verified[numbers]]
        if numbers.shape[0] == 0:
            return
        if 3 * numbers.shape[0] > 2 * self.verified.shape[0]:
            # Most of the file asked for: hashed whole, as one stream, which costs about two
            # thirds of what block by block does (a call and a digest per block).
            self.check()
            return
        # Hashed where they are mapped (no copy; the pages it reads are those the arrays' reads
        # find next: mapped_npy). A block past the file's end is short there, and fails.
        with memoryview(self.mapped) as data:
            for number in numbers.tolist():
                expected = self.digests[number * DIGEST_BYTES:(number + 1) * DIGEST_BYTES]
                if hashlib.sha256(data[number * size:(number + 1) * size]).digest() != expected:
                    raise self.damaged()
        self.verified[numbers] = True

    @cached_property
    def mapped(self) -> mmap.mmap:
        """The whole file, mapped read-only: the blocks check_bytes hashes, and the arrays of
        mapped_npy, read from one mapping. (ValueError where the file is empty.)"""
        return mmap.mmap(self.handle.fileno(), 0, access=mmap.ACCESS_READ)

    def damaged(self) -> DamagedIndexError:
        return DamagedIndexError(f"{self.path}: its checksum does not match the manifest's (truncated or corrupt)")


def block_digests(blocks: OpenedFile, size: int) -> tuple[int, bytes]:
    """(block size, digests) of the .blocks file ``blocks`` (checked whole) of a file of
    ``size`` bytes; DamagedIndexError where they do not cover it exactly."""
    blocks.check()
    data = os.pread(blocks.handle.fileno(), os.fstat(blocks.handle.fileno()).st_size, 0)
    if len(data) >= BLOCKS_HEADER.size:
        block_bytes, = BLOCKS_HEADER.unpack_from(data)
        digests = data[BLOCKS_HEADER.size:]
        if block_bytes > 0 and len(digests) == -(-size // block_bytes) * DIGEST_BYTES:
            return block_bytes, digests
    raise DamagedIndexError(f"{blocks.path}: its block digests do not cover {blocks.path.with_suffix('.npy')} "
                            "(truncated or corrupt)")


def mapped_npy(opened: OpenedFile) -> tuple[np.ndarray, int]:
    """The array of the .npy file ``opened``, memory-mapped, and where its data starts (after
    the header), the header checked first where the file is checked by blocks."""
    try:
        # Read by position, not through the handle's offset: threads of one reader may map two
        # arrays at once.
        head = io.BytesIO(os.pread(opened.handle.fileno(), NPY_HEADER_BYTES, 0))
        version = np.lib.format.read_magic(head)
        header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                  else np.lib.format.read_array_header_2_0)
        shape, fortran, dtype = header(head)
        start = head.tell()
        if not opened.checked:  # (block 0 holds the header's length: one it misread fails)
            opened.check_bytes(np.zeros(1, np.int64), np.full(1, start, np.int64))
        # A plain ndarray over the file's mapping (which it keeps alive): indexing a np.memmap
        # runs Python code of its own on every call, and the probe makes many.
        count = int(np.prod(shape))
        return (np.frombuffer(opened.mapped, dtype, count, start).reshape(shape, order="F" if fortran else "C")
                if count else np.zeros(shape, dtype)), start
    except ValueError as error:
        raise DamagedIndexError(f"{opened.path}: not a readable array ({error})") from None
