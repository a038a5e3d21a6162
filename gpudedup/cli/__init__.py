"""The command line: ``gpudedup dedup``, ``gpudedup params``, ``gpudedup evaluate``,
``gpudedup demo``, and the ``gpudedup index`` group (cli/index.py); what the commands share is
in cli/common.py.

User errors (bad input, bad parameters, an occupied output directory) print one line on stderr
and exit with code 2, without a traceback; SIGINT (Ctrl-C), SIGTERM and SIGHUP end a run with
one line and codes 130, 143 and 129, leaving no partial output (interrupts.py).
"""

from __future__ import annotations

import json
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Annotated, List, Optional

import typer

from ..errors import OutputError, ParameterError
from ..interrupts import interrupted_outcome, last_signal, signal_word
from ..params import (DEFAULT_BUCKET_WINDOW, check_targets_read, DEFAULT_MAX_FN, DEFAULT_NGRAM, DEFAULT_NUM_PERM,
                     DEFAULT_SEED, DEFAULT_THRESHOLD, DedupParams)
from ..version import __version__
from ..display import largest_cluster_rows
from .common import (INPUT_PANEL, OUTPUT_PANEL, SCALE_PANEL, escape, SIMILARITY_PANEL, BandsOption, BucketWindowOption,
                     LowOption, MaxFnOption, MaxFpOption, NgramOption, NumPermOption, RowsOption, SeedOption,
                     ShingleOption, StripPunctuationOption, StripSymbolsOption, ThresholdOption, UnicodeOption,
                     BackendChoice, Exclude, GroupField, Include, Keep, OnError, OutputFormat, Shingle, UnicodeChoice,
                     command_paths, err, local_path, interrupt_told, out, pandas_wanted, print_error, print_summary,
                     unicode_form, user_errors, WriteRemoved)
from .evaluate import evaluate_command
from .index import index_app

if TYPE_CHECKING:
    from ..results.result import DedupResult

# What only a running command needs (numpy, pyarrow, scipy: the api, the writer, rich tables)
# is imported inside the commands, so that `gpudedup --help` and argument errors stay fast.

app = typer.Typer(
    name="gpudedup",
    help="Find and remove near-duplicate documents in large text collections (MinHash LSH on the GPU or CPU, "
         "exact Jaccard verification).\n\n"
         "A command's options: `gpudedup COMMAND --help`; the documentation: `gpudedup docs`.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Markdown: help texts and docstrings are reflowed to the terminal's width (a single line
    # break inside a paragraph is a space), and `code` marks commands and values.
    rich_markup_mode="markdown",
)


def version_callback(value: bool):
    if value:
        out.print(f"gpudedup {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(
    version: Annotated[Optional[bool], typer.Option("--version", callback=version_callback,
                                                    is_eager=True, help="Show the version and exit.")] = None,
):
    """Find and remove near-duplicate documents in large text collections."""


