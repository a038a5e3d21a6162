"""Store: new documents (in memory) together with the indexed documents they may be
near-duplicates of, so that the engine's one stage sequence (engine/job.py) deduplicates new
data against everything kept before.

Rows: 0 .. k-1 are the indexed documents the probe matched (IndexReader.probe: those sharing a
band key with a new document), in index order; k .. k+n-1 are the new documents in input order.
The first k rows are ``pinned``: never removed, never paired with each other. The job over
these rows is the batch job over (every indexed document, then the new data) restricted to
what can involve a new document, so its cost grows with the new data and its matches, not with
the size of the index.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
import scipy.sparse

from ..backends import Backend
from ..engine.job import Executor
from ..engine.memory import MemoryStore
from ..hashing import Permutations
from ..lsh import Banding, to_side
from ..memory import release_unused_memory
from ..report import InputSummary
from ..shingling import ShingleSpec
from ..stages import Progress, StageLog
from ..verify import pair_jaccard
from .reader import IndexReader, Matched


class IndexStore:
    """The matched indexed documents, then the new documents of ``inner`` (see the module)."""

    def __init__(self, inner: MemoryStore, reader: IndexReader, backend: Backend, window: int):
        self.inner, self.reader, self.backend, self.window = inner, reader, backend, window
        self.copy_batch_cost = inner.copy_batch_cost
        self.work_dir: Optional[str] = None
        self.pinned = 0
        self.matched: Optional[Matched] = None
        self.new_signatures: Optional[np.ndarray] = None  # kept for the commit (index add)
        self.signatures: Optional[np.ndarray] = None

    def sign(self, spec: ShingleSpec, banding: Banding, permutations: Permutations, executor: Executor,
             log: StageLog, progress: Progress) -> None:
        inner, backend = self.inner, self.backend
        inner.sign(spec, banding, permutations, executor, log, progress)
        with log.stage("index_probe"):
            segment, row = self.reader.probe(backend.to_host(inner.keys), self.window)
            matched = self.matched = self.reader.gather(segment, row)
        k = matched.count
        self.pinned = k
        self.documents = k + inner.documents
        self.active = np.concatenate([np.arange(k, dtype=np.int64), inner.active + k])
        self.lengths = np.concatenate([matched.lengths, inner.lengths])
        self.new_signatures = inner.signatures
        self.signatures = np.concatenate([matched.signatures, inner.signatures])
        # The indexed documents' band keys are those of their stored signatures.
        old_keys = backend.band_keys(to_side(matched.signatures, backend.xp), banding)
        self.keys = backend.xp.concatenate([old_keys, inner.keys])
        inner.keys = None

    def row_hashes(self) -> None:
        return None

    def band_keys(self, in_lsh: np.ndarray):
        keys, self.keys = self.keys, None
        return keys if in_lsh.all() else keys[to_side(in_lsh, self.backend.xp)]

    def drop_signatures(self) -> None:
        self.signatures = None  # (new_signatures stays: index add commits the kept ones)
        release_unused_memory()

    def cached(self, stage: str, compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return compute()

    def document_sets(self, docs: np.ndarray) -> scipy.sparse.csr_matrix:
        """The shingle sets of rows ``docs`` (int64, ascending): stored ones for the indexed
        rows, shingled again for the new ones."""
        assert self.matched is not None
        k = self.pinned
        old = docs[docs < k]
        old_sets = self.reader.sets(self.matched.segment[old], self.matched.row[old])
        new_sets = self.inner.document_sets(docs[docs >= k] - k, Progress())
        return scipy.sparse.vstack([old_sets, new_sets], format="csr")

    def exact_jaccard(self, name: str, first: np.ndarray, second: np.ndarray, executor: Executor,
                      progress: Progress) -> np.ndarray:
        docs = np.unique(np.concatenate([first, second]))
        sets = self.document_sets(docs)
        sets.has_sorted_indices = True  # each part's rows are sorted and distinct
        return pair_jaccard(sets, np.searchsorted(docs, first), np.searchsorted(docs, second))

    def input_summary(self, empty_documents: int) -> InputSummary:
        return self.inner.input_summary(empty_documents)
