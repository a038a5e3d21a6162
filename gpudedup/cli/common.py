"""What the commands of the command line share: the consoles, the option choices and help
panels, the turning of errors and signals into one line and an exit code (in the words of the
command line), and the summary of a run."""

from __future__ import annotations

import errno
import os
import re
import signal
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, List, Optional, cast

import typer
from rich.console import Console
from rich.markup import escape as escape_markup

from ..display import terminal_safe
from ..stages import seconds_text
from ..errors import GpudedupError, spoken_as
from ..interrupts import interrupted_outcome, note_index, note_written, set_phase, signal_word
from ..io.credentials import scrubbed

if TYPE_CHECKING:
    from ..core.shingling import UnicodeForm
    from ..io.storage import Location
    from ..pipeline.report import Report

def escape(text: str) -> str:
    """``text`` for rich to print as it is: its markup escaped, and each character that would
    steer the terminal shown as its escape ("\\x1b"): names and values from the data (file
    names, ids, group values, the output's path) never colour, link or move the terminal."""
    return escape_markup(terminal_safe(text))


# The help panels the options of a command are grouped in (typer's rich_help_panel): what is
# read, what decides which documents are near-duplicates, what is written, and how the work is
# run (memory, stages, a cluster); options outside them stay in the panel of --help.
INPUT_PANEL = "Input"
SIMILARITY_PANEL = "Shingles and LSH"
OUTPUT_PANEL = "Output"
SCALE_PANEL = "Scale"

MAX_FN_HELP = "Largest acceptable miss probability at the threshold, 1 - P(threshold), when b and r are chosen."
LOW_HELP = "A similarity below the threshold whose pairs should rarely become candidates (with --max-fp)."
MAX_FP_HELP = "Largest acceptable P(low): the chance that a pair of similarity --low becomes a candidate."
INCLUDE_HELP = ("Read only the files inside input directories that match this glob (repeatable; `*` also matches "
                "`/`), e.g. `*.jsonl` or `en/*`. A file given by name is always read.")
EXCLUDE_HELP = ("Leave out the files and folders inside input directories that match this glob (repeatable), e.g. "
                "`*.tmp`; they are listed in report.json.")
# The options of the commands that read input directories (dedup, index add).
Include = Annotated[Optional[List[str]], typer.Option(help=INCLUDE_HELP, metavar="PATTERN", show_default=False,
                                                      rich_help_panel=INPUT_PANEL)]
Exclude = Annotated[Optional[List[str]], typer.Option(help=EXCLUDE_HELP, metavar="PATTERN", show_default=False,
                                                      rich_help_panel=INPUT_PANEL)]
GroupField = Annotated[Optional[str], typer.Option(
    help="Also count kept and removed documents by the values of this column (e.g. source, lang).",
    show_default=False, rich_help_panel=INPUT_PANEL)]
# The options of the commands that write a run's results (dedup, index add).
WriteRemoved = Annotated[bool, typer.Option(
    "--write-removed", help="Also write the removed rows, with kept_id, cluster and jaccard, under removed/.",
    rich_help_panel=OUTPUT_PANEL)]

err = Console(stderr=True, highlight=False)
out = Console(highlight=False)


class Shingle(str, Enum):
    word = "word"
    char = "char"
    token = "token"


class UnicodeChoice(str, Enum):
    none = "none"
    nfc = "nfc"
    nfkc = "nfkc"


class Keep(str, Enum):
    first = "first"
    longest = "longest"


class OutputFormat(str, Enum):
    parquet = "parquet"
    jsonl = "jsonl"


class OnError(str, Enum):
    stop = "stop"
    skip = "skip"


class BackendChoice(str, Enum):
    auto = "auto"
    cpu = "cpu"
    gpu = "gpu"


def unicode_form(choice: str) -> Optional[UnicodeForm]:
    """--unicode's value as DedupParams takes it ("none": None)."""
    return None if choice == "none" else cast("UnicodeForm", choice)


def command_paths(inputs: list[str], output: str,
                  work_dir: Optional[str]) -> tuple[list[Location], Location, Optional[Location]]:
    """A command's paths as the API takes them: the inputs, the output directory and the work
    directory as paths or URLs (io/storage.py)."""
    from ..io.storage import location_of  # (pyarrow: not at start-up)

    return [location_of(given) for given in inputs], location_of(output), \
        None if work_dir is None else location_of(work_dir)


def local_path(given: str, what: str) -> Path:
    """A local folder option's value as a Path, by storage.local_folder's rules: an empty one
    and a URL are refused, naming ``what`` (typer's own Path type turns "" into "." and
    "s3://b/x" into "s3:/b/x" first)."""
    from ..io.storage import local_folder  # (pyarrow: not at start-up)

    return local_folder(given, what)


