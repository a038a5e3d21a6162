"""The inspection helpers of a result (gpudedup/results/inspection.py): ``cluster``, ``pair`` and
``removed_rows`` against the result's own clusters and pairs tables, the texts given and an
exact Jaccard of Python sets of shingles (tests/oracles.py), for in-memory inputs of several
types and for a run through a work directory; the displays of a Report and an Index; and the
progress display the Python API chooses outside a notebook."""

from __future__ import annotations

import json
import random
from html.parser import HTMLParser

import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import gpudedup
from gpudedup.errors import ParameterError
from gpudedup.results.inspection import MEMBERS_SHOWN
from gpudedup.stages import NotebookTextProgress, Progress, RichProgress, progress_display

from oracles import jaccard, shingle_set

THRESHOLD = 0.6


def sample_texts() -> list[str]:
    """Documents with near-duplicates: groups of edited copies of a text (some edits chained, so
    that a cluster holds members that are no verified pair with its kept document), an exact
    copy, texts with HTML's special characters, and unrelated texts."""
    rng = random.Random(7)
    words = [f"w{n}" for n in range(400)]
    texts = []
    for group in range(4):
        base = rng.sample(words, 40)
        if group == 0:
            base[3] = "<b>&amp;</b>"
        texts.append(" ".join(base))
        chained = list(base)
        for _ in range(3 + group):  # each copy a few words from the one before it
            for _ in range(2):
                chained[rng.randrange(len(chained))] = rng.choice(words)
            texts.append(" ".join(chained))
    texts.append(texts[1])  # an identical copy
    texts += [" ".join(rng.sample(words, 30)) for _ in range(6)]
    order = list(range(len(texts)))
    rng.shuffle(order)
    return [texts[i] for i in order]


TEXTS = sample_texts()


@pytest.fixture(scope="module")
def result():
    return gpudedup.dedup(TEXTS, backend="cpu", threshold=THRESHOLD)


def members_of(result) -> dict[int, list[tuple]]:
    """cluster -> [(id, keep, kept_id)] in input order, from the clusters table."""
    members: dict[int, list[tuple]] = {}
    table = result.clusters.to_pydict()
    for doc_id, cluster, keep, kept_id in zip(table["id"], table["cluster"], table["keep"], table["kept_id"]):
        members.setdefault(cluster, []).append((doc_id, keep, kept_id))
    return members


def verified_pairs(result) -> dict[tuple, float]:
    pairs = result.pairs.to_pydict()
    return {(a, b): j for a, b, j in zip(pairs["id_a"], pairs["id_b"], pairs["jaccard"])}


def set_jaccard(first: str, second: str) -> float:
    return jaccard(shingle_set(first, "word", 5), shingle_set(second, "word", 5))


class Text(HTMLParser):
    """The text of an HTML fragment (entities resolved), and its <mark>ed words."""

    def __init__(self, fragment: str):
        super().__init__()
        self.parts: list[str] = []
        self.marked: list[str] = []
        self.in_mark = False
        self.feed(fragment)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.in_mark = self.in_mark or tag == "mark"

    def handle_endtag(self, tag):
        self.in_mark = self.in_mark and tag != "mark"

    def handle_data(self, data):
        self.parts.append(data)
        if self.in_mark:
            self.marked.append(data)

    @property
    def text(self) -> str:
        return "".join(self.parts)


def test_every_cluster_shows_every_member_with_its_text_and_its_jaccard_to_the_kept_one(result):
    members, pairs = members_of(result), verified_pairs(result)
    assert len(members) >= 4 and any(len(m) > 2 for m in members.values())
    unverified = 0
    for number, mine in members.items():
        view = result.cluster(number)
        kept_id = mine[0][2]
        assert view.number == number and view.ids[0] == kept_id
        assert sorted(view.ids) == sorted(i for i, _, _ in mine)
        assert view.ids[1:] == tuple(i for i, keep, _ in mine if i != kept_id)
        assert len(view.documents) == min(len(mine), MEMBERS_SHOWN)
        for document, value, verified in zip(view.documents, view.jaccard, view.verified):
            assert document.text == TEXTS[document.id] and document.cluster == number
            assert document.kept == (document.id == kept_id)
            if document.id == kept_id:
                assert value is None and not verified
                continue
            assert value == set_jaccard(TEXTS[kept_id], TEXTS[document.id])
            pair = (min(kept_id, document.id), max(kept_id, document.id))
            assert verified == (pair in pairs)
            if verified:
                assert value == pairs[pair]
            unverified += not verified
        # The same view from any member's id.
        assert result.cluster(id=mine[-1][0]) == view
        shown = Text(view._repr_html_())
        for doc_id in view.ids:
            assert str(doc_id) in shown.text
        for document in view.documents:
            assert document.text in shown.text  # (shorter than report.html's excerpt)
        assert "<script" not in view._repr_html_()
        text = repr(view)
        assert text == str(view) and text.startswith(f"Cluster {number}") and str(kept_id) in text
    assert unverified, "a member joined through others (the chained copies)"


