"""Identical copies (gpudedup/core/copies.py): grouping by signature, exact confirmation, the star
they become in the pairs, and the pairs that star stands for, each against an oracle."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pyarrow as pa
import pytest

import gpudedup
from gpudedup.core import copies as copies_module
from gpudedup.io.python_inputs import strings_corpus
from gpudedup.core.copies import first_copies, identical_copies, implied_pairs, same_signature_rows
from gpudedup.evaluate import Setting, evaluate
from gpudedup.core.hashing import draw_permutations
from gpudedup.params import DedupParams
from gpudedup.pipeline.memory import dedup_corpus
from gpudedup.backends.numpy_backend import NumpyBackend
from gpudedup.core.shingling import ShingleSpec

from oracles import jaccard, oracle_clusters, shingle_set, similar_pairs


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


@pytest.mark.parametrize("given", [False, True])
def test_a_hash_collision_never_groups_different_signatures(monkeypatch, given):
    # Every row hashes alike: only rows equal to the first row of the run may be grouped.
    monkeypatch.setattr(copies_module, "poly_hash64_rows", lambda rows: np.zeros(rows.shape[0], np.uint64))
    signatures = np.array([[1, 2], [3, 4], [1, 2], [3, 4], [1, 2]], dtype=np.uint32)
    first, member = same_signature_rows(signatures, np.zeros(5, np.uint64) if given else None)
    assert list(zip(first.tolist(), member.tolist())) == [(0, 2), (0, 4)]


@pytest.mark.parametrize("bands, rows", [(16, 1), (5, 3), (1, 12)])
def test_band_key_row_hash_groups_as_a_dict_of_rows(bands, rows):
    """The stores' row hash (of the band keys) proposes exactly the groups of equal rows."""
    from gpudedup.core.lsh import Banding, band_keys

    rng = np.random.default_rng(bands)
    # Distinct rows that differ in one column only (one band key) as well as at random.
    distinct = rng.integers(0, 2**32, size=(30, bands * rows), dtype=np.uint32)
    distinct[1::2] = distinct[::2]
    distinct[np.arange(1, 30, 2), rng.integers(0, bands * rows, size=15)] ^= 1
    signatures = distinct[rng.integers(0, 30, size=400)]
    row_hash = copies_module.band_key_row_hash(band_keys(signatures, Banding(bands, rows, "test")))
    assert row_hash.dtype == np.uint64 and row_hash.shape == (400,)
    first, member = same_signature_rows(signatures, row_hash)
    groups = {}
    for row, values in enumerate(map(tuple, signatures)):
        groups.setdefault(values, []).append(row)
    expected = sorted((rows_[0], later) for rows_ in groups.values() for later in rows_[1:])
    assert list(zip(first.tolist(), member.tolist())) == expected
    # No two different rows of this sample share a hash (the comparison after it is a guard).
    assert len(set(row_hash.tolist())) == len(groups)


WORD_5 = ShingleSpec("word", 5)


def signatures_of(texts, num_perm=128, spec=WORD_5):
    from gpudedup.core.normalize import utf8_buffers, strings_to_arrow
    backend = NumpyBackend()
    batch = backend.shingle_hashes(*utf8_buffers(strings_to_arrow(texts)), spec)
    return backend.signatures(batch, draw_permutations(num_perm, 42))


