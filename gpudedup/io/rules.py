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
from functools import cached_property
from typing import TYPE_CHECKING, Callable, Optional, Protocol, Sequence

import numpy as np
import pyarrow as pa

from ..errors import InputError
from ..memory import release_unused_memory
from .corpus import plain_text_type
from .fields import has_field, held_schema
from .inputs import InputFiles, display_path
from .source import check_on_error, locate

if TYPE_CHECKING:
    from .corpus import Corpus


@dataclass(frozen=True)
class PartSummary:
    """One input file as read, as much of it as the checks across files need.

    path: the file as shown in ids and messages (inputs.display_path).
    format: "jsonl", "parquet" or "text" (decides ``FILE:LINE`` or ``FILE row N``).
    id_type: the type of its ids: without id_field string (``<path>:<line>``); with it the id
        column's as read (any integer type, or string / large_string; no nulls). Any type of
        one kind is fine: plan_combination casts.
    rows: how many rows (and ids) it has.
    schema: the part's own columns as its reader gave them (before Corpus casts the text
        column); a file with no records has at least the text column.
    ids: pa.Array (rows,) of id_type, one id per row, in order; None where the caller finds
        the repeated ids itself (plan_combination's ``repeated``: a staged run's shards,
        whose ids stay in the work directory).
    row_numbers: int64 (rows,), the JSONL line or Parquet row (from 1) of each row; None when
        row r is record r + 1 (nothing was left out inside the file).
    """

    path: str
    format: str
    id_type: pa.DataType
    rows: int
    schema: pa.Schema
    ids: Optional[pa.Array] = None
    row_numbers: Optional[np.ndarray] = None

    @cached_property
    def held(self) -> pa.Schema:
        """``schema`` as a run holds the part's rows (fields.held_schema), as the parts' columns
        combine."""
        return held_schema(self.schema)

    @classmethod
    def of_ids(cls, path: str, format: str, ids: pa.Array, schema: pa.Schema,
               row_numbers: Optional[np.ndarray] = None) -> "PartSummary":
        """A part whose ids are at hand."""
        return cls(path, format, ids.type, len(ids), schema, ids, row_numbers)

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

    def ids(self, parts: Sequence[PartSummary], read: Optional[Callable[[int], pa.Array]] = None) -> pa.Array:
        """The ids of every row kept, in input order, of type ``id_type``: the corpus's ids;
        read(index): the ids of part ``index`` (default: its own ``ids``)."""
        kept = []
        for index in self.kept:
            ids = read(index) if read is not None else own_ids(parts[index])
            mask = self.keep_mask(index, len(ids))
            kept.append(ids if mask is None else ids.filter(pa.array(mask)))
        return combined_ids(kept, self.id_type)


# One id used by several rows: (the id, as a Python value of the corpus's id type; the rows
# using it, int64 ascending, numbered over the rows of the parts kept, in order, from 0).
IdGroup = tuple[object, np.ndarray]
# Finds the repeated ids among the parts kept (their indices, ascending) cast to the id type.
RepeatedIds = Callable[[Sequence[int], pa.DataType], list[IdGroup]]


def plan_combination(parts: Sequence[PartSummary], text_field: str, id_field: Optional[str],
                     on_error: str, repeated: Optional[RepeatedIds] = None) -> Combination:
    """Decide how the parts (every file read, in input order) combine into one input.

    on_error "stop" raises an InputError, in this order, when the parts' columns cannot be
    combined ("the input files have columns of incompatible types and cannot be combined
    (...); files: ..."), when the id_field holds integers in some parts and strings in others,
    or when an id is used twice ("duplicate id ...: documents FILE:LINE, ... share it (...)").
    on_error "skip" leaves out, going through the parts in order, a part whose columns cannot
    be combined with those of the parts kept before it, or whose ids are of the other kind;
    then, with an id_field, every row whose id an earlier row has (the first is kept). Without
    an id_field a repeated id (``<path>:<line>``) raises under either. repeated: how to find
    the repeated ids (RepeatedIds); by default from the parts' own ``ids``.
    """
    check_on_error(on_error)
    check_named_one_way([(part.path if part.format != "text" else f"{part.path} (a .txt file: its text is a column of "
                          "the name given)", part.schema) for part in parts], text_field, "the content field")
    skip = on_error == "skip"
    if skip:
        kept, left_out, records = compatible(parts, id_field)
    else:
        check_combinable(parts, id_field)
        kept, left_out, records = list(range(len(parts))), [], []
    chosen = [parts[i] for i in kept]
    id_type = ids_type(chosen, id_field)
    groups = repeated(kept, id_type) if repeated is not None else repeated_in_parts(chosen, id_type)
    repeated_by_part: dict[int, np.ndarray] = {}
    if skip and id_field is not None:
        for index, rows, found in repeated_rows(chosen, groups):
            repeated_by_part[kept[index]] = rows
            records.extend(found)
    else:
        error = duplicate_id_error(groups, row_locator(chosen))
        if error is not None:
            raise error
    order = {part.path: i for i, part in enumerate(parts)}
    records = files_named_once(sorted(records, key=lambda r: (order[r["file"]], r["line"] or 0)))
    # The id checks' hash tables are Arrow's, and its default pool (mimalloc) keeps the pages
    # it freed for the rest of the run, hundreds of MB at millions of ids, unless handed back.
    release_unused_memory()
    return Combination(tuple(kept), tuple(left_out), repeated_by_part, records, combined_schema(chosen, text_field),
                       id_type)


