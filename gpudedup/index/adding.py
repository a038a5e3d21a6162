"""The new documents of an ``Index.add`` as a segment of the index: written, then committed
(commit_new_segment) only after the run's outputs, so that an add never leaves an index that
holds documents whose results were not written. Where the run holds the new documents' sets
in memory, the segment is written on a thread of its own while the outputs are written
(new_segment_writer): both writes are then mostly file I/O and SHA-256, which release the GIL,
and side by side they take about the longer of the two rather than their sum. Where the sets
would be made again (a work directory's run, the GPU's), it is written after the outputs, as
the commit's first step, in this thread."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np
import pyarrow as pa

from ..interrupts import note_index
from ..io.commit import signals_held
from ..params import DedupParams
from ..stages import Progress
from .against import AgainstStore
from .files import Manifest, SegmentEntry, remove_uncommitted, write_manifest, write_segment
from .reader import check_id_type, segment_arrays
from .sources import SourcePointers, pointer_arrays


@dataclass(frozen=True)
class NewSegment:
    """A segment written under segments/ that no manifest names yet: its manifest entry, each
    file's stamp once written (files.write_segment), and the manifest's parameters and
    generation that commit it."""

    entry: SegmentEntry
    stamps: dict[str, Optional[tuple]]
    parameters: dict
    generation: int


def write_new_segment(root: Path, manifest: Manifest, params: DedupParams, store: AgainstStore,
                      tag: Optional[str], rows: np.ndarray, pointers: Optional[SourcePointers],
                      go_on: Callable[[], None] = lambda: None) -> Optional[NewSegment]:
    """Write the kept new documents that have shingles (``rows``: int64 (k,) ascending, rows of
    the run's store) as a segment of the index at ``root``, uncommitted; ``pointers``: where they
    came from (verification "source"). None where there are none. ``go_on`` is called between
    the steps (files.write_segment's too), and raises to stop them."""
    inner = store.inner
    if rows.shape[0] == 0:
        return None
    go_on()
    signatures = np.ascontiguousarray(inner.signature_rows(rows))
    sources = None
    if pointers is not None:
        sources, material = pointer_arrays(pointers)
    else:
        sets = inner.document_sets(rows, Progress(), name="index-commit")
        material = {"set_offsets": sets.indptr.astype(np.int64, copy=False),
                    "set_columns": sets.indices.astype(np.int64, copy=False)}
    ids = inner.ids.take(pa.array(rows))
    id_type = check_id_type(manifest, ids)
    ids = ids.cast(pa.int64() if id_type == "int64" else pa.large_string())
    table = pa.table({"id": ids, "tag": pa.array([tag] * len(ids), pa.large_string())})
    go_on()
    arrays = segment_arrays(ids, signatures, inner.lengths[rows], material, params)
    generation = manifest.generation + 1
    name = f"seg-{generation:06d}-{uuid.uuid4().hex[:8]}"
    entry, stamps = write_segment(root, name, table, arrays, sources, go_on)
    return NewSegment(entry, stamps, {**manifest.parameters, "id_type": id_type}, generation)


class Abandoned(Exception):
    """A segment's writer on a thread of its own, told to stop (new_segment_writer)."""


@contextmanager
def new_segment_writer(root: Path, manifest: Manifest, params: DedupParams, store: AgainstStore,
                       tag: Optional[str], rows: np.ndarray, pointers: Optional[SourcePointers],
                       alongside: bool) -> Iterator[Callable[[], Optional[NewSegment]]]:
    """A function that gives the new segment (write_new_segment's), for the commit to call
    once the block has written the outputs. With ``alongside`` and the sets held in memory
    (MemoryStore.sets_held), the segment is written on a thread of its own while the block
    runs, and the function waits for it; where the block fails (an error, a signal), that
    writer is told to stop at its next step, and what it wrote and no committed manifest names
    is removed once it has stopped (files.remove_uncommitted: a signal held through the commit
    is raised after it, and the segment it committed stays).
    Otherwise the function writes the segment when called, in this thread."""
    if not (alongside and store.inner.sets_held):
        yield lambda: write_new_segment(root, manifest, params, store, tag, rows, pointers)
        return
    stop = threading.Event()

    def go_on() -> None:
        if stop.is_set():
            raise Abandoned()

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="index-segment") as background:
        segment = background.submit(write_new_segment, root, manifest, params, store, tag, rows, pointers, go_on)
        try:
            yield segment.result
        except BaseException:
            stop.set()
            wait([segment])
            remove_uncommitted(root)
            raise


def commit_new_segment(root: Path, manifest: Manifest, new: Optional[NewSegment]) -> None:
    """Commit the segment ``new`` (None: nothing to add) over ``manifest``."""
    if new is None:
        return
    with signals_held():  # (an interrupt's line says which side of the commit it came)
        write_manifest(root, dataclasses.replace(manifest, parameters=new.parameters,
                                                 segments=manifest.segments + (new.entry,),
                                                 generation=new.generation))
        note_index(f"the documents were added to the index {root} (generation {new.generation})")