def python_set_reader(shingles, calls: list | None = None):
    """A set_reader for identical_copies over Python sets (shingles: one set per corpus row):
    each row's set as sorted column numbers of a vocabulary, one binary CSR row per document,
    as verify.document_sets lays them out. calls records ("all", docs) and ("part", part)."""
    import scipy.sparse

    vocabulary = {shingle: i for i, shingle in enumerate(sorted(set().union(*shingles)))}
    calls = [] if calls is None else calls

    def reader(docs):
        calls.append(("all", docs.tolist()))

        def sets_of(part):
            assert set(part.tolist()) <= set(docs.tolist()) and (np.diff(part) > 0).all()
            calls.append(("part", part.tolist()))
            rows = [sorted(vocabulary[x] for x in shingles[d]) for d in part.tolist()]
            indptr = np.cumsum([0] + [len(r) for r in rows])
            indices = np.array([c for r in rows for c in r], dtype=np.int64)
            matrix = scipy.sparse.csr_matrix((np.ones(indices.shape[0], np.int8), indices, indptr),
                                             shape=(len(rows), max(len(vocabulary), 1)))
            matrix.has_sorted_indices = True
            return matrix

        return sets_of

    return reader


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
    shingles = [shingle_set(t) for t in texts]
    found = identical_copies(same_signature_rows(signatures), np.arange(len(texts)),
                             np.array([len(t) for t in texts]),
                             batch_cost=10_000, set_reader=python_set_reader(shingles))
    assert list(zip(found.first.tolist(), found.member.tolist())) == [(0, 2), (1, 4)]
    assert (found.jaccard == 1.0).all()


def test_first_copies_against_a_dict():
    """first_copies: a member's group's first document, the row itself (or the value given)
    for any other row; the copies in any order."""
    rng = np.random.default_rng(7)
    first = rng.integers(0, 50, 40)
    member = rng.choice(np.arange(50, 200), 40, replace=False)  # (a document is one group's member at most)
    order = rng.permutation(40)
    first, member = first[order], member[order]
    rows = rng.integers(0, 220, 300)
    expected = dict(zip(member.tolist(), first.tolist()))
    assert first_copies(first, member, rows).tolist() == [expected.get(r, r) for r in rows.tolist()]
    assert first_copies(first, member, rows, none=-1).tolist() == [expected.get(r, -1) for r in rows.tolist()]
    empty = np.zeros(0, np.int64)
    assert first_copies(empty, empty, rows, none=-1).tolist() == [-1] * rows.shape[0]


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


