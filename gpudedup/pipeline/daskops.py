"""Dask's side of a run on Dask, shared by the stages that run there: the executor
(DaskExecutor), the client (dask_client), what the stages' tasks share sent once (share), one ClusterError for a failure
of the cluster itself (cluster_failures, computed), shuffles of pandas frames (shuffled)
and the row ranges that partitions are set on (range_starts).

dask and distributed are optional (``pip install 'gpudedup[dask]'``): every import of them is
inside the function that needs them, so that this module imports without them.
"""

from __future__ import annotations

import logging
import signal
from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np

from ..errors import ClusterError, GpudedupError, ParameterError
from ..io.commit import signals_held
from ..io.credentials import is_full_disk
from ..io.storage import Remote, full_name
from ..memory import release_unused_memory
from ..threads import HOST_THREADS
from .workfolders import clear_cache


class DaskExecutor:
    """Runs a store's tasks (protocols.Executor) on ``client``'s workers, or without a client on
    Dask's local scheduler (dask_client: the tasks in this process, one after another, each
    with every core); the stages over its work directory are dask.DaskStages."""

    def __init__(self, client=None):
        self.client = client
        self.in_process = client is None  # (Dask's local scheduler: dask_client)
        self.task_threads = HOST_THREADS if self.in_process else 1  # (protocols.Executor)

    def map(self, task: Callable[..., Any], arguments: Sequence[tuple], stage: str) -> list:
        """The tasks' results; an error of ours raised in a task comes back as it is, a failure
        of the cluster itself (a worker lost, a connection closed) as one ClusterError."""
        assert all(len(a) == len(arguments[0]) > 0 for a in arguments), "every task takes arguments, as many"
        futures: list = []
        if self.client is None:  # (the first error in input order, as first_error puts a cluster's)
            return [task(*values) for values in arguments]
        with cluster_failures(stage):
            try:
                sent = arrays_sent(self.client, arguments)
                # One message for all the tasks (client.map), rather than one per task (submit).
                futures = self.client.map(task, *zip(*sent), pure=False) if sent else []
                return self.client.gather(futures)
            except GpudedupError as error:
                raise first_error(futures, error) from None

    def share(self, *values: Any) -> tuple:
        """protocols.Executor.share: futures of ``values``, sent to every worker once (daskops.share)."""
        return tuple(share(self.client, *values))

    def shuffle_partitions(self, parts: int) -> int:
        """Partitions of a first-round shuffle of ``parts`` parts (one per shard): as many on a
        cluster; on the local scheduler as code_partitions cuts, since there a partition per
        shard makes a unit of files per shard and stage, each a round of requests to a work
        directory on object storage."""
        return parts if self.client is not None else 1

    def code_partitions(self, shards: int) -> int:
        """Partitions of the candidate shuffle's second round: one per SHARDS_PER_CODE_PARTITION
        shards, but at least one per worker (where there are as many shards), so that every
        worker filters."""
        if self.client is None:
            return 1
        return min(shards, max(-(-shards // SHARDS_PER_CODE_PARTITION), worker_count(self.client), 1))


# Shards per partition of the candidate shuffle's second round (the first has one per shard).
# Its rows are a pair code (8 B) per pair and band that found it: on the Linux sources about
# 3 candidate pairs per document, against the first round's 16 band-key rows of 20 B, so its
# partitions stay about the size of the first round's, in fewer tasks (a task per shard costs
# seconds of scheduling on runs of many small shards).
SHARDS_PER_CODE_PARTITION = 8


def require_dask(distributed: bool = True):
    """Refuse a run on Dask where Dask is not installed: its dataframes always (a dependency
    of gpudedup), and ``distributed`` for a cluster (the dask extra)."""
    try:
        import dask  # noqa: F401
        import dask.dataframe  # noqa: F401
    except ImportError:
        raise ParameterError("a run with work_dir= runs on Dask: pip install 'dask[dataframe]'") from None
    if distributed:
        try:
            import distributed as _  # noqa: F401
        except ImportError:
            raise ParameterError("scheduler=, workers= and client= need Dask: pip install 'gpudedup[dask]'") from None


# Dask's settings for a run without a cluster: its threaded scheduler, and shuffles as tasks
# in memory (the local default, "disk", writes every shuffle's rows through partd files).
LOCAL_SCHEDULER = {"scheduler": "threads", "dataframe.shuffle.method": "tasks"}


@contextmanager
def dask_client(client=None, scheduler: Optional[str] = None, workers: Optional[int] = None,
                gpu: bool = False) -> Iterator:
    """The client to run on: ``client`` as given, one connected to ``scheduler``, a local
    cluster of ``workers`` processes (one per GPU with dask-cuda when ``gpu``), closed after;
    or, given none of them, None: Dask's local scheduler, the run's tasks on this process's
    threads (LOCAL_SCHEDULER).

    A client and a scheduler keep their last messages (distributed.admin.low-level-log-length,
    1,000 by default), and a run's messages name the futures of what it shares and persists, so
    that those values would stay on the workers after the run, a run's worth more after each.
    The clients and clusters made here keep none (the log is for debugging connections); a
    user's client keeps its configuration (docs/scale.md says how to set it)."""
    if client is not None:
        yield client
        return
    if scheduler is None and workers is None:
        require_dask(distributed=False)
        import dask

        with dask.config.set(LOCAL_SCHEDULER):
            yield None
        return
    require_dask()
    import dask

    # The shuffle extension logs every shuffle's start and end at WARNING level; asyncio logs
    # "Task exception was never retrieved" for the client's waits that an interrupt cancels.
    logging.getLogger("distributed.shuffle").setLevel(logging.ERROR)
    logging.getLogger("asyncio").setLevel(logging.CRITICAL + 1)
    try:
        with dask.config.set({"distributed.admin.low-level-log-length": 0}), \
                own_client(scheduler, workers, gpu) as connected:
            yield connected
    except BaseException:
        # An error or an interrupt ends the run: the client's pending waits, cancelled as the
        # cluster closes, would otherwise be logged as tracebacks after the run's one line.
        for name in ("distributed", "tornado"):
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)
        raise


@contextmanager
def own_client(scheduler: Optional[str], workers: Optional[int], gpu: bool) -> Iterator:
    """dask_client's client of its own: connected to ``scheduler``, or of a local cluster."""
    from distributed import Client, LocalCluster

    if scheduler is not None:
        try:
            connected = Client(scheduler)
        except (OSError, ValueError, TypeError) as error:  # (refused, timed out; an address of no protocol)
            raise ParameterError(f"cannot connect to the Dask scheduler at {scheduler} ({error}); start it "
                                 "(dask scheduler) or give its address as it prints it") from None
        with connected:
            yield connected
        return
    if gpu:
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            raise ParameterError("workers= with backend='gpu' needs dask-cuda (one worker per GPU): "
                                 "pip install dask-cuda") from None
        def start():
            return LocalCUDACluster(n_workers=workers, preload=[__name__])
    else:
        # One thread per worker process: the numpy stages use threads of their own per batch.
        # silence_logs: a task's InputError reaches the user as one line, not the worker's log too.
        # dashboard_address ":0": a free port (None still takes 8787, and warns where another
        # cluster, a notebook's, has it). preload: dask_setup below, in each worker.
        def start():
            return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                                silence_logs=logging.CRITICAL, preload=[__name__])
    with ExitStack() as started:
        with terminal_signals_held():  # (a signal held meanwhile is raised with the cluster entered)
            cluster = started.enter_context(start())
        yield started.enter_context(Client(cluster))


# The signals a terminal sends its whole process group: Ctrl-C, and a closed terminal.
TERMINAL_SIGNALS = {getattr(signal, name) for name in ("SIGINT", "SIGHUP") if hasattr(signal, name)}


@contextmanager
def terminal_signals_held() -> Iterator[None]:
    """Hold Ctrl-C and a closed terminal back from this process while a local cluster starts,
    and from the processes it starts (the resource tracker, the workers): they inherit the
    mask (the threads this one starts take its own), so that a worker still importing, before
    dask_setup makes it ignore them, does not die printing a traceback of its own, nor the
    tracker end with a closed terminal. This process gets such a signal once the cluster is up
    (commit.signals_held: one that another of its threads takes meanwhile is noted, then
    delivered), and the run ends as it does any time after."""
    # The process the workers' spawn starts first, started here: it ignores SIGINT and SIGTERM
    # itself, not a closed terminal; and it unblocks SIGINT and SIGTERM in the thread that
    # starts it as it returns.
    from multiprocessing import resource_tracker  # (start-up: a run in memory starts no process)

    with signals_held():
        if not hasattr(signal, "pthread_sigmask"):  # (Windows: no masks, nor process groups)
            resource_tracker.ensure_running()
            yield
            return
        before = signal.pthread_sigmask(signal.SIG_BLOCK, TERMINAL_SIGNALS)
        try:
            resource_tracker.ensure_running()
            signal.pthread_sigmask(signal.SIG_BLOCK, TERMINAL_SIGNALS)  # (again: the tracker's start unblocked some)
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)  # (one held on this thread is noted now)