@app.command("dedup")
def dedup_command(
    context: typer.Context,
    inputs: Annotated[List[str], typer.Argument(
        help="JSONL (also .gz, .zst), Parquet, Arrow or .txt files, Hugging Face save_to_disk folders, or "
             "directories of them (read recursively); or their URLs (s3://, gs://, any fsspec file system).",
        show_default=False)],
    *,  # (keyword-only: the required --output sits in its panel, after options with defaults)
    # Input: what is read, and what it is deduplicated against.
    text_field: Annotated[str, typer.Option(
        help="Field (column) holding the text; a dotted path (content.text) reaches into objects.",
        rich_help_panel=INPUT_PANEL)] = "text",
    id_field: Annotated[Optional[str], typer.Option(
        help="Field holding unique document ids. Default: `<file path>:<row>`, the row counted from 1 (the "
             "line number for JSONL).",
        show_default=False, rich_help_panel=INPUT_PANEL)] = None,
    token_field: Annotated[str, typer.Option(
        help="With --shingle token: the field holding each document's token ids (integers from 0 to 2^32 - 1).",
        rich_help_panel=INPUT_PANEL)] = "input_ids",
    include: Include = None,
    exclude: Exclude = None,
    on_error: Annotated[OnError, typer.Option(
        help="stop: a bad record or unreadable file stops the run (nothing written); skip: they are left out "
             "and listed in errors.jsonl.",
        rich_help_panel=INPUT_PANEL)] = OnError.stop,
    group_field: GroupField = None,
    against: Annotated[Optional[str], typer.Option(
        help="Deduplicate against this persistent index too (`gpudedup index`), adding nothing to it; the "
             "index's parameters are used.", show_default=False, rich_help_panel=INPUT_PANEL)] = None,
    # Shingles and LSH: what decides which documents are near-duplicates.
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
    # Output: what is written, and where.
    output: Annotated[str, typer.Option("--output", "-o", help="Directory (or URL) to write the results into.",
                                        show_default=False, rich_help_panel=OUTPUT_PANEL)],
    keep: Annotated[Keep, typer.Option(
        help="Which document of a cluster to keep: the first in input order, or the longest.",
        rich_help_panel=OUTPUT_PANEL)] = Keep.first,
    format: Annotated[OutputFormat, typer.Option("--format", help="Format of the kept rows' files.",
                                                 rich_help_panel=OUTPUT_PANEL)] = OutputFormat.parquet,
    single_file: Annotated[bool, typer.Option(
        "--single-file", help="Write the kept rows, the pairs and the clusters into one file each, instead "
                              "of one file per input file.",
        rich_help_panel=OUTPUT_PANEL)] = False,
    write_removed: WriteRemoved = False,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace an earlier gpudedup output (never a folder of other files).",
        rich_help_panel=OUTPUT_PANEL)] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress display and no summary.",
                                        rich_help_panel=OUTPUT_PANEL)] = False,
    # Scale: where and how the work runs (memory, stages, a cluster); results do not change.
    backend: Annotated[BackendChoice, typer.Option(
        help="gpu (CuPy), cpu (numpy) or auto (gpu when a GPU is usable).",
        rich_help_panel=SCALE_PANEL)] = BackendChoice.auto,
    batch_bytes: Annotated[Optional[str], typer.Option(
        help="Text bytes per batch, e.g. 256K (memory, not results); default 2M on cpu, 64M on gpu.",
        show_default=False, rich_help_panel=SCALE_PANEL)] = None,
    max_memory: Annotated[Optional[str], typer.Option(
        help="Host memory the run may use, e.g. 8G: a stage that would need more stops the run before it "
             "starts.", show_default=False, rich_help_panel=SCALE_PANEL)] = None,
    work_dir: Annotated[Optional[str], typer.Option(
        help="Run in stages on Dask (its local scheduler without --workers or --scheduler) over one input file at "
             "a time, keeping each stage's results in this folder or URL, so that the corpus is never in memory as "
             "a whole (`gpudedup docs scale`).", show_default=False,
        rich_help_panel=SCALE_PANEL)] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Go on with the finished stages in --work-dir after an "
                                                          "interruption.", rich_help_panel=SCALE_PANEL)] = False,
    shard_bytes: Annotated[Optional[str], typer.Option(
        help="With --work-dir or Dask: cut JSONL and Parquet files larger than this (default 512M) into pieces "
             "read by a task each.", show_default=False,
        rich_help_panel=SCALE_PANEL)] = None,
    scheduler: Annotated[Optional[str], typer.Option(
        help="Run the work on this Dask scheduler's workers (tcp://host:8786); needs a --work-dir that every "
             "worker sees.", show_default=False,
        rich_help_panel=SCALE_PANEL)] = None,
    workers: Annotated[Optional[int], typer.Option(
        help="Run the work on a local Dask cluster of this many worker processes (with gpu: one per GPU); at "
             "most 4 per core.",
        show_default=False, rich_help_panel=SCALE_PANEL)] = None,
):
    """Deduplicate documents and write the results into OUTPUT.

    Writes deduplicated/ (the kept rows, one file per input file, named as the input files),
    pairs/ and clusters/ (Parquet datasets), report.json and report.html; --single-file writes
    deduplicated.parquet (or .jsonl), pairs.parquet and clusters.parquet instead. The options
    and outputs: `gpudedup docs cli`, `gpudedup docs output-formats`.

    Example: `gpudedup dedup shards/ -o out/ --threshold 0.8`
    """
    from ..api import dedup as run_api_dedup  # (start-up: `--help` and completion load no job)

    with user_errors(context, pandas_wanted(work_dir, scheduler, workers, backend.value)) as guard:
        files, out, work = command_paths(inputs, output, work_dir)
        if against is not None:
            from ..index import Index  # (start-up: `--help` and completion load no job)

            index = Index(local_path(against, "an index"))
            values = dict(threshold=threshold, shingle=shingle.value, ngram=ngram,
                          unicode=unicode_form(unicode.value), strip_punctuation=strip_punctuation,
                          strip_symbols=strip_symbols, num_perm=num_perm, max_fn=max_fn, low=low, max_fp=max_fp,
                          seed=seed, bucket_window=bucket_window, bands=bands, rows=rows, keep=keep.value)
            # Only the options given on the command line (a default is no request).
            given = {name: value for name, value in values.items()
                     if getattr(context.get_parameter_source(name), "name", "DEFAULT") != "DEFAULT"}
            check_index_parameters(index.params(), given)
            result = index.dedup(files, text_field=text_field, id_field=id_field, token_field=token_field,
                                 backend=backend.value, progress=not quiet, on_error=on_error.value,
                                 batch_bytes=batch_bytes, max_memory=max_memory, shard_bytes=shard_bytes,
                                 work_dir=work, resume=resume, scheduler=scheduler, workers=workers,
                                 include=include, exclude=exclude, group_field=group_field, output=out,
                                 format=format.value, overwrite=overwrite, single_file=single_file,
                                 write_removed=write_removed)
            guard.written = out
            if not quiet:
                print_summary(result.report, out)
            guard.done()
            return
        result = run_api_dedup(
            files, text_field=text_field, id_field=id_field, threshold=threshold,
            shingle=shingle.value, ngram=ngram, token_field=token_field, unicode=unicode_form(unicode.value),
            strip_punctuation=strip_punctuation, strip_symbols=strip_symbols,
            num_perm=num_perm, bands=bands, rows=rows,
            max_fn=max_fn, low=low, max_fp=max_fp, seed=seed,
            keep=keep.value, bucket_window=bucket_window, backend=backend.value, progress=not quiet,
            batch_bytes=batch_bytes, max_memory=max_memory, shard_bytes=shard_bytes, on_error=on_error.value,
            include=include, exclude=exclude,
            work_dir=work, resume=resume, scheduler=scheduler, workers=workers,
            # Written by the run: on a Dask cluster each worker writes its shards' kept rows.
            output=out, format=format.value, overwrite=overwrite, single_file=single_file,
            write_removed=write_removed, group_field=group_field,
        )
        guard.written = out
        if not quiet:
            print_summary(result.report, out)
        guard.done()


