"""The CPU backend's compiled shingling and MinHash, both builds of the loops (the C extension
built at install, gpudedup._cpu_kernels, and numba's, gpudedup/backends/cpu_kernels.py),
against the numpy reference (shingling.utf8_shingle_hashes, shingling.unique_per_row,
minhash.minhash_signatures), bit for bit:

- every shingle spec (word and char n-grams of any n, Unicode form none / NFC / NFKC, stripping
  punctuation and symbols, each combination) over random batches of texts drawn from every
  kind of character the definition treats apart: multi-byte UTF-8, characters with a lowercase
  mapping, every White_Space code point and the separators that are not, punctuation and
  symbols, compatibility characters; empty, null and blank documents, documents shorter than n,
  and very long ones;
- token n-grams over ids of each unit width (uint8, uint16, uint32);
- the per-row sort behind shingle sets, on rows no hash function would make (clustered values,
  long runs of repeats), against numpy's unique;
- the backend: the C loops where they were built, numba's where they were not, the numpy
  reference with GPUDEDUP_CPU_KERNELS=numpy or without either, and a whole dedup of the shipped
  sample giving the same pairs, clusters and kept rows on every route.

Numba is a base dependency, and CI installs with a C compiler: the module skips only where numba
is not installed at all, and fails where the C extension was not built.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("numba")

import gpudedup  # noqa: E402
from gpudedup import _cpu_kernels  # noqa: E402
from gpudedup.backends import cpu_kernels, get_backend, numpy_backend  # noqa: E402
from gpudedup.backends.compiled_steps import CompiledSteps, as_indices  # noqa: E402
from gpudedup.backends.numpy_backend import NumpyBackend, numba_steps  # noqa: E402
from gpudedup.compiled import KERNEL_SWITCH  # noqa: E402
from gpudedup.core.normalize import (WHITE_SPACE, normalize_utf8, punctuation_symbol_ranges,  # noqa: E402
                                simple_lowercase_pairs, text_buffers)
from gpudedup.core.shingling import ShingleBatch, ShingleSpec, unique_per_row, utf8_shingle_hashes  # noqa: E402

# Both builds of the loops, each compared with the reference on every input.
BUILDS = [CompiledSteps(_cpu_kernels, "C"), CompiledSteps(cpu_kernels, "numba")]
FORMS = [None, "nfc", "nfkc"]
STRIPS = [(False, False), (True, False), (False, True), (True, True)]


# --- what is compared ----------------------------------------------------------------------------


def assert_same_batch(ours: ShingleBatch, reference: ShingleBatch) -> None:
    """Offsets and hashes equal element for element, with the reference's dtypes."""
    assert ours.offsets.dtype == reference.offsets.dtype == np.int64
    assert ours.hashes.dtype == reference.hashes.dtype == np.uint64
    np.testing.assert_array_equal(ours.offsets, reference.offsets)
    np.testing.assert_array_equal(ours.hashes, reference.hashes)


def assert_kernels_match(data: np.ndarray, offsets: np.ndarray, spec: ShingleSpec) -> ShingleBatch:
    """shingle_hashes, shingle_sets and (for text) the normalised text of both builds against the
    numpy reference; returns the reference's hashes."""
    reference = utf8_shingle_hashes(data, offsets, spec)
    for steps in BUILDS:
        assert_same_batch(steps.shingle_hashes(data, offsets, spec), reference)
        assert_same_batch(steps.shingle_sets(data, offsets, spec), unique_per_row(reference))
        if spec.kind != "token":
            units, unit_offsets, word_counts = steps.normalize(data, offsets, spec)
            expected_units, expected_offsets = normalize_utf8(data, offsets, spec)
            np.testing.assert_array_equal(units, expected_units)
            np.testing.assert_array_equal(unit_offsets, expected_offsets)
            texts = [units[a:b].tobytes().decode("utf-32-le") for a, b in zip(unit_offsets[:-1], unit_offsets[1:])]
            assert word_counts.tolist() == [len(text.split(" ")) if text else 0 for text in texts]
    return reference


# --- texts ---------------------------------------------------------------------------------------

