"""gpudedup.evaluate: exact ground truth against brute force, recall figures against an
independent count, grid expansion, the choice of the best setting and of the recommended one
per ground truth, the output files, and the display in a terminal and a notebook.

The truth expected is tests/oracles.py's: the canonical shingles as Python strings (never
gpudedup's normalisation or hashes), every pair's exact Jaccard under the exact threshold rule,
and the banding rule by exhaustive search."""

import csv
import json
import math
import os
import re
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from gpudedup.io.python_inputs import strings_corpus
from gpudedup.backends import get_backend
from gpudedup import Index
from gpudedup.errors import OutputError, ParameterError
from gpudedup.evaluate import (
    CSV_FIELDS,
    FIGURE,
    Setting,
    SettingResult,
    TruthCache,
    best_result,
    bin_edges,
    csv_text,
    evaluate,
    evaluation_dict,
    expand_grid,
    format_table,
    found_in,
    pair_codes,
    parse_list,
    select_documents,
    write_results,
)
from gpudedup.io.read import read_corpus
from gpudedup.core.shingling import ShingleSpec
from gpudedup.pipeline.memory import dedup_corpus
from conservation import read_file_records
from oracles import is_similar, oracle_banding, s_curve, shingle_set, similar_pairs, similar_pairs_matrix

NGRAM = 5
LOWEST = 0.5  # the lowest threshold the tests ask the truth for

# --- the independent oracle: Python strings and sets ------------------------------------------


def at_threshold(truth: dict, sets: list, threshold: float) -> dict:
    """The pairs of a truth computed at a lower threshold that are similar at this one, by the
    exact rule (the float Jaccard alone cannot say whether 4/5 meets 0.8)."""
    return {(a, b): j for (a, b), j in truth.items() if is_similar(sets[a], sets[b], threshold)}


# --- corpora ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_path():
    with resources.as_file(resources.files("gpudedup").joinpath("data/bible_sample.jsonl.gz")) as path:
        yield Path(path)


@pytest.fixture(scope="module")
def sample_corpus(sample_path):
    return read_corpus([sample_path], "text", "id")


@pytest.fixture(scope="module")
def subset_texts(sample_corpus):
    """About 300 documents of the shipped sample: every translation of its first 27 chapters
    (so there are near-duplicates at all similarities), plus edge cases: an empty text, white
    space only, texts shorter than one shingle (equal after normalisation), a repeated text."""
    table = sample_corpus.table.to_pydict()
    chapters = list(dict.fromkeys(zip(table["book"], table["chapter"])))[:27]
    wanted = set(chapters)
    texts = [t for t, b, c in zip(table["text"], table["book"], table["chapter"]) if (b, c) in wanted]
    return texts + ["", " \n\t ", "Short text", "  SHORT\u00a0text ", "short", texts[0]]


@pytest.fixture(scope="module")
def subset_corpus(subset_texts):
    return strings_corpus(subset_texts)


@pytest.fixture(scope="module")
def subset_sets(subset_texts):
    """{kind: the oracle's shingle set of every subset text}."""
    return {kind: [shingle_set(t, kind, NGRAM) for t in subset_texts] for kind in ("word", "char")}


@pytest.fixture(scope="module")
def subset_truth(subset_sets):
    """{kind: {(a, b): Jaccard}} at the lowest threshold, every pair of Python sets compared."""
    return {kind: similar_pairs(sets, LOWEST) for kind, sets in subset_sets.items()}


# --- ground truth -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["word", "char"])
def test_ground_truth_equals_python_brute_force(subset_corpus, subset_sets, subset_truth, kind):
    cache = TruthCache(subset_corpus)
    cache.prepare([Setting(shingle=kind, ngram=NGRAM, threshold=t) for t in (0.9, LOWEST, 0.8)])
    truth = cache.get(ShingleSpec(kind, NGRAM), LOWEST)
    assert truth.threshold == LOWEST  # computed once, at the lowest threshold asked for
    assert len(subset_truth[kind]) > 100
    for threshold in (0.5, 0.7, 0.8, 0.9, 1.0):
        doc_a, doc_b, jaccard, codes = truth.at(threshold)
        expected = at_threshold(subset_truth[kind], subset_sets[kind], threshold)
        found = dict(zip(zip(doc_a.tolist(), doc_b.tolist()), jaccard.tolist()))
        assert found == expected, threshold  # the same pairs, the same Jaccard bit for bit
        assert np.array_equal(codes, np.sort(codes))
    assert cache.get(ShingleSpec(kind, 5), 0.8) is truth  # answered from the cache


@pytest.mark.parametrize("kind", ["word", "char"])
def test_ground_truth_on_the_whole_sample_equals_brute_force(sample_path, sample_corpus, kind):
    cache = TruthCache(sample_corpus)
    cache.prepare([Setting(shingle=kind, threshold=LOWEST), Setting(shingle=kind, threshold=0.8)])
    truth = cache.get(ShingleSpec(kind, NGRAM), 0.8)
    assert truth.threshold == LOWEST
    # The oracle reads the sample itself (json and gzip), in file order: the corpus's rows.
    records = read_file_records(sample_path, str(sample_path), "text", "id")
    assert [r.id for r in records] == sample_corpus.ids.to_pylist()
    sets = [shingle_set(r.text, kind, NGRAM) for r in records]
    for threshold in (LOWEST, 0.8):
        # The oracle joins at each threshold, so the answer at 0.8, which the cache filters
        # from the pairs it computed at the lowest threshold, is checked against a join at 0.8.
        expected = similar_pairs_matrix(sets, threshold)
        doc_a, doc_b, jaccard, codes = truth.at(threshold)
        assert len(expected) > 100
        assert list(zip(doc_a.tolist(), doc_b.tolist(), jaccard.tolist())) == [
            (a, b, j) for (a, b), j in expected.items()]
        assert codes.tolist() == sorted(a * len(records) + b for a, b in expected)