@app.command("params")
def params_command(
    context: typer.Context,
    threshold: ThresholdOption = DEFAULT_THRESHOLD,
    num_perm: NumPermOption = DEFAULT_NUM_PERM,
    max_fn: MaxFnOption = DEFAULT_MAX_FN,
    low: LowOption = None,
    max_fp: MaxFpOption = None,
    bands: Annotated[Optional[int], typer.Option(
        help="Describe this b (with --rows) instead of choosing.", show_default=False,
        rich_help_panel=SIMILARITY_PANEL)] = None,
    rows: RowsOption = None,
    shingle: ShingleOption = Shingle.word,
    ngram: NgramOption = DEFAULT_NGRAM,
    unicode: UnicodeOption = UnicodeChoice.none,
    strip_punctuation: StripPunctuationOption = False,
    strip_symbols: StripSymbolsOption = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.",
                                              rich_help_panel=OUTPUT_PANEL)] = False,
):
    """Choose LSH bands and rows from explicit targets, and show what they do.

    b and r are chosen as in `dedup`: the steepest S-curve P(s) = 1 - (1 - s^r)^b with
    b x r <= K whose miss probability at the threshold is at most --max-fn (and, with --low,
    whose P(low) is at most --max-fp). Impossible targets are refused with the K that would do.

    Example: `gpudedup params --threshold 0.8 --low 0.5 --max-fp 0.05 --num-perm 512`
    """
    # (start-up: `--help` and completion load no job)
    from rich.table import Table

    # (start-up: `--help` and completion load no job)
    from ..core.lsh import banding_summary, percent

    with user_errors(context):
        params = DedupParams(threshold=threshold, num_perm=num_perm, bands=bands, rows=rows,
                             max_fn=max_fn, low=low, max_fp=max_fp, shingle=shingle.value, ngram=ngram,
                             unicode=unicode_form(unicode.value), strip_punctuation=strip_punctuation,
                             strip_symbols=strip_symbols)
        check_targets_read(params, low_shown=True)
        summary = banding_summary(threshold, params.banding(), low)
        # What the shingles are (the banding does not depend on them; a run's results do).
        summary["shingles"] = {name: getattr(params, name) for name in
                               ("shingle", "ngram", "unicode", "strip_punctuation", "strip_symbols")}
        if json_output:
            out.print_json(data=summary)
            return
        out.print(f"[bold]{summary['bands']} bands x {summary['rows']} rows[/] "
                  f"({summary['permutations_computed']} of {num_perm} permutations computed)")
        out.print(f"why: {escape(summary['rule'])}")
        out.print(f"shingles: {escape(describe_shingles(params))}")
        out.print(f"S-curve steepest at s = {summary['steepest_similarity']:.3f}; "
                  f"miss probability at the threshold {threshold}: {percent(summary['miss_probability_at_threshold'])}")
        table = Table("similarity s", "P(s): share of pairs at s that become candidates", "missed 1 - P(s)")
        for similarity, probability in summary["candidate_probability"].items():
            if float(similarity) == threshold:
                mark = "  (threshold)"
            else:
                mark = "  (low)" if low is not None and float(similarity) == low else ""
            table.add_row(f"{similarity}{mark}", f"{probability:.4%}", f"{1 - probability:.4%}")
        out.print(table)