def test_the_changed_words_are_marked_in_html_and_in_text(result):
    kept_id, removed_id = next((k, i) for mine in members_of(result).values() for i, keep, k in mine if not keep
                               and TEXTS[i] != TEXTS[k])
    view = result.pair(kept_id, removed_id)
    kept_words, removed_words = TEXTS[kept_id].split(), TEXTS[removed_id].split()
    shown = Text(view._repr_html_())
    # The words of each side that the other lacks are marked (difflib's alignment may mark a
    # word that the other has elsewhere too).
    changed = [w for w in removed_words if w not in kept_words]
    assert changed and set(changed + [w for w in kept_words if w not in removed_words]) <= set(shown.marked)
    text = repr(view)
    assert any(f"[{w}" in text for w in changed)


def test_control_characters_of_a_text_reach_the_terminal_as_escapes():
    """A document's ESC, BEL, NUL or C1 CSI would be a command to the terminal that prints a
    view, a right-to-left override would reverse the text after it, a line separator would
    break the layout's line: the text views write them as escapes (\\x1b, \\u202e; line
    breaks and tabs are the wrapping's)."""
    text = ("one two three four five six seven \x1b[31mred\x1b[0m \x07 bell \x00 nul \x9b[2J tab\tend "
            "\u202eoverride\u202c and\u2028separated")
    result = gpudedup.dedup([text, text + " more"], threshold=0.5, backend="cpu")
    for view in (result.pair(0, 1), result.cluster(0)):
        shown = repr(view)
        assert not any(ord(c) < 32 and c != "\n" or 0x7F <= ord(c) <= 0x9F or c in "\u202e\u202c\u2028"
                       for c in shown), ascii(shown)
        assert all(escaped in shown for escaped in ("\\x1b[31mred\\x1b[0m", "\\x07", "\\x00", "\\x9b[2J",
                                                    "\\u202eoverride\\u202c", "and\\u2028separated"))
    # Escaped before the layout: the two columns of the pair view stay apart at one place.
    columns = {line.index(" | ") for line in repr(result.pair(0, 1)).splitlines() if " | " in line}
    assert len(columns) == 1, repr(result.pair(0, 1))


def test_a_pair_gives_the_exact_jaccard_of_its_shingle_sets(result):
    pairs = verified_pairs(result)
    assert pairs
    for (a, b), value in pairs.items():
        view = result.pair(a, b)
        assert view.verified and view.jaccard == value == set_jaccard(TEXTS[a], TEXTS[b])
        assert (view.first.id, view.second.id) == (a, b)
        assert view.first.cluster == view.second.cluster is not None
    clustered = {i for mine in members_of(result).values() for i, _, _ in mine}
    alone = [i for i in range(len(TEXTS)) if i not in clustered]
    view = result.pair(alone[0], alone[1])
    assert not view.verified and view.jaccard == set_jaccard(TEXTS[alone[0]], TEXTS[alone[1]])
    assert view.first.cluster is None and view.first.kept and "no cluster" in repr(view)
    shown = Text(view._repr_html_())
    assert TEXTS[alone[0]] in shown.text and TEXTS[alone[1]] in shown.text


def test_a_pair_implied_by_identical_copies_is_a_pair_as_all_pairs_lists_it():
    """A copy pairs as the first copy of its group does (pairs lists copies as a star around it):
    pair() of a document and the copy of its verified partner, and of two copies, says what
    all_pairs() says, with the Jaccard of Python sets."""
    base = "the quick brown fox jumps over the lazy dog and runs far away into the deep green forest"
    near = base.replace("deep", "dark")
    texts = [base, near, "entirely different words make up this one text here today ok", near, near]
    result = gpudedup.dedup(texts, backend="cpu", threshold=0.5)
    listed = {(row["id_a"], row["id_b"]): row["jaccard"] for row in result.all_pairs().to_pylist()}
    assert (0, 3) in listed and (3, 4) in listed and (0, 3) not in {
        (row["id_a"], row["id_b"]) for row in result.pairs.to_pylist()}
    for (a, b), value in listed.items():
        view = result.pair(a, b)
        assert view.verified and view.jaccard == pytest.approx(value) and value == set_jaccard(texts[a], texts[b])
    assert not result.pair(0, 2).verified


def expected_removed(result) -> list[tuple]:
    """(id, kept_id, cluster, Jaccard of Python sets) of every removed document, in input order."""
    return [(i, k, c, set_jaccard(TEXTS[k], TEXTS[i]))
            for i, c, keep, k in zip(*result.clusters.to_pydict().values()) if not keep]