def dask_setup(worker) -> None:
    """Dask's preload hook, run in each worker of the local cluster own_client starts, as the
    worker starts. Ctrl-C and a closed terminal signal every process of the terminal's group:
    the run's own process ends the run (one line; closing the cluster stops the workers), so
    the workers ignore SIGINT and SIGHUP rather than each print a traceback of their own."""
    for name in ("SIGINT", "SIGHUP"):
        if hasattr(signal, name):  # (Windows has no SIGHUP)
            signal.signal(getattr(signal, name), signal.SIG_IGN)


def clear_worker_caches(client, work_dir) -> None:
    """Delete every worker's copies of the work directory ``work_dir`` (a Location; a worker
    keeps them only for one on object storage: workfolders.clear_cache). A cluster already gone
    has nothing to clear."""

    if isinstance(work_dir, Remote) and getattr(client, "status", None) == "running":
        try:
            client.run(clear_cache, full_name(work_dir))
        except Exception:  # noqa: BLE001 -- a worker lost at the end: its temporary folder keeps them
            pass


@contextmanager
def cluster_failures(stage: str) -> Iterator[None]:
    """Inside: an error of ours (raised in a task, or here) goes out as it is, and so does a
    full disk (a task's write into the work directory, which api.staged_dedup names); any
    other, a failure of the cluster itself (a worker lost, a connection closed: distributed's
    many types), as one ClusterError naming ``stage`` and saying how to go on."""
    try:
        yield
    except GpudedupError:
        raise
    except Exception as error:  # noqa: BLE001 -- distributed's many failure types
        if isinstance(error, OSError) and is_full_disk(error):
            raise
        raise ClusterError(f"the Dask cluster failed during {stage} ({type(error).__name__}: {error})") from None


