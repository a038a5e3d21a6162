"""Write the Linux benchmark corpus: every text file of two Linux kernel trees as Parquet shards.

What: the source trees of Debian's ``linux-source-6.1`` and ``linux-source-6.12`` packages,
one document per file, in Parquet shards ``<out>/shards/part-00000.parquet``, ... with two
string columns:
    id      "linux-6.1/<path inside the tree>", e.g. "linux-6.1/kernel/fork.c"
    text    the file's contents, exactly as stored (no normalisation)
A file is kept when it is a regular file of at most 1 MiB whose bytes contain no NUL and
decode as UTF-8; everything else is counted, by reason, in ``<out>/corpus.json``.

Why: this is the largest real corpus the project benchmarks on (about 165,000 files, 2.0 GB of
text; the trees hold 2.8 GB, but 0.8 GB of it is about 190 files over 1 MiB, nearly all
generated AMD GPU register headers). Two kernel releases two years apart give natural near-duplicates at every level:
unchanged files, files with a few edited lines, and families of near-identical drivers, device
trees and headers inside each tree.

How: nothing is extracted to disk. ``dpkg-deb --fsys-tarfile`` writes the package's data tar
to a pipe, Python's tarfile reads it in stream mode ("r|"), and the inner
``usr/src/linux-source-X.tar.xz`` is read in stream mode too ("r|xz"), file by file. At most one
shard's worth of text (about 64 MiB) is held in memory (peak resident set about 0.5 GB; the
whole build takes about 35 s on two cores). Shards never mix versions, so each
version's shards can be used on their own (corpus.json lists them). Each shard is written under
a hidden temporary name and renamed when complete, so a shard that exists is whole; existing
part-*.parquet files in ``<out>/shards`` are deleted first, so a re-run leaves no stale shards.

The output follows from the .deb files: files in archive order, shards cut at the same points.
corpus.json records each package's version and SHA-256; apt downloads the current candidate
version, so pass ``--debs`` to rebuild from the same packages.

Needs: dpkg-deb and, without --debs, apt-get (Debian's package lists for bookworm and
bookworm-security; run ``apt-get update`` once). pyarrow is a dependency of gpudedup.

Run from the repository root:
    python scripts/build_linux_corpus.py                      # downloads into bench_data/linux/debs
    python scripts/build_linux_corpus.py --debs debs/linux-source-6.1_*.deb debs/linux-source-6.12_*.deb
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

OUT = Path(__file__).resolve().parent.parent / "bench_data" / "linux"
PACKAGES = ("linux-source-6.1", "linux-source-6.12")
MAX_FILE_BYTES = 1 << 20  # nearly all larger files are generated AMD GPU register headers
SHARD_TEXT_BYTES = 64 << 20


def deb_field(deb: Path, field: str) -> str:
    """One control field (Package, Version) of a .deb, read with dpkg-deb."""
    return subprocess.run(["dpkg-deb", "-f", str(deb), field], check=True,
                          capture_output=True, text=True).stdout.strip()


def download(packages: tuple[str, ...], folder: Path) -> list[Path]:
    """Download the candidate version of each package into `folder` with apt-get download.

    The file names are taken from ``--print-uris`` first, so that older .deb files left in
    the folder by earlier runs are never picked up by mistake.
    """
    folder.mkdir(parents=True, exist_ok=True)
    listing = subprocess.run(["apt-get", "download", "--print-uris", *packages], check=True,
                             capture_output=True, text=True).stdout
    names = [line.split()[1] for line in listing.splitlines() if line.startswith("'")]
    if len(names) != len(packages):
        sys.exit(f"error: apt-get download --print-uris named {names} for {packages}; "
                 f"run apt-get update first?")
    subprocess.run(["apt-get", "download", *packages], check=True, cwd=folder)
    return [folder / name for name in names]


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def iter_tree(deb: Path, package: str, skipped: Counter, skipped_bytes: Counter):
    """Yield (path inside the tree, raw bytes) for each regular file of the package's tarball
    that passes the size check; count everything else in `skipped` (and its size in
    `skipped_bytes`).

    Both tar layers are read as streams: members come in archive order and each member's
    data can be read only while it is the current one, which is all this needs.
    """
    tarball = f"./usr/src/{package}.tar.xz"
    with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as proc:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as outer:
            for member in outer:
                if member.name != tarball:
                    continue
                with tarfile.open(fileobj=outer.extractfile(member), mode="r|xz") as inner:
                    for entry in inner:
                        if entry.isdir():
                            continue
                        if not entry.isreg():
                            skipped["not_regular"] += 1  # symlinks, hard links
                            continue
                        if entry.size > MAX_FILE_BYTES:
                            skipped["too_large"] += 1  # decided from the header: data never read
                            skipped_bytes["too_large"] += entry.size
                            continue
                        # Drop the top folder ("linux-source-6.1/") so that ids match across
                        # versions apart from their "linux-6.1/" prefix.
                        yield entry.name.split("/", 1)[1], inner.extractfile(entry).read()
                break
            else:
                sys.exit(f"error: {deb} holds no {tarball}")
        # Closing the pipe early would kill dpkg-deb with SIGPIPE: read it to the end.
        while proc.stdout.read(1 << 20):
            pass
    if proc.returncode != 0:
        sys.exit(f"error: dpkg-deb --fsys-tarfile {deb} exited with {proc.returncode}")


class ShardWriter:
    """Collects (id, text) rows and writes them as zstd Parquet shards of about 64 MiB text."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.count = 0
        self.ids: list[str] = []
        self.texts: list[str] = []
        self.text_bytes = 0

    def add(self, doc_id: str, text: str, size: int) -> str | None:
        """Add a row; return the shard's name when this row completed one."""
        self.ids.append(doc_id)
        self.texts.append(text)
        self.text_bytes += size
        return self.flush() if self.text_bytes >= SHARD_TEXT_BYTES else None

    def flush(self) -> str | None:
        """Write the rows collected so far as the next shard (none if there are none)."""
        if not self.ids:
            return None
        name = f"part-{self.count:05d}.parquet"
        # Hidden while incomplete: gpudedup skips hidden files, and the rename is atomic.
        temporary = self.folder / f".{name}.tmp"
        table = pa.table({"id": pa.array(self.ids, pa.string()), "text": pa.array(self.texts, pa.string())})
        pq.write_table(table, temporary, compression="zstd")
        os.replace(temporary, self.folder / name)
        self.count += 1
        self.ids, self.texts, self.text_bytes = [], [], 0
        return name


