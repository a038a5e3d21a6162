"""report.html and the figures: the report's numbers, self-containment, escaping, the SVG
figures, the evaluation's among them (well-formed, drawn to scale, written without a plotting
library), and a render in headless Chromium checked pixel by pixel (skipped without Chromium, a
failure in CI)."""

import html
import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from gpudedup.core.shingling import ShingleSpec

import gpudedup
from gpudedup.core.lsh import collision_probability, steepest_similarity
from gpudedup.pipeline.shown import verified_edges, verified_histogram
from gpudedup.results import html_report, svg_figures
from conservation import check_output_dir

SAMPLE = Path(gpudedup.__file__).parent / "data" / "bible_sample.jsonl.gz"


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory):
    """The bundled sample deduplicated and written: (result, output directory)."""
    result = gpudedup.dedup(SAMPLE, id_field="id", backend="cpu")
    out = tmp_path_factory.mktemp("report") / "out"
    result.write(out)
    return result, out


def section(page: str, name: str) -> str:
    """The page's section (or folded section) of id ``name``."""
    start = page.index(f'id="{name}"')
    tag = page[page.rfind("<", 0, start) + 1:start].split()[0]  # (section or details)
    return page[start:page.index(f"</{tag}>\n<", start)]


def visible_text(page: str) -> str:
    """The page's text as a reader sees it (the figures' text too): no tags, entities decoded."""
    page = re.sub(r"<style>.*?</style>", " ", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page)).replace("\u00a0", " ")


def shows(text: str, value: str) -> bool:
    """``value`` appears in ``text`` as a whole number (not inside a longer one)."""
    return re.search(rf"(?<![\d.,]){re.escape(value)}(?![\d,]|\.\d)", text) is not None


def test_report_html_shows_the_numbers_of_report_json(sample_run):
    result, out = sample_run
    report = json.loads((out / "report.json").read_text())
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page == html_report.render(result, {name: (out / file).read_text(encoding="utf-8")
                                               for name, file in html_report.FIGURE_FILES.items()})
    text = visible_text(page)
    r, p = report["results"], report["parameters"]
    numbers = {
        "documents": report["input"]["documents"], "clusters": r["clusters"],
        "removed": r["removed_documents"], "kept": r["kept_documents"],
        "verified pairs": r["verified_pairs"], "candidate pairs": r["candidate_pairs"],
        "checked pairs": r["exactly_checked_pairs"], "bands": p["bands"], "rows": p["rows"],
    }
    assert report["input"]["documents"] >= 1000  # so that the thousands separator is tested
    for name, value in numbers.items():
        assert shows(text, f"{value:,}"), f"{name} = {value:,} is not on the page"
    assert shows(text, f"{p['threshold']:g}")
    assert f"{p['bands']:,} bands × {p['rows']:,} rows" in text
    assert p["banding_rule"] in text
    # Time and memory per stage, as report.json has them.
    for stage, figures in report["stages"].items():
        assert stage in text
        if "seconds" in figures:
            assert f"{figures['peak_rss_mb']:,.1f} MiB" in text
    assert f"{report['peak_rss_mb']:,.1f} MiB" in text
    assert "write" in report["stages"]


def test_report_html_is_self_contained(sample_run):
    _, out = sample_run
    page = (out / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I)
    assert "http://" not in page and "https://" not in page
    for forbidden in ("<script", "<link", "<iframe", "@import", "url("):
        assert forbidden not in page.lower()
    assert "src=" not in page and "<img" not in page
    # Both figures inline, each the very SVG written beside the page (less its XML declaration
    # and namespace, which HTML supplies).
    embedded = re.findall(r"<svg\b.*?</svg>", page, flags=re.S)
    written = [(out / file).read_text(encoding="utf-8") for file in html_report.FIGURE_FILES.values()]
    assert len(embedded) == len(html_report.FIGURE_FILES) and embedded == [svg_figures.inline(svg) for svg in written]
    for svg in written:
        assert svg.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<svg xmlns="http://www.w3.org/2000/svg"')
        assert ET.fromstring(svg.encode("utf-8")).tag == "{http://www.w3.org/2000/svg}svg"