def worker_count(client) -> int:
    """The workers of ``client``'s cluster now."""
    with cluster_failures("asking the scheduler for its workers"):
        return len(client.scheduler_info().get("workers", {}))


def in_temporary_work_dir(error: ClusterError) -> ClusterError:
    """``error`` of a run whose work directory is a temporary one (workers without work_dir),
    which goes with the run: nothing is left to resume."""
    return ClusterError(error.failure, "the run kept nothing (its work directory was a temporary one, work_dir= "
                                       "keeps one): run again")


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


def shuffled(executor: DaskExecutor, parts: list, columns: dict[str, str], on: list[str]):
    """The rows of ``parts`` (delayed pandas DataFrames of ``columns``: name -> dtype) as a
    Dask DataFrame shuffled on the columns ``on``, so that rows with equal values share a
    partition: a first-round shuffle, into executor.shuffle_partitions(len(parts)) partitions;
    lazy."""
    import dask.dataframe as dd

    return moved(dd.from_delayed(parts, meta=frame_of(columns), verify_meta=False), on,
                 max(executor.shuffle_partitions(len(parts)), 1))


def moved(frame, on: list[str], partitions: int):
    """``frame`` (a Dask DataFrame) shuffled on the columns ``on`` into ``partitions``
    partitions; into one, its partitions joined (what a shuffle into one partition does,
    without hashing every row)."""
    return frame.repartition(npartitions=1) if partitions == 1 else frame.shuffle(on=on, npartitions=partitions)


