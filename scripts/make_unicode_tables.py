"""Write gpudedup/data/simple_lowercase.txt, the frozen lower-case table of the shingle spec.

Normalisation lower-cases with the Unicode *simple* lowercase mapping, one code point to one
code point, so that the numpy backend and the CUDA kernel can both apply it as a table lookup.
The table is generated once and shipped, never rebuilt at run time, because a newer Python
(with a newer Unicode database) would otherwise change shingle hashes and invalidate stored
signatures. Python's ``str.lower`` applied to a single code point is the simple mapping for
every code point except U+0130 (LATIN CAPITAL LETTER I WITH DOT ABOVE), whose full mapping is
two code points; its simple mapping is U+0069.

Run with the Python whose Unicode version the header names (3.11: Unicode 14.0.0):
    python scripts/make_unicode_tables.py
"""

import sys
import unicodedata
from pathlib import Path

UNICODE_VERSION = "14.0.0"
OUT = Path(__file__).resolve().parent.parent / "gpudedup" / "data" / "simple_lowercase.txt"
SIMPLE_OVERRIDES = {0x0130: 0x0069}


def simple_lowercase_pairs() -> list[tuple[int, int]]:
    pairs = []
    for cp in range(0x110000):
        if cp in SIMPLE_OVERRIDES:
            pairs.append((cp, SIMPLE_OVERRIDES[cp]))
            continue
        lower = chr(cp).lower()
        if len(lower) != 1:
            raise SystemExit(f"U+{cp:04X} has a multi-code-point lowercase; add its simple mapping")
        if ord(lower) != cp:
            pairs.append((cp, ord(lower)))
    return pairs


def main() -> None:
    if unicodedata.unidata_version != UNICODE_VERSION:
        sys.exit(f"needs Unicode {UNICODE_VERSION}, this Python has {unicodedata.unidata_version}")
    lines = [f"# Unicode {UNICODE_VERSION} simple lowercase mapping: code point, lowercase (hex)"]
    lines += [f"{cp:04X} {lower:04X}" for cp, lower in simple_lowercase_pairs()]
    OUT.write_text("\n".join(lines) + "\n", encoding="ascii")
    print(f"wrote {len(lines) - 1} mappings to {OUT}")


if __name__ == "__main__":
    main()