def test_truth_cannot_answer_a_lower_threshold_than_computed(subset_corpus):
    cache = TruthCache(subset_corpus)
    truth = cache.get(ShingleSpec("word", 5), 0.8)
    with pytest.raises(ValueError):
        truth.at(0.7)
    lower = cache.get(ShingleSpec("word", 5), 0.7)  # recomputed lower
    assert lower.threshold == 0.7 and lower.codes.size >= truth.codes.size


# --- recall figures against an independent count ----------------------------------------------


def spelled_out(pairs, copies) -> set:
    """The pairs with identical copies spelled out, with Python sets: a pair stands for the
    pairs of the copies of its documents, and the copies of a text are pairs of each other."""
    group = {}
    for first, member in zip(copies.first.tolist(), copies.member.tolist()):
        group.setdefault(first, {first}).add(member)
        group[member] = group[first]
    result = set()
    for a, b in pairs:
        result |= {(min(x, y), max(x, y)) for x in group.get(a, {a}) for y in group.get(b, {b}) if x != y}
    for members in group.values():
        result |= {(x, y) for x in members for y in members if x < y}
    return result


def test_recall_figures_agree_with_an_independent_count(subset_texts, subset_corpus, subset_sets, subset_truth):
    settings = [Setting(128, None, None, "word", 5, 0.8), Setting(64, 8, 8, "word", 5, 0.5),
                Setting(64, 4, 16, "word", 5, 0.7), Setting(32, None, None, "char", 5, 0.8),
                Setting(32, None, None, "word", 5, 0.7, max_false_negative=0.2)]
    evaluation = evaluate(subset_corpus, settings, backend="cpu", warmup=False)
    backend = get_backend("cpu")
    recalls = []
    for setting, result in zip(settings, evaluation.results):
        assert result.setting == setting
        assert setting.threshold >= LOWEST
        truth = at_threshold(subset_truth[setting.shingle], subset_sets[setting.shingle], setting.threshold)
        # The same run again (runs are deterministic), counted by hand with Python sets.
        outcome = dedup_corpus(subset_corpus, setting.params(), backend, keep_candidates=True)
        candidates = spelled_out(zip(outcome.candidate_a.tolist(), outcome.candidate_b.tolist()), outcome.copies.held)
        verified = spelled_out(zip(outcome.pair_a.tolist(), outcome.pair_b.tolist()), outcome.copies.held)
        cluster_of = dict(zip(outcome.clusters.docs.tolist(), outcome.clusters.cluster.tolist()))
        candidate_hits = len(candidates & truth.keys())
        verified_hits = len(verified & truth.keys())
        clustered = sum(1 for a, b in truth if a in cluster_of and cluster_of.get(a) == cluster_of.get(b))

        assert result.true_pairs == len(truth) > 0
        assert result.candidate_pairs == len(candidates)
        assert result.verified_pairs == len(verified)
        assert result.candidate_true_pairs == candidate_hits
        assert result.verified_true_pairs == verified_hits
        assert result.candidate_recall == pytest.approx(candidate_hits / len(truth))
        assert result.candidate_precision == pytest.approx(candidate_hits / len(candidates))
        assert result.verified_recall == pytest.approx(verified_hits / len(truth))
        assert result.verified_precision == 1.0 == verified_hits / len(verified)
        recall = verified_hits / len(truth)
        assert result.verified_f1 == pytest.approx(2 * recall / (1 + recall))
        assert result.cluster_recall == pytest.approx(clustered / len(truth))
        assert result.candidates_per_document == pytest.approx(len(candidates) / len(subset_texts))

        # Recall by similarity, binned by hand.
        bins = result.recall_by_similarity
        edges = bins.edges
        assert edges[0] == setting.threshold and edges[-1] == 1.0
        counted = [[0, 0, 0] for _ in range(len(edges) - 1)]
        for pair, jaccard in truth.items():
            index = next(i for i in range(len(edges) - 1)
                         if edges[i] <= jaccard < edges[i + 1] or (i == len(edges) - 2 and jaccard == 1.0))
            counted[index][0] += 1
            counted[index][1] += pair in candidates
            counted[index][2] += pair in verified
        assert bins.true_pairs == [c[0] for c in counted]
        assert bins.candidate_found == [c[1] for c in counted]
        assert bins.verified_found == [c[2] for c in counted]
        assert bins.candidate_recall == [c[1] / c[0] if c[0] else None for c in counted]
        if setting.max_false_negative is not None:
            assert "0.2" in result.banding_rule or "20%" in result.banding_rule

        # The banding is the rule's (exhaustive search) where it was left to the rule, and the
        # true pairs that became candidates are as many as the S-curve predicts for their
        # Jaccard values (5 standard deviations, and 2 pairs for the dependence between pairs
        # that share documents and permutations).
        if setting.bands is None:
            max_fn = 0.01 if setting.max_false_negative is None else setting.max_false_negative
            assert (result.bands, result.rows) == oracle_banding(setting.threshold, setting.num_perm, max_fn)
        chances = [s_curve(j, result.bands, result.rows) for j in truth.values()]
        expected_hits = sum(chances)
        spread = math.sqrt(sum(p * (1 - p) for p in chances))
        assert abs(candidate_hits - expected_hits) <= 5 * spread + 2, (setting, candidate_hits, expected_hits)
        recalls.append((result.candidate_recall, expected_hits / len(truth), len(truth)))
    # The settings were chosen to span the S-curve: the S-curve expects the 4 x 16 banding to
    # miss many pairs and the default one almost none (fewer than 0.5 of its true pairs), which
    # the run, deterministic, bears out.
    lowest, expected_lowest, _ = min(recalls)
    assert lowest < 0.8 and expected_lowest < 0.8
    highest, expected_highest, true_pairs = max(recalls)
    assert highest == 1.0 and (1 - expected_highest) * true_pairs < 0.5


