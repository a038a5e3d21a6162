"""Property-based tests (hypothesis): generated corpora with planted near-duplicates.

For every generated corpus:
- conservation: every record is kept, removed with a named kept document, or empty (checked
  on every run by the autouse fixture in conftest.py, and here once more explicitly);
- determinism across batch sizes: any batch size and row limit give the same pairs, clusters
  and kept rows;
- recall: every planted pair whose exact Jaccard (Python sets over the canonical shingles, an
  oracle independent of gpudedup's hashing) is at or above the threshold is found, up to the
  misses the S-curve allows: the count of missed pairs stays within a Poisson bound of the
  expected count sum(1 - P(J)).
Every verified pair is a true pair of the oracle (exact verification admits no false pair).
"""

from __future__ import annotations

import math
import re

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpudedup
from gpudedup.lsh import choose_bands, collision_probability

from conftest import assert_conserved

VOCABULARY = [f"w{i}" for i in range(400)] + ["Émile", "straße", "ΣΟΦΙΑ", "日本"]
NGRAM = 5
THRESHOLD = 0.7


def oracle_shingles(text: str) -> set[str]:
    """Word 5-grams of the canonical definition, in plain Python (lower-case, white space runs
    to one space, ends stripped; a text shorter than n words is one shingle)."""
    words = re.sub(r"\s+", " ", text.lower()).strip().split(" ")
    words = [w for w in words if w]
    if not words:
        return set()
    if len(words) < NGRAM:
        return {" ".join(words)}
    return {" ".join(words[i:i + NGRAM]) for i in range(len(words) - NGRAM + 1)}


def jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 0.0


@st.composite
def planted_corpora(draw):
    """(texts, planted) -- planted: (i, j) index pairs of a document and its edited copy."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    originals = draw(st.integers(1, 12))
    unrelated = draw(st.integers(0, 10))
    texts, planted = [], []
    for _ in range(originals + unrelated):
        words = list(rng.choice(VOCABULARY, size=int(rng.integers(20, 120))))
        texts.append(" ".join(words))
    for original in range(originals):
        for _ in range(int(rng.integers(1, 4))):
            words = texts[original].split(" ")
            for _ in range(int(rng.integers(0, 4))):  # a few substituted words
                words[int(rng.integers(0, len(words)))] = str(rng.choice(VOCABULARY))
            spacing = rng.choice(["  ", "\t", "\n", " "])  # normalisation must undo these
            texts.append(spacing.join(words).upper() if rng.random() < 0.2 else spacing.join(words))
            planted.append((original, len(texts) - 1))
    texts += draw(st.lists(st.sampled_from(["", "   ", "one", "a b"]), max_size=3))
    order = rng.permutation(len(texts))  # planted copies anywhere, not just after originals
    position = np.empty_like(order)
    position[order] = np.arange(len(texts))
    return [texts[i] for i in order], [tuple(sorted((int(position[a]), int(position[b])))) for a, b in planted]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(corpus=planted_corpora(), batch_bytes=st.integers(50, 20_000), batch_rows=st.integers(1, 50))
def test_planted_pairs_conservation_and_batch_size_determinism(corpus, batch_bytes, batch_rows):
    texts, planted = corpus
    reference = gpudedup.dedup(texts, threshold=THRESHOLD, backend="cpu")
    small = gpudedup.dedup(texts, threshold=THRESHOLD, backend="cpu", batch_bytes=batch_bytes, batch_rows=batch_rows)
    for result in (reference, small):
        assert_conserved(result)
    assert small.pairs.equals(reference.pairs) and small.clusters.equals(reference.clusters)
    np.testing.assert_array_equal(small.keep, reference.keep)

    shingles = [oracle_shingles(text) for text in texts]
    # Copies of one text are listed as a star; all_pairs spells out the pairs they stand for.
    all_pairs = reference.all_pairs()
    found = set(zip(all_pairs["id_a"].to_pylist(), all_pairs["id_b"].to_pylist()))
    for a, b in found:  # exact verification: every reported pair is a true one
        assert jaccard(shingles[a], shingles[b]) >= THRESHOLD - 1e-12
    banding = choose_bands(THRESHOLD, 128)
    above = [(a, b, jaccard(shingles[a], shingles[b])) for a, b in planted]
    above = [(a, b, j) for a, b, j in above if j >= THRESHOLD]
    expected_misses = sum(1.0 - float(collision_probability(j, banding.bands, banding.rows)) for _, _, j in above)
    misses = sum((a, b) not in found for a, b, _ in above)
    assert misses <= expected_misses + 4 * math.sqrt(expected_misses) + 2, (misses, expected_misses)
