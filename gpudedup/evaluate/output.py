"""What ``gpudedup evaluate`` writes and prints: evaluation.json (everything), evaluation.csv (one
row per setting), a recall-by-similarity figure per recommended setting, and the terminal
table. Every setting is listed; the recommended setting of each ground truth (shingle spec and
threshold, scoring.recommendations) is marked and named."""

from __future__ import annotations

import csv
import io
import json
import os
import secrets
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from ..core.shingling import ShingleSpec
from ..results.svg_figures import recall_by_similarity_svg
from ..errors import OutputError
from ..interrupts import note_written
from ..io.commit import signals_held
from ..io.credentials import os_reason
from ..io.inputs import InputFiles
from ..io.outputdir import check_apart_from_inputs, check_apart_from_read, check_outside_an_index
from ..version import __version__
from ..core.lsh import similarity_text
from .grid import Setting, spec_label
from .run import Evaluation
from .scoring import SettingResult, criterion_field, recommendations
from .view import TABLE_COLUMNS, recommendation_line, table_cells

# The figure of the recommended setting when the grid has one ground truth; with several, one
# figure per ground truth (figure_name).
FIGURE = "recall_by_similarity.svg"

CSV_FIELDS = ["index", "recommended", "label", "shingle", "ngram", "unicode", "strip_punctuation", "strip_symbols",
              "threshold", "num_perm", "banding",
              "max_false_negative", "bands", "rows", "documents", "true_pairs", "candidate_pairs",
              "checked_pairs", "verified_pairs", "candidate_true_pairs", "verified_true_pairs",
              "candidate_precision", "candidate_recall", "candidate_f1", "verified_precision",
              "verified_recall", "verified_f1", "cluster_recall", "candidates_per_document",
              "seconds", "peak_rss_mb"]


def _results_of(results) -> list[SettingResult]:
    return list(results.results) if isinstance(results, Evaluation) else list(results)


def _criterion_of(results, criterion: Optional[str]) -> str:
    """The criterion given, else the Evaluation's own, else f1 (a plain list of results)."""
    if criterion is not None:
        return criterion
    return results.criterion if isinstance(results, Evaluation) else "f1"


def evaluation_dict(results, criterion: Optional[str] = None,
                    figures: Optional[Mapping[int, str]] = None) -> dict:
    """The JSON document of an Evaluation (or a plain list of SettingResults): ``recommended``
    holds one entry per ground truth (its shingle spec, threshold, the grid positions scored
    against it, the recommended one and its value), and each result says whether it is its
    truth's recommendation. figures: {grid position: file name} of the figures written beside
    (write_results)."""
    items = _results_of(results)
    criterion = _criterion_of(results, criterion)
    chosen = recommendations(items, criterion)
    data: dict[str, Any] = {"gpudedup_version": __version__}
    if isinstance(results, Evaluation):
        data.update(corpus=results.corpus, backend=results.backend, run=results.run,
                    ground_truth=results.ground_truth, notes=results.notes)
    data["criterion"] = {"name": criterion, "field": criterion_field(criterion)[0]}
    data["recommended"] = [
        {"shingle": spec_label(r.spec), "threshold": r.threshold, "settings": list(r.indices),
         "true_pairs": r.result.true_pairs, "index": r.index, "label": r.result.setting.label,
         "setting": r.result.setting.as_dict(), "value": r.value, "figure": (figures or {}).get(r.index)}
        for r in chosen]
    marked = {r.index for r in chosen}
    data["results"] = [dict(r.as_dict(), index=i, recommended=i in marked) for i, r in enumerate(items)]
    return data


def csv_text(results, criterion: Optional[str] = None) -> str:
    """One CSV row per setting: CSV_FIELDS, then seconds_<stage>, peak_rss_mb_<stage> and
    busy_seconds_<part> for every stage any run reported. Undefined values are empty."""
    items = _results_of(results)
    marked = {r.index for r in recommendations(items, _criterion_of(results, criterion))}
    stages = list(dict.fromkeys(k for r in items for k in r.stage_seconds))
    busy = list(dict.fromkeys(k for r in items for k in r.busy_seconds))
    columns = (CSV_FIELDS + [f"seconds_{s}" for s in stages] + [f"peak_rss_mb_{s}" for s in stages]
               + [f"busy_seconds_{p}" for p in busy])
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, columns, lineterminator="\n")
    writer.writeheader()
    for i, r in enumerate(items):
        s = r.setting
        row = {name: getattr(r, name) for name in CSV_FIELDS if hasattr(r, name)}
        row.update(index=i, recommended=i in marked, label=s.label, shingle=s.shingle, ngram=s.ngram,
                   unicode=s.unicode or "", strip_punctuation=s.strip_punctuation, strip_symbols=s.strip_symbols,
                   threshold=s.threshold, num_perm=s.num_perm, banding=s.banding_label,
                   max_false_negative=s.max_false_negative)
        row.update({f"seconds_{k}": v for k, v in r.stage_seconds.items()})
        row.update({f"peak_rss_mb_{k}": v for k, v in r.stage_peak_rss_mb.items()})
        row.update({f"busy_seconds_{k}": v for k, v in r.busy_seconds.items()})
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


