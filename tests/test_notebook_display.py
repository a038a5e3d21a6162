"""What a notebook shows, through a real Jupyter kernel (nbclient, ipykernel): one notebook,
run once for the module, that deduplicates a few documents and displays the result, its report,
an index, a cluster, a pair and an evaluation, with the progress gpudedup shows by default in a
notebook. The
outputs are checked against the result's own tables, printed by the notebook's last cell."""

from __future__ import annotations

import importlib.util
import json
import time
from html.parser import HTMLParser

import nbformat
import pytest
from nbclient import NotebookClient

from test_inspect import TEXTS, THRESHOLD

# Each cell's source, by name; the notebook runs them in this order.
CELLS = {
    # numpy's route of the CPU kernels: no numba compilation inside the kernel (the results are
    # the compiled route's: tests/test_verify.py), so that the notebook runs in a few seconds.
    "setup": "import os, json\nos.environ['GPUDEDUP_CPU_KERNELS'] = 'numpy'\nimport gpudedup\n"
             f"texts = json.loads({json.dumps(json.dumps(TEXTS))})",
    "dedup": f"result = gpudedup.dedup(texts, backend='cpu', threshold={THRESHOLD})",
    "result": "result",
    "report": "result.report",
    "index": f"index = gpudedup.Index.create('idx', threshold={THRESHOLD})\n"
             "index.add(texts[:10], backend='cpu', progress=False)\nindex",
    "cluster": "result.cluster(0)",
    "pair": "first = result.pairs.to_pylist()[0]\nresult.pair(first['id_a'], first['id_b'])",
    "evaluation": "from gpudedup.evaluate import evaluate, expand_grid\n"
                  "from gpudedup.io.python_inputs import strings_corpus\n"
                  "settings, notes = expand_grid(num_perm=[32, 64], bands=[None], rows=[None], shingle=['word'], "
                  "ngram=[5], threshold=[0.5, 0.8])\n"
                  "evaluation = evaluate(strings_corpus(texts), settings, backend='cpu', notes=notes)\nevaluation",
    "tables": "print(json.dumps({'clusters': result.clusters.to_pylist(), 'pairs': result.pairs.to_pylist(), "
              "'report': result.report.as_dict(), 'index': index.info(), "
              "'recommended': [[r.threshold, r.index, list(r.indices)] for r in evaluation.recommended()]}))",
}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, list[dict]]:
    """Each cell's outputs, by the cell's name (one kernel, one run)."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in CELLS.values()]
    started = time.perf_counter()
    NotebookClient(notebook, timeout=60, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path_factory.mktemp("notebook"))}}).execute()
    assert time.perf_counter() - started < 30, "the notebook takes seconds, not tens of them"
    return {name: cell.outputs for name, cell in zip(CELLS, notebook.cells)}


@pytest.fixture(scope="module")
def tables(outputs) -> dict:
    """The result's clusters and pairs, its report and the index's info, as the kernel gave them."""
    return json.loads("".join(o["text"] for o in outputs["tables"] if o["output_type"] == "stream"))


def shown(outputs: list[dict], mime: str) -> str:
    """The cell's value as ``mime`` (its execute_result)."""
    values = [o["data"][mime] for o in outputs if o["output_type"] == "execute_result"]
    assert len(values) == 1, outputs
    return values[0]


class Page(HTMLParser):
    """An HTML fragment parsed: its text pieces (entities resolved) and whether it closed every
    element it opened (void elements aside)."""

    VOID = {"br", "hr", "img", "meta", "input", "link"}

    def __init__(self, fragment: str):
        super().__init__()
        self.parts: list[str] = []
        self.open: list[str] = []
        self.feed(fragment)
        self.close()

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open.pop() == tag, f"</{tag}> closes <{self.open[-1:]}>"

    def handle_data(self, data):
        self.parts.append(data)

    @property
    def text(self) -> str:
        return "".join(self.parts)


def page(html: str) -> Page:
    parsed = Page(html)
    assert parsed.open == [], f"unclosed: {parsed.open}"
    assert "<script" not in html
    return parsed


@pytest.mark.timeout(90)
def test_progress_shows_in_a_notebook_by_default(outputs, tables):
    run = outputs["dedup"]
    assert not [o for o in run if o["output_type"] == "stream" and "ipywidgets" in o["text"]], run
    if importlib.util.find_spec("ipywidgets") is None:  # the plain-text lines, updated in place
        [display] = [o for o in run if o["output_type"] == "display_data"]
        lines = display["data"]["text/plain"].splitlines()
        bands = tables["report"]["parameters"]["bands"]
        assert lines[0].split()[:3] == ["Shingling", "+", "MinHash"]
        assert [line for line in lines if line.startswith("Finding candidate pairs")][0].split()[3] == \
            f"{bands}/{bands}"
        for line in lines:  # every stage finished
            done, total = line.split("/")[0].split()[-1], line.split("/")[1].split()[0]
            assert done == total, line
    else:  # rich's bars, in a widget
        assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in run), run


