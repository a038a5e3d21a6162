"""The stages of a run on Dask (DaskStages), over its work directory: run by a cluster's
workers (--scheduler ADDRESS, --workers N, or a ``dask.distributed.Client`` in
``gpudedup.dedup``), or for --work-dir alone by Dask's local scheduler, the tasks and shuffles
on this process's threads (daskops.DaskExecutor, daskops.dask_client).

The work directory (workdir.py) is the meeting point: it must be on a file system that the
client and every worker see at the same path (one machine, or a shared mount), as must the
input files. Stages:

- **signatures**: one task per unfinished shard (disk.sign_shard) on the workers; each
  worker makes its own backend (numpy, or CuPy on GPU workers: dask-cuda's LocalCUDACluster
  gives one worker per GPU) and writes the shard's spill into the work directory.
- **candidates**: every shard's band keys become a Dask DataFrame of (band, key, row) rows
  (row: the document's row), shuffled on (band, key)
  so that each bucket of each band lies in one partition; a task per partition pairs the
  bucket members as lsh.bucket_pairs does (input order, the window). The pairs are shuffled
  again, on the pair, so that the copies of a pair found in several bands meet; a task per
  partition keeps each pair once, applies the signature filter to them, reading their
  signature rows from the work directory, and stores those that pass as a part of the work
  directory (pipeline/pairparts.py). Only a count per partition reaches the client. The pairs
  are exactly those of the single process.
- **verification**: the parts' documents are shuffled on their shard, and a task per
  partition writes the shingle sets of its shards' documents to the work directory (each
  shard read once); a task per part then computes its pairs' exact Jaccard from those sets
  and stores the pairs that reach the threshold as a part. The client gets counts.

- **the input rules' id check**: a task per shard hashes its ids; the (hash, row) rows are
  shuffled on the hash, and only the rows whose hashes collide reach the client, which compares
  their ids exactly (shardids.repeated_shard_ids); no process holds every id.

- **identical copies**: every shard's row hashes become a Dask DataFrame of (hash, row)
  rows, shuffled on the hash; a task per partition groups the documents with the same
  signature (reading their signature rows from the work directory) into a part, their sets are
  spilled as verification's are, and a task per part checks its groups exactly into a part of
  copies (pipeline/copyparts.py). The candidates stage's shard tasks get the copies' rows by
  a range of shards each; the copies' parts join the verified ones. The client gets counts.

- **clusters**: the connected components of the verified pairs as tasks (pipeline/components.py),
  the keep decision and the clusters' parts by tasks too (pipeline/clusterparts.py).

dask (a dependency) and distributed (optional: ``pip install 'gpudedup[dask]'``) are imported
inside the functions that need them: an in-memory run never loads them (start-up).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import pyarrow as pa

from ..core.verify import plausible
from ..core.lsh import bucket_pairs, decoded_pairs, pair_code_span, pair_codes, sorted_unique
from ..errors import ParameterError
from ..io.layout import part_name, table_slices, write_pairs_part
from ..io.storage import child_name
from ..threads import map_parallel
from . import clusterparts, components, copyparts, pairparts
from .clusterpairs import in_id_order, named_end, pairs_inside_part
from .clusterparts import ClusterParts
from .daskops import DaskExecutor, cluster_failures, computed, frame_of, moved, shuffled
from .pairparts import (COPIES, GROUPS, LIKELY, CheckedParts, LikelyParts, PairParts, on_pairs, pair_frame,
                        write_part)
from .copyparts import CopyParts
from .shards import DocumentSignatures, DocumentsAt, SpilledLengths
from .signatures import batch_bytes


class DaskStages:
    """The stages over a work directory as Dask's shuffles and tasks (protocols.Stages), run by
    ``executor`` (daskops.DaskExecutor: a cluster's workers, or Dask's local scheduler): the
    candidate stage and the identical-copies grouping as shuffles of what the work directory
    holds, the signature filter as tasks reading its signatures, the connected components as
    rounds of shuffles (pipeline/components.py), the clusters by tasks over parts of the work
    directory (pipeline/clusterparts.py). The store each method takes is a disk.WorkDirStore,
    whose shards the tasks read."""

    def __init__(self, executor: DaskExecutor):
        self.executor = executor
        # Read once, so that every stage of the run cuts at the same size, and a wrong setting
        # is refused before any work (run_job asks for its stages first).
        self.pairs_per_part = components.pairs_per_part()

    # The form of each stage's result a work directory keeps (Stages.kept): its parts'.
    KEPT: dict[str, Any] = {"copies": CopyParts, "candidates": LikelyParts, "pairs": CheckedParts}

    def kept(self, store, stage: str, compute):
        """protocols.Stages.kept: the stage's parts, as the arrays the store's work directory
        keeps of them say (store.cached: compute()'s, unless an earlier run kept them)."""
        return self.KEPT[stage].of_arrays(store.parts_at, store.cached(stage, lambda: compute().as_arrays()))

    def clusters(self, store, verified, policy):
        """protocols.Stages.clusters as tasks: the connected components as rounds of shuffles
        (pipeline/components.py), then the keep decision and the parts by two more
        (pipeline/clusterparts.py); the client gets counts. store: a disk.WorkDirStore, or a run
        against an index's (index/staged.py), whose leading ``pinned`` rows are kept."""

        labels = components.dask_component_labels(self.executor.client, verified.parts, self.pairs_per_part,
                                                  store.documents)
        # The clustered documents (two per verified pair at most) in ranges of about what a part
        # of the components holds, up to one per code partition: every range is a partition of
        # each of the clusters' shuffles, whose tasks cost seconds where there are few pairs.
        ranges = min(self.executor.code_partitions(store.shards.count),
                     max(-(-2 * verified.count // self.pairs_per_part), 1))
        lengths = SpilledLengths(store.documents_at(), store.documents)
        return clusterparts.dask_clusters(self.executor.client, labels, store.documents, ranges,
                                          store.work.task_location, lengths, store.ids_at(), policy, store.pinned)

    def likely_pairs(self, store, copies, window: int, threshold: float, backend, keep_every: bool = False):
        """protocols.Stages.likely_pairs as two shuffles (the module docstring's candidates): the
        client gets a count per partition, not every candidate pair, nor the copies (each
        shard's task gets their rows by its range of shards: copyparts.range_rows).
        store: a disk.WorkDirStore, or a run against an index's (index/staged.py: pairs of two
        of its ``pinned`` rows are left out); the tasks read its shards' band keys and
        signatures."""
        import dask
        import dask.dataframe as dd

        if keep_every:
            raise ParameterError("every candidate pair is kept only by a run in one process (an evaluation)")
        at, count = store.documents_at(), store.shards.count
        if count == 0:
            return LikelyParts(store.parts_at, 0, 0)
        copy_rows: list = [None] * count
        if copies.count:
            starts_at, = self.executor.share(at.document_starts())  # (every part's task reads the starts)
            shard_starts, rows = copyparts.range_rows(copies.parts, count, self.executor.code_partitions(count),
                                                      starts_at)
            copy_rows = [rows[r] for r in np.searchsorted(shard_starts, np.arange(count), side="right") - 1]
        at_shared, = self.executor.share(at)  # (what every shard's and partition's task reads)
        span = pair_code_span(store.documents)  # pairs (a, b) of rows as codes a * span + b
        # Every (band, key) bucket in one partition; then every copy of a pair in one partition.
        # In this process a round of bands at a time (the rounds' pair codes held, far fewer than
        # their band keys): its one partition would hold every band key. A cluster's partitions
        # are a shard's worth each, and a shuffle per round would cost as much as the one.
        band_count = store.bands
        rounds = band_rounds(band_count, store.active.shape[0]) if self.executor.in_process else [(0, band_count)]
        codes = [shuffled(self.executor, [dask.delayed(band_key_rows)(at_shared, index, copy_rows[index], bands)
                                          for index in range(count)],
                          {"band": "int32", "key": "uint64", "row": "int64"}, ["band", "key"]).map_partitions(
            bucket_pair_codes, window, span, self.executor.task_threads, meta=frame_of({"code": "uint64"}))
            for bands in rounds]
        if len(codes) > 1:
            with cluster_failures("the candidate shuffle"):
                codes = [round_codes.persist() for round_codes in codes]  # (one round after another)
        codes = moved(dd.concat(codes), ["code"], self.executor.code_partitions(count))
        # Each partition's pairs that pass the filter stay in the work directory, a part each.
        width = store.signatures.shape[1]
        candidates = computed([dask.delayed(likely_part)(part, number, at_shared, store.documents, width, span,
                                                         threshold, store.pinned)
                               for number, part in enumerate(codes.to_delayed())], "the candidate shuffle")
        pairparts.keep_parts(store.work, LIKELY, range(len(candidates)))
        return LikelyParts(store.parts_at, sum(candidates), len(candidates))

    def checked_pairs(self, store, likely, copies, threshold: float, progress):
        """protocols.Stages.checked_pairs of likely pairs kept in parts (pipeline/pairparts.py): the
        parts' documents shuffled on their shard, a task per partition spilling its shards'
        sets, then a task per part checking its pairs into a verified part; the client gets
        counts. The identical copies are in parts too (DaskStages.copies), which
        CheckedParts.verified joins to the verified ones. store: a disk.WorkDirStore."""

        if not likely.parts:  # (no document had band keys: no pair, no copy)
            none = np.zeros(0, np.int64)
            return CheckedParts(store.parts_at, likely.candidates, 0, 0, none, copies.part_sizes)
        self.spill_documents(store, pairparts.LIKELY, list(range(likely.parts)), pairparts.SPILL)
        # Chunks of pairs of about 8 batches' text each.
        chunk_bytes = 8 * batch_bytes(store.params, store.backend)
        at, = self.executor.share(store.documents_at())
        threads = self.executor.task_threads
        counts = self.executor.map(pairparts.check_part, [(at, number, threshold, chunk_bytes, threads)
                                                          for number in range(likely.parts)], "exact verification")
        pairparts.keep_parts(store.work, pairparts.VERIFIED, range(likely.parts))
        checked, rejected = (np.array(column, np.int64).reshape(-1) for column in zip(*counts))
        return CheckedParts(store.parts_at, likely.candidates, int(checked.sum()), int(rejected.sum()),
                            checked - rejected, copies.part_sizes)

    def spill_documents(self, store, kind: str, numbers: list[int], spill: str) -> None:
        """The shingle sets of the documents of the ``kind`` pairs' parts ``numbers``, spilled
        under WORK/sets/<spill>/: the parts' documents shuffled on their shard, and a task per
        partition spilling those of its shards (pairparts.spill_part_documents: each shard read
        once). store: a disk.WorkDirStore."""
        import dask

        if not numbers:
            return
        # Every task reads where the documents are, the reader and the parameters: sent once.
        at, reader_at, params_at = self.executor.share(store.documents_at(), store.reader, store.params)
        documents = [dask.delayed(pairparts.part_documents)(at, kind, number) for number in numbers]
        backend = store.task_backend(self.executor)
        by_shard = shuffled(self.executor, documents, {"shard": "int64", "row": "int64"}, ["shard"])
        computed([by_shard.map_partitions(pairparts.spill_part_documents, spill, at, reader_at, params_at, backend,
                                          meta=frame_of({"shards": "int64"}))], "the shingle sets")

    def pairs_inside(self, pairs, clustered, numbers: np.ndarray, asked_a: np.ndarray, asked_b: np.ndarray) -> list:
        """protocols.Stages.pairs_inside by tasks: with the clusters in parts (pipeline/clusterparts.py),
        a task per place the pairs lie makes them a frame, Dask sets them on their first
        document by the clusters' ranges, and a task per range reads the members of its rows
        from the range's part (clusterpairs.pairs_inside_part). The client gets a few numbers
        per range, not the members. clustered: these stages' (DaskStages.clusters), in parts."""
        import dask
        import dask.dataframe as dd

        assert isinstance(clustered, ClusterParts), "a cluster's run keeps its clusters in parts"
        stage = "counting the pairs of the largest clusters"
        frames = pair_frames(self.executor, pairs)
        with cluster_failures(stage):
            rows = dd.from_delayed(frames, meta=frame_of(PAIR_FRAME), verify_meta=False).set_index(
                "a", divisions=clustered.divisions)
        # Every range's task reads the same parts' description (a count per range): sent once.
        shared = self.executor.share(clustered, numbers, asked_a, asked_b)
        return computed([dask.delayed(pairs_inside_part)(part, number, *shared)
                         for number, part in enumerate(rows.to_delayed())], stage)

    def copies(self, store, progress):
        """protocols.Stages.copies by tasks (pipeline/copyparts.py): the row hashes shuffled on the
        hash, a task per partition storing its same-signature groups as a part, their
        documents' sets spilled (spill_documents), and a task per part that holds groups
        checking them into a part of copies. The client gets a count per part (not a hash
        per document, nor a pair per group or copy). store: a disk.WorkDirStore."""
        import dask

        root, count = store.work.task_location, store.shards.count
        if count == 0:
            return CopyParts(PairParts.of(root, COPIES, np.zeros(0, np.int64)))
        progress.start("Checking identical copies", count, "parts")
        # Every partition's task reads where the documents are (their lengths too): sent once.
        at, = self.executor.share(store.documents_at())
        parts = [dask.delayed(row_hash_rows)(at, index) for index in range(count)]
        grouped = shuffled(self.executor, parts, {"hash": "uint64", "row": "int64"}, ["hash"]).to_delayed()
        groups = computed([dask.delayed(copyparts.group_part)(part, number, at, store.signatures.shape[1])
                           for number, part in enumerate(grouped)], "the identical-copies shuffle")
        holding = np.flatnonzero(groups).tolist()
        pairparts.keep_parts(store.work, GROUPS, holding)
        self.spill_documents(store, GROUPS, holding, copyparts.SPILL)
        found = self.executor.map(copyparts.check_groups, [(at, number, store.documents, store.copy_batch_cost)
                                                           for number in holding], "checking identical copies")
        pairparts.keep_parts(store.work, COPIES, holding)
        sizes = np.zeros(len(groups), np.int64)
        sizes[holding] = found
        progress.advance(count)
        return CopyParts(PairParts.of(root, COPIES, sizes))


PAIR_FRAME = {"a": "int64", "b": "int64", "jaccard": "float64"}  # (pairparts.pair_frame's columns)


def write_pairs_by_tasks(executor: DaskExecutor, pairs, clustered, folder, id_type) -> None:
    """The pairs table's parts (layout.table_parts of the pairs in the table's order, as
    tables.pairs_parts makes them) written into ``folder`` (a Location) by tasks, the
    client holding none of the pairs or their ids: a task per part that holds pairs (the
    verified parts, then the copies') makes them a frame, two lookups (the pairs set on
    one document, then the other, by the rows of the clusters' parts ``clustered``: their
    ranks and ids, clusterpairs.named_end) name them, Dask sorts them by the ids' ranks (a
    range partition from a sample), and a task per part of the table writes it from the
    slices of the sorted partitions that hold its rows (layout.write_pairs_part; id_type:
    the ids' wide type): the parts are those of one process."""
    import dask
    import dask.dataframe as dd

    stage = "writing the pairs"
    if pairs.count == 0:  # (nothing to sort: Dask's sort samples its rows) the one empty part
        write_pairs_part([], id_type, child_name(folder, part_name(0)))
        return
    frames = pair_frames(executor, pairs)
    id_dtype = "int64" if pa.types.is_integer(id_type) else "str"
    named_a = {"b": "int64", "jaccard": "float64", "rank_a": "int64", "id_a": id_dtype}
    named_b = {"jaccard": "float64", "rank_a": "int64", "id_a": id_dtype, "rank_b": "int64", "id_b": id_dtype}
    columns = {"rank_a": "int64", "rank_b": "int64", "id_a": id_dtype, "id_b": id_dtype, "jaccard": "float64"}
    with cluster_failures(stage):
        rows = dd.from_delayed(frames, meta=frame_of(PAIR_FRAME), verify_meta=False)
        rows = rows.set_index("a", divisions=clustered.divisions).map_partitions(
            named_end, "a", clustered, meta=frame_of(named_a))
        rows = rows.set_index("b", divisions=clustered.divisions).map_partitions(
            named_end, "b", clustered, meta=frame_of(named_b))
        # Named once (persisted): the sort reads its input twice, for its sample and to sort.
        ranked = rows.map_partitions(in_id_order, meta=frame_of(columns)).persist()
        ordered = ranked.sort_values(["rank_a", "rank_b"]).persist()
    sorted_parts = ordered.to_delayed()
    lengths = computed([dask.delayed(len)(part) for part in sorted_parts], stage)
    writes = [dask.delayed(write_pairs_part)([(sorted_parts[index], start, stop) for index, start, stop in pieces],
                                             id_type, child_name(folder, part_name(number)))
              for number, pieces in enumerate(table_slices(lengths))]
    computed(writes, stage)


def pair_frames(executor: DaskExecutor, pairs) -> list:
    """The verified ``pairs`` (pairparts.VerifiedParts) as Dask delayed pandas DataFrames of
    PAIR_FRAME, a task per part that holds any (VerifiedParts.tasks)."""
    import dask

    return [dask.delayed(on_pairs)(*a) for a in pairs.tasks(executor, pair_frame)]


# --- tasks (module-level, so that workers import them rather than unpickle code) --------------


def row_hash_rows(at: DocumentsAt, index: int):
    """One shard's row hashes as (hash uint64, row int64) rows, for its documents with
    shingles (DocumentsAt.active)."""
    import pandas as pd

    documents, live = at.active(index)
    hashes = np.asarray(at.work.shard_array(index, "row_hash"))[live]
    return pd.DataFrame({"hash": hashes, "row": documents})


# The band keys one round of the candidate shuffle moves: (band, key, row) rows of 20 bytes,
# which the shuffle holds several times over (its pieces, their join, the sort). A round of all
# 16 bands of 640,000 documents (10 million rows) takes the candidate stage's peak to about
# 1,000 MB in the scale benchmark, against about 450 MB for the other stages; a round of this
# many keeps it near theirs.
ROUND_ROWS = 2_000_000


def band_rounds(bands: int, documents: int) -> list[tuple[int, int]]:
    """The bands in rounds of at most ROUND_ROWS band keys (at least one band each): (first,
    stop) ranges, in order."""
    per_round = max(1, ROUND_ROWS // max(documents, 1))
    return [(first, min(first + per_round, bands)) for first in range(0, bands, per_round)]


def band_key_rows(at: DocumentsAt, index: int, copy_rows: Optional[np.ndarray], bands: tuple[int, int]):
    """One shard's band keys of the bands ``bands`` (first, stop) as (band int32, key uint64,
    row int64) rows, for its documents with shingles (DocumentsAt.active) but the identical
    copies among ``copy_rows`` (int64 ascending document rows, of this shard and maybe others),
    which take no part in LSH."""
    import pandas as pd

    first_band, stop_band = bands
    documents, live = at.active(index)
    keys = np.asarray(at.work.shard_array(index, "keys")[first_band:stop_band])[:, live]
    if copy_rows is not None and documents.shape[0]:
        # (copy_rows spans a range of shards: this shard's are a slice of it)
        mine = copy_rows[np.searchsorted(copy_rows, documents[0]):np.searchsorted(copy_rows, documents[-1], "right")]
        keep = ~np.isin(documents, mine, assume_unique=True)
        keys, documents = keys[:, keep], documents[keep]
    count, members = keys.shape
    return pd.DataFrame({"band": np.repeat(np.arange(first_band, stop_band, dtype=np.int32), members),
                         "key": keys.reshape(-1), "row": np.tile(documents, count)})


def bucket_pair_codes(rows, window: int, span: np.uint64, threads: int):
    """Candidate pairs of one shuffled partition of band_key_rows, as codes a * span + b of
    rows: per band, the partition's rows in document order go through lsh.bucket_pairs, which
    pairs each bucket's members in input order within the window, as the single process does;
    the bands on ``threads`` threads, each band's buckets cut in groups by key where the bands
    alone would leave threads idle (band_groups). A pair found in several bands is here as
    often, and the codes come in no particular order (likely_part sorts them)."""
    import pandas as pd

    band = rows["band"].to_numpy()
    docs = rows["row"].to_numpy(dtype=np.int64)
    keys = rows["key"].to_numpy(dtype=np.uint64)
    bands = np.unique(band).tolist()
    # A bucket's members share their key, so a group of keys holds whole buckets, in document order.
    groups = band_groups(len(bands), threads)

    def grouped_band(number: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Band ``number``'s keys and rows (uint64, int64; n rows) ordered by their group,
        key % groups, each group's rows in the order they came (a stable sort), and the
        groups' bounds (int64, groups + 1): one gather of the band for all its groups."""
        where = slice(None) if len(bands) == 1 else np.flatnonzero(band == number)
        band_keys, band_docs = keys[where], docs[where]
        if groups == 1:
            return band_keys, band_docs, np.array([0, band_keys.shape[0]], np.int64)
        group_of = (band_keys % np.uint64(groups)).astype(np.min_scalar_type(groups - 1))
        order = np.argsort(group_of, kind="stable")  # (a radix sort of small integers)
        bounds = np.concatenate([[0], np.cumsum(np.bincount(group_of, minlength=groups))]).astype(np.int64)
        return band_keys[order], band_docs[order], bounds

    # With one group a band's task gathers it itself: no copy of every band is held at once.
    grouped = dict(zip(bands, map_parallel(grouped_band, bands, threads))) if groups > 1 else {}

    def group_codes(task: tuple[int, int]) -> np.ndarray:
        number, group = task
        band_keys, band_docs, bounds = grouped[number] if groups > 1 else grouped_band(number)
        group_keys, group_docs = band_keys[bounds[group]:bounds[group + 1]], band_docs[bounds[group]:bounds[group + 1]]
        # A band's rows joined in shard order are in document order already; a cluster's
        # shuffle mixes them.
        if group_docs.shape[0] > 1 and not bool((group_docs[1:] > group_docs[:-1]).all()):
            order = np.argsort(group_docs, kind="stable")
            group_keys, group_docs = group_keys[order], group_docs[order]
        first, second = bucket_pairs(group_keys, group_docs, window)
        return pair_codes(first, second, span)

    tasks = [(number, group) for number in bands for group in range(groups)]
    return pd.DataFrame({"code": np.concatenate([np.zeros(0, np.uint64), *map_parallel(group_codes, tasks, threads)])})


def band_groups(bands: int, threads: int) -> int:
    """The groups by key to cut each of ``bands`` bands into, so that the bands' groups share
    out evenly over ``threads`` threads (a multiple of them): 3 bands on 2 threads as 6 groups,
    rather than 2 bands and then 1 with a thread idle; 16 bands on 12 threads as 48."""
    return threads // math.gcd(max(bands, 1), threads) if threads > 1 else 1


def likely_part(rows, number: int, at: DocumentsAt, documents: int, width: int, span: np.uint64, threshold: float,
                pinned: int = 0) -> int:
    """Partition ``number`` of the pairs shuffled on their code (bucket_pair_codes): its
    distinct pairs that pass the signature filter (verify.plausible), their signature rows read
    from the shards (DocumentSignatures: ``documents`` rows of ``width`` columns), stored as
    likely part ``number`` (pipeline/pairparts.py). pinned: the leading rows that are an
    index's documents (protocols.Store.pinned), whose pairs of two are left out: they were
    checked when the later one came. Returns how many distinct pairs the partition holds (its
    candidate pairs: the shuffle put every copy of a pair in one partition)."""

    codes = sorted_unique(rows["code"].to_numpy(dtype=np.uint64))
    first, second = decoded_pairs(codes, span)
    if pinned:
        fresh = second >= pinned
        codes, first, second = codes[fresh], first[fresh], second[fresh]
    likely = plausible(DocumentSignatures(at, width, documents), first, second, threshold)
    # Codes ascend: the part is ascending by (first, second).
    write_part(at.work, LIKELY, number, {"first": first[likely], "second": second[likely]})
    return int(codes.shape[0])
