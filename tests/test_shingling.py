"""normalize.py and shingling.py against a plain-Python oracle of the canonical definition.

The oracle (tests/oracles.py) is written from DESIGN.md ("Canonical shingling") and
normalize.py's docstring, and hashes with its own poly_hash64, not gpudedup's:
- lower-case per code point with str.lower, except U+0130 (capital I with dot above), whose
  simple lowercase mapping is 'i' (str.lower gives the two code points 'i' + U+0307); being
  per code point, Greek capital sigma always becomes U+03C3, never the final form U+03C2;
- white space is the Unicode White_Space property (NOT str.isspace, which also accepts the
  information separators U+001C..U+001F); runs become one space, both ends are stripped;
- word n-grams: tokens split on single spaces, n consecutive ones joined by one space;
  char n-grams: n consecutive code points; a non-empty text shorter than n units has exactly
  one shingle (the whole text); an empty text has none;
- a shingle's hash is poly_hash64 of its code points.
"""

import re

import numpy as np
import pyarrow as pa
import pytest

from gpudedup.errors import InputError, ParameterError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudedup.core import normalize, shingling
from gpudedup.core.normalize import encode_codepoints, normalize_codepoints, normalize_text
from gpudedup.core.shingling import ShingleSpec, shingle_hashes, shingle_sets
from oracles import WHITE_SPACE, oracle_hashes, oracle_normalize, oracle_poly_hash64, oracle_shingles

# --- comparing with the oracle --------------------------------------------------------------


def rows_of(batch):
    offsets = [int(o) for o in batch.offsets]
    return [[int(h) for h in batch.hashes[offsets[d]:offsets[d + 1]]] for d in range(len(offsets) - 1)]


def check_batch(texts, kind, n):
    spec = ShingleSpec(kind, n)
    batch = shingle_hashes(texts, spec)
    assert batch.offsets.dtype == np.int64 and batch.hashes.dtype == np.uint64
    assert batch.offsets.shape == (len(texts) + 1,) and int(batch.offsets[0]) == 0
    assert batch.n_docs == len(texts)
    expected = [oracle_hashes(t, kind, n) for t in texts]
    assert rows_of(batch) == expected
    sets = shingle_sets(texts, spec)
    assert sets.offsets.dtype == np.int64 and sets.hashes.dtype == np.uint64
    set_rows = rows_of(sets)
    assert set_rows == [sorted(set(row)) for row in expected]
    for row in set_rows:
        assert all(x < y for x, y in zip(row, row[1:]))  # ascending, no repeats
    return batch


# --- the texts ----------------------------------------------------------------------------

SAMPLES = {
    "ascii": "The quick  brown Fox\tjumps over the LAZY dog. The quick brown fox!",
    "latin1": "Ça VA très BIEN, Ærø ÿ Ÿ ß ẞ \u00a0naïve ÉCOLE",
    "greek": "ΟΔΟΣ ΣΟΦΟΣ Σ σ ς ΐ ϴ",
    "cyrillic": "Съешь же ещё ЭТИХ мягких французских булок Ѐ Ӂ",
    "cjk": "中文文本的重复检测 日本語のテキスト 한국어",
    "emoji": "😀 😀😃 👍🏽 🇫🇷 \U0001F9D1\u200d\U0001F4BB end",
    "astral_case": "\U00010400\U00010401 \U0001E900\U0001E921 \U00016E40",  # Deseret, Adlam, Medefaidrin
    "dotted_i": "İSTANBUL İi Iı",
    "special_case": "ǅ ǈ ǋ ǲ \u212a \u2126 \u212b",  # titlecase digraphs, Kelvin, Ohm, Angstrom
    "combining": "e\u0301 E\u0301 \u0041\u030a",
    "all_white": "a" + "b".join(WHITE_SPACE) + "c",
    "separators": "a\x1cb \x1d c\x1e\x1fd",
    "not_white": "a\u200bb \ufeffc \u180ed \u2060e",
    "lead_trail": " \t\u3000 lead and trail \u2029\u0085 ",
    "only_white": WHITE_SPACE * 3,
    "empty": "",
    "none": None,
    "one_char": "X",
    "one_word": "Word",
    "two_words": "two  WORDS",
    "digits_punct": "1,2;3 -- 4... (5) [6] {7} <8> 'nine' \"ten\"",
}


