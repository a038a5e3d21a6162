"""verify.py: exact Jaccard against Python sets (of the canonical shingles as strings, from
tests/oracles.py, not of gpudedup's shingle hashes), the column trick with the top bit, the
signature pre-filter's cut-off against an exact binomial CDF, and the chunking."""

import itertools

import numpy as np
import pytest

from gpudedup.core.hashing import draw_permutations
from gpudedup.core.minhash import minhash_signatures
from gpudedup.core.shingling import ShingleSpec, shingle_hashes
from gpudedup.core.ragged import weighted_ranges
from gpudedup.core.verify import (SIGNATURE_TAIL, SetArrays, agreement_cutoff, as_set_matrix, document_sets,
                                  pair_jaccard, plausible)
from oracles import exact_cutoff, jaccard, shingle_set

TOP = 1 << 63


def text_provider(texts, spec):
    """The shingles_of adapter document_sets expects: doc indices -> ShingleBatch."""
    calls = []

    def shingles_of(docs):
        calls.append(np.asarray(docs).tolist())
        return shingle_hashes([texts[int(d)] for d in docs], spec)

    shingles_of.calls = calls
    return shingles_of


def row_provider(rows, batch_from_rows):
    def shingles_of(docs):
        return batch_from_rows([rows[int(d)] for d in docs])

    return shingles_of


def string_sets(texts, spec):
    """The canonical shingles of each text as a set of strings (the oracle)."""
    return [shingle_set(text, spec.kind, spec.n) for text in texts]


def random_corpus(seed, n_base=12):
    """Texts with partial overlaps: bases, edited variants, exact copies, repeats, tiny docs."""
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{i}" for i in range(40)] + ["The", "CAT", "sat"]
    texts = []
    for _ in range(n_base):
        base = list(rng.choice(vocabulary, size=int(rng.integers(3, 60))))
        texts.append(" ".join(base))
        for edits in [1, 3, 10]:
            variant = list(base)
            for _ in range(edits):
                i = int(rng.integers(0, len(variant)))
                op = rng.integers(0, 3)
                if op == 0:
                    variant[i] = str(rng.choice(vocabulary))
                elif op == 1 and len(variant) > 1:
                    del variant[i]
                else:
                    variant.insert(i, str(rng.choice(vocabulary)))
            texts.append(" ".join(variant))
        texts.append(" ".join(base))  # identical copy
    texts += ["a b a b a b", "b a b a", "x", "X", "lonely"]
    return texts


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind, n", [("word", 1), ("word", 3), ("char", 5)])
def test_pair_jaccard_matches_python_sets(seed, kind, n):
    texts = random_corpus(seed)
    spec = ShingleSpec(kind, n)
    docs = np.arange(len(texts), dtype=np.int64)
    cost = np.array([len(t) for t in texts], dtype=np.int64)
    sets = document_sets(text_provider(texts, spec), docs, cost, batch_cost=500)
    pairs = np.array(list(itertools.combinations(range(len(texts)), 2)), dtype=np.int64)
    first, second = pairs[:, 0], pairs[:, 1]
    got = pair_jaccard(sets, first, second)
    assert got.dtype == np.float64 and got.shape == (len(pairs),)

    oracle = string_sets(texts, spec)
    expected = [jaccard(oracle[a], oracle[b]) for a, b in pairs.tolist()]
    assert got.tolist() == expected
    # The corpus holds identical, partial and disjoint pairs.
    assert (got == 1.0).any() and (got == 0.0).any() and ((got > 0.3) & (got < 1.0)).any()


def test_tiny_chunk_budgets_give_the_same_result():
    texts = random_corpus(5, n_base=6)
    spec = ShingleSpec("word", 2)
    docs = np.arange(len(texts), dtype=np.int64)
    cost = np.array([len(t) for t in texts], dtype=np.int64)
    pairs = np.array(list(itertools.combinations(range(len(texts)), 2)), dtype=np.int64)
    first, second = pairs[:, 0], pairs[:, 1]

    reference = pair_jaccard(document_sets(text_provider(texts, spec), docs, cost, 1 << 30), first, second)
    provider = text_provider(texts, spec)
    one_at_a_time = document_sets(provider, docs, cost, batch_cost=1)
    assert provider.calls == [[d] for d in range(len(texts))]  # one document per chunk
    for chunk_elements in [1, 2, 7, 100]:
        assert np.array_equal(pair_jaccard(one_at_a_time, first, second, chunk_elements), reference)
    oracle = string_sets(texts, spec)
    assert reference.tolist() == [jaccard(oracle[a], oracle[b]) for a, b in pairs.tolist()]


