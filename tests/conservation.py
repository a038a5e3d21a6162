"""Conservation checked from outside: every input record is accounted for exactly once.

The check never asks gpudedup how many records it read. It reads the inputs itself (json for
JSONL and .jsonl.gz lines, pyarrow.parquet for Parquet, plain bytes for .txt, the list or table
itself for in-memory data) and then requires, per record:

- every input record is exactly one of: a kept row of ``deduplicated.*`` (in input order, with
  its own text and id), a removed document (a clusters.parquet row with keep=False whose
  kept_id is kept and in the same cluster), or a skipped record of errors.jsonl (its file and
  line; a whole file when line is null). Empty documents are kept rows, counted apart;
- the report's counts (documents per file and in all, skipped, null texts, text bytes, empty,
  removed, kept, clusters, the balance) equal those recounted from the files.

A record the reader drops silently is then a kept row missing from deduplicated.*, and a kept
row the writer drops is the same; neither can balance. conftest.py applies ``check_output_dir``
to every output directory the suite's runs write and ``check_result`` to every result
``gpudedup.dedup`` returns.
"""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

# Unicode's White_Space property (PropList.txt), which DESIGN.md's normalisation collapses and
# strips: a document of only these (or a null text) has no shingles, an "empty document".
WHITE_SPACE = frozenset(map(chr, [*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                                  0x2028, 0x2029, 0x202F, 0x205F, 0x3000]))
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json", ".jsonl.gz", ".ndjson.gz", ".json.gz")
PARQUET_SUFFIXES = (".parquet", ".pq")
TEXT_SUFFIXES = (".txt",)
# The checker's reader could not read the record (not JSON, not UTF-8, ...): the run must
# have skipped it.
UNREADABLE = object()


class ConservationError(AssertionError):
    """A run lost, invented or miscounted an input record."""


@dataclass(frozen=True)
class InputRecord:
    """One input record as the checker reads it.

    file: the file as the run names it (report.json, errors.jsonl, ids), or "<memory>";
    line: JSONL line, Parquet row or 1 for a .txt file (from 1), or the position (from 0) of
    in-memory data; id: the id the run must give it; text: str, None (null or missing), or
    UNREADABLE.
    """

    file: str
    line: int
    id: Any
    text: Any

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class RunOutcome:
    """What a run says became of its input.

    kept_texts / kept_ids: the text (and, where the kept rows carry it, the id) of every row of
    deduplicated.*, in order; clusters: clusters.parquet as columns (id, cluster, keep,
    kept_id); skipped: errors.jsonl's objects (file, line, reason); report: report.json.
    """

    kept_texts: list
    kept_ids: Optional[list]
    clusters: dict
    skipped: list
    report: dict
    files: list = field(default_factory=list)  # [(shown path, real Path)] in reading order


def is_empty(text: Any) -> bool:
    """No shingles: a null text or one of white space only."""
    return text is None or all(ch in WHITE_SPACE for ch in text)


# --- the checker's own readers ------------------------------------------------------------------


def file_kind(path: Path) -> Optional[str]:
    name = path.name.lower()
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    if name.endswith(TEXT_SUFFIXES):
        return "text"
    return None


def run_id(shown: str, line: int, fields: dict, id_field: Optional[str]) -> Any:
    """The id the run gives a record: its id field, or ``<path>:<line>`` without one."""
    return f"{shown}:{line}" if id_field is None else fields.get(id_field)


