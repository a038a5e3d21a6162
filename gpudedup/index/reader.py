"""Reading an index at one committed state: which indexed documents share a band key with new
documents (the probe), and their stored signatures, lengths, shingle sets and ids.

Index rows: the live documents in index order (segment by segment, oldest first, each
segment's rows in order), tombstoned ones included (they are skipped where they would match).
A reader opens every file of the manifest it read when it is made, so a writer that removes
files no later manifest names (files.collect_garbage) never pulls them from under it (an open or
memory-mapped file outlives its name on POSIX); each file is checked against its SHA-256 the
first time it is used, through the open file (checked.OpenedFile). The arrays a segment stores
are made here too (segment_arrays), sorted as the probe reads them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional


import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..core.lsh import band_keys, sorted_unique
from ..core.normalize import utf8_buffers
from ..core.ragged import last_of_runs, last_over_parts, ragged_arange
from ..core.shingling import ShingleSpec, span_hashes
from ..core.verify import SetArrays, SetRows, pair_jaccard_at_least, set_arrays, stacked_sets
from ..errors import DamagedIndexError, InputError
from ..params import DedupParams
from ..threads import HOST_THREADS, map_parallel
from .checked import OpenedFile, mapped_npy
from .files import BLOCKS_SUFFIX, Manifest, SegmentEntry, file_stamp, index_os_error, read_manifest
from .sources import SOURCES_FILE, merge_sources, read_sources, rows_sets


@dataclass(frozen=True)
class Matched:
    """Indexed documents a run looks at, in index order (host arrays, k documents).

    segment: int64 (k,) position of each one's segment in the manifest; row: int64 (k,) its row
    in that segment; ids: pa.Array (k,); signatures: uint32 (k, K); lengths: int64 (k,).
    """

    segment: np.ndarray
    row: np.ndarray
    ids: pa.Array
    signatures: np.ndarray
    lengths: np.ndarray

    @property
    def count(self) -> int:
        return int(self.row.shape[0])


class Segment:
    """One live segment's files, opened when the reader is made, memory-mapped and checked on
    first use."""

    def __init__(self, root: Path, entry: SegmentEntry, verification: str = "sets",
                 written: Optional[Mapping[str, Optional[tuple]]] = None):
        """written: the stamps (file_stamp) of this segment's files taken when this process
        wrote them and computed their SHA-256 (files.write_segment); a file whose stamp is
        still the same counts as checked."""
        self.root, self.entry, self.verification = root, entry, verification
        folder = root / "segments" / entry.name
        blocks = {name: OpenedFile(folder / name, digest) for name, digest in entry.files.items()
                  if name.endswith(BLOCKS_SUFFIX)}
        self.files = {name: OpenedFile(folder / name, digest, blocks.get(name.removesuffix(".npy") + BLOCKS_SUFFIX))
                      for name, digest in entry.files.items() if name not in blocks} | blocks
        for name, opened in self.files.items():
            stamp = (written or {}).get(name)
            if stamp is not None and stamp == file_stamp(opened.path):
                opened.checked, opened.stamp = True, stamp
        # Arrow maps the ids now, while the name is there (the map outlives it).
        self._ids_map = pa.memory_map(str(folder / "ids.arrow"))
        self._arrays: dict[str, np.ndarray] = {}
        self._starts: dict[str, int] = {}  # array name -> where its data starts in its file (after the header)
        self._ids: Optional[pa.Table] = None

    def reusable_for(self, entry: SegmentEntry, verification: str) -> bool:
        """Whether a later reader may take this segment over for ``entry``: the same segment
        (names are never written twice), and every file checked so far unchanged since."""
        return (entry == self.entry and verification == self.verification
                and all(opened.still_as_checked() for opened in self.files.values()))

    def array(self, name: str, rows: Optional[np.ndarray] = None) -> np.ndarray:
        """The array ``name``, memory-mapped, its file checked: whole, or where it has block
        digests (files.BLOCKED_ARRAYS) and the caller reads ``rows`` (int64 (k,)) alone, the
        blocks that hold those rows (of set_columns, those rows' sets)."""
        opened = self.files[f"{name}.npy"]
        if rows is None or opened.blocks is None:
            opened.check()
        if name not in self._arrays:
            self._arrays[name], self._starts[name] = mapped_npy(opened)
        if not opened.checked:
            assert rows is not None, "an array read by blocks is given the rows read"
            opened.check_bytes(*self._row_bytes(name, np.asarray(rows, np.int64)))
        return self._arrays[name]

    def _row_bytes(self, name: str, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(starts, stops) int64 (k,): the bytes of the file of ``name`` that hold ``rows``
        (a C-ordered array's rows; set_columns' sets, by set_offsets)."""
        mapped = self._arrays[name]
        if name == "set_columns":
            offsets = self.array("set_offsets")
            first, stop = offsets[rows], offsets[rows + 1]
        else:
            width = int(np.prod(mapped.shape[1:]))
            first, stop = rows * width, (rows + 1) * width
        start = self._starts[name]
        return start + first * mapped.itemsize, start + stop * mapped.itemsize

    def ids(self) -> pa.Table:
        """Columns id and tag of every row (memory-mapped Arrow IPC)."""
        if self._ids is None:
            opened = self.files["ids.arrow"]
            opened.check()
            try:
                self._ids = pa.ipc.open_file(self._ids_map).read_all()
            except pa.ArrowInvalid as error:
                raise DamagedIndexError(f"{opened.path}: not a readable Arrow file ({error})") from None
        return self._ids

    def sources(self) -> list[dict]:
        """sources.json's entries (verification "source"; index/sources.py)."""
        opened = self.files[SOURCES_FILE]
        opened.check()
        return read_sources(opened.handle, opened.path)

    def set_rows(self, rows: np.ndarray, spec: ShingleSpec) -> tuple[SetRows, np.ndarray]:
        """The shingle sets of ``rows`` (int64 (k,)) to read in place: (sets, positions), row
        rows[i]'s set being row positions[i] of sets. Stored sets are the segment's own mapped
        arrays (verify.SetArrays, nothing copied; positions are the rows); with verification
        "source" the rows' sets are shingled from the source files (``sets``)."""
        if self.verification == "source":
            distinct = np.unique(rows)
            return set_arrays(*self.sets(distinct, spec)[::-1]), np.searchsorted(distinct, rows)
        return SetArrays(self.array("set_offsets"), self.array("set_columns", rows)), rows

    def sets(self, rows: np.ndarray, spec: ShingleSpec) -> tuple[np.ndarray, np.ndarray]:
        """(counts int64 (k,), columns int64 (sum counts,)): the shingle sets of ``rows``, stored
        ones, or (verification "source") shingled from the source files, each checked first as
        it is read (sources.rows_sets)."""
        # (``rows`` for every array it reads: set_columns checks their blocks, the others are whole)
        return rows_sets(lambda name: self.array(name, rows), self.sources() if self.verification == "source" else None,
                         rows, spec)


class IndexReader:
    """The index at ``root`` as its manifest says now (later commits are not seen)."""

    def __init__(self, root: Path, manifest: Optional[Manifest] = None, earlier: Optional["IndexReader"] = None,
                 written: Optional[Mapping[str, Mapping[str, Optional[tuple]]]] = None):
        """manifest: the state to read (a writer's, under the lock); None: the last committed
        one, read again if a commit replaces it while its files are being opened. earlier: a
        reader of an earlier state of this index in this process, whose open segments are taken
        over where still live and unchanged (Segment.reusable_for), so that a long-lived Index
        checks each segment's files once rather than once per add or query after a commit.
        written: segment name -> its files' stamps when this process wrote them (Segment)."""
        self.root = Path(root)
        taken: list[Segment] = earlier.segments if earlier is not None else []
        opened = {segment.entry.name: segment for segment in taken}
        for _attempt in range(3):
            self.manifest = manifest or read_manifest(self.root)
            verification = self.manifest.verification
            try:
                self.segments: list[Segment] = [opened[entry.name] if entry.name in opened
                                 and opened[entry.name].reusable_for(entry, verification)
                                 else Segment(self.root, entry, verification, (written or {}).get(entry.name))
                                 for entry in self.manifest.segments]
                self._removed: Optional[dict[str, np.ndarray]] = None
                self.removed()
                return
            except OSError as error:
                # A writer's garbage collection removes files of replaced states (files.py): a
                # file gone while a later commit came is that, not damage; read the new state.
                if manifest is not None or read_manifest(self.root).generation == self.manifest.generation:
                    if isinstance(error, FileNotFoundError):
                        raise DamagedIndexError(f"{error.filename}: missing, but the index manifest names it; "
                                                "the index is damaged") from None
                    raise index_os_error(self.root, error, writing=False) from None
        raise DamagedIndexError(f"{self.root}: the index changed three times while it was being opened; try again")

    def check_files(self) -> None:
        """Every file of the live segments read whole against its SHA-256 (DamagedIndexError
        naming one that does not match)."""
        for segment in self.segments:
            for opened in segment.files.values():
                opened.check()

    @property
    def spec(self) -> ShingleSpec:
        """How the index's documents are shingled (its parameters)."""
        fixed = self.manifest.parameters
        return ShingleSpec(fixed["shingle"], fixed["ngram"], fixed.get("unicode"),
                           fixed.get("strip_punctuation", False), fixed.get("strip_symbols", False))

    @property
    def documents(self) -> int:
        """Live documents: those of the segments less the removed ones."""
        return self.manifest.documents - sum(len(rows) for rows in self.removed().values())

    def source_files(self) -> list[str]:
        """The files the documents' sets are read from (verification "source": every segment's
        sources.json's paths, each once, in order); [] for an index that stores the sets."""
        if self.manifest.verification != "source":
            return []
        return list(dict.fromkeys(entry["path"] for segment in self.segments for entry in segment.sources()))

    def removed(self) -> dict[str, np.ndarray]:
        """Segment name -> int64 ascending rows removed by ``index remove`` (tombstones)."""
        if self._removed is None:
            self._removed = {}
            entry = self.manifest.tombstones
            if entry:
                opened = OpenedFile(self.root / "tombstones" / entry["name"], entry["sha256"])
                opened.check()
                table = pq.read_table(opened.handle)
                for name in set(table["segment"].to_pylist()):
                    rows = table.filter(pc.equal(table["segment"], name))["row"].to_numpy()
                    self._removed[name] = np.unique(rows.astype(np.int64))
        return self._removed

    def probe(self, keys, window: int, threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """The indexed documents that share a band key with the new documents: keys, the new
        documents' band keys, uint64 (m, bands) on any side or anything whose ``keys[:, band]``
        gives one band's (a staged store's spilled keys). Returns (segment int64, row int64) of
        each matched live document, distinct, in index order.

        window: the --bucket-window bound. A batch run over (indexed, then new documents) pairs
        each document of a bucket with the ``window`` documents after it, so the indexed
        documents a new one can pair with are at most the last ``window`` of its key over the
        index; the probe takes those, and the run's own candidate stage applies the window
        again. (So a run against the index pairs exactly what the batch run pairs wherever no
        bucket holds more than ``window`` documents.)
        """
        _, segment, row = self.probe_pairs(keys, window, threads)
        return self.documents_of(sorted_unique(self.document_codes(segment, row)))

    def document_codes(self, segment: np.ndarray, row: np.ndarray) -> np.ndarray:
        """One int64 per indexed document (segment position, row; int64 (m,) each), ascending
        in index order: distinct documents by a 1-D sort, several times faster than numpy's
        unique over the rows of a 2-D array. documents_of inverts it."""
        return segment * self._code_span() + row

    def documents_of(self, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(segment int64, row int64) of document_codes' ``codes``."""
        return np.divmod(codes, self._code_span())

    def _code_span(self) -> int:
        return max([segment.entry.documents for segment in self.segments] + [1])

    def probe_pairs(self, keys, window: int, threads: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Which new document matched which indexed one (see probe): (new int64, segment int64,
        row int64), one entry per distinct triple, live documents only: the last ``window`` of
        each key over the whole index (segment order, then row), as one segment would give them,
        so that neither a run's nor a query's answer depends on how many segments the index has
        (compact changes nothing). threads: the bands are
        looked up on this many threads (numpy's sorts and searches release the GIL): an add's
        on the host (IndexStore.sign), not a query's few documents, for which starting threads
        costs more than the searches (it doubled a query's median latency)."""
        bands = int(self.manifest.parameters["bands"]) if self.segments else 0
        removed = [self.removed().get(segment.entry.name, np.zeros(0, np.int64)) for segment in self.segments]
        for segment in self.segments:  # mapped (and checked) here: the threads only read them
            segment.array("keys"), segment.array("rows")
        new: list[list[np.ndarray]] = [[] for _ in self.segments]
        local: list[list[np.ndarray]] = [[] for _ in self.segments]

        def over_index(band: int) -> list[tuple[np.ndarray, np.ndarray]]:
            matches = self.band_matches(band, keys[:, band], window, removed)
            # Each segment's matches are its last ``window`` already: one segment's are the index's.
            return last_over_parts(matches, window) if len(matches) > 1 else matches

        # keys[:, band] is read on the threads, as the host's candidate stage reads it.
        for matches in map_parallel(over_index, list(range(bands)), threads):
            for position, (query, rows) in enumerate(matches):
                new[position].append(query)
                local[position].append(rows)
        found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        for position, segment in enumerate(self.segments):
            if not new[position]:
                continue
            codes = sorted_unique(np.concatenate(new[position]) * segment.entry.documents
                                  + np.concatenate(local[position]))
            query, row = np.divmod(codes, max(segment.entry.documents, 1))
            found.append((query, np.full(row.shape[0], position, np.int64), row))
        if not found:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        query, segment_positions, row = (np.concatenate(parts) for parts in zip(*found))
        return query, segment_positions, row

    def band_matches(self, band: int, column, window: int,
                     removed: list[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
        """probe_pairs of one band: per segment, (new int64, row int64) of the matches of the
        new documents' keys ``column`` (uint64 (m,), any side) in the segment's keys of that
        band; removed: per segment, its removed rows (int64, ascending)."""
        column = np.ascontiguousarray(column.get() if hasattr(column, "get") else column, dtype=np.uint64)
        # Sorted once for every segment (key_runs). Any order of equal keys: probe_pairs makes
        # the matches distinct.
        order = np.argsort(column)
        needles = column[order]
        matches = []
        for segment, gone in zip(self.segments, removed):
            sorted_keys = segment.array("keys")[band]
            if sorted_keys.shape[0] == 0:
                matches.append((np.zeros(0, np.int64), np.zeros(0, np.int64)))
                continue
            hit, lo, hi = key_runs(sorted_keys, needles)
            query = order[hit]
            # The last ``window`` live documents of each key: enough candidates to cover the
            # removed ones among them, then the removed ones out, then the window.
            lo = np.maximum(lo, hi - window - gone.shape[0])
            run, within = ragged_arange(hi - lo)
            rows = np.asarray(segment.array("rows")[band][lo[run] + within], dtype=np.int64)
            if gone.shape[0]:
                live = ~np.isin(rows, gone)
                run, rows = run[live], rows[live]
                last = last_of_runs(run, window)  # (runs are grouped, positions ascending)
                run, rows = run[last], rows[last]
            matches.append((query[run], rows))
        return matches

    def gather(self, segment: np.ndarray, row: np.ndarray) -> Matched:
        """The stored ids, signatures and lengths of (segment, row) pairs in index order."""
        signatures, lengths = [], []
        for position, mine in self._by_segment(segment):
            source, local = self.segments[position], row[mine]
            signatures.append(np.asarray(source.array("signatures", local)[local]))
            lengths.append(np.asarray(source.array("lengths")[local]))
        width = self.manifest.parameters["bands"] * self.manifest.parameters["rows"]
        return Matched(segment, row, self.ids(segment, row),
                       np.concatenate(signatures) if signatures else np.zeros((0, width), np.uint32),
                       np.concatenate(lengths) if lengths else np.zeros(0, np.int64))

    def ids(self, segment: np.ndarray, row: np.ndarray) -> pa.Array:
        """The ids of (segment, row) pairs in index order, as the index's id type."""
        id_type = self.id_type()
        parts = [self.segments[position].ids()["id"].take(pa.array(row[mine])).combine_chunks().cast(id_type)
                 for position, mine in self._by_segment(segment)]
        return pa.concat_arrays(parts) if parts else pa.array([], id_type)

    def sets(self, segment: np.ndarray, row: np.ndarray) -> SetArrays:
        """The shingle sets of (segment, row) pairs in index order, as verify.document_sets
        makes them (sorted distinct columns per row)."""
        return stacked_sets(self.set_parts(segment, row))

    def pair_jaccard_at_least(self, segment: np.ndarray, row: np.ndarray, new_sets: SetRows,
                              new_positions: np.ndarray, threshold: float, threads: int) -> np.ndarray:
        """verify.pair_jaccard_at_least of pairs (indexed document (segment[i], row[i]), row
        new_positions[i] of new_sets) (int64 (p,) each): float64 (p,), host. Each segment's
        pairs are merged against its stored sets where they lie (Segment.set_rows), so that
        nothing of the index is gathered or copied."""
        jaccard = np.empty(segment.shape[0], dtype=np.float64)
        order = np.argsort(segment, kind="stable")
        for position, mine in self._by_segment(segment[order]):
            picked = order[mine]
            sets, positions = self.segments[position].set_rows(row[picked], self.spec)
            jaccard[picked] = pair_jaccard_at_least(sets, positions, new_positions[picked], threshold, threads,
                                                    second_sets=new_sets)
        return jaccard

    def set_parts(self, segment: np.ndarray, row: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """The sets of ``sets`` before they are joined (verify.stacked_sets): per segment,
        (counts int64, columns int64) of its rows, in index order."""
        return [self.segments[position].sets(row[mine], self.spec) for position, mine in self._by_segment(segment)]

    def source_pointers(self, segment: np.ndarray, row: np.ndarray) -> tuple[list[dict], np.ndarray, np.ndarray]:
        """Where documents (segment, row) of an index verifying from source files are read from,
        in index order: sources.source_sets' (entries, file int64 (k,), row_number int64 (k,))."""
        picked = [(self.segments[position], row[mine]) for position, mine in self._by_segment(segment)]
        entries, file = merge_sources([(s.sources(), np.asarray(s.array("source_file")[rows])) for s, rows in picked])
        numbers = [np.asarray(s.array("source_row")[rows], np.int64) for s, rows in picked]
        return entries, file.astype(np.int64), np.concatenate([np.zeros(0, np.int64), *numbers])

    def first_indexed(self, ids: pa.Array) -> Optional[object]:
        """The first of ``ids`` that a live indexed document has, or None: a binary search of
        each segment's sorted id keys (id_keys), each hit confirmed on the id itself."""
        removed = self.removed()
        keys = id_keys(ids)
        order = np.argsort(keys)  # looked up in ascending order (key_runs)
        needles = keys[order]
        for segment in self.segments:
            sorted_keys, key_rows = segment.array("id_keys"), segment.array("id_rows")
            if sorted_keys.shape[0] == 0:
                continue
            hit, lo, hi = key_runs(sorted_keys, needles)
            if hit.size == 0:
                continue
            run, within = ragged_arange(hi - lo)
            rows = np.asarray(key_rows[lo[run] + within], dtype=np.int64)
            positions = order[hit[run]]
            column = segment.ids()["id"]
            for position, row in sorted(zip(positions.tolist(), rows.tolist())):
                gone = removed.get(segment.entry.name)
                if gone is not None and np.isin(row, gone):
                    continue
                if column[int(row)].as_py() == ids[int(position)].as_py():
                    return ids[int(position)].as_py()
        return None

    def id_type(self) -> pa.DataType:
        """The type of the index's ids: int64, or large_string (a run's ids are cast to it)."""
        return pa.int64() if self.manifest.parameters.get("id_type") == "int64" else pa.large_string()

    @staticmethod
    def _by_segment(segment: np.ndarray):
        """(segment position, indices) for each segment present, in order; ``segment`` is
        ascending (index order), so each segment's indices are one run."""
        if segment.shape[0] == 0:
            return
        bounds = np.flatnonzero(np.diff(segment)) + 1
        for indices in np.split(np.arange(segment.shape[0]), bounds):
            yield int(segment[indices[0]]), indices


def key_runs(sorted_keys: np.ndarray, needles: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where ``needles`` (uint64 (k,), ascending) lie in ``sorted_keys`` (uint64 (s,),
    ascending, s >= 1; a segment's band keys or id keys): (hit int64 (h,): the needles found;
    lo, hi int64 (h,): each one's run sorted_keys[lo:hi]). Ascending needles let numpy's binary
    search start from its last answer, several times faster than in random order; most needles
    are in no segment, so the end of a run is sought only for those that are."""
    lo = np.searchsorted(sorted_keys, needles, side="left")
    hit = np.flatnonzero(sorted_keys[np.minimum(lo, sorted_keys.shape[0] - 1)] == needles)
    return hit, lo[hit], np.searchsorted(sorted_keys, needles[hit], side="right")


def id_keys(ids: pa.Array) -> np.ndarray:
    """uint64 (n,): a key per id for the segments' sorted id keys: an integer id itself (as
    uint64), a string id a 64-bit hash of its UTF-8 bytes (poly_hash64 over the bytes; equal
    keys are confirmed on the ids, so a collision costs a comparison, never a wrong answer)."""
    if pa.types.is_integer(ids.type):
        return ids.cast(pa.int64()).to_numpy(zero_copy_only=False).view(np.uint64)

    data, offsets = utf8_buffers(ids.cast(pa.large_string()))
    keys = np.full(len(ids), np.uint64(0), dtype=np.uint64)  # the empty string's key
    nonempty = np.flatnonzero(offsets[1:] > offsets[:-1])
    if nonempty.size:
        keys[nonempty] = span_hashes(data.astype(np.uint32), offsets[:-1][nonempty], offsets[1:][nonempty])
    return keys


INTEGER_FORM = "no leading zero, no sign but a minus, not -0"


def as_index_ids(ids: pa.Array, reader: IndexReader) -> pa.Array:
    """``ids`` as the index's kind of id (an ids file gives strings; an index of integer ids
    takes them as integers, each written as it prints, so that ids match exactly: not "05",
    "-0" or "+5" for 5 and 0); InputError naming the first that is not one."""
    target = reader.id_type()
    refused = f"cannot be an id of this index, whose ids are integers (written as they print: {INTEGER_FORM})"
    try:
        cast = ids.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        for value in ids.to_pylist():
            try:
                pa.array([value]).cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise InputError(f"id {value!r} {refused}") from None
        raise
    if pa.types.is_integer(target) and (pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type)):
        unlike = pc.invert(pc.fill_null(pc.equal(cast.cast(ids.type), ids), True))
        if pc.any(unlike).as_py():
            raise InputError(f"id {ids[pc.index(unlike, True).as_py()].as_py()!r} {refused}")
    return cast


def check_id_type(manifest: Manifest, ids: pa.Array) -> str:
    """The kind of ``ids`` ("int64" or "string"; of none, the index's); InputError when the
    index holds the other."""
    id_type = "int64" if pa.types.is_integer(ids.type) else "string"
    if len(ids) == 0:  # (no document: no id of either kind)
        return manifest.parameters.get("id_type") or id_type
    if manifest.parameters.get("id_type") not in (None, id_type):
        raise InputError(f"the index holds {manifest.parameters['id_type']} ids, this input has {id_type} ids; "
                         "choose id_field= to match")
    return id_type


def segment_arrays(ids: pa.Array, signatures: np.ndarray, lengths: np.ndarray, material: dict[str, np.ndarray],
                   params: DedupParams) -> dict[str, np.ndarray]:
    """A segment's arrays (files.SEGMENT_ARRAYS, then ``material``: the verification arrays,
    sources.VERIFICATION_ARRAYS) from its documents' ids, signatures uint32 (n, K) and lengths
    int64 (n,): the band keys of the signatures (lsh.band_keys, on the host) and the id keys
    (reader.id_keys), each sorted with their rows."""

    keys = band_keys(signatures, params.banding()).T  # (bands, n)
    # Stable: a key's rows ascend (the probe takes each key's last rows). Bands on threads.
    order = np.stack(list(map_parallel(lambda band: np.argsort(keys[band], kind="stable"), list(range(keys.shape[0])),
                                       HOST_THREADS))) if keys.shape[0] else np.zeros(keys.shape, np.int64)
    identities = id_keys(ids)
    id_order = np.argsort(identities, kind="stable")
    return {"keys": np.take_along_axis(keys, order, axis=1), "rows": order.astype(np.uint32),
            "signatures": signatures, "lengths": lengths, "id_keys": identities[id_order],
            "id_rows": id_order.astype(np.uint32), **material}