def test_rows_follow_docs_subset_and_pair_order():
    texts = ["one two three four", "zzz", "one two three five", "", "one two three four", "q"]
    spec = ShingleSpec("word", 2)
    docs = np.array([0, 2, 3, 4], dtype=np.int64)  # an empty document among them
    sets = document_sets(text_provider(texts, spec), docs, np.array([4, 4, 4, 4]), 8)
    assert isinstance(sets, SetArrays) and np.diff(sets.indptr).tolist() == [3, 3, 0, 3]
    oracle = string_sets(texts, spec)
    first = np.array([3, 0, 1, 0], dtype=np.int64)  # rows, in any order, repeated
    second = np.array([0, 3, 3, 1], dtype=np.int64)
    expected = [jaccard(oracle[docs[a]], oracle[docs[b]]) for a, b in zip(first, second)]
    assert pair_jaccard(sets, first, second).tolist() == expected
    assert expected == [1.0, 1.0, 0.5, 0.5]


def test_document_sets_columns_flip_the_top_bit(batch_from_rows):
    rows = [
        [0, 1, TOP - 1, TOP, 2**64 - 1, 0, TOP],  # both halves, with repeats, unsorted
        [TOP + 7, TOP, 2**64 - 1],  # top bit set only: non-negative columns
        [3, 1, 0],  # top bit clear only: negative columns
        [2**64 - 1, 3, TOP - 1],
        [5],
    ]
    sets = document_sets(row_provider(rows, batch_from_rows), np.arange(5, dtype=np.int64),
                         np.ones(5, dtype=np.int64), batch_cost=2)
    assert sets.indices.dtype == np.int64
    for d, row in enumerate(rows):
        columns = sets.indices[sets.indptr[d]:sets.indptr[d + 1]]
        assert np.all(columns[1:] > columns[:-1])  # canonical: sorted, distinct (no np.diff: it wraps)
        back = (columns.view(np.uint64) ^ np.uint64(TOP)).tolist()
        assert back == sorted(set(row))
        assert np.all((columns < 0) == (np.array(back, dtype=np.uint64) < np.uint64(TOP)))
    assert (sets.indices < 0).any() and (sets.indices >= 0).any()

    pairs = list(itertools.combinations(range(5), 2)) + [(d, d) for d in range(5)]
    first = np.array([a for a, _ in pairs], dtype=np.int64)
    second = np.array([b for _, b in pairs], dtype=np.int64)
    # scipy's row-wise multiply on negative column indices counts the intersections right.
    matrix = as_set_matrix(sets)
    intersections = np.asarray(matrix[first].multiply(matrix[second]).sum(axis=1)).ravel()
    assert intersections.tolist() == [len(set(rows[a]) & set(rows[b])) for a, b in pairs]
    assert pair_jaccard(sets, first, second).tolist() == [
        jaccard(set(rows[a]), set(rows[b])) for a, b in pairs]


@pytest.mark.parametrize("target", [0.3, 0.9, 1.0])
def test_random_64_bit_sets_with_large_intersections(jaccard_pairs, batch_from_rows, target):
    # Intersections of hundreds of elements (beyond int8 and uint8 counts), both column signs.
    batch, jaccard = jaccard_pairs(40, target, union=600, seed=9)
    rows = [batch.hashes[batch.offsets[d]:batch.offsets[d + 1]] for d in range(batch.n_docs)]
    docs = np.arange(batch.n_docs, dtype=np.int64)
    sets = document_sets(row_provider(rows, batch_from_rows), docs,
                         np.full(batch.n_docs, 100, dtype=np.int64), batch_cost=1000)
    first, second = docs[0::2], docs[1::2]
    got = pair_jaccard(sets, first, second, chunk_elements=2000)
    assert np.all(got == jaccard)
    assert round(jaccard * 600) > 255 or target == 0.3


def test_empty_inputs():
    sets = document_sets(lambda docs: shingle_hashes([], ShingleSpec()), np.zeros(0, np.int64),
                         np.zeros(0, np.int64), 10)
    assert sets.indptr.tolist() == [0] and sets.indices.shape == (0,)
    assert pair_jaccard(sets, np.zeros(0, np.int64), np.zeros(0, np.int64)).shape == (0,)
    assert list(weighted_ranges(np.zeros(0, np.int64), 5)) == []