@pytest.mark.parametrize("kind", ["list", "records", "pandas", "series", "polars", "arrow"])
def test_the_removed_rows_come_in_the_inputs_type_with_the_kept_id_and_the_jaccard(kind):
    records = [{"doc": f"d{n}", "text": text, "n": n} for n, text in enumerate(TEXTS)]
    data, options = {
        "list": (TEXTS, {}),
        "records": (records, {"id_field": "doc"}),
        "pandas": (pd.DataFrame(records).set_index(pd.Index([10 * n for n in range(len(TEXTS))])), {"id_field": "doc"}),
        "series": (pd.Series(TEXTS), {}),
        "polars": (pl.DataFrame(records), {}),
        "arrow": (pa.Table.from_pylist(records), {"id_field": "doc"}),
    }[kind]
    result = gpudedup.dedup(data, backend="cpu", threshold=THRESHOLD, **options)
    removed = result.removed_rows()
    name = "doc" if "id_field" in options else "id"
    if kind in ("list", "records"):
        assert isinstance(removed, list) and all(isinstance(row, dict) for row in removed)
        rows = removed
    elif kind in ("pandas", "series"):
        assert isinstance(removed, pd.DataFrame)
        rows = removed.to_dict("records")
        if kind == "pandas":  # the removed rows' own index labels
            assert list(removed.index) == [10 * row["n"] for row in rows]
    elif kind == "polars":
        assert isinstance(removed, pl.DataFrame)
        rows = removed.to_dicts()
    else:
        assert isinstance(removed, pa.Table)
        rows = removed.to_pylist()
    position = (lambda i: int(i[1:])) if name == "doc" else (lambda i: i)
    got = [(position(r[name]), position(r["kept_id"]), r["cluster"], r["jaccard"]) for r in rows]
    assert got == expected_removed(gpudedup.dedup(TEXTS, backend="cpu", threshold=THRESHOLD))
    assert all(row["text"] == TEXTS[position(row[name])] for row in rows)
    if kind in ("records", "pandas", "polars", "arrow"):  # every input column kept
        assert all(row["n"] == position(row[name]) for row in rows)


def test_a_staged_run_shows_its_clusters_and_removed_rows_from_its_files(tmp_path, result):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"id": n, "text": t}) + "\n" for n, t in enumerate(TEXTS)))
    staged = gpudedup.dedup(path, id_field="id", backend="cpu", threshold=THRESHOLD, work_dir=tmp_path / "work")
    removed = staged.removed_rows()
    assert isinstance(removed, pa.Table)
    assert [(r["id"], r["kept_id"], r["cluster"], r["jaccard"]) for r in removed.to_pylist()] == \
        expected_removed(result)
    for number in members_of(staged):
        assert staged.cluster(number) == result.cluster(number)


def test_a_column_the_removed_rows_add_is_refused_when_the_input_has_it():
    table = pa.table({"text": TEXTS, "jaccard": list(range(len(TEXTS)))})
    result = gpudedup.dedup(table, backend="cpu", threshold=THRESHOLD)
    with pytest.raises(ParameterError, match="column 'jaccard'"):
        result.removed_rows()


def test_an_id_column_that_is_not_the_ids_is_named_as_such(tmp_path):
    """A file's ``id`` column beside ids of the run's own (``path:line``, no id_field given):
    the refusal says how to name the documents by it, not that the ids are row positions."""
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"id": n, "text": t}) + "\n" for n, t in enumerate(TEXTS)))
    result = gpudedup.dedup(path, backend="cpu", threshold=THRESHOLD)
    with pytest.raises(ParameterError, match="column 'id'") as refused:
        result.removed_rows()
    assert "pass id_field='id'" in str(refused.value) and "row positions" not in str(refused.value)
    # Texts in a Series named "id": no id_field= would name documents by them.
    series = gpudedup.dedup(pd.Series(TEXTS, name="id"), backend="cpu", threshold=THRESHOLD)
    with pytest.raises(ParameterError, match="column 'id'") as refused:
        series.removed_rows()
    assert "id_field" not in str(refused.value)


