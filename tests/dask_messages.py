"""What a Dask run's messages carry, counted as they go out: for tests/test_dask.py and
scripts/bench_task_bytes.py, which read the client's and the scheduler's sends."""

from __future__ import annotations


def message_bytes(message) -> int:
    """The bytes of a distributed message as it goes out: a part to be pickled (a task graph) as
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