@pytest.mark.parametrize("budget", [1, 2, 3, 10, 1000])
def test_cost_chunks_partition(budget):
    rng = np.random.default_rng(budget)
    cost = rng.integers(0, 6, size=60)
    chunks = list(weighted_ranges(cost, budget))
    assert chunks[0][0] == 0 and chunks[-1][1] == cost.shape[0]
    for (_, stop), (next_start, _) in zip(chunks, chunks[1:]):
        assert stop == next_start
    for start, stop in chunks:
        assert stop > start
        assert stop - start == 1 or cost[start:stop].sum() <= budget
    if budget == 1:
        positive = np.flatnonzero(cost > 0)
        # No chunk holds two items of positive cost.
        assert all(np.count_nonzero(cost[start:stop]) <= 1 for start, stop in chunks)
        assert len(chunks) >= positive.size
    if budget == 1000:
        assert chunks == [(0, 60)]


# --- the signature pre-filter -------------------------------------------------------------


@pytest.mark.parametrize("num_columns", [8, 16, 32, 64, 128, 256])
def test_agreement_cutoff_matches_exact_binomial(num_columns):
    for threshold in [0.05, 0.3, 0.5, 0.7, 0.8, 0.85, 0.9, 0.95, 0.99]:
        expected = exact_cutoff(num_columns, threshold, SIGNATURE_TAIL)
        assert agreement_cutoff(num_columns, threshold) == expected, threshold
    for tail in [1e-3, 0.05, 0.5]:
        assert agreement_cutoff(num_columns, 0.8, tail) == exact_cutoff(num_columns, 0.8, tail)


def test_agreement_cutoff_edges():
    assert agreement_cutoff(128, 1.0) == 127
    assert agreement_cutoff(1, 1.0) == 0
    assert agreement_cutoff(32, 0.01) == -1  # P(0 agreements) = 0.99**32 is far above the tail
    assert agreement_cutoff(128, 0.8) == exact_cutoff(128, 0.8, 1e-9) > 50


def test_plausible_never_rejects_identical_sets():
    texts = ["a b a b a b", "b a b a b", "the cat sat", "the cat sat", "Σ σ", "σ Σ σ",
             "one", "ONE  "]
    pairs = [(0, 1), (2, 3), (4, 5), (6, 7)]
    sets = string_sets(texts, ShingleSpec("word", 1))
    assert all(sets[a] == sets[b] for a, b in pairs)  # the premise: identical shingle sets
    batch = shingle_hashes(texts, ShingleSpec("word", 1))
    first = np.array([a for a, _ in pairs], dtype=np.int64)
    second = np.array([b for _, b in pairs], dtype=np.int64)
    for num_perm in [1, 2, 16, 128, 256]:
        signatures = minhash_signatures(batch, draw_permutations(num_perm, seed=num_perm))
        for threshold in [0.01, 0.5, 0.8, 0.95, 0.999, 1.0]:
            keep = plausible(signatures, first, second, threshold)
            assert keep.dtype == bool and keep.tolist() == [True] * len(pairs)


def test_plausible_keeps_pairs_at_the_threshold_and_drops_far_ones(jaccard_pairs):
    perms = draw_permutations(128, seed=5)
    at, jaccard = jaccard_pairs(2000, 0.8, union=100, seed=12)
    assert jaccard == 0.8
    signatures = minhash_signatures(at, perms)
    first = np.arange(0, at.n_docs, 2, dtype=np.int64)
    assert plausible(signatures, first, first + 1, 0.8).all()
    far, _ = jaccard_pairs(2000, 0.2, union=100, seed=13)
    signatures = minhash_signatures(far, perms)
    assert not plausible(signatures, first, first + 1, 0.8).any()