def recall_figure(result: Optional[SettingResult]) -> Optional[str]:
    """SVG of recall against exact similarity for one setting (candidates, verified, and the
    S-curve's prediction), or None without a result."""

    if result is None or result.recall_by_similarity is None:
        return None
    bins = result.recall_by_similarity
    nan = float("nan")
    series = {"candidates (LSH)": [nan if v is None else v for v in bins.candidate_recall],
              "verified (exact)": [nan if v is None else v for v in bins.verified_recall]}
    setting = result.setting
    return recall_by_similarity_svg(
        bins.edges, series, pair_counts=bins.true_pairs, threshold=setting.threshold,
        bands=result.bands, rows=result.rows, title=f"Recall by similarity: {setting.label}")


def figure_name(spec: ShingleSpec, threshold: float, truths: int) -> str:
    """The file of the figure of the recommended setting of ground truth (``spec``,
    ``threshold``): FIGURE when the grid has one ground truth (``truths``), else
    recall_by_similarity_<shingle spec>_t<threshold>.svg."""
    if truths == 1:
        return FIGURE
    return f"recall_by_similarity_{spec_label(spec)}_t{similarity_text(threshold)}.svg"


def figure_names(settings: Sequence[Setting]) -> list[str]:
    """The files of the figures an evaluation of ``settings`` may draw, one per ground truth."""
    truths = list(dict.fromkeys((s.spec(), s.threshold) for s in settings))
    return [figure_name(spec, threshold, len(truths)) for spec, threshold in truths]


def check_results_folder(out_dir: Union[str, os.PathLike], inputs: Sequence = (),
                         settings: Sequence[Setting] = (), found: Optional[InputFiles] = None) -> Path:
    """``out_dir`` as a folder write_results may write into, or OutputError: it must not be a
    file, lie under one, lie inside a persistent index (whose next writer removes what it does
    not list there), or be, hold or lie inside one of the ``inputs`` or, where ``found`` (their
    scan) is given, a folder the scan walks, links followed (what is written there would be
    read as input by the next run), nor hold a file of the user's that the evaluation of
    ``settings`` would write (check_not_theirs)."""
    out = Path(out_dir)
    role = "the evaluation's folder"
    check_apart_from_inputs(out, inputs, role, "output=")
    if found is not None:
        check_apart_from_read(out, found.files, found.seen_dirs.values(), role, "output=")
    check_outside_an_index(out, role, "output=")
    for place in (out, *out.parents):
        if place.exists():
            if not place.is_dir():
                what = "exists and is not a directory" if place == out else f"lies under {place}, a file"
                raise OutputError(f"{out}: {what}; choose another output=")
            break
    check_not_theirs(out, [*TABLES, *figure_names(settings)])
    return out


# The files every evaluation writes (its figures besides, named in evaluation.json).
TABLES = ("evaluation.json", "evaluation.csv")


def check_not_theirs(out: Path, names: Sequence[str]) -> None:
    """OutputError where a file of ``names`` in ``out`` is not an earlier evaluation's, which an
    evaluation may replace: evaluation.json of ours (ours_evaluation), the evaluation.csv beside
    it, and the figures it names. Any other file of those names is the user's, never replaced."""
    earlier = ours_evaluation(out / "evaluation.json")
    replaced = set() if earlier is None else {*TABLES, *figures_of(earlier)}
    theirs = [name for name in names if name not in replaced and os.path.lexists(out / name)]
    if theirs:
        raise OutputError(f"{out}: holds {theirs[0]}, which is not an earlier evaluation's and which an evaluation "
                          "writes; move it, or choose another output=")