# --- normalisation ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_normalize_text_matches_oracle(name):
    text = SAMPLES[name]
    if text is None:
        return
    assert normalize_text(text) == oracle_normalize(text)


def test_normalize_explicit_cases():
    assert normalize_text("  Hello\t\tWORLD \n") == "hello world"
    assert normalize_text("ΟΔΟΣ") == "οδοσ"  # per code point: no final sigma
    assert "ΟΔΟΣ".lower() == "οδος"  # ... although Python's str.lower has one
    assert normalize_text("İ") == "i"  # simple mapping, one code point
    assert len("İ".lower()) == 2
    assert normalize_text("A\u3000\u00a0\u0085B\u1680C") == "a b c"
    assert normalize_text(WHITE_SPACE) == ""
    assert normalize_text("") == ""
    assert normalize_text("\U00010400") == "\U00010428"
    assert normalize_text("ẞ") == "ß"


@pytest.mark.parametrize("separator", ["\x1c", "\x1d", "\x1e", "\x1f"])
def test_information_separators_are_not_white_space(separator):
    assert separator.isspace()  # Python says yes, the canonical definition says no
    assert normalize_text(f"a{separator}b") == f"a{separator}b"
    assert normalize_text(f" {separator} ") == separator
    batch = shingle_hashes([f"x{separator}y z"], ShingleSpec("word", 1))
    assert rows_of(batch) == [[oracle_poly_hash64(map(ord, f"x{separator}y")),
                               oracle_poly_hash64(map(ord, "z"))]]


@pytest.mark.parametrize("white", list(WHITE_SPACE))
def test_every_white_space_kind_separates_tokens(white):
    text = f"{white}Alpha{white}{white}beta{white}"
    assert normalize_text(text) == "alpha beta"
    check_batch([text, f"gamma{white}delta"], "word", 1)


@pytest.mark.parametrize("stage", [shingle_hashes, shingle_sets])
def test_one_string_is_refused_as_a_batch(stage):
    """A str is a sequence of one-character texts; a batch of documents refuses it by name."""
    with pytest.raises(ParameterError, match=r"got one string: pass \[text\]"):
        stage("hello world", ShingleSpec())
    assert stage(["hello world"], ShingleSpec()).n_docs == 1


def test_normalize_batch_keeps_documents_apart():
    # White runs that straddle document boundaries must vanish, not become a space.
    texts = ["a ", " b", "", "  ", "c", " d e ", None, "f\u3000", "\u3000g", "H  I"]
    codepoints, offsets = encode_codepoints(texts)
    assert codepoints.dtype == np.uint32 and offsets.dtype == np.int64
    normalised, new_offsets = normalize_codepoints(codepoints, offsets)
    assert normalised.dtype == np.uint32 and new_offsets.dtype == np.int64
    got = [normalised[new_offsets[d]:new_offsets[d + 1]].tobytes().decode("utf-32-le")
           for d in range(len(texts))]
    assert got == [oracle_normalize(t) for t in texts]


def test_normalize_ascii_and_unicode_paths_agree():
    ascii_docs = ["  Mixed CASE\ttext \n", "x\x1cy", "A  B"]
    alone = normalize_codepoints(*encode_codepoints(ascii_docs))
    with_unicode = normalize_codepoints(*encode_codepoints(ascii_docs + ["Ω\u3000Σ"]))
    assert np.array_equal(alone[1], with_unicode[1][:-1])
    assert np.array_equal(alone[0], with_unicode[0][: int(alone[1][-1])])


def test_lowercase_table_is_the_simple_mapping():
    # The shipped table agrees with Python's per-code-point lowercase (same Unicode version)
    # everywhere except U+0130.
    pairs = normalize.simple_lowercase_pairs()
    table = {int(cp): int(lower) for cp, lower in pairs}
    assert table[0x130] == ord("i")
    for cp, lower in table.items():
        if cp != 0x130:
            assert chr(cp).lower() == chr(lower)


# --- shingles -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["word", "char"])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 9])
def test_samples_one_by_one_and_as_one_batch(kind, n):
    texts = [SAMPLES[name] for name in sorted(SAMPLES)]
    for text in texts:
        check_batch([text], kind, n)
    check_batch(texts, kind, n)
    check_batch(texts[::-1], kind, n)