def test_a_result_shows_its_counts_and_largest_clusters(outputs, tables):
    report, clusters = tables["report"], tables["clusters"]
    r = report["results"]
    parsed = page(shown(outputs["result"], "text/html"))
    for value in (report["input"]["documents"], r["kept_documents"], r["removed_documents"], r["clusters"]):
        assert f"{value:,}" in parsed.parts
    kept = [c["id"] for c in clusters if c["keep"] and c["cluster"] == 0]
    assert str(kept[0]) in parsed.parts
    assert shown(outputs["result"], "text/plain").startswith(f"DedupResult({report['input']['documents']} documents")


def test_a_report_shows_its_cards_and_fits_a_terminal(outputs, tables):
    r = tables["report"]["results"]
    parsed = page(shown(outputs["report"], "text/html"))
    for value in (r["kept_documents"], r["removed_documents"], r["verified_pairs"]):
        assert f"{value:,}" in parsed.parts
    assert f"threshold {THRESHOLD}" in parsed.text
    text = shown(outputs["report"], "text/plain")
    assert text.startswith("Report: ") and all(len(line) <= 80 for line in text.splitlines())


def test_an_index_shows_its_path_documents_and_parameters(outputs, tables):
    info = tables["index"]
    parsed = page(shown(outputs["index"], "text/html"))
    assert info["path"] in parsed.text and f"{info['documents']:,}" in parsed.parts
    assert f"threshold {THRESHOLD}" in parsed.text
    assert shown(outputs["index"], "text/plain").startswith(f"Index({info['path']})")


def test_a_cluster_shows_every_member_and_its_text(outputs, tables):
    members = [c for c in tables["clusters"] if c["cluster"] == 0]
    parsed = page(shown(outputs["cluster"], "text/html"))
    for member in members:
        assert str(member["id"]) in parsed.text and TEXTS[member["id"]] in parsed.text
    kept = members[0]["kept_id"]
    text = shown(outputs["cluster"], "text/plain")
    assert text.startswith(f"Cluster 0 · {len(members)} documents") and f"kept: {kept}" in text


def test_a_pair_shows_both_texts_and_their_jaccard(outputs, tables):
    first = tables["pairs"][0]
    parsed = page(shown(outputs["pair"], "text/html"))
    assert TEXTS[first["id_a"]] in parsed.text and TEXTS[first["id_b"]] in parsed.text
    assert f"exact Jaccard {first['jaccard']:.4f} (a verified pair" in parsed.text
    text = shown(outputs["pair"], "text/plain").replace("\n", " ")
    assert f"Documents {first['id_a']} and {first['id_b']}: exact Jaccard {first['jaccard']:.4f}" in text


def test_an_evaluation_shows_a_table_per_threshold_with_its_recommended_setting(outputs, tables):
    """One table per threshold, a row per setting scored against that threshold's exact pairs,
    the recommended one marked, as Evaluation.recommended() says (printed by the kernel)."""
    html = shown(outputs["evaluation"], "text/html")
    page(html)

    class Rows(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tables: list[list[tuple[bool, list[str]]]] = []
            self.cell: list[str] | None = None

        def handle_starttag(self, tag, attrs):
            if tag == "table" and dict(attrs).get("class") == "gpudedup-settings":
                self.tables.append([])
            elif tag == "tr" and self.tables and dict(attrs).get("class") != "head":
                self.tables[-1].append((dict(attrs).get("class") == "gpudedup-recommended", []))
            elif tag == "td":
                self.cell = []

        def handle_endtag(self, tag):
            if tag == "td" and self.cell is not None:
                self.tables[-1][-1][1].append("".join(self.cell))
                self.cell = None

        def handle_data(self, data):
            if self.cell is not None:
                self.cell.append(data)

    rows = Rows()
    rows.feed(html)
    found = [[(marked, cells) for marked, cells in table if cells] for table in rows.tables]
    assert len(found) == len(tables["recommended"]) == 2
    assert [threshold for threshold, _, _ in tables["recommended"]] == [0.5, 0.8]
    for table, (_, index, indices) in zip(found, tables["recommended"]):
        assert [int(cells[1]) for _, cells in table] == indices  # a row per setting of that threshold
        assert [int(cells[1]) for marked, cells in table if marked] == [index]
    text = shown(outputs["evaluation"], "text/plain")
    assert text.startswith("Evaluation(4 settings") and all(len(line) <= 80 for line in text.splitlines())
