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


def test_terminal_signals_are_held_from_the_processes_a_cluster_starts_then_delivered():
    """While a local cluster starts, a process it starts (a worker, still importing) has Ctrl-C
    and a closed terminal blocked from birth, and this process gets a Ctrl-C sent meanwhile
    once the cluster is up: the run ends as ever, and no worker dies printing a traceback."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    from gpudedup.pipeline.daskops import terminal_signals_held

    blocked = "import signal; print(*(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])))"
    with pytest.raises(KeyboardInterrupt):
        with terminal_signals_held():
            child = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True, check=True)
            # To this thread, which blocks it, and to the process, which any thread may take.
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
            held = True  # (reached: the signal waits for the block's end)
    assert held and {int(signal.SIGINT), int(signal.SIGHUP)} <= set(map(int, child.stdout.split()))
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
