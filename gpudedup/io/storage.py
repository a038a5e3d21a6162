"""Where inputs and outputs live: local paths, or URLs of object stores and other file
systems (``s3://``, ``gs://``, ``hdfs://``, and whatever else fsspec knows), reached through
pyarrow's file systems.

A local path stays a ``pathlib.Path`` and is read as before (memory maps, ``os.stat``). A URL
becomes a ``Remote``, a small picklable value (a Dask task carries it to a worker), which
names its file system and the path in it; pyarrow's own file systems serve the schemes they
know (S3, GCS, HDFS), and fsspec's, wrapped by pyarrow, any other. Credentials, regions and
endpoints come from those libraries' usual configuration: for S3 the AWS environment
(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION or AWS_DEFAULT_REGION,
AWS_ENDPOINT_URL) and ~/.aws files, or a URL's query (``s3://bucket/x?endpoint_override=...``).
An http(s) URL is requested as it is written, its query included (a presigned S3 URL, an Azure
SAS URL, a URL with a token).

A file system that cannot be reached fails like a missing local file, in bounded time: each
waits at most remote_timeout() (REMOTE_TIMEOUT_S, 30 s) for an answer, through its own options
where it has them (S3's connect and request timeouts, GCS's retry limit, aiohttp's timeouts for
http), and the first contact with any but S3 runs where the wait ends in time anyway
(``answered``). A scheme that no library serves, or whose package is not installed, is one line
that says so.

A URL's credentials (the password before its host, query options such as ``sig``,
``X-Amz-Signature`` or ``client_secret``) are never shown: ``shown_url`` is what ids, messages,
report.json, report.html and errors.jsonl name a URL by, and ``scrubbed`` takes them out of any
other text (a library's error message); only ``full_name`` keeps them, to open the file again.

An output directory may be a URL too (io/writer.py's ``remote_output_dir`` commits it without
a rename, report.json last), and so may a work directory (engine/workdir.py's ``BucketFolder``
commits each unit with a marker written last, and reads through a local cache).
"""

from __future__ import annotations

import atexit
import errno
import functools
import gc
import os
import posixpath
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, TypeVar, Union
from urllib.parse import unquote, unquote_plus, urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import GpudedupError, ParameterError

# A URL: a scheme of two or more characters, then "://" (one letter would be a Windows drive).
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")
# The schemes pyarrow's own file systems serve; any other goes to fsspec.
PYARROW_SCHEMES = frozenset({"s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss", "file"})
# A query option whose value is a credential, by a word in its name (any case): AWS's
# X-Amz-Signature, X-Amz-Credential and X-Amz-Security-Token, Google's X-Goog-Signature, Azure's
# sig (SAS) and client_secret, pyarrow's access_key, secret_key and session_token, OAuth's
# access_token and code, and any api_key, password or sas_token. Matching by word rather than by
# a list of names errs towards hiding: an option that only looks like one (SignedHeaders) is
# hidden too, which costs nothing but its value in what is shown.
CREDENTIAL_OPTION = re.compile(r"secret|token|sig|credential|passw|pwd|key|auth|sas|code", re.IGNORECASE)
# What a credential's value is replaced by wherever a URL is shown.
HIDDEN = "***"
# The schemes whose user part (before "@") names a place, not a user: abfs's container. Its
# password (the account key) is hidden; the container stays.
USER_NAMES_A_PLACE = frozenset({"abfs", "abfss"})
# A URL inside a message: a scheme, "://", then up to a space, a quote, an angle bracket or a
# parenthesis.
URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]+://[^\s'\"<>()]+")
# Credentials shorter than this are not searched for in free text (replacing every "a" of a
# message would garble it); in URLs they are hidden whatever their length.
SHORTEST_SEARCHED = 4
UPLOAD_BLOCK = 8 << 20
# The largest object S3's CopyObject (a server-side copy) takes: 5 GiB.
SERVER_COPY_LIMIT = 5 << 30
# How long to wait for a file system's answer (a connection, the first answer of a file system
# this process has not reached yet, the next bytes of an answer) before taking it for none. An
# object store answers a request within a second, a distant or busy one within a few; 30 s is
# far beyond an answer that is only slow, and still ends a run that cannot reach its file system
# (no network, a wrong endpoint, a server that accepts and never answers) while its user waits
# for it. REMOTE_TIMEOUT_VARIABLE, in seconds, replaces it (a link slower still; tests).
REMOTE_TIMEOUT_S = 30.0
REMOTE_TIMEOUT_VARIABLE = "GPUDEDUP_REMOTE_TIMEOUT"
# The attempts pyarrow's S3 client makes at a request (its default retry strategy's number),
# each given an equal share of the timeout: a request it gives up on has waited about the
# timeout in all, plus the client's pauses between attempts and up to a second per attempt
# (curl checks a request's timeout once a second).
S3_ATTEMPTS = 3
# The class each scheme of PYARROW_SCHEMES needs in pyarrow.fs; a pyarrow built without it
# leaves the scheme to fsspec (s3fs, gcsfs, adlfs).
PYARROW_CLASSES = {"s3": "S3FileSystem", "gs": "GcsFileSystem", "gcs": "GcsFileSystem", "hdfs": "HadoopFileSystem",
                   "viewfs": "HadoopFileSystem", "abfs": "AzureFileSystem", "abfss": "AzureFileSystem"}

