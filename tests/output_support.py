"""Reading an output directory back in either layout (gpudedup/io/layout.py): a run over files
writes deduplicated/ (one file per input file), pairs/ and clusters/ (Parquet datasets);
in-memory data and --single-file write deduplicated.<format>, pairs.parquet, clusters.parquet."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

# The top-level names of an output directory, per layout (the report's SVG figures are always
# there), and the marker every output carries (io/outputdir.py).
FIGURES_AND_REPORT = [".gpudedup-output", "candidates_histogram.svg", "cluster_sizes.svg", "report.html", "report.json",
                      "s_curve.svg"]
FILES_LAYOUT = sorted(["clusters", "deduplicated", "pairs", *FIGURES_AND_REPORT])
SINGLE_LAYOUT = sorted(["clusters.parquet", "deduplicated.parquet", "pairs.parquet", *FIGURES_AND_REPORT])


def output_section(out: Path) -> dict:
    return json.loads((Path(out) / "report.json").read_text(encoding="utf-8"))["output"]


def kept_files(out: Path) -> list[Path]:
    """The kept rows' files, in input order: report.json's kept_files, checked to be exactly
    the files under deduplicated/ (in the files layout) or the one file (single)."""
    out = Path(out)
    output = output_section(out)
    listed = [out / name for name in output["kept_files"]]
    if output.get("layout") != "files":
        assert listed == [out / f"deduplicated.{output['format']}"], f"report.json lists {listed}"
        return listed
    present = sorted(path for path in (out / "deduplicated").rglob("*") if path.is_file())
    assert sorted(listed) == present, f"report.json lists {listed}, deduplicated/ holds {present}"
    return listed


def read_kept(out: Path) -> pa.Table:
    """The kept rows of a Parquet output as one table (files' columns unified, as a run does;
    dictionary-encoded columns decoded, so that files that differ only there join)."""
    tables = [plain(pq.read_table(path)) for path in kept_files(out)]
    return pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]


def plain(table: pa.Table) -> pa.Table:
    """``table`` with its dictionary-encoded columns decoded."""
    return pa.table([column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column
                     for column in table.columns], names=table.column_names)


def kept_lines(out: Path) -> list[str]:
    """The kept rows of a JSONL output, line by line, in input order."""
    return [line for path in kept_files(out) for line in path.read_text(encoding="utf-8").splitlines()]


def table_path(out: Path, name: str) -> Path:
    """pairs or clusters: the dataset directory where there is one, else the one file."""
    out = Path(out)
    return out / name if (out / name).is_dir() else out / f"{name}.parquet"


def read_pairs(out: Path) -> pa.Table:
    return pq.read_table(table_path(out, "pairs"))


def read_clusters(out: Path) -> pa.Table:
    return pq.read_table(table_path(out, "clusters"))


def result_tables(out: Path) -> dict[str, pa.Table]:
    """pairs, clusters and the kept rows (Parquet) of an output, to compare two runs."""
    return {"pairs": read_pairs(out), "clusters": read_clusters(out), "kept": read_kept(out)}


def result_bytes(out: Path) -> dict[str, bytes]:
    """Every result file of an output (kept rows, pairs, clusters; not the report or its
    figures), by its path under ``out``, as bytes: two runs that should write the same files."""
    out = Path(out)
    skip = set(FIGURES_AND_REPORT)
    return {path.relative_to(out).as_posix(): path.read_bytes() for path in sorted(out.rglob("*"))
            if path.is_file() and path.name not in skip}
