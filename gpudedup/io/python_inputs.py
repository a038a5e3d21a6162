"""Data as a notebook holds it, as a Corpus (``to_corpus``): lists and iterables of texts or of
records (read in batches), pandas and polars Series, pyarrow Tables, pandas, polars and cuDF
DataFrames, Hugging Face Datasets, anything with the Arrow PyCapsule stream interface, and paths
(io/read.py reads those)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Callable, Optional, Sequence

import numpy as np
import pyarrow as pa

from ..core.content import (bad_token_rows, invalid_utf8_rows, is_id_type, is_text_type, is_token_type, plain_ids,
                             plain_strings, token_lists_to_arrow)
from ..core.normalize import strings_to_arrow
from ..errors import InputError, ParameterError
from ..memory import MemoryBudget
from .corpus import Corpus
from .cudf_reader import concat_device_utf8, device_utf8
from .fields import (field_column, field_names, field_type, filtered, has_field, holds_views, repeated_names, too_deep,
                     writable_schema)
from .inputs import InputFiles
from .layout import as_input
from .parquet import plain_text_column
from .read import read_corpus
from .records import TIMES_CHANGED, TOKEN_LIST_TYPES, holds_times, read_records, same_times
from .rules import check_unique_ids
from .source import INT64_MAX, SourceFile, first_id_above_int64, listed
from .storage import is_path, location_of


def to_corpus(data, text_field: str, id_field: Optional[str], use_cudf: bool = False, on_error: str = "stop",
              budget: Optional[MemoryBudget] = None, found: Optional[InputFiles] = None):
    """(Corpus, restore): restore(keep mask) gives the kept rows (dedup's ``deduplicated``):
    in the input's own type (a list, a pandas or polars Series, a DataFrame, a Dataset), or
    for input read once and not held (an iterable of dicts, an IterableDataset) a pyarrow
    Table of the rows read, for an iterable of strings a list of the kept strings.
    use_cudf: keep the text of files and cuDF frames on the GPU (Corpus.device_text);
    budget: --max-memory, checked before files are read; found: the scan of the paths
    ``data`` names, where the caller made it; on_error: also for records (dicts) passed in."""
    # One str is a path (a single text has nothing to deduplicate against); a list of str is
    # texts; paths in a list must be pathlib.Path (or os.PathLike) objects, URLs Remote ones.
    if isinstance(data, (str, os.PathLike)):
        data = [location_of(data)]
    if isinstance(data, (list, tuple)):
        if data and is_path(data[0]):
            other = next((i for i, item in enumerate(data) if not is_path(item)), None)
            if other is not None:  # (a list of texts with a path among them is named as a text)
                raise InputError(f"the list holds paths and other items (item {other} is a "
                                 f"{type(data[other]).__name__}): files are given as pathlib.Path objects alone "
                                 "(a str in a list is a text)")
            corpus = read_corpus(data, text_field, id_field, use_cudf=use_cudf, on_error=on_error, budget=budget,
                                 found=found)
            return corpus, lambda keep: corpus.table.filter(pa.array(keep))
        # The kept rows come from the caller's object when asked: from a copy of the list (8
        # bytes an item), so that sorting or appending to it afterwards changes nothing.
        given = list(data)
        if holds_records(given):
            corpus, read = records_corpus(batches_of(given), "<list>", text_field, id_field, on_error)
            return corpus, lambda keep: [given[position] for position in read[keep]]
        if given:  # (an empty list is records or texts alike)
            refuse_id_field(id_field, "a list of texts")
        return list_corpus(given, text_field), lambda keep: [t for t, k in zip(given, keep) if k]
    module = type(data).__module__.split(".")[0]
    if module in ("pandas", "cudf"):
        # A shallow copy, to take the kept rows from when asked: with copy-on-write (pandas 3)
        # a change the caller makes to their frame afterwards, in place, does not reach it.
        data = data.copy(deep=False)
    if module == "polars" and hasattr(data, "clone"):  # (the same for polars: a clone shares the buffers)
        data = data.clone()
    if module == "cudf":
        corpus = table_corpus(data.to_arrow(), text_field, id_field)
        if use_cudf and text_field in data.columns:  # (a nested text field is read on the host)
            corpus.device_text = concat_device_utf8([device_utf8(data[text_field])])
        return corpus, lambda keep: data[keep]
    if module == "datasets":
        import datasets

        if isinstance(data, dict):  # DatasetDict, IterableDatasetDict: {split name: dataset}
            splits = [str(name) for name in data]
            example = f"data[{splits[0]!r}]" if splits else "data['train']"
            raise InputError(f"a {type(data).__name__} holds splits ({listed(splits) or 'none'}), not one dataset: "
                             f"pick the split to deduplicate, e.g. {example}")
        if isinstance(data, datasets.IterableDataset):
            if data.features is None:
                # Without features datasets guesses each Arrow batch's types apart (and cannot
                # join batches that differ, such as one whose texts are all None): its rows
                # are read as records are.
                corpus, _ = records_corpus(batches_of(data.with_format(None)), "<IterableDataset>", text_field,
                                           id_field, on_error)
            else:
                table = iterable_dataset_table(data)
                corpus = table_corpus(table, text_field, id_field,
                                      SourceFile("<IterableDataset>", "table", table.num_rows))
            return corpus, lambda keep: corpus.table.filter(pa.array(keep))
        if hasattr(data, "select"):
            # The mask is over the rows the Dataset shows, and so is select (it composes with
            # the Dataset's own indices mapping).
            return (table_corpus(dataset_table(data), text_field, id_field),
                    lambda keep: data.select(np.flatnonzero(keep)))
    if module == "pandas":
        import pandas

        if isinstance(data, (pandas.Series, pandas.Index)):
            refuse_id_field(id_field, f"a {type(data).__name__}")
            return series_corpus(data, text_field), lambda keep: pandas_rows(data, keep)
        return table_corpus(frame_table(data), text_field, id_field), lambda keep: pandas_rows(data, keep)
    if module == "polars":
        import polars

        if isinstance(data, polars.LazyFrame):
            raise InputError("a polars LazyFrame is a query, not rows: collect() it and pass the DataFrame")
        if isinstance(data, polars.Series):
            refuse_id_field(id_field, "a Series")
            return series_corpus(data, text_field), lambda keep: data.filter(polars.Series(keep))
        return table_corpus(frame_table(data), text_field, id_field), lambda keep: data.filter(polars.Series(keep))
    if isinstance(data, (pa.Array, pa.ChunkedArray)):  # (a table's column: texts, as a Series')
        refuse_id_field(id_field, "an Arrow array")
        return series_corpus(data, text_field), lambda keep: filtered(data, keep)
    if isinstance(data, (pa.Table, pa.RecordBatch)) or hasattr(data, "__arrow_c_stream__"):
        given = data if isinstance(data, pa.Table) else \
            pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else pa.table(data)
        corpus = table_corpus(given, text_field, id_field)
        # The corpus table, whose text column may have been cast (string_view -> large_string),
        # filtered, then cast back to the caller's schema (layout.as_input).
        return corpus, lambda keep: as_given(as_input(corpus.table.filter(pa.array(keep)), given.schema), data)
    if isinstance(data, Iterable) and not isinstance(data, (bytes, bytearray, memoryview, Mapping)):
        return iterable_corpus(iter(data), text_field, id_field, on_error)
    raise InputError(
        f"cannot deduplicate data of type {type(data).__name__}: pass texts (a list, a pandas or polars Series, "
        "a pyarrow Array, or any iterable of strings), records (a list or iterable of dicts), a path or a list of "
        "pathlib.Path, a pyarrow Table, a DataFrame (pandas, polars, cuDF), a Hugging Face Dataset or "
        "IterableDataset, or an object with __arrow_c_stream__"
    )


def pandas_rows(data, keep: np.ndarray):
    """``data[keep]`` of a pandas Series, Index or DataFrame (keep: bool (n,)), in its own types:
    a column or row index of Arrow view types at any depth (string_view, binary_view), which
    neither Arrow's filter nor pandas' casts take, is filtered in Arrow (fields.filtered)."""
    import pandas

    def viewed(dtype) -> bool:
        return isinstance(dtype, pandas.ArrowDtype) and holds_views(dtype.pyarrow_dtype)

    def kept_values(values) -> Any:
        return pandas.arrays.ArrowExtensionArray(filtered(pa.array(values.array), keep))

    if isinstance(data, pandas.Index):
        return pandas.Index(kept_values(data), name=data.name) if viewed(data.dtype) else data[keep]
    index = pandas.Index(kept_values(data.index), name=data.index.name) if viewed(data.index.dtype) else None
    if index is not None:  # (the rows are taken by position, the index put back after)
        data = data.set_axis(pandas.RangeIndex(len(data)))
    if isinstance(data, pandas.DataFrame):
        views = [place for place, dtype in enumerate(data.dtypes) if viewed(dtype)]
        kept = data.iloc[:, [place for place in range(data.shape[1]) if place not in views]][keep]
        for place in views:  # (ascending: each goes back where it was)
            kept.insert(place, data.columns[place], kept_values(data.iloc[:, place]))
    elif viewed(data.dtype):
        kept = pandas.Series(kept_values(data), index=data.index[keep], name=data.name)
    else:
        kept = data[keep]
    return kept if index is None else kept.set_axis(index)


def as_given(kept: pa.Table, data: Any) -> Any:
    """Kept rows of an Arrow table in the form ``data`` was given: one RecordBatch for a
    RecordBatch, else a Table."""
    if isinstance(data, pa.RecordBatch):
        return kept.combine_chunks().to_batches()[0] if kept.num_rows else data.slice(0, 0)
    return kept


def frame_table(frame) -> pa.Table:
    """A pandas DataFrame (its index left out) or a polars one as a pyarrow Table; InputError
    naming the column Arrow cannot take (complex numbers, sparse data, Python integers past
    int64, a name given twice; polars' 128-bit integers and its Object columns, which it would
    export as their objects' addresses), whose own message may not name it."""
    polars = type(frame).__module__.split(".")[0] == "polars"
    if polars:
        import polars as pl  # (the caller's frame is one: imported already)

        objects = [name for name, dtype in frame.schema.items() if dtype == pl.Object]
        if objects:
            raise InputError(f"the DataFrame's column {objects[0]!r} holds Python objects (Object), which Arrow "
                             "cannot hold; drop or convert it")

    def table_of(part) -> pa.Table:
        return part.to_arrow() if polars else pa.Table.from_pandas(part, preserve_index=False)

    try:
        table = table_of(frame)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as error:
        reason = str(error)
    else:
        if not polars:
            check_object_times(frame, table)
        return table
    if not polars and not frame.columns.is_unique:
        repeated = sorted({str(name) for name in frame.columns[frame.columns.duplicated()]})
        raise InputError(f"the DataFrame has more than one column named {', '.join(map(repr, repeated))}; "
                         "column names must be unique")
    for name in frame.columns:
        try:
            table_of(frame[[name]])
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as error:
            raise InputError(f"the DataFrame's column {name!r} ({frame[name].dtype}) cannot be read ({error}); "
                             "drop or convert it") from None
    raise InputError(f"cannot read the DataFrame: {reason}")


def check_object_times(frame, table: pa.Table) -> None:
    """InputError naming a pandas column of Python objects whose dates and times Arrow's
    conversion (``table``, the frame's columns in order) changed (records.times_changed's
    rule: dates beside datetimes are made dates, naive beside aware datetimes one kind)."""
    for (name, series), column in zip(frame.items(), table.columns):
        if series.dtype == object and holds_times(column.type) and not same_times(
                column.type, column.to_pylist(), series.tolist()):
            raise InputError(f"the DataFrame's column {name!r} holds {TIMES_CHANGED}, read as {column.type}")


def dataset_table(data) -> pa.Table:
    """The rows a Hugging Face ``datasets.Dataset`` shows, in its order, as one pyarrow Table.

    shuffle, filter, train_test_split, select, sort and shard leave the Dataset's Arrow table
    (``Dataset.data``) as it was and put an indices mapping over it (``Dataset._indices``: a
    table whose one column holds, for each row shown, its row in ``data``). The table is taken
    through it once; datasets' own formatting queries would gather one row at a time, and
    flatten_indices converts every row to Python objects. Without a mapping the table itself
    (memory-mapped where the Dataset is, no copy). A version of datasets that keeps its
    mapping elsewhere is read through flatten_indices (in memory: no cache file is written)."""
    if not hasattr(data, "_indices"):
        return data.flatten_indices(keep_in_memory=True).data.table
    table = data.data.table
    return table if data._indices is None else table.take(data._indices.column(0))


def list_corpus(items: Sequence, field: str) -> Corpus:
    """The corpus of a list of texts (str or None), or of token-id lists (each a list, tuple or
    numpy array of integers, or None), in column ``field``; ids are the positions. The rule of
    an iterable's items (texts_corpus): the first that is not None says which."""
    return texts_corpus([items], field, "<list>")


def strings_corpus(texts: Sequence) -> Corpus:
    """The corpus of a list of texts, in column "text" (list_corpus)."""
    return list_corpus(texts, "text")


def table_corpus(table: pa.Table, text_field: str, id_field: Optional[str], source: Optional[SourceFile] = None,
                 positions: Optional[pa.Array] = None) -> Corpus:
    """The corpus of a table of documents: the text (or token ids) in column text_field, the
    ids in column id_field, else ``positions`` (int64; default the row numbers from 0);
    source: where the rows came from (default "<table>")."""
    if repeated := repeated_names(table.schema.names):  # (no output could hold both)
        raise InputError(f"the table has more than one column named {', '.join(repeated)}; column names must be "
                         "unique")
    if deep := too_deep(table.schema):
        raise InputError(deep)  # (a table's, or the records' fields)
    if not has_field(table.schema, text_field):  # (a column, or a path into struct columns: io/fields.py)
        raise InputError(f"no column {text_field!r} (columns: {', '.join(field_names(table.schema))}); "
                         "choose it with text_field=")
    given = table.schema
    # Bytes are text as a Parquet file's are (some writers store strings without their UTF-8
    # annotation): viewed as strings, refused where one is not UTF-8; written back as given.
    table = plain_text_column(table, text_field)
    if (bad := invalid_utf8_rows(field_column(table, text_field))).shape[0]:
        raise InputError(f"column {text_field!r} at row {int(bad[0])} (from 0) is not valid UTF-8; expected text")
    text_type = field_type(table.schema, text_field)
    if not (is_text_type(text_type) or is_token_type(text_type)):
        raise InputError(f"column {text_field!r} has type {text_type}, expected strings or lists of token ids")
    if is_token_type(text_type):
        rows, reasons = bad_token_rows(field_column(table, text_field))
        if len(rows):
            raise InputError(f"column {text_field!r} at row {int(rows[0])} (from 0) {reasons[0]}")
    if id_field is None:
        ids = positions if positions is not None else pa.array(np.arange(table.num_rows, dtype=np.int64))
    elif not has_field(table.schema, id_field):
        raise InputError(f"no column {id_field!r} for ids (columns: {', '.join(field_names(table.schema))})")
    else:
        ids = field_column(table, id_field).combine_chunks()
        if not (is_id_type(ids.type) or pa.types.is_null(ids.type)):  # (all null: counted below)
            raise InputError(f"id column {id_field!r} has type {ids.type}, expected strings or integers")
        ids = plain_ids(ids)
        too_large = first_id_above_int64(ids)
        if too_large is not None:
            raise InputError(f"id column {id_field!r} row {too_large[0]} (from 0) holds {too_large[1]}, above the "
                             f"largest integer id ({INT64_MAX}); integer ids must fit a signed 64-bit integer")
        if ids.null_count:
            raise InputError(f"id column {id_field!r} has {ids.null_count} null values; ids must be unique")
    # (its columns as given: the rows are written back in their types, DedupResult.write)
    corpus = Corpus(table, text_field, ids, [source or SourceFile("<table>", "table", table.num_rows,
                                                                  schema=writable_schema(given))])
    check_unique_ids(corpus)
    return corpus


# --- in-memory data read in batches: iterables, records, Series -----------------------------------


# Items of an iterable (or of a list of records) converted to Arrow at a time, and rows of an
# IterableDataset read at a time: large enough for Arrow's conversion to dominate, small
# enough that the Python objects of one batch are a small part of the corpus.
BATCH_ITEMS = 10_000


def batches_of(items: Iterable) -> Iterator[list]:
    """The items as lists of up to BATCH_ITEMS, in order."""
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, BATCH_ITEMS)):
        yield batch