def write_results(results, out_dir: Union[str, os.PathLike], criterion: Optional[str] = None) -> tuple[Path, Path]:
    """Write ``evaluation.json`` (everything: corpus, ground truth, notes, every setting with
    its recall bins, the recommended setting of each ground truth), ``evaluation.csv`` (one row
    per setting) and the recall figure (SVG) of each recommended setting
    (figure_name) into ``out_dir`` (created if missing); the figures that an earlier
    evaluation.json there names and this one does not draw are removed (no other file).
    Atomic: every file is written to a temporary file in out_dir and renamed over the old one
    only when all are complete; on an error no file is touched and no temporary file is left.
    criterion: None for the Evaluation's own. Returns (json path, csv path)."""
    out = check_results_folder(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputError(f"{out}: cannot make the folder ({os_reason(error)})") from None
    criterion = _criterion_of(results, criterion)
    chosen = recommendations(_results_of(results), criterion)
    drawn = {r.index: (figure_name(r.spec, r.threshold, len(chosen)), recall_figure(r.result)) for r in chosen}
    figures = {index: name for index, (name, svg) in drawn.items() if svg is not None}
    contents = {
        "evaluation.json": (json.dumps(evaluation_dict(results, criterion, figures), indent=2,
                                       allow_nan=False) + "\n").encode(),
        "evaluation.csv": csv_text(results, criterion).encode(),
    }
    contents.update((name, svg.encode()) for name, svg in drawn.values() if svg is not None)
    check_not_theirs(out, list(contents))
    earlier = ours_evaluation(out / "evaluation.json")
    temporary: dict[str, str] = {}
    try:
        for name, data in contents.items():
            path = str(out / f".{name}.{secrets.token_hex(4)}.tmp")
            # (mode 0o666: the umask applies, as to any file the user makes; mkstemp's is 0o600)
            handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            temporary[name] = path
            with os.fdopen(handle, "wb") as file:
                file.write(data)
                file.flush()
                os.fsync(file.fileno())
        # Every file in place, and an earlier evaluation's figures that would stand beside
        # results they do not belong to gone, or (a signal held until after) none of them. In
        # this order, so that a process killed part way (SIGKILL, which no hold delays) leaves
        # no figure that the evaluation.json there does not name: the stale figures go first,
        # then evaluation.json (contents' first), which names the figures that follow it.
        with signals_held():
            for stale in (set() if earlier is None else figures_of(earlier)) - set(contents):
                (out / stale).unlink(missing_ok=True)
            for name, path in temporary.items():
                os.replace(path, out / name)
            note_written(out)  # (a signal held till now must say that the results are there)
    finally:
        for path in temporary.values():
            if os.path.exists(path):
                os.unlink(path)
    return out / "evaluation.json", out / "evaluation.csv"


def ours_evaluation(path: Path) -> Optional[dict]:
    """The evaluation.json at ``path`` where write_results wrote it (a JSON object with its
    gpudedup_version, recommended and results), else None (none there, or another file)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ours = isinstance(data, dict) and {"gpudedup_version", "recommended", "results"} <= data.keys()
    return data if ours and isinstance(data["recommended"], list) else None


def figures_of(evaluation: dict) -> set[str]:
    """The figures an evaluation.json of ours names (its recommended[].figure: plain file names
    beside it; PNG ones are an older gpudedup's, which an evaluation written over them replaces
    as its own)."""
    names = {entry.get("figure") for entry in evaluation["recommended"] if isinstance(entry, dict)}
    return {name for name in names if isinstance(name, str) and name == Path(name).name
            and name.startswith("recall_by_similarity") and name.endswith((".svg", ".png"))}


def format_table(results, criterion: Optional[str] = None) -> str:
    """A plain-text table, one line per setting, the recommended setting of each ground truth
    (shingle spec and threshold) marked with '*' and named on a line of its own at the end."""
    items = _results_of(results)
    criterion = _criterion_of(results, criterion)
    chosen = recommendations(items, criterion)
    marked = {r.index for r in chosen}
    rows = [["*" if i in marked else ""] + table_cells(i, r) for i, r in enumerate(items)]
    header = [""] + TABLE_COLUMNS
    widths = [max(len(x) for x in column) for column in zip(header, *rows)]
    left = {2, 5}
    lines = ["  ".join(x.ljust(w) if j in left else x.rjust(w) for j, (x, w) in enumerate(zip(line, widths)))
             for line in [header] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += [recommendation_line(r) for r in chosen] or ["no settings were evaluated"]
    return "\n".join(lines)