# --- the rules, one function each ----------------------------------------------------------------


def columns_error(error: Exception, paths: Sequence[str]) -> InputError:
    return InputError(f"the input files have columns of incompatible types and cannot be combined ({error}); "
                      f"files: {', '.join(dict.fromkeys(paths))}")  # (a file cut into pieces, once)


def files_named_once(records: list[dict]) -> list[dict]:
    """The records (in order) with each file left out whole recorded once (line None): a file
    cut into pieces (io/pieces.py) is a part per piece, each left out alone."""
    named: set[str] = set()
    kept = []
    for record in records:
        if record["line"] is None:
            if record["file"] in named:
                continue
            named.add(record["file"])
        kept.append(record)
    return kept


def id_kind(part: PartSummary, id_field: Optional[str]) -> Optional[bool]:
    """True (integers) or False (strings) for a part's ids; None when it has none or there is
    no id_field (then every id is a string)."""
    return pa.types.is_integer(part.id_type) if id_field is not None and part.rows else None


def check_named_one_way(inputs: Sequence[tuple[str, pa.Schema]], name: str, what: str) -> None:
    """InputError where the dotted field ``name`` (what: how the message calls it) is a
    column of that very name in some inputs (each one's path as shown, columns) and a field
    inside a struct column in others: each file would find it its own way (a column of that
    name wins, io/fields.py), and the files combined would find only the column, the others'
    values null."""
    if "." not in name:
        return
    column = [path for path, schema in inputs if schema.get_field_index(name) >= 0]
    inside = [path for path, schema in inputs if schema.get_field_index(name) < 0 and has_field(schema, name)]
    if column and inside:
        named = f"{what}{name!r}" if what.endswith("=") else f"{what} {name!r}"  # (group_field='x': --group-field x)
        raise InputError(f"{named} is a column of that name in {column[0]} but a field inside the column "
                         f"{name.partition('.')[0]!r} in {inside[0]}: name it one way in every input file")