def test_largest_clusters_show_members_and_exact_similarity(sample_run):
    result, out = sample_run
    page = (out / "report.html").read_text(encoding="utf-8")
    text = visible_text(page)
    clusters = result.clusters.to_pydict()
    sizes = np.bincount(clusters["cluster"])
    largest = int(np.lexsort((np.arange(sizes.shape[0]), -sizes))[0])
    assert f"Cluster {largest:,} · {sizes[largest]:,} documents" in text
    kept = [i for i, c, k in zip(clusters["id"], clusters["cluster"], clusters["keep"]) if c == largest and k]
    assert f"kept {kept[0]}" in " ".join(text.split())  # the kept document's tag and id
    # Every similarity on the page is the exact Jaccard of the two texts: the verified pairs'
    # from pairs.parquet, the others computed again.
    rows = result._outcome.clusters.docs  # (the clusters table names them by id, in this order)
    row_of = dict(zip(clusters["id"], rows))
    texts = result.table["text"]
    pairs = result.pairs.to_pydict()
    for a, b, j in list(zip(pairs["id_a"], pairs["id_b"], pairs["jaccard"]))[:20]:
        computed = html_report.exact_jaccard(texts[int(row_of[a])].as_py(), texts[int(row_of[b])].as_py(),
                                             ShingleSpec("word", 5))
        assert computed == pytest.approx(j, abs=1e-12)
    largest_section = section(page, "clusters")
    assert len(re.findall(r'class="doc kept"', largest_section)) == min(5, sizes.shape[0])


def test_texts_and_ids_are_escaped(tmp_path):
    evil = "<script>alert('x')</script> & <b>bold</b> " + " ".join(f"word{i}" for i in range(40))
    table = pa.table({"doc_id": ["<a1>", "<a2>", "b"], "text": [evil, evil + " more", "other text"]})
    result = gpudedup.dedup(table, id_field="doc_id", backend="cpu", threshold=0.5)
    assert result.report["results"]["clusters"] == 1
    page = html_report.render(result, figures={})
    assert "<script" not in page and "<b>bold" not in page and "<a1>" not in page
    assert "&lt;script&gt;" in page and "&lt;a1&gt;" in page
    # The removed document's extra word is highlighted against the kept one.
    assert "<mark>more</mark>" in page


def test_a_word_the_excerpt_cuts_off_is_not_marked():
    """Two copies holding a word longer than the excerpt: the excerpt ends in part of it, which
    is not a difference (the reference, cut longer, holds more of it)."""
    long_word = "x" * 3000
    texts = [f"some words before {long_word} after", f"some words before {long_word} after"]
    result = gpudedup.dedup(texts, backend="cpu", progress=False)
    assert result.report["results"]["removed_documents"] == 1
    page = html_report.render(result, figures={})
    shown = re.findall(r'<p class="text">(.*?)</p>', section(page, "clusters"), flags=re.S)
    assert len(shown) == 2 and all("xxxx" in text and "<mark>" not in text for text in shown)
    assert "[x" not in str(result.cluster(0))  # (the terminal's view of the same excerpt)
    # A cut word that does differ from the kept text's is marked: another long word, and a
    # short one cut mid-word where the text has no space near the cut (tabs).
    marked, _ = html_report.marked_excerpt(f"some words before {'y' * 3000}", f"some words before {'x' * 3000}")
    assert marked.endswith("</mark>")
    words = [f"w{i:03d}" for i in range(200)]
    changed = list(words)
    changed[119] = "zzzz"
    marked, cut = html_report.marked_excerpt("ab" + "\t".join(changed), "ab" + "\t".join(words))
    assert cut and marked.endswith("<mark>zzz</mark>")
    assert "<mark>" not in html_report.marked_excerpt("ab" + "\t".join(words), "ab" + "\t".join(words))[0]


def test_ids_are_cut_and_isolated_and_the_footer_names_every_file(tmp_path):
    """An id of megabytes is cut on the page (report.json keeps it whole) and every id is
    isolated (<bdi>: a right-to-left override in one does not turn the text after it), in
    report.html and the notebook's views; the footer names removed rows and errors.jsonl
    where they were written."""
    text = " ".join(f"word{i}" for i in range(40))
    long_id, rtl_id = "x" * 2_000_000, "rtl\u202e"
    table = pa.table({"doc_id": [long_id, rtl_id, "c"], "text": [text, text + " more", "other words entirely"]})
    result = gpudedup.dedup(table, id_field="doc_id", backend="cpu", threshold=0.5, on_error="skip")
    result.write(tmp_path / "out", write_removed=True)
    page = (tmp_path / "out" / "report.html").read_text()
    views = [result._repr_html_(), result.cluster(0)._repr_html_(), result.pair(long_id, rtl_id)._repr_html_()]
    for markup in [page, *views]:
        assert len(markup) < 200_000 and "x" * 121 not in markup and "x" * 120 + "…" in markup
        assert f"<bdi>{rtl_id}</bdi>" in markup
    footer = re.sub("<[^>]*>", "", page[page.index("Files of this run"):])
    assert "removed.parquet" in footer and "errors.jsonl" in footer
    assert result.clusters["id"].to_pylist().count(long_id) == 1  # (the tables hold it whole)