def test_the_row_hash_of_band_keys_groups_real_signatures_as_their_rows_do():
    """The row hash every store hands the copies stage (copies.band_key_row_hash of the band
    keys: in memory, in a work directory's shards, and against an index in memory, where the
    indexed and the new rows are hashed apart), over the signatures of texts with copies, near
    copies and empty texts at the run's banding, against the rows themselves: same_signature_rows
    groups by it exactly as by the rows' own hash; equal rows share a hash, different rows of
    this sample do not; and rows hashed in two parts hash as they do together. (A run with a
    work directory groups its copies by Dask's shuffle on the row hashes: tests/test_dask.py.)"""
    from gpudedup.core.lsh import band_keys

    texts = copies_corpus(groups=3, copies=6) + [t or "" for t in copies_review_corpus(2)]
    banding = DedupParams(threshold=0.7).banding()
    signatures = signatures_of(texts, banding.bands * banding.rows)
    keys = band_keys(signatures, banding)
    row_hash = copies_module.band_key_row_hash(keys)
    assert row_hash.dtype == np.uint64 and row_hash.shape == (len(texts),)
    grouped = same_signature_rows(signatures, row_hash)
    by_rows = same_signature_rows(signatures)
    assert by_rows[0].shape[0] > 10 and all(np.array_equal(a, b) for a, b in zip(grouped, by_rows))
    hashes_of: dict = {}
    for row, h in zip(map(tuple, signatures.tolist()), row_hash.tolist()):
        hashes_of.setdefault(row, set()).add(h)
    assert all(len(h) == 1 for h in hashes_of.values())
    assert len(set().union(*hashes_of.values())) == len(hashes_of) < signatures.shape[0]
    for split in (1, 7, len(texts) // 2):  # (an index's indexed rows, then its new ones)
        apart = np.concatenate([copies_module.band_key_row_hash(keys[:split]),
                                copies_module.band_key_row_hash(keys[split:])])
        assert np.array_equal(apart, row_hash)


def test_copies_leave_lsh_and_everything_is_still_found():
    texts = copies_corpus(groups=4, copies=30)
    result = gpudedup.dedup(texts, threshold=0.7, backend="cpu", bucket_window=5)
    shingles = [shingle_set(t) for t in texts]
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


# --- Review of the copies stage against brute force ----------------------------------------------
#
# The corpora below are small enough for brute force over Python sets. Banding with one row per
# band (64 x 1) makes a pair of Jaccard J >= 0.5 a candidate with probability 1 - (1 - J)^64 >
# 1 - 1e-19, so the run must agree with the exact all-pairs truth exactly (not up to the
# S-curve): the pairs (with copies spelled out), the clusters, the kept documents under both
# policies and the report's counts.

FULL_RECALL = dict(num_perm=64, bands=64, rows=1, bucket_window=100_000)
VOCABULARY_SMALL = [f"v{i}" for i in range(40)]


def components(n: int, pairs) -> list[int]:
    """A label per document of n: its cluster over the pairs (the union-find oracle), or a
    label of its own (negative) when it is in no pair."""
    docs, cluster, _ = oracle_clusters(n, pairs, [0] * n)
    label = [-1 - d for d in range(n)]
    for d, c in zip(docs, cluster):
        label[d] = c
    return label


def oracle_keep(texts, pairs, policy: str) -> list[bool]:
    """The kept mask (the union-find oracle's keep policy; a null text counts 0 code points)."""
    docs, _, kept = oracle_clusters(len(texts), pairs, [len(t or "") for t in texts], policy)
    keep = [True] * len(texts)
    for d, k in zip(docs, kept):
        keep[d] = k
    return keep


def copies_review_corpus(seed: int, near_supersets: bool = True) -> list:
    """Groups of copies (identical after normalisation, or the same set from different text),
    near-copies, short texts, empty, blank and null texts, shuffled.

    near_supersets: add 'base + one word' texts, whose signature often equals the base's (one
    extra shingle rarely holds a minimum), the case where a group's first document is not a
    copy of the others."""
    rng = random.Random(seed)
    texts: list = []
    for _ in range(rng.randrange(3, 7)):
        base = rng.choices(VOCABULARY_SMALL, k=rng.randrange(6, 30))
        text = " ".join(base)
        texts.append(text)
        for _ in range(rng.randrange(0, 5)):  # copies after normalisation: different raw text
            variant = rng.choice(["  ", "\t", "\n ", " "]).join(base)
            if rng.random() < 0.4:
                variant = variant.upper()
            if rng.random() < 0.3:
                variant = " \n" + variant + "\t "
            texts.append(variant)
        if rng.random() < 0.5:  # near-copy: one word substituted
            near = list(base)
            near[rng.randrange(len(near))] = rng.choice(VOCABULARY_SMALL)
            texts.append(" ".join(near))
        if near_supersets and rng.random() < 0.5:
            texts.append(text + " " + rng.choice(VOCABULARY_SMALL))
    # The same word 5-gram set from different (not normalisation-equal) texts: a period-5
    # sequence repeated two or three times, and longer raw text for keep="longest".
    cycle = rng.sample(VOCABULARY_SMALL, 5)
    texts += [" ".join(cycle * 2 + cycle[:1]), " ".join(cycle * 3 + cycle[:1]), " ".join(cycle * 2 + cycle[:1])]
    short = rng.sample(VOCABULARY_SMALL, 3)
    texts += [" ".join(short), " ".join(short).upper(), "  " + "\t".join(short)]  # one shingle each
    texts += ["", "   ", None, "\n", None]
    rng.shuffle(texts)
    return texts


def pair_dict(table: pa.Table) -> dict:
    return {(a, b): j for a, b, j in zip(*(table[c].to_pylist() for c in ("id_a", "id_b", "jaccard")))}


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("threshold", [0.5, 0.8, 1.0])
def test_copies_agree_with_brute_force(seed, threshold):
    texts = copies_review_corpus(seed)
    sets = [shingle_set(t or "") for t in texts]
    truth = similar_pairs(sets, threshold)
    label = components(len(texts), truth)
    for policy in ("first", "longest"):
        result = gpudedup.dedup(texts, threshold=threshold, backend="cpu", keep=policy, **FULL_RECALL)
        found = pair_dict(result.all_pairs())
        assert found.keys() == truth.keys()
        for pair, j in found.items():
            assert j == pytest.approx(truth[pair], abs=1e-12)
        # Every listed pair is a true pair, and the listed ones at 1.0 are identical sets.
        for (a, b), j in pair_dict(result.pairs).items():
            assert (a, b) in truth and (j == 1.0) == (sets[a] == sets[b])
        assert result.keep.tolist() == oracle_keep(texts, truth, policy)
        clusters = result.clusters.to_pydict()
        assert sorted(clusters["id"]) == [d for d in range(len(texts)) if label.count(label[d]) > 1]
        same_cluster = {(a, b) for a, b in itertools.combinations(clusters["id"], 2)
                        if clusters["cluster"][clusters["id"].index(a)] == clusters["cluster"][clusters["id"].index(b)]}
        assert same_cluster == {(a, b) for a, b in itertools.combinations(sorted(clusters["id"]), 2)
                                if label[a] == label[b]}
        results = result.report["results"]
        assert results["verified_pairs"] == result.pairs.num_rows
        assert results["candidate_pairs"] >= results["exactly_checked_pairs"] >= results["verified_pairs"]
        # Confirmed copies: each is an identical set of an earlier document; never more than that.
        later_copies = sum(1 for d, s in enumerate(sets) if s and s in sets[:d])
        assert results["identical_copies"] <= later_copies
        assert result.report["input"]["null_texts"] == sum(t is None for t in texts)
        assert result.report["input"]["empty_documents"] == sum(not s for s in sets)


@pytest.mark.parametrize("seed", range(6))
def test_identical_copies_count_and_star_against_python_sets(seed):
    """Without near-supersets (see test_copies_after_a_different_first_document_still_leave_lsh)
    every later copy of a set is confirmed and paired with the first document of that set, and
    with nothing else at 1.0."""
    texts = copies_review_corpus(seed, near_supersets=False)
    sets = [shingle_set(t or "") for t in texts]
    result = gpudedup.dedup(texts, threshold=0.8, backend="cpu", **FULL_RECALL)
    first_of = {}
    expected_star = set()
    for d, s in enumerate(sets):
        if not s:
            continue
        key = frozenset(s)
        if key in first_of:
            expected_star.add((first_of[key], d))
        else:
            first_of[key] = d
    assert result.report["results"]["identical_copies"] == len(expected_star)
    listed_at_one = {pair for pair, j in pair_dict(result.pairs).items() if j == 1.0}
    assert listed_at_one == expected_star


def test_copies_with_string_ids_out_of_row_order():
    """all_pairs maps ids back to rows (pc.index_in): ids that sort differently from the rows."""
    texts = copies_review_corpus(11)
    rng = random.Random(11)
    ids = [f"id-{n:03d}" for n in rng.sample(range(1000), len(texts))]
    table = pa.table({"doc": ids, "text": pa.array(texts, pa.string())})
    result = gpudedup.dedup(table, id_field="doc", threshold=0.7, backend="cpu", **FULL_RECALL)
    sets = [shingle_set(t or "") for t in texts]
    truth = {tuple(sorted((ids[a], ids[b]))): j for (a, b), j in similar_pairs(sets, 0.7).items()}
    found = pair_dict(result.all_pairs())
    assert found.keys() == truth.keys()
    assert all(found[p] == pytest.approx(truth[p]) for p in truth)


def test_char_shingle_copies_against_brute_force():
    rng = random.Random(4)
    texts = []
    for _ in range(6):
        base = "".join(rng.choice("abcd ") for _ in range(rng.randrange(3, 40)))
        texts += [base, base.upper(), "  " + base.replace(" ", "\t ") + "\n"]
        texts.append(base[:-1] + rng.choice("abcd"))
    texts += ["ab", "AB", "", None]
    rng.shuffle(texts)
    sets = [shingle_set(t, "char", 5) for t in texts]
    truth = similar_pairs(sets, 0.6)
    result = gpudedup.dedup(texts, shingle="char", ngram=5, threshold=0.6, backend="cpu", keep="longest",
                            **FULL_RECALL)
    found = pair_dict(result.all_pairs())
    assert found.keys() == truth.keys()
    assert result.keep.tolist() == oracle_keep(texts, truth, "longest")


def run_tables(result):
    return [result.pairs, result.clusters, pa.table({"keep": result.keep})]


@pytest.mark.parametrize("batch_bytes, batch_rows", [(1, 1_000_000), (37, 3), (500, 1), (10**8, 2)])
def test_copies_do_not_depend_on_batch_sizes(batch_bytes, batch_rows):
    texts = copies_review_corpus(21) + copies_corpus(groups=3, copies=12)
    reference = gpudedup.dedup(texts, threshold=0.7, backend="cpu", bucket_window=3)
    other = gpudedup.dedup(texts, threshold=0.7, backend="cpu", bucket_window=3,
                           batch_bytes=batch_bytes, batch_rows=batch_rows)
    for ours, theirs in zip(run_tables(other), run_tables(reference)):
        assert ours.equals(theirs)
    assert other.report["results"] == reference.report["results"]
    assert reference.report["results"]["identical_copies"] > 0


def test_copies_on_the_kernel_backend_equal_numpy():
    """The GPU backend's code on the host (g++ build of the kernels, numpy behind CuPy's API)."""
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("needs g++ for the host build of the kernels")
    from cupy_like import cupy_like
    from kernel_host.host_kernels import HostKernels
    from gpudedup.backends.kernel_backend import KernelBackend

    texts = [t or "" for t in copies_review_corpus(5)] + copies_corpus(groups=3, copies=10)
    corpus = strings_corpus(texts)
    params = DedupParams(threshold=0.7, bucket_window=4, batch_bytes=300)
    ours = dedup_corpus(corpus, params, KernelBackend(cupy_like, HostKernels(0), description="host"))
    reference = dedup_corpus(corpus, params, NumpyBackend())
    for name in ("pair_a", "pair_b", "jaccard", "keep"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(reference, name))
    np.testing.assert_array_equal(ours.copies.held.member, reference.copies.held.member)
    assert ours.report["results"] == reference.report["results"]
    assert reference.copies.held.member.shape[0] > 0


def test_report_counts_match_the_outcome():
    texts = [t or "" for t in copies_review_corpus(8)] + copies_corpus(groups=2, copies=9)
    outcome = dedup_corpus(strings_corpus(texts), DedupParams(threshold=0.7, **FULL_RECALL), NumpyBackend(),
                        keep_candidates=True)
    results = outcome.report["results"]
    copies = outcome.copies.held.member.shape[0]
    assert results["identical_copies"] == copies > 0
    assert results["candidate_pairs"] == outcome.candidate_a.shape[0]
    assert results["exactly_checked_pairs"] == outcome.checked_jaccard.shape[0]
    assert results["verified_pairs"] == outcome.pair_a.shape[0]
    # No confirmed copy is in an LSH candidate pair: it left the buckets.
    lsh = set(zip(outcome.candidate_a.tolist(), outcome.candidate_b.tolist())) - set(
        zip(outcome.copies.held.first.tolist(), outcome.copies.held.member.tolist()))
    assert not {d for pair in lsh for d in pair} & set(outcome.copies.held.member.tolist())
    assert results["removed_documents"] == int((~outcome.keep).sum())


def test_evaluate_recall_with_copies_against_brute_force():
    texts = [t or "" for t in copies_review_corpus(3)] + copies_corpus(groups=2, copies=6)
    sets = [shingle_set(t) for t in texts]
    truth = similar_pairs(sets, 0.6)
    evaluation = evaluate(strings_corpus(texts), [Setting(64, 64, 1, "word", 5, 0.6)], backend="cpu",
                          bucket_window=100_000, warmup=False)
    scores = evaluation.results[0]
    assert scores.true_pairs == len(truth)
    assert scores.verified_pairs == scores.verified_true_pairs == len(truth)
    assert scores.verified_recall == 1.0 and scores.candidate_recall == 1.0 and scores.cluster_recall == 1.0


def test_a_huge_group_is_checked_a_batch_at_a_time():
    """identical_copies on 20,000 copies: every set read holds at most one batch of text, each
    with the group's first document, every other document is read once, and every copy is
    confirmed against the first (oracle: the rows themselves)."""
    m = 20_000
    signatures = np.tile(np.arange(16, dtype=np.uint32), (m, 1))
    lengths = np.full(m, 50, np.int64)
    calls: list = []
    found = identical_copies(same_signature_rows(signatures), np.arange(m, dtype=np.int64), lengths,
                             batch_cost=10_000,
                             set_reader=python_set_reader([frozenset({"same"})] * m, calls))
    assert found.member.tolist() == list(range(1, m)) and (found.first == 0).all()
    assert calls[0] == ("all", list(range(m)))
    parts = [part for kind, part in calls[1:]]
    assert all(kind == "part" for kind, _ in calls[1:])
    assert all(part[0] == 0 and 50 * len(part) <= 10_000 for part in parts)
    assert sorted(d for part in parts for d in part[1:]) == list(range(1, m))


def oracle_rounds(signatures, sets, rounds):
    """The copies identical_copies confirms, in plain Python: per group of equal signature
    rows (in row order), up to ``rounds`` times, the lowest document not yet settled leads and
    every later one with its set is its copy; the others wait for the next leader."""
    groups: dict = {}
    for row, values in enumerate(map(tuple, signatures)):
        groups.setdefault(values, []).append(row)
    found = []
    for rows_ in groups.values():
        for _ in range(rounds):
            if len(rows_) < 2:
                break
            leader, rest = rows_[0], rows_[1:]
            found += [(leader, r) for r in rest if sets[r] == sets[leader]]
            rows_ = [r for r in rest if sets[r] != sets[leader]]
    return sorted(found)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("batch_cost", [1, 30, 120, 10**9])
def test_identical_copies_follow_the_rounds_oracle(seed, batch_cost):
    """Groups of one signature holding several different sets, interleaved (up to seven, so
    that the round limit matters), on active rows that skip some corpus rows: the confirmed
    copies are those of the plain round-by-round oracle whatever the batch, whole groups or
    parts of groups; every read of sets stays within a batch (a part: its first document and
    members within one batch beside it)."""
    rng = random.Random(seed)
    n = 260
    active = np.array(sorted(rng.sample(range(n), 200)), dtype=np.int64)
    lengths = np.array([rng.randrange(1, 25) for _ in range(n)], dtype=np.int64)
    distinct = np.array([[rng.randrange(2**32) for _ in range(8)] for _ in range(12)], dtype=np.uint32)
    signature_of = [rng.randrange(12) for _ in range(200)]
    classes = {g: rng.randrange(1, 8) for g in range(12)}
    sets = [frozenset() for _ in range(n)]
    for position, doc in enumerate(active.tolist()):
        g = signature_of[position]
        sets[doc] = frozenset({f"g{g}", f"c{rng.randrange(classes[g])}"})
    signatures = distinct[signature_of]
    calls: list = []
    found = identical_copies(same_signature_rows(signatures), active, lengths, batch_cost,
                             python_set_reader(sets, calls))
    expected = [(int(active[a]), int(active[b])) for a, b in oracle_rounds(
        signatures, [sets[d] for d in active.tolist()], copies_module.COPY_ROUNDS)]
    assert list(zip(found.first.tolist(), found.member.tolist())) == expected
    assert found.first.dtype == found.member.dtype == np.int64 and (found.jaccard == 1.0).all()
    # The documents of the groups (signatures shared with another active document).
    grouped = sorted(int(active[p]) for p, g in enumerate(signature_of) if signature_of.count(g) > 1)
    assert calls[0] == ("all", grouped)
    parts = [part for _, part in calls[1:]]
    # Whole groups within a batch, or a part of a larger group: its first document and members
    # that add up to the rest of a batch (one member alone where even that is too much).
    assert all(int(lengths[part].sum()) <= batch_cost or len(part) == 2 for part in parts)
    if batch_cost == 10**9:  # every group fits one batch: each document is shingled once
        assert parts == [grouped]


# --- The first document of a signature group need not be a copy of the others ------------------


def long_text_and_superset(words: int = 3000, seed: int = 3) -> tuple[str, str]:
    rng = random.Random(seed)
    text = " ".join(f"w{rng.randrange(100000)}" for _ in range(words))
    return text, text + " extra"


def colliding_single_shingles() -> tuple[str, str]:
    """Two one-word texts (one shingle each) whose 64-bit shingle hashes agree in the low 32
    bits, the only bits a permutation reads (perm_k(x) = a_k * (x mod 2^32) + b_k): their
    signatures are identical in every column, their Jaccard is 0. Found by a birthday search
    over 400,000 words (17 such pairs)."""
    return "t2395", "t40772"


def test_the_poisoning_preconditions_hold():
    """The facts the test below relies on: both kinds of first document share the copies'
    signature without sharing their set."""
    v1, v2 = long_text_and_superset()
    a, b = colliding_single_shingles()
    for first, copy in ((v1, v2), (a, b)):
        signatures = signatures_of([first, copy, copy])
        assert (signatures[0] == signatures[1]).all() and (signatures[1] == signatures[2]).all()
        assert shingle_set(first) != shingle_set(copy)


@pytest.mark.parametrize("kind", ["superset", "collision"])
def test_copies_after_a_different_first_document_still_leave_lsh(kind):
    # The group's first document is not a copy of the others: the next round checks them
    # against the first of them (copies.COPY_ROUNDS).
    first, copy = long_text_and_superset() if kind == "superset" else colliding_single_shingles()
    m = 300
    result = gpudedup.dedup([first] + [copy] * m, threshold=0.8, backend="cpu")
    results = result.report["results"]
    assert result.keep.sum() == (1 if kind == "superset" else 2)  # the clusters are right either way
    assert results["identical_copies"] == m - 1
    assert results["candidate_pairs"] <= m + 1, results["candidate_pairs"]


# --- io/sizes.py (same commit): the read estimate must at least cover the text it reads ----------


# Dictionary-encoded columns (pyarrow's default) hold each distinct text once on disk: the
# estimate must count the decoded strings.
def test_read_estimate_covers_the_text_of_parquet_copies(tmp_path):
    import pyarrow.parquet as pq
    from gpudedup.io.sizes import file_read_bytes

    text = " ".join(f"w{i}" for i in range(2000))
    path = tmp_path / "copies.parquet"
    pq.write_table(pa.table({"id": list(range(3000)), "text": [text] * 3000}), path)
    kept, _ = file_read_bytes(path, "parquet")
    assert kept >= 3000 * len(text), (kept, 3000 * len(text))


# A gzip trailer's ISIZE covers its last member only: the estimate must count every member.
def test_read_estimate_covers_the_text_of_a_multi_member_gzip(tmp_path):
    import gzip as gzip_module
    import json

    from gpudedup.io.read import read_corpus
    from gpudedup.io.sizes import file_read_bytes

    # A first member of 5 MB of repetitive records (about 100:1) and a last member of 0.4 MB
    # that compresses to almost nothing: its ISIZE is larger than the whole file, so believed.
    line = json.dumps({"text": " ".join(f"w{i}" for i in range(150))}) + "\n"
    big = (line * 5000).encode()
    small = (json.dumps({"text": "x " * 200_000}) + "\n").encode()
    path = tmp_path / "multi.jsonl.gz"
    path.write_bytes(gzip_module.compress(big) + gzip_module.compress(small))
    assert read_corpus([path]).num_rows == 5001  # the reader reads every member
    kept, _ = file_read_bytes(path, "jsonl")
    assert kept >= len(big) + len(small), (kept, len(big) + len(small))