# Code points with a simple lowercase mapping, and the first and last of every P* / S* range.
UPPER = [chr(cp) for cp in simple_lowercase_pairs()[:, 0].tolist()]
PUNCTUATION_SYMBOLS = sorted({chr(cp) for first, last, _ in punctuation_symbol_ranges() for cp in (first, last)})
WHITE = [chr(cp) for cp in WHITE_SPACE]
# What NFC / NFKC change (combining marks, ligatures, full-width and circled letters, Kelvin
# sign, the Arabic ligature that NFKC turns into words), the information separators (white
# space to Python's str.split, not to Unicode), and 2-, 3- and 4-byte UTF-8.
SPECIAL = ["e\u0301", "\u0301", "A\u030a", "\ufb01", "\uff26\uff55\uff4c\uff4c", "\u24b6", "\u2474", "\u212a",
           "\u2126", "\ufdfa", "\u0130", "\u03a3", "\u1e9e", "\x1c", "\x1d", "\x1e", "\x1f", "\u00e9", "\u4e2d\u6587",
           "\U0001f600", "\U00010d50", "\u0000"]
WORDS = ["the", "The", "CAT", "sat", "on", "a", "mat", "don't", "e-mail", "x"]

pieces = st.one_of(
    st.sampled_from(WORDS), st.sampled_from(WHITE), st.sampled_from(UPPER), st.sampled_from(PUNCTUATION_SYMBOLS),
    st.sampled_from(SPECIAL), st.characters(exclude_categories=("Cs",)),
)
documents = st.one_of(
    st.none(),
    st.lists(pieces, max_size=30).map("".join),
    st.lists(st.sampled_from(WHITE), max_size=4).map("".join),  # empty or blank
    st.lists(st.sampled_from(WORDS + WHITE[:3]), max_size=60).map("".join),
)
batches = st.lists(documents, max_size=10)