def check_combinable(parts: Sequence[PartSummary], id_field: Optional[str]) -> None:
    """on_error "stop": InputError unless every part's columns and kind of id combine."""
    paths = list(dict.fromkeys(part.path for part in parts))  # (a file cut into pieces, once)
    if len(parts) > 1:
        try:
            pa.unify_schemas([part.held for part in parts], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            raise columns_error(error, conflicting(parts)) from None
    kinds = {id_kind(part, id_field) for part in parts} - {None}
    if len(kinds) > 1:
        raise InputError(f"id field {id_field!r} holds integers in some files and strings in others "
                         f"(files: {', '.join(paths)})")


def conflicting(parts: Sequence[PartSummary]) -> list[str]:
    """The paths of two parts whose columns do not combine, for the message: the first part
    that does not combine with those before it, after the first of them it does not combine
    with alone (or all of them, where only together they do not)."""
    merged = parts[0].held
    for index in range(1, len(parts)):
        try:
            merged = pa.unify_schemas([merged, parts[index].held], promote_options="permissive")
            continue
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            pass
        for before in range(index):
            try:
                pa.unify_schemas([parts[before].held, parts[index].held], promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                return [parts[before].path, parts[index].path]
        return list(dict.fromkeys(part.path for part in parts[:index + 1]))
    return list(dict.fromkeys(part.path for part in parts))


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
            merged = part.held if schema is None else pa.unify_schemas([schema, part.held],
                                                                       promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            left_out.append(index)
            records.append({"file": part.path, "line": None,
                            "reason": f"its columns cannot be combined with the files read before it ({error})"})
            continue
        kind = id_kind(part, id_field)
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


def ids_type(parts: Sequence[PartSummary], id_field: Optional[str]) -> pa.DataType:
    """The type of the corpus's ids: int64 when an id_field holds integers (in every part with
    ids; the kinds were checked), else string."""
    kinds = {id_kind(part, id_field) for part in parts} - {None}
    return pa.int64() if kinds == {True} else pa.string()


def combined_ids(ids: Sequence[pa.Array | pa.ChunkedArray], id_type: pa.DataType) -> pa.Array:
    """The parts' ids as one array of ``id_type`` (ids_type), in order (a part may come in
    chunks: a column read in blocks)."""
    arrays = [chunk for part in ids for chunk in (part.chunks if isinstance(part, pa.ChunkedArray) else [part])]
    return pa.concat_arrays([array.cast(id_type) for array in arrays]) if arrays else pa.array([], id_type)


def combined_schema(parts: Sequence[PartSummary], text_field: str) -> pa.Schema:
    """The kept parts' columns as one schema (see Combination.schema)."""
    if not parts:
        return pa.schema([(text_field, pa.large_string())])
    try:
        schema = pa.unify_schemas([part.held for part in parts], promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:  # only a part by part check let them through
        raise columns_error(error, [part.path for part in parts]) from None
    index = schema.get_field_index(text_field)
    if index >= 0:
        schema = schema.set(index, pa.field(text_field, plain_text_type(schema.field(index).type)))
    return schema


def repeated_in_parts(parts: Sequence[PartSummary], id_type: pa.DataType) -> list[IdGroup]:
    """RepeatedIds from the parts' own ids (every part's ``ids`` at hand)."""
    return id_groups(combined_ids([own_ids(part) for part in parts], id_type))


def own_ids(part: PartSummary) -> pa.Array:
    """A part's ids, which must be at hand (PartSummary.ids)."""
    if part.ids is None:
        raise ValueError(f"{part.path}: its ids are not at hand; pass how to find them")
    return part.ids


def id_groups(ids: pa.Array) -> list[IdGroup]:
    """The ids used by more than one row of ``ids`` (no nulls), each with its rows (int64
    ascending), in no particular order."""
    if len(ids) == 0:
        return []
    codes = ids.dictionary_encode().indices.to_numpy(zero_copy_only=False)
    order = np.argsort(codes, kind="stable")  # each id's rows together, ascending
    bounds = np.flatnonzero(np.diff(codes[order])) + 1
    starts, stops = np.concatenate([[0], bounds]), np.concatenate([bounds, [codes.shape[0]]])
    repeated = stops - starts > 1
    return [(ids[int(order[a])].as_py(), order[a:b].astype(np.int64))
            for a, b in zip(starts[repeated], stops[repeated])]


def repeated_rows(parts: Sequence[PartSummary], groups: list[IdGroup]):
    """For each part holding rows whose id an earlier row (in input order) has: (its index in
    ``parts``, those rows int64 ascending, one skipped record each); groups: the parts'
    repeated ids (RepeatedIds)."""
    if not groups:
        return
    starts = np.cumsum([0] + [part.rows for part in parts])
    later = np.concatenate([rows[1:] for _, rows in groups])
    first_row = np.concatenate([np.full(rows.shape[0] - 1, rows[0]) for _, rows in groups])
    value = [identifier for identifier, rows in groups for _ in range(rows.shape[0] - 1)]
    order = np.argsort(later, kind="stable")
    where = row_locator(parts)
    for index, part in enumerate(parts):
        low, high = np.searchsorted(later[order], [starts[index], starts[index + 1]])
        if low == high:
            continue
        mine = order[low:high]
        records = [{"file": part.path, "line": part.number(int(later[i] - starts[index])),
                    "reason": f"duplicate id {value[i]!r}: the same id as {where(int(first_row[i]))}, which is kept"}
                   for i in mine]
        yield index, (later[mine] - starts[index]).astype(np.int64), records


def duplicate_id_error(groups: list[IdGroup], where: Callable[[int], str]) -> Optional[InputError]:
    """The error for ids that are not unique (naming where the first repeated id in input
    order is used, up to three times), or None; groups: the repeated ids (RepeatedIds);
    where(row) locates a row (from 0)."""
    if not groups:
        return None
    identifier, rows = min(groups, key=lambda group: int(group[1][0]))
    return InputError(
        f"duplicate id {identifier!r}: documents {', '.join(where(int(r)) for r in rows[:3])} "
        f"share it ({len(groups)} distinct ids are repeated); ids must be unique"
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
    error = duplicate_id_error(id_groups(corpus.ids), row_locator(corpus.files))
    if error is not None:
        raise error


def sorted_records(records: list[dict], found: InputFiles) -> list[dict]:
    """Skipped records in input order: by file (in reading order), then line."""
    order = {display_path(p): i for i, p in enumerate(found.files)}
    return sorted(records, key=lambda r: (order.get(r["file"], -1), r["line"] or 0))
