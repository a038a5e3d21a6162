"""What the commands of the command line share: the consoles, the option choices, the
turning of errors and signals into one line and an exit code, and the summary of a run."""

from __future__ import annotations

import signal
from enum import Enum
from typing import TYPE_CHECKING, Annotated, List, Optional, cast

import typer
from rich.console import Console
from rich.markup import escape

from ..errors import GpudedupError
from ..interrupts import interrupted_outcome, note_written, set_phase, signal_word

if TYPE_CHECKING:
    from ..core.shingling import UnicodeForm
    from ..io.storage import Location
    from ..report import Report

MAX_FN_HELP = "Largest acceptable miss probability at the threshold, 1 - P(threshold), when b and r are chosen."
LOW_HELP = "A similarity below the threshold whose pairs should rarely become candidates (with --max-fp)."
MAX_FP_HELP = "Largest acceptable P(low): the chance that a pair of similarity --low becomes a candidate."
INCLUDE_HELP = ("Read only the files inside input directories that match this glob pattern (repeatable; * ? "
                "\\[seq], case-sensitive, * also matches /), matched against the path relative to the directory "
                "given and against the file name, e.g. '*.jsonl' or 'en/*'. A file given by name is always read.")
EXCLUDE_HELP = ("Leave out the files (and folders) inside input directories that match this glob pattern "
                "(repeatable; matched as --include), e.g. '*.tmp' or 'old'. What is left out is listed in "
                "report.json.")
# The options of the commands that read input directories (dedup, index add).
Include = Annotated[Optional[List[str]], typer.Option(help=INCLUDE_HELP, metavar="PATTERN", show_default=False)]
Exclude = Annotated[Optional[List[str]], typer.Option(help=EXCLUDE_HELP, metavar="PATTERN", show_default=False)]

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


def print_summary(report: Report, output: Location, seconds: float) -> None:
    r, p, i = report["results"], report["parameters"], report["input"]
    err.print(
        f"\n[bold]{i['documents']:,}[/] documents in ({i['empty_documents']:,} empty), "
        f"[bold]{r['clusters']:,}[/] clusters of near-duplicates, "
        f"[bold]{r['removed_documents']:,}[/] removed, {r['kept_documents']:,} kept "
        f"in {seconds:.1f} s on {report['backend'].split(' (')[0]}.\n"
        f"Jaccard >= {p['threshold']} over {p['shingle']} {p['ngram']}-grams; "
        f"{p['bands']} bands x {p['rows']} rows; {r['candidate_pairs']:,} candidate pairs, "
        f"{r['verified_pairs']:,} verified.\nResults in {output}/ (open {output}/report.html for the report)"
    )
    if i.get("skipped_records"):
        err.print(f"[bold yellow]{i['skipped_records']:,} records or files were skipped[/] "
                  f"(--on-error skip): see {output}/errors.jsonl")
    unread = not_read_line(i.get("skipped_file_reasons", []), output)
    if unread:
        err.print(unread, soft_wrap=True)
    for note in i.get("notes", []):
        err.print(f"note: {escape(note)}")


# How many of the entries not read the summary names.
UNREAD_NAMED = 5


def not_read_line(entries: list[dict], output: Location) -> Optional[str]:
    """The summary's line (rich markup) on the entries inside the input directories that were
    not read for a reason no note tells (report.json's input.skipped_file_reasons: a file of
    no input type, a hidden file or folder, what --include / --exclude leave out): their
    count, reasons and first few names. None when there are none."""
    from ..io.inputs import UNNOTED

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
            f"not read[/] ({reasons}): {escape(names)}{more}; all in {escape(str(output))}/report.json")


interrupt_told = [False]  # user_errors has printed the line of an interrupt (main's backstop must not)


class user_errors:
    """Turn GpudedupError into one line on stderr and exit code 2; SIGINT (Ctrl-C), SIGTERM and
    SIGHUP into one line and exit code 128 + the signal (130, 143, 129)."""

    def __init__(self):
        self.written: Optional[Location] = None  # a command sets it once its output is in place

    def done(self) -> None:
        """The command's last step: a signal from here on is ignored (the work is finished).
        Called inside the block, so a signal handled before it is still raised inside it,
        not from __exit__ (whose KeyboardInterrupt typer would turn into a silent exit 130)."""
        set_phase("done")

    def __enter__(self):
        # pyarrow imports pandas on its first conversion to numpy and swallows any exception
        # raised meanwhile, a KeyboardInterrupt included: do it while a signal still ends the
        # process at once.
        import pyarrow as pa

        pa.array([True]).to_numpy(zero_copy_only=False)
        note_written(None)
        set_phase("running")
        return self

    def __exit__(self, kind, error, traceback):
        set_phase("done")
        if isinstance(error, GpudedupError):
            from ..io.storage import scrubbed  # (a last guard: the message should name no credential)

            err.print(f"[bold red]error:[/] {escape(scrubbed(str(error)))}", soft_wrap=True)
            raise typer.Exit(code=2)
        if isinstance(error, KeyboardInterrupt):
            signum = getattr(error, "signum", signal.SIGINT)
            what = interrupted_outcome(self.written or getattr(error, "output_written", None))
            err.print(f"[bold red]{signal_word(signum)}[/]: {escape(what)}", soft_wrap=True)
            interrupt_told[0] = True
            raise typer.Exit(code=128 + signum)
        return False
