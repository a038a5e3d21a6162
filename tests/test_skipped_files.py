"""Nothing under the inputs is left out unsaid: every entry inside an input directory that is not
read (a file of no input type, a hidden file or folder, what --include / --exclude leave out) is
named on the terminal, in report.json and in report.html; the globs choose files (command line
and API) and a resumed run reuses its stages only for the same files; inputs that give no
document stop the run with exit code 2 and one line, under either --on-error, in memory and
with --work-dir."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest

import gpudedup
from cli_support import assert_user_error, happy_records, invoke, write_jsonl
from gpudedup.errors import InputError, ParameterError
from gpudedup.io.inputs import Selection, scan_inputs
from output_support import read_clusters, read_kept


def dedup_ok(*args) -> tuple:
    """Run the CLI's dedup (must succeed); (report.json of the output after -o, the result)."""
    result = invoke("dedup", *args, "--backend", "cpu")
    assert result.exit_code == 0, f"exit {result.exit_code}:\n{result.output}\n{result.exception!r}"
    out = Path(args[list(args).index("-o") + 1])
    return json.loads((out / "report.json").read_text(encoding="utf-8")), result


@pytest.fixture
def mixed(in_tmp) -> Path:
    """in/: part.jsonl (the CLI tests' corpus with planted pairs), a .csv and a .parquet.gz
    file, a hidden file and a hidden folder holding JSONL (copies of part.jsonl's rows, which
    would change the clusters if they were read)."""
    records = happy_records()
    write_jsonl(in_tmp / "in" / "part.jsonl", records)
    (in_tmp / "in" / "b.csv").write_text("text\nsome words\n", encoding="utf-8")
    (in_tmp / "in" / "c.parquet.gz").write_bytes(b"\x1f\x8b not really")
    write_jsonl(in_tmp / "in" / ".hidden.jsonl", records[:2])
    write_jsonl(in_tmp / "in" / ".cache" / "x.jsonl", records[:4])
    return in_tmp


NOT_READ = [("in/.hidden.jsonl", "hidden", False), ("in/b.csv", "unsupported type", False),
            ("in/c.parquet.gz", "unsupported type", False), ("in/.cache", "hidden", True)]


def test_entries_not_read_are_named_on_stderr_and_in_both_reports(mixed):
    report, result = dedup_ok("in", "-o", "out")
    notes = [line for line in result.stderr.splitlines() if "under the inputs" in line]
    assert notes == ["note: 4 files and folders under the inputs were not read (unsupported type, hidden): "
                     "in/.hidden.jsonl, in/b.csv, in/c.parquet.gz, in/.cache/; all in out/report.json"]
    given = report["input"]
    assert given["skipped_files"] == [path for path, _, _ in NOT_READ]  # (the list as it always was)
    assert given["skipped_file_reasons"] == [{"path": path, "reason": reason, "folder": folder}
                                             for path, reason, folder in NOT_READ]
    page = (mixed / "out" / "report.html").read_text(encoding="utf-8")
    assert "4 entries under the inputs not read</strong> (2 hidden, 2 unsupported type)" in page
    for path, reason, folder in NOT_READ:
        assert f'<td class="mono">{path}{"/" if folder else ""}</td><td>{reason}</td>' in page
    # The reference: part.jsonl given by name, alone (its ids name it the same way).
    alone, _ = dedup_ok("in/part.jsonl", "-o", "alone", "-q")
    assert alone["input"]["skipped_files"] == [] and alone["results"] == report["results"]
    assert read_kept(mixed / "out").equals(read_kept(mixed / "alone"))
    assert read_clusters(mixed / "out").equals(read_clusters(mixed / "alone"))


def test_a_run_that_reads_everything_says_nothing_of_entries_not_read(in_tmp):
    write_jsonl(in_tmp / "in" / "part.jsonl", happy_records())
    report, result = dedup_ok("in", "-o", "out")
    assert "under the inputs" not in result.stderr
    assert report["input"]["skipped_file_reasons"] == []
    assert "under the inputs not read" not in (in_tmp / "out" / "report.html").read_text(encoding="utf-8")


@pytest.fixture
def tree(in_tmp) -> Path:
    """in/a.jsonl, in/b.jsonl, in/sub/c.jsonl, in/sub/d.txt: one document each, c a near copy
    of a and d of b, so that which files are read shows in the clusters too."""
    records = happy_records()  # rows 0 and 2 are near copies, as are 3 and 4
    write_jsonl(in_tmp / "in" / "a.jsonl", [records[0]])
    write_jsonl(in_tmp / "in" / "b.jsonl", [records[3]])
    write_jsonl(in_tmp / "in" / "sub" / "c.jsonl", [records[2]])
    (in_tmp / "in" / "sub" / "d.txt").write_text(records[4]["text"], encoding="utf-8")
    return in_tmp


