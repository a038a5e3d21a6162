"""The input formats by file name: which suffixes are JSON Lines, Parquet or plain text."""

from __future__ import annotations

from typing import Optional

from .storage import Location

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz")
PARQUET_SUFFIXES = (".parquet", ".pq")
TEXT_SUFFIXES = (".txt",)
FORMAT_OF_SUFFIX = {**dict.fromkeys(JSONL_SUFFIXES, "jsonl"), **dict.fromkeys(PARQUET_SUFFIXES, "parquet"),
                    **dict.fromkeys(TEXT_SUFFIXES, "text")}
INPUT_SUFFIXES = tuple(sorted(FORMAT_OF_SUFFIX, key=len, reverse=True))


def input_suffix(name: str) -> str:
    """The input extension that ``name`` ends with (``.jsonl.gz``, ``.parquet``, ..., any case;
    the longest that matches), or "" for a name that is no input file's."""
    lowered = name.lower()
    return next((suffix for suffix in INPUT_SUFFIXES if lowered.endswith(suffix)), "")


def file_format(path: Location) -> Optional[str]:
    """The format by the file's name: "jsonl", "parquet", "text", or None for other files."""
    return FORMAT_OF_SUFFIX.get(input_suffix(path.name))


def format_of(path: Location) -> str:
    """The format of a file scan_inputs found (it lists only files that have one)."""
    format = file_format(path)
    if format is None:
        raise ValueError(f"{path}: not an input file")  # a caller's mistake, not the user's
    return format
