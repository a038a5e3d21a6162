"""The command line's planning and safety options: `gpudedup params`, `gpudedup evaluate`,
--max-memory and --on-error skip."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gpudedup
from gpudedup.cli import app

from cli_support import invoke, leftovers
from output_support import read_clusters, read_pairs, result_bytes


# --- gpudedup params ------------------------------------------------------------------------


def test_params_prints_the_chosen_banding_and_its_curve():
    result = CliRunner().invoke(app, ["params", "--threshold", "0.8", "--num-perm", "128"])
    assert result.exit_code == 0, result.output
    assert "16 bands x 6 rows" in result.output and "96 of 128 permutations" in result.output
    assert "steepest at s = 0.612" in result.output and "(threshold)" in result.output


def test_params_json_meets_the_targets():
    result = CliRunner().invoke(app, ["params", "--threshold", "0.8", "--num-perm", "512", "--low", "0.5",
                                      "--max-fp", "0.05", "--max-fn", "0.01", "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert (plan["bands"], plan["rows"]) == (41, 10)
    assert plan["miss_probability_at_threshold"] <= 0.01 and plan["candidate_probability_at_low"] <= 0.05
    assert plan["candidate_probability"]["0.5"] == plan["candidate_probability_at_low"]


def test_params_names_a_threshold_of_many_digits_apart_from_its_neighbours():
    """A similarity is named by the shortest text that reads back as it: a threshold of more
    than six significant digits keeps its row and its mark, and never takes the row of a
    similarity it rounds to (0.30000001 beside 0.3)."""
    from gpudedup.core.lsh import collision_probability

    result = CliRunner().invoke(app, ["params", "--threshold", "0.8765432"])
    assert result.exit_code == 0 and "0.8765432  (threshold)" in result.output, result.output
    result = CliRunner().invoke(app, ["params", "--threshold", "0.30000001", "--json"])
    plan = json.loads(result.output)
    curve = plan["candidate_probability"]
    assert curve["0.3"] == collision_probability(0.3, plan["bands"], plan["rows"])
    assert curve["0.30000001"] == collision_probability(0.30000001, plan["bands"], plan["rows"]) != curve["0.3"]


def test_params_shows_the_shingles_and_refuses_text_options_with_token_ids():
    result = CliRunner().invoke(app, ["params", "--unicode", "nfkc", "--strip-punctuation", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["shingles"] == {"shingle": "word", "ngram": 5, "unicode": "nfkc",
                                                     "strip_punctuation": True, "strip_symbols": False}
    result = CliRunner().invoke(app, ["params", "--shingle", "token", "--strip-symbols"])
    assert result.exit_code == 2 and "--strip-symbols must be left out with token shingles" in result.output


def test_params_refuses_impossible_targets_and_names_the_num_perm_that_would_do():
    result = CliRunner().invoke(app, ["params", "--threshold", "0.8", "--low", "0.5", "--max-fp", "0.05"])
    assert result.exit_code == 2
    assert "--num-perm 410 is the smallest" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(app, ["params", "--low", "0.5"])
    assert result.exit_code == 2 and "--low 0.5 needs --max-fp too" in result.output


@pytest.mark.parametrize("command", [["index", "create", "{tmp}/index"], ["dedup", "{tmp}/in.txt", "-o", "{tmp}/out"]])
def test_targets_beside_given_bands_and_rows_are_refused(tmp_path, command):
    """--max-fn, --low and --max-fp choose bands and rows: beside --bands and --rows they
    would change nothing, and are refused, naming those given; nothing is made. (params shows
    P(low) of the bands given.)"""
    (tmp_path / "in.txt").write_text("the quick brown fox jumps over the lazy dog\n")
    words = [part.format(tmp=tmp_path) for part in command]
    result = CliRunner().invoke(app, [*words, "--bands", "20", "--rows", "5", "--low", "0.5", "--max-fp", "0.01"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert ("--low and --max-fp are targets that bands and rows are chosen to meet, so with --bands and --rows given "
            "they change nothing") in " ".join(result.output.split())
    assert not (tmp_path / "index").exists() and not (tmp_path / "out").exists()
    result = CliRunner().invoke(app, [*words, "--bands", "20", "--rows", "5", "--max-fn", "0.01"])
    assert result.exit_code == 0, result.output  # (the default target, named: as good as left out)


def test_params_refuses_a_miss_target_beside_given_bands_and_shows_p_low_of_them():
    """params with --bands and --rows shows what they do: a --max-fn beside them (which they
    were not chosen to meet, and which its table would seem to promise) is refused; --low with
    --max-fp shows P(low) of the bands given."""
    result = CliRunner().invoke(app, ["params", "--bands", "4", "--rows", "8", "--max-fn", "0.02"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "--max-fn is a target that bands and rows are chosen to meet" in " ".join(result.output.split())
    result = CliRunner().invoke(app, ["params", "--bands", "4", "--rows", "8", "--low", "0.5", "--max-fp", "0.001",
                                      "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)
    assert (plan["bands"], plan["rows"]) == (4, 8)
    assert plan["candidate_probability_at_low"] == pytest.approx(1 - (1 - 0.5 ** 8) ** 4)


def test_dedup_chooses_bands_from_the_targets_and_reports_why(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps({"text": f"words {i} and more words here"}) + "\n" for i in range(5)))
    result = CliRunner().invoke(app, ["dedup", str(source), "-o", str(tmp_path / "out"), "--num-perm", "512",
                                      "--low", "0.5", "--max-fp", "0.05", "--quiet"])
    assert result.exit_code == 0, result.output
    parameters = json.loads((tmp_path / "out" / "report.json").read_text())["parameters"]
    assert (parameters["bands"], parameters["rows"]) == (41, 10)
    assert parameters["low"] == 0.5 and parameters["max_fp"] == 0.05
    assert "P(0.5) = 0.0393" in parameters["banding_rule"]


# --- gpudedup evaluate ----------------------------------------------------------------------


def test_evaluate_scores_a_grid_and_writes_json_and_csv(tmp_path):
    sample = Path(gpudedup.__file__).parent / "data" / "bible_sample.jsonl.gz"
    result = CliRunner().invoke(app, ["evaluate", str(sample), "-o", str(tmp_path / "eval"), "--id-field", "id",
                                      "--limit", "400", "--num-perm", "64,128", "--threshold", "0.8", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "recommended for f1 at word5 t=0.8" in result.output
    evaluation = json.loads((tmp_path / "eval" / "evaluation.json").read_text())
    assert len(evaluation["results"]) == 2
    csv_lines = (tmp_path / "eval" / "evaluation.csv").read_text().splitlines()
    assert len(csv_lines) == 3  # header and one row per setting
    figure = (tmp_path / "eval" / "recall_by_similarity.svg").read_text(encoding="utf-8")
    assert figure.startswith("<?xml") and "Recall by similarity: " in figure


def test_evaluate_refuses_a_bad_criterion_before_any_work(tmp_path):
    result = CliRunner().invoke(app, ["evaluate", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "e"),
                                      "--criterion", "nope"])
    assert result.exit_code == 2 and "--criterion must be one of" in result.output


# --- --max-memory -----------------------------------------------------------------------------


def test_max_memory_stops_before_a_stage_that_would_exceed_it(happy):
    result = invoke("dedup", "data.jsonl", "-o", "out", "-q", "--max-memory", "1M")
    assert result.exit_code == 2
    assert "--max-memory 1 MiB" in result.output and "Traceback" not in result.output
    assert not (happy / "out").exists() and leftovers(happy) == []
    # A work directory's shard read: the advice names what takes most of the need, the batches.
    staged = invoke("dedup", "data.jsonl", "-o", "out", "-q", "--max-memory", "1M", "--work-dir", "work")
    assert staged.exit_code == 2 and "; lower --batch-bytes (the batches in flight take" in staged.output


def test_max_memory_generous_limit_runs_and_bad_sizes_are_refused(happy):
    assert invoke("dedup", "data.jsonl", "-o", "out", "-q", "--max-memory", "64G").exit_code == 0
    result = invoke("dedup", "data.jsonl", "-o", "out2", "-q", "--max-memory", "lots")
    assert result.exit_code == 2 and "--max-memory must be a size like 8G" in result.output


def test_batch_bytes_takes_a_size_as_the_other_sizes_do(happy):
    """--batch-bytes 256K is the same run as --batch-bytes 262144 (the pairs and kept rows of
    every batch size are the same), and a bad size is refused naming the option."""
    for name, size in (("k", "256K"), ("bytes", "262144")):
        result = invoke("dedup", "data.jsonl", "-o", name, "-q", "--batch-bytes", size, "--backend", "cpu")
        assert result.exit_code == 0, result.output
    assert (happy / "k" / "deduplicated").exists()
    assert sorted((happy / "k").rglob("*.parquet")) and all(
        path.read_bytes() == (happy / "bytes" / path.relative_to(happy / "k")).read_bytes()
        for path in (happy / "k").rglob("*.parquet"))
    refused = invoke("dedup", "data.jsonl", "-o", "bad", "-q", "--batch-bytes", "lots")
    assert refused.exit_code == 2 and "--batch-bytes must be a size like 8G" in refused.output
    twins = gpudedup.dedup(["a b c d e f", "a b c d e f"], batch_bytes="1K", backend="cpu")
    assert twins.keep.tolist() == [True, False]


def test_parse_size():
    from gpudedup.errors import ParameterError
    from gpudedup.memory import parse_size

    assert parse_size("4G") == 4 << 30 and parse_size("512m") == 512 << 20 and parse_size("1.5GiB") == 3 << 29
    assert parse_size("1000") == 1000 and parse_size(2048) == 2048 and parse_size("2 TB") == 2 << 40
    for bad in ("", "-1G", "0", "1X", "G", float("nan")):
        with pytest.raises(ParameterError):
            parse_size(bad)
    # Exact, whatever the digits: a size past int64 is named as such, not rounded first.
    assert parse_size("9007199254740993") == 2**53 + 1 and parse_size(2**62 + 1) == 2**62 + 1
    with pytest.raises(ParameterError, match=r"^batch_bytes= must be below 2\*\*63 bytes \(8 EiB\); got "
                                             r"'99999999999999999999'$"):
        parse_size("99999999999999999999", "batch_bytes")


# --- --on-error skip --------------------------------------------------------------------------


def test_on_error_skip_counts_lists_and_balances_skipped_records(tmp_path):
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "a b c d e f g"}\nnot json\n{"text": 5}\n{"text": "a b c d e f g"}\n')
    stopped = CliRunner().invoke(app, ["dedup", str(source), "-o", str(tmp_path / "stop"), "-q"])
    assert stopped.exit_code == 2 and "in.jsonl:2" in stopped.output and not (tmp_path / "stop").exists()
    result = CliRunner().invoke(app, ["dedup", str(source), "-o", str(tmp_path / "out"), "--on-error", "skip"])
    assert result.exit_code == 0, result.output
    assert "2 records or files were skipped" in result.output
    errors = [json.loads(line) for line in (tmp_path / "out" / "errors.jsonl").read_text().splitlines()]
    assert [(e["line"], "JSON" in e["reason"] or "number" in e["reason"]) for e in errors] == [(2, True), (3, True)]
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["balance"] == {"input_records": 4, "kept": 1, "kept_empty": 0, "removed_duplicates": 1,
                                 "skipped": 2, "balanced": True}
    assert report["input"]["skipped_records"] == 2
    ids = read_clusters(tmp_path / "out")["id"].to_pylist()
    assert ids == [f"{source}:1", f"{source}:4"] or all(i.endswith((":1", ":4")) for i in ids)


def test_on_error_skip_writes_an_empty_errors_file_when_nothing_is_wrong(happy):
    assert invoke("dedup", "data.jsonl", "-o", "out", "-q", "--on-error", "skip").exit_code == 0
    assert (happy / "out" / "errors.jsonl").read_text() == ""
    assert invoke("dedup", "data.jsonl", "-o", "out2", "-q", "--on-error", "maybe").exit_code == 2


# --- normalisation options -----------------------------------------------------------------------


def test_unicode_and_punctuation_options_find_what_the_canonical_form_cannot(tmp_path):
    """Full-width letters and punctuation differ only under the canonical normalisation: with
    --unicode nfkc --strip-punctuation the two texts have the same words, so they pair at 1.0;
    without, they do not pair. The report and a staged run say and do the same."""
    plain = "the quick brown fox jumps over the lazy dog and runs far away"
    wide = "Ｔｈｅ quick, brown fox — jumps over the lazy dog; and runs far away!"
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in (plain, wide, "something else entirely")))
    options = ["--unicode", "nfkc", "--strip-punctuation"]
    for out, extra in (("canonical", []), ("normalised", options),
                       ("staged", options + ["--work-dir", str(tmp_path / "work")])):
        result = invoke("dedup", str(corpus), "-o", str(tmp_path / out), "-q", "--backend", "cpu", *extra)
        assert result.exit_code == 0, result.output
    assert read_pairs(tmp_path / "canonical").num_rows == 0
    pairs = read_pairs(tmp_path / "normalised").to_pylist()
    assert len(pairs) == 1 and pairs[0]["jaccard"] == 1.0
    assert pairs[0]["id_a"].endswith("c.jsonl:1") and pairs[0]["id_b"].endswith("c.jsonl:2")
    report = json.loads((tmp_path / "normalised" / "report.json").read_text())
    assert (report["parameters"]["unicode"], report["parameters"]["strip_punctuation"],
            report["parameters"]["strip_symbols"]) == ("nfkc", True, False)
    assert result_bytes(tmp_path / "normalised") == result_bytes(tmp_path / "staged")


def test_two_ways_to_a_cluster_are_refused_in_the_command_s_words(tmp_path):
    """--scheduler with --workers: one line naming the two options, not the API's client=."""
    (tmp_path / "in.jsonl").write_text('{"text": "a b c"}\n')
    result = invoke("dedup", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out"), "--scheduler",
                    "tcp://127.0.0.1:1", "--workers", "2", "--work-dir", str(tmp_path / "work"))
    assert result.exit_code == 2
    assert "give one of --scheduler and --workers" in result.output and "client=" not in result.output
    with pytest.raises(gpudedup.errors.ParameterError, match="client= runs on that client's cluster"):
        gpudedup.dedup(tmp_path / "in.jsonl", client=object(), workers=2, work_dir=tmp_path / "work")