# --- grid expansion ---------------------------------------------------------------------------


def test_grid_is_the_product_of_the_lists_with_invalid_bandings_skipped():
    settings, notes = expand_grid(num_perm=[64, 128], bands=[8, 16], rows=[4, 8],
                                  shingle=["word", "char"], ngram=[3, 5], threshold=[0.7, 0.9])
    # Per (shingle, ngram, threshold): K=64 allows 8x4, 16x4, 8x8; K=128 all four.
    assert len(settings) == 2 * 2 * 2 * (3 + 4)
    assert len(notes) == 2 * 2 * 2 * 1 and all("16 * 8 = 128 > num_perm" in n for n in notes)
    assert all(s.bands * s.rows <= s.num_perm for s in settings)
    assert settings[0] == Setting(64, 8, 4, "word", 3, 0.7)
    kinds = [s.shingle for s in settings]
    assert kinds == sorted(kinds, key=["word", "char"].index)  # shingle outermost


def test_grid_bandings_derived_automatic_and_deduplicated():
    by_bands, notes = expand_grid(num_perm=[64, 128], bands=[16, 200])
    assert [(s.num_perm, s.bands, s.rows) for s in by_bands] == [(64, 16, 4), (128, 16, 8)]
    assert notes == ["skipped shingle=word ngram=5 threshold=0.8 num_perm=64: rows = num_perm // bands = 64 // 200 "
                     "is 0", "skipped shingle=word ngram=5 threshold=0.8 num_perm=128: rows = num_perm // bands = "
                     "128 // 200 is 0"]
    by_rows, _ = expand_grid(num_perm=[128], rows=[4, 8])
    assert [(s.bands, s.rows) for s in by_rows] == [(32, 4), (16, 8)]
    auto, notes = expand_grid(num_perm=[128], threshold=[0.8])
    assert auto == [Setting(128, None, None, "word", 5, 0.8)] and notes == []
    assert auto[0].params().banding()[:2] == oracle_banding(0.8, 128, 0.01)
    mixed, _ = expand_grid(num_perm=[128], bands=[None, 8], rows=[4, 8])
    assert [(s.bands, s.rows) for s in mixed] == [(None, None), (8, 4), (8, 8)]
    # With K = 8 at threshold 0.3 the best banding, 8 x 1, misses 0.7**8 = 5.8% of pairs.
    targets, notes = expand_grid(num_perm=[128, 8], threshold=[0.3], max_false_negative=[0.01, 0.1])
    feasible = [(k, fn) for k in (128, 8) for fn in (0.01, 0.1) if oracle_banding(0.3, k, fn) is not None]
    assert feasible == [(128, 0.01), (128, 0.1), (8, 0.1)]  # the case the comment above describes
    assert [(s.num_perm, s.max_false_negative) for s in targets] == feasible
    assert len(notes) == 1 and "num_perm=8" in notes[0]
    loose = targets[1].params()
    assert loose.max_fn == 0.1 and loose.banding().bands * loose.banding().rows <= 128
    assert expand_grid(bands=[8, 8], rows=[4])[0] == [Setting(128, 8, 4)]
    # The pipeline's own target (None) beside the same target given is one setting.
    assert [s.max_false_negative for s in expand_grid(max_false_negative=[None, 0.01, 0.05])[0]] == [None, 0.05]
    assert [s.max_false_negative for s in expand_grid(max_false_negative=[0.01, None])[0]] == [0.01]


@pytest.mark.parametrize("grid", [
    {"threshold": [1.5]}, {"shingle": ["byte"]}, {"ngram": [0]}, {"num_perm": [0]},
    {"bands": [0]}, {"rows": [-1]}, {"max_false_negative": [1.0]},
    {"bands": [None], "rows": [4]}, {"bands": [8, 16], "rows": [None]},  # (numbers paired with auto alone)
])
def test_grid_rejects_invalid_values(grid):
    with pytest.raises(ParameterError):
        expand_grid(**grid)


@pytest.mark.parametrize("grid, words", [
    ({"threshold": []}, "threshold= is an empty list: give it a value or more, or leave it out"),
    ({"bands": []}, "bands= is an empty list"), ({"max_false_negative": []}, "max_false_negative= is an empty list"),
    ({"threshold": 0.8}, "threshold= takes a list of values; got 0.8: pass [0.8] for one"),
    ({"shingle": "char"}, "shingle= takes a list of values; got 'char': pass ['char'] for one"),
])
def test_grid_lists_that_are_empty_or_no_lists_are_refused_by_name(grid, words):
    """An empty list would leave the grid without its value (or, for bands=, take the chosen
    banding unsaid); a string or a number where a list is asked would be read letter by letter
    or fail in Python's words."""
    with pytest.raises(ParameterError) as refused:
        expand_grid(**grid)
    assert str(refused.value).startswith(words), str(refused.value)


def test_lists_that_no_setting_of_the_grid_reads_are_refused():
    """Targets where every banding is given, and text normalisations where every setting cuts
    token ids, would be dropped: refused, naming them. Beside a chosen banding (auto) or a
    text shingle, they are read."""
    with pytest.raises(ParameterError, match=r"^max_false_negative= is the target that bands and rows are chosen"):
        expand_grid(bands=[20], rows=[5], max_false_negative=[0.1, 0.2])
    assert len(expand_grid(bands=[20, None], rows=[5, None], max_false_negative=[0.1, 0.2])[0]) == 3
    with pytest.raises(ParameterError, match=r"^unicode= normalises text, and every setting of the grid cuts token"):
        expand_grid(shingle=["token"], unicode=["nfkc"])
    with pytest.raises(ParameterError, match=r"^strip_punctuation= normalises text"):
        expand_grid(shingle=["token"], strip_punctuation=[False, True])
    mixed, _ = expand_grid(shingle=["token", "word"], unicode=["nfkc"])
    assert [(s.shingle, s.unicode) for s in mixed] == [("token", None), ("word", "nfkc")]


