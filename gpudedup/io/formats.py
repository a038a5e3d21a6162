"""The input formats by file name: which suffixes are JSON Lines (plain, gzip- or
zstd-compressed), Parquet, Arrow IPC or plain text, and how a file is compressed."""

from __future__ import annotations

from pathlib import PurePath
from typing import Optional, Union

from .storage import Location

# A bare .zst is JSON Lines too: that is how corpora are shipped (The Pile's 00.jsonl.zst).
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz",
                  ".jsonl.zst", ".ndjson.zst", ".json.zst", ".zst")
PARQUET_SUFFIXES = (".parquet", ".pq")
ARROW_SUFFIXES = (".arrow",)
TEXT_SUFFIXES = (".txt",)
FORMAT_OF_SUFFIX = {**dict.fromkeys(JSONL_SUFFIXES, "jsonl"), **dict.fromkeys(PARQUET_SUFFIXES, "parquet"),
                    **dict.fromkeys(ARROW_SUFFIXES, "arrow"), **dict.fromkeys(TEXT_SUFFIXES, "text")}
INPUT_SUFFIXES = tuple(sorted(FORMAT_OF_SUFFIX, key=len, reverse=True))
# Every input suffix, in the order messages list them.
SUPPORTED_SUFFIXES = JSONL_SUFFIXES + PARQUET_SUFFIXES + ARROW_SUFFIXES + TEXT_SUFFIXES
# The compressions of JSON Lines files, by the name's last suffix: pyarrow's codec names
# (pa.Codec, pa.CompressedInputStream), with the bytes each compressed file starts with.
COMPRESSIONS = {".gz": "gzip", ".zst": "zstd"}
MAGIC = {"gzip": b"\x1f\x8b", "zstd": b"\x28\xb5\x2f\xfd"}


def input_suffix(name: str) -> str:
    """The input extension that ``name`` ends with (``.jsonl.gz``, ``.parquet``, ..., any case;
    the longest that matches), or "" for a name that is no input file's."""
    lowered = name.lower()
    return next((suffix for suffix in INPUT_SUFFIXES if lowered.endswith(suffix)), "")


def file_format(path: Union[Location, PurePath]) -> Optional[str]:
    """The format by the file's name: "jsonl", "parquet", "arrow", "text", or None for other
    files (path: anything with the name, an object's key as a PurePosixPath too)."""
    return FORMAT_OF_SUFFIX.get(input_suffix(path.name))


def format_of(path: Location) -> str:
    """The format of a file scan_inputs found (it lists only files that have one)."""
    format = file_format(path)
    if format is None:
        raise ValueError(f"{path}: not an input file")  # a caller's mistake, not the user's
    return format


def compression_of(path: Location) -> Optional[str]:
    """How a JSON Lines file is compressed, by its name: "gzip" (.gz), "zstd" (.zst), or None."""
    lowered = path.name.lower()
    return next((codec for suffix, codec in COMPRESSIONS.items() if lowered.endswith(suffix)), None)
