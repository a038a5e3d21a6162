"""The pyarrow file system that serves a URL (``filesystem_of``), made once per process for
each place, and waiting a bounded time for any answer.

pyarrow's own file systems serve the schemes they know (S3, GCS, HDFS, Azure), and fsspec's,
wrapped by pyarrow (with errors made plain: ``plain_errors``), any other. A file system that
cannot be reached fails like a missing local file, in bounded time: each waits at most
remote_timeout() (REMOTE_TIMEOUT_S, 30 s) for an answer, through its own options where it has
them (S3's connect and request timeouts, GCS's retry limit, aiohttp's timeouts for http), and
the first contact with any but S3 runs where the wait ends in time anyway (``answered``). A
scheme that no library serves, or whose package is not installed, is one line that says so.
At exit the file systems made here are dropped before pyarrow's S3 finaliser runs
(``release_file_systems``).
"""

from __future__ import annotations

import atexit
import functools
import gc
import importlib.util
import os
import posixpath
import threading
from typing import Callable, TypeVar
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from ..errors import GpudedupError, ParameterError
from .credentials import first_line, place_of, scrubbed, shown_url

# The schemes pyarrow's own file systems serve; any other goes to fsspec.
PYARROW_SCHEMES = frozenset({"s3", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss", "file"})
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
# Schemes that name the same store as another, by the one they are compared as (where an
# output may lie, outputdir.url_place): gcs:// is gs://, abfss:// abfs:// over TLS (az://
# adlfs's name for it), s3a:// and s3n:// Hadoop's names for s3://.
SAME_STORE = {"gcs": "gs", "abfss": "abfs", "az": "abfs", "s3a": "s3", "s3n": "s3"}
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


def filesystem_of(url: str) -> tuple[pafs.FileSystem, str]:
    """(the pyarrow file system, the path in it) of ``url``. pyarrow's schemes take the query
    as the file system's options (``endpoint_override=...``); fsspec's take the URL as fsspec
    names it, so that an http(s) URL is requested with its query."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in PYARROW_SCHEMES or not pyarrow_serves(scheme):
        return _fsspec_filesystem(url, remote_timeout())
    filesystem, root = _filesystem(scheme, parts.netloc, parts.query, remote_timeout())
    inside = parts.path.strip("/")
    return filesystem, (posixpath.join(root, inside) if inside else root)


# Where a URL's path ends (the query, the fragment): no URL names a key or a name holding one.
URL_PATH_ENDS = "#?"
# What fsspec's deletion (fs.rm) takes for a pattern of names.
PATTERN_MARKS = "*[]"


def unnameable_marks(url: str) -> str:
    """The characters that no entry's name below ``url`` may hold: "#" and "?", where a URL's
    path ends (a name holding one would be written elsewhere); and where fsspec serves the
    scheme, "*", "[" and "]" too, which its deletion (fs.rm) takes for a pattern of names."""
    scheme = urlsplit(url).scheme.lower()
    served = scheme in PYARROW_SCHEMES and pyarrow_serves(scheme)
    return URL_PATH_ENDS if served else URL_PATH_ENDS + PATTERN_MARKS


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
        from pyarrow.fs import ensure_s3_finalized  # (start-up: pyarrow's S3 is loaded only by runs on S3)
    except ImportError:  # (a pyarrow built without S3)
        return
    ensure_s3_finalized()


# (An exit function registered between pyarrow.fs's import and this module's runs after this
# one, so it finds S3 shut down; gpudedup registers none that touches a file system.)
atexit.register(release_file_systems)