def test_wrong_numbers_and_ids_are_named(result):
    count = result.report["results"]["clusters"]
    clustered = {i for mine in members_of(result).values() for i, _, _ in mine}
    alone = next(i for i in range(len(TEXTS)) if i not in clustered)
    cases = [(lambda: result.cluster(count), f"no cluster {count}: the run's clusters are numbered 0 to {count - 1}"),
             (lambda: result.cluster(), "a cluster's number, or id="),
             (lambda: result.cluster(0, id=1), "a cluster's number, or id="),
             (lambda: result.cluster(id=len(TEXTS)), f"no document of this run has the id {len(TEXTS)}"),
             (lambda: result.cluster(id=2**64), f"no document of this run has the id {2**64}"),
             (lambda: result.pair(2**70, 0), f"no document of this run has the id {2**70}"),
             (lambda: result.cluster(id="3"), "the ids of this run are integers; got '3'"),
             (lambda: result.cluster(id=alone), f"the document {alone} is in no cluster"),
             (lambda: result.pair(1, 1), "two documents; got the id 1 twice")]
    for call, message in cases:
        with pytest.raises(ParameterError, match=message.replace("(", r"\(").replace(")", r"\)")):
            call()


def test_a_report_and_an_index_show_themselves_in_a_few_lines_and_as_cards(result, tmp_path):
    report = result.report
    text = repr(report)
    r = report["results"]
    assert text.startswith(f"Report: {report['input']['documents']} documents, {r['kept_documents']} kept")
    assert all(len(line) <= 80 for line in text.splitlines()) and len(text.splitlines()) <= 8
    shown = Text(report._repr_html_())
    for value in (r["kept_documents"], r["removed_documents"], r["clusters"], r["verified_pairs"]):
        assert f"{value:,}" in shown.parts

    index = gpudedup.Index.create(tmp_path / "idx", threshold=THRESHOLD)
    index.add(TEXTS[:10], backend="cpu")
    text = repr(index)
    info = index.info()
    assert text.splitlines()[0] == f"Index({info['path']})"
    assert f"{info['documents']:,} documents in 1 segment, " in text
    assert all(len(line) <= 80 for line in text.splitlines()[1:])  # (the first is the index's path)
    shown = Text(index._repr_html_())
    assert info["path"] in shown.text and f"{info['documents']:,}" in shown.parts


def test_progress_is_off_by_default_outside_a_notebook():
    assert type(progress_display(None)) is Progress and type(progress_display(False)) is Progress
    assert isinstance(progress_display(True), RichProgress)
    lines = NotebookTextProgress()
    lines._show = lambda force: None  # (no IPython display outside a kernel)
    lines.start("Reading", 3)
    lines.advance(2)
    lines.start("Verifying pairs (exact)", 10)
    lines.stop()
    first, second = lines.text().splitlines()
    assert first.split()[:2] == ["Reading", "3/3"] and second.split()[3] == "10/10"


@pytest.mark.timeout(60)  # (a new LocalCluster's workers start their kernels: about 12 s on 2 cores)
def test_a_dask_run_shows_its_clusters_pairs_and_removed_rows_from_its_work_directory(tmp_path, result, client):
    """A cluster's run holds its clusters in parts of its work directory and its texts in its
    input files: the views read them from there, as the in-memory run's."""
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps({"id": n, "text": t}) + "\n" for n, t in enumerate(TEXTS)))
    run = gpudedup.dedup(path, id_field="id", backend="cpu", threshold=THRESHOLD, client=client,
                         work_dir=tmp_path / "work")
    assert type(run._outcome.clustered).__name__ == "ClusterParts"
    assert [(r["id"], r["kept_id"], r["cluster"], r["jaccard"]) for r in run.removed_rows().to_pylist()] == \
        expected_removed(result)
    for number in members_of(result):
        assert run.cluster(number) == result.cluster(number)
    for a, b in verified_pairs(result):
        assert run.pair(a, b) == result.pair(a, b)


def test_a_cluster_that_keeps_several_indexed_documents_marks_each_of_them(tmp_path):
    """Against an index every indexed member is kept: the cluster's view (text and html) and
    report.html's cluster mark each one kept, and only the new document removed."""
    words = [f"w{n}" for n in range(60)]
    index = gpudedup.Index.create(tmp_path / "idx", threshold=0.75, shingle="word", ngram=1)
    index.add([{"id": "X", "text": " ".join(words[0:20])}], id_field="id", progress=False)
    index.add([{"id": "Y", "text": " ".join(words[4:24])}], id_field="id", progress=False)
    new = tmp_path / "new.jsonl"  # (a file: the write's conservation check reads it again)
    new.write_text(json.dumps({"id": "Z", "text": " ".join(words[2:22])}) + "\n")
    result = index.dedup(new, id_field="id", progress=False)
    view = result.cluster(0)
    assert view.kept == (True, True, False)
    assert "Members: X (kept), Y (kept), Z" in repr(view)
    assert "<bdi>Y</bdi> (kept), <bdi>Z</bdi>." in view._repr_html_()
    result.write(tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text()
    assert "<bdi>Y</bdi> (kept), <bdi>Z</bdi>." in page
    block = page.split('<div class="cluster">')[1]
    assert [card.split('"', 1)[0] for card in block.split('<div class="doc ')[1:]] == ["kept", "kept", "removed"]