@pytest.mark.parametrize("options, read, left_out", [
    (["--include", "*.jsonl"], ["in/a.jsonl", "in/b.jsonl", "in/sub/c.jsonl"],
     [("in/sub/d.txt", "not matched by --include", False)]),
    (["--include", "sub/*"], ["in/sub/c.jsonl", "in/sub/d.txt"],
     [("in/a.jsonl", "not matched by --include", False), ("in/b.jsonl", "not matched by --include", False)]),
    (["--exclude", "sub", "--exclude", "b.*"], ["in/a.jsonl"],
     [("in/b.jsonl", "excluded by --exclude", False), ("in/sub", "excluded by --exclude", True)]),
    (["--include", "*.jsonl", "--exclude", "sub/c.jsonl"], ["in/a.jsonl", "in/b.jsonl"],
     [("in/sub/c.jsonl", "excluded by --exclude", False), ("in/sub/d.txt", "not matched by --include", False)]),
])
def test_include_and_exclude_choose_the_files_read(tree, options, read, left_out):
    report, _ = dedup_ok("in", "-o", "out", "-q", *options)
    assert [f["path"] for f in report["input"]["files"]] == read
    assert [(e["path"], e["reason"], e["folder"]) for e in report["input"]["skipped_file_reasons"]] == left_out
    # The same through the API, and against the same files given by name (the reference).
    api = dict(zip([o.lstrip("-") for o in options[::2]], [[] for _ in options[::2]]))
    for option, pattern in zip(options[::2], options[1::2]):
        api[option.lstrip("-")].append(pattern)
    chosen = gpudedup.dedup(Path("in"), backend="cpu", **api)
    named = gpudedup.dedup([Path(path) for path in read], backend="cpu")
    assert [f["path"] for f in chosen.report["input"]["files"]] == read
    assert chosen.clusters.equals(named.clusters) and chosen.pairs.equals(named.pairs)
    assert read_kept(tree / "out").equals(named.deduplicated)


def test_a_file_given_by_name_is_read_whatever_the_globs(tree):
    report, _ = dedup_ok("in/b.jsonl", "in/sub", "-o", "out", "-q", "--exclude", "*.jsonl", "--include", "a*")
    assert [f["path"] for f in report["input"]["files"]] == ["in/b.jsonl"]
    assert [e["path"] for e in report["input"]["skipped_file_reasons"]] == ["in/sub/c.jsonl", "in/sub/d.txt"]
    # Given by name and met in a folder the globs leave it out of (before or after): read, and
    # not listed as not read.
    for order in (("in/sub/d.txt", "in"), ("in", "in/sub/d.txt")):
        report, _ = dedup_ok(*order, "-o", "out2", "-q", "--overwrite", "--include", "*.jsonl")
        assert "in/sub/d.txt" in [f["path"] for f in report["input"]["files"]]
        assert "in/sub/d.txt" not in report["input"]["skipped_files"]
        assert "in/sub/d.txt" not in [e["path"] for e in report["input"]["skipped_file_reasons"]]


def test_globs_are_refused_for_data_that_is_not_files_and_must_be_patterns(tree):
    with pytest.raises(ParameterError, match="include and exclude choose the files inside input directories"):
        gpudedup.dedup(["one text", "another text"], include="*.jsonl")
    with pytest.raises(ParameterError, match="exclude takes glob patterns.*got ''"):
        gpudedup.dedup(Path("in"), exclude=[""])
    with pytest.raises(ParameterError, match="include takes glob patterns.*got 3"):
        gpudedup.dedup(Path("in"), include=3)


def test_globs_choose_the_same_files_below_a_url(tree):
    """An object store's folders are only implied by its keys: one left out is still listed
    once, in the local walk's place (fsspec's in-memory file system stands for the store)."""
    memory = fsspec.filesystem("memory")
    for path in sorted((tree / "in").rglob("*")):
        if path.is_file():
            memory.pipe(f"/skipped-files/{path.relative_to(tree).as_posix()}", path.read_bytes())
    write_jsonl(tree / "in" / ".cache" / "e.jsonl", [{"text": "never read"}])
    memory.pipe("/skipped-files/in/.cache/e.jsonl", (tree / "in" / ".cache" / "e.jsonl").read_bytes())
    url = "memory://skipped-files/in"
    try:
        for selection in (Selection(), Selection.of("*.jsonl"), Selection.of(exclude=["sub"]),
                          Selection.of("sub/*", "*.txt")):
            local, remote = scan_inputs(["in"], selection=selection), scan_inputs([url], selection=selection)
            assert [str(p).replace(url, "in") for p in remote.files] == [str(p) for p in local.files]
            assert [(s.replace(url, "in"), s.reason, s.folder) for s in remote.skipped] == \
                [(str(s), s.reason, s.folder) for s in local.skipped]
            assert ("in/.cache", "hidden", True) in [(str(s), s.reason, s.folder) for s in local.skipped]
    finally:
        memory.rm("/skipped-files", recursive=True)