def holds_records(items: Iterable) -> bool:
    """Whether the first item that is not None is a dict: the items are records, not texts."""
    return isinstance(next((item for item in items if item is not None), None), dict)


def iterable_corpus(items: Iterator, text_field: str, id_field: Optional[str],
                    on_error: str) -> tuple[Corpus, Callable[[np.ndarray], Any]]:
    """(Corpus, restore) of an iterable read once, in batches: of dicts (records_corpus;
    restore gives a pyarrow Table of the kept rows) or of texts or token-id lists
    (texts_corpus; restore gives a list of the kept items, token ids as lists of int)."""
    batches = batches_of(items)
    first = next(batches, [])
    batches = itertools.chain([first], batches)
    if holds_records(first):
        corpus, _ = records_corpus(batches, "<iterable>", text_field, id_field, on_error)
        return corpus, lambda keep: corpus.table.filter(pa.array(keep))
    if first:  # (an empty iterable is records or texts alike)
        refuse_id_field(id_field, "an iterable of texts")
    corpus = texts_corpus(batches, text_field, "<iterable>")
    return corpus, lambda keep: corpus.texts.filter(pa.array(keep)).to_pylist()


def refuse_id_field(id_field: Optional[str], what: str) -> None:
    """ParameterError for an id_field given with data that has no fields (``what``): it would be
    passed over, the documents numbered from 0."""
    if id_field is not None:
        raise ParameterError(f"id_field={id_field!r} names a field of records or a column of a table; {what} "
                             "has none (its documents are numbered from 0): pass records or a table to give ids")


