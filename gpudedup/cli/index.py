"""`gpudedup index ...`: the persistent index's commands (gpudedup/index/), a sub-command group of
the command line's app. Heavy modules are imported inside the commands, as in cli/__init__.py."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..errors import InputError
from ..params import DEFAULT_BUCKET_WINDOW, DEFAULT_MAX_FN, DEFAULT_NGRAM, DEFAULT_NUM_PERM, DEFAULT_SEED, \
    DEFAULT_THRESHOLD
from .common import (INPUT_PANEL, OUTPUT_PANEL, SCALE_PANEL, escape, BandsOption, BucketWindowOption,
                     LowOption, MaxFnOption, MaxFpOption, NgramOption, NumPermOption, RowsOption, SeedOption,
                     ShingleOption, StripPunctuationOption, StripSymbolsOption, ThresholdOption, UnicodeOption,
                     BackendChoice, Exclude, GroupField, Include, OnError, OutputFormat, Shingle, UnicodeChoice,
                     WriteRemoved, err, out, pandas_wanted, print_summary, unicode_form, user_errors)

index_app = typer.Typer(
    name="index",
    help="A persistent index: deduplicate new data against everything kept before (`gpudedup docs index`).",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

IndexPath = Annotated[str, typer.Argument(help="The index directory (a local folder).", show_default=False)]


class VerifyFrom(str, Enum):
    sets = "sets"
    source = "source"


@index_app.command("create")
def create_command(
    context: typer.Context,
    index: IndexPath,
    threshold: ThresholdOption = DEFAULT_THRESHOLD,
    shingle: ShingleOption = Shingle.word,
    ngram: NgramOption = DEFAULT_NGRAM,
    unicode: UnicodeOption = UnicodeChoice.none,
    strip_punctuation: StripPunctuationOption = False,
    strip_symbols: StripSymbolsOption = False,
    num_perm: NumPermOption = DEFAULT_NUM_PERM,
    bands: BandsOption = None,
    rows: RowsOption = None,
    max_fn: MaxFnOption = DEFAULT_MAX_FN,
    low: LowOption = None,
    max_fp: MaxFpOption = None,
    seed: SeedOption = DEFAULT_SEED,
    bucket_window: BucketWindowOption = DEFAULT_BUCKET_WINDOW,
    verify_from: Annotated[VerifyFrom, typer.Option(
        help="How matches with indexed documents are checked exactly: `sets` stores each document's shingle "
             "set; `source` stores where it came from and reads it again (smaller; the files must be kept as "
             "they were, and adds must come from files).", rich_help_panel=OUTPUT_PANEL)] = VerifyFrom.sets,
):
    """Make an empty index that fixes the parameters results depend on (every later command uses them).

    Example: `gpudedup index create idx/ --threshold 0.8 --shingle word --ngram 5`
    """
    # (start-up: `--help` and completion load no index)
    from ..index import Index

    with user_errors(context, pandas=False):
        made = Index.create(index, threshold=threshold, shingle=shingle.value, ngram=ngram,
                            unicode=unicode_form(unicode.value), strip_punctuation=strip_punctuation,
                            strip_symbols=strip_symbols, num_perm=num_perm, bands=bands, rows=rows, max_fn=max_fn,
                            low=low, max_fp=max_fp, seed=seed, bucket_window=bucket_window,
                            verification=verify_from.value)
        p = made.info()["parameters"]
        err.print(f"Made the index {escape(str(index))}: Jaccard >= {p['threshold']} over {p['shingle']} "
                  f"{p['ngram']}-grams, {p['bands']} bands x {p['rows']} rows; matches verified from "
                  f"{'stored shingle sets' if verify_from is VerifyFrom.sets else 'the source files'}.")


@index_app.command("add")
def add_command(
    context: typer.Context,
    index: IndexPath,
    inputs: Annotated[List[str], typer.Argument(help="JSONL, Parquet, Arrow or .txt files, or directories of "
                                                     "them, or their URLs.", show_default=False)],
    *,  # (keyword-only: the required --output sits in its panel, after options with defaults)
    text_field: Annotated[str, typer.Option(help="Field holding the text.", rich_help_panel=INPUT_PANEL)] = "text",
    id_field: Annotated[Optional[str], typer.Option(help="Field holding unique ids (unique across the index).",
                                                    show_default=False, rich_help_panel=INPUT_PANEL)] = None,
    token_field: Annotated[str, typer.Option(help="Field holding token ids (token indexes).",
                                             rich_help_panel=INPUT_PANEL)] = "input_ids",
    include: Include = None,
    exclude: Exclude = None,
    on_error: Annotated[OnError, typer.Option(help="As in dedup.", rich_help_panel=INPUT_PANEL)] = OnError.stop,
    group_field: GroupField = None,
    output: Annotated[str, typer.Option("--output", "-o", help="Where the results of the run go.",
                                        show_default=False, rich_help_panel=OUTPUT_PANEL)],
    tag: Annotated[Optional[str], typer.Option(help="A name for what this add commits (`index remove --tag`).",
                                               show_default=False, rich_help_panel=OUTPUT_PANEL)] = None,
    format: Annotated[OutputFormat, typer.Option("--format", help="As in dedup.",
                                                 rich_help_panel=OUTPUT_PANEL)] = OutputFormat.parquet,
    single_file: Annotated[bool, typer.Option("--single-file", help="As in dedup.",
                                              rich_help_panel=OUTPUT_PANEL)] = False,
    write_removed: WriteRemoved = False,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace an earlier gpudedup output (never a folder of other files).",
        rich_help_panel=OUTPUT_PANEL)] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress display and no summary.",
                                        rich_help_panel=OUTPUT_PANEL)] = False,
    backend: Annotated[BackendChoice, typer.Option(help="gpu, cpu or auto.",
                                                   rich_help_panel=SCALE_PANEL)] = BackendChoice.auto,
    batch_bytes: Annotated[Optional[str], typer.Option(help="As in dedup.", show_default=False,
                                                       rich_help_panel=SCALE_PANEL)] = None,
    max_memory: Annotated[Optional[str], typer.Option(help="As in dedup.", show_default=False,
                                                      rich_help_panel=SCALE_PANEL)] = None,
    shard_bytes: Annotated[Optional[str], typer.Option(help="As in dedup.", show_default=False,
                                                       rich_help_panel=SCALE_PANEL)] = None,
    work_dir: Annotated[Optional[str], typer.Option(
        help="Run in stages over one input file at a time, as dedup --work-dir.", show_default=False,
        rich_help_panel=SCALE_PANEL)] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Go on with the stages in --work-dir.",
                                         rich_help_panel=SCALE_PANEL)] = False,
    scheduler: Annotated[Optional[str], typer.Option(help="As in dedup.", show_default=False,
                                                     rich_help_panel=SCALE_PANEL)] = None,
    workers: Annotated[Optional[int], typer.Option(help="As in dedup.", show_default=False,
                                                   rich_help_panel=SCALE_PANEL)] = None,
):
    """Deduplicate new data against the index and within itself, write the results as `dedup` does, then commit the
    kept new documents to the index.

    The new documents' ids are checked against the index before any other stage (with --work-dir,
    once they are read): an id the index holds stops the add.

    Example: `gpudedup index add idx/ week1/ -o out/ --tag week1 --id-field id`
    """
    # (start-up: `--help` and completion load no index)
    from ..index import Index
    from ..io.inputs import Selection, scan_inputs
    from ..io.layout import check_output_names
    from ..io.outputdir import check_run_places
    from .common import command_paths

    with user_errors(context, pandas_wanted(work_dir, scheduler, workers, backend.value)) as guard:
        files, out, work = command_paths(inputs, output, work_dir)
        # Apart from the inputs and the index, before any work (Index.add looks at what the
        # inputs resolve to).
        check_run_places(files, out, overwrite, work, index, scan=False)
        if not single_file:
            check_output_names(scan_inputs(files, on_error.value, Selection.of(include, exclude)), format.value, out)
        result = Index(index).add(files, tag=tag, text_field=text_field, id_field=id_field,
                                  token_field=token_field, backend=backend.value, progress=not quiet,
                                  on_error=on_error.value, output=out, format=format.value, overwrite=overwrite,
                                  single_file=single_file, write_removed=write_removed, group_field=group_field,
                                  work_dir=work, resume=resume, scheduler=scheduler, workers=workers,
                                  batch_bytes=batch_bytes, max_memory=max_memory, shard_bytes=shard_bytes,
                                  include=include, exclude=exclude)
        guard.written = out
        if not quiet:
            print_summary(result.report, out)
            err.print(f"{result.indexed_rows:,} indexed documents were near enough to be checked; the index now "
                      f"holds {Index(index).info()['documents']:,} documents.")
        guard.done()


@index_app.command("query")
def query_command(
    context: typer.Context,
    index: IndexPath,
    queries: Annotated[List[str], typer.Argument(help="Texts, or files and folders whose documents are the "
                                                      "queries (an argument naming an existing file or folder "
                                                      "is read as one).",
                                                 show_default=False)],
    text_field: Annotated[str, typer.Option(help="Field holding the text in query files.")] = "text",
    token_field: Annotated[str, typer.Option(help="Field holding token ids in query files.")] = "input_ids",
    backend: Annotated[BackendChoice, typer.Option(help="gpu, cpu or auto.")] = BackendChoice.auto,
):
    """Print, for each query, the indexed documents whose exact Jaccard with it reaches the index's threshold.

    One JSON line per query: `{"query": N, "matches": [{"id": ..., "jaccard": ...}]}`.
    """
    # (start-up: `--help` and completion load no index)
    from ..index import Index

    with user_errors(context, pandas_wanted(None, None, None, backend.value)):
        opened = Index(index)
        documents = []
        for query in queries:
            if names_a_path(query):
                # (start-up: `--help` and completion load no index)
                from ..api import content_field
                from ..io.read import read_corpus

                field = content_field(opened.params(), text_field, token_field)
                documents += read_corpus([Path(query)], field, None).texts.to_pylist()
            else:
                if looks_like_a_path(query):
                    err.print(f"note: {escape(query)} names no file or folder here: it is queried as a text",
                              soft_wrap=True)
                documents.append(query)
        for number, hits in enumerate(opened.query(documents, backend=backend.value)):
            # (ASCII: an id's characters that would steer the terminal come as JSON escapes)
            out.print_json(json.dumps({"query": number, "matches": [{"id": i, "jaccard": j} for i, j in hits]}),
                           indent=None, ensure_ascii=True)


def names_a_path(query: str) -> bool:
    """Whether a query argument names an existing file or folder (else it is a text). A text
    longer than a path may be (ENAMETOOLONG) or holding a NUL names none, and so does an empty
    one (which Path reads as the current folder)."""
    try:
        return query != "" and Path(query).exists()
    except (OSError, ValueError):
        return False


def looks_like_a_path(query: str) -> bool:
    """Whether a query text that names nothing looks like a path all the same (one word with a
    "/" or an input file's suffix): a mistyped file name, which the command says it takes as
    a text."""
    from ..io.formats import input_suffix  # (start-up: gpudedup.io loads pyarrow)

    return bool(query) and not any(c.isspace() for c in query) and ("/" in query or bool(input_suffix(query)))


@index_app.command("remove")
def remove_command(
    context: typer.Context,
    index: IndexPath,
    tag: Annotated[Optional[str], typer.Option(help="Remove the documents an add of this tag committed.",
                                               show_default=False)] = None,
    ids: Annotated[Optional[Path], typer.Option(help="Remove the documents whose ids are listed in this file, "
                                                     "one per line (a .jsonl file: one JSON string or integer "
                                                     "per line).", show_default=False)] = None,
):
    """Remove documents from the index (tombstones; `compact` drops them for good)."""
    # (start-up: `--help` and completion load no index)
    from ..index import UNTAGGED, Index

    with user_errors(context, pandas=False):
        listed = None if ids is None else ids_listed(ids)
        opened = Index(index)
        removed = opened.remove(tag=tag, ids=listed)
        err.print(f"Removed {removed:,} document{'' if removed == 1 else 's'} from {escape(str(index))}.")
        distinct = 0 if listed is None else len(set(listed))
        if tag is not None and not removed:
            tags = [name for name in opened.info()["tags"] if name != UNTAGGED]
            if tag not in tags:
                err.print(f"note: no document of the index has the tag {escape(repr(tag))} (its tags: "
                          f"{escape(', '.join(map(repr, tags))) or 'none'})", soft_wrap=True)
        if distinct > removed:
            err.print(f"note: {distinct - removed:,} of the {distinct:,} ids listed name no document the index holds "
                      "(ids are matched exactly, spaces included)", soft_wrap=True)


def ids_listed(path: Path) -> list[str]:
    """The ids an ids file lists, as strings (the index casts them to its own kind of id: "007"
    stays "007"). A plain file holds an id per line as it stands, spaces included (an id may
    hold them); only empty lines are no ids. A ``.jsonl`` file holds a JSON string or integer
    per line, for ids no plain line can hold (the empty id, one with a line break); blank lines
    are skipped. InputError naming the file (and line) where it cannot be read."""
    try:
        # (bytes: read_text would turn a lone "\r" into a line end; a byte-order mark is no part
        # of the first id)
        text = path.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read the ids file ({getattr(error, 'strerror', None) or error})") from None
    # Lines end at "\n" (or "\r\n") alone: str.splitlines would also cut at U+0085, U+2028 and
    # other characters an id may hold, and remove other ids.
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    if path.suffix.lower() != ".jsonl":
        return [line for line in lines if line]
    listed = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            value = None
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise InputError(f"{path}:{number}: expected an id as a JSON string or integer, got {line[:80]!r}")
        try:
            str(value).encode("utf-8")  # (a JSON escape \\ud800 alone, which Python's parser takes)
        except UnicodeEncodeError:
            raise InputError(f"{path}:{number}: the id holds an unpaired UTF-16 surrogate escape (\\ud800-\\udfff), "
                             "which no id of the index holds") from None
        listed.append(str(value))
    return listed


@index_app.command("compact")
def compact_command(context: typer.Context, index: IndexPath):
    """Merge the index's segments into one and drop removed documents."""
    # (start-up: `--help` and completion load no index)
    from ..index import Index

    with user_errors(context, pandas=False):
        Index(index).compact()
        info = Index(index).info()
        err.print(f"{escape(str(index))}: {info['documents']:,} documents in {info['segments']} segment(s), "
                  f"{info['bytes']:,} bytes.")


@index_app.command("info")
def info_command(context: typer.Context, index: IndexPath,
                 check: bool = typer.Option(False, "--check", help="First read every file of the index whole "
                                            "against its SHA-256 (an add or a query checks what it reads).")):
    """Print the index's documents, segments, tags, bytes and parameters as JSON."""
    # (start-up: `--help` and completion load no index)
    from ..index import Index

    with user_errors(context, pandas=False):
        out.print_json(data=Index(index).info(check), ensure_ascii=True)  # (tags as escapes: index query's)