def print_summary(report: Report, output: Location) -> None:
    r, p, i = report["results"], report["parameters"], report["input"]
    err.print(
        f"\n[bold]{i['documents']:,}[/] documents in ({i['empty_documents']:,} empty), "
        f"[bold]{r['clusters']:,}[/] clusters of near-duplicates, "
        f"[bold]{r['removed_documents']:,}[/] removed, {r['kept_documents']:,} kept "
        f"in {seconds_text(report['total_seconds'])} s on {report['backend'].split(' (')[0]}.\n"
        f"Jaccard >= {p['threshold']} over {p['shingle']} {p['ngram']}-grams; "
        f"{p['bands']} bands x {p['rows']} rows; {r['candidate_pairs']:,} candidate pairs, "
        f"{r['verified_pairs']:,} verified.\nResults in {escape(str(output))}/ (open "
        f"{escape(str(output))}/report.html for the report)"
    )
    if i.get("skipped_records"):
        err.print(f"[bold yellow]{i['skipped_records']:,} records or files were skipped[/] "
                  f"(--on-error skip): see {escape(str(output))}/errors.jsonl")
    unread = not_read_line(i.get("skipped_file_reasons", []), output)
    if unread:
        err.print(unread, soft_wrap=True)
    for note in i.get("notes", []):
        err.print(f"note: {escape(note)}")
    for line in sources_lines(report):
        err.print(escape(line), soft_wrap=True)


def sources_lines(report: Report) -> list[str]:
    """The summary's lines on where duplicates come from: the files (or the groups, with
    --group-field) with most removed, each with its documents, removed, and removed as
    duplicates of the same file (group) and of another; none for one input without groups."""
    from ..display import source_rows  # (start-up: loaded once a run has a report)

    kind, rows = source_rows(report)
    if len(rows) < 2 and not report.get("groups"):
        return []
    lines = [f"Removed {kind} (most first; documents, removed, of the same / of another):"]
    lines += [f"  {name}: {documents} documents, {removed} removed ({within} / {across})"
              for name, (documents, _, removed, within, across) in rows]
    return lines


# How many of the entries not read the summary names.
UNREAD_NAMED = 5


def not_read_line(entries: list[dict], output: Location, listed_in: str = "report.json") -> Optional[str]:
    """The summary's line (rich markup) on the entries inside the input directories that were
    not read for a reason no note tells (report.json's input.skipped_file_reasons: a file of
    no input type, a hidden file or folder, what --include / --exclude leave out): their
    count, reasons and first few names; listed_in: the file of ``output`` that lists them all.
    None when there are none."""
    from ..io.inputs import UNNOTED  # (start-up: `--help` and completion load no job)

    unread = [entry for entry in entries if entry.get("reason") in UNNOTED]
    if not unread:
        return None
    folders = sum(bool(entry.get("folder")) for entry in unread)
    kind = ("folder" if folders == 1 else "folders") if folders == len(unread) else \
        ("file" if len(unread) == 1 else "files") + (" and folders" if folders else "")
    reasons = ", ".join(reason for reason in UNNOTED if any(entry["reason"] == reason for entry in unread))
    names = ", ".join(entry["path"] + ("/" if entry.get("folder") else "") for entry in unread[:UNREAD_NAMED])
    more = ", ..." if len(unread) > UNREAD_NAMED else ""
    return (f"note: [bold yellow]{len(unread):,} {kind} under the inputs {'was' if len(unread) == 1 else 'were'} "
            f"not read[/] ({reasons}): {escape(names)}{more}; all in {escape(str(output))}/{listed_in}")


# A message names a parameter as Python takes it (errors.py): ``name=`` alone, or with the value
# given, ``name=value`` (a repr: strings quoted). Not inside a word, a path or a quoted text.
KEYWORD = re.compile(r"(?<![\w.\-/'\"=])([a-z][a-z0-9_]*)=('[^'\n]*'|\"[^\"\n]*\"|[\w+\-][^\s,;)\]]*)?")
# A quoted value that the shell takes as one word as it is, shown without its quotes.
PLAIN_WORD = re.compile(r"[\w.,:/@%+\-]+")
# The keyword arguments of the Python API whose option on the command line has another name.
OPTION_OF_KEYWORD = {"verification": "verify_from", "max_false_negative": "max_fn"}