def read_file_records(path: Path, shown: str, text_field: str, id_field: Optional[str]) -> list[InputRecord]:
    """The records of one input file, in order. Raises OSError/ValueError when the file as a
    whole cannot be read (the run must then have skipped or refused it)."""
    kind = file_kind(path)
    if kind == "jsonl":
        raw = path.read_bytes()
        if path.name.lower().endswith(".gz"):
            raw = gzip.decompress(raw)
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
            text = fields.get(text_field)
            records.append(InputRecord(shown, number, run_id(shown, number, fields, id_field),
                                       text if text is None or isinstance(text, str) else UNREADABLE))
        return records
    if kind == "parquet":
        table = pq.read_table(path)
        texts = table[text_field].to_pylist() if text_field in table.column_names else [None] * table.num_rows
        ids = table[id_field].to_pylist() if id_field in (table.column_names if id_field else []) else None
        records = []
        for row, text in enumerate(texts):
            if isinstance(text, bytes):
                try:
                    text = text.decode("utf-8")
                except UnicodeDecodeError:
                    text = UNREADABLE
            fields = {id_field: ids[row]} if ids is not None else {}
            records.append(InputRecord(shown, row + 1, run_id(shown, row + 1, fields, id_field), text))
        return records
    if kind == "text":
        try:
            text = path.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError:
            text = UNREADABLE
        return [InputRecord(shown, 1, f"{shown}:1" if id_field is None else UNREADABLE, text)]
    raise ValueError(f"{path}: not an input file")


def memory_records(data: Any, text_field: str, id_field: Optional[str]) -> list[InputRecord]:
    """The records of in-memory data (a list of strings, a pyarrow Table, a pandas, polars or
    cuDF DataFrame, a Hugging Face Dataset, an Arrow stream), read column by column."""
    texts, ids = memory_columns(data, text_field, id_field)
    return [InputRecord("<memory>", i, i if ids is None else ids[i], text) for i, text in enumerate(texts)]


def memory_columns(data: Any, text_field: str, id_field: Optional[str]) -> tuple[list, Optional[list]]:
    """(texts, ids or None) of in-memory data or of its kept rows (the same types)."""
    if isinstance(data, (list, tuple)):
        return list(data), None
    module = type(data).__module__.split(".")[0]
    if module == "pandas":
        column = lambda name: [None if value is None or value != value else value  # noqa: E731
                               for value in data[name].tolist()]
    elif module in ("polars", "cudf"):
        table = data.to_arrow()
        column = lambda name: table[name].to_pylist()  # noqa: E731
    elif module == "datasets":
        column = lambda name: list(data[name])  # noqa: E731
    else:
        table = data if isinstance(data, pa.Table) else pa.table(data)
        column = lambda name: table[name].to_pylist()  # noqa: E731
    texts = [None if t is None else str(t) for t in column(text_field)]
    return texts, None if id_field is None else column(id_field)


# --- the check ---------------------------------------------------------------------------------


def check(records: Sequence[InputRecord], run: RunOutcome) -> None:
    """Raise ConservationError unless every record is accounted for exactly once and the
    report's counts are the recounted ones (see the module docstring)."""
    problems: list[str] = []
    whole_files = {e["file"] for e in run.skipped if e.get("line") is None}
    by_place = {(r.file, r.line): r for r in records}
    skipped_places: Counter = Counter()
    for entry in run.skipped:
        if entry.get("line") is None:
            continue
        place = (entry["file"], entry["line"])
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
    kept_in: Counter = Counter(cluster for _, cluster, keep, _ in members if keep)
    removed = {doc for doc, _, keep, _ in members if not keep}
    for doc, cluster, keep, kept_id in members:
        if doc not in record_of:
            problems.append(f"clusters.parquet names {doc!r}, which is no input record that was read")
        if keep != (kept_id == doc):
            problems.append(f"clusters.parquet: {doc!r} has keep={keep} but kept_id={kept_id!r}")
        if not keep and (cluster_of.get(kept_id) != cluster or kept_id in removed):
            problems.append(f"removed {doc!r} names {kept_id!r}, which is not the kept document of its cluster")
    sizes = Counter(cluster_of.values())
    problems += [f"cluster {c} keeps {kept_in[c]} documents" for c in sizes if kept_in[c] != 1]
    problems += [f"cluster {c} has a single document" for c, n in sizes.items() if n < 2]

    expected = [r for r in accepted if r.id not in removed]
    problems += compare_kept(expected, run)
    problems += compare_counts(accepted, expected, removed, sizes, run)
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
    for i, (record, text) in enumerate(zip(expected, run.kept_texts)):
        kept_id = run.kept_ids[i] if run.kept_ids is not None else record.id
        if text != record.text or kept_id != record.id:
            problems.append(f"kept row {i} is {kept_id!r} {str(text)[:40]!r}; expected {record.where} "
                            f"(id {record.id!r}) {str(record.text)[:40]!r}: a record was lost or added before it")
            break
    return problems


