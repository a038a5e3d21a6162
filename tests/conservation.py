"""Conservation checked from outside: every input record is accounted for exactly once.

The check never asks gpudedup how many records it read. It reads the inputs itself (json for
JSONL and .jsonl.gz lines, pyarrow.parquet for Parquet, plain bytes for .txt, the list or table
itself for in-memory data) and then requires, per record:

- every input record is exactly one of: a kept row of ``deduplicated*`` (in input order, with
  its own text and id), a removed document (a clusters.parquet row with keep=False whose
  kept_id is kept and in the same cluster), or a skipped record of errors.jsonl (its file and
  line; a whole file when line is null). Empty documents are kept rows, counted apart;
- the report's counts (documents per file and in all, skipped, null texts, text bytes, empty,
  removed, kept, clusters, the balance) equal those recounted from the files;
- every input file under the paths the run was given (walked by the checker, hidden entries
  left out) was read, skipped, or listed as passed over.

How to read the input again comes from report.json alone (``Reading``): the text and id fields
and on_error (``parameters``), the inputs as given (``input.paths``) and where each file is
(``input.files[].absolute_path``). Nothing is guessed, so an output directory is checked the
same way whoever wrote it and from whatever working directory: a run in this process or a CLI
run in a subprocess. conftest.py checks, for runs in this process, that the report states
these as the caller asked for them.

A record the reader drops silently is then a kept row missing from deduplicated.*, a file it
drops is one the walk finds unaccounted for, and a kept row the writer drops is missing too;
none can balance. conftest.py applies ``check_output_dir`` to every output directory the
suite's runs write and ``check_result`` to every result ``gpudedup.dedup`` returns.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

import oracles
from output_support import kept_files, read_clusters
from gpudedup.pipeline.report import IN_MEMORY_FORMATS

# Unicode's White_Space property (the oracles' list), which DESIGN.md's normalisation collapses
# and strips: a document of only these (or a null text) has no shingles, an "empty document".
WHITE_SPACE = frozenset(oracles.WHITE_SPACE)
# Which files are inputs, stated here apart from gpudedup/io/inputs.py on purpose: the walk of
# input.paths must not inherit a mistake of the reader it checks.
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz", ".zst")
PARQUET_SUFFIXES = (".parquet", ".pq")
ARROW_SUFFIXES = (".arrow",)
TEXT_SUFFIXES = (".txt",)
# A Hugging Face save_to_disk folder holds these beside its data files: metadata, not inputs.
DATASET_METADATA = ("state.json", "dataset_info.json")
# The checker's reader could not read the record (not JSON, not UTF-8, ...): the run must
# have skipped it.
UNREADABLE = object()
# Token ids are 32-bit units (docs/hash-spec.md, "Token shingles"): a list of integers from 0
# to this is a document's content as much as a text is.
TOKEN_ID_MAX = 2**32 - 1


class ConservationError(AssertionError):
    """A run lost, invented or miscounted an input record."""


@dataclass(frozen=True)
class InputRecord:
    """One input record as the checker reads it.

    file: the file as the run names it (report.json, errors.jsonl, ids), or "<memory>";
    line: JSONL line, Parquet row or 1 for a .txt file (from 1), or the position (from 0) of
    in-memory data; id: the id the run must give it; text: str, a list of token ids, None (null),
    or UNREADABLE (a record without its text field included).
    """

    file: str
    line: int
    id: Any
    text: Any

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Reading:
    """How a run read its input, as its report.json says.

    text_field / id_field / on_error: ``parameters``; paths: ``input.paths``, the inputs as
    given, absolute (none for in-memory data); files: (path as shown, absolute path) of every
    file in ``input.files``, in reading order (none for in-memory data).
    """

    text_field: str
    id_field: Optional[str]
    on_error: str
    paths: tuple[str, ...]
    files: tuple[tuple[str, str], ...]

    @property
    def in_memory(self) -> bool:
        return not self.paths

    @classmethod
    def of(cls, report: dict) -> "Reading":
        """The reading a report states; ConservationError when it lacks one of the fields."""
        parameters, given = report.get("parameters", {}), report.get("input", {})
        missing = [f"parameters.{name}" for name in ("text_field", "id_field", "on_error") if name not in parameters]
        missing += ["input.paths"] if "paths" not in given else []
        missing += [f"input.files[{i}].absolute_path ({entry.get('path')})"
                    for i, entry in enumerate(given.get("files", []))
                    if entry.get("format") not in IN_MEMORY_FORMATS and "absolute_path" not in entry]
        if missing:
            raise ConservationError(
                f"report.json (gpudedup {report.get('gpudedup_version', '?')}) lacks {', '.join(missing)}: this "
                "version of gpudedup writes them (report.Report.with_reading, InputFile.of), and the checker "
                "reads the input again from them only; a report without them is not one of this version's")
        files = tuple((entry["path"], entry["absolute_path"]) for entry in given["files"]
                      if entry["format"] not in IN_MEMORY_FORMATS)
        if files and not given["paths"]:
            raise ConservationError(f"report.json: input files {[shown for shown, _ in files]} but no input.paths")
        return cls(parameters["text_field"], parameters["id_field"], parameters["on_error"],
                   tuple(given["paths"]), files)

    def locate(self, shown: str) -> Path:
        """The file or directory the run showed as ``shown`` (in errors.jsonl, skipped_files).

        The run shows a path relative to its working directory when it lies below it, else
        absolute (io/inputs.py, display_path); the working directory is the one the report's
        files place: each one's absolute_path is that directory joined with its path.
        """
        if os.path.isabs(shown):
            return Path(shown)
        directories = {absolute[:-len(path) - 1] for path, absolute in self.files
                       if not os.path.isabs(path) and ".." not in Path(path).parts
                       and absolute.endswith(os.sep + path)}
        if len(directories) != 1:
            raise ConservationError(
                f"cannot place {shown!r}: report.json names it relative to the run's working directory, and "
                f"its files place that directory {'nowhere' if not directories else sorted(directories)}")
        return Path(directories.pop()) / shown


@dataclass
class RunOutcome:
    """What a run says became of its input.

    kept_texts / kept_ids: the text (and, where the kept rows carry it, the id) of every row of
    deduplicated.*, in order; clusters: clusters.parquet as columns (id, cluster, keep,
    kept_id); skipped: errors.jsonl's objects (file, line, reason); report: report.json;
    reading: how the report says the input was read.
    """

    kept_texts: list
    kept_ids: Optional[list]
    clusters: dict
    skipped: list
    report: dict
    reading: Reading
    # One output file per input file (report.json's output.kept_files): the rows of each, in the
    # order of the report's input files; None for one file of kept rows.
    kept_per_file: Optional[list[int]] = None


def is_empty(text: Any) -> bool:
    """No shingles: a null text or one of white space only, or no token ids."""
    if isinstance(text, list):
        return not text
    return text is None or all(ch in WHITE_SPACE for ch in text)


def content_of(value: Any) -> Any:
    """A record's content as the checker reads it: a text, None, token ids (a list of integers
    from 0 to TOKEN_ID_MAX, as a list), or UNREADABLE for anything else."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool)
                                                and 0 <= v <= TOKEN_ID_MAX for v in value):
        return list(value)
    return UNREADABLE