@pytest.mark.parametrize("strip", STRIPS, ids=["no-strip", "punctuation", "symbols", "both"])
@pytest.mark.parametrize("unicode", FORMS, ids=["as-is", "nfc", "nfkc"])
@pytest.mark.parametrize("kind", ["word", "char"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=batches, n=st.integers(1, 7))
def test_text_shingles_match_the_numpy_reference(texts, n, kind, unicode, strip):
    spec = ShingleSpec(kind, n, unicode=unicode, strip_punctuation=strip[0], strip_symbols=strip[1])
    assert_kernels_match(*text_buffers(texts), spec)


def long_documents(seed: int) -> list[str]:
    """Documents of 1 to 300,000 characters from every class of characters above, with short
    and empty ones among them; one a single 50,000-character word, one a phrase repeated."""
    rng = np.random.default_rng(seed)
    pool = WORDS * 40 + WHITE * 3 + UPPER[::7] + PUNCTUATION_SYMBOLS[::5] + SPECIAL
    texts = ["".join(rng.choice(pool, size)) for size in (300_000, 40_000, 5_000, 3, 1)]
    return texts + ["", "  ", "W" * 50_000, "the cat sat on the mat " * 5_000, None]


@pytest.mark.parametrize("spec", [
    ShingleSpec("word", 5), ShingleSpec("char", 5), ShingleSpec("word", 1), ShingleSpec("char", 1),
    ShingleSpec("word", 13, unicode="nfkc", strip_punctuation=True),
    ShingleSpec("char", 9, unicode="nfc", strip_symbols=True),
], ids=str)
def test_very_long_documents_match(spec):
    reference = assert_kernels_match(*text_buffers(long_documents(seed=17)), spec)
    assert reference.counts().max() > 10_000


def test_every_document_of_a_large_batch_lands_in_its_row():
    """Thousands of documents in one batch, each shingled alone and in the batch: the batch's
    rows are the documents' own (offsets are per document, nothing leaks to a neighbour)."""
    rng = np.random.default_rng(3)
    pool = WORDS * 10 + WHITE + SPECIAL
    texts = ["".join(rng.choice(pool, int(size))) for size in rng.integers(0, 40, 3_000)]
    spec = ShingleSpec("word", 3)
    batch = assert_kernels_match(*text_buffers(texts), spec)
    for d in rng.choice(len(texts), 50, replace=False):
        for steps in BUILDS:
            alone = steps.shingle_hashes(*text_buffers([texts[d]]), spec)
            np.testing.assert_array_equal(alone.hashes, batch.hashes[batch.offsets[d]:batch.offsets[d + 1]])


@pytest.mark.parametrize("spec", [ShingleSpec("word"), ShingleSpec("char", 3)], ids=str)
@pytest.mark.parametrize("texts", [[], [None, "", " \t\u3000", "\u2028"]], ids=["no-documents", "empty-and-blank"])
def test_batches_without_shingles(spec, texts):
    batch = assert_kernels_match(*text_buffers(texts), spec)
    assert batch.hashes.shape == (0,) and batch.offsets.tolist() == [0] * (len(texts) + 1)


@pytest.mark.parametrize("documents", [0, 3])
def test_token_batches_without_ids(documents):
    batch = assert_kernels_match(np.zeros(0, np.uint32), np.zeros(documents + 1, np.int64), ShingleSpec("token", 2))
    assert batch.hashes.shape == (0,) and batch.offsets.tolist() == [0] * (documents + 1)


# --- token ids -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32])
@settings(max_examples=80, deadline=None)
@given(data=st.data(), n=st.integers(1, 8))
def test_token_shingles_match_for_every_unit_width(dtype, data, n):
    top = int(np.iinfo(dtype).max)
    ids = st.one_of(st.integers(0, top), st.sampled_from([0, 1, top - 1, top]))
    rows = data.draw(st.lists(st.lists(ids, max_size=25), max_size=8))
    values = np.array([i for row in rows for i in row], dtype=dtype)
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([len(row) for row in rows], out=offsets[1:])
    assert_kernels_match(values, offsets, ShingleSpec("token", n))


@pytest.mark.parametrize("n", [1, 5, 64])
def test_long_token_rows_match(n):
    rng = np.random.default_rng(n)
    lengths = np.array([0, 1, n - 1 if n > 1 else 2, n, 200_000, 7, 30_000])
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    values = rng.integers(0, 2**32, int(offsets[-1]), dtype=np.uint32)
    values[200_000:250_000] = 42  # a long run of one id: repeats of one shingle
    assert_kernels_match(values, offsets, ShingleSpec("token", n))


# --- the per-row sort of shingle sets --------------------------------------------------------------


def sorted_unique_rows(steps: CompiledSteps, rows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """sort_unique_rows of ``steps``'s build on ``rows`` (uint64 each), as (set_offsets, sets)."""
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum([row.shape[0] for row in rows], out=offsets[1:])
    values = np.concatenate(rows) if rows else np.zeros(0, np.uint64)
    set_offsets = np.empty_like(offsets)
    total = steps.loops.sort_unique_rows(as_indices(offsets), values, as_indices(set_offsets))
    assert total == set_offsets[-1]
    return set_offsets, values[:total]


def assert_rows_sorted_unique(rows: list[np.ndarray]) -> None:
    for steps in BUILDS:
        set_offsets, sets = sorted_unique_rows(steps, rows)
        for d, row in enumerate(rows):
            np.testing.assert_array_equal(sets[set_offsets[d]:set_offsets[d + 1]], np.unique(row))


hash_values = st.one_of(
    st.integers(0, 2**64 - 1),  # spread like real hashes
    st.integers(0, 1000),  # all in the lowest bucket: the insertion pass gives up, quicksort ends it
    st.integers(2**64 - 50, 2**64 - 1),
    st.sampled_from([0, 1 << 63, 2**64 - 1]),
)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.lists(hash_values, max_size=80), max_size=6))
def test_sort_unique_rows_matches_numpy_unique(rows):
    assert_rows_sorted_unique([np.array(row, dtype=np.uint64) for row in rows])


@pytest.mark.parametrize("length", [15, 16, 17, 1000, 70_000])
def test_sort_unique_rows_long_and_clustered_rows(length):
    """Rows around the insertion-only size, and long rows whose values crowd the lowest buckets
    (the insertion budget runs out: quicksort's way) or repeat a few values many times."""
    rng = np.random.default_rng(length)
    rows = [rng.integers(0, 2**64, length, dtype=np.uint64, endpoint=False),
            rng.integers(0, 1 << 20, length).astype(np.uint64),
            rng.choice(np.array([5, 2**63, 2**64 - 1], np.uint64), length),
            np.arange(length, 0, -1, dtype=np.uint64) << np.uint64(40)]
    assert_rows_sorted_unique(rows)


# --- MinHash signatures --------------------------------------------------------------------------


