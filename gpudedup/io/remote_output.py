"""An output directory on object storage (OUT a URL: ``remote_output_dir``). There is no
rename, so the commit is made by order instead, and report.json is what marks a complete
output. Every file is written into a local staging directory first, except the kept rows of a
staged or Dask run (and a Dask run's pairs and clusters tables), which its tasks upload into a
hidden staging prefix under OUT (``remote_staging``); a failure before the commit leaves OUT's
own objects untouched and the staging prefix is removed. The commit: what is under OUT is
checked again by the rule of io/outputdir.py (``remote_occupied``; an object store has no
no-replace rename, so this check and the writes after it are not one step: a write by someone
else in that instant is not seen); anything else is left alone and the results go to the prefix
``<OUT name>.results-<pid>-<random>`` beside OUT. Then the marker is written (before anything
is deleted, so that what a failure leaves under OUT is always recognisably a gpudedup output);
where OUT already holds an output (``--overwrite``), its report.json is deleted, so that it
stops looking complete, then everything else of it; then the staged kept rows are moved into
place (``storage.move_object``: server-side copies, except an S3 object over 5 GiB, streamed
anew) and the local files uploaded, each object appearing whole, report.json last; the staging
prefix is removed. An interrupted or failed commit leaves objects under OUT but no report.json
(and says so: the old output is gone); readers (and people) take a folder without report.json
for an unfinished one. Unlike on a local file system the old output is gone before the new one
is complete.

The local commit (io/commit.py) hands an output at a URL to ``remote_output_dir``.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import OutputError
from ..interrupts import note_replacing, note_written
from .credentials import first_line
from .ours import OUTPUT_MARKER
from .outputdir import marker_content, remote_occupied, write_marker
from .staging import ASIDE, REMOTE_STAGING, host_tag, in_staging_prefix, remote_staging, stale_remote_staging
from .storage import Remote, file_entries, files_below, move_object, upload


@contextmanager
def remote_output_dir(out: Remote, overwrite: bool = False) -> Iterator[Path]:
    """Yield a local staging directory (holding the marker only) to fill, beside which
    ``remote_staging(out, staging)`` is a prefix under ``out`` that tasks on other machines may
    upload files into (the kept rows of a Dask run); when the block ends without an exception,
    the two take the place of whatever is under ``out`` on object storage, by order (the
    module's docstring), where remote_occupied still allows it: the marker written, the old
    report.json deleted, then the rest of the old output and the staging prefixes of killed
    runs of this machine (stale_remote_staging), then the uploaded files moved into place
    (storage.move_object) and the local ones uploaded, report.json last. Where something else
    is under ``out`` by then, it is left alone: the results go to a prefix beside it, which an
    OutputError names. When the block raises, nothing under ``out`` but the staging prefix is
    touched, and that is removed."""
    staging = Path(tempfile.mkdtemp(prefix=f"{REMOTE_STAGING}{host_tag()}-{os.getpid()}-"))
    write_marker(staging)
    uploaded = remote_staging(out, staging)
    filesystem, root = out.filesystem()
    _, prefix = uploaded.filesystem()
    landing: Optional[str] = None  # what a failure from here leaves, once objects land under the output
    try:
        yield staging
        moved = file_entries(uploaded)
        refused = remote_occupied(out, overwrite)
        target, target_root = out, root
        if refused is not None:  # it changed during the run: the results go beside it
            target = remote_sibling(out, refused[0])
            target_root = target.filesystem()[1]
        write_remote_marker(filesystem, target_root)
        if refused is None:
            present = [name for name in files_below(out) if not name.startswith(prefix + "/")]
            old = [name for name in present if not in_staging_prefix(name[len(root) + 1:])
                   and name != f"{root}/{OUTPUT_MARKER}"]
            # From here on objects under the output change: the old output's go (where there is
            # one), then the new one's come. What an interrupt leaves: interrupts.interrupted_outcome.
            landing = note_replacing(target, previous=bool(old))
            for name in sorted(old, key=lambda n: n != f"{root}/report.json"):  # the old report first
                filesystem.delete_file(name)
            # A folder whose last object goes keeps a marker (Arrow's S3 client writes one, so
            # that the folder stays): the old output's folders go whole, markers and all.
            for folder in sorted({name[len(root) + 1:].split("/")[0] for name in old if "/" in name[len(root) + 1:]}):
                delete_folder(filesystem, f"{root}/{folder}")
            # Killed runs' staging prefixes, with the folder markers some stores keep for them.
            for stale in stale_remote_staging({name[len(root) + 1:].split("/")[0] for name in present
                                               if in_staging_prefix(name[len(root) + 1:])}):
                delete_folder(filesystem, f"{root}/{stale}")
        else:
            landing = note_replacing(target, previous=False)
        for entry in moved:
            move_object(filesystem, entry, f"{target_root}/{entry.path[len(prefix) + 1:]}")
        written = sorted(file for file in staging.rglob("*")
                         if file.is_file() and file.relative_to(staging).as_posix() != OUTPUT_MARKER)
        report = staging / "report.json"
        for file in sorted(written, key=lambda f: f == report):  # the report last
            upload(file, target.child(file.relative_to(staging).as_posix()))
        if refused is not None:
            raise OutputError(f"{out}: {refused[0]} (it changed during the run); it was left as it is, and the "
                              f"results were written to {target}")
        note_written(out)
    except (OSError, pa.ArrowException) as error:
        if landing is not None:  # not "nothing was written"
            raise OutputError(f"{out}: cannot write the results ({first_line(error)}); {landing}") from None
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        try:  # the staging prefix (and the folder markers some stores keep): nothing left
            filesystem.delete_dir(prefix)
        except (OSError, pa.ArrowException):
            pass  # absent, or unreachable: the original error, if any, is what to report


def delete_folder(filesystem: pafs.FileSystem, path: str) -> None:
    """Delete the folder ``path`` of ``filesystem`` and what it holds, where it is still there:
    on stores without folder markers (fsspec's memory, many others) a folder goes with its
    last object."""
    try:
        filesystem.delete_dir(path)
    except FileNotFoundError:
        pass


def write_remote_marker(filesystem: pafs.FileSystem, root: str) -> None:
    """Write the marker of an output on object storage at ``root`` (a path of ``filesystem``)."""
    with filesystem.open_output_stream(f"{root}/{OUTPUT_MARKER}") as stream:
        stream.write((json.dumps(marker_content(), indent=2) + "\n").encode("utf-8"))


def remote_sibling(out: Remote, why: str) -> Remote:
    """A new prefix beside ``out`` for results that may not go there, named
    ``<name>.results-<pid>-<random>``; OutputError (``why`` said) where ``out`` is a bucket's
    root, which has nothing beside it."""
    parts = urlsplit(out.url)
    path = parts.path.rstrip("/")
    if not path.strip("/"):
        raise OutputError(f"{out}: {why} (it changed during the run); it was left as it is, and nothing was written")
    parent = path.rsplit("/", 1)[0]
    for _ in range(100):
        sibling = Remote(parts._replace(path=f"{parent}/{out.name}.{ASIDE}-{os.getpid()}-{secrets.token_hex(3)}")
                         .geturl())
        if not files_below(sibling):
            return sibling
    raise FileExistsError(errno.EEXIST, "no free name beside the output", str(out))
