"""The checks across input files, written once for every mode: the files' columns can be
combined, the ids are of one kind (integers or strings) and unique; and the skipped records
of all files in input order.

A run in memory has every file's table at once; a staged run reads one file at a time and
keeps of each only its ids, its columns and where its rows came from. Both describe each file
they read as a ``PartSummary`` and ask ``plan_combination`` what to do with it: the decision
is pure (no file is read, nothing is changed), so the two modes leave out the same files and
rows under on_error "skip" and stop with the same message under "stop".

Vocabulary. A *part* is one input file as its reader gave it (records it left out are not in
it). A *row* of a part is the 0-based position of a record among that part's rows, in order,
as read; ``row_numbers[row]`` is where that record is in the file (JSONL line or Parquet row,
from 1), which is what messages and skipped records show (``FILE:LINE`` / ``FILE row N``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Protocol, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..memory import release_unused_memory
from .corpus import plain_text_type
from .inputs import InputFiles, display_path
from .source import check_on_error, locate

if TYPE_CHECKING:
    from .corpus import Corpus


@dataclass(frozen=True)
class PartSummary:
    """One input file as read, as much of it as the checks across files need.

    path: the file as shown in ids and messages (inputs.display_path).
    format: "jsonl", "parquet" or "text" (decides ``FILE:LINE`` or ``FILE row N``).
    ids: pa.Array, one id per row of the part, in order: without id_field the strings
        ``<path>:<line>``; with it the id column as read (any integer type, or string /
        large_string; no nulls). Any type of one kind is fine: plan_combination casts.
    schema: the part's own columns as its reader gave them (before Corpus casts the text
        column); a file with no records has at least the text column.
    row_numbers: int64 (rows,), the JSONL line or Parquet row (from 1) of each row; None when
        row r is record r + 1 (nothing was left out inside the file).
    """

    path: str
    format: str
    ids: pa.Array
    schema: pa.Schema
    row_numbers: Optional[np.ndarray] = None

    @property
    def rows(self) -> int:
        return len(self.ids)

    def number(self, row: int) -> int:
        """The JSONL line or Parquet row (from 1) of ``row`` (from 0)."""
        return int(self.row_numbers[row]) if self.row_numbers is not None else row + 1

    def where(self, row: int) -> str:
        """'FILE:LINE' (JSONL) or 'FILE row N' of ``row`` (from 0)."""
        return locate(self.path, self.format, self.number(row))


@dataclass(frozen=True)
class Combination:
    """What plan_combination decided for the parts it was given (indices are into that list).

    kept: the parts kept, ascending. left_out: the parts left out whole (on_error "skip"
        only): their columns or their kind of id cannot be combined with the parts before them.
    repeated: for a kept part, int64 ascending rows (0-based, of the part as read) left out
        because their id was used by an earlier row (on_error "skip" with an id_field only);
        a part without such rows is absent.
    records: one skipped record per part left out ({"file", "line": None, "reason"}) and one
        per repeated row ({"file", "line": its JSONL line or Parquet row, "reason"}), ordered
        by part, then line. The caller drops the per-record entries its readers made for the
        parts left out (a file left out whole is recorded once) and merges the rest with
        these (sorted_records).
    schema: the kept parts' columns unified with Arrow's permissive promotion (fields in order
        of first appearance), the text column made string or large_string as Corpus makes it;
        with no part kept, the text column alone (large_string).
    id_type: pa.int64() when an id_field is given and every kept part with rows has integer
        ids; pa.string() otherwise (always without id_field).
    """

    kept: tuple[int, ...]
    left_out: tuple[int, ...]
    repeated: dict[int, np.ndarray]
    records: list[dict]
    schema: pa.Schema
    id_type: pa.DataType

    def keep_mask(self, index: int, rows: int) -> Optional[np.ndarray]:
        """bool (rows,): which rows of kept part ``index`` stay; None when all of them do."""
        if index not in self.repeated:
            return None
        mask = np.ones(rows, dtype=bool)
        mask[self.repeated[index]] = False
        return mask

    def ids(self, parts: Sequence[PartSummary]) -> pa.Array:
        """The ids of every row kept, in input order, of type ``id_type``: the corpus's ids."""
        kept = []
        for index in self.kept:
            ids = parts[index].ids
            mask = self.keep_mask(index, len(ids))
            kept.append(ids if mask is None else ids.filter(pa.array(mask)))
        return combined_ids(kept, self.id_type)