Result = TypeVar("Result")


class NoAnswer(GpudedupError, TimeoutError):
    """A file system that has not answered within the timeout (remote_timeout). An OSError, so
    that callers that name what they were reading or writing ("cannot read (...)") do so; a
    GpudedupError, so that anywhere else it is still one line and exit code 2."""


def remote_timeout() -> float:
    """The seconds to wait for a file system's answer: REMOTE_TIMEOUT_VARIABLE if set, else
    REMOTE_TIMEOUT_S."""
    given = os.environ.get(REMOTE_TIMEOUT_VARIABLE, "").strip()
    if not given:
        return REMOTE_TIMEOUT_S
    try:
        seconds = float(given)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise ParameterError(f"{REMOTE_TIMEOUT_VARIABLE}={given!r}: expected a number of seconds above 0")
    return seconds


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
        """(the pyarrow file system, this entry's path in it). pyarrow's schemes take the
        query as the file system's options (``endpoint_override=...``); fsspec's take the URL
        as fsspec names it, so that an http(s) URL is requested with its query."""
        remember_credentials(self.url)  # (a Remote unpickled on a worker is made without __post_init__)
        parts = urlsplit(self.url)
        scheme = parts.scheme.lower()
        if scheme not in PYARROW_SCHEMES or not pyarrow_serves(scheme):
            return _fsspec_filesystem(self.url, remote_timeout())
        filesystem, root = _filesystem(scheme, parts.netloc, parts.query, remote_timeout())
        inside = parts.path.strip("/")
        return filesystem, (posixpath.join(root, inside) if inside else root)

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
    if is_url(given):
        text = str(given)
        if text.lower().startswith("file://"):
            return Path(urlsplit(text).path)
        return Remote(text.rstrip("/") if urlsplit(text).path.strip("/") else text)
    return Path(given)


def local_folder(given: Given, what: str) -> Path:
    """A folder that must be local (or on a mounted file system), as a Path; a URL is a
    ParameterError naming ``what`` it was given for."""
    location = location_of(given)
    if isinstance(location, Remote):
        raise ParameterError(f"{location}: {what} must be a local folder (or a mounted file system); inputs, "
                             "outputs and work directories may be URLs, not it")
    return location


def full_name(location: Location) -> str:
    """A file's name to open it by again, in this process or a worker's (location_of): a path,
    or the whole URL, secrets in its query included (str() of a Remote leaves them out)."""
    return location.url if isinstance(location, Remote) else str(location)


def child_name(folder: Location, name: str) -> str:
    """full_name of the file ``name`` in ``folder`` (a path, or a URL on object storage): what
    a task that writes it is given."""
    return full_name(folder.child(name) if isinstance(folder, Remote) else folder / name)


def shown_url(url: str) -> str:
    """A URL as ids, messages and reports show it, its credentials hidden: a user part with a
    password (s3://KEY:SECRET@bucket/...) left out (abfs keeps its container: abfs://cont@account),
    and the value of each credential option in its query or fragment (CREDENTIAL_OPTION:
    ``sig=...``, ``X-Amz-Signature=...``, ``client_secret=...``) replaced by HIDDEN, its name
    kept. The rule for what is a credential lives here and in ``credentials_of``."""
    parts = urlsplit(url)
    return parts._replace(netloc=place_of(parts.scheme, parts.netloc), query=shown_options(parts.query),
                          fragment=shown_options(parts.fragment)).geturl()