app.command("evaluate")(evaluate_command)


@app.command("demo")
def demo_command(
    context: typer.Context,
    output: Annotated[str, typer.Option(
        "--output", "-o", help="Where to write the demo's results (an earlier demo's output there is "
                               "replaced).")] = "gpudedup-demo",
    backend: Annotated[BackendChoice, typer.Option(help="gpu, cpu or auto.")] = BackendChoice.auto,
):
    """Deduplicate the bundled sample corpus and show what was found.

    The sample is Bible chapters from several public-domain English translations, some of which
    are near-identical revisions of one another.
    """
    from ..api import dedup as run_api_dedup  # (start-up: `--help` and completion load no job)
    from ..io.outputdir import check_output_dir

    with user_errors(context, pandas_wanted(None, None, None, backend.value)) as guard:
        folder = local_path(output, "the demo's output")
        check_output_dir(folder, overwrite=True)  # (before the job: a folder of someone's files is refused)
        check_demo_output(folder)
        from importlib import resources  # (start-up: only the demo reads the shipped sample)

        sample = resources.files("gpudedup").joinpath("data/bible_sample.jsonl.gz")
        with resources.as_file(sample) as path:
            result = run_api_dedup([Path(path)], id_field="id", backend=backend.value, progress=True)
        result.write(folder, overwrite=True)
        guard.written = folder
        print_summary(result.report, folder)
        print_largest_clusters(result)
        guard.done()


# The shipped sample, as a demo's report.json names its one input.
DEMO_SAMPLE = "bible_sample.jsonl.gz"


def check_demo_output(output: Path) -> None:
    """OutputError where ``output`` holds the finished output of a run other than a demo's
    (its report.json names another input than the shipped sample, in the package's data
    folder wherever it is installed): the demo replaces its own output, or an unfinished one,
    and no other run's results, not even one of a file of the sample's name."""
    try:
        files = json.loads((output / "report.json").read_text(encoding="utf-8"))["input"]["files"]
        demo = len(files) == 1 and PurePath(str(files[0]["absolute_path"])).parts[-3:] == ("gpudedup", "data",
                                                                                          DEMO_SAMPLE)
    except FileNotFoundError:
        return  # (nothing there, or no finished output)
    except (OSError, ValueError, KeyError, TypeError):
        demo = False
    if not demo:
        raise OutputError(f"{output}: holds a gpudedup output that is not the demo's, which the demo does not "
                          "replace; choose another -o for the demo")


