"""Property-based tests (hypothesis): generated corpora with planted near-duplicates.

For every generated corpus:
- conservation: every record is kept, removed with a named kept document, or empty (checked
  on every run by the autouse fixture in conftest.py, and here once more explicitly);
- determinism across batch sizes: any batch size and row limit give the same pairs, clusters
  and kept rows;
- recall: every planted pair whose exact Jaccard (Python sets over the canonical shingles, an
  oracle independent of gpudedup's hashing) is at or above the threshold is found, up to the
  misses the S-curve allows: the count of missed pairs stays within a Poisson bound of the
  expected count sum(1 - P(J)), with the banding and P from the oracles (exhaustive search,
  1 - (1 - s**r)**b), not from gpudedup's lsh.py.
Every verified pair is a true pair of the oracle (exact verification admits no false pair).
The oracles are tests/oracles.py's.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpudedup

from conftest import assert_conserved
from oracles import is_similar, jaccard, oracle_banding, s_curve, shingle_set

VOCABULARY = [f"w{i}" for i in range(400)] + ["Émile", "straße", "ΣΟΦΙΑ", "日本"]
NGRAM = 5
THRESHOLD = 0.7


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

    shingles = [shingle_set(text, "word", NGRAM) for text in texts]
    # Copies of one text are listed as a star; all_pairs spells out the pairs they stand for.
    all_pairs = reference.all_pairs()
    found = set(zip(all_pairs["id_a"].to_pylist(), all_pairs["id_b"].to_pylist()))
    for a, b in found:  # exact verification: every reported pair is a true one
        assert is_similar(shingles[a], shingles[b], THRESHOLD), (a, b)
    # The default settings: 128 permutations, at most 1% of pairs at the threshold missed.
    bands, rows = oracle_banding(THRESHOLD, 128, 0.01)
    assert (reference.report["parameters"]["bands"], reference.report["parameters"]["rows"]) == (bands, rows)
    above = [(a, b, jaccard(shingles[a], shingles[b])) for a, b in planted]
    above = [(a, b, j) for a, b, j in above if is_similar(shingles[a], shingles[b], THRESHOLD)]
    expected_misses = sum(1.0 - s_curve(j, bands, rows) for _, _, j in above)
    misses = sum((a, b) not in found for a, b, _ in above)
    assert misses <= expected_misses + 4 * math.sqrt(expected_misses) + 2, (misses, expected_misses)
