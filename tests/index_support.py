"""What the persistent index's tests share (tests/test_index.py, tests/test_index_faults.py): the
shipped Bible sample as records, an index's committed state read from its files alone, and the
check that nothing but that state is left in its directory."""

from __future__ import annotations

import functools
import gzip
import json
from importlib import resources
from pathlib import Path


@functools.lru_cache(maxsize=1)
def _bible_lines() -> tuple[str, ...]:
    sample = resources.files("gpudedup").joinpath("data/bible_sample.jsonl.gz")
    with resources.as_file(sample) as source, gzip.open(source, "rt", encoding="utf-8") as handle:
        return tuple(handle)


def bible_records() -> list[dict]:
    """The shipped sample (2,037 chapters of several English translations; ids such as
    'KJV Ruth 1'), as new dicts each call. Chapters of different translations are
    near-duplicates of one another at many similarities."""
    return [json.loads(line) for line in _bible_lines()]


def committed_state(root: Path) -> dict[str, bytes]:
    """manifest.json and every file it names (segment files, the tombstone file), by path
    relative to ``root``: the state a reader sees, read from the files alone (json, not
    gpudedup's reader)."""
    manifest_bytes = (root / "manifest.json").read_bytes()
    manifest = json.loads(manifest_bytes)
    state = {"manifest.json": manifest_bytes}
    for segment in manifest["segments"]:
        for name in segment["files"]:
            path = f"segments/{segment['name']}/{name}"
            state[path] = (root / path).read_bytes()
    if manifest["tombstones"]:
        path = f"tombstones/{manifest['tombstones']['name']}"
        state[path] = (root / path).read_bytes()
    return state


def assert_only_committed(root: Path) -> None:
    """Nothing in the index directory but the committed state, the writer's lock file and the
    two folders: no temporary file or directory, no segment or tombstone file no manifest
    names."""
    state = committed_state(root)
    allowed = set(state) | {"writer.lock", "segments", "tombstones"}
    allowed |= {str(Path(path).parent) for path in state if path.startswith("segments/")}
    present = {str(p.relative_to(root)) for p in root.rglob("*")}
    assert present <= allowed, f"left in {root}: {sorted(present - allowed)}"
    assert not any(".tmp-" in p for p in present), sorted(present)
