"""Compare the result tables of two gpudedup output folders, table by table.

    python scripts/compare_outputs.py OUT_A OUT_B

For each of ``pairs/``, ``clusters/``, ``deduplicated/`` and ``removed/`` present in either
folder, every file is read (Parquet, or JSON Lines as bytes) in path order and the two sides are
compared exactly:
the same files, the same rows in the same order, the same values; ``pairs/`` and ``clusters/``
byte for byte too, as every runner writes them (docs/guarantees.md), where Parquet kept rows are
the same by content: a dictionary-encoded column as its values (a file written piece by piece
may hold one dictionary per piece), a NaN equal to a NaN at the same place. Prints one line per
table (its rows and ``identical`` or ``DIFFERENT``, with the first file that differs and how)
and exits 1 if any table differs or is missing on one side; a folder that is not a finished
output (no report.json: a run that failed, or one still writing) is refused with exit code 2, so
that two runs that wrote nothing never compare as the same. Used to show that a change meant to
keep results (another backend, another runner, a refactor) keeps them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

TABLES = ("pairs", "clusters", "deduplicated", "removed")
BYTE_FOR_BYTE = ("pairs", "clusters")  # (every runner's files are these bytes)


def table_files(root: Path, table: str) -> list[Path]:
    """The files of one result table under ``root``, relative to it, sorted."""
    base = root / table
    if base.is_file():
        return [Path(table)]
    matches = sorted(p.relative_to(root) for p in root.glob(f"{table}*") if p.is_file())
    if base.is_dir():
        matches += sorted(p.relative_to(root) for p in base.rglob("*") if p.is_file())
    return matches


def by_content(table: pa.Table) -> pa.Table:
    """``table`` in a form that equals another's exactly where their rows hold the same
    values: dictionary-encoded columns decoded, and each floating column beside its NaN mask
    with NaN read as 0 (Arrow's equality holds NaN unequal to itself)."""
    columns, names = [], []
    for name, column in zip(table.column_names, table.columns):
        if pa.types.is_dictionary(column.type):
            column = column.cast(column.type.value_type)
        if pa.types.is_floating(column.type):
            nan = pc.is_nan(column)
            columns.append(nan)
            names.append(f"{name} is NaN")
            column = pc.if_else(nan, pa.scalar(0, column.type), column)
        columns.append(column)
        names.append(name)
    return pa.table(columns, names=names)


def file_rows(path: Path) -> tuple[int, object]:
    """(rows, comparable contents) of one result file: an Arrow table (by_content), or the raw
    bytes."""
    if path.suffix == ".parquet":
        table = pq.read_table(path)
        return table.num_rows, by_content(table)
    data = path.read_bytes()
    return data.count(b"\n"), data


def compare_table(a: Path, b: Path, table: str) -> tuple[bool, str]:
    files_a, files_b = table_files(a, table), table_files(b, table)
    if not files_a and not files_b:
        return True, f"{table}: absent on both sides"
    if files_a != files_b:
        return False, f"{table}: DIFFERENT files ({len(files_a)} against {len(files_b)})"
    rows = 0
    for relative in files_a:
        rows_a, contents_a = file_rows(a / relative)
        _, contents_b = file_rows(b / relative)
        same = contents_a.equals(contents_b) if hasattr(contents_a, "equals") else contents_a == contents_b
        if not same:
            return False, f"{table}: DIFFERENT at {relative}"
        if table in BYTE_FOR_BYTE and (a / relative).read_bytes() != (b / relative).read_bytes():
            return False, f"{table}: DIFFERENT at {relative} (the same rows, other bytes)"
        rows += rows_a
    return True, f"{table}: {rows:,} rows in {len(files_a)} files, identical"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    unfinished = [str(side) for side in (args.a, args.b) if not (side / "report.json").is_file()]
    if unfinished:
        print(f"not a finished gpudedup output (no report.json): {', '.join(unfinished)}", file=sys.stderr)
        return 2
    all_same = True
    for table in TABLES:
        same, line = compare_table(args.a, args.b, table)
        all_same &= same
        print(line)
    return 0 if all_same else 1


if __name__ == "__main__":
    sys.exit(main())
