"""Executor: the work-directory store's tasks on a Dask cluster (--scheduler ADDRESS, --workers N, or a
``dask.distributed.Client`` in ``gpudedup.dedup``).

The work directory (workdir.py) is the meeting point: it must be on a file system that the
client and every worker see at the same path (one machine, or a shared mount), as must the
input files. Stages:

- **signatures**: one task per unfinished shard (disk.sign_shard) on the workers; each
  worker makes its own backend (numpy, or CuPy on GPU workers: dask-cuda's LocalCUDACluster
  gives one worker per GPU) and writes the shard's spill into the work directory.
- **candidates**: every shard's band keys become a Dask DataFrame of (band, key, place) rows
  (place: the document's place among the active rows of all shards), shuffled on (band, key)
  so that each bucket of each band lies in one partition; a task per partition pairs the
  bucket members as lsh.bucket_pairs does (input order, the window). The pairs are shuffled
  again, on the pair, so that the copies of a pair found in several bands meet; a task per
  partition keeps each pair once, applies the signature filter to them, reading their
  signature rows from the work directory, and stores those that pass as a part of the work
  directory (engine/pairparts.py). Only a count per partition reaches the client. The pairs
  are exactly those of the single process.
- **verification**: the parts' documents are shuffled on their shard, and a task per
  partition writes the shingle sets of its shards' documents to the work directory (each
  shard read once); a task per part then computes its pairs' exact Jaccard from those sets
  and stores the pairs that reach the threshold as a part. The client gets counts, and then
  Pairs a run in one process kept in its stage are checked as there (a task per shard, a
  task per chunk of pairs).

- **the input rules' id check**: a task per shard hashes its ids; the (hash, row) rows are
  shuffled on the hash, and only the rows whose hashes collide reach the client, which compares
  their ids exactly (disk.repeated_shard_ids); no process holds every id.

- **identical copies**: every shard's row hashes become a Dask DataFrame of (hash, place)
  rows, shuffled on the hash; a task per partition groups the documents with the same
  signature (reading their signature rows from the work directory) into a part, their sets are
  spilled as verification's are, and a task per part checks its groups exactly into a part of
  copies (engine/copyparts.py). The candidates stage's shard tasks get the copies' places by
  a range of shards each; the copies' parts join the verified ones. The client gets counts.

- **clusters**: the connected components of the verified pairs as tasks (engine/components.py),
  the keep decision and the clusters' parts by tasks too (engine/clusterparts.py).

dask and distributed are optional (``pip install 'gpudedup[dask]'``); nothing here is imported without them.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional, Sequence

import numpy as np

from ..errors import ClusterError, GpudedupError, ParameterError

if TYPE_CHECKING:
    from .kept import Kept
    from .workdir import WorkAt


def require_dask():
    try:
        import dask  # noqa: F401
        import dask.dataframe  # noqa: F401
        import distributed  # noqa: F401
    except ImportError:
        raise ParameterError("--scheduler, --workers and client= need Dask: pip install 'gpudedup[dask]'") from None


@contextmanager
def dask_client(client=None, scheduler: Optional[str] = None, workers: Optional[int] = None,
                gpu: bool = False) -> Iterator:
    """The client to run on: ``client`` as given, one connected to ``scheduler``, or a local
    cluster of ``workers`` processes (one per GPU with dask-cuda when ``gpu``), closed after."""
    if client is not None:
        yield client
        return
    require_dask()
    from distributed import Client, LocalCluster

    # The shuffle extension logs every shuffle's start and end at WARNING level; asyncio logs
    # "Task exception was never retrieved" for the client's waits that an interrupt cancels.
    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    logging.getLogger("asyncio").setLevel(logging.CRITICAL + 1)
    try:
        if scheduler is not None:
            with Client(scheduler) as connected:
                yield connected
            return
        if gpu:
            try:
                from dask_cuda import LocalCUDACluster
            except ImportError:
                raise ParameterError("--workers with the GPU backend needs dask-cuda (one worker per GPU): "
                                     "pip install dask-cuda") from None
            cluster = LocalCUDACluster(n_workers=workers)
        else:
            # One thread per worker process: the numpy stages use threads of their own per batch.
            # silence_logs: a task's InputError reaches the user as one line, not the worker's log too.
            # dashboard_address ":0": a free port (None still takes 8787, and warns where another
            # cluster, a notebook's, has it).
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=":0", silence_logs=logging.CRITICAL)
        with cluster, Client(cluster) as local:
            yield local
    except BaseException:
        # An error or an interrupt ends the run: the client's pending waits, cancelled as the
        # cluster closes, would otherwise be logged as tracebacks after the run's one line.
        for name in ("distributed", "tornado"):
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)
        raise


def clear_worker_caches(client, work_dir) -> None:
    """Delete every worker's copies of the work directory ``work_dir`` (a Location; a worker
    keeps them only for one on object storage: workdir.clear_cache). A cluster already gone
    has nothing to clear."""
    from ..io.storage import Remote, full_name
    from .workdir import clear_cache

    if isinstance(work_dir, Remote) and getattr(client, "status", None) == "running":
        try:
            client.run(clear_cache, full_name(work_dir))
        except Exception:  # noqa: BLE001 -- a worker lost at the end: its temporary folder keeps them
            pass


def cluster_failure(stage: str, error: Exception) -> ClusterError:
    return ClusterError(f"the Dask cluster failed during {stage} ({type(error).__name__}: {error}); the finished "
                        "stages are in the work directory: run again with --resume")


def first_error(futures: list, error: GpudedupError) -> GpudedupError:
    """The error of the first task in input order that failed, as one process running the
    tasks in order would meet it (``error``: the one the cluster reported first, maybe of a
    later task). Only the tasks before the first failed one known are waited for."""
    from distributed import wait

    failed = [index for index, future in enumerate(futures) if future.status == "error"]
    if not failed:
        return error
    wait(futures[:failed[0]])
    for future in futures[:failed[0] + 1]:
        raised = future.exception() if future.status == "error" else None
        if isinstance(raised, GpudedupError):
            return raised
    return error


class DaskExecutor:
    """Runs a store's tasks (job.Executor) on ``client``'s workers: the candidate stage and the
    identical-copies grouping as shuffles of what the work directory holds, the signature
    filter as tasks reading its signatures, the connected components as rounds of shuffles
    (engine/components.py), the clusters and the tables by tasks over parts of the work
    directory (engine/clusterparts.py)."""

    in_process = False

    def __init__(self, client):
        self.client = client

    def map(self, task: Callable[..., Any], arguments: Sequence[tuple], stage: str) -> list:
        """The tasks' results; an error of ours raised in a task comes back as it is, a failure
        of the cluster itself (a worker lost, a connection closed) as one ClusterError."""
        assert all(len(a) == len(arguments[0]) > 0 for a in arguments), "every task takes arguments, as many"
        futures: list = []
        try:
            sent = scattered(self.client, arguments)
            # One message for all the tasks (client.map), rather than one per task (submit).
            futures = self.client.map(task, *zip(*sent), pure=False) if sent else []
            return self.client.gather(futures)
        except GpudedupError as error:
            raise first_error(futures, error) from None
        except Exception as error:  # noqa: BLE001 -- distributed's many failure types
            raise cluster_failure(stage, error) from None

    def connected(self) -> bool:
        return getattr(self.client, "status", None) == "running"

    def clusters(self, store, verified, policy):
        """job.Executor.clusters as tasks: the connected components as rounds of shuffles
        (engine/components.py), then the keep decision and the parts by two more
        (engine/clusterparts.py); the client gets counts. store: a disk.WorkDirStore (pinned
        0: a run against an index clusters in its own process, IndexStore.array_executor)."""
        from . import clusterparts, components

        labels = components.dask_component_labels(self.client, verified.first, verified.second,
                                                  components.PAIRS_PER_PART, store.documents, verified.parts)
        ranges = self.code_partitions(store.shards.count)
        return clusterparts.dask_clusters(self.client, labels, store.documents, ranges, store.work.location,
                                          store.lengths_at(), store.ids_at(), policy, store.pinned)

    def colliding_rows(self, task: Callable[..., Any], arguments: Sequence[tuple], stage: str) -> np.ndarray:
        """job.Executor.colliding_rows as a shuffle: the tasks' (hash, row) frames shuffled on
        the hash, so that equal hashes share a partition; each partition gives back its rows
        whose hash repeats, and only those reach the client."""
        import dask

        parts = [dask.delayed(task)(*a) for a in scattered(self.client, arguments)]
        if not parts:
            return np.zeros(0, np.int64)
        shared = shuffled_map(parts, {"hash": "uint64", "row": "int64"}, ["hash"], hash_sharing_rows, (),
                              {"row": "int64"}, stage)
        return np.sort(shared["row"].to_numpy(np.int64))

    def likely_pairs(self, store, copies, window: int, threshold: float, backend, keep_every: bool = False):
        """job.Executor.likely_pairs as two shuffles (the module docstring's candidates): the
        client gets a count per partition, not every candidate pair, nor the copies (each
        shard's task gets their places by its range of shards: copyparts.range_places).
        store: a disk.WorkDirStore, whose pinned is 0 (its shards' band keys and signatures are
        read by the tasks; a store whose arrays tasks cannot read gives its runs LocalExecutor
        here: Store.array_executor)."""
        import dask

        from ..core.lsh import pair_code_span
        from . import components, copyparts
        from .job import LikelyPairs, held_out_of_lsh

        if keep_every:
            raise ParameterError("every candidate pair is kept only by a run in one process (an evaluation)")
        root, starts, width = store.work.location, store.shards.active_starts, store.signatures.shape[1]
        count = store.shards.count
        # Copies held here (a stage a run in one process kept) are left out as the input rules' rows are.
        out_of_lsh = held_out_of_lsh(store, copies)
        copy_places: list = [None] * count
        if copies.parts is not None and copies.count:
            # (every part's task reads the offsets: sent once, not in each)
            starts_at = scatter_once(self.client, [starts], broadcast=True)[0]
            shard_starts, places = copyparts.range_places(copies.parts, count, self.code_partitions(count), starts_at,
                                                          components.PAIRS_PER_PART)
            copy_places = [places[r] for r in np.searchsorted(shard_starts, np.arange(count), side="right") - 1]
        keys_sent = scattered(self.client, [(root, index, int(starts[index]), out)
                                            for index, out in store.band_key_parts(out_of_lsh)])
        parts = [dask.delayed(band_key_rows)(*a, copy_places[a[1]]) for a in keys_sent]
        empty = np.zeros(0, np.int64)
        if not parts:
            return LikelyPairs(empty, empty, 0, empty, empty)
        span = pair_code_span(int(starts[-1]))  # pairs (a, b) of places as codes a * span + b
        # Every (band, key) bucket in one partition, then every copy of a pair in one partition.
        codes = shuffled(parts, {"band": "int32", "key": "uint64", "place": "int64"}, ["band", "key"]).map_partitions(
            bucket_pair_codes, window, span, meta=frame_of({"code": "uint64"}))
        codes = codes.shuffle(on="code", npartitions=self.code_partitions(len(parts)))
        # Each partition's pairs that pass the filter stay in the work directory, a part each.
        sent = scattered(self.client, [(part, number, root, store.shards.rows, starts, store.rows, width, span,
                                        threshold) for number, part in enumerate(codes.to_delayed())])
        candidates = computed([dask.delayed(likely_part)(*a) for a in sent], "the candidate shuffle")
        return LikelyPairs(empty, empty, sum(candidates), empty, empty, parts=len(candidates))

    def checked_pairs(self, store, likely, copies, threshold: float, exact: Callable):
        """job.Executor.checked_pairs of likely pairs kept in parts (engine/pairparts.py): the
        parts' documents shuffled on their shard, a task per partition spilling its shards'
        sets, then a task per part checking its pairs into a verified part; the client gets
        counts. Pairs in memory (a stage a run in one process kept) are checked as there, by
        tasks (Store.exact_jaccard). store: a disk.WorkDirStore."""
        from ..core.copies import Copies
        from . import pairparts
        from .job import CheckedPairs, checked_in_memory
        from .signatures import batch_bytes

        if not likely.parts:
            return checked_in_memory(store, likely, copies, exact)
        root, shard_rows, rows = store.work.location, store.shards.rows, store.rows
        self.spill_documents(store, pairparts.LIKELY, list(range(likely.parts)), pairparts.SPILL)
        # Chunks of pairs as in one process (disk.exact_by_spill).
        chunk_bytes = 8 * batch_bytes(store.params, store.backend)
        counts = self.map(pairparts.check_part, [(root, number, shard_rows, rows, threshold, chunk_bytes)
                                                 for number in range(likely.parts)], "exact verification")
        checked, rejected = (np.array(column, np.int64).reshape(-1) for column in zip(*counts))
        held = copies if copies.parts is None else Copies.none()
        return CheckedPairs(held.first, held.member, held.jaccard, likely.candidates, int(checked.sum()),
                            int(rejected.sum()), part_sizes=checked - rejected,
                            copy_sizes=copies.part_sizes)

    def spill_documents(self, store, kind: str, numbers: list[int], spill: str) -> None:
        """The shingle sets of the documents of the ``kind`` pairs' parts ``numbers``, spilled
        under WORK/sets/<spill>/: the parts' documents shuffled on their shard, and a task per
        partition spilling those of its shards (pairparts.spill_part_documents: each shard read
        once). store: a disk.WorkDirStore."""
        import dask

        from . import pairparts

        if not numbers:
            return
        root, shard_rows = store.work.location, store.shards.rows
        sent = scattered(self.client, [(root, kind, number, shard_rows, store.rows) for number in numbers])
        documents = [dask.delayed(pairparts.part_documents)(*a) for a in sent]
        backend = store.task_backend(self)
        # Every partition's task reads the same reader, offsets and parameters: sent once.
        shared = scatter_once(self.client, [root, store.reader, shard_rows, store.params], broadcast=True)
        computed([shuffled(documents, {"shard": "int64", "row": "int64"}, ["shard"]).map_partitions(
            pairparts.spill_part_documents, spill, *shared, backend, meta=frame_of({"shards": "int64"}))],
            "the shingle sets")

    def write_pairs(self, pairs, clustered, folder, id_type) -> None:
        """The pairs table's parts (layout.table_parts of the pairs in the table's order, as
        result.pairs_parts makes them) written into ``folder`` (a Location) by tasks, the
        client holding none of the pairs or their ids: a task per place the pairs lie (the
        copies held here, each verified part) makes them a frame, two lookups (the pairs set on
        one document, then the other, by the rows of the clusters' parts ``clustered``: their
        ranks and ids, clusterparts.named_end) name them, Dask sorts them by the ids' ranks (a
        range partition from a sample), and a task per part of the table writes it from the
        slices of the sorted partitions that hold its rows (result.write_pairs_part; id_type:
        the ids' wide type): the parts are those of one process. Up to
        components.PAIRS_PER_PART pairs (the components' part size) one task names and sorts
        them all (clusterparts.named_pairs), and a task per part writes it."""
        import dask
        import dask.dataframe as dd
        import pyarrow as pa

        from ..io.layout import part_name, table_parts
        from ..io.storage import child_name
        from ..result import write_pairs_part
        from . import components
        from .clusterparts import in_id_order, named_end, named_pairs

        stage = "writing the pairs"
        if pairs.count == 0:  # (nothing to sort: Dask's sort samples its rows) the one empty part
            write_pairs_part([], id_type, child_name(folder, part_name(0)))
            return
        frames = self.pair_frames(pairs)
        if pairs.count <= components.PAIRS_PER_PART:  # (as the components: one task, where they fit one)
            ordered = dask.delayed(named_pairs)(frames, clustered, id_type)
            writes = [dask.delayed(write_pairs_part)([(ordered, start, start + length)], id_type,
                                                     child_name(folder, part_name(number)))
                      for number, (start, length) in enumerate(table_parts(pairs.count))]
            computed(writes, stage)
            forget_messages(self.client)
            return
        id_dtype = "int64" if pa.types.is_integer(id_type) else "str"
        named_a = {"b": "int64", "jaccard": "float64", "rank_a": "int64", "id_a": id_dtype}
        named_b = {"jaccard": "float64", "rank_a": "int64", "id_a": id_dtype, "rank_b": "int64", "id_b": id_dtype}
        columns = {"rank_a": "int64", "rank_b": "int64", "id_a": id_dtype, "id_b": id_dtype, "jaccard": "float64"}
        try:
            rows = dd.from_delayed(frames, meta=frame_of(PAIR_FRAME), verify_meta=False)
            rows = rows.set_index("a", divisions=clustered.divisions).map_partitions(
                named_end, "a", clustered, meta=frame_of(named_a))
            rows = rows.set_index("b", divisions=clustered.divisions).map_partitions(
                named_end, "b", clustered, meta=frame_of(named_b))
            # Named once (persisted): the sort reads its input twice, for its sample and to sort.
            ranked = rows.map_partitions(in_id_order, meta=frame_of(columns)).persist()
            ordered = ranked.sort_values(["rank_a", "rank_b"]).persist()
        except Exception as error:  # noqa: BLE001 -- as in computed
            raise cluster_failure(stage, error) from None
        sorted_parts = ordered.to_delayed()
        lengths = computed([dask.delayed(len)(part) for part in sorted_parts], stage)
        offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)])
        writes = []
        for number, (start, length) in enumerate(table_parts(int(offsets[-1]))):
            stop = start + length
            # The sorted partitions that hold rows start .. stop-1, each one's slice of them.
            first, last = np.searchsorted(offsets, start, side="right") - 1, np.searchsorted(offsets, stop)
            pieces = [(sorted_parts[index], max(start - int(offsets[index]), 0),
                       min(stop, int(offsets[index + 1])) - int(offsets[index])) for index in range(first, last)
                      if length and index < len(sorted_parts)]
            writes.append(dask.delayed(write_pairs_part)(pieces, id_type, child_name(folder, part_name(number))))
        computed(writes, stage)
        forget_messages(self.client)  # (a result written after its run: the sorted pairs go when this returns)

    def pairs_inside(self, pairs, clustered, numbers: np.ndarray, asked_a: np.ndarray, asked_b: np.ndarray) -> list:
        """job.Executor.pairs_inside by tasks: with the clusters in parts (engine/clusterparts.py),
        a task per place the pairs lie makes them a frame, Dask sets them on their first
        document by the clusters' ranges, and a task per range reads the members of its rows
        from the range's part (clusterparts.pairs_inside_part); up to
        components.PAIRS_PER_PART pairs one task reads them all (pairs_inside_all). The client
        gets a few numbers per range, not the members. Clusters held go as in one process."""
        import dask
        import dask.dataframe as dd

        from . import clusterparts, components
        from .clusterparts import ClusterParts
        from .job import LocalExecutor

        if not isinstance(clustered, ClusterParts):
            return LocalExecutor().pairs_inside(pairs, clustered, numbers, asked_a, asked_b)
        stage = "counting the pairs of the largest clusters"
        frames = self.pair_frames(pairs)
        if pairs.count <= components.PAIRS_PER_PART:
            return computed([dask.delayed(clusterparts.pairs_inside_all)(frames, clustered, numbers, asked_a,
                                                                           asked_b)], stage)
        try:
            rows = dd.from_delayed(frames, meta=frame_of(PAIR_FRAME), verify_meta=False).set_index(
                "a", divisions=clustered.divisions)
        except Exception as error:  # noqa: BLE001 -- as in computed
            raise cluster_failure(stage, error) from None
        # Every range's task reads the same parts' description (a count per range): sent once.
        shared = scatter_once(self.client, [clustered, numbers, asked_a, asked_b], broadcast=True)
        return computed([dask.delayed(clusterparts.pairs_inside_part)(part, number, *shared)
                         for number, part in enumerate(rows.to_delayed())], stage)

    def pair_frames(self, pairs) -> list:
        """The verified ``pairs`` (job.VerifiedPairs) as Dask delayed pandas DataFrames of
        PAIR_FRAME, a task per place they lie (those held, each stored part: job.pair_sources)."""
        import dask

        from .job import pair_sources
        from .pairparts import on_pairs, pair_frame

        sent = scattered(self.client, [(pair_frame, *source) for source in pair_sources(pairs)])
        return [dask.delayed(on_pairs)(*a) for a in sent]

    def code_partitions(self, shards: int) -> int:
        """Partitions of the candidate shuffle's second round: one per SHARDS_PER_CODE_PARTITION
        shards, but at least one per worker (where there are as many shards), so that every
        worker filters."""
        workers = len(self.client.scheduler_info().get("workers", {}))
        return min(shards, max(-(-shards // SHARDS_PER_CODE_PARTITION), workers, 1))

    def copies(self, store, executor, progress):
        """job.Executor.copies by tasks (engine/copyparts.py): the row hashes shuffled on the
        hash, a task per partition storing its same-signature groups as a part, their
        documents' sets spilled (spill_documents), and a task per part that holds groups
        checking them into a part of copies. The client gets a count per part (not a hash
        per document, nor a pair per group or copy). store: a disk.WorkDirStore; executor: this."""
        import dask

        from ..core.copies import Copies
        from . import copyparts
        from .pairparts import COPIES, GROUPS

        root, starts, shard_rows = store.work.location, store.shards.active_starts, store.shards.rows
        sent = scattered(self.client, [(root, index, int(starts[index]), array)
                                       for index, array in store.row_hash_parts()])
        parts = [dask.delayed(row_hash_rows)(*a) for a in sent]
        if not parts:
            return Copies.none()
        progress.start("Checking identical copies", len(parts))
        # Every partition's task reads the same offsets, rows and work directory: sent once, not in each.
        shared = scatter_once(self.client, [root, starts, shard_rows, store.rows], broadcast=True)
        grouped = shuffled(parts, {"hash": "uint64", "spilled": "int64"}, ["hash"]).to_delayed()
        groups = computed([dask.delayed(copyparts.group_part)(part, number, *shared, store.signatures.shape[1])
                           for number, part in enumerate(grouped)], "the identical-copies shuffle")
        holding = np.flatnonzero(groups).tolist()
        self.spill_documents(store, GROUPS, holding, copyparts.SPILL)
        lengths = store.lengths_at()  # (one object: sent once)
        found = self.map(copyparts.check_groups, [(root, number, shard_rows, store.rows, lengths, store.copy_batch_cost)
                                                for number in holding], "checking identical copies")
        sizes = np.zeros(len(groups), np.int64)
        sizes[holding] = found
        progress.advance(len(parts))
        empty = np.zeros(0, np.int64)
        return Copies(empty, empty, np.zeros(0, np.float64), store.pair_parts(COPIES, len(groups), sizes))


PAIR_FRAME = {"a": "int64", "b": "int64", "jaccard": "float64"}  # (pairparts.pair_frame's columns)
# Shards per partition of the candidate shuffle's second round (the first has one per shard).
# Its rows are a pair code (8 B) per pair and band that found it: on the Linux sources about
# 3 candidate pairs per document, against the first round's 16 band-key rows of 20 B, so its
# partitions stay about the size of the first round's, in fewer tasks (a task per shard costs
# seconds of scheduling on runs of many small shards).
SHARDS_PER_CODE_PARTITION = 8


def shuffled(parts: list, columns: dict[str, str], on: list[str]):
    """The rows of ``parts`` (delayed pandas DataFrames of ``columns``: name -> dtype) as a
    Dask DataFrame shuffled on the columns ``on``, so that rows with equal values share a
    partition (as many partitions as parts: each about the size of one part); lazy."""
    import dask.dataframe as dd

    return dd.from_delayed(parts, meta=frame_of(columns), verify_meta=False).shuffle(
        on=on, npartitions=max(len(parts), 1))


def shuffled_map(parts: list, columns: dict[str, str], on: list[str], function: Callable, arguments: tuple,
                 result_columns: dict[str, str], stage: str):
    """``function(partition, *arguments)`` (a DataFrame of ``result_columns``) on each
    partition of shuffled(parts, columns, on), computed: one pandas DataFrame, in the client.
    A failure of the cluster is one ClusterError naming ``stage``."""
    mapped = shuffled(parts, columns, on).map_partitions(function, *arguments, meta=frame_of(result_columns))
    return computed([mapped], stage)[0]


def computed(collections: list, stage: str) -> list:
    """The results of Dask ``collections`` (delayed values, DataFrames), computed together on
    the default client (the run's). An error of ours raised in a task comes back as it is
    (as in DaskExecutor.map), a failure of the cluster as one ClusterError naming ``stage``."""
    import dask

    try:
        return list(dask.compute(*collections))
    except GpudedupError:
        raise
    except Exception as error:  # noqa: BLE001 -- as in DaskExecutor.map
        raise cluster_failure(stage, error) from None


def scattered(client, arguments: Sequence[tuple]) -> list[tuple]:
    """Tasks' arguments with what is sent apart (``sent_apart``) sent to the workers first
    and replaced by their futures (a value given twice is sent once): the numpy
    arrays (an argument, or an item of a list or tuple argument), and every other value that
    two or more tasks share (the same object), but for scalars, strings, lists and tuples.
    Tasks made of them carry references, not values, for three reasons:

    - what every task shares (the shard reader, which describes every shard; the per-shard
      offsets) would travel once per task: O(shards) bytes in each of O(shards) messages,
      growing with the square of the shards (scripts/bench_task_bytes.py; docs/performance.md,
      "What a Dask run's tasks carry");
    - a task graph holding a document's worth of arrays per shard passes distributed's warning
      size at a few million documents;
    - the client keeps its last messages to the scheduler (distributed.admin.low-level-log-length:
      1000 by default), so that a value sent inside a message stays in the client's memory long
      after its task is done."""
    apart, shared = sent_apart(arguments)
    if not apart:
        return [tuple(values) for values in arguments]
    # What every task reads goes to every worker at once, rather than from worker to worker as
    # the tasks start; a task's own array to one worker (where the scheduler then runs it).
    futures: dict[int, Any] = {}
    for keys, broadcast in (([key for key in apart if key in shared], True),
                            ([key for key in apart if key not in shared], False)):
        futures.update(zip(keys, scatter_once(client, [apart[key] for key in keys], broadcast)))

    def sent(value):
        if id(value) in futures:
            return futures[id(value)]
        if type(value) in (list, tuple):
            return type(value)(futures.get(id(item), item) for item in value)
        return value

    return [tuple(sent(value) for value in values) for values in arguments]


def forget_messages(client) -> None:
    """Empty the client's log of its last messages to the scheduler (distributed's
    low-level log, distributed.admin.low-level-log-length), once a run is over: the task graphs
    in it name the futures of what the run sent apart (scattered, scatter_once) and persisted,
    so that those values stayed on the workers after the run, a run's worth more after each on
    a long-lived cluster (8 values a run, until a log's last 1,000 messages roll over). The
    logs are a record for debugging the connections; cancelling the futures instead trips the
    scheduler's own checks where a cancelled value still has dependents in memory."""
    comms = [getattr(client, "scheduler_comm", None)]
    # A scheduler in this process (a LocalCluster's: --workers, and the tests) keeps such logs
    # of its own messages to the workers and clients, which hold the same graph objects.
    scheduler = getattr(getattr(client, "cluster", None), "scheduler", None)
    for streams in (getattr(scheduler, "stream_comms", {}), getattr(scheduler, "client_comms", {})):
        comms.extend(streams.values())
    for comm in comms:
        log = getattr(comm, "recent_message_log", None)
        if log is not None:
            log.clear()


def scatter_once(client, values: list, broadcast: bool) -> list:
    """Futures of ``values`` sent to the workers (to every one where ``broadcast``), each under
    a key of its own (hash=False): keys named by content would make a stage that sends what
    the last one sent (the reader, again) depend on that data being freed just then, and its
    tasks fail as having lost their dependencies (dask/distributed#8576)."""
    return client.scatter(values, broadcast=broadcast, hash=False) if values else []


def sent_apart(arguments: Sequence[tuple]) -> tuple[dict[int, Any], set[int]]:
    """The values among tasks' arguments that ``scattered`` sends apart, by id: numpy arrays
    (an argument, or an item of a list or tuple argument), and the other arguments that are the
    same object in two or more tasks, but for scalars, strings, lists and tuples (only the arrays
    in them), and Dask's own objects (futures, delayed values); and the ids of those that two or
    more tasks share."""
    apart: dict[int, Any] = {}
    tasks_of: dict[int, int] = {}
    for values in arguments:
        mine: dict[int, Any] = {}  # this task's, each once
        for value in values:
            if type(value) in (list, tuple):
                mine.update((id(item), item) for item in value if isinstance(item, np.ndarray))
            elif isinstance(value, np.ndarray) or not (
                    value is None or isinstance(value, (bool, int, float, complex, str, bytes, np.generic))
                    or type(value).__module__.split(".")[0] in ("dask", "distributed")):
                mine[id(value)] = value
        for key, value in mine.items():
            tasks_of[key] = tasks_of.get(key, 0) + 1
            if isinstance(value, np.ndarray) or tasks_of[key] == 2:
                apart[key] = value
    return apart, {key for key in apart if tasks_of[key] > 1}


def message_bytes(message) -> int:
    """The bytes of a distributed message as it goes out (for counting what tasks carry:
    tests/test_dask.py, scripts/bench_task_bytes.py): a part to be pickled (a task graph) as
    pickled, serialized frames as they are, containers as the sum of their items, anything
    else 8."""
    from distributed.protocol import pickle
    from distributed.protocol.serialize import Serialized, ToPickle

    if isinstance(message, ToPickle):
        return len(pickle.dumps(message.data))
    if isinstance(message, Serialized):
        return sum(memoryview(frame).nbytes for frame in message.frames)
    if isinstance(message, dict):
        return sum(message_bytes(value) for value in message.values())
    if isinstance(message, (list, tuple)):
        return sum(message_bytes(value) for value in message)
    return len(message) if isinstance(message, (str, bytes)) else 8


def frame_of(dtypes: dict[str, str]):
    """An empty pandas DataFrame of the columns ``dtypes`` (name -> dtype): a Dask meta."""
    import pandas as pd

    return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in dtypes.items()})


# --- tasks (module-level, so that workers import them rather than unpickle code) --------------


def hash_sharing_rows(rows):
    """The rows (a DataFrame of "row") of one shuffled partition of (hash, row) rows whose hash
    another row of it has (job.rows_sharing_hash)."""
    import pandas as pd

    from .job import rows_sharing_hash

    return pd.DataFrame({"row": rows_sharing_hash(rows["hash"].to_numpy(np.uint64), rows["row"].to_numpy(np.int64))})


def row_hash_rows(work_at: WorkAt, index: int, first_spilled: int, positions: Optional[np.ndarray]):
    """One shard's row hashes as (hash uint64, spilled int64) rows for the active documents
    the run keeps: positions, the run's position of each of the shard's spilled active rows
    (-1: left out by the input rules; None: none was); spilled, its place among the active
    rows of all shards (first_spilled: the shard's first)."""
    import pandas as pd

    from .workdir import WorkDir

    hashes = np.asarray(WorkDir.attach(work_at).shard_array(index, "row_hash"))
    kept = np.arange(hashes.shape[0], dtype=np.int64) if positions is None else np.flatnonzero(positions >= 0)
    return pd.DataFrame({"hash": hashes[kept], "spilled": first_spilled + kept})


def band_key_rows(work_at: WorkAt, index: int, first_place: int, out_of_lsh: np.ndarray,
                  copy_places: Optional[np.ndarray] = None):
    """One shard's band keys as (band int32, key uint64, place int64) rows, for the documents
    that take part in LSH (all the shard's spilled active rows but those at out_of_lsh: int64,
    places within the shard, and the copies among copy_places: int64 ascending places among
    the spilled active rows of all shards, of this shard and maybe others); place: the row's
    place among the spilled active rows of all shards (first_place: the shard's first), which
    orders the documents as their corpus rows do."""
    import pandas as pd

    from .kept import Kept
    from .workdir import WorkDir

    keys = np.asarray(WorkDir.attach(work_at).shard_array(index, "keys"))
    if copy_places is not None:
        mine = copy_places[np.searchsorted(copy_places, first_place):
                           np.searchsorted(copy_places, first_place + keys.shape[1])]
        out_of_lsh = np.union1d(out_of_lsh, mine - first_place)
    keep = Kept.leaving_out(out_of_lsh).mask(0, keys.shape[1])
    keys = keys[:, keep]  # (bands, m')
    bands, members = keys.shape
    return pd.DataFrame({"band": np.repeat(np.arange(bands, dtype=np.int32), members),
                         "key": keys.reshape(-1), "place": np.tile(first_place + np.flatnonzero(keep), bands)})


def bucket_pair_codes(rows, window: int, span: np.uint64):
    """Candidate pairs of one shuffled partition of band_key_rows, as codes a * span + b of
    places: per band, the partition's rows in document order go through lsh.bucket_pairs, which
    pairs each bucket's members in input order within the window, as the single process does.
    A pair found in several bands is here as often."""
    import pandas as pd

    from ..core.lsh import bucket_pairs, pair_codes

    rows = rows.sort_values(["band", "place"], kind="stable")
    band = rows["band"].to_numpy()
    keys = rows["key"].to_numpy(dtype=np.uint64)
    docs = rows["place"].to_numpy(dtype=np.int64)
    codes = [np.zeros(0, np.uint64)]
    bounds = np.flatnonzero(np.diff(band)) + 1
    for start, stop in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [band.shape[0]]])):
        first, second = bucket_pairs(keys[start:stop], docs[start:stop], window)
        codes.append(pair_codes(first, second, span))
    return pd.DataFrame({"code": np.concatenate(codes)})


