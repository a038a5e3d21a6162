"""Work on host threads: the one helper every stage that runs batches side by side uses."""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, TypeVar

# Threads for work on the host whatever the backend (the numpy backend's batches, exact
# verification's merges): numpy and the numba kernels release the GIL, so threads use every core.
HOST_THREADS = os.cpu_count() or 1

Item = TypeVar("Item")
Result = TypeVar("Result")


def map_parallel(function: Callable[[Item], Result], items: list[Item], workers: int) -> Iterator[Result]:
    """``map(function, items)`` in order, lazily, on ``workers`` threads when there are more.

    The numpy stages spend their time in numpy calls that release the GIL, so threads use
    all cores without copying batches between processes.
    """
    if workers <= 1 or len(items) <= 1:
        yield from map(function, items)
        return
    # At most ``workers`` batches are in flight, so that results (and their memory) do not
    # pile up when the consumer is slower than the workers.
    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending: deque = deque()
        for item in items:
            if len(pending) == workers:
                yield pending.popleft().result()
            pending.append(pool.submit(function, item))
        while pending:
            yield pending.popleft().result()
