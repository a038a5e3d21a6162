"""Where inputs and outputs live: local paths, or URLs of object stores and other file
systems (``s3://``, ``gs://``, ``hdfs://``, and whatever else fsspec knows), reached through
pyarrow's file systems, and what is read from them.

A local path stays a ``pathlib.Path`` and is read as before (memory maps, ``os.stat``). A URL
becomes a ``Remote``, a small picklable value (a Dask task carries it to a worker), which
names its file system and the path in it; io/filesystems.py makes the file system (pyarrow's
own for the schemes it knows: S3, GCS, HDFS; fsspec's, wrapped by pyarrow, for any other),
waiting a bounded time for its answers. Credentials, regions and endpoints come from those
libraries' usual configuration: for S3 the AWS environment (AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION or AWS_DEFAULT_REGION, AWS_ENDPOINT_URL) and ~/.aws files, or
a URL's query (``s3://bucket/x?endpoint_override=...``).
An http(s) URL is requested as it is written, its query included (a presigned S3 URL, an Azure
SAS URL, a URL with a token).

A URL's credentials are never shown (io/credentials.py: ``shown_url``, ``scrubbed``); only
``full_name`` keeps them, to open the file again.

An output directory may be a URL too (io/remote_output.py's ``remote_output_dir`` commits it
without a rename, report.json last), and so may a work directory (pipeline/workfolders.py's
``BucketFolder`` commits each unit with a marker written last, and reads through a local cache).
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import ParameterError
from .credentials import place_of, remember_credentials, shown_url
from .filesystems import filesystem_of

# A URL: a scheme of two or more characters, then "://" (one letter would be a Windows drive).
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
UPLOAD_BLOCK = 8 << 20
# The largest object S3's CopyObject (a server-side copy) takes: 5 GiB.
SERVER_COPY_LIMIT = 5 << 30


@dataclass(frozen=True)
class Remote:
    """A file or folder named by URL; ``url`` as given, less any trailing "/". It answers the
    few questions the readers ask of a pathlib.Path (``name``, ``absolute()``, ``str()``)."""

    url: str

    def __post_init__(self) -> None:
        remember_credentials(self.url)

    @property
    def name(self) -> str:
        return posixpath.basename(urlsplit(self.url).path.rstrip("/"))

    def absolute(self) -> "Remote":
        return self

    def __str__(self) -> str:
        return shown_url(self.url)

    def child(self, relative: str) -> "Remote":
        """The entry ``relative`` (a "/"-separated path) below this folder, keeping the query."""
        parts = urlsplit(self.url)
        path = parts.path.rstrip("/") + "/" + relative
        return Remote(parts._replace(path=path).geturl())

    def filesystem(self) -> tuple[pafs.FileSystem, str]:
        """(the pyarrow file system, this entry's path in it): filesystems.filesystem_of."""
        remember_credentials(self.url)  # (a Remote unpickled on a worker is made without __post_init__)
        return filesystem_of(self.url)

    def relative_files(self) -> list[str]:
        """The path below this folder of each file below it, "/"-separated, exactly as its
        file system names it (an object's key is not normalised: "a//b", "./a" and "../a"
        stay as they are). A listing's entry that does not lie below the folder (an http
        page's link elsewhere) is none of its files."""
        filesystem, root = self.filesystem()
        # (An fsspec http(s) root is the URL with its query; the pages it links to are named
        # without one.)
        prefix = urlsplit(root)._replace(query="", fragment="").geturl() if URL.match(root) else root
        prefix = prefix.rstrip("/") + "/"
        return [entry.path[len(prefix):] for entry in
                filesystem.get_file_info(pafs.FileSelector(root, recursive=True))
                if entry.type == pafs.FileType.File and entry.path.startswith(prefix)]


Location = Union[Path, Remote]
# What a caller may name an input by: a path, a URL, or a Remote.
Given = Union[str, os.PathLike, Remote]


def is_url(given: Given) -> bool:
    """Whether ``given`` names a file by URL (``file://`` included, which is read locally)."""
    return isinstance(given, Remote) or (isinstance(given, str) and URL.match(given) is not None)


def is_path(item) -> bool:
    """Whether an item of a list given as data names a file (a path or a Remote), not a text."""
    return isinstance(item, (os.PathLike, Remote))


def location_of(given: Given) -> Location:
    """A path or URL as the readers take it: a Remote for a URL (a ``file://`` URL is a local
    Path), else a Path."""
    if isinstance(given, Remote):
        return given
    if isinstance(given, str) and not given:  # (Path("") is ".": an unset variable would name this folder)
        raise ParameterError("a path is empty (an unset shell variable?): name a file or a folder ('.' for this one)")
    if is_url(given):
        text = str(given)
        if text.lower().startswith("file://"):
            return Path(urlsplit(text).path)
        return Remote(text.rstrip("/") if urlsplit(text).path.strip("/") else text)
    return Path(given)


def local_folder(given: Given, what: str) -> Path:
    """A folder that must be local (or on a mounted file system), as a Path; a URL, or a name
    that is not UTF-8 (not_utf8), is a ParameterError naming ``what`` it was given for."""
    location = location_of(given)
    if isinstance(location, Remote):
        raise ParameterError(f"{location}: {what} must be a local folder (or a mounted file system); inputs, "
                             "outputs and work directories may be URLs, not it")
    if (odd := not_utf8(str(location))) is not None:
        raise ParameterError(f"{readable(str(location))}: {odd}; choose another folder for {what}")
    return location


def not_utf8(shown: str) -> Optional[str]:
    """Why a path as shown can be neither an input nor an output, where UTF-8 cannot write it
    (a file name of other bytes, which Python holds as surrogates); None for every other path."""
    try:
        shown.encode("utf-8")
    except UnicodeEncodeError:
        return "the name is not valid UTF-8, in which ids, reports and output files name paths"
    return None


def readable(shown: str) -> str:
    """``shown`` with each byte that is not UTF-8 as U+FFFD, for a message."""
    return shown.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def full_name(location: Location) -> str:
    """A file's name to open it by again, in this process or a worker's (location_of): a path,
    or the whole URL, secrets in its query included (str() of a Remote leaves them out)."""
    return location.url if isinstance(location, Remote) else str(location)


def child_name(folder: Location, name: str) -> str:
    """full_name of the file ``name`` in ``folder`` (a path, or a URL on object storage): what
    a task that writes it is given."""
    return full_name(folder.child(name) if isinstance(folder, Remote) else folder / name)


def shown(given: Given) -> str:
    """A path or URL as a message names what was given: a URL as shown_url shows it, a path
    as it was written."""
    text = str(given) if isinstance(given, (str, Remote)) else os.fsdecode(given)
    return shown_url(text) if is_url(text) else text


def key_of(given: Given) -> str:
    """A file's key in maps over the input files, and its place in reports: its absolute path,
    or its URL as shown (shown_url: two URLs that differ only in their credentials name one
    file)."""
    location = location_of(given)
    return str(location) if isinstance(location, Remote) else os.path.abspath(location)


def parts_of(location: Location) -> list[str]:
    """A path's components from its root (a URL's first is its bucket or host, "netloc"), for
    names relative to a common folder."""
    if isinstance(location, Remote):  # (no "scheme:", which would be a folder "s3:" in a name)
        parts = urlsplit(location.url)
        netloc, segments = parts.netloc, [p for p in parts.path.split("/") if p]
        if not netloc and segments:  # (memory:///b/x names the place memory://b/x does)
            netloc, segments = segments[0], segments[1:]
        return [place_of(parts.scheme, netloc)] + segments
    return list(Path(os.path.abspath(location)).parts)


def folder_parts(location: Location) -> list[str]:
    """parts_of the folder an input as given stands for: itself if a folder, else its parent."""
    is_folder = info(location).type == pafs.FileType.Directory if isinstance(location, Remote) \
        else Path(location).is_dir()
    parts = parts_of(location)
    return parts if is_folder else parts[:-1]


def files_below(remote: Remote) -> list[str]:
    """The paths (in its file system) of every file at or below ``remote``, sorted; [] where
    there is none."""
    return [entry.path for entry in file_entries(remote)]


def file_entries(remote: Remote) -> list[pafs.FileInfo]:
    """The file system's entries (path, size) of every file at or below ``remote``, sorted by
    path; [] where there is none."""
    filesystem, path = remote.filesystem()
    found = filesystem.get_file_info(path)
    if found.type == pafs.FileType.File:
        return [found]
    if found.type == pafs.FileType.NotFound:
        return []
    return sorted((entry for entry in filesystem.get_file_info(pafs.FileSelector(path, recursive=True))
                   if entry.type == pafs.FileType.File), key=lambda entry: entry.path)


def move_object(filesystem: pafs.FileSystem, source: pafs.FileInfo, destination: str) -> None:
    """Move the file ``source`` (an entry of file_entries) to the path ``destination`` of the
    same file system: a move of the file system's own (on S3 a server-side copy, then a delete)
    except for an S3 object larger than one CopyObject takes (SERVER_COPY_LIMIT), which is read
    and written anew in blocks (a multipart upload), checked whole, then the source deleted.
    A streamed move that fails or is interrupted deletes what it wrote, so no shorter object
    is left at ``destination`` (closing a pyarrow stream uploads what was written: there is no
    abort)."""
    if filesystem.type_name != "s3" or source.size is None or source.size <= SERVER_COPY_LIMIT:
        filesystem.move(source.path, destination)
        return
    try:
        with filesystem.open_input_stream(source.path) as reader, \
                filesystem.open_output_stream(destination) as writer:
            copied = copy_stream(reader, writer)
        if copied != source.size:
            raise OSError(f"{source.path}: read {copied} bytes of {source.size}")
    except BaseException:
        try:
            filesystem.delete_file(destination)
        except (OSError, pa.ArrowException):
            pass  # never written, or unreachable: the original error is what to report
        raise
    filesystem.delete_file(source.path)


def copy_stream(reader, writer) -> int:
    """Copy ``reader`` to ``writer`` (file-like) in UPLOAD_BLOCK blocks; the bytes copied."""
    copied = 0
    while block := reader.read(UPLOAD_BLOCK):
        writer.write(block)
        copied += len(block)
    return copied


def upload(local: Path, remote: Remote) -> None:
    """Copy a local file to ``remote`` (a whole object written, or none). The stream is closed
    here, so that a failed write raises (an S3 object opened lazily is only sent when it is
    closed, and pyarrow's copy_files would leave that to a destructor that ignores errors).
    Closing a stream sends what it holds, and pyarrow has no abort: a copy that stops part way
    (an error, Ctrl-C) deletes what its closing sent, rather than leave a part under the name."""
    filesystem, path = remote.filesystem()
    with open(local, "rb") as source:
        sink = filesystem.open_output_stream(path)
        try:
            copy_stream(source, sink)
        except BaseException:
            with contextlib.suppress(Exception):
                sink.close()
                filesystem.delete_file(path)
            raise
        sink.close()


def info(location: Location) -> pafs.FileInfo:
    """The file system's entry for ``location`` (type, size, modification time)."""
    if isinstance(location, Remote):
        filesystem, path = location.filesystem()
        return filesystem.get_file_info(path)
    return pafs.LocalFileSystem().get_file_info(str(location))


def file_size(location: Location) -> int:
    """The size of a file in bytes (OSError where it cannot be found)."""
    return size_and_time(location)[0]


def size_and_time(location: Location) -> tuple[int, int]:
    """(size in bytes, modification time in nanoseconds: 0 where its file system keeps none)
    of a file, from one look at it (OSError where it cannot be found)."""
    if isinstance(location, Remote):
        found = info(location)
        if found.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"{location}: no such file")
        return int(found.size or 0), int(found.mtime_ns or 0)
    status = os.stat(location)
    return status.st_size, status.st_mtime_ns