def content_bytes(text: Any) -> int:
    """The bytes the report counts for a record's content: UTF-8 of a text, 4 per token id."""
    return 4 * len(text) if isinstance(text, list) else len(text.encode("utf-8", "surrogatepass"))


# --- the checker's own readers ------------------------------------------------------------------


# --- files, local or at a URL (an object store's: read with pyarrow's own file systems, an
# http(s) URL's with fsspec's, not gpudedup's io/storage.py, which this checks) ------------------

def is_url(place) -> bool:
    return isinstance(place, str) and "://" in place


def url_filesystem(place: str) -> tuple[pafs.FileSystem, str]:
    """(file system, path in it) of a URL: pyarrow's for an object store's, fsspec's for an
    http(s) URL (its path: the whole URL, query included) and for a scheme pyarrow lacks
    (memory://)."""
    if place.lower().startswith(("http://", "https://")):
        import fsspec

        return pafs.PyFileSystem(pafs.FSSpecHandler(fsspec.filesystem("http"))), place
    try:
        return pafs.FileSystem.from_uri(place)
    except pa.ArrowInvalid:
        import fsspec

        filesystem, path = fsspec.core.url_to_fs(place)
        return pafs.PyFileSystem(pafs.FSSpecHandler(filesystem)), path


def url_path(place) -> str:
    """A place's path as its name ends: a URL without its query."""
    return str(place).split("?")[0] if is_url(place) else str(place)


