"""minhash.py against a brute-force Python computation (tests/oracles.py: the signatures and the
permutations from the specification), and the statistics of the signatures."""

import math

import numpy as np
import pytest

from gpudedup.core import minhash
from gpudedup.core.hashing import Permutations, draw_permutations
from gpudedup.core.minhash import minhash_signatures
from gpudedup.core.shingling import ShingleSpec, shingle_hashes
from oracles import EMPTY_SIGNATURE_VALUE, oracle_hashes, oracle_permutations, oracle_signatures

def random_rows(rng, n_docs, max_len, empty_every=0):
    rows = []
    for d in range(n_docs):
        if empty_every and d % empty_every == 0:
            rows.append([])
            continue
        row = rng.integers(0, 2**64, size=int(rng.integers(1, max_len + 1)), dtype=np.uint64)
        if row.size > 2:
            row[-1] = row[0]  # a repeat never changes a minimum
        rows.append(row.tolist())
    return rows


EDGE_ROWS = [
    [],
    [0],
    [2**64 - 1],
    [2**63, 2**63 + 1, 2**32],  # low 32 bits 0, 1, 0: top bits are ignored
    [0xFFFFFFFF, 0x1_FFFFFFFF],
    [],
    [],
    [5] * 10,
]


def test_brute_force_on_random_batches(batch_from_rows):
    rng = np.random.default_rng(11)
    perms = draw_permutations(24, seed=3)
    rows = EDGE_ROWS + random_rows(rng, 40, 30, empty_every=7)
    sig = minhash_signatures(batch_from_rows(rows), perms)
    assert sig.dtype == np.uint32 and sig.shape == (len(rows), 24)
    assert sig.tolist() == oracle_signatures(rows, *oracle_permutations(3, 24))


def test_high_bits_of_hashes_are_ignored(batch_from_rows):
    perms = draw_permutations(16, seed=9)
    low = [1, 2, 3, 0xDEADBEEF]
    high = [x + (k << 32) for k, x in enumerate(low, start=1)]
    sig = minhash_signatures(batch_from_rows([low, high]), perms)
    assert np.array_equal(sig[0], sig[1])


def test_signatures_of_real_shingles(batch_from_rows):
    texts = ["the cat sat on the mat", None, "", "the cat sat on a mat", "ΣΟΦΟΣ 😀 中文 " * 5, "x"]
    perms = draw_permutations(32, seed=42)
    batch = shingle_hashes(texts, ShingleSpec("char", 3))
    # From text to signature without gpudedup: the oracle's shingle hashes and permutations.
    rows = [oracle_hashes(text, "char", 3) for text in texts]
    sig = minhash_signatures(batch, perms)
    assert sig.tolist() == oracle_signatures(rows, *oracle_permutations(42, 32))
    assert np.all(sig[1] == EMPTY_SIGNATURE_VALUE) and np.all(sig[2] == EMPTY_SIGNATURE_VALUE)


def test_empty_documents_and_empty_batches(batch_from_rows):
    perms = draw_permutations(8, seed=1)
    sig = minhash_signatures(batch_from_rows([[], [], []]), perms)
    assert sig.shape == (3, 8) and sig.dtype == np.uint32
    assert np.all(sig == EMPTY_SIGNATURE_VALUE)
    sig = minhash_signatures(batch_from_rows([]), perms)
    assert sig.shape == (0, 8) and sig.dtype == np.uint32


def test_first_columns_are_the_smaller_signature(batch_from_rows):
    rng = np.random.default_rng(4)
    batch = batch_from_rows(random_rows(rng, 30, 50, empty_every=5))
    full = minhash_signatures(batch, draw_permutations(64, seed=77))
    for m in [1, 10, 63]:
        assert np.array_equal(minhash_signatures(batch, draw_permutations(m, seed=77)), full[:, :m])


@pytest.mark.parametrize("block", [1, 2, 3, 5, 8, 64])
def test_block_boundaries(monkeypatch, batch_from_rows, block):
    # Documents larger and smaller than a block, with runs of empty documents between blocks
    # and at both ends; block sizes that split the batch everywhere.
    rng = np.random.default_rng(block)
    lengths = [0, 0, 1, 4, 0, 9, 2, 0, 0, 0, 3, 1, 1, 17, 0, 5, 0, 2, 0, 0]
    rows = [rng.integers(0, 2**64, size=n, dtype=np.uint64).tolist() for n in lengths]
    perms = draw_permutations(12, seed=block)
    expected = oracle_signatures(rows, *oracle_permutations(block, 12))
    monkeypatch.setattr(minhash, "BLOCK_SHINGLES", block)
    runs = []
    original = minhash.blocks_of_documents

    def recording(offsets, docs, target):
        assert target == block  # the patched block size is the one used
        for run in original(offsets, docs, target):
            runs.append(run.tolist())
            yield run

    monkeypatch.setattr(minhash, "blocks_of_documents", recording)
    assert minhash_signatures(batch_from_rows(rows), perms).tolist() == expected
    nonempty = [d for d, n in enumerate(lengths) if n]
    assert sorted(d for run in runs for d in run) == nonempty
    if block < 8:
        assert len(runs) > 3  # the batch really was cut into several blocks


