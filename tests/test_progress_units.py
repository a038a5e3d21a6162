"""The progress bars count what their labels and units say: the documents signed, the bands
searched for candidate pairs, the documents whose sets the exact check builds, against the
figures the run's own report and tables give."""

from __future__ import annotations

import numpy as np

from gpudedup.backends import get_backend
from gpudedup.engine.memory import dedup_corpus
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


def test_each_bar_counts_what_its_unit_names():
    texts = near_duplicate_texts(np.random.default_rng(3), 120)
    params = DedupParams(threshold=0.5, shingle="word", ngram=3)
    progress = Recorded()
    outcome = dedup_corpus(strings_corpus(texts), params, get_backend("cpu"), progress)
    stages = {description: (total, unit, done) for description, total, unit, done in progress.stages}
    assert stages["Shingling + MinHash"] == (len(texts), "documents", len(texts))
    # The copy candidates (documents whose signature another shares), each checked exactly.
    total, unit, done = stages["Checking identical copies"]
    assert unit == "copies" and total >= outcome.copies.count > 0
    bands = outcome.report["parameters"]["bands"]
    assert stages["Finding candidate pairs"] == (bands, "bands", bands)
    # The exact check shingles each document of the pairs it checks once (the identical
    # copies, checked before, are not among them).
    checked = set(zip(outcome.checked.first.tolist(), outcome.checked.second.tolist()))
    copies = set(zip(outcome.copies.first.tolist(), outcome.copies.member.tolist()))
    documents = {row for pair in checked - copies for row in pair}
    total, unit, done = stages["Verifying pairs (exact)"]
    assert (total, unit, done) == (len(documents), "documents", len(documents)) and documents


def test_the_notebook_lines_give_the_unit():
    lines = NotebookTextProgress()
    lines._show = lambda force: None  # (no IPython display outside a kernel)
    lines.start("Finding candidate pairs", 16, "bands")
    lines.stop()
    assert lines.text().split()[3:5] == ["16/16", "bands"]

