"""The normalisation options of the shingle spec (docs/hash-spec.md, "Text normalisation")
against independent oracles, and the kernel backend against the numpy backend with each.

- ``unicode`` ("nfc", "nfkc"): gpudedup uses Arrow's ``utf8_normalize`` (utf8proc); the oracle
  is Python's ``unicodedata.normalize``. utf8proc follows a newer Unicode than Python 3.11's
  unicodedata (14.0.0), so the comparisons use text whose code points were all assigned in
  Unicode 14.0.0: by Unicode's normalisation stability policy, a string of such code points has
  the same NFC and NFKC under every later version. (Code points assigned later may normalise
  differently; those are compared only between gpudedup's backends.)
- ``strip_punctuation`` / ``strip_symbols``: the oracle removes, in a plain Python loop, the
  code points whose ``unicodedata.category`` starts with P / S (Unicode 14.0.0, the version of
  gpudedup's shipped table).
- the order of the steps (form, lower-case, strip, white space) is the oracle's own
  (tests/oracles.py, oracle_normalize), written from the spec, not from normalize.py.

Every test that uses Python's unicodedata as the oracle needs it to be the tables' version,
Unicode 14.0.0 (Python 3.11); on another Python they are skipped with that reason.
"""

from __future__ import annotations

import itertools
import unicodedata
from importlib import resources

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudedup.core import normalize
from gpudedup.backends.kernel_backend import KernelBackend
from gpudedup.backends.numpy_backend import NumpyBackend
from gpudedup.core.normalize import (PUNCTUATION, SYMBOL, NormalizationTables, normalize_text, normalize_utf8,
                                text_buffers, unicode_form_utf8)
from gpudedup.core.shingling import ShingleSpec, shingle_hashes, shingle_sets

from cupy_like import DeviceArray, cupy_like
from kernel_host.host_kernels import HostKernels
from oracles import WHITE_SPACE, oracle_hashes, oracle_normalize, oracle_poly_hash64, shingle_set

TABLES_UNICODE = "14.0.0"
needs_unicode_14 = pytest.mark.skipif(
    unicodedata.unidata_version != TABLES_UNICODE,
    reason=f"the oracle is Python's unicodedata, which must be Unicode {TABLES_UNICODE} (Python 3.11) like "
           f"gpudedup's tables; this Python has {unicodedata.unidata_version}")

# Every combination of the options: (unicode, strip_punctuation, strip_symbols).
OPTIONS = [dict(unicode=form, strip_punctuation=punct, strip_symbols=sym)
           for form, punct, sym in itertools.product([None, "nfc", "nfkc"], [False, True], [False, True])]
OPTION_IDS = [f"{o['unicode']}-p{int(o['strip_punctuation'])}-s{int(o['strip_symbols'])}" for o in OPTIONS]

# Code points assigned in Unicode 14.0.0 (Python 3.11), except surrogates, which are not text.
ASSIGNED_14 = [cp for cp in range(0x110000) if unicodedata.category(chr(cp)) not in ("Cn", "Cs")]

# Where the options are easy to get wrong.
ADVERSARIAL = [
    "e\u0301", "E\u0301", "\u00e9", "A\u030a", "\u212b", "\u2126", "\u212a",  # combining marks, singletons
    "=\u0338", "\u2260", "\u1100\u1161\u11a8", "\uac00", "\u0f73", "\u0344", "\u0345", "\u1e9b\u0323",
    "\u0130", "I\u0307", "\u01c5", "\u1e9e", "\u03a3", "\u2160", "\u24b6", "\u24d0",  # case, categories
    "\ufb01", "\ufb03", "\uff21\uff42\uff43", "\uff01", "\uff0c", "\u00b2", "\u00bd", "\u2474", "\u3392",
    "\ufdfa", "\u2103", "\U0001d400", "\u210c", "\u037e", "\u0387", "\u1fef", "\uf900", "\u2026", "\ufe4f",
    "\u00a0", "\u2002", "\u3000", "\u1680", "\u2028", "\u0085",  # white space, some with NFKC forms
    "don't", "a , b", "a,b", " , ", "--", "(x)", "$5", "+3", "\u00a9", "\U0001f600", "\u2014", "\u00bf?",
    "_", "\u203f", "\u00ab\u00bb", "\u201c\u201d", "^", "`", "\u02c6", "\x1c",
]
ADVERSARIAL_TEXTS = ADVERSARIAL + [
    "Don't  STOP , \ufb01ne \uff26\uff55\uff4c\uff4c e\u0301 $5 +3 \u2014 ok!", "!!!", "\u2026 \u2026", "\u2474\u2475",
    "a \u00a9 b", "\u24b6\u24b7 \u24d0", ", . ; :", "x" + "\u0301" * 20, "\ufdfa\ufdfa", "\u3392 \u3393",
]