def test_short_documents_have_exactly_one_shingle():
    for kind, text, n in [("word", "one two", 3), ("char", "ab", 5), ("char", "  a  ", 2),
                          ("word", "İ", 4), ("char", "😀", 2)]:
        batch = check_batch([text], kind, n)
        assert rows_of(batch) == [[oracle_poly_hash64(map(ord, oracle_normalize(text)))]]


def test_empty_documents_have_no_shingles():
    for kind in ["word", "char"]:
        batch = check_batch([None, "", " ", WHITE_SPACE, "x", None], kind, 3)
        assert batch.counts().tolist() == [0, 0, 0, 0, 1, 0]


def test_empty_batch():
    for kind in ["word", "char"]:
        batch = shingle_hashes([], ShingleSpec(kind, 2))
        assert batch.offsets.tolist() == [0] and batch.hashes.shape == (0,)
        sets = shingle_sets([], ShingleSpec(kind, 2))
        assert sets.offsets.tolist() == [0] and sets.hashes.shape == (0,)


def test_n_equal_to_length_gives_one_shingle_and_n_one_gives_units():
    assert rows_of(check_batch(["abc"], "char", 3)) == [[oracle_poly_hash64([97, 98, 99])]]
    assert rows_of(check_batch(["a b c"], "word", 3)) == [[oracle_poly_hash64(map(ord, "a b c"))]]
    assert rows_of(check_batch(["abca"], "char", 1)) == [[oracle_poly_hash64([c]) for c in b"abca"]]


def test_repeats_are_kept_in_text_order_and_removed_in_sets():
    texts = ["a b a b a b", "aaaa aaaa"]
    batch = check_batch(texts, "word", 2)
    assert batch.counts().tolist() == [5, 1]
    assert shingle_sets(texts, ShingleSpec("word", 2)).counts().tolist() == [2, 1]


def test_very_long_single_tokens():
    long_ascii = "Z" * 100_000
    long_mixed = ("Ωλ😀中" * 2_000) + " tail"
    for text in [long_ascii, long_mixed]:
        check_batch([text, "short doc", text], "word", 5)
    check_batch(["Ab" * 4_000, "x", "ΣΣ😀" * 1_000], "char", 7)


def test_large_then_small_batches_reuse_power_tables():
    big = check_batch(["word " * 20_000], "char", 4)
    small = check_batch(["word word"], "char", 4)
    assert rows_of(small)[0] == rows_of(big)[0][:6]


def test_spec_validation():
    with pytest.raises(ValueError):
        ShingleSpec("line", 3)
    with pytest.raises(ValueError):
        ShingleSpec("word", 0)
    with pytest.raises(ValueError):
        ShingleSpec("char", 2.0)


ALPHABET = list(
    "aAbBzZ09.,'-" + "ÀàÉéßẞÿŸ" + "ΣσςΟοΔ" + "ДдЁё" + "中文日" + "İıIi" + "ǅ\u212a\u0301"
    + WHITE_SPACE + "\x1c\x1d\x1e\x1f\u200b\ufeff\u180e"
) + ["😀", "👍", "\U00010400", "\U00010428", "\U0001E900", "\U0010FFFF", "\x00"]

