"""The run's report: a typed structure, built once by the pipeline (job.py) and completed
only by ``with_*`` copies (the Dask details, the write stage); ``as_dict`` is report.json.

A Report also reads like the JSON object it writes (``report["balance"]["kept"]``), so that
notebooks and scripts that read report.json and those that read ``result.report`` use the same
keys. The keys are described in docs/output-formats.md; fields are added, never renamed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Iterator, Optional

from ..display import report_html, report_text
from ..io.storage import key_of

# The "format" of an input that is not a file (api: list_corpus, table_corpus).
IN_MEMORY_FORMATS = ("list", "table")


@dataclass(frozen=True)
class InputFile:
    """One input that documents came from: its path as shown (ids, messages), format and
    document count; absolute_path: where the file is (None for in-memory data), so that the
    report can be read from another working directory; counts: its documents kept and removed
    (Report.with_sources: pipeline/sourcecounts.py), None until counted."""

    path: str
    format: str
    documents: int
    absolute_path: Optional[str] = None
    counts: Optional[dict] = None

    @classmethod
    def of(cls, path: str, format: str, documents: int) -> "InputFile":
        """An input as the readers describe it; a file's absolute path is taken now, while the
        working directory is the run's."""
        in_memory = format in IN_MEMORY_FORMATS
        return cls(path, format, documents, None if in_memory else key_of(path))

    def as_dict(self) -> dict:
        out = {"path": self.path, "format": self.format, "documents": self.documents}
        if self.absolute_path is not None:
            out["absolute_path"] = self.absolute_path
        if self.counts is not None:
            out.update(self.counts)
        return out


@dataclass(frozen=True)
class InputSummary:
    """The report's "input" section.

    documents: records that became documents; files: the files they came from; skipped_files:
    the entries inside input directories that were not read (io.inputs.PassedOver: a file of
    no input type, a hidden file or folder, one the include / exclude patterns leave out, a
    link that would loop, a pipe, ...), in the order met; report.json lists their paths as
    "skipped_files" and each with its reason as "skipped_file_reasons" ({"path", "reason",
    "folder"}); skipped_records: records and files left out under on_error="skip" (see
    errors.jsonl); notes: paths passed over for a reason (a link loop, a pipe, ...); text_bytes:
    UTF-8 bytes of all texts; null_texts: documents whose text is null; empty_documents:
    documents without shingles (kept, never compared); paths: the inputs as given, absolute
    (none for in-memory data).
    """

    documents: int
    files: tuple[InputFile, ...]
    skipped_files: list
    skipped_records: int
    notes: list
    text_bytes: int
    null_texts: int
    empty_documents: int
    paths: tuple[str, ...] = ()

    def as_dict(self) -> dict:
        return {"documents": self.documents,
                "files": [f.as_dict() for f in self.files],
                "skipped_files": [str(entry) for entry in self.skipped_files],
                "skipped_file_reasons": [skipped_entry(entry) for entry in self.skipped_files],
                "skipped_records": self.skipped_records, "notes": self.notes,
                "text_bytes": self.text_bytes, "null_texts": self.null_texts,
                "empty_documents": self.empty_documents, "paths": list(self.paths)}


def skipped_entry(entry: str) -> dict:
    """One entry of report.json's input.skipped_file_reasons: its path as shown, why it was not
    read (io.inputs's reasons: "unsupported type", "hidden", "excluded by --exclude", "not
    matched by --include", or the words of its note) and whether it is a folder."""
    return {"path": str(entry), "reason": getattr(entry, "reason", "skipped"),
            "folder": bool(getattr(entry, "folder", False))}


@dataclass(frozen=True)
class Results:
    """The report's "results" section: how many pairs each stage produced, and the clusters.

    Pairs of identical copies (copies.py) count as candidates and as exactly checked pairs,
    beside those from the LSH buckets.
    """

    candidate_pairs: int
    exactly_checked_pairs: int
    identical_copies: int
    verified_pairs: int
    clusters: int
    documents_in_clusters: int
    removed_documents: int
    kept_documents: int


@dataclass(frozen=True)
class Balance:
    """Where every input record went: the four outcomes add up to the records read.

    kept: documents with text kept; kept_empty: documents without shingles (kept, never
    compared); removed_duplicates: duplicates removed (each named with its cluster's kept
    document in clusters.parquet); skipped: records left out by on_error="skip" (errors.jsonl).
    """

    input_records: int
    kept: int
    kept_empty: int
    removed_duplicates: int
    skipped: int

    @classmethod
    def of(cls, documents: int, skipped: int, empty: int, removed: int) -> "Balance":
        """From the counts the pipeline has; kept = documents - empty - removed. (The test
        suite recounts every outcome from the written files, independently of this.)"""
        return cls(input_records=documents + skipped, kept=documents - empty - removed, kept_empty=empty,
                   removed_duplicates=removed, skipped=skipped)

    @property
    def balanced(self) -> bool:
        return (self.kept + self.kept_empty + self.removed_duplicates + self.skipped == self.input_records
                and self.kept >= 0)

    def as_dict(self) -> dict:
        return {"input_records": self.input_records, "kept": self.kept, "kept_empty": self.kept_empty,
                "removed_duplicates": self.removed_duplicates, "skipped": self.skipped, "balanced": self.balanced}