@app.command("docs")
def docs_command(
    topic: Annotated[Optional[str], typer.Argument(
        help="The document to print, e.g. `cli`, `index` or `scale`; without it, the list of documents.",
        show_default=False)] = None,
):
    """Print a document of gpudedup's documentation, as installed with the package.

    The documents are Markdown; a link to another one, such as (index.md), names the topic to
    give here (`gpudedup docs index`).
    """
    documents = docs_directory()
    topics = sorted(path.stem for path in documents.glob("*.md"))
    if topic is None:
        for name in topics:
            heading = (documents / f"{name}.md").read_text(encoding="utf-8").partition("\n")[0].lstrip("# ")
            out.print(f"{name:<16} {escape(heading)}")
        return
    name = topic.removesuffix(".md")
    if name not in topics:
        print_error(f"no document {topic!r}; the documents are {', '.join(topics)}")
        raise typer.Exit(code=2)
    typer.echo((documents / f"{name}.md").read_text(encoding="utf-8"), nl=False)  # as it is: a pipe gets the file


def docs_directory() -> Path:
    """The folder of the documentation's Markdown files: gpudedup/docs in an installed wheel (pyproject
    maps the top-level docs/ there), the repository's docs/ in a source checkout or an editable install
    (as backends/cuda_kernels.kernel_directory finds kernels/)."""
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "docs", package.parent / "docs"):
        if (candidate / "cli.md").is_file():
            return candidate
    raise FileNotFoundError(f"the documentation (cli.md, ...) is missing from {package}; reinstall gpudedup")


def check_index_parameters(fixed: DedupParams, given: dict) -> None:
    """ParameterError when a result option given with --against (``given``: name -> value, the
    options given on the command line) differs from the index's own value."""
    for name, value in given.items():
        if value != getattr(fixed, name):
            option = "--" + name.replace("_", "-")
            same = "" if isinstance(value, bool) else " or give the same value"  # (a flag has no "off" to give)
            raise ParameterError(f"the index fixes {option} {option_value(getattr(fixed, name))}; leave out the "
                                 f"option{same} (got {option_value(value)})")


def option_value(value) -> str:
    """A parameter's value as the command line gives it: on or off for a flag, none for no value."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return "none" if value is None else str(value)


def describe_shingles(params: DedupParams) -> str:
    """'word 5-grams of the text (NFKC, punctuation removed)' and the like."""
    if params.shingle == "token":
        return f"{params.ngram}-grams of token ids"
    steps = [params.unicode.upper()] if params.unicode else []
    steps += ["punctuation removed"] if params.strip_punctuation else []
    steps += ["symbols removed"] if params.strip_symbols else []
    return (f"{params.shingle} {params.ngram}-grams of the text, lower-cased, white space collapsed"
            + (f" ({', '.join(steps)})" if steps else ""))


def print_largest_clusters(result: DedupResult) -> None:
    """The largest clusters as the run counted them: size, kept and removed ids."""
    # (start-up: `--help` and completion load no table)
    from rich.table import Table

    table = Table(title="Largest clusters", show_lines=False)
    table.add_column("cluster", justify="right")
    table.add_column("size", justify="right")
    table.add_column("kept")
    table.add_column("removed")
    for number, size, kept, removed, more in largest_cluster_rows(result):
        table.add_row(str(number), str(size), ", ".join(map(str, kept)),
                      ", ".join(map(str, removed)) + (" ..." if more else ""))
    err.print(table)


def main() -> None:
    """Run the command line; the entry point (console.main) has installed the signal handlers."""
    try:
        # One name, also under `python -m gpudedup`: shell completion is for the installed command
        # (its script and its _GPUDEDUP_COMPLETE variable), and the usage lines name it.
        app(prog_name="gpudedup")
    except SystemExit as leaving:
        # Backstop: an Interrupted that escaped user_errors (typer turns it into a silent exit
        # 130) still ends with the signal's code and one line.
        signum = last_signal()
        if leaving.code == 130 and signum is not None and not interrupt_told[0]:
            err.print(f"[bold red]{signal_word(signum)}[/]: {escape(interrupted_outcome())}", soft_wrap=True)
            raise SystemExit(128 + signum) from None
        raise


app.add_typer(index_app, name="index")