def compare_counts(accepted: list[InputRecord], kept: list[InputRecord], removed: set, sizes: Counter,
                   run: RunOutcome) -> list[str]:
    """report.json's counts against the recount."""
    report = run.report
    empty = sum(is_empty(r.text) for r in kept if r.text is not UNREADABLE)
    texts = [r.text for r in accepted if isinstance(r.text, str)]
    recount = {
        ("input", "documents"): len(accepted),
        ("input", "skipped_records"): len(run.skipped),
        ("input", "null_texts"): sum(r.text is None for r in accepted),
        ("input", "text_bytes"): sum(len(t.encode("utf-8", "surrogatepass")) for t in texts),
        ("input", "empty_documents"): empty,
        ("results", "removed_documents"): len(removed),
        ("results", "kept_documents"): len(kept),
        ("results", "clusters"): len(sizes),
        ("results", "documents_in_clusters"): sum(sizes.values()),
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
        if run.files and entry["documents"] != per_file.get(entry["path"], 0):
            problems.append(f"report: {entry['path']} has {entry['documents']} documents, recounted "
                            f"{per_file.get(entry['path'], 0)}")
    return problems


# --- runs: from an output directory, from a result object --------------------------------------


@dataclass
class RunArgs:
    """What the test asked for, where it is known (in-process runs): the fields, the inputs
    as given and the working directory they are relative to."""

    text_field: str = "text"
    id_field: Optional[str] = None
    inputs: Optional[list] = None
    cwd: Optional[Path] = None


def resolve(shown: str, bases: Sequence[Path]) -> Optional[Path]:
    """The file a run named ``shown`` (relative to its working directory, or absolute)."""
    if os.path.isabs(shown):
        return Path(shown)
    for base in bases:
        if (base / shown).is_file():
            return base / shown
    return None


def read_run_files(report: dict, skipped: list, text_field: str, id_field: Optional[str],
                   bases: Sequence[Path]) -> tuple[list[InputRecord], list]:
    """The records of every file the run read or skipped record by record, in reading order."""
    shown_files = [entry["path"] for entry in report["input"]["files"]]
    shown_files += sorted({e["file"] for e in skipped if e.get("line") is not None} - set(shown_files))
    records, files = [], []
    for shown in shown_files:
        path = resolve(shown, bases)
        if path is None:
            raise ConservationError(f"cannot find the input file {shown!r} (report.json names it relative to "
                                    f"the run's working directory); looked in {', '.join(map(str, bases))}")
        files.append((shown, path))
        records += read_file_records(path, shown, text_field, id_field)
    return records, files


def check_inputs_found(args: RunArgs, report: dict, skipped: list) -> None:
    """Every input file under the paths given (found by the checker's own walk, hidden entries
    left out) was read, skipped, or listed as passed over: a reader cannot drop a file."""
    accounted = {str(resolve(e["path"], [args.cwd])) for e in report["input"]["files"]}
    accounted |= {str(resolve(e["file"], [args.cwd])) for e in skipped}
    accounted |= {str(resolve(p, [args.cwd])) for p in report["input"]["skipped_files"]}
    for given in args.inputs:
        given = Path(given) if os.path.isabs(given) else args.cwd / given
        if given.is_file():
            continue  # a file given by name fails the run when it cannot be read
        for root, dirs, names in os.walk(given):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for name in names:
                path = Path(root) / name
                if (not name.startswith(".") and file_kind(path) and path.is_file() and not path.is_symlink()
                        and str(path) not in accounted):
                    raise ConservationError(f"{path}: an input file the run neither read nor skipped")


def kept_rows(path: Path, text_field: str, id_field: Optional[str]) -> tuple[list, Optional[list], list]:
    """(texts, ids or None, column names) of deduplicated.parquet or deduplicated.jsonl."""
    if path.suffix == ".parquet":
        table = pq.read_table(path)
        columns = table.column_names
        texts = table[text_field].to_pylist() if text_field in columns else [None] * table.num_rows
        ids = table[id_field].to_pylist() if id_field in columns else None
        return texts, ids, columns
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    columns = sorted({key for row in rows for key in row})
    ids = [row.get(id_field) for row in rows] if id_field in columns else None
    return [row.get(text_field) for row in rows], ids, columns


def check_output_dir(out: Path, args: Optional[RunArgs] = None, data: Any = None) -> None:
    """Check the run whose outputs are in ``out`` against its input files, or against its
    in-memory ``data`` (as the test passed it to gpudedup.dedup).

    report.json does not yet say which text and id fields the run used, and names inputs
    relative to the run's working directory; where ``args`` (an in-process run) does not say,
    the working directory is looked for among ``out``'s ancestors, the text field is "text" (or
    the only other column), and the id field is the first of (none, each column) under which
    clusters.parquet's ids are input ids.
    """
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    skipped = []
    if (out / "errors.jsonl").exists():
        skipped = [json.loads(line) for line in (out / "errors.jsonl").read_text(encoding="utf-8").splitlines()
                   if line.strip()]
    deduplicated = out / f"deduplicated.{report.get('output', {}).get('format', 'parquet')}"
    clusters = pq.read_table(out / "clusters.parquet").to_pydict()
    args = args or RunArgs()
    parameters = report.get("parameters", {})
    text_field = parameters.get("text_field", args.text_field)
    _, _, columns = kept_rows(deduplicated, text_field, None)
    if text_field not in columns and columns and "text_field" not in parameters:
        others = [c for c in columns if c != "text"]
        text_field = others[0] if len(others) == 1 else text_field
    if data is not None:
        records, files = memory_records(data, text_field, args.id_field), []
        texts, kept_ids, _ = kept_rows(deduplicated, text_field, args.id_field)
        kept_ids = None if args.id_field is None else kept_ids
    else:
        if all(f["format"] in ("list", "table") for f in report["input"]["files"]):
            raise ConservationError(f"{out}: a run over in-memory data can only be checked with its data")
        bases = [args.cwd] if args.cwd else [Path.cwd(), *Path(out).absolute().parents]
        if "id_field" in parameters or args.inputs is not None:
            candidates = [parameters.get("id_field", args.id_field)]
        else:
            candidates = [None, *[c for c in columns if c != text_field]]
        for id_field in candidates:
            records, files = read_run_files(report, skipped, text_field, id_field, bases)
            ids = {r.id for r in records}
            if all(doc in ids for doc in clusters["id"]):
                break
        texts, kept_ids, _ = kept_rows(deduplicated, text_field, id_field)
        if args.inputs is not None:
            check_inputs_found(args, report, skipped)
    try:
        check(records, RunOutcome(texts, kept_ids, clusters, skipped, report, files))
    except ConservationError as error:
        raise ConservationError(f"{out}: {error}") from None


def check_result(result: Any, data: Any, args: RunArgs) -> None:
    """Check a result ``gpudedup.dedup`` returned against its input ``data`` (as the test
    passed it): files are read again by the checker, in-memory data column by column."""
    report = result.report.as_dict() if hasattr(result.report, "as_dict") else dict(result.report)
    clusters = result.clusters.to_pydict()
    skipped = list(result.skipped_records)
    if isinstance(data, (str, os.PathLike)) or (isinstance(data, (list, tuple)) and data
                                                 and all(isinstance(p, os.PathLike) for p in data)):
        records, files = read_run_files(report, skipped, args.text_field, args.id_field, [args.cwd])
        check_inputs_found(args, report, skipped)
        table = result.deduplicated
        texts = table[args.text_field].to_pylist() if args.text_field in table.column_names else [None] * len(table)
        ids = table[args.id_field].to_pylist() if args.id_field in table.column_names else None
    else:
        records, files = memory_records(data, args.text_field, args.id_field), []
        texts, ids = memory_columns(result.deduplicated, args.text_field, args.id_field)
        if args.id_field is None:
            # Positions are the ids; the kept rows do not carry them.
            ids = None
    check(records, RunOutcome(texts, ids, clusters, skipped, report, files))
