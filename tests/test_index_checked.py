"""An index file checked by the blocks a reader asks for (gpudedup.index.checked), against a
brute-force rule: a request passes exactly when no damaged byte lies in a block it touches, or,
where it asks for most of the file, when the file is whole; and one reader's arrays mapped by
two threads at once."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from gpudedup.errors import DamagedIndexError
from gpudedup.index.checked import OpenedFile
from gpudedup.index.files import BLOCK_BYTES, blocks_file

BLOCKS = 200  # enough that a request for a few of them is checked block by block, not whole


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


def test_a_request_of_many_blocks_checks_every_block_it_touches(tmp_path):
    opened = made(tmp_path, damaged_block=150)
    opened.check_bytes(*asked(0, 129))  # 130 of 201 blocks: block by block
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


def test_two_threads_first_reading_one_reader_both_get_the_arrays(tmp_path):
    """Threads of one reader may map the same arrays at once (a service's queries): each reads
    a file's header by position, so neither moves the other's reading."""
    import threading

    import gpudedup
    from gpudedup.index.reader import IndexReader

    words = [f"w{n}" for n in range(400)]
    rng = np.random.default_rng(3)
    index = gpudedup.Index.create(tmp_path / "idx", threshold=0.8, shingle="word", ngram=2)
    index.add([" ".join(rng.choice(words, 60)) for _ in range(300)], progress=False)
    rows = np.array([0, 57, 200, 299])
    failures: list[BaseException] = []

    def gather(reader: IndexReader, start: threading.Barrier) -> None:
        start.wait()
        try:
            reader.gather(np.zeros(rows.shape[0], np.int64), rows)
        except BaseException as error:  # (any error of either thread fails the test)
            failures.append(error)

    for _ in range(60):
        reader, start = IndexReader(tmp_path / "idx"), threading.Barrier(2)
        threads = [threading.Thread(target=gather, args=(reader, start)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert failures == []