def test_a_grid_none_of_whose_settings_can_run_is_refused_naming_why():
    with pytest.raises(ParameterError, match=r"^no setting of the grid can run: skipped word5 t=0.01 K=128 .*"
                                             r"num_perm=459 is the smallest"):
        expand_grid(num_perm=[128], threshold=[0.01])


def test_the_evaluation_folder_is_checked_before_the_run(tmp_path, monkeypatch):
    """evaluate -o: not an input folder or inside one (its evaluation.json would be read as
    input next time), not a file or under one; each one line, exit 2, nothing written. Notes on
    settings skipped are printed, in the command line's words."""
    from cli_support import assert_user_error, happy_records, invoke, write_jsonl

    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "corpus" / "a.jsonl", happy_records())
    before = sorted(p.name for p in (tmp_path / "corpus").iterdir())
    for out, words in [("corpus", "the evaluation's folder must not be, hold or lie inside the input corpus"),
                       ("corpus/eval", "must not be, hold or lie inside the input corpus"),
                       ("corpus/a.jsonl", "must not be, hold or lie inside the input"),
                       ("corpus/a.jsonl/sub", "must not be, hold or lie inside the input")]:
        assert_user_error(invoke("evaluate", "corpus", "-o", out, "-q"), words, out=tmp_path / "nothing")
    assert sorted(p.name for p in (tmp_path / "corpus").iterdir()) == before
    (tmp_path / "file").write_text("x")
    for out, words in [("file", "file: exists and is not a directory"), ("file/sub", "lies under file, a file")]:
        assert_user_error(invoke("evaluate", "corpus", "-o", out, "-q"), words, out=tmp_path / "nothing")
    # A folder the scan reads through a link, as dedup refuses it; a folder inside an index.
    (tmp_path / "outer").mkdir()
    (tmp_path / "outer" / "link").symlink_to(tmp_path / "corpus")
    assert_user_error(invoke("evaluate", "outer", "-o", "corpus/eval", "-q"),
                      "must not be, hold or lie inside a folder the inputs are read from: outer/link leads to",
                      out=tmp_path / "corpus" / "eval")
    Index.create(tmp_path / "idx")
    assert_user_error(invoke("evaluate", "corpus", "-o", "idx/eval", "-q"), "must not lie inside the index",
                      out=tmp_path / "idx" / "eval")
    # A field named that no setting of the grid reads.
    for options, words in [(["--token-field", "ids"], "--token-field ids names token ids, but word shingles"),
                           (["--shingle", "token", "--text-field", "body"], "--text-field body names a text, but")]:
        assert_user_error(invoke("evaluate", "corpus", "-o", "fields", "-q", *options), words, out=tmp_path / "fields")
    done = invoke("evaluate", "corpus", "-o", "eval", "--threshold", "0.01,0.8", "-q")
    assert done.exit_code == 0, done.output
    assert "note: skipped word5 t=0.01 K=128 b x r=auto: no bands x rows within --num-perm 128" in done.output
    assert (tmp_path / "eval" / "evaluation.json").is_file()
    # A sample of no fewer documents than chosen samples nothing, and says so.
    whole = invoke("evaluate", "corpus", "-o", "eval2", "--limit", "5", "--sample", "10", "-q")
    assert whole.exit_code == 0, whole.output
    assert "note: --sample 10 is no fewer than the 5 documents chosen: every one of them is evaluated" in whole.output
    assert "sample=10 is no fewer" in (tmp_path / "eval2" / "evaluation.json").read_text()  # (in Python's words)
    # A sample of fewer draws them, without the note; a seed numpy cannot take is named.
    drawn = invoke("evaluate", "corpus", "-o", "eval3", "--limit", "5", "--sample", "3", "-q")
    assert drawn.exit_code == 0 and "no fewer" not in drawn.output, drawn.output
    assert "no fewer" not in (tmp_path / "eval3" / "evaluation.json").read_text()
    assert_user_error(invoke("evaluate", "corpus", "-o", "eval4", "--sample", "3", "--sample-seed", "-1", "-q"),
                      "--sample-seed must be an integer >= 0; got -1", out=tmp_path / "eval4")


def test_an_evaluation_says_what_under_its_inputs_it_did_not_read(tmp_path, monkeypatch):
    """Files of no input type, a hidden folder and a link that would loop, inside the sample's
    folder: said as a dedup of the folder says them (a note for the link, a line naming the
    rest), and listed in evaluation.json's corpus as report.json lists them."""
    from cli_support import happy_records, invoke, write_jsonl

    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "corpus" / "a.jsonl", happy_records())
    (tmp_path / "corpus" / "README.md").write_text("not a sample")
    (tmp_path / "corpus" / ".cache").mkdir()
    (tmp_path / "corpus" / "loop").symlink_to(tmp_path / "corpus")
    done = invoke("evaluate", "corpus", "-o", "eval")
    assert done.exit_code == 0, done.output
    output = " ".join(done.output.split())
    assert ("note: 2 files and folders under the inputs were not read (unsupported type, hidden): corpus/README.md, "
            "corpus/.cache/; all in eval/evaluation.json") in output
    assert "note: corpus/loop: skipped: symbolic link to corpus" in output
    listed = json.loads((tmp_path / "eval" / "evaluation.json").read_text())
    dedup = invoke("dedup", "corpus", "-o", "out", "-q")
    assert dedup.exit_code == 0, dedup.output
    report = json.loads((tmp_path / "out" / "report.json").read_text())["input"]
    for key in ("skipped_files", "skipped_file_reasons"):
        assert listed["corpus"][key] == report[key]
    assert sorted(entry["path"] for entry in listed["corpus"]["skipped_file_reasons"]) == [
        "corpus/.cache", "corpus/README.md", "corpus/loop"]
    assert listed["notes"] == report["notes"]