def in_option_words(message: str, context: Optional[typer.Context]) -> str:
    """``message`` as the command line says it: every keyword argument it names that is an option
    of the command of ``context`` as that option (``bands=`` as ``--bands``, ``bands=10`` as
    ``--bands 10``, ``overwrite=True`` of a flag as ``--overwrite``). Keyword arguments the
    command has no option for (``client=``) stay as Python names them."""
    if context is None:
        return message
    options: dict[str, tuple[str, bool]] = {}
    for parameter in context.command.params:
        names = [name for name in parameter.opts if name.startswith("--")]
        if parameter.param_type_name == "option" and parameter.name and names:
            options[parameter.name] = (names[0], bool(getattr(parameter, "is_flag", False)))

    def option_words(match: re.Match) -> str:
        name, value = match.group(1), match.group(2)
        found = options.get(OPTION_OF_KEYWORD.get(name, name))
        if found is None:
            return match.group(0)
        option, is_flag = found
        if value is None or (is_flag and value == "True"):
            return option
        if is_flag:  # (a flag has no value to give: False is its absence)
            return match.group(0)
        if value[0] in "'\"" and PLAIN_WORD.fullmatch(value[1:-1]):
            value = value[1:-1]
        return f"{option} {value}"

    return KEYWORD.sub(option_words, message)


def print_error(message: str) -> None:
    """A user error's one line on stderr (the command then exits with code 2)."""
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)


interrupt_told = [False]  # user_errors has printed the line of an interrupt (main's backstop must not)


def interrupt_behind(error: Optional[BaseException]) -> Optional[BaseException]:
    """``error``, or the KeyboardInterrupt (an interrupt: interrupts.Interrupted) during whose
    handling it was raised, where there is one in its chain of contexts."""
    seen = error
    while seen is not None and not isinstance(seen, KeyboardInterrupt):
        seen = seen.__context__
    return seen if seen is not None else error


def settle_pyarrow(pandas: bool) -> None:
    """Make pyarrow's first conversion now. pyarrow looks for pandas on its first conversion of
    any array, and swallows whatever is raised meanwhile, a KeyboardInterrupt included: so it
    is made before a signal turns into an exception. Where the command has no use for pandas
    (pandas False), pandas is out of reach during it: pyarrow then takes pandas for absent and
    does not import it (with its teardown, about 0.2 s of a fresh process) until a conversion
    that needs pandas, which imports it then. Meanwhile pyarrow takes a pandas object for a
    plain sequence: a command that hides pandas hands pyarrow none (pandas_wanted)."""
    import pyarrow as pa  # (start-up: --help and argument errors load no pyarrow)

    hidden = not pandas and "pandas" not in sys.modules
    if hidden:
        sys.meta_path.insert(0, _NoPandas)
    try:
        pa.array([True]).to_numpy(zero_copy_only=False)
    finally:
        if hidden:
            sys.meta_path.remove(_NoPandas)


def pandas_wanted(work_dir: Optional[str], scheduler: Optional[str], workers: Optional[int], backend: str) -> bool:
    """Whether a command's run may convert to or from pandas (user_errors' pandas): one on Dask,
    whose frames are pandas', or one that may read with cuDF (a GPU backend where cuDF is
    installed), which brings pandas with it."""
    # (start-up: --help and argument errors load neither the api nor pyarrow)
    from ..api import on_dask
    from ..io.cudf_reader import cudf_installed

    return on_dask(work_dir, None, scheduler, workers) or (backend != "cpu" and cudf_installed())


class _NoPandas:
    """A finder (sys.meta_path) for which pandas is not installed (settle_pyarrow)."""

    @staticmethod
    def find_spec(name: str, path=None, target=None):
        if name == "pandas":
            raise ModuleNotFoundError("No module named 'pandas'", name=name)
        return None