def texts_corpus(batches: Iterable[Sequence], field: str, name: str) -> Corpus:
    """The corpus of texts (str or None) or token-id lists (list, tuple or numpy array of
    integers, or None) given in batches, in column ``field``; ids are the positions. The
    first item that is not None says which; each batch is converted to Arrow as it comes."""
    chunks: list = []
    tokens: Optional[bool] = None  # not known while every item so far is None
    count = 0
    for batch in batches:
        if tokens is None:
            given = next((item for item in batch if item is not None), None)
            if given is not None:
                tokens = isinstance(given, TOKEN_LIST_TYPES)
        if tokens:
            wrong = next((i for i, item in enumerate(batch)
                          if item is not None and not isinstance(item, TOKEN_LIST_TYPES)), None)
            if wrong is not None:
                raise InputError(f"item {count + wrong} is of type {type(batch[wrong]).__name__}, expected a list "
                                 "of token ids (as the items before it) or None")
            chunks.append(token_lists_to_arrow(batch, count))
        else:
            chunks.append(strings_to_arrow(batch, count))
        count += len(batch)
    content_type = pa.large_list(pa.int64()) if tokens else pa.large_string()
    # Batches of None only, read before the first item said which: nulls of the content's type.
    content = pa.chunked_array([chunk if chunk.type == content_type else pa.nulls(len(chunk), content_type)
                                for chunk in chunks], content_type)
    ids = pa.array(np.arange(count, dtype=np.int64))
    return Corpus(pa.table({field: content}), field, ids, [SourceFile(name, "list", count)])