def spec_of(kind: str, n: int, options: dict) -> ShingleSpec:
    return ShingleSpec(kind, n, **options)


def rows_of(batch) -> list[list[int]]:
    offsets = [int(o) for o in batch.offsets]
    return [[int(h) for h in batch.hashes[offsets[d]:offsets[d + 1]]] for d in range(len(offsets) - 1)]


def normalised_batch(texts, options: dict) -> list[str]:
    """gpudedup's normalised texts of one batch, as Python strings."""
    data, offsets = text_buffers(texts)
    codepoints, new_offsets = normalize_utf8(data, offsets, ShingleSpec(**options))
    assert codepoints.dtype == np.uint32 and new_offsets.dtype == np.int64
    assert new_offsets.shape == (len(texts) + 1,) and int(new_offsets[0]) == 0
    return [codepoints[new_offsets[d]:new_offsets[d + 1]].tobytes().decode("utf-32-le")
            for d in range(len(texts))]


# --- the category table -------------------------------------------------------------------


@needs_unicode_14
def test_category_table_is_the_general_category_of_every_code_point():
    flags = normalize.category_flags_table()
    assert flags.dtype == np.uint8 and flags.shape == (0x110000,)
    expected = np.zeros(0x110000, dtype=np.uint8)
    for cp in range(0x110000):
        major = unicodedata.category(chr(cp))[0]
        expected[cp] = PUNCTUATION if major == "P" else SYMBOL if major == "S" else 0
    np.testing.assert_array_equal(flags, expected)
    assert int((expected == PUNCTUATION).sum()) > 700 and int((expected == SYMBOL).sum()) > 7000


def test_category_file_ranges_are_sorted_disjoint_and_named():
    ranges = normalize.punctuation_symbol_ranges()
    categories = {"Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So"}
    assert {category for _, _, category in ranges} == categories
    for (first, last, category), (next_first, _, next_category) in zip(ranges, ranges[1:]):
        assert first <= last < next_first
        assert last + 1 < next_first or category != next_category  # maximal runs
    header = resources.files("gpudedup").joinpath("data/general_category_ps.txt").read_text("ascii")
    assert header.startswith(f"# Unicode {TABLES_UNICODE} general categories P* and S*")


def test_lower_casing_keeps_white_space_and_categories():
    # normalize_codepoints looks up White_Space and the categories of the lowered code points;
    # that is looking up the original ones because lower-casing never changes either.
    tables = normalize.host_tables()
    lowered = tables.lowercase
    np.testing.assert_array_equal(tables.white[lowered], tables.white)
    np.testing.assert_array_equal(tables.category_flags[lowered], tables.category_flags)


def test_tables_on_a_side():
    host = normalize.host_tables()
    assert all(a is b for a, b in zip(normalize.tables_on(np), host))  # numpy: no copy
    device = normalize.tables_on(cupy_like)
    assert isinstance(device, NormalizationTables)
    for table, on_device in zip(host, device):
        assert isinstance(on_device, DeviceArray)
        np.testing.assert_array_equal(on_device.get(), table)
    assert KernelBackend(cupy_like, HostKernels(), "host").tables.category_flags.dtype == np.uint8


# --- the Unicode forms ----------------------------------------------------------------------


@needs_unicode_14
@pytest.mark.parametrize("form", ["nfc", "nfkc"])
def test_every_assigned_code_point_alone(form):
    # Each code point of Unicode 14.0.0 as a document of its own, all in one batch.
    texts = [chr(cp) for cp in ASSIGNED_14]
    data, offsets = text_buffers(texts)
    normalized, new_offsets = unicode_form_utf8(data, offsets, form)
    assert normalized.dtype == np.uint8 and new_offsets.dtype == np.int64
    got = pa.LargeStringArray.from_buffers(len(texts), pa.py_buffer(new_offsets), pa.py_buffer(normalized))
    expected = [unicodedata.normalize(form.upper(), text) for text in texts]
    mismatches = [(f"U+{ord(t):04X}", g, e) for t, g, e in zip(texts, got.to_pylist(), expected) if g != e]
    assert mismatches == []


@needs_unicode_14
@pytest.mark.parametrize("options", OPTIONS, ids=OPTION_IDS)
def test_every_assigned_code_point_through_the_whole_normalisation(options):
    texts = [f"A{chr(cp)}b" for cp in ASSIGNED_14[::7]] + [chr(cp) for cp in ASSIGNED_14[3::7]]
    assert normalised_batch(texts, options) == [oracle_normalize(t, **options) for t in texts]