def current_folder_exists() -> bool:
    """Whether the process's current folder still exists (not removed after it was entered)."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return False
    return True


class user_errors:
    """Turn GpudedupError into one line on stderr, in the words of the options of the command of
    ``context`` (in_option_words), and exit code 2; SIGINT (Ctrl-C), SIGTERM and SIGHUP into one
    line and exit code 128 + the signal (130, 143, 129)."""

    def __init__(self, context: typer.Context, pandas: bool = True):
        """pandas: whether the command may convert to or from pandas (pandas_wanted); False
        for a run in this process over files (settle_pyarrow)."""
        self.context, self.pandas = context, pandas
        self.written: Optional[Location] = None  # a command sets it once its output is in place

    def done(self) -> None:
        """The command's last step: a signal from here on is ignored (the work is finished).
        Called inside the block, so a signal handled before it is still raised inside it,
        not from __exit__ (whose KeyboardInterrupt typer would turn into a silent exit 130)."""
        set_phase("done")

    def __enter__(self):
        settle_pyarrow(self.pandas)  # (while a signal still ends the process at once)
        note_written(None)
        note_index(None)
        # What the run writes in words (errors.jsonl's reasons) is said as the command says it.
        self.spoken = spoken_as(lambda message: in_option_words(message, self.context))
        self.spoken.__enter__()
        set_phase("running")
        return self

    def __exit__(self, kind, error, traceback):
        set_phase("done")
        self.spoken.__exit__(None, None, None)
        if isinstance(error, GpudedupError):
            # (a last guard: the message should name no credential)
            print_error(in_option_words(scrubbed(str(error)), self.context))
            raise typer.Exit(code=2)
        if isinstance(error, OSError) and error.errno == errno.ENAMETOOLONG:  # (any path given, any check)
            where = f"{error.filename}: " if error.filename else ""
            print_error(f"{where}a name in this path, or the whole path, is longer than the file system takes (most "
                        "take 255 bytes a name and 4,096 a path); choose a shorter one")
            raise typer.Exit(code=2)
        if isinstance(error, FileNotFoundError) and error.filename is None and not current_folder_exists():
            # (os.getcwd: every relative path, and every path shown, is taken from it)
            print_error("the current folder no longer exists (it was removed after the shell entered it): "
                        "cd into one that does")
            raise typer.Exit(code=2)
        # A signal's exception raised inside Python's own lock handling (a thread starting, a
        # condition's wait) can come out as another error, the interrupt as its context
        # ("RuntimeError: release unlocked lock"): the run was interrupted all the same.
        error = interrupt_behind(error)
        if isinstance(error, KeyboardInterrupt):
            signum = getattr(error, "signum", signal.SIGINT)
            what = interrupted_outcome(self.written or getattr(error, "output_written", None))
            err.print(f"[bold red]{signal_word(signum)}[/]: {escape(what)}", soft_wrap=True)
            interrupt_told[0] = True
            raise typer.Exit(code=128 + signum)
        return False


# The options that decide results, alike in every command that fixes them (dedup, index
# create; params for the banding targets): each declared once.
ThresholdOption = Annotated[float, typer.Option(
    help="Keep pairs whose exact Jaccard similarity is at least this, in (0, 1].", rich_help_panel=SIMILARITY_PANEL)]
ShingleOption = Annotated[Shingle, typer.Option(
    help="Word or character n-grams of the text, or n-grams of token ids (--token-field).",
    rich_help_panel=SIMILARITY_PANEL)]
NgramOption = Annotated[int, typer.Option(help="Units (words, characters or token ids) per shingle.",
                                          rich_help_panel=SIMILARITY_PANEL)]
UnicodeOption = Annotated[UnicodeChoice, typer.Option(help="Unicode normalisation form applied before lower-casing.",
                                                      rich_help_panel=SIMILARITY_PANEL)]
StripPunctuationOption = Annotated[bool, typer.Option(
    "--strip-punctuation", help="Remove punctuation (Unicode categories P) before white space is collapsed.",
    rich_help_panel=SIMILARITY_PANEL)]
StripSymbolsOption = Annotated[bool, typer.Option("--strip-symbols", help="Remove symbols (Unicode categories S) "
                                                  "likewise.", rich_help_panel=SIMILARITY_PANEL)]
NumPermOption = Annotated[int, typer.Option(help="MinHash permutation budget K; bands x rows of them are computed.",
                                            rich_help_panel=SIMILARITY_PANEL)]
BandsOption = Annotated[Optional[int], typer.Option(
    help="LSH bands b (with --rows). Default: chosen from the threshold and the targets (`gpudedup params`).",
    show_default=False, rich_help_panel=SIMILARITY_PANEL)]
RowsOption = Annotated[Optional[int], typer.Option(help="Rows r per band (with --bands).", show_default=False,
                                                   rich_help_panel=SIMILARITY_PANEL)]
SeedOption = Annotated[int, typer.Option(help="Seed of the MinHash permutations.", rich_help_panel=SIMILARITY_PANEL)]
BucketWindowOption = Annotated[int, typer.Option(
    help="Pair each document of an LSH bucket with at most this many that follow it.",
    rich_help_panel=SIMILARITY_PANEL)]
MaxFnOption = Annotated[float, typer.Option(help=MAX_FN_HELP, rich_help_panel=SIMILARITY_PANEL)]
LowOption = Annotated[Optional[float], typer.Option(help=LOW_HELP, show_default=False,
                                                    rich_help_panel=SIMILARITY_PANEL)]
MaxFpOption = Annotated[Optional[float], typer.Option(help=MAX_FP_HELP, show_default=False,
                                                      rich_help_panel=SIMILARITY_PANEL)]