def build(debs: list[Path], out: Path) -> dict:
    """Write the shards for `debs` (in version order) into out/shards; return the summary."""
    start = time.monotonic()
    shards = out / "shards"
    shards.mkdir(parents=True, exist_ok=True)
    for stale in [*shards.glob("part-*.parquet"), *shards.glob(".part-*.parquet.tmp")]:
        stale.unlink()

    info = [(deb, deb_field(deb, "Package"), deb_field(deb, "Version")) for deb in debs]
    for deb, package, _ in info:
        if not package.startswith("linux-source-"):
            sys.exit(f"error: {deb} is {package}, not a linux-source-X package")
    # Version order (6.1 before 6.12), not string order, and not the order given.
    info.sort(key=lambda item: tuple(int(n) for n in item[1].removeprefix("linux-source-").split(".")))

    writer = ShardWriter(shards)
    versions = {}
    for deb, package, deb_version in info:
        version = package.removeprefix("linux-source-")
        skipped: Counter = Counter()
        skipped_bytes: Counter = Counter()
        files = text_bytes = empty = 0
        names = []
        print(f"{package} {deb_version}: reading {deb}", file=sys.stderr, flush=True)
        for path, data in iter_tree(deb, package, skipped, skipped_bytes):
            if b"\0" in data:
                reason = "nul_byte"  # binary: images, firmware, compressed test data
            else:
                try:
                    text = data.decode("utf-8")
                    reason = None
                except UnicodeDecodeError:
                    reason = "not_utf8"  # legacy encodings (Latin-1, ...) and binaries without NUL
            if reason:
                skipped[reason] += 1
                skipped_bytes[reason] += len(data)
                continue
            files += 1
            text_bytes += len(data)
            empty += not data
            if name := writer.add(f"linux-{version}/{path}", text, len(data)):
                names.append(name)
        # End the version's last shard here so that no shard mixes versions.
        if name := writer.flush():
            names.append(name)
        versions[version] = {
            "package": package, "deb_version": deb_version, "deb": deb.name, "deb_sha256": sha256(deb),
            "files": files, "empty_files": empty, "text_bytes": text_bytes,
            "skipped": dict(sorted(skipped.items())),
            "skipped_bytes": dict(sorted(skipped_bytes.items())), "shards": names,
        }
        print(f"  kept {files:,} files, {text_bytes:,} bytes, {len(names)} shards; "
              f"skipped {dict(sorted(skipped.items()))}", file=sys.stderr, flush=True)

    total_skipped: Counter = Counter()
    total_skipped_bytes: Counter = Counter()
    for entry in versions.values():
        total_skipped.update(entry["skipped"])
        total_skipped_bytes.update(entry["skipped_bytes"])
    return {
        "files": sum(entry["files"] for entry in versions.values()),
        "text_bytes": sum(entry["text_bytes"] for entry in versions.values()),
        "shards": writer.count,
        "skipped": dict(sorted(total_skipped.items())),
        "skipped_bytes": dict(sorted(total_skipped_bytes.items())),
        "max_file_bytes": MAX_FILE_BYTES,
        "shard_text_bytes": SHARD_TEXT_BYTES,
        "versions": versions,
        "seconds": round(time.monotonic() - start, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT,
                        help="output folder: shards/, corpus.json (and debs/ when downloading); "
                             "default bench_data/linux in the repository")
    parser.add_argument("--debs", type=Path, nargs="+", metavar="PATH",
                        help="linux-source-X .deb files already downloaded; "
                             f"default: apt-get download {' '.join(PACKAGES)} into OUT/debs")
    args = parser.parse_args()

    debs = args.debs or download(PACKAGES, args.out / "debs")
    for deb in debs:
        if not deb.is_file():
            sys.exit(f"error: {deb} is not a file")
    summary = build(debs, args.out)
    text = json.dumps(summary, indent=2) + "\n"
    temporary = args.out / ".corpus.json.tmp"
    temporary.write_text(text)
    os.replace(temporary, args.out / "corpus.json")
    print(text, end="")


if __name__ == "__main__":
    main()
