"""``gpudedup evaluate``: a grid of settings scored against the exact pairs of a sample
(gpudedup/evaluate/), registered on the command line's app by cli/__init__.py. Heavy modules
are imported inside the command, as in cli/__init__.py."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from ..params import DEFAULT_BUCKET_WINDOW, DEFAULT_NGRAM, DEFAULT_NUM_PERM, DEFAULT_SEED, DEFAULT_THRESHOLD
from .common import (INPUT_PANEL, OUTPUT_PANEL, SCALE_PANEL, SIMILARITY_PANEL, BackendChoice, err, escape,
                     in_option_words, local_path, not_read_line, user_errors)


def evaluate_command(
    context: typer.Context,
    inputs: Annotated[List[Path], typer.Argument(help="The sample: JSONL, Parquet, Arrow or .txt files, or "
                                                      "directories of them.", show_default=False)],
    *,  # (keyword-only: the required --output sits in its panel, after options with defaults)
    text_field: Annotated[str, typer.Option(help="The field holding the text.",
                                            rich_help_panel=INPUT_PANEL)] = "text",
    id_field: Annotated[Optional[str], typer.Option(help="The field holding unique ids.", show_default=False,
                                                    rich_help_panel=INPUT_PANEL)] = None,
    token_field: Annotated[str, typer.Option(help="The field of token ids that token shingles read.",
                                             rich_help_panel=INPUT_PANEL)] = "input_ids",
    limit: Annotated[Optional[int], typer.Option(help="Use the first N documents.", show_default=False,
                                                 rich_help_panel=INPUT_PANEL)] = None,
    sample: Annotated[Optional[int], typer.Option(help="Then N of them at random.", show_default=False,
                                                  rich_help_panel=INPUT_PANEL)] = None,
    sample_seed: Annotated[int, typer.Option(help="Seed of --sample.", rich_help_panel=INPUT_PANEL)] = 0,
    threshold: Annotated[str, typer.Option(help="Comma list of thresholds.",
                                           rich_help_panel=SIMILARITY_PANEL)] = str(DEFAULT_THRESHOLD),
    shingle: Annotated[str, typer.Option(help="Comma list of word, char, token.",
                                         rich_help_panel=SIMILARITY_PANEL)] = "word",
    ngram: Annotated[str, typer.Option(help="Comma list of n-gram sizes.",
                                       rich_help_panel=SIMILARITY_PANEL)] = str(DEFAULT_NGRAM),
    unicode: Annotated[str, typer.Option(help="Comma list of Unicode forms for text shingles: none, nfc, nfkc.",
                                         rich_help_panel=SIMILARITY_PANEL)] = "none",
    strip_punctuation: Annotated[str, typer.Option(help="Comma list of no, yes: remove punctuation (text "
                                                        "shingles).", rich_help_panel=SIMILARITY_PANEL)] = "no",
    strip_symbols: Annotated[str, typer.Option(help="Comma list of no, yes: remove symbols (text shingles).",
                                               rich_help_panel=SIMILARITY_PANEL)] = "no",
    num_perm: Annotated[str, typer.Option(help="Comma list of K.",
                                          rich_help_panel=SIMILARITY_PANEL)] = str(DEFAULT_NUM_PERM),
    bands: Annotated[Optional[str], typer.Option(
        help="Comma list of b (`auto`: chosen from the threshold; without --rows, r = K // b).", show_default=False,
        rich_help_panel=SIMILARITY_PANEL)] = None,
    rows: Annotated[Optional[str], typer.Option(help="Comma list of r (`auto` allowed; without --bands, b = K // r).",
                                                show_default=False,
                                                rich_help_panel=SIMILARITY_PANEL)] = None,
    max_fn: Annotated[Optional[str], typer.Option(
        help="Comma list of miss-probability targets for chosen b and r.", show_default=False,
        rich_help_panel=SIMILARITY_PANEL)] = None,
    seed: Annotated[int, typer.Option(help="Seed of the permutations.",
                                      rich_help_panel=SIMILARITY_PANEL)] = DEFAULT_SEED,
    bucket_window: Annotated[int, typer.Option(help="As in dedup.",
                                               rich_help_panel=SIMILARITY_PANEL)] = DEFAULT_BUCKET_WINDOW,
    output: Annotated[str, typer.Option("--output", "-o", help="Where evaluation.json and evaluation.csv go.",
                                        show_default=False, rich_help_panel=OUTPUT_PANEL)],
    criterion: Annotated[str, typer.Option(help="What the setting recommended per threshold is best at: f1, "
                                                "recall, precision, time, memory, candidate_recall, "
                                                "candidate_f1, cluster_recall.",
                                           rich_help_panel=OUTPUT_PANEL)] = "f1",
    bin_width: Annotated[float, typer.Option(help="Width of the similarity bins of recall by similarity.",
                                             rich_help_panel=OUTPUT_PANEL)] = 0.05,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.",
                                        rich_help_panel=OUTPUT_PANEL)] = False,
    backend: Annotated[BackendChoice, typer.Option(help="gpu, cpu or auto.",
                                                   rich_help_panel=SCALE_PANEL)] = BackendChoice.auto,
):
    """Score a grid of settings on a sample against its exact all-pairs Jaccard.

    Every combination of the comma lists runs the real job; candidates and verified pairs are
    compared with the exact pairs at the setting's threshold. Each threshold is scored against
    its own exact pairs, so it gets its own recommended setting (the best for --criterion).
    Prints a table with those marked, and writes evaluation.json, evaluation.csv and a
    recall-by-similarity figure per recommended setting into OUTPUT.

    Example: `gpudedup evaluate sample.jsonl -o eval/ --num-perm 64,128 --threshold 0.7,0.8`
    """
    # (start-up: `--help` and completion load no job)
    from .. import evaluate as evaluation
    from ..io.fields import check_fields_read
    from ..io.inputs import documents_read, scan_inputs
    from ..io.read import read_corpus

    with user_errors(context) as guard:
        settings, notes = evaluation.expand_grid(
            evaluation.parse_list(num_perm, name="num_perm"),
            evaluation.parse_list(bands, allow_auto=True, name="bands") if bands else None,
            evaluation.parse_list(rows, allow_auto=True, name="rows") if rows else None,
            evaluation.parse_list(shingle, str, name="shingle"), evaluation.parse_list(ngram, name="ngram"),
            evaluation.parse_list(threshold, float, name="threshold"),
            evaluation.parse_list(max_fn, float, name="max_fn") if max_fn else None,
            evaluation.parse_list(unicode, evaluation.unicode_form, name="unicode"),
            evaluation.parse_list(strip_punctuation, evaluation.yes_no, name="strip_punctuation"),
            evaluation.parse_list(strip_symbols, evaluation.yes_no, name="strip_symbols"),
        )
        def say(note: str) -> None:  # (evaluation.json keeps the notes too, in Python's words)
            err.print(f"[yellow]note:[/] {escape(in_option_words(note, context))}", soft_wrap=True)

        for note in notes:
            say(note)
        evaluation.criterion_field(criterion)  # a wrong criterion or bin width fails before the work
        evaluation.check_bin_width(bin_width)
        check_fields_read([s.shingle for s in settings], text_field, token_field)
        folder = local_path(output, "an evaluation's folder")
        found = scan_inputs(list(inputs))
        for note in found.notes:  # (paths passed over for a reason: a link loop, a pipe, ...)
            notes = notes + [note]
            say(note)
        evaluation.check_results_folder(folder, list(inputs), settings, found)  # (and a folder it cannot write in)
        # Only token shingles: the token ids are the content read (no text needed).
        content = token_field if all(s.shingle == "token" for s in settings) else text_field
        read = read_corpus(list(inputs), content, id_field, found=found)
        # (no document at all: nothing to score, as a dedup of it refuses to run)
        documents_read(found, read.num_rows, [source.path for source in read.files], read.skipped_records)
        corpus = evaluation.select_documents(read, limit, sample, sample_seed)
        chosen = evaluation.first_rows(read.num_rows, limit)
        if sample is not None and sample >= chosen:  # (a sample of all there is: no sample)
            notes = notes + [f"sample={sample} is no fewer than the {chosen:,} documents chosen: every one of them "
                             "is evaluated"]
            say(notes[-1])

        def progress(done: int, total: int, result) -> None:
            if not quiet:
                err.print(f"[{done}/{total}] {escape(result.setting.label)}")

        results = evaluation.evaluate(corpus, settings, backend=backend.value, seed=seed,
                                      bucket_window=bucket_window, bin_width=bin_width, notes=notes,
                                      token_field=token_field, criterion=criterion,
                                      on_result=progress, skipped_files=found.skipped)
        typer.echo(evaluation.format_table(results, criterion))  # plain: a wide table must not wrap
        json_path, csv_path = evaluation.write_results(results, folder, criterion)
        guard.written = folder
        if not quiet:
            err.print(f"Results in {escape(str(json_path))} and {escape(str(csv_path))}")
            unread = not_read_line(results.corpus["skipped_file_reasons"], folder, json_path.name)
            if unread:
                err.print(unread, soft_wrap=True)
        guard.done()