def oracle_signature_row(hashes: list[int], a: np.ndarray, b: np.ndarray) -> list[int]:
    """The MinHash definition in Python integers (docs/hash-spec.md): per permutation k, the
    least (a_k * (x mod 2**32) + b_k) mod 2**32 over the row's hashes x; 2**32 - 1 for none."""
    if not hashes:
        return [2**32 - 1] * len(a)
    return [min((int(a_k) * (x % 2**32) + int(b_k)) % 2**32 for x in hashes) for a_k, b_k in zip(a, b)]


@settings(max_examples=150, deadline=None)
@given(rows=st.lists(st.lists(hash_values, max_size=40), max_size=7), num_perm=st.sampled_from([1, 3, 96, 128]),
       seed=st.integers(0, 2**32 - 1))
def test_signatures_match_numpy_and_the_definition(rows, num_perm, seed):
    from gpudedup.core.hashing import draw_permutations
    from gpudedup.core.minhash import minhash_signatures
    from gpudedup.core.ragged import offsets_from_counts

    permutations = draw_permutations(num_perm, seed)
    batch = ShingleBatch(offsets_from_counts(np.array([len(row) for row in rows], np.int64)),
                         np.array([x for row in rows for x in row], dtype=np.uint64))
    reference = minhash_signatures(batch, permutations)
    for steps in BUILDS:
        ours = steps.signatures(batch, permutations)
        assert ours.dtype == np.uint32 and ours.shape == (len(rows), num_perm)
        np.testing.assert_array_equal(ours, reference)
    for d, row in enumerate(rows):
        assert reference[d].tolist() == oracle_signature_row(row, permutations.a, permutations.b)


def test_signatures_of_real_text_match_numpy():
    """Both shingle kinds of the shipped sample's first 300 chapters, the numpy backend's
    128-permutation family: every signature equal."""
    from gpudedup.core.hashing import draw_permutations
    from gpudedup.core.minhash import minhash_signatures

    with resources.as_file(resources.files("gpudedup").joinpath("data/bible_sample.jsonl.gz")) as path:
        import pyarrow.json as pajson

        texts = pajson.read_json(path).column("text").to_pylist()[:300]
    data, offsets = text_buffers(texts + ["", "   "])  # and two documents without shingles
    permutations = draw_permutations(128, 7)
    for kind in ("word", "char"):
        batch = utf8_shingle_hashes(data, offsets, ShingleSpec(kind, 5))
        expected = minhash_signatures(batch, permutations)
        for steps in BUILDS:
            np.testing.assert_array_equal(steps.signatures(batch, permutations), expected)


def test_the_c_loops_refuse_arrays_shorter_than_their_counts():
    """The C loops check that each array holds what the offsets say before they read or write
    (numba's trust their callers): a ValueError naming the array."""
    offsets, shingle_offsets = np.array([0, 10], np.uint64), np.array([0, 6], np.uint64)
    with pytest.raises(ValueError, match=r"^units holds 16 bytes, fewer than 10 items of 4 bytes$"):
        _cpu_kernels.char_hashes(np.zeros(4, np.uint32), offsets, 5, 1, 1, shingle_offsets, np.empty(6, np.uint64))
    with pytest.raises(ValueError, match=r"^hashes holds 40 bytes, fewer than 6 items"):
        _cpu_kernels.char_hashes(np.zeros(10, np.uint32), offsets, 5, 1, 1, shingle_offsets, np.empty(5, np.uint64))
    with pytest.raises(ValueError, match=r"^signatures holds"):
        _cpu_kernels.minhash_rows(offsets, np.zeros(10, np.uint32), np.ones(4, np.uint32), np.ones(4, np.uint32),
                                  np.empty((1, 3), np.uint32))


# --- the backend -----------------------------------------------------------------------------------


def record_loop_calls(monkeypatch, module, calls: list[str], label: str) -> None:
    """Each shingling, MinHash and merge loop of ``module`` (a build) appends ``label`` to
    ``calls`` when it runs."""
    for name in ("normalize_batch", "char_hashes", "word_hashes", "sort_unique_rows", "minhash_rows", "intersections",
                 "intersections_at_least", "signature_agreements"):
        if hasattr(module, name):  # (numba's merges are verify_kernels')
            original = getattr(module, name)
            monkeypatch.setattr(module, name, lambda *args, original=original: calls.append(label) or original(*args))