def test_the_report_s_figures_need_no_plotting_library(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    result = gpudedup.dedup(["the cat sat on the mat today", "the cat sat on the mat today!", "a dog"],
                            shingle="char", ngram=3, threshold=0.7, backend="cpu")
    result.write(tmp_path / "out")
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert "report.html" in names and set(html_report.FIGURE_FILES.values()) <= set(names)
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert page.count("<svg") == len(html_report.FIGURE_FILES)


def svg_elements(svg: str, tag: str, attribute: str, value: str | None = None) -> list:
    """The elements ``tag`` with ``attribute`` (equal to ``value`` where given) in an SVG file's
    text (parsed: it is well-formed)."""
    root = ET.fromstring(svg.encode("utf-8"))
    return [e for e in root.iter(f"{{http://www.w3.org/2000/svg}}{tag}")
            if e.get(attribute) is not None and value in (None, e.get(attribute))]


def curve_values(svg: str, limits, name: str = "s-curve") -> tuple[np.ndarray, np.ndarray]:
    """(s, P) of the points of the drawn curve ``name`` (the S-curve), read back from the axes'
    box and the P axis' limits."""
    (polyline,) = svg_elements(svg, "polyline", "data-curve", name)
    points = np.array([[float(v) for v in pair.split(",")] for pair in polyline.get("points").split()])
    left, top, right, bottom = svg_figures.PLOT_BOX
    s = (points[:, 0] - left) / (right - left)
    return s, limits[0] + (bottom - points[:, 1]) / (bottom - top) * (limits[1] - limits[0])


def test_svg_figures_are_well_formed_and_drawn_to_scale():
    # The S-curve: at a few s, the height of the drawn point is P(s) (to the 0.01-unit rounding
    # of the coordinates: under 1e-4 of the axis).
    for bands, rows, threshold in [(16, 6, 0.8), (1, 1, None), (20, 5, 0.5)]:
        svg = svg_figures.s_curve_svg(bands, rows, threshold)
        s, p = curve_values(svg, svg_figures.S_CURVE_LIMITS)
        assert len(s) == svg_figures.CURVE_POINTS and s[0] == pytest.approx(0, abs=1e-4)
        for at in (0.3, 0.5, 0.62, 0.8, 0.9):
            i = int(np.argmin(np.abs(s - at)))
            assert s[i] == pytest.approx(at, abs=1e-3)
            assert p[i] == pytest.approx(float(collision_probability(at, bands, rows)), abs=1e-3)
        assert len(svg_elements(svg, "line", "data-mark", "threshold")) == (threshold is not None)
    # The histogram: one bar per non-empty bin of verified_histogram, in order, each as
    # high as its count on the axis (linear: proportional; log: the log of the count, from 0.7).
    rng = np.random.default_rng(3)
    jaccard = np.concatenate([rng.random(4000), np.full(30, 0.97), np.full(7, 1.0)])
    for log in (False, True):
        counts = verified_histogram(jaccard, 0.8)
        svg = svg_figures.candidates_histogram_svg(16, 6, 0.8, counts, int((jaccard < 0.8).sum()), log=log)
        bars = svg_elements(svg, "rect", "data-count")
        assert [int(bar.get("data-count")) for bar in bars] == counts[counts > 0].tolist()
        heights = np.array([float(bar.get("height")) for bar in bars])
        shown = counts[counts > 0].astype(float)
        scale = np.log(shown / 0.7) if log else shown
        assert np.allclose(heights / scale, heights[0] / scale[0], rtol=1e-3)
        assert ("log scale" in svg) == log
        s, p = curve_values(svg, (0.0, 1.04))
        assert p[int(np.argmin(np.abs(s - 0.7)))] == pytest.approx(float(collision_probability(0.7, 16, 6)), abs=1e-3)
        rejected = int((jaccard < 0.8).sum())
        assert f"{jaccard.size:,} candidate pairs checked exactly, {rejected:,} rejected" in svg
    # The log rule: the fullest bin over 100 times the emptiest non-empty one.
    assert "log scale" in svg_figures.candidates_histogram_svg(16, 6, 0.8, np.array([101] + [1] + [0] * 8), 0)
    assert "log scale" not in svg_figures.candidates_histogram_svg(16, 6, 0.8, np.array([100] + [1] + [0] * 8), 0)
    # Edge cases parse: every pair rejected, none checked at threshold 1.
    for svg in (svg_figures.candidates_histogram_svg(16, 6, 0.8, verified_histogram(np.full(50, -1.0), 0.8), 50),
                svg_figures.candidates_histogram_svg(20, 5, 1.0, verified_histogram(np.zeros(0), 1.0), 0)):
        assert svg_elements(svg, "rect", "data-count") == []


def test_render_from_a_notebook_result_without_write():
    result = gpudedup.dedup(["one two three four five six", "one two three four five six",
                             "seven eight nine"], shingle="word", ngram=2, backend="cpu")
    page = html_report.render(result, figures={})
    text = visible_text(page)
    assert "Cluster 0 · 2 documents" in text and "write" not in result.report["stages"]


def test_the_recall_figure_is_drawn_to_scale():
    edges = np.linspace(0, 1, 11)
    recall = np.linspace(0, 1, 10)
    recall[0] = np.nan
    pair_counts = np.arange(10) * 3
    svg = svg_figures.recall_by_similarity_svg(edges, recall, "gpudedup", pair_counts=pair_counts, threshold=0.8,
                                               bands=16, rows=6)
    # The true pairs: a bar per non-empty bin, as high as its count.
    bars = svg_elements(svg, "rect", "data-count")
    assert [int(bar.get("data-count")) for bar in bars] == pair_counts[pair_counts > 0].tolist()
    heights = np.array([float(bar.get("height")) for bar in bars])
    assert np.allclose(heights / pair_counts[1:], heights[0] / pair_counts[1], rtol=1e-3)
    # The recall line: a point at each bin's centre that has a value, at its height on the axis.
    s, value = curve_values(svg, svg_figures.S_CURVE_LIMITS, "recall-0")
    assert np.allclose(s, (edges[1:-1] + edges[2:]) / 2, atol=1e-4) and np.allclose(value, recall[1:], atol=1e-3)
    s, p = curve_values(svg, svg_figures.S_CURVE_LIMITS)
    assert p[int(np.argmin(np.abs(s - 0.7)))] == pytest.approx(float(collision_probability(0.7, 16, 6)), abs=1e-3)
    assert len(svg_elements(svg, "line", "data-mark", "threshold")) == 1
    assert "gpudedup" in svg and "threshold 0.8" in svg and "true pairs per bin" in svg
    # Several series, each its own line; bins that do not match the edges are refused.
    two = svg_figures.recall_by_similarity_svg(edges, {"a": recall, "b <&>": recall / 2})
    assert len(svg_elements(two, "polyline", "data-curve")) == 2 and "b &lt;&amp;&gt;" in two
    assert svg_elements(two, "rect", "data-count") == [] and "true pairs" not in two
    for wrong in ({"recall_per_bin": recall[:5]}, {"recall_per_bin": recall, "pair_counts": pair_counts[:3]}):
        with pytest.raises(ValueError):
            svg_figures.recall_by_similarity_svg(edges, **wrong)
    with pytest.raises(ValueError):
        svg_figures.recall_by_similarity_svg([0.5, 0.5], [1.0])
    # The similarity axis from a threshold: every tick's label its own value.
    for low, high in ((0.8, 1.0), (0.9, 1.0), (1.0, 1.02), (0.0, 1.0)):
        svg = svg_figures.recall_by_similarity_svg(np.linspace(low, high, 6), np.ones(5))
        root = ET.fromstring(svg.encode("utf-8"))
        baseline = f"{svg_figures.PLOT_BOX[3] + 19.5:.2f}"
        labels = [e.text for e in root.iter("{http://www.w3.org/2000/svg}text") if e.get("y") == baseline]
        assert len(labels) >= 3 and len(set(labels)) == len(labels), labels
        assert float(labels[0]) == pytest.approx(low) and float(labels[-1]) <= high + 1e-9


def test_steepest_point_and_histogram_edges():
    # The steepest point of P(s) is where P'' = 0: check against a numerical derivative.
    for bands, rows in [(16, 6), (20, 5), (42, 3), (9, 13)]:
        s = np.linspace(0.01, 0.99, 100_001)
        slope = np.gradient(gpudedup.collision_probability(s, bands, rows), s)
        assert steepest_similarity(bands, rows) == pytest.approx(s[np.argmax(slope)], abs=1e-3)
    for threshold in (0.8, 0.75, 0.5, 0.01, 0.999, 1.0):
        edges = verified_edges(threshold)
        assert edges[0] == threshold and edges[-1] >= 1.0 and np.all(np.diff(edges) > 0)
        assert np.diff(edges).max() < 0.03
    # A Jaccard on an edge falls in the bin that starts there: every fraction up to /150, at
    # every threshold of two decimals, against the edges' own fractions.
    for hundredths in range(1, 100):
        threshold = Fraction(hundredths, 100)
        bins = len(verified_edges(float(threshold))) - 1
        fractions = sorted({Fraction(a, b) for b in range(1, 151) for a in range(b + 1) if Fraction(a, b) >= threshold})
        counts = np.zeros(bins, np.int64)
        for value in fractions:
            counts[min(int((value - threshold) / (1 - threshold) * bins), bins - 1)] += 1
        assert np.array_equal(verified_histogram(np.array([float(v) for v in fractions]), float(threshold)), counts)


def find_browser():
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


# Chromium on a loaded two-core machine (xdist's other worker) took over 25 s to start once.
@pytest.mark.timeout(120)
def test_report_renders_in_headless_chromium(sample_run, tmp_path):
    browser = find_browser()
    if browser is None:
        # Chromium is a system package (.ci/run installs it); in CI this skip fails the run.
        pytest.skip("needs Chromium (apt-get install chromium) to render report.html")
    _, out = sample_run
    pixels = screenshot(browser, out / "report.html", tmp_path, (1200, 4000))
    assert pixels.shape == (4000, 1200, 3)

    def count(colour, tolerance=16):
        return int((np.abs(pixels - np.array(colour)).max(axis=2) <= tolerance).sum())

    white = count((255, 255, 255), 3)
    assert white < 0.97 * pixels.shape[0] * pixels.shape[1], "the page is blank"
    assert len(np.unique(pixels.reshape(-1, 3) // 8, axis=0)) > 50, "the page has almost no detail"
    assert count((0x1F, 0x29, 0x33)) > 5_000  # text in the ink colour
    assert count((0xE3, 0xF2, 0xE8), 4) > 20_000  # the kept documents' green boxes
    # The inline SVG figures were drawn: the histogram's blue bars and the orange S-curve.
    assert count((0x00, 0x72, 0xB2)) > 2_000
    assert count((0xE6, 0x9F, 0x00)) > 2_000


def screenshot(browser: str, page: Path, where: Path, size=(1200, 1000)) -> np.ndarray:
    """Headless Chromium's screenshot of ``page``, RGB."""
    from PIL import Image  # (Pillow: a dev dependency)

    shot = where / f"{page.stem}.png"
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--hide-scrollbars", "--no-first-run", f"--user-data-dir={where / 'profile'}",
               f"--screenshot={shot}", f"--window-size={size[0]},{size[1]}", page.resolve().as_uri()]
    run = subprocess.run(command, capture_output=True, text=True, timeout=90)
    assert shot.exists(), f"no screenshot; chromium said:\n{run.stdout}\n{run.stderr}"
    return np.asarray(Image.open(shot).convert("RGB")).astype(np.int16)


def alone(page: str, name: str, where: Path) -> Path:
    """A page of report.html's head (its style sheet) and its element of id ``name`` alone:
    that part as a reader who scrolls to it sees it (Chromium's headless screenshot does not
    scroll to a URL's fragment)."""
    start = page.rfind("<", 0, page.index(f'id="{name}"'))
    tag = page[start + 1:].split()[0]
    end = page.index(f"</{tag}>\n<", start) + len(f"</{tag}>\n")
    path = where / f"{name}.html"
    path.write_text(page[:page.index("<main>\n") + len("<main>\n")] + page[start:end] + "</main>\n</body>\n</html>\n",
                    encoding="utf-8")
    return path


def pixels_of(pixels: np.ndarray, colour, tolerance=16) -> int:
    return int((np.abs(pixels - np.array(colour)).max(axis=2) <= tolerance).sum())


@pytest.mark.timeout(240)  # (six screenshots, each Chromium started afresh)
def test_the_new_sections_render_in_headless_chromium(sample_run, tmp_path):
    """Each new part of the page as Chromium draws it with the page's style sheet: the
    cluster-size figure's blue bars, the near-threshold pairs' blue tags beside their texts
    with words marked, the sampled clusters' green kept boxes, where every record went, and
    the parameters folded to a line (opened, their table)."""
    browser = find_browser()
    if browser is None:
        pytest.skip("needs Chromium (apt-get install chromium) to render report.html")
    _, out = sample_run
    page = (out / "report.html").read_text(encoding="utf-8")
    sizes = screenshot(browser, alone(page, "figure-cluster_sizes", tmp_path), tmp_path)
    assert pixels_of(sizes, (0x00, 0x72, 0xB2)) > 2_000  # the bars
    near = screenshot(browser, alone(page, "near-threshold", tmp_path), tmp_path)
    assert pixels_of(near, (0x00, 0x72, 0xB2), 8) > 200  # the pairs' tags
    assert pixels_of(near, (0xFF, 0xE0, 0x8A), 8) > 200  # words marked
    assert pixels_of(near, (0x1F, 0x29, 0x33)) > 5_000  # text
    sampled = screenshot(browser, alone(page, "sampled", tmp_path), tmp_path)
    assert pixels_of(sampled, (0xE3, 0xF2, 0xE8), 4) > 20_000  # kept documents' green boxes
    balance = screenshot(browser, alone(page, "balance", tmp_path), tmp_path)
    assert pixels_of(balance, (0x2F, 0x85, 0x5A), 8) > 5_000  # the bar's kept part
    assert pixels_of(balance, (0xD5, 0x5E, 0x00), 8) > 200  # and its removed part

    def inked_rows(pixels):
        return int((np.abs(pixels - 255).max(axis=2) > 40).any(axis=1).sum())

    folded = screenshot(browser, alone(page, "parameters", tmp_path), tmp_path)
    opened_page = alone(page.replace('<details class="section" id="parameters">',
                                     '<details class="section" id="parameters" open>'), "parameters", tmp_path)
    opened = screenshot(browser, opened_page, tmp_path)
    assert 10 < inked_rows(folded) < 60 and inked_rows(opened) > 400


@pytest.mark.parametrize("keep, texts", [
    ("longest", ["BASE", "BASE", "BASE tail"]),  # the kept one pairs with the first copy only
    ("first", ["BASE tail", "BASE", "BASE"]),
])
@pytest.mark.parametrize("staged", [False, True], ids=["in-memory", "work-dir"])
def test_a_copy_pairs_with_the_kept_document_as_its_first_copy_does(tmp_path, keep, texts, staged):
    """The pairs list a group of identical copies as a star around its first document; a copy
    that is not its first is paired with the kept document as the first is (result.pair and
    all_pairs say so), and the page calls it a verified pair too, not one joined through
    others."""
    base = " ".join(f"w{i}" for i in range(60))
    path = tmp_path / "copies.jsonl"
    path.write_text("".join(json.dumps({"text": t.replace("BASE", base)}) + "\n" for t in texts), encoding="utf-8")
    options = {"work_dir": tmp_path / "work"} if staged else {}
    result = gpudedup.dedup(path, keep=keep, backend="cpu", output=tmp_path / "out", **options)
    assert result.report["results"]["removed_documents"] == 2
    text = " ".join(visible_text((tmp_path / "out" / "report.html").read_text(encoding="utf-8")).split())
    labels = re.findall(r"Jaccard with the kept document: ([\d.]+) \(([^)]*)\)", text)
    assert sorted(labels) == [("0.9825", "a verified pair")] * 2
    for removed in result.clusters.filter(pa.array([not k for k in result.clusters["keep"].to_pylist()]))["id"]:
        kept = result.clusters.filter(result.clusters["keep"])["id"][0].as_py()
        assert result.pair(removed.as_py(), kept).verified


def test_the_shown_clusters_pair_figures_are_those_of_a_loop_over_the_pairs():
    from gpudedup.core.cluster import pairs_inside

    """cluster.pairs_inside, which the report's cluster blocks are made of (over
    every pair in one process, over each part of them on a cluster, then combined): per shown
    cluster the pairs inside it and their least and greatest Jaccard, and the Jaccard of asked
    pairs, against a plain loop over the pairs; cut into parts and combined as
    html_report._shown_pair_stats combines them, the same."""
    rng = np.random.default_rng(4)
    label = rng.integers(0, 6, 300)  # each document's cluster
    pairs = sorted({(int(a), int(b)) for a, b in rng.integers(0, 300, (900, 2)) if a < b and label[a] == label[b]})
    first = np.array([a for a, _ in pairs], np.int64)
    second = np.array([b for _, b in pairs], np.int64)
    jaccard = rng.random(first.shape[0])
    shown = [4, 1, 5]
    docs = np.flatnonzero(np.isin(label, shown)).astype(np.int64)
    place = np.array([shown.index(int(label[d])) for d in docs], np.int64)
    asked = [pairs[0], pairs[-1], (0, 299), pairs[len(pairs) // 2]]
    asked_a, asked_b = (np.array(side, np.int64) for side in zip(*asked))

    expected = {}
    for i, c in enumerate(shown):
        inside = [j for (a, _), j in zip(pairs, jaccard) if label[a] == c]
        expected[i] = (len(inside), min(inside, default=np.inf), max(inside, default=-np.inf))
    verified = dict(zip(pairs, jaccard))
    for cuts in ([], [100, 400, 401]):  # one call, and parts
        bounds = [0, *cuts, first.shape[0]]
        found = [pairs_inside(first[a:b], second[a:b], jaccard[a:b], docs, place, len(shown), asked_a, asked_b)
                 for a, b in zip(bounds[:-1], bounds[1:])]
        inside = np.sum([f[0] for f in found], axis=0)
        low, high = np.min([f[1] for f in found], axis=0), np.max([f[2] for f in found], axis=0)
        values = np.fmax.reduce(np.stack([f[3] for f in found]), axis=0)
        assert {i: (int(inside[i]), low[i], high[i]) for i in range(len(shown))} == expected
        assert [None if np.isnan(v) else v for v in values] == [verified.get(pair) for pair in asked]


# --- what the page shows, in order -------------------------------------------------------------


def test_results_come_first_and_the_parameters_after_folded_each_explained(sample_run):
    result, out = sample_run
    page = (out / "report.html").read_text(encoding="utf-8")
    order = ['class="cards"', 'id="balance"', 'id="counts"', 'id="figures"', 'id="clusters"', 'id="near-threshold"',
             'id="sampled"', 'id="stages"', 'id="parameters"', "<footer>"]
    places = [page.index(marker) for marker in order]
    assert places == sorted(places), order
    # The parameters are folded (a <details> not open), every row with what it means.
    assert '<details class="section" id="parameters">' in page
    rows = re.findall(r'<tr><td class="key mono">(.*?)</td><td class="num">.*?</td><td class="why">(.*?)</td></tr>',
                      section(page, "parameters"))
    report = json.loads((out / "report.json").read_text())
    assert [key for key, _ in rows] == [key for key in report["parameters"] if key != "banding_rule"]
    assert all(meaning.strip() for _, meaning in rows), [key for key, meaning in rows if not meaning.strip()]
    # Where every record went: report.json's balance, adding up to the records read.
    text = " ".join(visible_text(section(page, "balance")).split())
    balance = report["balance"]
    for label, key in (("kept", "kept"), ("removed as duplicates", "removed_duplicates"),
                       ("input records", "input_records")):
        assert f"{label} {balance[key]:,}" in text


def test_the_cluster_size_figure_counts_the_clusters_table(sample_run):
    result, out = sample_run
    svg = (out / "cluster_sizes.svg").read_text(encoding="utf-8")
    ET.fromstring(svg.encode("utf-8"))
    sizes = np.bincount(result.clusters["cluster"].to_numpy())
    bars = re.findall(r'<rect [^>]*data-count="(\d+)" data-sizes="(\d+)-(\d+)"', svg)
    assert bars and sum(int(count) for count, _, _ in bars) == sizes.shape[0]
    for count, low, high in bars:  # each bar: the clusters whose size is in its range, recounted
        assert int(count) == int(((sizes >= int(low)) & (sizes <= int(high))).sum()), (low, high)
    assert f"{sizes.shape[0]:,} clusters by size" in svg


@pytest.mark.parametrize("log", [None, False, True])
def test_the_cluster_size_figure_of_no_clusters_says_so(log):
    """No cluster: no bar and the words "no clusters", on either scale."""
    svg = svg_figures.cluster_sizes_svg(np.zeros(0, np.int64), np.zeros(0, np.int64), log=log)
    ET.fromstring(svg.encode("utf-8"))
    assert svg_elements(svg, "rect", "data-count") == [] and "no clusters" in svg


def test_pairs_just_above_the_threshold_and_a_sample_of_clusters(sample_run):
    """The near-threshold pairs are the verified pairs of the lowest Jaccard (pairs.parquet),
    each with both texts; the sample is of clusters other than the largest, each shown as the
    largest are, and the same in a second run."""
    result, out = sample_run
    page = (out / "report.html").read_text(encoding="utf-8")
    pairs = result.pairs.to_pydict()
    lowest = sorted(zip(pairs["jaccard"], pairs["id_a"], pairs["id_b"]))[:5]
    near = section(page, "near-threshold")
    shown = re.findall(r"<h3>Pair \d+ · exact Jaccard ([\d.]+)</h3>", near)
    assert shown == [f"{j:.4f}" for j, _, _ in lowest]
    ids = re.findall(r'<span class="tag">(?:first|second)</span><span class="mono"><bdi>(.*?)</bdi></span>', near)
    verified = {frozenset((a, b)): j for a, b, j in zip(pairs["id_a"], pairs["id_b"], pairs["jaccard"])}
    assert [verified[frozenset((html.unescape(a), html.unescape(b)))] for a, b in zip(ids[::2], ids[1::2])] == \
        [j for j, _, _ in lowest]
    sampled = section(page, "sampled")
    numbers = [int(n.replace(",", "")) for n in re.findall(r"<h3>Cluster ([\d,]+) ·", sampled)]
    largest = [int(n.replace(",", "")) for n in re.findall(r"<h3>Cluster ([\d,]+) ·", section(page, "clusters"))]
    assert len(numbers) == 5 and not set(numbers) & set(largest)
    sizes = np.bincount(result.clusters["cluster"].to_numpy())
    for number in numbers:
        assert f"Cluster {number:,} · {sizes[number]:,} documents" in sampled
    assert sampled.count('class="doc kept"') == 5
    again = gpudedup.dedup(SAMPLE, id_field="id", backend="cpu")
    assert section(html_report.render(again, figures={}), "sampled") == sampled  # seeded: reproducible


def test_inputs_not_read_and_files_left_out_are_named(tmp_path):
    folder = tmp_path / "in"
    (folder / ".hidden").mkdir(parents=True)
    words = " ".join(f"w{i}" for i in range(30))
    for name in ("a.jsonl", "b.jsonl", ".hidden/c.jsonl"):
        (folder / name).write_text(json.dumps({"text": words}) + "\n" + json.dumps({"text": "other " + words}) + "\n")
    (folder / "README.md").write_text("not documents")
    (folder / "broken.jsonl.gz").write_bytes(b"not gzip at all")
    (folder / "c.jsonl").write_text(json.dumps({"text": "fine " + words}) + "\n{broken\n")
    result = gpudedup.dedup(folder, backend="cpu", on_error="skip")
    page = html_report.render(result, figures={})
    text = " ".join(visible_text(section(page, "balance")).split())
    for entry in result.report["input"]["skipped_file_reasons"]:
        assert f"{entry['path']}{'/' if entry['folder'] else ''} {entry['reason']}" in text
    assert "README.md unsupported type" in text and ".hidden/ hidden" in text
    left_out = [r for r in result.skipped_records if r["line"] is None]
    assert [Path(r["file"]).name for r in left_out] == ["broken.jsonl.gz"]
    assert "1 file left out whole (on_error=skip)" in text and f"{left_out[0]['file']} {left_out[0]['reason']}" in text
    assert "1 record was left out (on_error=skip)" in text
    assert f"skipped records {result.report['balance']['skipped']:,}" in text


@pytest.mark.timeout(90)
def test_an_indexed_document_shows_that_its_text_is_not_stored(tmp_path):
    """With an index, an indexed document has no text here: its box says so (no length), and
    the new documents beside it are not marked against a text that is not there."""
    from gpudedup.index import Index

    def text(n: int) -> str:
        return " ".join(f"w{n}x{i}" for i in range(40))

    base, new = tmp_path / "base.jsonl", tmp_path / "new.jsonl"
    base.write_text("".join(json.dumps({"id": f"old{n}", "text": text(n)}) + "\n" for n in range(3)))
    new.write_text("".join(json.dumps({"id": f"new{n}", "text": text(n) + " extra"}) + "\n" for n in range(3)))
    index = Index.create(tmp_path / "idx", threshold=0.8)
    index.add(base, id_field="id", backend="cpu")
    result = index.dedup(new, id_field="id", backend="cpu")
    assert result.report["results"]["removed_documents"] == 3
    page = html_report.render(result, figures={})
    for name in ("clusters", "near-threshold"):
        part = section(page, name)
        indexed = re.findall(r'<span class="tag">(?:kept|first)</span><span class="mono"><bdi>(old\d)</bdi></span> '
                             r'<span class="sim">· (.*?)</span></div>\n(?:<div class="sim">.*?</div>\n)?(<p.*?</p>)',
                             part)
        assert len(indexed) == 3, name
        assert all(length == "text not stored in the index" and "absent" in body for _, length, body in indexed)
        texts = re.findall(r'<p class="text">(.*?)</p>', part, flags=re.S)
        assert len(texts) == 3 and all(t.endswith(" extra") and "<mark>" not in t for t in texts)  # new, unmarked
    # The clusters hold the indexed documents too: the count of the run's says new documents.
    assert "3 new documents in them" in page and "<td>new documents in clusters</td>" in page
    # Every stage of a staged run against the index says what it does.
    staged = index.dedup(new, id_field="id", backend="cpu", work_dir=tmp_path / "work")
    stages = html_report.render(staged, figures={})
    assert '<td class="mono">index_probe</td>' in stages and '<td class="mono">spill</td>' in stages
    assert '<td class="why"></td>' not in stages


def bytes_read_by_this_process() -> int:
    """What this process has read through read system calls so far (Linux's /proc/self/io
    rchar: file reads whether or not the page cache held them)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts reads through Linux's /proc/self/io")
@pytest.mark.parametrize("single_file", [False, True], ids=["a file per input", "one file"])
def test_a_staged_runs_report_takes_the_texts_it_shows_from_the_kept_rows_read(tmp_path, single_file):
    """The texts report.html shows of a staged run (the largest clusters, a sample of clusters,
    the pairs near the threshold: tens of documents in over ten clusters) are taken as the
    kept rows' write reads the input file again, not read once more: a write reads about three
    times the file's size in all (the file for the kept rows, then its digest, which checks that
    it did not change meanwhile, and the work directory's ids), where a read of its own for the
    texts would add two more, and a read per cluster shown over 20."""
    result = gpudedup.dedup(SAMPLE, id_field="id", backend="cpu", work_dir=tmp_path / "work")
    shown = result._outcome.shown
    assert shown.numbers.shape[0] + shown.sampled.numbers.shape[0] >= 10  # (a read each would show)
    result.write(tmp_path / "first", single_file=single_file)  # (what a first write imports is read once)
    before = bytes_read_by_this_process()
    result.write(tmp_path / "out", single_file=single_file)
    written = bytes_read_by_this_process() - before
    # Less what the suite's check of every written output (conftest.py) reads.
    before = bytes_read_by_this_process()
    check_output_dir(tmp_path / "out", None)
    assert written - (bytes_read_by_this_process() - before) < 4 * SAMPLE.stat().st_size