@pytest.mark.parametrize("shingle", ["word", "char"])
def test_a_store_keeping_its_sets_signs_the_same_and_hands_out_the_same_sets(shingle):
    """MemoryStore's kept_sets_bytes: a store that keeps its sets (all of them, as an index
    add's does, or where they take well within its limit, at 9 bytes a shingle of the texts'
    sets in Python) cuts each text into its set rather than its hashes with repeats, and hands
    out the sets it kept; one whose sets take a byte more than its limit keeps none (it lets
    them go during its pass, which then makes hashes only). Band keys, signatures and the sets
    handed out are a re-shingling store's, and each set is as large as the text's set of
    shingles in Python."""
    from gpudedup.io.python_inputs import list_corpus
    from gpudedup.backends import get_backend
    from gpudedup.pipeline.protocols import LocalExecutor
    from gpudedup.pipeline.memory import MemoryStore
    from gpudedup.params import DedupParams
    from gpudedup.stages import Progress, StageLog
    from index_support import bible_records

    texts = [record["text"] for record in bible_records()[:300]] + ["", "too short"]
    corpus = list_corpus(texts, "text")
    params = DedupParams(shingle=shingle, ngram=5, batch_bytes=50_000)  # several batches
    permutations = draw_permutations(params.banding().bands * params.banding().rows, params.seed)
    taken = 9 * sum(len(shingle_set(text, shingle)) for text in texts)  # (SET_ELEMENT_BYTES a shingle)
    limits = {"none": 0, "all": None, "within its limit": 2 * taken, "past its limit": taken - 1}
    stores = {name: MemoryStore(corpus, params, get_backend("cpu"), limit) for name, limit in limits.items()}
    for store in stores.values():
        store.sign(params.shingle_spec(), params.banding(), permutations, LocalExecutor(), StageLog(), Progress())
    plain = stores["none"]
    assert [name for name, store in stores.items() if store.sets is not None] == ["all", "within its limit"]
    docs = np.array([0, 5, 17, 299, 300, 301])
    again = plain.document_sets(docs, Progress())
    for store in stores.values():
        assert np.array_equal(plain.active, store.active) and store.active.shape[0] == 301  # "" has no shingle
        assert np.array_equal(plain.signatures, store.signatures)
        assert np.array_equal(plain.keys, store.keys)
        kept = store.document_sets(docs, Progress())
        assert np.array_equal(again.indptr, kept.indptr) and np.array_equal(again.indices, kept.indices)
    assert np.diff(again.indptr).tolist() == [len(shingle_set(texts[d], shingle)) for d in docs]


def test_sets_past_their_limit_are_let_go_as_soon_as_the_rate_so_far_says_so():
    """SetsBuilder's limit: the sets of the rows so far, projected over the units still to come
    at their rate, are let go as soon as that passes the limit (so that a pass whose sets will
    not fit stops making them early), and never kept past it; within it every row is kept."""
    from gpudedup.core.verify import SET_ELEMENT_BYTES, SetsBuilder

    lengths = np.full(100, 50, np.int64)  # 100 documents of 50 units
    ten_each = (np.arange(100, dtype=np.int64), np.full(10, 10, np.int64))  # 10 rows of 10 elements

    def fed(limit: int, batches: int = 10) -> tuple[bool, int]:
        builder = SetsBuilder(lengths, limit)
        for batch in range(batches):
            builder.append(*ten_each)
            if not builder.kept:
                return False, batch + 1
        return True, batches

    every = SET_ELEMENT_BYTES * 1000  # 100 rows of 10 elements
    assert fed(every) == (True, 10)
    assert fed(every - 1) == (False, 1)  # the first tenth projects them all
    builder = SetsBuilder(lengths, every)
    for _ in range(10):
        builder.append(*ten_each)
    sets = builder.arrays()
    assert sets.indptr.shape[0] == 101 and sets.indices.shape[0] == 1000
    # A rate that rises late: let go at the batch that passes, not kept past the limit.
    builder = SetsBuilder(lengths, SET_ELEMENT_BYTES * 300)
    builder.append(np.arange(10, dtype=np.int64), np.ones(10, np.int64))  # 1 element a row
    assert builder.kept
    builder.append(np.arange(200, dtype=np.int64), np.full(10, 20, np.int64))  # (10 + 200) / 20 rows -> 1,050
    assert not builder.kept


def test_a_run_gives_the_same_whether_its_store_keeps_the_sets_or_not():
    """The same job over one corpus (run_job), its store keeping every set or none: the same
    pairs, Jaccards, checked pairs and clusters. The corpus holds identical copies and
    near-duplicates, so that the copies stage and verification both read sets."""
    from gpudedup.io.python_inputs import list_corpus
    from gpudedup.backends import get_backend
    from gpudedup.pipeline.job import run_job
    from gpudedup.pipeline.memory import MemoryStore
    from gpudedup.params import DedupParams
    from index_support import bible_records

    texts = [record["text"] for record in bible_records()[:400]]
    texts += texts[:20] + [text + " amen" for text in texts[20:60]]  # copies and near-duplicates
    corpus = list_corpus(texts, "text")
    params = DedupParams(shingle="word", ngram=3, threshold=0.7, batch_bytes=50_000)
    outcomes = [run_job(MemoryStore(corpus, params, get_backend("cpu"), limit), params, get_backend("cpu"))
                for limit in (0, None)]
    first = outcomes[0]
    assert first.pairs.count > 40 and first.clusters.count > 0
    for outcome in outcomes[1:]:
        assert np.array_equal(first.pair_a, outcome.pair_a) and np.array_equal(first.pair_b, outcome.pair_b)
        assert np.array_equal(first.jaccard, outcome.jaccard)
        assert np.array_equal(first.checked_jaccard, outcome.checked_jaccard)
        assert all(np.array_equal(a, b) for a, b in zip(first.clusters, outcome.clusters))