def shows_as(stated: str, asked: str) -> bool:
    """Whether a report shows the place ``asked`` as ``stated``: the same, or a URL with its
    credentials hidden (a user part with a password left out, option values shown as ***)."""
    if stated == asked or not is_url(asked):
        return stated == asked
    without_user = re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@]*:[^/?#@]*@", r"\1", asked)
    return re.fullmatch("[^&#]+".join(re.escape(piece) for piece in stated.split("***")), without_user) is not None


def absolute_place(place) -> str:
    """A path made absolute (in the working directory now), a URL as it is."""
    return str(place) if is_url(str(place)) else os.path.abspath(place)


def file_bytes(place) -> bytes:
    if is_url(place):
        filesystem, path = url_filesystem(place)
        with filesystem.open_input_stream(path, compression=None) as stream:
            return stream.read()
    return Path(place).read_bytes()


def parquet_table(place) -> pa.Table:
    if is_url(place):
        filesystem, path = url_filesystem(place)
        return pq.read_table(path, filesystem=filesystem)
    return pq.read_table(place)


def file_kind(path) -> Optional[str]:
    name = (url_path(path).rsplit("/", 1)[-1] if is_url(path) else path.name).lower()
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if name.endswith(ARROW_SUFFIXES):
        return "arrow"
    if name.endswith(TEXT_SUFFIXES):
        return "text"
    return None


def run_id(shown: str, line: int, fields: dict, id_field: Optional[str]) -> Any:
    """The id the run gives a record: its id field, or ``<path>:<line>`` without one."""
    if id_field is None:
        return f"{shown}:{line}"
    value = field_value(fields, id_field)
    return None if value is UNREADABLE else value


def field_value(record: dict, name: str) -> Any:
    """A record's field ``name`` (docs: a key, or a dotted path through objects where no key
    is the whole name; null on the way gives null), UNREADABLE where it has none."""
    if name in record:
        return record[name]
    value: Any = record
    for part in name.split(".") if "." in name else [None]:
        if value is None:
            return None
        if part is None or not isinstance(value, dict) or part not in value:
            return UNREADABLE
        value = value[part]
    return value


def column_values(columns: list[str], column: Any, name: str) -> Optional[list]:
    """The values of field ``name`` of a table whose columns are ``columns`` and whose column
    ``column(c)`` gives a list of Python values (structs as dicts): a column, or a dotted path
    into a struct column; None where it has no such field."""
    if name in columns:
        return column(name)
    first = name.split(".")[0]
    if "." not in name or first not in columns:
        return None
    rest = name[len(first) + 1:]
    values = [None if row is None else field_value(row, rest) for row in column(first)]
    return None if any(value is UNREADABLE for value in values) else values


def ipc_table(place) -> pa.Table:
    """An Arrow IPC file's or stream's table (pyarrow.ipc)."""
    source = pa.py_buffer(file_bytes(place))
    try:
        return pa.ipc.open_file(source).read_all()
    except pa.ArrowInvalid:
        return pa.ipc.open_stream(source).read_all()


def read_file_records(path, shown: str, text_field: str, id_field: Optional[str]) -> list[InputRecord]:
    """The records of one input file, in order. Raises OSError/ValueError when the file as a
    whole cannot be read (the run must then have skipped or refused it)."""
    kind = file_kind(path)
    if kind == "jsonl":
        raw = file_bytes(path)
        if url_path(path).lower().endswith(".gz"):
            raw = gzip.decompress(raw)
        elif url_path(path).lower().endswith(".zst"):
            raw = pa.input_stream(pa.BufferReader(raw), compression="zstd").read()
        raw = raw.removeprefix(b"\xef\xbb\xbf")
        records = []
        for number, line in enumerate(raw.split(b"\n"), start=1):
            if not line.strip(b" \t\r\n"):
                continue  # a blank line is no record
            try:
                fields = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                fields = None
            if not isinstance(fields, dict):
                records.append(InputRecord(shown, number, UNREADABLE, UNREADABLE))
                continue
            # A record without its text field is a bad record; a null text is an empty document.
            text = field_value(fields, text_field)
            text = text if text is UNREADABLE else content_of(text)
            records.append(InputRecord(shown, number, run_id(shown, number, fields, id_field), text))
        return records
    if kind in ("parquet", "arrow"):
        table = parquet_table(path) if kind == "parquet" else ipc_table(path)
        column = lambda name: table[name].to_pylist()  # noqa: E731
        texts = column_values(table.column_names, column, text_field) or [None] * table.num_rows
        ids = column_values(table.column_names, column, id_field) if id_field else None
        records = []
        for row, text in enumerate(texts):
            if isinstance(text, bytes):
                try:
                    text = text.decode("utf-8")
                except UnicodeDecodeError:
                    text = UNREADABLE
            elif isinstance(text, list):
                text = content_of(text)
            fields = {id_field: ids[row]} if ids is not None else {}
            records.append(InputRecord(shown, row + 1, run_id(shown, row + 1, fields, id_field), text))
        return records
    if kind == "text":
        try:
            text = file_bytes(path).decode("utf-8-sig")
        except UnicodeDecodeError:
            text = UNREADABLE
        return [InputRecord(shown, 1, f"{shown}:1" if id_field is None else UNREADABLE, text)]
    raise ValueError(f"{path}: not an input file")


def memory_records(data: Any, text_field: str, id_field: Optional[str]) -> list[InputRecord]:
    """The records of in-memory data (a list of strings, a pyarrow Table or Array, a pandas,
    polars or cuDF DataFrame, a Hugging Face Dataset, an Arrow stream), read column by column."""
    texts, ids = memory_columns(data, text_field, id_field)
    return [InputRecord("<memory>", i, i if ids is None else ids[i], text) for i, text in enumerate(texts)]


def memory_columns(data: Any, text_field: str, id_field: Optional[str]) -> tuple[list, Optional[list]]:
    """(texts, ids or None) of in-memory data or of its kept rows (the same types)."""
    if isinstance(data, (list, tuple)) and any(isinstance(item, dict) for item in data):
        # Records: a record without the text field (or an id field) is unreadable.
        field = lambda record, name: (memory_content(record[name])  # noqa: E731
                                      if isinstance(record, dict) and name in record else UNREADABLE)
        ids = None if id_field is None else [
            record[id_field] if isinstance(record, dict) and record.get(id_field) is not None else UNREADABLE
            for record in data]
        return [field(record, text_field) for record in data], ids
    if isinstance(data, (list, tuple)):
        return [memory_content(t) for t in data], None
    if isinstance(data, (pa.Array, pa.ChunkedArray)):  # texts, as a list's
        return [memory_content(t) for t in data.to_pylist()], None
    module = type(data).__module__.split(".")[0]
    if module in ("pandas", "polars") and type(data).__name__ in ("Series", "Index"):  # texts, as a list's
        return [memory_content(None if value is None or isinstance(value, float) and value != value else value)
                for value in data.to_list()], None
    if module == "pandas":
        column = lambda name: [None if value is None or isinstance(value, float) and value != value  # noqa: E731
                               else value for value in data[name].tolist()]
    elif module in ("polars", "cudf"):
        table = data.to_arrow()
        column = lambda name: table[name].to_pylist()  # noqa: E731
    elif module == "datasets":
        column = lambda name: list(data[name])  # noqa: E731
    else:
        table = data if isinstance(data, pa.Table) else pa.table(data)
        column = lambda name: table[name].to_pylist()  # noqa: E731

    def values(name: str) -> Optional[list]:
        if "." not in name:
            return column(name)
        names = list(data.columns) if module in ("pandas", "polars", "cudf") else (
            data.column_names if module == "datasets" else table.column_names)
        return column_values(names, column, name)

    texts = [memory_content(t) for t in values(text_field) or []]
    return texts, None if id_field is None else values(id_field)


def memory_content(value: Any) -> Any:
    """One in-memory document's content: None, a text, or token ids (a list, tuple or numpy
    array of integers) as a list of Python ints (content_of says whether they are valid)."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)) or type(value).__module__ == "numpy" and getattr(value, "ndim", 0) == 1:
        return content_of([v if isinstance(v, (int, float)) or v is None else int(v) for v in list(value)])
    if isinstance(value, bytes):  # (texts stored as bytes are UTF-8 text, as in a Parquet file)
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return UNREADABLE
    return str(value)


# --- the check ---------------------------------------------------------------------------------


def check(records: Sequence[InputRecord], run: RunOutcome) -> None:
    """Raise ConservationError unless every record is accounted for exactly once and the
    report's counts are the recounted ones (see the module docstring)."""
    problems: list[str] = []
    if run.reading.on_error == "stop" and run.skipped:
        problems.append(f"the run skipped {len(run.skipped)} records or files under on_error 'stop'")
    problems += unaccounted_input_files(run)
    whole_files = {e["file"] for e in run.skipped if e.get("line") is None}
    by_place = {(r.file, r.line): r for r in records}
    skipped_places: Counter = Counter()
    for entry in run.skipped:
        if entry.get("line") is None:
            continue
        # (In-memory records are named by their position, in whatever the run calls its input.)
        place = ("<memory>" if run.reading.in_memory else entry["file"], entry["line"])
        skipped_places[place] += 1
        if place not in by_place:
            problems.append(f"errors.jsonl names {entry['file']}:{entry['line']}, which is no input record")
        if entry["file"] in whole_files:
            problems.append(f"{entry['file']}: skipped as a whole and record by record")
    problems += [f"{f}:{line} is in errors.jsonl {n} times" for (f, line), n in skipped_places.items() if n > 1]
    accepted = [r for r in records if r.file not in whole_files and (r.file, r.line) not in skipped_places]
    problems += [f"{r.where}: the checker cannot read this record, yet the run did not skip it"
                 for r in accepted if r.text is UNREADABLE or r.id is UNREADABLE]
    id_count = Counter(r.id for r in accepted)
    problems += [f"id {i!r} is given to {n} records" for i, n in id_count.items() if n > 1]
    record_of = {r.id: r for r in accepted}

    clusters = run.clusters
    members = list(zip(clusters["id"], clusters["cluster"], clusters["keep"], clusters["kept_id"]))
    problems += [f"clusters.parquet lists {i!r} {n} times" for i, n in Counter(clusters["id"]).items() if n > 1]
    cluster_of = {doc: cluster for doc, cluster, _, _ in members}
    removed = {doc for doc, _, keep, _ in members if not keep}
    # A run against a persistent index (report "index"): its clusters also name indexed
    # documents, which are no input records and are never removed; a cluster keeps all of
    # its indexed documents (and none of its new ones) or, without any, one new document.
    against_index = "index" in run.report
    indexed = {doc for doc, _, keep, _ in members if against_index and keep and doc not in record_of}
    indexed_clusters = {cluster_of[doc] for doc in indexed}
    kept_in: Counter = Counter(cluster for doc, cluster, keep, _ in members if keep and doc not in indexed)
    kept_in.update(indexed_clusters)  # one or more indexed documents: that cluster's keep
    for doc, cluster, keep, kept_id in members:
        if doc not in record_of and doc not in indexed:
            problems.append(f"clusters.parquet names {doc!r}, which is no input record that was read")
        if cluster in indexed_clusters and keep and doc not in indexed:
            problems.append(f"{doc!r} is kept in a cluster with an indexed document")
        if keep != (kept_id == doc):
            problems.append(f"clusters.parquet: {doc!r} has keep={keep} but kept_id={kept_id!r}")
        if not keep and (cluster_of.get(kept_id) != cluster or kept_id in removed):
            problems.append(f"removed {doc!r} names {kept_id!r}, which is not the kept document of its cluster")
    sizes = Counter(cluster_of.values())
    problems += [f"cluster {c} keeps {kept_in[c]} documents" for c in sizes if kept_in[c] != 1]
    problems += [f"cluster {c} has a single document" for c, n in sizes.items() if n < 2]

    expected = [r for r in accepted if r.id not in removed]
    problems += compare_kept(expected, run)
    problems += compare_counts(accepted, expected, removed, sizes, len(indexed), run)
    if problems:
        shown = "\n  ".join(problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise ConservationError(f"conservation fails ({len(records)} input records):\n  {shown}{more}")


def compare_kept(expected: list[InputRecord], run: RunOutcome) -> list[str]:
    """The kept rows are exactly the expected records, in input order, text (and id) equal."""
    problems = []
    if len(run.kept_texts) != len(expected):
        problems.append(f"deduplicated holds {len(run.kept_texts)} rows; {len(expected)} input records are "
                        "neither removed nor skipped")
    if run.kept_per_file is not None:  # each input file's kept records in its own output file
        files = [f["path"] for f in run.report["input"]["files"]]
        wanted = Counter(record.file for record in expected)
        if len(files) != len(run.kept_per_file):
            problems.append(f"{len(run.kept_per_file)} files of kept rows for {len(files)} input files")
        for path, rows in zip(files, run.kept_per_file):
            if rows != wanted[path]:
                problems.append(f"the output file of {path} holds {rows} rows; {wanted[path]} of its records are kept")
    for i, (record, text) in enumerate(zip(expected, run.kept_texts)):
        kept_id = run.kept_ids[i] if run.kept_ids is not None else record.id
        if text != record.text or kept_id != record.id:
            problems.append(f"kept row {i} is {kept_id!r} {str(text)[:40]!r}; expected {record.where} "
                            f"(id {record.id!r}) {str(record.text)[:40]!r}: a record was lost or added before it")
            break
    return problems


def compare_counts(accepted: list[InputRecord], kept: list[InputRecord], removed: set, sizes: Counter,
                   indexed: int, run: RunOutcome) -> list[str]:
    """report.json's counts against the recount (indexed: the indexed documents the clusters
    name, which the results, counting the new data, leave out)."""
    report = run.report
    empty = sum(is_empty(r.text) for r in kept if r.text is not UNREADABLE)
    texts = [r.text for r in accepted if isinstance(r.text, (str, list))]
    recount = {
        ("input", "documents"): len(accepted),
        ("input", "skipped_records"): len(run.skipped),
        ("input", "null_texts"): sum(r.text is None for r in accepted),
        ("input", "text_bytes"): sum(content_bytes(t) for t in texts),
        ("input", "empty_documents"): empty,
        ("results", "removed_documents"): len(removed),
        ("results", "kept_documents"): len(kept),
        ("results", "clusters"): len(sizes),
        ("results", "documents_in_clusters"): sum(sizes.values()) - indexed,
        ("balance", "input_records"): len(accepted) + len(run.skipped),
        ("balance", "kept"): len(kept) - empty,
        ("balance", "kept_empty"): empty,
        ("balance", "removed_duplicates"): len(removed),
        ("balance", "skipped"): len(run.skipped),
    }
    problems = [f"report {a}.{b} = {report[a][b]}, recounted {value}"
                for (a, b), value in recount.items() if report[a][b] != value]
    if report["balance"]["balanced"] is not True:
        problems.append("report balance.balanced is not true")
    per_file = Counter(r.file for r in accepted)
    for entry in report["input"]["files"]:
        if not run.reading.in_memory and entry["documents"] != per_file.get(entry["path"], 0):
            problems.append(f"report: {entry['path']} has {entry['documents']} documents, recounted "
                            f"{per_file.get(entry['path'], 0)}")
    return problems


def unaccounted_input_files(run: RunOutcome) -> list[str]:
    """The input files under the paths the run was given (the checker's own walk; hidden
    entries and symbolic links inside directories left out) that it neither read nor skipped
    nor listed as passed over: a reader cannot drop a whole file unnoticed."""
    reading = run.reading
    read = {absolute if is_url(absolute) else os.path.abspath(absolute) for _, absolute in reading.files}
    # A file read under another name (an input folder given twice, once through a link) is read.
    read_real = {os.path.realpath(place) for place in read if not is_url(place)}
    passed_over: Optional[list[str]] = None  # placed only when a file is not among those read
    problems = []
    for given in reading.paths:
        for path in input_files_under(given.rstrip("/") if is_url(given) else Path(given)):
            if str(path) in read or (not is_url(str(path)) and os.path.realpath(path) in read_real):
                continue
            if passed_over is None:
                shown = [e["file"] for e in run.skipped if e.get("line") is None]
                shown += run.report["input"]["skipped_files"]
                passed_over = [s if is_url(s) else os.path.abspath(reading.locate(s)) for s in shown]
                # (a folder passed over under another name: an input folder given twice, once
                # through a link, is walked once, and what it skips is named as first met)
                passed_real = [os.path.realpath(place) for place in passed_over if not is_url(place)]
            # A skipped directory (one that could not be read) accounts for everything below it;
            # a name that is not UTF-8 is shown with U+FFFD for each byte that is not.
            name = str(path).encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            real = None if is_url(str(path)) else os.path.realpath(path)
            if not any(name == place or name.startswith(place.rstrip("/") + "/") for place in passed_over) and \
                    not (real is not None and any(real == place or real.startswith(place.rstrip("/") + "/")
                                                  for place in passed_real)):
                problems.append(f"{path}: an input file under {given} that the run neither read nor skipped")
    return problems


def input_files_under(given) -> list:
    """The input files (by name: JSONL, Parquet, .txt) at or under ``given`` (absolute, or a
    URL: then the URLs of the objects below it, hidden names left out), sorted."""
    if is_url(given):
        filesystem, root = url_filesystem(given)
        if filesystem.get_file_info(root).type == pafs.FileType.File:
            return [given] if file_kind(given) else []
        # Each object by its key as it is ("in//a", "in/./a" are objects of their own).
        below = [entry.path[len(root.rstrip("/")) + 1:] for entry in filesystem.get_file_info(
            pafs.FileSelector(root, recursive=True)) if entry.type == pafs.FileType.File]
        listed, folders = set(below), {relative.rpartition("/")[0] for relative in below}
        metadata = {f"{folder}/{name}".lstrip("/") for folder in folders for name in DATASET_METADATA
                    if all(f"{folder}/{other}".lstrip("/") in listed for other in DATASET_METADATA)}
        return sorted(f"{given}/{relative}" for relative in below if file_kind(f"{given}/{relative}")
                      and relative not in metadata
                      and not any(part.startswith(".") and part not in (".", "..") for part in relative.split("/")))
    if not given.is_dir():
        return [given] if file_kind(given) and given.is_file() else []
    found = []
    for root, dirs, names in os.walk(given):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        metadata = DATASET_METADATA if all(name in names for name in DATASET_METADATA) else ()
        found += [Path(root) / name for name in names if not name.startswith(".") and file_kind(Path(name))
                  and name not in metadata and (Path(root) / name).is_file() and not (Path(root) / name).is_symlink()]
    return sorted(found)


# --- runs: from an output directory, from a result object --------------------------------------


def read_run_files(reading: Reading) -> list[InputRecord]:
    """The records of every file the run read (report.json's input.files), in reading order,
    each read from its absolute path and named as the run shows it."""
    return [record for shown, absolute in reading.files
            for record in read_file_records(absolute if is_url(absolute) else Path(absolute), shown,
                                            reading.text_field, reading.id_field)]


def input_records(reading: Reading, data: Any, where: str) -> list[InputRecord]:
    """The records of the run's input: its files read again, or its in-memory ``data`` (as the
    test passed it), which only the test can give."""
    if not reading.in_memory:
        return read_run_files(reading)
    if data is None:
        raise ConservationError(f"{where}: a run over in-memory data can only be checked with its data")
    return memory_records(data, reading.text_field, reading.id_field)


def table_columns(table: pa.Table, text_field: str, id_field: Optional[str]) -> tuple[list, Optional[list]]:
    """(texts, ids or None) of the kept rows as a pyarrow Table. Without the text column the
    texts read as nulls, which compare_kept finds wrong unless the input's texts were null too."""
    column = lambda name: table[name].to_pylist()  # noqa: E731
    texts = column_values(table.column_names, column, text_field) or [None] * table.num_rows
    # Kept rows keep their file's types: a binary text column comes back as bytes.
    texts = [text.decode("utf-8") if isinstance(text, bytes) else text for text in texts]
    return texts, column_values(table.column_names, column, id_field) if id_field else None


def kept_rows(path: Path, text_field: str, id_field: Optional[str]) -> tuple[list, Optional[list]]:
    """(texts, ids or None) of deduplicated.parquet or deduplicated.jsonl."""
    if path.suffix == ".parquet":
        return table_columns(pq.read_table(path), text_field, id_field)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    value = lambda row, name: None if (v := field_value(row, name)) is UNREADABLE else v  # noqa: E731
    ids = ([value(row, id_field) for row in rows]
           if id_field and any(field_value(row, id_field) is not UNREADABLE for row in rows) else None)
    return [value(row, text_field) for row in rows], ids


def check_output_dir(out: Path, data: Any = None) -> None:
    """Check the run whose outputs are in ``out`` against its input files, or against its
    in-memory ``data`` (as the test passed it to gpudedup.dedup; unused for a run over files).
    Everything about how to read the input comes from report.json (Reading)."""
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    skipped = []
    if (out / "errors.jsonl").exists():
        skipped = [json.loads(line) for line in (out / "errors.jsonl").read_text(encoding="utf-8").splitlines()
                   if line.strip()]
    try:
        reading = Reading.of(report)
        texts, kept_ids, per_file = [], None, []
        for path in kept_files(out):  # one per input file, in input order (or the one file)
            file_texts, file_ids = kept_rows(path, reading.text_field, reading.id_field)
            texts += file_texts
            per_file.append(len(file_texts))
            if file_ids is not None:
                kept_ids = (kept_ids or []) + file_ids
        files_layout = report.get("output", {}).get("layout") == "files"
        records = input_records(reading, data, str(out))
        clusters = read_clusters(out).to_pydict()
        check(records, RunOutcome(texts, kept_ids, clusters, skipped, report, reading,
                                  per_file if files_layout else None))
    except ConservationError as error:
        raise ConservationError(f"{out}: {error}") from None


def check_result(result: Any, data: Any = None) -> None:
    """Check a result ``gpudedup.dedup`` returned against its input: files are read again by
    the checker, in-memory ``data`` (as the test passed it) column by column."""
    report = result.report.as_dict() if hasattr(result.report, "as_dict") else dict(result.report)
    reading = Reading.of(report)
    records = input_records(reading, data, "the result")
    if reading.in_memory:
        texts, ids = memory_columns(result.deduplicated, reading.text_field, reading.id_field)
    else:
        texts, ids = table_columns(result.deduplicated, reading.text_field, reading.id_field)
    check(records, RunOutcome(texts, ids, result.clusters.to_pydict(), list(result.skipped_records), report,
                              reading))


def check_reading_as_asked(report: Any, text_field: str, id_field: Optional[str], on_error: str,
                           paths: Sequence[str | os.PathLike]) -> None:
    """The reading report.json states is the one the caller asked for (``paths`` as given, in
    the run's working directory; none for in-memory data). Checked for every run in this
    process, so that the checker can take the reading of a run in a subprocess from its report."""
    report = report.as_dict() if hasattr(report, "as_dict") else dict(report)
    reading = Reading.of(report)
    asked = (text_field, id_field, on_error, tuple(absolute_place(p) for p in paths))
    stated = (reading.text_field, reading.id_field, reading.on_error, reading.paths)
    if stated[:3] != asked[:3] or len(stated[3]) != len(asked[3]) or \
            not all(shows_as(shown, place) for shown, place in zip(stated[3], asked[3])):
        raise ConservationError(f"report.json states the reading (text_field, id_field, on_error, paths) "
                                f"{stated}; the run was asked for {asked}")
