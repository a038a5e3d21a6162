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