def likely_part(rows, number: int, work_at: WorkAt, shard_rows: np.ndarray, active_starts: np.ndarray,
                documents: Kept, width: int, span: np.uint64, threshold: float) -> int:
    """Partition ``number`` of the pairs shuffled on their code (bucket_pair_codes): its
    distinct pairs that pass the signature filter, their signature rows read from the shards
    (disk.spilled_plausible), stored as likely part ``number`` (engine/pairparts.py) as the
    rows of their documents (shard_rows, active_starts: disk.Shards'; documents: the spilled
    rows that are documents, disk.ShardDocuments.rows). Returns how many distinct pairs the
    partition holds (its candidate pairs: the shuffle put every copy of a pair in one
    partition)."""
    from ..core.lsh import decoded_pairs, sorted_unique
    from .disk import Shards, rows_at_places, spilled_plausible
    from .pairparts import LIKELY, write_part

    codes = sorted_unique(rows["code"].to_numpy(dtype=np.uint64))
    places = decoded_pairs(codes, span)
    likely = spilled_plausible(work_at, active_starts, width, *places, threshold)
    # Codes ascend, and rows ascend with places: the part is ascending by (first, second).
    shards = Shards.at(work_at, active_starts, shard_rows)
    first, second = (rows_at_places(shards, documents, side[likely]) for side in places)
    write_part(work_at, LIKELY, number, {"first": first, "second": second})
    return int(codes.shape[0])