def test_the_backend_shingles_with_the_c_loops(monkeypatch):
    monkeypatch.delenv(KERNEL_SWITCH, raising=False)
    backend = get_backend("cpu")
    assert backend.steps.loops is _cpu_kernels and "+ C kernels" in backend.description
    calls: list[str] = []
    record_loop_calls(monkeypatch, _cpu_kernels, calls, "C")
    record_loop_calls(monkeypatch, cpu_kernels, calls, "numba")
    data, offsets = text_buffers(["The cat sat on the mat.", "the cat sat on a mat"])
    spec = ShingleSpec("word", 2)
    reference = utf8_shingle_hashes(data, offsets, spec)
    assert_same_batch(backend.shingle_hashes(data, offsets, spec), reference)
    assert_same_batch(backend.shingle_sets(data, offsets, spec), unique_per_row(reference))
    from gpudedup.core.hashing import draw_permutations
    from gpudedup.core.minhash import minhash_signatures

    permutations = draw_permutations(16, 1)
    np.testing.assert_array_equal(backend.signatures(reference, permutations),
                                  minhash_signatures(reference, permutations))
    assert calls == ["C"] * 6  # 2 loops for the hashes, 3 for the sets, 1 for the signatures


@pytest.mark.parametrize("value", ["numpy", "NumPy", " numpy "])
def test_the_switch_keeps_the_numpy_reference(monkeypatch, value):
    monkeypatch.setenv(KERNEL_SWITCH, value)
    backend = NumpyBackend()
    assert backend.steps is None and "kernels" not in backend.description
    calls: list[str] = []
    record_loop_calls(monkeypatch, _cpu_kernels, calls, "C")
    data, offsets = text_buffers(["a b c"])
    assert backend.shingle_hashes(data, offsets, ShingleSpec("word", 2)).hashes.shape == (2,)
    assert calls == []
    monkeypatch.setenv(KERNEL_SWITCH, "numba")  # "numba" takes numba's build whatever the size
    assert NumpyBackend().steps.loops is cpu_kernels
    monkeypatch.setenv(KERNEL_SWITCH, "C")  # and "c" the C build
    assert NumpyBackend().steps.loops is _cpu_kernels


def test_without_the_c_loops_the_backend_takes_numba_or_the_numpy_reference(monkeypatch, without_c_loops):
    """Where the C extension was not built, numba's loops run once started (the switch starts
    them here, as a large run would); where numba cannot be imported either (the GPU image has
    none), the numpy reference runs; and GPUDEDUP_CPU_KERNELS=c says why it cannot be taken."""
    import gpudedup.backends
    from gpudedup.errors import ParameterError

    monkeypatch.setenv(KERNEL_SWITCH, "numba")
    assert NumpyBackend().steps.loops is cpu_kernels
    monkeypatch.setenv(KERNEL_SWITCH, "c")
    with pytest.raises(ParameterError, match="C kernels were not built when gpudedup was installed .no C compiler"):
        NumpyBackend().shingle_hashes(*text_buffers(["a b"]), ShingleSpec("word", 2))
    monkeypatch.delenv(KERNEL_SWITCH)
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    monkeypatch.delitem(sys.modules, "gpudedup.backends.cpu_kernels")
    monkeypatch.delattr(gpudedup.backends, "cpu_kernels")
    assert numba_steps() is None
    backend = NumpyBackend()
    assert backend.steps is None and backend.description == f"numpy {np.__version__}"
    data, offsets = text_buffers(["a b c d", "", "a b"])
    spec = ShingleSpec("word", 3)
    reference = utf8_shingle_hashes(data, offsets, spec)
    assert_same_batch(backend.shingle_sets(data, offsets, spec), unique_per_row(reference))


