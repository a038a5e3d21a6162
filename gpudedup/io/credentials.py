"""A URL's credentials, never shown: how ids, messages, report.json, report.html and
errors.jsonl name a URL (``shown_url``: the password before its host left out, and the value of
each query option that carries a credential, such as ``sig``, ``X-Amz-Signature`` or
``client_secret``, hidden), credentials taken out of any other text (``scrubbed``: a library's
error message may quote a URL, or a secret alone), and an error's message as gpudedup's
messages quote it (``first_line``, ``os_reason``), scrubbed. Only storage.full_name keeps a
URL's credentials, to open the file again.
"""

from __future__ import annotations

import errno
import functools
import os
import re
from typing import Optional
from urllib.parse import unquote, unquote_plus, urlsplit

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
    if error.errno is None and is_full_disk(error):  # (numpy's short write; a quota has its own words)
        return f"{os.strerror(errno.ENOSPC)}: a write stopped short, {error}"
    return error.strerror or first_line(error)


def is_full_disk(error: OSError) -> bool:
    """Whether an OSError is a write that found no room: ENOSPC or a quota, or numpy's short
    write (os_reason says why that is one)."""
    return error.errno in (errno.ENOSPC, errno.EDQUOT) or (
        error.errno is None and re.fullmatch(r"\d+ requested and \d+ written", str(error)) is not None)
