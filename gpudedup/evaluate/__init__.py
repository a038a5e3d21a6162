"""Scoring MinHash LSH settings against exact Jaccard: the grid search of ``gpudedup evaluate``.

For every setting of a grid (permutation budget K, bands x rows or the rule that chooses them,
shingle kind and size, threshold) the real job (``pipeline.memory.dedup_corpus``) runs on a sample
corpus, and its LSH candidate pairs and verified pairs are compared with the exact set of pairs
whose Jaccard similarity reaches the threshold (the ground truth). Each shingle spec and
threshold has its own ground truth, so settings are compared, and one recommended, per truth.

    grid.py     Setting, expand_grid: the settings of the CLI's comma lists
    truth.py    select_documents (the sample), TruthCache: the exact pairs, computed once per
                shingle spec at the grid's lowest threshold (``allpairs``, no estimate)
    scoring.py  score_outcome: precision, recall, F1, cluster recall and recall by similarity
                of one run; best_result and recommendations: the choice per ground truth
    run.py      evaluate: the grid's runs; Evaluation: their scores and recommendations
    output.py   evaluation.json, evaluation.csv, the figures (write_results), format_table
    view.py     the repr and the notebook HTML of an Evaluation

Typical use (what the CLI does)::

    corpus = select_documents(read_corpus(paths, "text", None), limit=20_000)
    settings, notes = expand_grid(num_perm=[64, 128], bands=[None, 8, 16], rows=[4, 8],
                                  shingle=["word"], ngram=[3, 5], threshold=[0.7, 0.8])
    evaluation = evaluate(corpus, settings, backend="cpu", notes=notes, criterion="f1")
    evaluation.recommended()        # one Recommendation per (shingle spec, threshold)
    print(format_table(evaluation))
    write_results(evaluation, "eval/")   # evaluation.json, evaluation.csv, figures
"""

from .grid import Setting, expand_grid, parse_list, spec_label, unicode_form, yes_no
from .output import (
    CSV_FIELDS,
    FIGURE,
    check_results_folder,
    csv_text,
    evaluation_dict,
    figure_name,
    format_table,
    recall_figure,
    write_results,
)
from .run import WARMUP_DOCUMENTS, Evaluation, evaluate
from .scoring import (
    CRITERIA,
    DEFAULT_BIN_WIDTH,
    TIE_TOLERANCE,
    RecallBins,
    Recommendation,
    SettingResult,
    best_result,
    bin_edges,
    check_bin_width,
    criterion_field,
    recommendations,
    score_outcome,
)
from .truth import (
    TRUTH_BATCH_BYTES,
    GroundTruth,
    TruthCache,
    content_corpus,
    corpus_shingle_sets,
    exact_ground_truth,
    first_rows,
    found_in,
    pair_codes,
    select_documents,
)

__all__ = [
    "CRITERIA", "CSV_FIELDS", "DEFAULT_BIN_WIDTH", "FIGURE", "TIE_TOLERANCE", "TRUTH_BATCH_BYTES",
    "WARMUP_DOCUMENTS", "Evaluation", "GroundTruth", "RecallBins", "Recommendation", "Setting", "SettingResult",
    "TruthCache", "best_result", "bin_edges", "check_bin_width", "content_corpus", "corpus_shingle_sets",
    "criterion_field",
    "csv_text", "evaluate", "evaluation_dict", "exact_ground_truth", "expand_grid", "figure_name", "format_table",
    "first_rows", "found_in", "pair_codes", "parse_list", "recall_figure", "recommendations", "score_outcome",
    "select_documents", "spec_label", "unicode_form", "write_results", "yes_no", "check_results_folder",
]