def series_corpus(series, field: str) -> Corpus:
    """The corpus of a pandas or polars Series, or an Arrow array, of texts (or of token-id
    lists), as a list's: ids are the positions (its index is left to the caller, whose kept
    rows keep it)."""
    name = f"<{type(series).__name__}>"
    if isinstance(series, (pa.Array, pa.ChunkedArray)):
        content = series
    else:
        try:
            content = series.to_arrow() if hasattr(series, "to_arrow") else pa.array(series, from_pandas=True)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            content = strings_to_arrow(series.to_list())  # names the first item that is not a string
    if not is_token_type(content.type):  # (bytes are UTF-8 text, as a binary column's are)
        content = plain_strings(content)  # (first: Arrow makes no empty array of a dictionary of views)
    if isinstance(content, pa.ChunkedArray):
        content = content.combine_chunks() if content.num_chunks else pa.array([], content.type)
    if not (is_text_type(content.type) or is_token_type(content.type)):
        raise InputError(f"the {name[1:-1]} holds {getattr(series, 'dtype', content.type)} values; expected "
                         "strings (or lists of token ids), or None for a missing text")
    if is_token_type(content.type):
        rows, reasons = bad_token_rows(content)
        if len(rows):
            raise InputError(f"the Series' item {int(rows[0])} (from 0) {reasons[0]}")
    elif (bad := invalid_utf8_rows(content)).shape[0]:
        raise InputError(f"the {name[1:-1]}'s item {int(bad[0])} (from 0) is not valid UTF-8; expected text")
    ids = pa.array(np.arange(len(content), dtype=np.int64))
    return Corpus(pa.table({field: content}), field, ids, [SourceFile(name, "list", len(content))])


