"""The progress bars count what their labels and units say: the documents signed, the bands
searched for candidate pairs, the pairs the exact check merges from the kept sets or the
documents whose sets it builds, against the figures the run's own report and tables give."""

from __future__ import annotations

import numpy as np

import pytest

from gpudedup.backends import get_backend
from gpudedup.pipeline.job import run_job
from gpudedup.pipeline.memory import KEPT_SETS_BYTES, MemoryStore
from gpudedup.io.python_inputs import strings_corpus
from gpudedup.params import DedupParams
from gpudedup.stages import NotebookTextProgress, Progress


def near_duplicate_texts(rng: np.random.Generator, count: int) -> list[str]:
    """``count`` texts of 30 words: a quarter of them new, the rest a copy of an earlier one
    with a few words changed, or exactly the same (identical copies)."""
    words = [f"w{n}" for n in range(400)]
    texts: list[str] = []
    for n in range(count):
        if n < count // 4:
            texts.append(" ".join(rng.choice(words, 30)))
            continue
        base = texts[int(rng.integers(0, count // 4))].split()
        for at in rng.choice(30, int(rng.integers(0, 4)), replace=False):
            base[at] = str(rng.choice(words))
        texts.append(" ".join(base))
    return texts


class Recorded(Progress):
    """Each stage's (description, total, unit) and how much it advanced."""

    def __init__(self) -> None:
        self.stages: list[list] = []

    def start(self, description: str, total: int, unit: str = "documents") -> None:
        self.stages.append([description, total, unit, 0])

    def advance(self, amount: int) -> None:
        self.stages[-1][3] += amount


@pytest.mark.parametrize("kept_sets_bytes", [KEPT_SETS_BYTES, 0], ids=["sets kept", "sets made again"])
def test_each_bar_counts_what_its_unit_names(kept_sets_bytes):
    """A run in memory as dedup runs it (its signature pass keeps these few sets), and one whose
    store keeps none."""
    texts = near_duplicate_texts(np.random.default_rng(3), 120)
    params = DedupParams(threshold=0.5, shingle="word", ngram=3)
    progress = Recorded()
    backend = get_backend("cpu")
    store = MemoryStore(strings_corpus(texts), params, backend, kept_sets_bytes)
    outcome = run_job(store, params, backend, progress=progress)
    assert (store.sets is not None) == (kept_sets_bytes > 0)
    stages = {description: (total, unit, done) for description, total, unit, done in progress.stages}
    assert stages["Shingling + MinHash"] == (len(texts), "documents", len(texts))
    # The copy candidates (documents whose signature another shares), each checked exactly.
    total, unit, done = stages["Checking identical copies"]
    assert unit == "copies" and total >= outcome.copies.count > 0
    bands = outcome.report["parameters"]["bands"]
    assert stages["Finding candidate pairs"] == (bands, "bands", bands)
    # The exact check merges each pair it checks from the kept sets, or shingles each document of
    # those pairs once (the identical copies, checked before, are not among them).
    checked = set(zip(outcome.checked.first.tolist(), outcome.checked.second.tolist()))
    copies = set(zip(outcome.copies.held.first.tolist(), outcome.copies.held.member.tolist()))
    pairs = checked - copies
    documents = {row for pair in pairs for row in pair}
    expected = (len(pairs), "pairs", len(pairs)) if kept_sets_bytes else (len(documents), "documents", len(documents))
    assert stages["Verifying pairs (exact)"] == expected and documents


def test_the_notebook_lines_give_the_unit():
    lines = NotebookTextProgress()
    lines._show = lambda force: None  # (no IPython display outside a kernel)
    lines.start("Finding candidate pairs", 16, "bands")
    lines.stop()
    assert lines.text().split()[3:5] == ["16/16", "bands"]