def test_parse_list():
    assert parse_list("64, 128") == [64, 128]
    assert parse_list("8,auto,16", allow_auto=True) == [8, None, 16]
    assert parse_list("0.7,0.8", float) == [0.7, 0.8]
    with pytest.raises(ParameterError):
        parse_list("8,auto")
    with pytest.raises(ParameterError):
        parse_list(" , ")


@pytest.mark.parametrize("options, words", [
    (["--ngram", "5,x", "--num-perm", "64"], "error: cannot read 'x' in --ngram 5,x: expected an integer"),
    (["--strip-punctuation", "maybe"],
     "error: cannot read 'maybe' in --strip-punctuation maybe: expected yes or no (true/false, 1/0)"),
    (["--unicode", "nfc,nfd"], "error: cannot read 'nfd' in --unicode nfc,nfd: expected nfc, nfkc or none"),
    (["--threshold", ","], "error: --threshold is an empty list (',')"),
], ids=["ngram", "yes-no", "unicode", "empty"])
def test_a_list_item_that_cannot_be_read_is_named_with_its_option(tmp_path, options, words):
    from cli_support import assert_user_error, happy_records, invoke, write_jsonl

    write_jsonl(tmp_path / "a.jsonl", happy_records())
    assert_user_error(invoke("evaluate", tmp_path / "a.jsonl", "-o", tmp_path / "eval", "-q", *options), words,
                      out=tmp_path / "eval")


# --- helpers ----------------------------------------------------------------------------------


def test_pair_codes_and_membership():
    codes = pair_codes(np.array([3, 1, 0, 1]), np.array([1, 3, 2, 3]), 10)
    assert codes.tolist() == [2, 13]
    assert found_in(np.array([2, 3, 13]), codes).tolist() == [True, False, True]
    assert found_in(np.array([99]), codes).tolist() == [False]
    assert found_in(np.array([2]), np.zeros(0, np.int64)).tolist() == [False]


def test_bin_edges():
    assert bin_edges(0.8).tolist() == [0.8, 0.85, 0.9, 0.95, 1.0]
    assert bin_edges(0.72).tolist() == [0.72, 0.77, 0.82, 0.87, 0.92, 0.97, 1.0]
    assert bin_edges(0.5, 0.25).tolist() == [0.5, 0.75, 1.0]
    assert bin_edges(1.0).tolist() == [1.0, 1.05]  # one bin holding J = 1, drawable
    with pytest.raises(ParameterError):
        bin_edges(0.5, 0)


def test_select_documents(sample_corpus):
    assert select_documents(sample_corpus) is sample_corpus
    first = select_documents(sample_corpus, limit=100)
    assert first.num_rows == 100 and first.ids.to_pylist() == sample_corpus.ids.to_pylist()[:100]
    drawn = select_documents(sample_corpus, limit=1000, sample=50, seed=3)
    ids = sample_corpus.ids.to_pylist()
    positions = [ids.index(i) for i in drawn.ids.to_pylist()]
    assert len(positions) == 50 and positions == sorted(positions) and max(positions) < 1000
    assert drawn.texts.to_pylist() == [sample_corpus.texts[p].as_py() for p in positions]
    assert select_documents(sample_corpus, limit=1000, sample=50, seed=3).ids.equals(drawn.ids)
    assert not select_documents(sample_corpus, sample=50, seed=4).ids.equals(drawn.ids)
    with pytest.raises(ParameterError):
        select_documents(sample_corpus, limit=0)


# --- choosing the best setting ----------------------------------------------------------------


def fake_result(index, seconds, verified_recall=None, candidate_precision=None, peak=100.0):
    recall = verified_recall
    return SettingResult(
        setting=Setting(num_perm=64 + index), bands=1, rows=1, banding_rule="given", documents=10,
        true_pairs=10, candidate_pairs=10, checked_pairs=10, verified_pairs=10,
        candidate_true_pairs=0, verified_true_pairs=0, clustered_true_pairs=0,
        candidate_precision=candidate_precision, candidate_recall=recall, candidate_f1=None,
        verified_precision=1.0, verified_recall=recall,
        verified_f1=None if recall is None else 2 * recall / (1 + recall), cluster_recall=recall,
        candidates_per_document=1.0, seconds=seconds, peak_rss_mb=peak)


def test_best_setting_per_criterion_ties_broken_by_time():
    results = [fake_result(0, 3.0, 0.9, 0.5, peak=50), fake_result(1, 2.0, 0.99, 0.2),
               fake_result(2, 1.0, 0.99, 0.3), fake_result(3, 0.5, None, 0.9)]
    assert best_result(results, "f1") is results[2]  # tied with 1 on F1; faster
    assert best_result(results, "recall") is results[2]
    assert best_result(results, "precision") is results[3]
    assert best_result(results, "time") is results[3]
    assert best_result(results, "memory") is results[0]
    assert best_result([results[3]], "recall") is results[3]  # undefined, but the only one
    assert best_result([], "f1") is None
    with pytest.raises(ParameterError):
        best_result(results, "speed")


# --- output -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_evaluation(subset_corpus):
    settings, notes = expand_grid(num_perm=[64], bands=[None, 8], rows=[8, 16], threshold=[0.8])
    return evaluate(subset_corpus, settings, backend="cpu", notes=notes, warmup=False)