def test_a_resumed_run_reuses_its_stages_only_for_the_same_files(tree):
    first, _ = dedup_ok("in", "-o", "out1", "-q", "--work-dir", "work", "--exclude", "b.jsonl")
    manifest = tree / "work" / "manifest.json"
    written = manifest.stat().st_mtime_ns
    # Other globs that choose the same files: the work directory's stages are taken over.
    again, _ = dedup_ok("in", "-o", "out2", "-q", "--work-dir", "work", "--resume", "--exclude", "b.*")
    assert manifest.stat().st_mtime_ns == written
    assert again["results"] == first["results"]
    assert read_kept(tree / "out2").equals(read_kept(tree / "out1"))
    # Globs that choose other files: refused, as any other run's.
    refused = invoke("dedup", "in", "-o", "out3", "-q", "--backend", "cpu", "--work-dir", "work", "--resume")
    assert_user_error(refused, "work: the work directory belongs to another run", out=tree / "out3")


# --- inputs that give no document ----------------------------------------------------------------


@pytest.mark.parametrize("staged", [False, True], ids=["memory", "work-dir"])
@pytest.mark.parametrize("on_error", ["stop", "skip"])
def test_inputs_of_no_input_type_stop_the_run(in_tmp, on_error, staged):
    (in_tmp / "in").mkdir()
    (in_tmp / "in" / "b.csv").write_text("text\nwords\n", encoding="utf-8")
    write_jsonl(in_tmp / "in" / ".cache" / "x.jsonl", happy_records())
    extra = ["--work-dir", "work"] if staged else []
    result = invoke("dedup", "in", "-o", "out", "-q", "--backend", "cpu", "--on-error", on_error, *extra)
    assert_user_error(result, "no document could be read from the inputs: no input files found in in",
                      "not read: in/b.csv (unsupported type), in/.cache/ (hidden)", out=in_tmp / "out")


@pytest.mark.parametrize("staged", [False, True], ids=["memory", "work-dir"])
def test_inputs_whose_every_record_is_left_out_stop_the_run(in_tmp, staged):
    (in_tmp / "in").mkdir()
    (in_tmp / "in" / "bad.jsonl").write_bytes(b"garbage\n[1]\n")
    (in_tmp / "in" / "notes.md").write_text("# notes\n", encoding="utf-8")
    extra = ["--work-dir", "work"] if staged else []
    stop = invoke("dedup", "in", "-o", "out", "-q", "--backend", "cpu", *extra)
    assert_user_error(stop, "in/bad.jsonl:1: invalid JSON", out=in_tmp / "out")
    if staged:
        (in_tmp / "work").rename(in_tmp / "stopped")
    skip = invoke("dedup", "in", "-o", "out", "-q", "--backend", "cpu", "--on-error", "skip", *extra)
    assert_user_error(skip, "no document could be read from the inputs: every record was left out under "
                            "--on-error skip (2 records or files; the first: in/bad.jsonl:1: invalid JSON",
                      "not read: in/notes.md (unsupported type)", out=in_tmp / "out")
    with pytest.raises(InputError, match="no document could be read from the inputs: every record was left out"):
        gpudedup.dedup(Path("in"), on_error="skip", backend="cpu", work_dir="api-work" if staged else None)


@pytest.mark.parametrize("staged", [False, True], ids=["memory", "work-dir"])
def test_files_without_records_stop_the_run_and_empty_texts_do_not(in_tmp, staged):
    (in_tmp / "in").mkdir()
    (in_tmp / "in" / "empty.jsonl").write_bytes(b"")
    (in_tmp / "in" / "blank.jsonl").write_bytes(b"\n\n")
    extra = ["--work-dir", "work"] if staged else []
    result = invoke("dedup", "in", "-o", "out", "-q", "--backend", "cpu", *extra)
    assert_user_error(result, "no document could be read from the inputs: the files read hold no records "
                              "(in/blank.jsonl, in/empty.jsonl)", out=in_tmp / "out")
    # Documents whose text is empty are documents: the run goes on.
    write_jsonl(in_tmp / "in" / "texts.jsonl", [{"text": ""}, {"text": None}])
    report, _ = dedup_ok("in", "-o", "out", "-q", *(["--work-dir", "work2"] if staged else []))
    assert report["input"]["documents"] == 2 and report["input"]["empty_documents"] == 2


def test_an_index_takes_the_globs_too(tree):
    from gpudedup import Index

    index = Index.create(tree / "idx")
    checked = index.dedup(Path("in"), backend="cpu", exclude="sub")
    assert [f["path"] for f in checked.report["input"]["files"]] == ["in/a.jsonl", "in/b.jsonl"]
    added = index.add(Path("in"), backend="cpu", include="sub/*", output=tree / "out")
    assert [f["path"] for f in added.report["input"]["files"]] == ["in/sub/c.jsonl", "in/sub/d.txt"]
    assert index.info()["documents"] == 2
    report, _ = dedup_ok("in", "-o", "against", "-q", "--against", "idx", "--include", "a.jsonl")
    assert [f["path"] for f in report["input"]["files"]] == ["in/a.jsonl"]
    assert report["results"]["clusters"] == 1  # a.jsonl's document and its near copy sub/c.jsonl, indexed