def plan_combination(parts: Sequence[PartSummary], text_field: str, id_field: Optional[str],
                     on_error: str) -> Combination:
    """Decide how the parts (every file read, in input order) combine into one input.

    on_error "stop" raises an InputError, in this order, when the parts' columns cannot be
    combined ("the input files have columns of incompatible types and cannot be combined
    (...); files: ..."), when the id_field holds integers in some parts and strings in others,
    or when an id is used twice ("duplicate id ...: documents FILE:LINE, ... share it (...)").
    on_error "skip" leaves out, going through the parts in order, a part whose columns cannot
    be combined with those of the parts kept before it, or whose ids are of the other kind;
    then, with an id_field, every row whose id an earlier row has (the first is kept). Without
    an id_field a repeated id (``<path>:<line>``) raises under either.
    """
    check_on_error(on_error)
    skip = on_error == "skip"
    if skip:
        kept, left_out, records = compatible(parts, id_field)
    else:
        check_combinable(parts, id_field)
        kept, left_out, records = list(range(len(parts))), [], []
    chosen = [parts[i] for i in kept]
    id_type = ids_type([part.ids for part in chosen], id_field)
    repeated: dict[int, np.ndarray] = {}
    if skip and id_field is not None:
        for index, rows, found in repeated_rows(chosen, id_type):
            repeated[kept[index]] = rows
            records.extend(found)
    else:
        error = duplicate_id_error(combined_ids([part.ids for part in chosen], id_type), row_locator(chosen))
        if error is not None:
            raise error
    order = {part.path: i for i, part in enumerate(parts)}
    records.sort(key=lambda r: (order[r["file"]], r["line"] or 0))
    # The id checks' hash tables are Arrow's, and its default pool (mimalloc) keeps the pages
    # it freed: about 300 MB for the rest of a run of 2.56 million ids (docs/performance.md).
    release_unused_memory()
    return Combination(tuple(kept), tuple(left_out), repeated, records, combined_schema(chosen, text_field),
                       id_type)


# --- the rules, one function each ----------------------------------------------------------------


def columns_error(error: Exception, paths: Sequence[str]) -> InputError:
    return InputError(f"the input files have columns of incompatible types and cannot be combined ({error}); "
                      f"files: {', '.join(paths)}")


def id_kind(ids: pa.Array, id_field: Optional[str]) -> Optional[bool]:
    """True (integers) or False (strings) for a part's ids; None when it has none or there is
    no id_field (then every id is a string)."""
    return pa.types.is_integer(ids.type) if id_field is not None and len(ids) else None