@needs_unicode_14
@pytest.mark.parametrize("options", OPTIONS, ids=OPTION_IDS)
def test_adversarial_texts(options):
    texts = ADVERSARIAL_TEXTS + [None, "", " ", WHITE_SPACE]
    assert normalised_batch(texts, options) == [oracle_normalize(t, **options) for t in texts]
    for text in ADVERSARIAL_TEXTS:  # alone: no neighbour to hide a mistake at a document boundary
        assert normalize_text(text, ShingleSpec(**options)) == oracle_normalize(text, **options)


def test_explicit_cases():
    punct, sym = ShingleSpec(strip_punctuation=True), ShingleSpec(strip_symbols=True)
    nfc, nfkc = ShingleSpec(unicode="nfc"), ShingleSpec(unicode="nfkc")
    assert normalize_text("a , b", punct) == "a b"  # removed before white space is collapsed
    assert normalize_text("don't", punct) == "dont"
    assert normalize_text(" ,a; ", punct) == "a"
    assert normalize_text("!?! \u2026", punct) == ""
    assert normalize_text("$5 + 3 = 8 \u00a9", sym) == "5 3 8"
    assert normalize_text("$5, ok", punct) == "$5 ok"
    assert normalize_text("e\u0301", nfc) == "\u00e9"
    assert normalize_text("e\u0301", ShingleSpec()) == "e\u0301"
    assert normalize_text("\ufb01 \uff26\uff55\uff4c\uff4c", nfkc) == "fi full"
    assert normalize_text("\ufb01", nfc) == "\ufb01"
    assert normalize_text("\u2474", ShingleSpec(unicode="nfkc", strip_punctuation=True)) == "1"
    # NFKC first: a circled capital (So) becomes a letter and is kept; without NFKC it is a symbol.
    assert normalize_text("\u24b6", ShingleSpec(unicode="nfkc", strip_symbols=True)) == "a"
    assert normalize_text("\u24b6", sym) == ""
    assert normalize_text("\u0130", nfkc) == "i"  # simple lower-case after the form


def test_forms_do_not_reach_across_documents():
    # A combining mark starting a document does not compose with the previous document's end.
    texts = ["e", "\u0301x", "\u1100", "\u1161", "a,", ",b"]
    got = normalised_batch(texts, dict(unicode="nfc", strip_punctuation=True))
    assert got == ["e", "\u0301x", "\u1100", "\u1161", "a", "b"]


@needs_unicode_14
@pytest.mark.parametrize("options", OPTIONS, ids=OPTION_IDS)
def test_every_punctuation_and_symbol_code_point(options):
    # Each code point of the table beside letters and white space: "a<c>b" and "a <c> b".
    points = [chr(cp) for first, last, _ in normalize.punctuation_symbol_ranges() for cp in range(first, last + 1)]
    texts = [f"a{c}b" for c in points] + [f"a {c} b" for c in points] + [c * 3 for c in points]
    assert normalised_batch(texts, options) == [oracle_normalize(t, **options) for t in texts]


def test_ascii_and_unicode_paths_agree_when_stripping():
    ascii_docs = [" Hello, World! ", "a - b", "(x) [y] {z}", "50% off: $5", "", "..."]
    for options in OPTIONS:
        alone = normalised_batch(ascii_docs, options)
        with_unicode = normalised_batch(ascii_docs + ["\u03a9 \u2014 \u00e9"], options)
        assert alone == with_unicode[:-1]


def test_default_spec_is_the_canonical_normalisation():
    # No option: normalize_utf8 is decoding and normalize_codepoints as before the options.
    texts = ADVERSARIAL_TEXTS + [None, ""]
    data, offsets = text_buffers(texts)
    got = normalize_utf8(data, offsets, ShingleSpec())
    expected = normalize.normalize_codepoints(*normalize.decode_utf8(data, offsets))
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(got[1], expected[1])
    assert normalised_batch(texts, {}) == [oracle_normalize(t) for t in texts]


# Random text: code points assigned in Unicode 14.0.0 (hypothesis draws characters from
# Python's unicodedata; Cn, unassigned, is left out) and the adversarial pieces above.
random_texts = st.one_of(
    st.none(),
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cn")), max_size=30),
    st.lists(st.one_of(st.sampled_from(ADVERSARIAL), st.sampled_from(list(WHITE_SPACE)),
                       st.characters(blacklist_categories=("Cs", "Cn"))), max_size=15).map("".join),
)


@needs_unicode_14
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(random_texts, max_size=6), options=st.sampled_from(OPTIONS))
def test_hypothesis_normalisation_matches_oracle(texts, options):
    assert normalised_batch(texts, options) == [oracle_normalize(t, **options) for t in texts]


# --- shingles -----------------------------------------------------------------------------