def test_importing_gpudedup_and_its_backends_does_not_import_numba():
    code = ("import sys, gpudedup, gpudedup.backends, gpudedup.backends.numpy_backend, gpudedup.core.shingling, "
            "gpudedup.core.verify, gpudedup.pipeline.job\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numba' or m.endswith('_kernels')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


KERNEL_CACHE_PROBE = (
    "import numba, numpy as np\n"
    "from gpudedup.backends import cpu_kernels\n"
    "from gpudedup.core.hashing import draw_permutations\n"
    "from gpudedup.core.shingling import ShingleBatch\n"
    "batch = ShingleBatch(np.array([0, 2], dtype=np.int64), np.array([1, 2], dtype=np.uint64))\n"
    "from gpudedup.backends.compiled_steps import CompiledSteps\n"
    "CompiledSteps(cpu_kernels, 'numba').signatures(batch, draw_permutations(8, 1))\n"
    "from gpudedup.core import verify_kernels\n"
    "pairs = np.zeros(1, dtype=np.int64)\n"
    "verify_kernels.intersections(np.array([0, 2]), np.array([1, 2]), pairs, pairs, np.zeros(1, dtype=np.int64))\n"
    "print(repr(numba.config.CACHE_DIR))")


@pytest.mark.parametrize("numba_cache_dir", [False, True])
def test_compiled_kernels_are_cached_outside_the_package(tmp_path, numba_cache_dir):
    """The kernels' on-disk cache (compiled.kernel) goes to the user's cache folder (or
    NUMBA_CACHE_DIR), never beside cpu_kernels.py or verify_kernels.py, where it would outlive
    ``pip uninstall``; and numba's process-wide setting is left as it was, for other numba users."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    expected = tmp_path / "xdg" / "gpudedup" / "numba"
    if numba_cache_dir:
        env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba")
        expected = tmp_path / "numba"
    done = subprocess.run([sys.executable, "-c", KERNEL_CACHE_PROBE], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == repr(env.get("NUMBA_CACHE_DIR", ""))
    cached = [path.name for path in expected.rglob("*.nbi")]
    assert any(name.startswith("cpu_kernels.minhash_rows-") for name in cached), cached
    assert any(name.startswith("verify_kernels.intersections-") for name in cached), cached


# --- a whole run, with and without the kernels --------------------------------------------------------


@pytest.fixture(scope="module")
def sample() -> Path:
    with resources.as_file(resources.files("gpudedup").joinpath("data/bible_sample.jsonl.gz")) as path:
        yield Path(path)


@pytest.mark.parametrize("options", [
    dict(shingle="word"), dict(shingle="char"),
    dict(shingle="word", ngram=3, unicode="nfkc", strip_punctuation=True, strip_symbols=True),
    dict(shingle="word", staged=True), dict(shingle="char", staged=True),
], ids=["word", "char", "word-3-nfkc-stripped", "word-staged", "char-staged"])
def test_dedup_is_the_same_with_and_without_the_kernels(sample, tmp_path, monkeypatch, options):
    """The shipped sample, in memory and staged in a work directory: pairs, clusters, kept
    rows, every checked pair's Jaccard and the report's counts identical on the C loops, on
    numba's and with GPUDEDUP_CPU_KERNELS=numpy, and each route (shingling, and the exact
    check's intersections) really taken."""
    from gpudedup.core import verify, verify_kernels

    options = dict(options)
    staged = options.pop("staged", False)
    taken: list[str] = []
    record_loop_calls(monkeypatch, _cpu_kernels, taken, "C")
    record_loop_calls(monkeypatch, cpu_kernels, taken, "numba")
    reference = numpy_backend.utf8_shingle_hashes
    monkeypatch.setattr(numpy_backend, "utf8_shingle_hashes", lambda *args: taken.append("numpy") or reference(*args))
    scipy_route, merge = verify.scipy_intersections, verify_kernels.intersections_at_least
    monkeypatch.setattr(verify, "scipy_intersections",
                        lambda *args, **kwargs: taken.append("scipy") or scipy_route(*args, **kwargs))
    monkeypatch.setattr(verify_kernels, "intersections_at_least", lambda *args: taken.append("merge") or merge(*args))
    results = {}
    # (the switch's "numba" takes numba's route whatever the size: the sample is small)
    for route, expected in (("c", {"C"}), ("numba", {"numba", "merge"}), ("numpy", {"numpy", "scipy"})):
        monkeypatch.setenv(KERNEL_SWITCH, route)
        taken.clear()
        work = {"work_dir": tmp_path / f"work-{route}"} if staged else {}
        results[route] = gpudedup.dedup(sample, id_field="id", backend="cpu", **options, **work)
        assert set(taken) == expected
    assert "+ C kernels" in results["c"].report["backend"]
    for route in ("c", "numba"):
        ours, reference_run = results[route], results["numpy"]
        assert ours.pairs.equals(reference_run.pairs) and ours.pairs.num_rows > 50
        assert ours.clusters.equals(reference_run.clusters)
        assert np.array_equal(ours.keep, reference_run.keep) and not ours.keep.all()
        assert np.array_equal(ours.checked_jaccard, reference_run.checked_jaccard)
        assert ours.report["results"] == reference_run.report["results"]
