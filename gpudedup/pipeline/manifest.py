"""A work directory's manifest (WORK/manifest.json): the fingerprint of the run it belongs to,
written when the directory is first used. Here: whether a folder's manifest is a run's at all,
and how another run's differs from this one's, in the words of the refusal (pipeline/workdir.py
WorkDir)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

MANIFEST = "manifest.json"
# The field of a run's manifest that names the work directory's format (disk.fingerprint).
FORMAT_KEY = "work_dir_format"


def manifest_bytes(fingerprint: dict) -> bytes:
    """A run's MANIFEST as written: its fingerprint as JSON, keys sorted (so that the same
    fingerprint always gives the same bytes, which a result compares with what it finds)."""
    return (json.dumps(fingerprint, indent=2, sort_keys=True) + "\n").encode("utf-8")


def is_run_manifest(data: bytes) -> bool:
    """Whether the bytes of a folder's MANIFEST are a work directory's: a JSON object that
    names its format (FORMAT_KEY), where an index's manifest or another tool's is not. Bytes
    that are not JSON are a run's, damaged (a disk's fault: a run writes its manifest whole),
    only where they hold a run's first key (manifest_bytes sorts them): then the run that reads
    them says the work directory is damaged; any other are someone else's file."""
    manifest = manifest_of(data)
    if manifest is None:
        return data.startswith(DAMAGED_MARK)
    return isinstance(manifest, dict) and FORMAT_KEY in manifest


# What the bytes of a run's manifest begin with ({"gpudedup_version": ...}, its keys sorted).
DAMAGED_MARK = b'{\n  "gpudedup_version"'


def manifest_of(data: bytes) -> object:
    """The JSON value of a MANIFEST's bytes, or None where they are not JSON."""
    try:
        return json.loads(data.decode("utf-8"))
    except ValueError:  # (UnicodeDecodeError is one)
        return None


def holds_fingerprint(data: bytes, fingerprint: dict) -> bool:
    """Whether a MANIFEST's bytes hold ``fingerprint`` (compared as JSON values, as a resume
    compares them: a threshold given as 1 holds one written as 1.0)."""
    return manifest_of(data) == manifest_of(manifest_bytes(fingerprint))


def describe_difference(previous: dict, now: dict) -> str:
    """The first field that differs between two fingerprints, for the message (in the order
    of ``now``, where the parameters a user gives come before those derived from them)."""
    for key in list(now) + [key for key in previous if key not in now]:
        if previous.get(key) != now.get(key):
            if key == "inputs":
                return describe_inputs(previous.get(key) or [], now.get(key) or [])
            if key == "index" and isinstance(previous.get(key), dict) and isinstance(now.get(key), dict) \
                    and previous[key].get("path") == now[key].get("path"):
                before, after = previous[key].get("generation"), now[key].get("generation")
                if before == after:
                    return "the index at that path was made again since it ran (the same generation, other segments)"
                return (f"it ran against generation {before} of the index, now at {after}: an add, remove or "
                        "compact committed since (if it was an add that stopped after its commit, that one: its "
                        "output, written before, is complete)")
            if isinstance(previous.get(key), dict) and isinstance(now.get(key), dict):
                return describe_difference(previous[key], now[key])
            return f"{key} was {previous.get(key)!r}, now {now.get(key)!r}"
    return "the fingerprints differ"


def started_elsewhere(previous: dict, now: dict) -> Optional[str]:
    """Where the run of a work directory was started, if its fingerprint (``previous``) differs
    from this run's (``now``) only in how the input files are named: the same files named from
    another working directory (ids and messages name them relative to it:
    io/inputs.display_path). "" where that directory cannot be told (the files were named by
    absolute paths there); None when the runs differ otherwise."""
    old, new = previous.get("inputs") or [], now.get("inputs") or []
    if old == new or len(old) != len(new) or {**previous, "inputs": None} != {**now, "inputs": None}:
        return None
    roots = set()
    for (old_path, *old_stat), (new_path, *new_stat) in zip(old, new):
        if old_stat != new_stat or "://" in new_path:
            return None
        absolute = str(Path(new_path).absolute())
        if Path(old_path).is_absolute():
            if old_path != absolute:
                return None
        elif absolute.endswith(os.sep + old_path):
            roots.add(absolute[: -len(old_path) - 1])
        else:
            return None
    if len(roots) > 1:
        return None
    return roots.pop() if roots else ""


def describe_inputs(previous: list, now: list) -> str:
    """Which input file was added, removed or changed ([path, size, mtime_ns] lists)."""
    before, after = {p[0]: p[1:] for p in previous}, {p[0]: p[1:] for p in now}
    for path in after:
        if path not in before:
            return f"the input files differ: {path} was added"
    for path in before:
        if path not in after:
            return f"the input files differ: {path} was removed"
        if before[path] != after[path]:
            what = "size" if before[path][0] != after[path][0] else "modification time"
            return f"the input files differ: {path} changed ({what})"
    return "the input files differ"