@needs_unicode_14
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(random_texts, max_size=6), options=st.sampled_from(OPTIONS),
       kind=st.sampled_from(["word", "char"]), n=st.integers(1, 5))
def test_hypothesis_shingles_match_oracle(texts, options, kind, n):
    spec = spec_of(kind, n, options)
    assert rows_of(shingle_hashes(texts, spec)) == [oracle_hashes(t, kind, n, **options) for t in texts]
    # The sets: Python sets of the oracle's shingle strings, hashed by the oracle's hash.
    expected_sets = [sorted({oracle_poly_hash64(map(ord, s)) for s in shingle_set(t, kind, n, **options)})
                     for t in texts]
    assert rows_of(shingle_sets(texts, spec)) == expected_sets


@needs_unicode_14
@pytest.mark.parametrize("options", OPTIONS, ids=OPTION_IDS)
@pytest.mark.parametrize("kind, n", [("word", 1), ("word", 3), ("char", 1), ("char", 4)])
def test_adversarial_shingle_sets(options, kind, n):
    texts = ADVERSARIAL_TEXTS + [None, "", "!!!"]
    spec = spec_of(kind, n, options)
    assert rows_of(shingle_hashes(texts, spec)) == [oracle_hashes(t, kind, n, **options) for t in texts]
    expected_sets = [sorted({oracle_poly_hash64(map(ord, s)) for s in shingle_set(t, kind, n, **options)})
                     for t in texts]
    assert rows_of(shingle_sets(texts, spec)) == expected_sets


def test_texts_that_become_empty_have_no_shingles():
    texts = ["!!! ...", "\u2026", "a", ", ; :", "$ + ="]
    spec = ShingleSpec("word", 2, unicode="nfkc", strip_punctuation=True, strip_symbols=True)
    assert shingle_hashes(texts, spec).counts().tolist() == [0, 0, 1, 0, 0]
    assert shingle_sets(texts, spec).counts().tolist() == [0, 0, 1, 0, 0]


# --- the kernel backend, bit for bit with the numpy backend -------------------------------


SIDES = [pytest.param(np, id="numpy"), pytest.param(cupy_like, id="cupy_like")]


def backend_texts() -> list:
    rng = np.random.default_rng(16)
    alphabet = list("abc ABC,.;!?'-$+ \t") + ["\u00e9", "e\u0301", "\ufb01", "\uff21", "\u2014", "\u00a9",
                                                "\u3000", "\u2474", "\U0001f600", "\u24b6", "\u0130"]
    random = ["".join(rng.choice(alphabet, size=int(length))) for length in rng.integers(0, 120, size=150)]
    # Code points assigned after Unicode 14.0.0 (Cyrillic modifier letters of 15.0, whose NFKC
    # is a Cyrillic letter in a utf8proc that knows them): both backends use Arrow, so they agree
    # whatever Unicode version it follows.
    later = ["\U0001e030\U0001e031 x", "\U0001e04b"]
    return ADVERSARIAL_TEXTS + random + later + [None, "", "  ", "plain ascii, only. text!"]


@pytest.mark.parametrize("xp", SIDES)
@pytest.mark.parametrize("options", OPTIONS[1:], ids=OPTION_IDS[1:])
@pytest.mark.parametrize("kind, n", [("word", 2), ("char", 5)])
def test_kernel_backend_equals_numpy(xp, options, kind, n):
    spec = spec_of(kind, n, options)
    backend = KernelBackend(xp, HostKernels(), description="kernels on the host shim")
    for texts in (backend_texts(), ["only ascii, here!", "and here; too $5"]):  # the ASCII paths too
        data, offsets = text_buffers(texts)
        ours = backend.shingle_hashes(data, offsets, spec)
        reference = NumpyBackend().shingle_hashes(data, offsets, spec)
        np.testing.assert_array_equal(backend.to_host(ours.offsets), reference.offsets)
        np.testing.assert_array_equal(backend.to_host(ours.hashes), reference.hashes)


@pytest.mark.parametrize("form", ["nfc", "nfkc"])
def test_unicode_form_on_the_device_side(form):
    # Device data goes to the host for utf8proc and comes back as device arrays.
    texts = ["e\u0301 \ufb01", "", "\uff21"]
    data, offsets = text_buffers(texts)
    on_device, device_offsets = unicode_form_utf8(cupy_like.asarray(data), cupy_like.asarray(offsets), form,
                                                  cupy_like)
    assert isinstance(on_device, DeviceArray) and isinstance(device_offsets, DeviceArray)
    host, host_offsets = unicode_form_utf8(data, offsets, form)
    np.testing.assert_array_equal(on_device.get(), host)
    np.testing.assert_array_equal(device_offsets.get(), host_offsets)