def test_blocks_of_documents_cover_every_nonempty_document_once(batch_from_rows):
    rng = np.random.default_rng(8)
    rows = random_rows(rng, 200, 12, empty_every=3)
    batch = batch_from_rows(rows)
    nonempty = np.flatnonzero(batch.counts() > 0)
    for target in [1, 7, 50, 10_000]:
        runs = list(minhash.blocks_of_documents(batch.offsets, nonempty, target))
        assert np.array_equal(np.concatenate(runs), nonempty)
        assert all(run.size > 0 for run in runs)


def test_block_boundaries_on_a_larger_batch(monkeypatch, batch_from_rows):
    rng = np.random.default_rng(21)
    rows = random_rows(rng, 300, 40, empty_every=4)
    perms = draw_permutations(8, seed=5)
    batch = batch_from_rows(rows)
    expected = oracle_signatures(rows, *oracle_permutations(5, 8))
    for block in [1, 13, 100, 1 << 16]:
        monkeypatch.setattr(minhash, "BLOCK_SHINGLES", block)
        assert minhash_signatures(batch, perms).tolist() == expected


# --- statistics ---------------------------------------------------------------------------

K = 128
PAIRS = 1500


def agreement(signatures):
    """bool (pairs, K): where the signatures of documents 2i and 2i+1 agree."""
    return signatures[0::2] == signatures[1::2]


@pytest.mark.parametrize("target", [0.2, 0.5, 0.8, 0.95])
def test_agreement_rate_estimates_jaccard(jaccard_pairs, target):
    batch, jaccard = jaccard_pairs(PAIRS, target, union=100, seed=int(target * 100))
    assert jaccard == pytest.approx(target)
    agree = agreement(minhash_signatures(batch, draw_permutations(K, seed=2024)))
    variance = jaccard * (1 - jaccard)

    # Mean over all pairs and columns: within 5 binomial sigmas of J.
    sigma_mean = math.sqrt(variance / agree.size)
    assert abs(agree.mean() - jaccard) <= 5 * sigma_mean

    # Each permutation on its own is an unbiased estimator (5 sigmas over PAIRS trials).
    per_column = agree.mean(axis=0)
    assert np.all(np.abs(per_column - jaccard) <= 5 * math.sqrt(variance / PAIRS))

    # The per-pair estimate from K columns has the binomial variance J(1-J)/K when the
    # permutations behave independently; correlated columns would inflate it.
    estimate = agree.mean(axis=1)
    ratio = estimate.var(ddof=1) / (variance / K)
    assert 0.6 <= ratio <= 1.5, ratio


def test_variance_check_detects_correlated_permutations(jaccard_pairs):
    # Negative control: K copies of one permutation give K-fold variance, which the bound
    # above rejects; it shows that the bound has teeth.
    batch, jaccard = jaccard_pairs(PAIRS, 0.5, union=100, seed=50)
    one = draw_permutations(1, seed=2024)
    copies = Permutations(a=np.repeat(one.a, K), b=np.repeat(one.b, K))
    estimate = agreement(minhash_signatures(batch, copies)).mean(axis=1)
    assert estimate.var(ddof=1) / (jaccard * (1 - jaccard) / K) > 1.5 * 10


def test_identical_sets_have_identical_signatures(jaccard_pairs):
    batch, jaccard = jaccard_pairs(200, 1.0, union=50, seed=3)
    assert jaccard == 1.0
    assert agreement(minhash_signatures(batch, draw_permutations(K, seed=1))).all()


def test_disjoint_sets_rarely_agree(jaccard_pairs):
    batch, jaccard = jaccard_pairs(500, 0.0, union=100, seed=4)
    assert jaccard == 0.0
    # Distinct low 32 bits and bijective permutations: minima of disjoint sets never agree.
    assert not agreement(minhash_signatures(batch, draw_permutations(K, seed=1))).any()
