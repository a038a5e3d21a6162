"""A run against a persistent index (Against): the run's own store wrapped with the indexed
documents its new documents may be near-duplicates of, in memory (index/store.py) or through
a work directory (index/staged.py)."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Optional, Union

from ..backends import Backend
from ..pipeline.memory import MemoryStore
from .reader import IndexReader
from .store import IndexStore

if TYPE_CHECKING:
    from .staged import StagedIndexStore

# The store of a run against an index: the matched indexed documents are its rows 0 .. pinned-1.
AgainstStore = Union[IndexStore, "StagedIndexStore"]


class Against:
    """A run against an index: wraps the run's own store (pipeline/memory.py, pipeline/disk.py) in an
    IndexStore or a StagedIndexStore over one committed state of the index, and keeps it for the
    commit (index add)."""

    def __init__(self, reader: IndexReader, backend: Backend, window: int):
        self.reader, self.backend, self.window = reader, backend, window
        self.store: Optional[AgainstStore] = None

    def wrap(self, store: Any) -> AgainstStore:
        if isinstance(store, MemoryStore):
            self.store = IndexStore(store, self.reader, self.backend, self.window)
        else:  # a work directory's (pipeline/disk.py)
            from .staged import StagedIndexStore  # (start-up: a run in memory loads no work directory's runner)

            self.store = StagedIndexStore(store, self.reader, self.backend, self.window)
        return self.store

    def fingerprint(self) -> dict:
        """What a work directory's kept stages depend on besides the input: this state (its
        generation, and a digest of its manifest, which names its segments: an index made
        again at the same path reaches the same generation with other segments)."""
        manifest = self.reader.manifest
        state = hashlib.sha256(json.dumps(manifest.as_dict(), sort_keys=True).encode("utf-8")).hexdigest()[:16]
        return {"path": str(self.reader.root.absolute()), "generation": manifest.generation, "state": state}