def check_combinable(parts: Sequence[PartSummary], id_field: Optional[str]) -> None:
    """on_error "stop": InputError unless every part's columns and kind of id combine."""
    paths = [part.path for part in parts]
    if len(parts) > 1:
        try:
            pa.unify_schemas([part.schema for part in parts], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            raise columns_error(error, paths) from None
    kinds = {id_kind(part.ids, id_field) for part in parts} - {None}
    if len(kinds) > 1:
        raise InputError(f"id field {id_field!r} holds integers in some files and strings in others "
                         f"(files: {', '.join(paths)})")


def compatible(parts: Sequence[PartSummary], id_field: Optional[str]) -> tuple[list[int], list[int], list[dict]]:
    """on_error "skip": (kept, left out, their records): a part whose columns cannot be
    combined with those of the parts kept before it, or whose ids are of the other kind, is
    left out."""
    kept: list[int] = []
    left_out: list[int] = []
    records: list[dict] = []
    schema: Optional[pa.Schema] = None
    kind_so_far: Optional[bool] = None
    for index, part in enumerate(parts):
        try:
            merged = part.schema if schema is None else pa.unify_schemas([schema, part.schema],
                                                                          promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            left_out.append(index)
            records.append({"file": part.path, "line": None,
                            "reason": f"its columns cannot be combined with the files read before it ({error})"})
            continue
        kind = id_kind(part.ids, id_field)
        if kind is not None and kind_so_far is not None and kind != kind_so_far:
            left_out.append(index)
            records.append({"file": part.path, "line": None,
                            "reason": f"id field {id_field!r} holds {'integers' if kind else 'strings'}, "
                                      f"but {'integers' if kind_so_far else 'strings'} in the files read before it"})
            continue
        kind_so_far = kind if kind is not None else kind_so_far
        schema = merged
        kept.append(index)
    return kept, left_out, records


def ids_type(ids: Sequence[pa.Array], id_field: Optional[str]) -> pa.DataType:
    """The type of the corpus's ids: int64 when an id_field holds integers (in every part with
    ids; the kinds were checked), else string."""
    kinds = {id_kind(part, id_field) for part in ids} - {None}
    return pa.int64() if kinds == {True} else pa.string()


def combined_ids(ids: Sequence[pa.Array], id_type: pa.DataType) -> pa.Array:
    """The parts' ids as one array of ``id_type`` (ids_type), in order."""
    return pa.concat_arrays([part.cast(id_type) for part in ids]) if ids else pa.array([], id_type)


def combined_schema(parts: Sequence[PartSummary], text_field: str) -> pa.Schema:
    """The kept parts' columns as one schema (see Combination.schema)."""
    if not parts:
        return pa.schema([(text_field, pa.large_string())])
    try:
        schema = pa.unify_schemas([part.schema for part in parts], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:  # only a part by part check let them through
        raise columns_error(error, [part.path for part in parts]) from None
    index = schema.get_field_index(text_field)
    if index >= 0:
        schema = schema.set(index, pa.field(text_field, plain_text_type(schema.field(index).type)))
    return schema


def repeated_rows(parts: Sequence[PartSummary], id_type: pa.DataType):
    """For each part holding rows whose id an earlier row (in input order) has: (its index in
    ``parts``, those rows int64 ascending, one skipped record each)."""
    lengths = [part.rows for part in parts]
    if sum(lengths) == 0:
        return
    ids = combined_ids([part.ids for part in parts], id_type)
    codes = ids.dictionary_encode().indices.to_numpy(zero_copy_only=False)
    _, first = np.unique(codes, return_index=True)
    keep = np.zeros(len(codes), dtype=bool)
    keep[first] = True
    if keep.all():
        return
    first_row = first[codes]  # the row where each row's id is first used (codes are 0..k-1)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    where = row_locator(parts)
    for index, part in enumerate(parts):
        rows = np.flatnonzero(~keep[starts[index]:starts[index + 1]])
        if rows.size == 0:
            continue
        records = [{"file": part.path, "line": part.number(int(row)),
                    "reason": f"duplicate id {ids[int(starts[index] + row)].as_py()!r}: the same id as "
                              f"{where(int(first_row[starts[index] + row]))}, which is kept"}
                   for row in rows]
        yield index, rows.astype(np.int64), records


def duplicate_id_error(ids: pa.Array, where: Callable[[int], str]) -> Optional[InputError]:
    """The error for ids that are not unique (naming where the first repeated id is used, up
    to three times), or None; where(row) locates a row (from 0) of ``ids``."""
    if len(ids) == 0:
        return None
    counts = pc.value_counts(ids)
    repeated = pc.filter(counts.field("values"), pc.greater(counts.field("counts"), 1))
    if len(repeated) == 0:
        return None
    rows = np.flatnonzero(pc.equal(ids, repeated[0]).to_numpy(zero_copy_only=False))
    return InputError(
        f"duplicate id {repeated[0].as_py()!r}: documents {', '.join(where(int(r)) for r in rows[:3])} "
        f"share it ({len(repeated)} distinct ids are repeated); ids must be unique"
    )


class Located(Protocol):
    """A file's rows that can say where each is (SourceFile, PartSummary)."""

    @property
    def rows(self) -> int: ...

    def where(self, row: int) -> str: ...


def row_locator(files: Sequence[Located]) -> Callable[[int], str]:
    """where(row): 'FILE:LINE' or 'FILE row N' of a row (from 0) of the files' rows in order."""
    starts = np.cumsum([0] + [source.rows for source in files])

    def where(row: int) -> str:
        index = int(np.searchsorted(starts, row, side="right")) - 1
        if index >= len(files):  # past the files' rows (a corpus without sources): count on
            return f"row {row - int(starts[-1]) + 1}"
        return files[index].where(row - int(starts[index]))

    return where


def check_unique_ids(corpus: Corpus) -> None:
    """InputError unless the corpus's ids are unique (for a corpus not read by read_corpus,
    whose plan_combination checked them already: a table passed in)."""
    error = duplicate_id_error(corpus.ids, row_locator(corpus.files))
    if error is not None:
        raise error


def sorted_records(records: list[dict], found: InputFiles) -> list[dict]:
    """Skipped records in input order: by file (in reading order), then line."""
    order = {display_path(p): i for i, p in enumerate(found.files)}
    return sorted(records, key=lambda r: (order.get(r["file"], -1), r["line"] or 0))