@dataclass(frozen=True)
class Report(Mapping):
    """report.json as a typed structure (see the module docstring).

    parameters: the run's parameters as written (DedupParams plus the banding chosen);
    stages: seconds and peak memory per stage (stages.StageLog.as_dict); staged: a run
    through a work directory, whose report names it (work_dir; None for the temporary one of
    a local Dask cluster); dask: the cluster's scheduler and worker count; output: where the
    results were written (set by the write); index: a run against a persistent index (its
    path, the commit generation it saw, the indexed documents it checked, and whether the run
    added its kept documents); groups: the counts by the values of a column (group_field;
    Report.with_sources), None without one.
    """

    gpudedup_version: str
    backend: str
    input: InputSummary
    parameters: dict
    results: Results
    balance: Balance
    stages: dict
    total_seconds: float
    peak_rss_mb: float
    staged: bool = False
    work_dir: Optional[str] = None
    dask: Optional[dict] = None
    output: Optional[dict] = field(default=None)
    index: Optional[dict] = None
    groups: Optional[dict] = None

    def with_reading(self, text_field: str, id_field: Optional[str], on_error: str,
                     paths: list[str]) -> "Report":
        """This report with how the input was read: the parameters text_field, id_field and
        on_error, and input.paths, the input paths as given, made absolute ([] for in-memory
        data)."""
        reading = {"text_field": text_field, "id_field": id_field, "on_error": on_error}
        return replace(self, parameters={**self.parameters, **reading},
                       input=replace(self.input, paths=tuple(key_of(p) for p in paths)))

    def with_sources(self, file_counts: list[dict], groups: Optional[dict] = None) -> "Report":
        """This report with where its duplicates come from (pipeline/sourcecounts.py): each input
        file's counts (file_counts, in the order of input.files: "kept", "removed",
        "removed_within", "removed_across" as duplicates of a document of the same file or
        not, "bytes" and "kept_bytes" of text, or "tokens" and "kept_tokens" with token
        shingles), and the "groups" section of a group column:

        {"field": its name, "count": the distinct values that occur (null one of them),
         "rows": [{"group": value (null: the null group), "documents", "kept", "removed",
                   "removed_within", "removed_across" (as duplicates of a document of the same
                   group or not), "bytes"/"tokens", "kept_bytes"/"kept_tokens"}, ...] most
                 removed first, at most sourcecounts.MAX_GROUPS; beyond, the rest as one last
                 row {"group": null, "other": true, "groups": how many, ...},
         "matrix": [[int]]: matrix[i][j], the documents of rows[i] removed as duplicates of a
                   kept document of rows[j],
         "matrix_index": [int] (a run against an index only): those of rows[i] removed as
                   duplicates of an indexed document}."""
        assert len(file_counts) == len(self.input.files), "a count per input file"
        files = tuple(replace(f, counts=counts) for f, counts in zip(self.input.files, file_counts))
        return replace(self, input=replace(self.input, files=files), groups=groups)

    def with_dask(self, scheduler: str, workers: int, work_dir_kept: bool) -> "Report":
        """This report of a run on a Dask cluster; work_dir_kept False: the work directory was
        a temporary one, gone after the run."""
        return replace(self, dask={"scheduler": scheduler, "workers": workers},
                       work_dir=self.work_dir if work_dir_kept else None)

    def with_index(self, path: str, generation: int, indexed_documents_checked: int, added: bool) -> "Report":
        """This report of a run against a persistent index (index/)."""
        return replace(self, index={"path": path, "generation": generation,
                                    "indexed_documents_checked": indexed_documents_checked, "added": added})

    def with_write(self, write_stage: dict, directory: str, format: str, single: bool, kept_files: list[str],
                   removed_files: Optional[list[str]] = None) -> "Report":
        """This report once its results are written: the write stage's figures (seconds,
        peak_rss_mb), the output directory and format, the layout ("single": one file of kept
        rows, else "files": one per input file; io/layout.py) and the kept rows' files
        (kept_files: paths under the directory, in input order); removed_files: the removed
        rows' files, where they were written (likewise)."""
        output: dict[str, Any] = {"directory": directory, "format": format, "layout": "single" if single else "files",
                                  "kept_files": kept_files}
        if removed_files is not None:
            output["removed_files"] = removed_files
        # total_seconds is the whole run's, writing included: the one time a run reports.
        return replace(self, stages={**self.stages, "write": write_stage},
                       total_seconds=round(self.total_seconds + write_stage["seconds"], 3),
                       peak_rss_mb=max(self.peak_rss_mb, write_stage["peak_rss_mb"]), output=output)

    @cached_property
    def _json(self) -> dict:
        out: dict[str, Any] = {
            "gpudedup_version": self.gpudedup_version,
            "backend": self.backend,
            "input": self.input.as_dict(),
            "parameters": self.parameters,
            "results": {name: getattr(self.results, name) for name in Results.__dataclass_fields__},
            "balance": self.balance.as_dict(),
            **({"groups": self.groups} if self.groups is not None else {}),
            "stages": self.stages,
            "total_seconds": self.total_seconds,
            "peak_rss_mb": self.peak_rss_mb,
        }
        if self.staged:
            out["work_dir"] = self.work_dir
        if self.dask is not None:
            out["dask"] = self.dask
        if self.index is not None:
            out["index"] = self.index
        if self.output is not None:
            out["output"] = self.output
        return out

    def as_dict(self) -> dict:
        """report.json: a fresh copy of the JSON object (nested dicts and lists)."""
        return copy.deepcopy(self._json)

    # Mapping: read access by report.json's keys.
    def __getitem__(self, key: str) -> Any:
        return self._json[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._json)

    def __len__(self) -> int:
        return len(self._json)

    def _repr_html_(self) -> str:
        """The notebook's view: the counts as cards, the parameters, the time (display.py)."""
        return report_html(self)

    def __repr__(self) -> str:
        """A few lines that fit a terminal (display.py); ``as_dict()`` is the whole of it."""
        return report_text(self)


