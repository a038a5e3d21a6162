"""The folders gpudedup writes (outputs, persistent indexes, work directories), told apart
from a user's folders: an input scan passes them over and --overwrite replaces only an output."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Optional

# The file every output holds (written first), by which --overwrite tells a gpudedup output
# from a folder of someone's files; its content: {"written_by": "gpudedup", ...}.
OUTPUT_MARKER = ".gpudedup-output"

OUTPUT = "a gpudedup output"
INDEX = "a gpudedup index"
# The largest manifest.json our_folder reads to tell an index or a work directory (theirs are
# a few kilobytes; a user's file of that name may be anything).
MANIFEST_BYTES = 1 << 20


def our_folder(directory: Path) -> Optional[str]:
    """What gpudedup wrote ``directory`` as, in words, or None for any other folder: an output
    (it holds OUTPUT_MARKER), a persistent index or a work directory (its manifest.json is an
    object with the keys gpudedup writes there). Reading one as input would take its reports
    and manifests for documents, and its kept rows for a second corpus."""
    def read(name: str) -> Optional[bytes]:
        path = directory / name
        if not path.is_file():
            return None
        if name != "manifest.json":  # (the marker is known by its name)
            return b""
        return path.read_bytes() if path.stat().st_size <= MANIFEST_BYTES else None

    try:
        return our_kind(read)
    except OSError:
        return None


def our_kind(read: Callable[[str], Optional[bytes]]) -> Optional[str]:
    """our_folder for a folder whose files ``read`` gives by name (None for none; the marker's
    bytes need not be read), local or on object storage."""
    if read(OUTPUT_MARKER) is not None:
        return OUTPUT
    manifest = read("manifest.json")
    try:
        data = json.loads(manifest) if manifest is not None else None
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    if {"format", "parameters", "verification"} <= data.keys():
        return INDEX
    if {"work_dir_format", "gpudedup_version"} <= data.keys():
        return "a gpudedup work directory"
    return None


def index_holding(place: Path) -> Optional[Path]:
    """The nearest folder above ``place`` (a local path) that is a gpudedup index, or None:
    what an output or work directory must not lie in, since the index's next writer removes
    what its manifest does not list there (index/files.collect_garbage)."""
    # (as the file system resolves it: "idx/../out" is beside the index, a link may lead into it)
    return next((folder for folder in Path(os.path.realpath(place)).parents if our_folder(folder) == INDEX), None)


def ours_within(folder: Path) -> Optional[tuple[Path, str]]:
    """The first folder under ``folder``, at any depth (links not followed), that gpudedup
    wrote as something of its own (our_folder: an index, a work directory, another output),
    with what it is in words; None where there is none. An output holds none of these, so one
    found in it was put there: replacing the output would delete it."""
    for parent, subfolders, _ in os.walk(folder):
        for name in sorted(subfolders):
            if os.path.islink(os.path.join(parent, name)):  # (replacing the output removes the link alone)
                continue
            what = our_folder(Path(parent) / name)
            if what is not None:
                return Path(parent) / name, what
    return None
