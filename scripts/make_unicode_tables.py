"""Write the frozen Unicode tables of the shingle spec into gpudedup/data/:

- ``simple_lowercase.txt``: the simple lowercase mapping, one code point to one code point.
- ``general_category_ps.txt``: the code points of the general categories P* (punctuation:
  Pc Pd Ps Pe Pi Pf Po) and S* (symbols: Sm Sc Sk So), as inclusive ranges with their category;
  the ``strip_punctuation`` / ``strip_symbols`` options remove them (docs/hash-spec.md).

Normalisation applies both as table lookups, so that the numpy backend and the device code can
apply them the same way. The tables are generated once and shipped, never rebuilt at run time,
because a newer Python (with a newer Unicode database) would otherwise change shingle hashes
and invalidate stored signatures: the script refuses to run on a Python whose
``unicodedata.unidata_version`` is not the one below. Python's ``str.lower`` applied to a
single code point is the simple mapping for every code point except U+0130 (LATIN CAPITAL
LETTER I WITH DOT ABOVE), whose full mapping is two code points; its simple mapping is U+0069.

Run with the Python whose Unicode version the header names (3.11: Unicode 14.0.0):
    python scripts/make_unicode_tables.py
"""

import sys
import unicodedata
from pathlib import Path

UNICODE_VERSION = "14.0.0"
DATA = Path(__file__).resolve().parent.parent / "gpudedup" / "data"
LOWERCASE_FILE = DATA / "simple_lowercase.txt"
CATEGORY_FILE = DATA / "general_category_ps.txt"
SIMPLE_OVERRIDES = {0x0130: 0x0069}
CODE_POINTS = 0x110000


def simple_lowercase_pairs() -> list[tuple[int, int]]:
    pairs = []
    for cp in range(CODE_POINTS):
        if cp in SIMPLE_OVERRIDES:
            pairs.append((cp, SIMPLE_OVERRIDES[cp]))
            continue
        lower = chr(cp).lower()
        if len(lower) != 1:
            raise SystemExit(f"U+{cp:04X} has a multi-code-point lowercase; add its simple mapping")
        if ord(lower) != cp:
            pairs.append((cp, ord(lower)))
    return pairs


def punctuation_symbol_ranges() -> list[tuple[int, int, str]]:
    """(first, last, category) of every maximal run of consecutive code points sharing one
    general category of P* or S*, ascending."""
    ranges: list[tuple[int, int, str]] = []
    for cp in range(CODE_POINTS):
        category = unicodedata.category(chr(cp))
        if category[0] not in "PS":
            continue
        if ranges and ranges[-1][1] == cp - 1 and ranges[-1][2] == category:
            ranges[-1] = (ranges[-1][0], cp, category)
        else:
            ranges.append((cp, cp, category))
    return ranges


def main() -> None:
    if unicodedata.unidata_version != UNICODE_VERSION:
        sys.exit(f"needs Unicode {UNICODE_VERSION}, this Python has {unicodedata.unidata_version}")
    lines = [f"# Unicode {UNICODE_VERSION} simple lowercase mapping: code point, lowercase (hex)"]
    lines += [f"{cp:04X} {lower:04X}" for cp, lower in simple_lowercase_pairs()]
    LOWERCASE_FILE.write_text("\n".join(lines) + "\n", encoding="ascii")
    print(f"wrote {len(lines) - 1} mappings to {LOWERCASE_FILE}")

    ranges = punctuation_symbol_ranges()
    lines = [f"# Unicode {UNICODE_VERSION} general categories P* and S*: first, last code point "
             "(inclusive, hex), category"]
    lines += [f"{first:04X} {last:04X} {category}" for first, last, category in ranges]
    CATEGORY_FILE.write_text("\n".join(lines) + "\n", encoding="ascii")
    print(f"wrote {len(ranges)} ranges to {CATEGORY_FILE}")


if __name__ == "__main__":
    main()