def shown_options(options: str) -> str:
    """A query (or fragment) of "&"-separated options, each credential's value HIDDEN. A value
    hidden already keeps what follows it (in a message, an id's ":LINE")."""
    if not options:
        return options
    return "&".join(f"{name}={hidden_value(value)}" if value and is_credential(name) else f"{name}{equals}{value}"
                    for name, equals, value in (option.partition("=") for option in options.split("&")))


def hidden_value(value: str) -> str:
    """A credential's value as shown: HIDDEN; one that starts with HIDDEN (shown already) as it is."""
    return value if value.startswith(HIDDEN) else HIDDEN


def is_credential(option: str) -> bool:
    """Whether a query option's name (as written, maybe percent-encoded) names a credential."""
    return CREDENTIAL_OPTION.search(unquote_plus(option)) is not None


def place_of(scheme: str, netloc: str) -> str:
    """A URL's netloc as shown: the bucket or host[:port], without a user part that holds a
    password; a user part without one is no credential (abfs's container, hdfs's user) and
    stays, as does abfs's container before its password."""
    user, at, host = netloc.rpartition("@")
    if not at or ":" not in user:
        return netloc
    return f"{user.partition(':')[0]}@{host}" if scheme.lower() in USER_NAMES_A_PLACE else host


@functools.lru_cache(maxsize=1024)
def credentials_of(url: str) -> frozenset[str]:
    """The credentials written in ``url`` (what shown_url hides), each as written and
    percent-decoded: the user part and password before the host, and the credential options'
    values."""
    parts = urlsplit(url)
    user = parts.netloc.rpartition("@")[0]
    found = {user, user.partition(":")[2]} if ":" in user else set()
    for options in (parts.query, parts.fragment):
        found |= {value for name, _, value in (option.partition("=") for option in options.split("&"))
                  if value and is_credential(name)}
    if parts.scheme.lower() in USER_NAMES_A_PLACE:
        found.discard(user)  # (its container is shown; its password stays in the set)
    return frozenset(form for secret in found for form in (secret, unquote(secret), unquote_plus(secret)) if form)


# The credentials of every URL named in this process (remember_credentials), for scrubbed: a
# library's message may quote one apart from its URL.
_credentials: set[str] = set()


def remember_credentials(url: str) -> None:
    """Note ``url``'s credentials, for ``scrubbed`` to take out of any text from now on."""
    _credentials.update(credentials_of(url))


def scrubbed(text: str, url: Optional[str] = None) -> str:
    """``text`` (a message; a library's may quote a URL, or a secret alone) with no credential
    left in it: every URL in it shown as shown_url shows it, and every credential of ``url`` and
    of the URLs this process has named (remember_credentials), wherever it stands, replaced by
    HIDDEN."""
    text = URL_IN_TEXT.sub(lambda found: shown_url(found.group()), text)
    known = _credentials | (credentials_of(url) if url else frozenset())
    for secret in sorted((s for s in known if len(s) >= SHORTEST_SEARCHED), key=len, reverse=True):
        text = text.replace(secret, HIDDEN)
    return text


def shown(given: Given) -> str:
    """A path or URL as a message names what was given: a URL as shown_url shows it, a path
    as it was written."""
    text = str(given) if isinstance(given, (str, Remote)) else os.fsdecode(given)
    return shown_url(text) if is_url(text) else text


def first_line(error: BaseException) -> str:
    """An error's message, its first line only (some file systems' run to dozens), with no
    credential in it (scrubbed)."""
    return scrubbed((str(error).strip().splitlines() or [type(error).__name__])[0])


def os_reason(error: OSError) -> str:
    """What went wrong in an OSError, in words for a message: its system's words, "No space
    left on device" for a full disk however the library put it (Arrow's run to a paragraph);
    numpy's short write ("N requested and M written"), which names no cause, is a full disk
    too (a write to a local file stops short when the device has no room left)."""
    if error.errno == errno.ENOSPC:
        return os.strerror(errno.ENOSPC)
    if error.errno is None and re.fullmatch(r"\d+ requested and \d+ written", str(error)):
        return f"{os.strerror(errno.ENOSPC)}: a write stopped short, {error}"
    return error.strerror or first_line(error)


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
        return [place_of(parts.scheme, parts.netloc)] + [p for p in parts.path.split("/") if p]
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
    closed, and pyarrow's copy_files would leave that to a destructor that ignores errors)."""
    filesystem, path = remote.filesystem()
    with open(local, "rb") as source, filesystem.open_output_stream(path) as sink:
        copy_stream(source, sink)


