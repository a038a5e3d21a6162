"""Identical copies (gpudedup/copies.py): grouping by signature, exact confirmation, the star
they become in the pairs, and the pairs that star stands for, each against an oracle."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

import gpudedup
from gpudedup import copies as copies_module
from gpudedup.copies import identical_copies, implied_pairs, same_signature_rows
from gpudedup.hashing import draw_permutations
from gpudedup.backends.numpy_backend import NumpyBackend
from gpudedup.shingling import ShingleSpec

from test_properties import jaccard, oracle_shingles


def test_same_signature_rows_against_a_dict_of_rows():
    rng = np.random.default_rng(1)
    distinct = rng.integers(0, 2**32, size=(40, 16), dtype=np.uint32)
    signatures = distinct[rng.integers(0, 40, size=300)]
    first, member = same_signature_rows(signatures)
    groups = {}
    for row, values in enumerate(map(tuple, signatures)):
        groups.setdefault(values, []).append(row)
    expected = sorted((rows[0], later) for rows in groups.values() for later in rows[1:])
    assert list(zip(first.tolist(), member.tolist())) == expected


def test_a_hash_collision_never_groups_different_signatures(monkeypatch):
    # Every row hashes alike: only rows equal to the first row of the run may be grouped.
    monkeypatch.setattr(copies_module, "poly_hash64_rows", lambda rows: np.zeros(rows.shape[0], np.uint64))
    signatures = np.array([[1, 2], [3, 4], [1, 2], [3, 4], [1, 2]], dtype=np.uint32)
    first, member = same_signature_rows(signatures)
    assert list(zip(first.tolist(), member.tolist())) == [(0, 2), (0, 4)]


def signatures_of(texts, num_perm=128, spec=ShingleSpec("word", 5)):
    from gpudedup.normalize import utf8_buffers, strings_to_arrow
    backend = NumpyBackend()
    batch = backend.shingle_hashes(*utf8_buffers(strings_to_arrow(texts)), spec)
    return backend.signatures(batch, draw_permutations(num_perm, 42))


def test_only_identical_sets_are_confirmed_copies():
    rng = random.Random(3)
    words = [f"w{rng.randrange(100000)}" for _ in range(6000)]
    long_text = " ".join(words)
    texts = [long_text, "a b c d e f g", long_text.replace(" ", "\n  "),  # the same set
             long_text + " extra",  # one more shingle: almost surely the same signature
             "a b c d e f g"]
    signatures = signatures_of(texts)
    first, member = same_signature_rows(signatures)
    assert (0, 3) in set(zip(first.tolist(), member.tolist())), "the planted near-copy should share the signature"
    shingles = [oracle_shingles(t) for t in texts]

    def exact(a, b):
        return np.array([jaccard(shingles[x], shingles[y]) for x, y in zip(a, b)])

    found = identical_copies(signatures, np.arange(len(texts)), np.array([len(t) for t in texts]),
                             batch_cost=10_000, exact_jaccard=exact)
    assert list(zip(found.first.tolist(), found.member.tolist())) == [(0, 2), (1, 4)]
    assert (found.jaccard == 1.0).all()


def test_implied_pairs_against_python_sets():
    rng = random.Random(7)
    for _ in range(30):
        n = rng.randrange(2, 25)
        # Random groups of copies: each document copies a lower one or none.
        parent = [i if i == 0 or rng.random() < 0.6 else rng.randrange(i) for i in range(n)]
        root = []
        for i in range(n):  # parents come first, so their roots are known
            root.append(i if parent[i] == i else root[parent[i]])
        stars = [(root[i], i) for i in range(n) if root[i] != i]
        listed = [(a, b) for a, b in itertools.combinations(range(n), 2)
                  if root[a] == a and root[b] == b and rng.random() < 0.2]
        a = np.array([p[0] for p in listed] + [s[0] for s in stars], np.int64)
        b = np.array([p[1] for p in listed] + [s[1] for s in stars], np.int64)
        first = np.array([s[0] for s in stars], np.int64)
        member = np.array([s[1] for s in stars], np.int64)
        x, y, source = implied_pairs(a, b, first, member, n)
        group = {i: {j for j in range(n) if root[j] == root[i]} for i in range(n)}
        expected = set()
        for p, q in listed:
            expected |= {(min(u, v), max(u, v)) for u in group[p] for v in group[q]}
        for members in group.values():
            expected |= set(itertools.combinations(sorted(members), 2))
        got = list(zip(x.tolist(), y.tolist()))
        assert got == sorted(expected)
        for (u, v), s in zip(got, source.tolist()):
            if s >= 0:  # it came from a listed pair between the two groups
                assert {root[u], root[v]} == {root[a[s]], root[b[s]]}
            else:
                assert root[u] == root[v]


def copies_corpus(groups: int, copies: int, seed: int = 5):
    rng = random.Random(seed)
    texts = []
    for g in range(groups):
        base = [f"g{g}w{rng.randrange(500)}" for _ in range(60)]
        texts.extend(" ".join(base) if c % 2 else "  ".join(base).upper() for c in range(copies))
        near = list(base)
        near[rng.randrange(60)] = "changed"
        texts.append(" ".join(near))
    rng.shuffle(texts)
    return texts


def test_copies_leave_lsh_and_everything_is_still_found():
    texts = copies_corpus(groups=4, copies=30)
    result = gpudedup.dedup(texts, threshold=0.7, backend="cpu", bucket_window=5)
    shingles = [oracle_shingles(t) for t in texts]
    truth = {(a, b) for a, b in itertools.combinations(range(len(texts)), 2)
             if jaccard(shingles[a], shingles[b]) >= 0.7}
    all_pairs = result.all_pairs()
    assert set(zip(all_pairs["id_a"].to_pylist(), all_pairs["id_b"].to_pylist())) == truth
    for a, b, j in zip(*(all_pairs[c].to_pylist() for c in ("id_a", "id_b", "jaccard"))):
        assert j == pytest.approx(jaccard(shingles[a], shingles[b]))
    # 29 copies per group leave LSH; each group's first copy and near-copy are candidates.
    results = result.report["results"]
    assert results["identical_copies"] == 4 * 29
    assert results["clusters"] == 4 and result.keep.sum() == 4
    # The star: each copy is paired with the first document of its group only.
    assert result.pairs.num_rows == 4 * 29 + 4


def test_many_copies_give_a_linear_number_of_candidates():
    text = " ".join(f"w{i}" for i in range(200))
    result = gpudedup.dedup([text] * 3000, threshold=0.8, backend="cpu")
    results = result.report["results"]
    assert results["candidate_pairs"] == 2999 and results["identical_copies"] == 2999
    assert result.keep.sum() == 1 and results["clusters"] == 1
