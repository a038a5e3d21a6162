"""The checks across input files: the files' columns can be combined, ids are of one kind and
unique; and the skipped records of all files in input order."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from .inputs import InputFiles, display_path
from .source import SourceFile

if TYPE_CHECKING:
    from .corpus import Corpus
    from .read import FilePart

def sorted_records(records: list[dict], found: InputFiles) -> list[dict]:
    """Skipped records in input order: by file (in reading order), then line."""
    order = {display_path(p): i for i, p in enumerate(found.files)}
    return sorted(records, key=lambda r: (order.get(r["file"], -1), r["line"] or 0))


def compatible_parts(parts: list[FilePart], text_field: str, id_field: Optional[str],
                     records: list[dict], skip: bool) -> list[FilePart]:
    """The parts whose columns (and id types) can be combined; under "skip" a file that cannot
    be combined with the files before it is left out (under "stop" concat_tables and
    concat_ids raise)."""
    if not skip or len(parts) < 2:
        return parts
    kept, schema, id_kind = [], None, None
    for part in parts:
        try:
            merged = part.table.schema if schema is None else pa.unify_schemas(
                [schema, part.table.schema], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            records.append({"file": part.source.path, "line": None,
                            "reason": f"its columns cannot be combined with the files read before it ({error})"})
            drop_records_of(records, part)
            continue
        kind = pa.types.is_integer(part.ids.type) if id_field is not None and len(part.ids) else None
        if kind is not None and id_kind is not None and kind != id_kind:
            records.append({"file": part.source.path, "line": None,
                            "reason": f"id field {id_field!r} holds {'integers' if kind else 'strings'}, "
                                      f"but {'integers' if id_kind else 'strings'} in the files read before it"})
            drop_records_of(records, part)
            continue
        id_kind = kind if kind is not None else id_kind
        schema = merged
        kept.append(part)
    return kept


def drop_records_of(records: list[dict], part: FilePart) -> None:
    """Forget the per-record entries of a file that is left out whole."""
    for record in part.records:
        for i in range(len(records) - 1, -1, -1):
            if records[i] is record:
                del records[i]
                break


def drop_duplicate_ids(parts: list[FilePart], records: list[dict]) -> list[FilePart]:
    """Under "skip": keep the first document of every id, leave out the later ones."""
    lengths = [len(p.ids) for p in parts]
    if sum(lengths) == 0:
        return parts
    ids = concat_ids([p.ids for p in parts], [p.source for p in parts], "id")
    codes = ids.dictionary_encode().indices.to_numpy(zero_copy_only=False)
    _, first = np.unique(codes, return_index=True)
    keep = np.zeros(len(codes), dtype=bool)
    keep[first] = True
    if keep.all():
        return parts
    first_row = first[codes]  # the row where each row's id is first used (codes are 0..k-1)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    owner = np.searchsorted(starts, np.arange(len(codes)), side="right") - 1

    def where(row: int) -> str:
        part = parts[owner[row]]
        return part.source.where(row - starts[owner[row]])

    for row in np.flatnonzero(~keep):
        part = parts[owner[row]]
        local = row - starts[owner[row]]
        records.append({"file": part.source.path, "line": int(part.source.row_numbers[local]),
                        "reason": f"duplicate id {ids[int(row)].as_py()!r}: the same id as {where(int(first_row[row]))}, which is kept"})
    for i, part in enumerate(parts):
        mask = keep[starts[i]:starts[i + 1]]
        if mask.all():
            continue
        part.table = part.table.filter(pa.array(mask))
        part.ids = part.ids.filter(pa.array(mask))
        part.source.row_numbers = part.source.row_numbers[mask]
        part.source.rows = part.table.num_rows
        part.device_part = None  # the device copy is made from the kept host text instead
    return parts


def concat_tables(tables: list[pa.Table], sources: list[SourceFile]) -> pa.Table:
    if len(tables) == 1:
        return tables[0]
    try:
        return pa.concat_tables(tables, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
        raise InputError(
            f"the input files have columns of incompatible types and cannot be combined ({error}); "
            f"files: {', '.join(s.path for s in sources)}"
        ) from None


def concat_ids(ids: list[pa.Array], sources: list[SourceFile], id_field: Optional[str]) -> pa.Array:
    if id_field is None:
        return pa.concat_arrays([a.cast(pa.string()) for a in ids])
    kinds = {pa.types.is_integer(a.type) for a in ids if len(a)}
    if len(kinds) > 1:
        raise InputError(f"id field {id_field!r} holds integers in some files and strings in others "
                         f"(files: {', '.join(s.path for s in sources)})")
    target = pa.int64() if kinds == {True} else pa.string()
    return pa.concat_arrays([a.cast(target) for a in ids])


def check_unique_ids(corpus: Corpus) -> None:
    ids = corpus.ids
    if len(ids) == 0:
        return
    counts = pc.value_counts(ids)
    repeated = pc.filter(counts.field("values"), pc.greater(counts.field("counts"), 1))
    if len(repeated) == 0:
        return
    first = repeated[0].as_py()
    rows = np.flatnonzero(pc.equal(ids, repeated[0]).to_numpy(zero_copy_only=False))
    raise InputError(
        f"duplicate id {first!r}: documents {', '.join(locate_row(corpus, int(r)) for r in rows[:3])} "
        f"share it ({len(repeated)} distinct ids are repeated); ids must be unique"
    )


def locate_row(corpus: Corpus, row: int) -> str:
    """Where a corpus row (from 0) came from: 'FILE:LINE' or 'FILE row N'."""
    for source in corpus.files:
        if row < source.rows:
            return source.where(row)
        row -= source.rows
    return f"row {row + 1}"