def pyarrow_serves(scheme: str) -> bool:
    """Whether this pyarrow has its own file system for ``scheme`` (one of PYARROW_SCHEMES):
    a pyarrow built without one (S3, GCS, HDFS or Azure) raises ImportError for its class."""
    try:
        getattr(pafs, PYARROW_CLASSES.get(scheme, "LocalFileSystem"))
    except (ImportError, AttributeError):
        return False
    return True


def with_option(query: str, name: str, value: str) -> str:
    """A URL's query with the option ``name=value`` added, unless it names ``name`` already."""
    if any(option.partition("=")[0] == name for option in query.split("&")):
        return query
    return "&".join(filter(None, [query, f"{name}={value}"]))


@functools.lru_cache(maxsize=64)
def _filesystem(scheme: str, netloc: str, query: str, timeout: float) -> tuple[pafs.FileSystem, str]:
    """(file system, the path of the URL's root in it) for scheme://netloc/?query, a scheme of
    pyarrow's own, made once per process (an S3 file system resolves its bucket's region when
    it is made), waiting ``timeout`` seconds (remote_timeout) for an answer: S3 through its
    connect and request timeouts (with_timeouts), GCS through its limit on retries
    (retry_limit_seconds). Any but S3 is made and first asked for its root within ``answered``'s
    bound, as these options cannot bound every wait (GCS's client waits two minutes on a server
    that never answers, HDFS connects as it is made)."""
    given = f"{scheme}://{netloc}/" + (f"?{query}" if query else "")  # (what messages name)
    if scheme == "s3":
        # An object smaller than a part goes up in one PutObject request rather than as a
        # multipart upload of three (most of an output's files are small).
        query = with_option(query, "allow_delayed_open", "true")
    if scheme in ("gs", "gcs"):
        query = with_option(query, "retry_limit_seconds", f"{timeout:g}")
    root = f"{scheme}://{netloc}/" + (f"?{query}" if query else "")
    try:
        if scheme == "s3":
            filesystem, path = pafs.FileSystem.from_uri(root)
            filesystem = with_timeouts(filesystem, timeout)
        else:
            filesystem, path = answered(lambda: reached(*pafs.FileSystem.from_uri(root)), timeout,
                                        f"{scheme}://{place_of(scheme, netloc)}")
    except NoAnswer:
        raise
    except (pa.ArrowException, OSError) as error:
        raise ParameterError(f"{shown_url(given)}: cannot open its file system ({scrubbed(first_line(error), root)})") \
            from None
    return filesystem, path.rstrip("/") if path.strip("/") else path


