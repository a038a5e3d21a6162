"""The names of what a run writes beside or under its output before the commit, and the
clean-up of what killed runs left: local staging folders
``.<OUT name>.tmp-<host>-<pid>-<random>`` (and ``.old-`` for an old output moved aside), the
hidden prefix under an output URL that tasks upload into, and the names of results set aside
(``<OUT name>.results-...``), which no clean-up matches. The host and process in a name tell
whether its run may still be going on, and so does the lock a run holds on its folder
(locks.hold_folder), which a run in another PID namespace can see.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Iterable

from ..locks import folder_held, hold_folder
from .storage import Location, Remote

# The part of a staging name that tells whose run it is: host_tag(), then the process.
RUN_TAG = r"(?P<host>[0-9a-f]{8})-(?P<pid>[0-9]+)-"
# The local staging folders of outputs on object storage (then host, process and a random
# part), and (with a "." before) the hidden prefixes under the outputs that tasks upload into.
REMOTE_STAGING = "gpudedup-output-"
# Such a prefix's name in full: host, process, then tempfile.mkdtemp's 8 random characters. A
# user's object that merely starts like one is no run's: it is never skipped as staging, nor
# removed as a killed run's.
STAGING_PREFIX = re.compile(rf"\.{re.escape(REMOTE_STAGING)}{RUN_TAG}[a-z0-9_]{{8}}")
# The folders beside OUT that results go to when OUT may not be replaced at the commit
# ("<OUT name>.results-<pid>-<random>"), and what was at OUT where it could not be put back
# (".kept-"): not hidden, and no clean-up matches them.
ASIDE, KEPT = "results", "kept"


# The bytes a staging name adds to its output's name: ".", ".tmp-" (or ".old-"), the host tag,
# "-", a process number of up to 7 digits (Linux's largest pid_max), "-", 8 hex digits.
STAGING_NAME_EXTRA = 1 + 5 + 8 + 1 + 7 + 1 + 8


def host_tag() -> str:
    """This machine in staging names: 8 hex digits of its host name's SHA-256."""
    return hashlib.sha256(socket.gethostname().encode("utf-8", "surrogateescape")).hexdigest()[:8]


def new_staging_dir(parent: Path, name: str, kind: str, create: bool = True) -> Path:
    """A new name ``.<name>.<kind>-<host>-<pid>-<random>`` in ``parent`` (hidden, and plainly
    temporary, so never mistaken for an output); made as a directory with mode 0o777 less the
    umask unless ``create`` is False."""
    for _ in range(100):
        candidate = parent / f".{name}.{kind}-{host_tag()}-{os.getpid()}-{secrets.token_hex(4)}"
        if not create:
            if not os.path.lexists(candidate):
                return candidate
            continue
        try:
            candidate.mkdir(mode=0o777)  # the umask applies, as to any directory the user makes
            return candidate
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(parent / f".{name}.{kind}-*"))


def staging_pattern(name: str) -> re.Pattern:
    """The names ``new_staging_dir`` gives for outputs called ``name``: kind, host, pid."""
    return re.compile(rf"\.{re.escape(name)}\.(?P<kind>tmp|old)-{RUN_TAG}[0-9a-f]+")


def process_running(pid: int) -> bool:
    """Whether process ``pid`` exists (signal 0 only checks; POSIX only)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # someone else's process; a pid no system has: keep
        return True
    return True


def remove_stale_staging(parent: Path, name: str) -> list[Path]:
    """Remove what runs killed before they could clean up left beside the output ``name``:
    staging directories (``.tmp-``) of processes of this machine that are no longer running,
    and moved-aside old outputs (``.old-``) of such processes when the output exists (without
    it, an .old- directory may hold the only copy of the previous results: it is left alone).
    Directories of running processes, of other machines (a shared file system) or with other
    names (results set aside, ``<name>.results-*``, included) are never touched; on systems
    without POSIX processes nothing is removed. Returns what was removed."""
    output_exists = os.path.lexists(parent / name)
    return remove_stale(parent, staging_pattern(name), lambda match: match["kind"] == "tmp" or output_exists)


# The system's temporary folder holds the work directory of a run on workers without one of its
# own: this prefix, then host, process and a random part (temporary_work_dir).
TEMPORARY_WORK = "gpudedup-work-"


def temporary_work_dir() -> tempfile.TemporaryDirectory:
    """A temporary folder for a run's work directory, named by this machine and process, so
    that one a killed run left (SIGKILL: no clean-up) is removed by the next run here, which
    first removes those (remove_stale); held by this process (locks.hold_folder) until it is
    cleaned up."""
    parent = Path(tempfile.gettempdir())
    remove_stale(parent, re.compile(rf"{TEMPORARY_WORK}{RUN_TAG}[a-z0-9_]+"))
    return HeldTemporaryDirectory(prefix=f"{TEMPORARY_WORK}{host_tag()}-{os.getpid()}-")


class HeldTemporaryDirectory(tempfile.TemporaryDirectory):
    """A TemporaryDirectory its process holds (locks.hold_folder) until ``cleanup``, so that a
    clean-up in another PID namespace does not take it for a killed run's."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.held = hold_folder(Path(self.name))

    def cleanup(self) -> None:
        if self.held is not None:
            os.close(self.held)
            self.held = None
        super().cleanup()


def remove_stale(parent: Path, pattern: re.Pattern, removable=lambda match: True) -> list[Path]:
    """Remove the directories in ``parent`` whose names ``pattern`` matches in full (its groups
    ``host`` and ``pid`` naming the run's machine and process) of processes of this machine that
    are no longer running, where ``removable(match)``; others (running, another machine's, links)
    are never touched, and on systems without POSIX processes nothing is. Returns what was
    removed."""
    if os.name != "posix":
        return []
    host, removed = host_tag(), []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return []
    for entry in entries:
        match = pattern.fullmatch(entry.name)
        if match is None or match["host"] != host or not entry.is_dir(follow_symlinks=False):
            continue
        pid = int(match["pid"])
        if pid == os.getpid() or process_running(pid) or not removable(match) or folder_held(entry.path):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def remote_staging(out: Remote, staging: Path) -> Remote:
    """The prefix under ``out`` that the run writing into the local ``staging`` uploads files
    into before its commit (hidden, as local staging folders are)."""
    return out.child(f".{staging.name}")


def tasks_folder(staging: Path, out: Location, name: str) -> Location:
    """The folder ``name`` of an output that a run's tasks write their files into (made in the
    local ``staging`` folder): there, or for an output on object storage the same name under
    remote_staging, which the commit moves into place."""
    (staging / name).mkdir()
    return staging / name if not isinstance(out, Remote) else remote_staging(out, staging).child(name)


def in_staging_prefix(relative: str) -> bool:
    """Whether an object's path relative to an output URL lies in a run's staging prefix
    (remote_staging's: "." and the name of a local staging folder, STAGING_PREFIX), a killed
    run's included."""
    # (the prefix's own folder marker, where a store lists one as an object, included)
    return STAGING_PREFIX.fullmatch(relative.partition("/")[0]) is not None


def stale_remote_staging(prefixes: Iterable[str]) -> list[str]:
    """Of runs' staging prefixes under an output (their names, STAGING_PREFIX), those that no
    run may still write into: this machine's whose process is gone. Another machine's are left
    alone: its run may be going on."""
    host = host_tag()
    return [name for name in sorted(prefixes) if (match := STAGING_PREFIX.fullmatch(name)) is not None
            and match["host"] == host and not process_running(int(match["pid"]))]
