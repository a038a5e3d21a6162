"""A lock file held by one process at a time: the index's writer lock (index/files.py) and a
work directory's run lock (pipeline/workdir.py) are both this one, with their own words; and
the lock a run holds on a staging folder of its own (io/commit.py), by which a clean-up tells
a live run's folder from a killed one's (io/staging.py)."""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional


def holder_name() -> str:
    """Who holds a lock, as the lock file records it and messages name it: "process N on HOST"."""
    return f"process {os.getpid()} on {socket.gethostname()}"


@contextmanager
def exclusive_lock(path: Path, refused: Callable[[str], Exception], wait: bool = False) -> Iterator[None]:
    """Hold an flock on the file ``path`` (made where missing) for the block, with holder_name
    written into it. Where another holder has it (another process, or another opening of the
    file in this one), raise ``refused(holder)`` at once (holder: what the file records, or
    "another process"), or wait for it with ``wait``. The lock goes with the process, so a
    killed holder never leaves it locked. OSError where the file cannot be opened."""
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            holder = os.pread(descriptor, 256, 0).decode("utf-8", "replace").strip() or "another process"
            raise refused(holder) from None
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, holder_name().encode(), 0)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def hold_folder(path: Path) -> Optional[int]:
    """An open descriptor of the directory ``path`` with an exclusive flock on it, for the run
    that made the folder to keep while it is its own (close it to let go); None where the
    folder cannot be opened or its file system takes no such lock. The lock goes with the
    process, so a killed run's folder is free."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return None
    return descriptor


def folder_held(path: str) -> bool:
    """Whether a live process holds ``path`` (hold_folder): the one sign of a run that a clean-up
    in another PID namespace (a container sharing the volume and the host name) can read, where
    the process number in the folder's name tells nothing."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        return error.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(descriptor)  # (releases the lock this call took, if it took one)
    return False