def with_timeouts(filesystem: pafs.FileSystem, timeout: float) -> pafs.FileSystem:
    """An S3 file system as pyarrow made it from a URL (its region, endpoint and credentials),
    whose every attempt at a request waits for a connection, and then for each next byte of the
    answer, at most ``timeout`` / S3_ATTEMPTS seconds (pyarrow's connect_timeout and
    request_timeout; a URL cannot give them). Any other file system as it is."""
    if filesystem.type_name != "s3":
        return filesystem
    _, (options,) = filesystem.__reduce__()  # (the options, as pyarrow pickles the file system)
    share = timeout / S3_ATTEMPTS
    return pafs.S3FileSystem(**{**options, "connect_timeout": share, "request_timeout": share,
                                "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=S3_ATTEMPTS)})


def reached(filesystem: pafs.FileSystem, path: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path), once the file system has answered a first question (the entry at
    ``path``), whatever its answer: a refusal or an error is left to the call that needs the
    entry to report."""
    try:
        filesystem.get_file_info(path)
    except (OSError, pa.ArrowException):
        pass
    return filesystem, path


def answered(call: Callable[[], Result], timeout: float, place: str) -> Result:
    """What ``call`` (a first contact with a file system) returns or raises, waited for at most
    ``timeout`` seconds: NoAnswer naming ``place`` (scheme://bucket-or-host) if it has not ended
    by then. It runs in a thread of its own, so that the wait ends in time where the call would
    not (a client stalled inside C++, a library without a timeout) and a signal ends the wait
    at once (Python runs its handlers in the main thread, which waits here and not inside the
    call). A call that never ends is left in its daemon thread. Not for S3: at exit pyarrow's
    S3 finaliser waits for every S3 call in flight (its own timeouts bound S3's calls)."""
    outcome: list = []
    ended = threading.Event()

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as error:  # (handed to the waiting thread)
            outcome.append((False, error))
        finally:
            ended.set()

    threading.Thread(target=run, name=f"gpudedup first contact with {place}", daemon=True).start()
    if not ended.wait(timeout):
        raise NoAnswer(f"no answer from {place} within {timeout:g} s; {REMOTE_TIMEOUT_VARIABLE} sets how long "
                       "to wait")
    succeeded, value = outcome[0]
    if not succeeded:
        raise value
    return value


# The file systems served by fsspec that have answered a first contact in this process, by
# (scheme, netloc, timeout): later URLs of theirs are not waited for in a thread.
_reached: set[tuple[str, str, float]] = set()


def _fsspec_filesystem(url: str, timeout: float) -> tuple[pafs.FileSystem, str]:
    """(file system, the path of ``url`` in it) for a scheme that fsspec serves, as fsspec
    reads the whole URL: an http(s) URL is its own path, its query part of it. An http(s) file
    system waits ``timeout`` seconds (remote_timeout) for a connection and for each next bytes
    of an answer (aiohttp's timeouts); the first contact with any file system of fsspec's is
    bounded by ``answered`` (Hugging Face's client, among others, has no timeout of its own)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    key = (scheme, parts.netloc, timeout)
    try:
        import fsspec

        options = http_options(timeout) if scheme in ("http", "https") else {}
        if key in _reached:
            spec, path = fsspec.core.url_to_fs(url, **options)
        else:
            spec, path = answered(lambda: fsspec_reached(url, options), timeout,
                                  f"{scheme}://{place_of(scheme, parts.netloc)}")
            _reached.add(key)
    except ImportError as error:
        raise ParameterError(f"{shown_url(url)}: {scheme}:// URLs {missing_package(scheme, error)}") from None
    except ValueError as error:
        if "protocol not known" not in str(error).lower():
            raise ParameterError(f"{shown_url(url)}: {scheme}:// URLs cannot be read here ({first_line(error)})") \
                from None
        raise ParameterError(f"{shown_url(url)}: unknown URL scheme {scheme}:// (neither pyarrow nor fsspec has a "
                             "file system for it)") from None
    return _pyarrow_view(spec), path.rstrip("/") if path.strip("/") else path


def fsspec_reached(url: str, options: dict) -> tuple:
    """(fsspec's file system, the path in it) for ``url``, once the file system has answered a
    first question (reached); fsspec's own errors (an unknown scheme, a missing package) are
    raised as they are."""
    import fsspec

    spec, path = fsspec.core.url_to_fs(url, **options)
    try:
        spec.info(path)
    except Exception:  # (any answer: a refusal or an error is left to the call that needs it)
        pass
    return spec, path


def http_options(timeout: float) -> dict:
    """fsspec's options for an http(s) file system whose aiohttp client waits ``timeout``
    seconds for a connection and for each next bytes of an answer, with no limit on a whole
    answer (a large file takes as long as it takes); none without aiohttp (fsspec then says
    what to install)."""
    try:
        import aiohttp
    except ImportError:
        return {}
    return {"client_kwargs": {"timeout": aiohttp.ClientTimeout(total=None, sock_connect=timeout,
                                                               sock_read=timeout)}}


def missing_package(scheme: str, error: ImportError) -> str:
    """The end of a message for a scheme whose fsspec file system cannot be imported: the
    package to install where it is not installed (fsspec's registry names the module of its
    class: gcsfs, huggingface_hub, adlfs), else the import's own words (a file system of
    fsspec's own whose dependency is missing names it)."""
    import importlib.util

    from fsspec.registry import known_implementations

    module = known_implementations.get(scheme, {}).get("class", "").partition(".")[0]
    if module and module != "fsspec" and importlib.util.find_spec(module) is None:
        return f"are read through the package {module}, which is not installed: pip install {module}"
    return f"cannot be read here ({first_line(error)})"


@functools.lru_cache(maxsize=64)
def _pyarrow_view(spec) -> pafs.FileSystem:
    """An fsspec file system as a pyarrow one, made once per process (fsspec's file systems
    are equal when made with the same options), whose errors are plain ones (plain_errors)."""
    return pafs.PyFileSystem(PlainErrorsHandler(PlainErrors(spec)))


# OSError and the kinds of it that callers tell apart (FSSpecHandler's "not found" included).
OS_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError, OSError)


def plain_errors(call: Callable) -> Callable:
    """``call`` raising, for any error, an OSError (of the same builtin kind where it is one)
    whose message is the first line of the original's, scrubbed: fsspec's file systems raise
    their libraries' own errors (aiohttp's for an HTTP status, ValueError for a server without
    range requests) and name the URL they failed on, query included, where gpudedup's
    readers catch OSError and show the message. An HTTP status other than 404 (fsspec's http
    reports any failure as a FileNotFoundError caused by it) is said as the server's answer: a
    refused request (an expired presigned URL: 403) is no missing file, nor is a server that
    could not be reached (a refused connection, a timeout: the cause fsspec's http gives its
    FileNotFoundError), which is said in the words of that cause."""
    @functools.wraps(call)
    def called(*args, **kwargs):
        try:
            return call(*args, **kwargs)
        except Exception as error:
            answer = next((cause for cause in (error, error.__cause__)
                           if isinstance(getattr(cause, "status", None), int)), None)
            status = getattr(answer, "status", 404)
            if status != 404:
                words = f"the server answered {status} {getattr(answer, 'message', '') or ''}".strip()
                raise (PermissionError if status in (401, 403) else OSError)(words) from None
            cause = error.__cause__
            if isinstance(error, FileNotFoundError) and answer is None and cause is not None \
                    and not isinstance(cause, FileNotFoundError):
                raise OSError(f"cannot reach the server: {first_line(cause)}") from None
            kind = next(kind for kind in OS_ERRORS if isinstance(error, kind) or kind is OSError)
            raise kind(first_line(error)) from None  # (not chained: the original names the secrets)
    return called


class PlainErrors:
    """An fsspec file system, or a file it opened, whose methods raise plain_errors; a file
    that ``open`` returns is wrapped alike."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def __getattr__(self, name: str):
        value = getattr(self._inner, name)
        if not callable(value):
            return value
        if name == "open":
            return plain_errors(lambda *args, **kwargs: PlainErrors(value(*args, **kwargs)))
        return plain_errors(value)

    def __eq__(self, other) -> bool:
        return isinstance(other, PlainErrors) and self._inner == other._inner

    def __hash__(self) -> int:
        return hash(self._inner)


class PlainErrorsHandler(pafs.FSSpecHandler):
    """pyarrow's handler for an fsspec file system, whose own errors (a FileNotFoundError that
    names the path) are plain_errors too."""

    def __getattribute__(self, name: str):
        value = super().__getattribute__(name)
        return plain_errors(value) if callable(value) and not name.startswith("_") else value


def release_file_systems() -> None:
    """Drop the file systems made by ``_filesystem`` and shut the AWS SDK down while nothing
    holds an S3 client. Run at exit, before pyarrow's own finaliser (atexit runs its functions
    last registered first, and pyarrow.fs registered its finaliser when it was imported above):
    an S3 file system that outlives that finaliser, as the cache's would, is the case of
    apache/arrow#41087 and apache/arrow#50188: a process that aborts or hangs after its work is done."""
    _filesystem.cache_clear()
    _pyarrow_view.cache_clear()
    gc.collect()  # (file handles in reference cycles hold their file system too)
    try:
        from pyarrow.fs import ensure_s3_finalized  # (pyarrow's S3 is loaded only by runs on S3)
    except ImportError:  # (a pyarrow built without S3)
        return
    ensure_s3_finalized()


# (An exit function registered between pyarrow.fs's import and this module's runs after this
# one, so it finds S3 shut down; gpudedup registers none that touches a file system.)
atexit.register(release_file_systems)


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


def read_parquet(path: Location) -> pa.Table:
    """A whole Parquet file, local or at a URL."""
    if isinstance(path, Remote):
        filesystem, inside = path.filesystem()
        return pq.read_table(inside, filesystem=filesystem)
    return pq.read_table(path)


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
