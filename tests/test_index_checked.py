"""An index file checked by the blocks a reader asks for (gpudedup.index.checked), against a
brute-force rule: a request passes exactly when no damaged byte lies in a block it touches, or,
where it asks for most of the file, when the file is whole."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from gpudedup.errors import DamagedIndexError
from gpudedup.index.checked import OpenedFile
from gpudedup.index.files import BLOCK_BYTES, blocks_file

BLOCKS = 200  # more than one read's worth of blocks (a read takes at most 64)


def made(tmp_path: Path, damaged_block: int) -> OpenedFile:
    """A file of BLOCKS blocks and a last partial one, its .blocks file made from its bytes,
    then one byte flipped in ``damaged_block``."""
    data = bytearray(np.random.default_rng(7).integers(0, 256, BLOCKS * BLOCK_BYTES + 100, np.uint8).tobytes())
    path, blocks = tmp_path / "data.npy", tmp_path / "data.blocks"
    whole = hashlib.sha256(data).hexdigest()
    blocks.write_bytes(blocks_file([bytes(data)]))
    data[damaged_block * BLOCK_BYTES + 5] ^= 0x01
    path.write_bytes(bytes(data))
    return OpenedFile(path, whole, OpenedFile(blocks, hashlib.sha256(blocks.read_bytes()).hexdigest()))


def asked(first_block: int, last_block: int) -> tuple[np.ndarray, np.ndarray]:
    """The bytes of blocks first_block .. last_block as one range."""
    return np.array([first_block * BLOCK_BYTES], np.int64), np.array([(last_block + 1) * BLOCK_BYTES], np.int64)


def test_a_request_across_several_reads_checks_every_block_it_touches(tmp_path):
    opened = made(tmp_path, damaged_block=150)
    opened.check_bytes(*asked(0, 129))  # 130 of 201 blocks: block by block, three reads
    assert not opened.checked and opened.verified is not None and opened.verified[:130].all()
    with pytest.raises(DamagedIndexError, match="data.npy"):
        opened.check_bytes(*asked(140, 151))


def test_blocks_checked_before_do_not_make_a_small_request_hash_the_whole_file(tmp_path):
    opened = made(tmp_path, damaged_block=199)
    for first in (0, 70):  # 140 of 201 blocks, in two requests of less than two thirds each
        opened.check_bytes(*asked(first, first + 69))
    opened.check_bytes(*asked(150, 150))  # one more: its block alone, not the whole (damaged) file
    with pytest.raises(DamagedIndexError, match="data.npy"):
        opened.check_bytes(*asked(0, 199))  # most of the file at once: hashed whole


def test_block_digests_that_do_not_cover_the_file_are_damage(tmp_path):
    opened = made(tmp_path, damaged_block=0)
    with open(opened.path, "ab") as grown:
        grown.write(b"\0" * BLOCK_BYTES)
    with pytest.raises(DamagedIndexError, match="data.blocks"):
        opened.check_bytes(*asked(3, 3))