def records_corpus(batches: Iterable[list], name: str, text_field: str, id_field: Optional[str],
                   on_error: str) -> tuple[Corpus, np.ndarray]:
    """(Corpus, positions read) of records (dicts) given in batches, read as a JSONL file's
    records are (io/records.py: read_records, which says what stops the run or is left out);
    positions read: int64, the position of each row of the corpus among the records given."""
    table, read_positions, count, skipped = read_records(batches, name, text_field, id_field, on_error)
    ids = pa.array(read_positions) if id_field is None else None
    source = SourceFile(name, "list", table.num_rows, row_numbers=read_positions + 1)
    corpus = table_corpus(table, text_field, id_field, source, ids)
    corpus.skipped_records = skipped
    if read_positions.shape[0] < count:  # (keep is then over the records given: DedupResult.keep)
        corpus.given_rows = (read_positions, count)
    return corpus, read_positions


def iterable_dataset_table(data) -> pa.Table:
    """The rows of a Hugging Face ``datasets.IterableDataset`` whose features are known (a
    streaming one included), read once in Arrow batches of BATCH_ITEMS rows (datasets' own
    "arrow" format, which casts each batch to the features), as one table."""
    batches = list(data.with_format("arrow").iter(batch_size=BATCH_ITEMS))
    if not batches:  # no rows: the columns its features declare
        return data.features.arrow_schema.empty_table()
    try:
        return pa.concat_tables(batches, promote_options="permissive")
    except (pa.ArrowTypeError, pa.ArrowInvalid) as error:
        raise InputError(f"the IterableDataset's batches do not combine into one table ({error})") from None
