"""Reading input files into one Corpus (read_corpus, for a run in memory) or one file at a time
(read_one_file, for a staged run): each file by its format's reader (jsonl.py, parquet.py,
arrow.py, text.py, or cuDF's in cudf_reader.py), then the checks across files (rules.py).

Document ids: the ``id_field`` column (or nested field: io/fields.py) when given, else
``<path>:<row>``, where path is the file as shown (inputs.display_path) and row counts from 1
(for JSONL it is the line number). Leaving records out never changes the ids of the others.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.content import plain_ids
from ..errors import InputError
from ..memory import MemoryBudget
from .corpus import Corpus
from .arrow import read_arrow
from .fields import field_column, has_field, held_table, lossy_columns, writable_schema
from .formats import compression_of, format_of
from .inputs import InputFiles, display_path, scan_inputs
from .layout import output_bases
from .jsonl import read_jsonl
from .parquet import read_parquet
from .rules import PartSummary, columns_error, combined_ids, ids_type, plan_combination, sorted_records
from .sizes import read_bytes_estimate
from .source import SourceFile, check_on_error, file_error, file_record
from .stamps import read_stamp
from . import storage
from .storage import Location
from .text import read_text

def read_corpus(
    paths: Iterable[str | os.PathLike], text_field: str = "text", id_field: Optional[str] = None,
    use_cudf: bool = False, on_error: str = "stop", budget: Optional[MemoryBudget] = None,
    found: Optional[InputFiles] = None,
) -> Corpus:
    """Read every document under ``paths`` into one Corpus.

    use_cudf: parse JSONL and Parquet files with cuDF on the GPU and keep the text there
    (Corpus.device_text); a file cuDF cannot read is read by pyarrow, which also gives the
    errors. Needs cuDF (and the GPU backend); the documents are the same either way.

    on_error: "stop" (default) raises an InputError at the first problem, naming the file and
    line (JSONL), row (Parquet) or field. "skip" leaves out what cannot be used and lists it
    in ``Corpus.skipped_records`` ({"file", "line", "reason"}), so the run goes on:

    * per record (that record is left out; "line" is the JSONL line or Parquet row, from 1):
      a JSONL line that is not valid UTF-8, not valid JSON (or two values on one line), not
      an object, nested more than MAX_JSON_DEPTH deep (jsonl_lines.py: no parser sees such a
      line), with a number too large for a double or a field given twice; a record without
      the text field, or whose text is neither a string (token ids: a list of them) nor null
      (null is kept and counted as a null text, an empty document); an id field (id_field)
      that is missing, null, neither a string nor an integer, or an integer outside int64; a
      field whose JSON type differs from its type on the first line that had it; with
      id_field, a duplicate id (the first is kept); in Parquet and Arrow IPC, a null id or a
      text that is not valid UTF-8;
    * per file (the whole file is left out, recorded once with line None, and per-record
      entries of that file are dropped): a file that cannot be opened or read (permission,
      corrupt or truncated gzip or zstd, not Parquet, corrupt Parquet, not Arrow IPC, a
      Parquet or Arrow file with two columns of one name), a .json file that holds a JSON
      array rather than JSON Lines, a file without the text field or id field at all or with
      a column of the wrong type (Parquet, Arrow), a .txt file that is not valid UTF-8 (or
      any .txt file when id_field is given: it has no fields), a JSONL line over 1 GiB
      (Arrow's block limit), a file whose columns cannot be combined with the files before
      it, and a directory inside the inputs that cannot be read.

    text_field and id_field name a column or a dotted path into struct columns and JSON
    objects (io/fields.py: a top-level column of that very name wins; files that name the text
    field one way and the other are refused, rules.check_named_one_way).

    A path given that does not exist or has an unsupported type stops the run either way, as
    do inputs that hold no input files at all. Leaving records out never changes the ids of
    the records kept (a JSONL record keeps ``<path>:<line>``).

    budget: --max-memory; reading stops before the first file with MemoryLimitError when the
    files' estimated size (io/sizes.py) does not fit.

    found: the scan of ``paths`` (scan_inputs with ``on_error``) where the caller made it for
    its checks before the run; else they are scanned here.
    """
    check_on_error(on_error)
    skip = on_error == "skip"
    # (A Remote by its whole URL: str() hides its credentials, which reading needs.)
    given = [storage.full_name(p) if isinstance(p, storage.Remote) else str(p) for p in paths]
    if found is None:
        found = scan_inputs(given, on_error)
    if budget is not None:
        budget.check("reading the input", lambda: read_bytes_estimate([(p, format_of(p)) for p in found.files],
                                                                      path_ids=id_field is None),
                     "deduplicate the input in parts, or raise max_memory=")
    parts: list[FilePart] = []
    records = list(found.records)
    for path in found.files:
        source = SourceFile(display_path(path), format_of(path), location=storage.full_name(path.absolute()))
        try:
            # Taken before the read: a change while it reads is one the write refuses.
            source.stamp = read_stamp(path, source.format)
            part = read_one_file(path, source, text_field, id_field, use_cudf, on_error)
        except InputError as error:
            if not skip:
                raise
            records.append(file_record(error, source.path))
            continue
        parts.append(part)
    combination = plan_combination([part.summary() for part in parts], text_field, id_field, on_error)
    for index in combination.kept:  # a file left out whole is recorded once, by the plan
        records.extend(parts[index].records)
    records.extend(combination.records)
    parts = [parts[index].keep_rows(combination.keep_mask(index, parts[index].table.num_rows))
             for index in combination.kept]
    corpus = build_corpus(parts, text_field, id_field, found, given)
    corpus.output_bases = output_bases(found.files, found.given)
    corpus.skipped_records = sorted_records(records, found)
    if use_cudf and any(part.device_part is not None for part in parts):
        from .cudf_reader import device_text_of  # (cuDF is optional: its reader is loaded where it reads)

        corpus.device_text = device_text_of([p.table for p in parts], text_field,
                                            [p.device_part for p in parts])
    return corpus


@dataclass
class FilePart:
    """One file as read: its rows, their ids, where they came from, what was left out."""

    source: SourceFile
    table: pa.Table
    ids: pa.Array
    device_part: Optional[tuple] = None
    records: list[dict] = field(default_factory=list)

    def summary(self) -> PartSummary:
        """What the checks across files need of this file (rules.plan_combination)."""
        return PartSummary.of_ids(self.source.path, self.source.format, self.ids, self.table.schema,
                                  self.source.row_numbers)

    def keep_rows(self, mask: Optional[np.ndarray]) -> FilePart:
        """This part with only the rows where ``mask`` (bool (rows,); None: all) is True; the
        row numbers follow, so the rows kept keep their FILE:LINE."""
        if mask is None or mask.all():
            return self
        self.table = self.table.filter(pa.array(mask))
        self.ids = self.ids.filter(pa.array(mask))
        numbers = self.source.row_numbers
        self.source.row_numbers = (numbers if numbers is not None else np.arange(1, mask.shape[0] + 1))[mask]
        self.source.rows = self.table.num_rows
        self.device_part = None  # the device copy is made from the kept host text instead
        return self


def read_one_file(path: Location, source: SourceFile, text_field: str, id_field: Optional[str],
                  use_cudf: bool, on_error: str) -> FilePart:
    """One file as a FilePart; every problem with it is an InputError naming it."""
    device_part: Optional[tuple] = None
    records: list[dict] = []
    try:
        by_cudf = None
        # (cuDF reads local files whole, plain or gzipped, with the text field a column)
        if (use_cudf and source.format in ("jsonl", "parquet") and source.piece is None and isinstance(path, Path)
                and compression_of(path) in (None, "gzip") and "." not in text_field):
            from .cudf_reader import read_file_with_cudf  # (cuDF is optional: its reader is loaded where it reads)

            by_cudf = read_file_with_cudf(path, source, text_field, id_field)
        if by_cudf is not None:
            table, row_numbers, device_part = by_cudf
        else:
            table, row_numbers, records = read_file(path, source, text_field, id_field, on_error)
    except InputError:
        raise
    except PermissionError:
        raise file_error(source.path, "permission denied") from None
    except IsADirectoryError:
        raise file_error(source.path, "is a directory, expected a file") from None
    except (pa.ArrowException, OSError, UnicodeError, RecursionError, MemoryError) as error:
        # The readers turn every problem they know into a message of their own; this names
        # the file for anything else the libraries raise on content they cannot read.
        raise file_error(source.path, f"cannot read ({type(error).__name__}: {error})") from None
    source.rows, source.row_numbers = table.num_rows, row_numbers
    # (A reader may have set it before making the text column plain.) The kept rows are
    # written with these columns.
    source.schema = writable_schema(source.schema if source.schema is not None else table.schema)
    if id_field is None:
        ids = default_ids(source.path, row_numbers)
    elif has_field(table.schema, id_field):
        ids = plain_ids(field_column(table, id_field).combine_chunks())
    elif table.num_rows == 0:  # a file without records (empty, blank lines, all left out)
        ids = pa.array([], pa.string())
    else:
        raise file_error(source.path, f"no id field {id_field!r}")
    return FilePart(source, table, ids, device_part, records)


def default_ids(path: str, row_numbers: np.ndarray) -> pa.Array:
    """The ids of a file's rows without an id field: ``<path>:<row>`` (row_numbers int64, the
    JSONL line or row of each row, from 1), as one string array however many rows there are
    (Arrow writes the numbers: a numpy unicode array of them becomes a ChunkedArray once it
    passes about 200 MB)."""
    if not len(row_numbers):
        return pa.array([], pa.string())
    numbers = pa.array(np.asarray(row_numbers, dtype=np.int64)).cast(pa.string())
    return pc.binary_join_element_wise(path, numbers, ":")


def build_corpus(parts: list[FilePart], text_field: str, id_field: Optional[str],
                 found: InputFiles, paths: list[str]) -> Corpus:
    """One Corpus of the parts' rows, in order: the parts a plan_combination kept (a run in
    memory), or one file (a staged run); no parts (every file left out) give an empty corpus."""
    sources = [p.source for p in parts]
    if parts:
        table = concat_tables([p.table for p in parts], sources)
        ids = combined_ids([p.ids for p in parts], ids_type([p.summary() for p in parts], id_field))
    else:  # every file was left out (on_error "skip")
        table = pa.table({text_field: pa.array([], pa.large_string())})
        ids = pa.array([], pa.string())
    return Corpus(table, text_field, ids, sources, found.skipped, paths, notes=found.notes)


def concat_tables(tables: list[pa.Table], sources: list[SourceFile]) -> pa.Table:
    """The tables as one, their columns unified (plan_combination decided that they can be;
    this still names the files if Arrow cannot cast some values to the unified types)."""
    if len(tables) == 1:
        return tables[0]
    tables = [held_table(table) for table in tables]  # (a string_view beside a large_string: Corpus holds neither)
    try:
        combined = pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise columns_error(error, [s.path for s in sources]) from None
    # Each file's rows are written back in its own types from these: values the combined type
    # does not hold (a long decimal beside doubles) would come back changed, so such a file's
    # rows are refused where they are written from them (SourceFile.check_not_rounded).
    for table, source in zip(tables, sources, strict=True):
        source.rounded = tuple(lossy_columns(table, combined.schema))
    return combined


def read_file(path: Location, source: SourceFile, text_field: str, id_field: Optional[str],
              on_error: str = "stop") -> tuple[pa.Table, np.ndarray, list[dict]]:
    """One file as (table, row numbers int64 (rows,) counted from 1, skipped records)."""
    if source.format == "jsonl":
        return read_jsonl(path, source, text_field, id_field, on_error)
    if source.format == "parquet":
        return read_parquet(path, source, text_field, id_field, on_error)
    if source.format == "arrow":
        return read_arrow(path, source, text_field, id_field, on_error)
    return read_text(path, source, text_field, id_field)
