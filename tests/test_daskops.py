"""pipeline/daskops.py: what the client asks of a cluster (values sent to the workers, its
workers counted) fails as one ClusterError naming what it was doing, as the stages' tasks do;
an error of ours passes as it is."""

from __future__ import annotations

import numpy as np
import pytest

from gpudedup.errors import ClusterError, InputError
from gpudedup.pipeline.daskops import arrays_sent, share, worker_count


class LostCluster:
    """A client whose scheduler is gone: every request fails as distributed's comms do."""

    def __init__(self, error: Exception):
        self.error = error

    def scatter(self, *args, **kwargs):
        raise self.error

    def scheduler_info(self):
        raise self.error


@pytest.mark.parametrize("ask", [lambda client: share(client, {"shards": 3}),
                                 lambda client: arrays_sent(client, [(np.arange(3), 1)]),
                                 worker_count])
def test_a_lost_cluster_is_one_cluster_error_naming_the_request(ask):
    with pytest.raises(ClusterError, match=r"the Dask cluster failed during .*\(OSError: connection closed\).*"
                                           r"resume=True"):
        ask(LostCluster(OSError("connection closed")))
    with pytest.raises(InputError, match="ours"):  # (an error of ours is the run's own: as it is)
        ask(LostCluster(InputError("ours")))


def test_without_a_client_nothing_is_sent():
    values = ({"shards": 3}, np.arange(2))
    assert share(None, *values) == list(values)
    assert arrays_sent(None, [values]) == [values]


def test_terminal_signals_are_held_from_the_processes_a_cluster_starts_then_delivered(tmp_path):
    """While a local cluster starts, a process it spawns (a worker, still importing) has Ctrl-C
    and a closed terminal blocked from birth (multiprocessing's resource tracker, started on
    the way in a fresh process, unblocks them in the thread that starts it), and this process
    gets a Ctrl-C sent meanwhile once the cluster is up: the run ends as ever, and no worker
    dies printing a traceback of its own."""
    import signal
    import subprocess
    import sys

    (tmp_path / "spawn_held.py").write_text(SPAWN_HELD)  # (a file: a spawned process imports its main module)
    run = subprocess.run([sys.executable, str(tmp_path / "spawn_held.py")], capture_output=True, text=True,
                         timeout=25)
    assert run.returncode == 0, run.stderr
    blocked, held = run.stdout.split(";")
    assert held.strip() == "held then raised"
    assert {int(signal.SIGINT), int(signal.SIGHUP)} <= {int(number) for number in blocked.split()}


# A fresh process (no resource tracker yet, as the CLI's): the signals its spawned process
# starts with blocked; whether a Ctrl-C sent to it (this thread, and the process) inside the
# block waited for the block's end.
SPAWN_HELD = """
import multiprocessing, os, signal, threading, time
from gpudedup.pipeline.daskops import terminal_signals_held

def put_blocked(queue):
    queue.put([int(number) for number in signal.pthread_sigmask(signal.SIG_BLOCK, [])])

if __name__ == "__main__":
    spawn = multiprocessing.get_context("spawn")
    held = "not held"
    try:
        with terminal_signals_held():
            masks = spawn.Queue()  # (its semaphores start the resource tracker, as a cluster's do)
            child = spawn.Process(target=put_blocked, args=(masks,))
            child.start()
            blocked = masks.get(timeout=60)
            child.join()
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            held = "held"
    except KeyboardInterrupt:
        held += " then raised"
    print(*blocked, ";", held)
"""