def open_stream(location: Location, compression: str | None = None) -> pa.NativeFile:
    """A file's bytes from the start, decompressed by ``compression`` ("gzip", "zstd" or None)."""
    if isinstance(location, Remote):
        filesystem, path = location.filesystem()
        return filesystem.open_input_stream(path, compression=compression)
    return pa.input_stream(str(location), compression=compression)


def read_range(location: Location, start: int, stop: int) -> pa.Buffer:
    """Bytes [start, stop) of a file: for a local file a view of its memory map, for a remote
    one a ranged read."""
    if isinstance(location, Remote):
        filesystem, path = location.filesystem()
        with filesystem.open_input_file(path) as handle:
            return handle.read_at(stop - start, start)
    with pa.memory_map(str(location)) as mapped:  # (a buffer of the map outlives its file object)
        mapped.seek(start)
        return mapped.read_buffer(stop - start)


def open_random(location: Location) -> pa.NativeFile:
    """A file opened for reads anywhere in it (Parquet footers, byte ranges)."""
    if isinstance(location, Remote):
        filesystem, path = location.filesystem()
        return filesystem.open_input_file(path)
    return pa.OSFile(str(location), "rb")


def read_bytes(location: Location) -> bytes:
    """A whole file's bytes."""
    if isinstance(location, Remote):
        with open_stream(location) as stream:
            return stream.read()
    return Path(location).read_bytes()


def read_parquet(path: Location, columns: Optional[list[str]] = None) -> pa.Table:
    """A Parquet file (its ``columns``, where given, else whole), local or at a URL."""
    if isinstance(path, Remote):
        filesystem, inside = path.filesystem()
        return pq.read_table(inside, filesystem=filesystem, columns=columns)
    return pq.read_table(path, columns=columns)


def parquet_metadata(path: Location) -> pq.FileMetaData:
    """A Parquet file's footer, local or at a URL."""
    if isinstance(path, Remote):
        with parquet_file(path) as file:
            return file.metadata
    return pq.read_metadata(path)


def parquet_file(path: Location, **options) -> pq.ParquetFile:
    """A Parquet file opened for reading (a context manager), local or at a URL; options:
    pq.ParquetFile's."""
    if isinstance(path, Remote):
        return pq.ParquetFile(open_random(path), **options)
    return pq.ParquetFile(path, **options)
