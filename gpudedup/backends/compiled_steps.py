"""The CPU backend's compiled steps: shingling and MinHash signatures over one build of the loops.

The loops (``normalize_batch``, ``char_hashes``, ``word_hashes``, ``sort_unique_rows``,
``minhash_rows``) exist in two builds with the same arguments and the same results: the C
extension compiled at install (``_cpu_kernels``, from kernels/cpu_kernels.c) and numba's
(cpu_kernels.py, whose docstrings give each loop's arrays). ``CompiledSteps`` runs the steps
over either one and gives, bit for bit, what the numpy reference gives
(shingling.utf8_shingle_hashes, shingling.unique_per_row, minhash.minhash_signatures; tests/
test_cpu_kernels.py compares them); the definitions are docs/hash-spec.md's. Per batch:

1. the Unicode form, if the spec asks for one: Arrow's utf8_normalize on the whole batch
   (normalize.unicode_form_utf8, the same call the numpy path makes);
2. ``normalize_batch``: the normalised code points and each document's word count;
3. ``char_hashes`` / ``word_hashes``: each document's shingle hashes in text order;
4. for sets, ``sort_unique_rows``: each document's hashes sorted and de-duplicated in place.

Token shingles skip steps 1 and 2: their units are the ids themselves (shingling.shingle_units).
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from ..core.hashing import EMPTY_SIGNATURE_VALUE, MASK64, POLY_BASE, POLY_OFFSET, Permutations
from ..core.normalize import host_tables, strip_flags, unicode_form_utf8
from ..core.ragged import offsets_from_counts
from ..core.shingling import ShingleBatch, ShingleSpec, ngram_counts, shingle_units


class CompiledSteps:
    """The backend's compiled steps over ``loops`` (the C extension module or cpu_kernels);
    ``name`` says which in the report ("C", "numba 0.61.0")."""

    def __init__(self, loops: ModuleType, name: str):
        self.loops = loops
        self.name = name

    def shingle_hashes(self, data: np.ndarray, offsets: np.ndarray, spec: ShingleSpec) -> ShingleBatch:
        """shingling.utf8_shingle_hashes(data, offsets, spec), bit for bit: every shingle's hash
        in text order with repeats.

        data: UTF-8 bytes uint8 (B,) of valid text, or for token shingles the ids (any unsigned
        integer type up to 32 bits); offsets: int64 (n_docs + 1,) from 0. Host arrays in and out.
        """
        offsets = np.asarray(offsets, dtype=np.int64)
        if spec.kind == "word":
            units, unit_offsets, word_counts = self.normalize(data, offsets, spec)
            shingle_offsets = offsets_from_counts(ngram_counts(word_counts, spec.n))
            hashes = np.empty(int(shingle_offsets[-1]), np.uint64)
            self.loops.word_hashes(units, as_indices(unit_offsets), as_indices(word_counts), np.uint64(spec.n),
                                   as_indices(shingle_offsets), hashes)
            return ShingleBatch(shingle_offsets, hashes)
        if spec.kind == "token":
            units, unit_offsets = shingle_units(data, offsets, spec)
        else:
            units, unit_offsets, _ = self.normalize(data, offsets, spec)
        shingle_offsets = offsets_from_counts(ngram_counts(np.diff(unit_offsets), spec.n))
        hashes = np.empty(int(shingle_offsets[-1]), np.uint64)
        base_power_n = pow(POLY_BASE, spec.n, MASK64 + 1)
        self.loops.char_hashes(units, as_indices(unit_offsets), np.uint64(spec.n), np.uint64(base_power_n),
                               np.uint64(POLY_OFFSET * base_power_n & MASK64), as_indices(shingle_offsets), hashes)
        return ShingleBatch(shingle_offsets, hashes)

    def shingle_sets(self, data: np.ndarray, offsets: np.ndarray, spec: ShingleSpec) -> ShingleBatch:
        """shingling.unique_per_row(shingling.utf8_shingle_hashes(data, offsets, spec)), bit for
        bit: each document's hashes sorted ascending without repeats. Arguments as for
        shingle_hashes."""
        batch = self.shingle_hashes(data, offsets, spec)
        set_offsets = np.empty_like(batch.offsets)
        total = int(self.loops.sort_unique_rows(as_indices(batch.offsets), batch.hashes, as_indices(set_offsets)))
        # The packed sets fill the front of the hash array; keep only them, not the whole array.
        return ShingleBatch(set_offsets, batch.hashes[:total].copy())

    def signatures(self, shingles: ShingleBatch, permutations: Permutations) -> np.ndarray:
        """minhash.minhash_signatures(shingles, permutations), bit for bit: uint32 (n_docs, K),
        host; EMPTY_SIGNATURE_VALUE throughout the rows of documents without shingles."""
        out = np.full((shingles.n_docs, permutations.count), EMPTY_SIGNATURE_VALUE, np.uint32)
        self.loops.minhash_rows(as_indices(shingles.offsets), shingles.hashes.astype(np.uint32),  # the low 32 bits
                                np.ascontiguousarray(permutations.a, np.uint32),
                                np.ascontiguousarray(permutations.b, np.uint32), out)
        return out

    def normalize(self, data: np.ndarray, offsets: np.ndarray,
                  spec: ShingleSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The normalised code points of a batch of UTF-8 texts as ``spec`` asks
        (normalize.normalize_utf8, bit for bit), and each document's word count.

        data: uint8 (B,) valid UTF-8; offsets: int64 (n_docs + 1,) byte offsets from 0. Returns
        (units uint32 (M,), unit_offsets int64 (n_docs + 1,), word_counts int64 (n_docs,)), host.
        """
        if spec.unicode is not None:
            data, offsets = unicode_form_utf8(data, offsets, spec.unicode)
        tables = host_tables()
        units = np.empty(data.shape[0], np.uint32)  # at most one code point per byte
        unit_offsets = np.empty(offsets.shape[0], np.int64)
        word_counts = np.empty(offsets.shape[0] - 1, np.int64)
        self.loops.normalize_batch(np.ascontiguousarray(data, np.uint8), as_indices(offsets), tables.lowercase,
                                   tables.white, tables.category_flags, np.uint8(strip_flags(spec)), units,
                                   as_indices(unit_offsets), as_indices(word_counts))
        return units[:unit_offsets[-1]], unit_offsets, word_counts


def as_indices(array: np.ndarray) -> np.ndarray:
    """An int64 array of non-negative values (offsets, counts) as the loops take it: viewed as
    uint64, without a copy where it is contiguous (so what a loop writes through the view lands
    in ``array``: the arrays loops write are all made contiguous, here)."""
    return np.ascontiguousarray(array).view(np.uint64)