texts_strategy = st.one_of(
    st.none(),
    st.text(alphabet=st.sampled_from(ALPHABET), max_size=40),
    # Word-like texts: a few words from a small vocabulary, so that shingles repeat.
    st.lists(st.sampled_from(["the", "CAT", "sat", "ΣΟΦΟΣ", "中文", "😀", "İ", "\x1c", ""]),
             max_size=12).map(lambda words: " \u3000"[len(words) % 2].join(words)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(texts_strategy, max_size=8), kind=st.sampled_from(["word", "char"]),
       n=st.integers(1, 6))
def test_hypothesis_batches_match_oracle(texts, kind, n):
    check_batch(texts, kind, n)
    for text in texts:
        if text is not None:
            assert normalize_text(text) == oracle_normalize(text)


def test_spans_are_substrings_of_the_normalised_text():
    texts = ["Hello  big World", "", "a", "ΣΣ ΣΣ ΣΣ"]
    codepoints, offsets = normalize_codepoints(*encode_codepoints(texts))
    for kind, n in [("word", 2), ("char", 3)]:
        starts, ends, shingle_offsets = shingling.shingle_spans(codepoints, offsets,
                                                                ShingleSpec(kind, n))
        got = [codepoints[s:e].tobytes().decode("utf-32-le") for s, e in zip(starts, ends)]
        assert got == [s for t in texts for s in oracle_shingles(t, kind, n)]
        assert np.diff(shingle_offsets).tolist() == [len(oracle_shingles(t, kind, n)) for t in texts]


def test_lone_surrogates_are_refused_with_an_input_error():
    # Python strings may hold lone surrogates (json.loads('"\\ud800"') makes one). They are not
    # Unicode text and have no UTF-8 form, so no backend can shingle them: gpudedup refuses
    # them with its own error naming the text and the character, not an encoder traceback.
    for texts in (["fine", "lone \ud800 surrogate"], ["x\udc00y"]):
        with pytest.raises(InputError, match=r"text \d+ holds a lone surrogate U\+D[89A-F][0-9A-F]{2}"):
            shingle_hashes(texts, ShingleSpec("word", 1))
    with pytest.raises(InputError):
        normalize_text("A\ud800 B")


# --- Arrow input --------------------------------------------------------------------------

ARROW_TEXTS = [SAMPLES[name] for name in sorted(SAMPLES)]


@pytest.mark.parametrize("arrow_type", [pa.string(), pa.large_string()])
@pytest.mark.parametrize("kind, n", [("word", 2), ("char", 4)])
def test_arrow_arrays_give_the_same_shingles(arrow_type, kind, n):
    spec = ShingleSpec(kind, n)
    array = pa.array(ARROW_TEXTS, arrow_type)
    assert array.null_count == 1
    expected = [oracle_hashes(t, kind, n) for t in ARROW_TEXTS]
    assert rows_of(shingle_hashes(array, spec)) == expected
    # Slices (a non-zero array offset) and chunked arrays, with and without nulls.
    for start, stop in [(0, 5), (3, 11), (7, len(ARROW_TEXTS)), (4, 4)]:
        assert rows_of(shingle_hashes(array.slice(start, stop - start), spec)) == expected[start:stop]
    chunked = pa.chunked_array([array.slice(0, 6), array.slice(6, 0), array.slice(6)], arrow_type)
    assert rows_of(shingle_hashes(chunked, spec)) == expected
    assert rows_of(shingle_hashes(pa.chunked_array([], arrow_type), spec)) == []
    sets = shingle_sets(array.slice(2), spec)
    assert rows_of(sets) == [sorted(set(row)) for row in expected[2:]]


def test_arrow_arrays_the_readers_have_not_checked_are_refused_naming_the_item():
    """What Arrow did not check (texts made from buffers, bytes viewed as strings) and token
    ids of an Arrow list array (a negative id, one past 2**32 - 1, a null id) are refused as
    the readers refuse them, not hashed as other texts or ids."""
    texts = pa.array([b"fine words", b"a\x80b words"]).view(pa.string())
    views = pa.array([b"fine words", b"a\x80b words"], pa.binary_view()).view(pa.string_view())
    for batch in (texts, pa.chunked_array([texts]), views, pa.DictionaryArray.from_arrays(pa.array([0, 1]), texts)):
        with pytest.raises(InputError, match=r"item 1 is not valid UTF-8"):
            shingle_hashes(batch, ShingleSpec("char", 1))
    valid = pa.array(["fine words here", "more words"])
    for same in (valid.dictionary_encode(), valid.cast(pa.string_view()),
                 pa.chunked_array([valid.dictionary_encode()])):
        assert shingle_hashes(same, ShingleSpec("word", 2)).hashes.tolist() == \
            shingle_hashes(valid, ShingleSpec("word", 2)).hashes.tolist()
    token = ShingleSpec("token", 1)
    for ids, what in ((pa.array([[1], [-1]], pa.list_(pa.int64())), "item 1 holds token id -1, out of range"),
                      (pa.array([[2**32]], pa.list_(pa.uint64())), "item 0 holds token id 4294967296, out of range"),
                      (pa.array([[None]], pa.list_(pa.int32())), "item 0 holds a null token id")):
        with pytest.raises(InputError, match=re.escape(what)):
            shingle_hashes(ids, token)
    assert shingle_hashes(pa.array([[1, 2], None], pa.list_(pa.int64())), token).hashes.shape == (2,)
