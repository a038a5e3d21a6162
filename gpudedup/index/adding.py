"""The new documents of an ``Index.add`` as a segment of the index: written on a thread of its
own while the run's outputs are written (segment_written_meanwhile), committed only after them
(commit_new_segment), so that an add never leaves an index that holds documents whose results
were not written. Both writes are mostly file I/O and SHA-256, which release the GIL: side by
side they take about the longer of the two rather than their sum (docs/performance.md)."""

from __future__ import annotations

import dataclasses
import uuid
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pyarrow as pa

from ..errors import GpudedupError
from ..interrupts import note_index
from ..io.commit import signals_held
from ..params import DedupParams
from ..stages import Progress
from .against import AgainstStore
from .files import Manifest, SegmentEntry, collect_garbage, read_manifest, write_manifest, write_segment
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
                      tag: Optional[str], rows: np.ndarray, pointers: Optional[SourcePointers]) -> Optional[NewSegment]:
    """Write the kept new documents that have shingles (``rows``: int64 (k,) ascending, rows of
    the run's store) as a segment of the index at ``root``, uncommitted; ``pointers``: where they
    came from (verification "source"). None where there are none."""
    inner = store.inner
    if rows.shape[0] == 0:
        return None
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
    arrays = segment_arrays(ids, signatures, inner.lengths[rows], material, params)
    generation = manifest.generation + 1
    name = f"seg-{generation:06d}-{uuid.uuid4().hex[:8]}"
    entry, stamps = write_segment(root, name, table, arrays, sources)
    return NewSegment(entry, stamps, {**manifest.parameters, "id_type": id_type}, generation)


@contextmanager
def segment_written_meanwhile(root: Path, manifest: Manifest, params: DedupParams, store: AgainstStore,
                              tag: Optional[str], rows: np.ndarray,
                              pointers: Optional[SourcePointers]) -> Iterator[Future]:
    """write_new_segment on a thread of its own while the block runs (the future of its
    NewSegment); where the block fails, what the thread wrote and no committed manifest names is
    removed once it is done, as the next writer would remove it (files.collect_garbage). (The
    manifest read again: a signal held through the commit is raised after it, and the segment
    it committed stays.)"""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="index-segment") as background:
        segment = background.submit(write_new_segment, root, manifest, params, store, tag, rows, pointers)
        try:
            yield segment
        except BaseException:
            wait([segment])
            with suppress(GpudedupError, OSError):  # (left to the next writer, then)
                collect_garbage(root, read_manifest(root))
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