def computed(collections: list, stage: str) -> list:
    """The results of Dask ``collections`` (delayed values, DataFrames), computed together on
    the default client (the run's). An error of ours raised in a task comes back as it is
    (as in DaskExecutor.map), a failure of the cluster as one ClusterError naming ``stage``."""
    import dask

    with cluster_failures(stage):
        results = list(dask.compute(*collections))
    release_unused_memory()
    return results


# What a failure while values go to the workers (share, arrays_sent) names as its stage.
SENDING = "sending a stage's data to the workers"


def share(client, *values: Any) -> list:
    """Futures of ``values``, what every task of a stage reads (the shard reader, which
    describes every shard; the per-shard offsets), sent to every worker once
    (``client.scatter(..., broadcast=True)``) so that the stage's tasks carry a reference each:
    sent inside every task, they would make the bytes of a stage grow with the square of its
    shards (scripts/bench_task_bytes.py). Each under a key of its own (hash=False): keys named
    by content would make a stage that shares what the last one shared (the reader, again)
    depend on that data being freed just then, and its tasks fail as having lost their
    dependencies (dask/distributed#8576). Without a client (Dask's local scheduler): the values."""
    if client is None:
        return list(values)
    with cluster_failures(SENDING):
        return client.scatter(list(values), broadcast=True, hash=False) if values else []


def arrays_sent(client, arguments: Sequence[tuple]) -> list[tuple]:
    """Tasks' arguments with each task's own numpy arrays (an argument, or an item of a list or
    tuple argument) sent to the workers first (``client.scatter``) and replaced by their
    futures: a task graph holding a document's worth of arrays per shard passes distributed's
    size warning at a few million documents. What the tasks share goes by ``share``, not here:
    each array found here is sent once per place it is found. Without a client (Dask's local
    scheduler) the arguments stay as they are."""
    if client is None:
        return [tuple(values) for values in arguments]
    found = [value for values in arguments for argument in values
             for value in (argument if type(argument) in (list, tuple) else (argument,))
             if isinstance(value, np.ndarray)]
    if not found:
        return [tuple(values) for values in arguments]
    with cluster_failures(SENDING):
        futures = iter(client.scatter(found, hash=False))

    def sent(value):
        if type(value) in (list, tuple):
            return type(value)(next(futures) if isinstance(item, np.ndarray) else item for item in value)
        return next(futures) if isinstance(value, np.ndarray) else value

    return [tuple(sent(value) for value in values) for values in arguments]


def frame_of(dtypes: dict[str, str]):
    """An empty pandas DataFrame of the columns ``dtypes`` (name -> dtype): a Dask meta."""
    import pandas as pd

    return pd.DataFrame({name: pd.Series([], dtype=dtype) for name, dtype in dtypes.items()})


def range_starts(n_docs: int, ranges: int) -> np.ndarray:
    """int64 (r + 1,): the first row of each of ``ranges`` ranges of about equal length over
    rows 0 .. n_docs-1, then n_docs (ranges is at most n_docs, so none is empty)."""
    ranges = max(min(ranges, n_docs), 1)
    return (np.arange(ranges + 1, dtype=np.int64) * n_docs) // ranges