def test_json_and_csv_written_and_readable(small_evaluation, subset_texts, tmp_path):
    json_path, csv_path = write_results(small_evaluation, tmp_path / "out", criterion="recall")
    expected = ["evaluation.csv", "evaluation.json", "recall_by_similarity.svg"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == expected
    data = json.loads(json_path.read_text())
    results = small_evaluation.results
    assert len(data["results"]) == len(results) == 2  # auto and 8x8; 8x16 > 64 is a note
    assert data["notes"] == small_evaluation.notes and len(data["notes"]) == 1
    assert data["criterion"]["name"] == "recall"
    best = best_result(results, "recall")  # one threshold: its recommendation is the best of all
    assert [r["index"] for r in data["recommended"]] == [results.index(best)]
    assert [r["recommended"] for r in data["results"]] == [r is best for r in results]
    assert data["ground_truth"][0]["pairs"] > 0 and data["corpus"]["documents"] == len(subset_texts)
    first = data["results"][0]
    assert first["setting"] == results[0].setting.as_dict()
    assert first["verified_recall"] == results[0].verified_recall
    assert first["recall_by_similarity"]["edges"] == [0.8, 0.85, 0.9, 0.95, 1.0]
    assert set(first["stage_seconds"]) >= {"signature_pass", "candidates", "verify", "cluster"}

    with open(csv_path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 2 and list(rows[0])[:len(CSV_FIELDS)] == CSV_FIELDS
    assert "seconds_verify" in rows[0] and "peak_rss_mb_verify" in rows[0]
    for row, result in zip(rows, results):
        assert float(row["verified_recall"]) == result.verified_recall
        assert int(row["candidate_pairs"]) == result.candidate_pairs
        assert row["recommended"] == str(result is best)

    table = format_table(small_evaluation, "recall")
    assert len(table.splitlines()) == 2 + 2 + 1
    assert table.splitlines()[-1].startswith("recommended for recall at word5 t=0.8 ")
    assert f"#{results.index(best)} K=64 b x r={best.setting.banding_label}" in table.splitlines()[-1]
    assert [line.startswith("*") for line in table.splitlines()[2:4]] == [r is best for r in results]


def test_write_is_atomic(small_evaluation, tmp_path, monkeypatch):
    out = tmp_path / "out"
    write_results(small_evaluation, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    # A failure while writing the second file: the old files stay, no temporary file is left.
    real_fsync, calls = os.fsync, []

    def failing_fsync(fd):
        calls.append(fd)
        if len(calls) == 2:
            raise OSError("disk full")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk full"):
        write_results(small_evaluation, out, criterion="time")
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before

    # A value JSON cannot hold fails before anything is written.
    broken = [small_evaluation.results[0]]
    broken[0] = SettingResult(**{**broken[0].__dict__, "seconds": float("nan")})
    fresh = tmp_path / "fresh"
    with pytest.raises(ValueError):
        write_results(broken, fresh)
    assert list(fresh.iterdir()) == []


def test_empty_corpus_and_no_true_pairs():
    corpus = strings_corpus(["one two three four five six", "seven eight nine ten eleven twelve", ""])
    evaluation = evaluate(corpus, [Setting(64)], backend="cpu")
    result = evaluation.results[0]
    assert result.true_pairs == 0 and result.verified_recall is None and result.verified_f1 is None
    assert result.recall_by_similarity.candidate_recall == [None] * 4
    assert "recommended for f1 at word5 t=0.8" in format_table(evaluation)


# --- a recommendation per ground truth --------------------------------------------------------


@pytest.fixture(scope="module")
def two_thresholds(subset_corpus):
    """Four settings at each of two thresholds: each threshold is scored against its own pairs."""
    settings, notes = expand_grid(num_perm=[32, 64], bands=[None, 4], threshold=[0.7, 0.9])
    return evaluate(subset_corpus, settings, backend="cpu", notes=notes, warmup=False)


def recommended_by_hand(rows: list, criterion: str) -> dict:
    """{(shingles, threshold): index} from the scored rows of evaluation.json: per ground truth,
    the largest value of the criterion's field (the smallest for time), ties to the shorter
    time, then to the earlier setting; undefined values last."""
    name, larger = {"f1": ("verified_f1", True), "recall": ("verified_recall", True),
                    "precision": ("candidate_precision", True), "time": ("seconds", False)}[criterion]
    groups: dict = {}
    for row in rows:
        s = row["setting"]
        key = (s["shingle"], s["ngram"], s["unicode"], s["strip_punctuation"], s["strip_symbols"], s["threshold"])
        groups.setdefault(key, []).append(row)

    def rank(row):
        value = row[name]
        if value is None:
            return (1, 0.0, row["seconds"], row["index"])
        return (0, -value if larger else value, row["seconds"], row["index"])

    return {key: min(members, key=rank)["index"] for key, members in groups.items()}


@pytest.mark.parametrize("criterion", ["f1", "recall", "precision", "time"])
def test_a_setting_is_recommended_per_threshold(two_thresholds, criterion):
    results = two_thresholds.results
    assert len(results) == 8 and [r.setting.threshold for r in results] == [0.7] * 4 + [0.9] * 4
    data = evaluation_dict(two_thresholds, criterion)
    expected = list(recommended_by_hand(data["results"], criterion).values())
    assert len(expected) == 2

    chosen = two_thresholds.recommended(criterion)
    assert [r.index for r in chosen] == expected and [r.threshold for r in chosen] == [0.7, 0.9]
    for r in chosen:
        assert r.indices == tuple(i for i, x in enumerate(results) if x.setting.threshold == r.threshold)
        assert r.result is results[r.index] and r.label == f"word5 t={r.threshold:g}"
    assert [e["index"] for e in data["recommended"]] == expected
    assert [e["settings"] for e in data["recommended"]] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [row["index"] for row in data["results"] if row["recommended"]] == expected
    rows = list(csv.DictReader(csv_text(two_thresholds, criterion).splitlines()))
    assert [int(row["index"]) for row in rows if row["recommended"] == "True"] == expected

    table = format_table(two_thresholds, criterion).splitlines()
    assert [int(line.split()[1]) for line in table[2:10] if line.startswith("*")] == expected
    assert [line.split(": #")[1].split()[0] for line in table[10:]] == [str(i) for i in expected]
    assert [line.split(" (")[0] for line in table[10:]] == [
        f"recommended for {criterion} at word5 t=0.7", f"recommended for {criterion} at word5 t=0.9"]


def test_the_evaluation_recommends_by_its_criterion(subset_corpus, two_thresholds):
    by_time = evaluate(subset_corpus, [r.setting for r in two_thresholds.results], backend="cpu",
                       warmup=False, criterion="time")
    assert by_time.criterion == "time"
    expected = recommended_by_hand(evaluation_dict(by_time)["results"], "time")
    assert [r.index for r in by_time.recommended()] == list(expected.values())
    by_f1 = recommended_by_hand(evaluation_dict(by_time, "f1")["results"], "f1")
    assert [r.index for r in by_time.recommended("f1")] == list(by_f1.values())
    assert format_table(by_time) == format_table(by_time, "time")
    with pytest.raises(ParameterError):
        evaluate(subset_corpus, [Setting(64)], backend="cpu", criterion="speed")


def test_a_figure_per_threshold_and_none_left_from_before(small_evaluation, two_thresholds, tmp_path):
    out = tmp_path / "out"
    write_results(small_evaluation, out)  # one threshold: one figure, as named before
    assert (out / FIGURE).exists()
    json_path, _ = write_results(two_thresholds, out)
    figures = [e["figure"] for e in json.loads(json_path.read_text())["recommended"]]
    named = ["recall_by_similarity_word5_t0.7.svg", "recall_by_similarity_word5_t0.9.svg"]
    assert figures == named
    assert sorted(p.name for p in out.iterdir()) == sorted(["evaluation.csv", "evaluation.json"] + named)
    assert all((out / name).read_text(encoding="utf-8").startswith("<?xml") for name in figures)


def test_an_evaluation_killed_between_its_renames_leaves_a_folder_the_next_one_takes(small_evaluation,
                                                                                      two_thresholds, tmp_path,
                                                                                      monkeypatch):
    """A SIGKILL (no signal hold delays it) between write_results' renames: the earlier
    figures are gone and the evaluation.json there names every figure that is, so the next
    evaluation into the folder is not refused for a figure of ours it does not know."""
    from gpudedup.evaluate import output

    out = tmp_path / "out"
    write_results(small_evaluation, out)  # one threshold: recall_by_similarity.svg
    real_replace, renamed = os.replace, []

    def replace_then_die(source, target):
        if renamed:
            raise SystemExit("killed")  # (as the process dying after its first rename)
        renamed.append(target)
        real_replace(source, target)

    monkeypatch.setattr(output.os, "replace", replace_then_die)
    with pytest.raises(SystemExit):
        write_results(two_thresholds, out)
    monkeypatch.setattr(output.os, "replace", real_replace)
    named = {e["figure"] for e in json.loads((out / "evaluation.json").read_text())["recommended"]}
    assert {p.name for p in out.glob("*.svg")} <= named
    write_results(small_evaluation, out)
    assert (out / FIGURE).exists()


def test_thresholds_that_differ_have_labels_and_figures_of_their_own(subset_corpus, tmp_path):
    """Two thresholds that ``:g`` (or twelve digits) would both show as 0.8 are two
    recommendations, each labelled with its own threshold and drawn in a figure of its own
    (none overwrites the other)."""
    settings, _ = expand_grid(threshold=[0.8, 0.8000000000001], num_perm=[64])
    evaluation = evaluate(subset_corpus, settings, backend="cpu", warmup=False)
    labels = [r.result.setting.label for r in evaluation.recommended()]
    assert len(set(labels)) == 2 and any("t=0.8000000000001 " in label for label in labels)
    write_results(evaluation, tmp_path / "out")
    figures = json.loads((tmp_path / "out" / "evaluation.json").read_text())["recommended"]
    named = [entry["figure"] for entry in figures]
    assert len(set(named)) == 2 and all((tmp_path / "out" / name).exists() for name in named)


def test_only_the_figures_an_earlier_evaluation_wrote_are_removed(small_evaluation, two_thresholds, tmp_path):
    """A file of the user's beside the results, named like a figure, stays: only the figures
    the earlier evaluation.json names are taken away."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "recall_by_similarity_mine.png").write_bytes(b"the user's")
    write_results(small_evaluation, out)
    write_results(two_thresholds, out)
    assert (out / "recall_by_similarity_mine.png").read_bytes() == b"the user's"
    assert not (out / FIGURE).exists()


def test_a_ctrl_c_during_the_write_comes_after_every_file_is_in_place(small_evaluation, two_thresholds, tmp_path,
                                                                      monkeypatch):
    """A Ctrl-C as the first file of an evaluation takes its place waits until every file is
    in place (not an earlier evaluation's csv beside this one's json), and is then raised with
    the folder noted as written, so that the command says where the results are."""
    import signal

    from gpudedup import interrupts
    from gpudedup.evaluate import output

    out = tmp_path / "out"
    write_results(small_evaluation, out)
    replace, renamed = os.replace, []

    def interrupted_replace(source, target):
        replace(source, target)
        renamed.append(target)
        if len(renamed) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(output.os, "replace", interrupted_replace)
    interrupts.note_written(None)
    with pytest.raises(KeyboardInterrupt):
        write_results(two_thresholds, out)
    monkeypatch.undo()
    assert {Path(target).name for target in renamed} == {path.name for path in out.iterdir()}
    assert interrupts.interrupted_outcome() == f"the results were written to {out}"
    interrupts.note_written(None)
    written = json.loads((out / "evaluation.json").read_text())["results"]
    with open(out / "evaluation.csv", newline="") as table:
        assert len(list(csv.DictReader(table))) == len(written) == len(two_thresholds.results)


def test_values_of_other_types_are_taken_as_the_run_takes_them_or_refused(subset_corpus):
    """A numpy float threshold is the run's (0.8 by its shortest text), so the ground truth is
    cut where the run verifies; a target given as text, a bool as a banding or a limit, and
    a bin width too narrow to draw are refused before any work, each naming the value."""
    import numpy as np

    settings, _ = expand_grid(threshold=[np.float32(0.8)], num_perm=[64])
    assert [type(s.threshold) for s in settings] == [float] and settings[0].threshold == 0.8
    direct = evaluate(subset_corpus, [Setting(num_perm=64, threshold=np.float32(0.8))], backend="cpu", warmup=False)
    assert direct.results[0].setting.threshold == 0.8 and direct.results[0].verified_precision in (1.0, None)
    for call, words in ((lambda: expand_grid(max_false_negative=["0.1"]), "max_false_negative= must be in (0, 1)"),
                        (lambda: expand_grid(bands=[True], rows=[4]), "bands= must be integers >= 1"),
                        (lambda: select_documents(subset_corpus, limit=True), "limit= must be"),
                        (lambda: evaluate(subset_corpus, settings, backend="cpu", bin_width=1e-12),
                         "bin_width= must be from 0.001 to 1")):
        with pytest.raises(ParameterError, match=re.escape(words)):
            call()


def test_inputs_that_hold_no_document_are_refused_as_dedup_refuses_them(tmp_path, monkeypatch):
    """evaluate over files that hold no record (empty, blank lines only) scores nothing: one
    line, exit 2, no folder written, as dedup over them."""
    from cli_support import assert_user_error, invoke

    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "blank.jsonl").write_text("\n\n")
    for name in ("empty.jsonl", "blank.jsonl"):
        assert_user_error(invoke("evaluate", name, "-o", "eval", "-q"),
                          f"no document could be read from the inputs: the files read hold no records ({name})",
                          out=tmp_path / "eval")


def test_files_of_the_users_named_as_an_evaluation_writes_are_never_replaced(small_evaluation, tmp_path,
                                                                             monkeypatch):
    """The user's own evaluation.json, evaluation.csv or figure (one that no earlier
    evaluation.json of ours names) is refused, the command before its run, naming the file,
    each left as it was; an earlier evaluation's files are replaced, and every file is written
    with the umask's mode, as any file the user makes."""
    from cli_support import error_line, happy_records, invoke, write_jsonl

    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "corpus" / "a.jsonl", happy_records())
    for name in ("evaluation.json", "evaluation.csv", FIGURE):
        out = tmp_path / name.replace(".", "-")
        out.mkdir()
        (out / name).write_text("mine")
        before = sorted(os.listdir(out))
        refused = invoke("evaluate", "corpus", "-o", out.name)  # (not quiet: a run would print its settings)
        assert refused.exit_code == 2 and "Traceback" not in refused.output and "[1/1]" not in refused.output
        assert f"holds {name}, which is not an earlier evaluation's" in error_line(refused)
        with pytest.raises(OutputError, match=f"holds {name}"):
            write_results(small_evaluation, out)
        assert sorted(os.listdir(out)) == before and (out / name).read_text() == "mine"
    old = os.umask(0o022)
    try:
        write_results(small_evaluation, tmp_path / "ours")
        write_results(small_evaluation, tmp_path / "ours")  # (an earlier evaluation's: replaced)
    finally:
        os.umask(old)
    assert {oct(path.stat().st_mode & 0o777) for path in (tmp_path / "ours").iterdir()} == {"0o644"}


def test_the_evaluation_shows_its_recommendations_in_a_terminal_and_a_notebook(two_thresholds):
    from xml.etree import ElementTree

    chosen = two_thresholds.recommended()
    text = repr(two_thresholds)
    lines = text.splitlines()
    assert lines[0] == f"Evaluation(8 settings on {two_thresholds.corpus['documents']:,} documents; " \
                       "recommended for f1, per threshold:"
    assert max(len(line) for line in lines) <= 80 and lines[-1] == ")"
    for r, line in zip(chosen, lines[1:3]):
        setting = r.result.setting
        assert line.startswith(f"  word5 t={r.threshold:g}: #{r.index} K={setting.num_perm} "
                               f"b x r={setting.banding_label}")
        assert f"verified_f1 {r.result.verified_f1:.4f}" in line

    page = two_thresholds._repr_html_()
    assert "<script" not in page
    root = ElementTree.fromstring(f"<root>{page}</root>")  # well-formed, so any HTML parser reads it
    tables = root.findall(".//table[@class='gpudedup-settings']")
    assert len(tables) == len(chosen) == 2
    for table, r in zip(tables, chosen):
        rows = table.findall("./tbody/tr")
        assert [int(row.findall("td")[1].text) for row in rows] == list(r.indices)  # one row per setting
        marked = [row for row in rows if row.get("class") == "gpudedup-recommended"]
        assert [int(row.findall("td")[1].text) for row in marked] == [r.index]
        assert [row.findall("td")[0].text for row in rows] == ["\u2605" if row in marked else None for row in rows]
    headings = [p.find("b").text for p in root.findall(".//p[@class='gpudedup-truth']")]
    assert headings == ["word5 t=0.7", "word5 t=0.9"]


def test_an_evaluation_of_no_settings_shows_so():
    evaluation = evaluate(strings_corpus(["one two three", "four five six", ""]), [], backend="cpu")
    assert repr(evaluation) == "Evaluation(0 settings on 3 documents)"
    assert "No settings were evaluated" in evaluation._repr_html_()
    assert evaluation.recommended() == [] and format_table(evaluation).endswith("no settings were evaluated")
