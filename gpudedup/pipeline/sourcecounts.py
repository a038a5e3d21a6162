"""Where duplicates come from: per input file, and per value of a column (``group_field``), the
documents in, kept and removed, the removed ones split by whether their cluster's kept document
is of the same file (group) or not, and the content's size in and kept (UTF-8 bytes of the
text; token ids with token shingles); for a group column also which groups' documents were
removed as duplicates of which (the removed document's group -> its kept document's group).

Counted a file at a time (Tally): in a staged run by a task per input file over its shards,
where shardedrows.py writes the kept rows (ShardedTable.tally_files: file_tally), each task
reading the spilled sizes of its own documents, the removed ones among them with their kept
documents (the clusters held, or the parts of a cluster's run that hold its documents:
clusterparts.py), and for a group column the column from its shards and the kept documents' values from the shards
that hold them. The client adds up a few numbers per file and per group, nothing per document.
A null group value is a group of its own (null in report.json, "(null)" where shown).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.content import unit_lengths
from ..errors import InputError
from ..io.fields import field_column, field_names, field_type, has_field
from ..io.rules import check_named_one_way
from ..io.source import listed
from .removedrows import RemovedDocs

if TYPE_CHECKING:
    from .protocols import Executor

# A file's or a group's counts, in this order (Tally.counts; "size" is bytes or tokens).
COUNTS = ("documents", "kept", "removed", "removed_within", "removed_across", "size", "kept_size")
# Groups listed one by one at most; beyond, those with fewest removed are folded into one row.
MAX_GROUPS = 50


@dataclass
class Tally:
    """The counts of some documents (one file's, or part of it): counts, int64 (COUNTS);
    groups: per group (group, documents, removed, size, kept_size), None without a group
    column; matrix: (group, kept_group, indexed, documents) of the removed documents."""

    counts: np.ndarray
    groups: Optional[pa.Table] = None
    matrix: Optional[pa.Table] = None

    @classmethod
    def joined(cls, tallies: list["Tally"]) -> "Tally":
        """The tallies of several parts as one (the tables as they are: groups adds them up)."""
        tables = [t for t in tallies if t.groups is not None]
        return cls(np.sum([t.counts for t in tallies], axis=0) if tallies else np.zeros(len(COUNTS), np.int64),
                   pa.concat_tables([t.groups for t in tables]) if tables else None,
                   pa.concat_tables([t.matrix for t in tables if t.matrix is not None]) if tables else None)


def tally(sizes: np.ndarray, removed_at: np.ndarray, same_file: np.ndarray,
          groups: Optional[pa.Array] = None, kept_groups: Optional[pa.Array] = None,
          indexed: Optional[np.ndarray] = None) -> Tally:
    """The Tally of some documents: sizes, int64 (n,) each one's size; removed_at, int64 (k,)
    the removed ones among them; same_file, bool (k,) whether each one's kept document is of
    its file; groups: each document's group value (n,); kept_groups: the kept document's of
    each removed one (k,); indexed, bool (k,): the kept one is an indexed document."""
    n, k = sizes.shape[0], removed_at.shape[0]
    removed = np.zeros(n, bool)
    removed[removed_at] = True
    within = int(same_file.sum())
    size = int(sizes.sum())
    counts = np.array([n, n - k, k, within, k - within, size, size - int(sizes[removed].sum())], np.int64)
    if groups is None:
        return Tally(counts)
    kept_size = np.where(removed, 0, sizes)
    by_group = pa.table({"group": groups, "documents": np.ones(n, np.int64), "removed": removed.astype(np.int64),
                         "size": sizes.astype(np.int64), "kept_size": kept_size.astype(np.int64)})
    assert kept_groups is not None and indexed is not None
    matrix = pa.table({"group": groups.take(pa.array(removed_at, pa.int64())), "kept_group": kept_groups,
                       "indexed": pa.array(indexed, pa.bool_()), "documents": np.ones(k, np.int64)})
    return Tally(counts, summed(by_group, ["group"]), summed(matrix, ["group", "kept_group", "indexed"]))


def summed(table: pa.Table, keys: list[str]) -> pa.Table:
    """The columns of ``table`` not in ``keys`` added up per distinct keys (nulls a key of their
    own), with their own names."""
    values = [name for name in table.column_names if name not in keys]
    out = table.group_by(keys).aggregate([(name, "sum") for name in values])
    return out.rename_columns([name[:-4] if name.endswith("_sum") else name for name in out.column_names])


def content_sizes(content: Union[pa.Array, pa.ChunkedArray], tokens: bool) -> np.ndarray:
    """int64 (n,): each document's UTF-8 bytes of text, or (tokens) its token ids; 0 for null."""
    if tokens:
        return unit_lengths(content)
    return pc.fill_null(pc.binary_length(content), 0).to_numpy(zero_copy_only=False).astype(np.int64)


def group_values(table: pa.Table, field: str, value_type: pa.DataType) -> pa.Array:
    """The group column of ``table`` (every row; null where it lacks the field), as
    ``value_type``, the run's type of it."""
    if not has_field(table.schema, field):
        return pa.nulls(table.num_rows, value_type)
    column = field_column(table, field)
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    return column.cast(value_type)


def check_group_field(schemas: list[tuple[str, pa.Schema]], field: Optional[str]) -> None:
    """InputError where no input of a run (``schemas``: each one's path as shown and columns,
    Store.input_schemas) has the field ``field`` (a name mistyped: named with the first input's
    fields), or one holds lists or structs in it (a group is one value); nothing without one.
    An input without the field counts its documents as null, as a record without it does."""
    if field is None:
        return
    if schemas and not any(has_field(schema, field) for _, schema in schemas):
        path, schema = schemas[0]
        raise InputError(f"{path}: no field {field!r} to count by, nor in any other input (fields: "
                         f"{listed(field_names(schema))}); choose it with group_field=")
    check_named_one_way(schemas, field, "group_field=")
    for path, schema in schemas:
        if not has_field(schema, field):
            continue
        value_type = field_type(schema, field)
        if pa.types.is_nested(value_type):
            raise InputError(f"{path}: field {field!r} is {value_type}; group_field= takes a field of single "
                             "values (strings, numbers)")


# --- in memory ---------------------------------------------------------------------------------


def memory_tallies(table: pa.Table, content: Union[pa.Array, pa.ChunkedArray], file_rows: list[int],
                   removed: RemovedDocs, tokens: bool, field: Optional[str]) -> list[Tally]:
    """The Tally of each input of an in-memory run (file_rows: each one's rows, in order, of
    ``table``; content: its content column; removed: of the whole run)."""
    sizes = content_sizes(content, tokens)
    starts = np.concatenate([[0], np.cumsum(file_rows)]).astype(np.int64)
    values = group_values(table, field, field_type(table.schema, field)) if field is not None else None
    here = removed.kept >= 0
    kept_file = np.where(here, np.searchsorted(starts, np.maximum(removed.kept, 0), side="right") - 1, -1)
    kept_groups = (values.take(pa.array(np.maximum(removed.kept, 0), pa.int64())) if values is not None else None)
    out = []
    for file in range(len(file_rows)):
        start, stop = int(starts[file]), int(starts[file + 1])
        first, last = np.searchsorted(removed.docs, [start, stop])
        mine = slice(int(first), int(last))
        out.append(tally(sizes[start:stop], removed.docs[mine] - start, kept_file[mine] == file,
                         None if values is None else values.slice(start, stop - start),
                         None if kept_groups is None else masked(kept_groups.slice(first, last - first),
                                                                 ~here[mine]),
                         ~here[mine]))
    return out


def masked(values: pa.Array, nulls: np.ndarray) -> pa.Array:
    """``values`` with nulls where ``nulls`` (an indexed kept document has no group)."""
    if not nulls.any():
        return values
    return pc.if_else(pa.array(nulls), pa.nulls(len(values), values.type), values)


# --- the report's sections ----------------------------------------------------------------------


def named_counts(values: list[int], tokens: bool) -> dict:
    """COUNTS by report.json's names (size: "bytes" and "kept_bytes", or "tokens" and
    "kept_tokens"); documents left out (a file's entry has it already)."""
    unit = "tokens" if tokens else "bytes"
    names = {"size": unit, "kept_size": f"kept_{unit}"}
    return {names.get(name, name): int(value) for name, value in zip(COUNTS, values) if name != "documents"}


def group_key(value: Any) -> Any:
    """A group value as report.json's groups key it: itself where JSON has its type, else its
    text; a float JSON has no number for (NaN, infinities) as its text, and -0.0 as 0.0 (equal
    numbers, one group, as every NaN is one). (Output rows follow io.write.json_value instead:
    a NaN there is null, as it is no group name.)"""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if isinstance(value, float) and value == 0:
        return 0.0
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return str(value)


def groups_section(field: str, tallies: list[Tally], tokens: bool) -> dict:
    """report.json's "groups" (docs in report.Report): the groups' counts, most removed first,
    at most MAX_GROUPS rows (the rest folded into one row, "other": true), and the matrix."""
    tables = [t.groups for t in tallies if t.groups is not None and t.groups.num_rows]
    matrices = [t.matrix for t in tallies if t.matrix is not None and t.matrix.num_rows]
    stats: dict[Any, list[int]] = {}
    if tables:
        for row in summed(pa.concat_tables(tables), ["group"]).to_pylist():
            # (Values Arrow keeps apart may be one group here: group_key's.)
            counts = stats.setdefault(group_key(row["group"]), [0] * 7)
            for at, count in zip((0, 1, 2, 5, 6), (row["documents"], row["documents"] - row["removed"],
                                                   row["removed"], row["size"], row["kept_size"])):
                counts[at] += count
    cells: dict[tuple, int] = {}
    for row in (summed(pa.concat_tables(matrices), ["group", "kept_group", "indexed"]).to_pylist()
                if matrices else []):
        key = (group_key(row["group"]), None if row["indexed"] else group_key(row["kept_group"]), row["indexed"])
        cells[key] = cells.get(key, 0) + row["documents"]
    for (group, kept, indexed), count in cells.items():
        stats[group][3 if not indexed and kept == group else 4] += count
    order = sorted(stats, key=lambda g: (-stats[g][2], -stats[g][0], g is not None, str(g)))
    listed_groups = order if len(order) <= MAX_GROUPS else order[:MAX_GROUPS - 1]
    folded = order[len(listed_groups):]
    place = {group: number for number, group in enumerate(listed_groups)}
    rows = [{"group": group, **named_counts(stats[group], tokens), "documents": stats[group][0]}
            for group in listed_groups]
    if folded:
        total = np.sum([stats[g] for g in folded], axis=0).tolist()
        rows.append({"group": None, "other": True, "groups": len(folded), **named_counts(total, tokens),
                     "documents": total[0]})
    size = len(rows)
    matrix = [[0] * size for _ in range(size)]
    from_index = [0] * size
    for (group, kept, indexed), count in cells.items():
        at = place.get(group, size - 1)
        if indexed:
            from_index[at] += count
        else:
            matrix[at][place.get(kept, size - 1)] += count
    out = {"field": field, "count": len(order), "rows": [ordered(row) for row in rows], "matrix": matrix}
    if any(from_index):
        out["matrix_index"] = from_index
    return out


def ordered(row: dict) -> dict:
    """A group's row with its keys in report.json's order."""
    first = ["group", "other", "groups", "documents", "kept", "removed", "removed_within", "removed_across"]
    return {**{k: row[k] for k in first if k in row}, **{k: v for k, v in row.items() if k not in first}}


# --- the run's counts --------------------------------------------------------------------------


def with_source_counts(result: Any, field: Optional[str], executor: Optional["Executor"] = None) -> None:
    """Set ``result``'s report (a DedupResult's, as made) to one with where its duplicates come
    from (Report.with_sources): counted by its rows (keptrows.HeldRows: here;
    shardedrows.ShardedTable: a task per input file of a staged run, on the run's ``executor``)."""
    report = result.report
    tokens = report["parameters"]["shingle"] == "token"
    # (the kept documents' ids are not counted)
    removed = result._outcome.clustered.removed_of(None, pa.null(), result.indexed_rows)
    tallies = result._rows.tally_files(removed, "lengths" if tokens else "text_bytes", field, executor)
    result.report = report.with_sources([named_counts(t.counts.tolist(), tokens) for t in tallies],
                                        groups_section(field, tallies, tokens) if field is not None else None)
