"""Connection URL helpers shared by the adapters and the bootstrap: the file
path a storage URL names, its redaction for messages, and the refusal of a
user info whose unescaped `/`, `?` or `#` ends the authority early.

The file path (`sqlite:///...`, `milvus+lite:///...`): percent-escapes are
decoded strictly: an escape that is not UTF-8 (`%ff`), a NUL (`%00` or a raw
one) or a lone surrogate cannot name a file, so the URL is
refused with a `ConfigurationError` that names it, before any file is opened
(decoding with replacement characters would open another file instead)."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit

from agent_memory.domain.errors import ConfigurationError

__all__ = ["file_path", "redact_url", "refuse_misplaced_user_info"]


def file_path(raw: str, url: str) -> str:
    """The decoded path `raw` (the path part of `url`), or `ConfigurationError`."""
    try:
        path = unquote(raw, errors="strict")
        path.encode("utf-8")
    except UnicodeError:
        raise ConfigurationError(
            f"the storage URL {url!r} names no valid file path: its path is not UTF-8 "
            "(a percent-escape or a lone surrogate)"
        ) from None
    if "\x00" in path:
        raise ConfigurationError(
            f"the storage URL {url!r} names no valid file path: it holds NUL (\\x00 or %00)"
        )
    return path


#: URL parameters that carry a credential: libpq's `password` and `sslpassword`
#: (a PostgreSQL URL passes its other parameters to libpq), the API key of a
#: Milvus URL (`token`), and the usual names of an API key.
_SECRET_PARAMS = frozenset(
    ("password", "sslpassword", "token", "api_key", "apikey", "access_token")
)
_PARAM = re.compile(r"([?&;])([^=&;#]*)=([^&;#]*)")
_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_HOST_PORT = re.compile(r"(?:\[[^\]]*\]|[^:\[\]]*)(?::[0-9]*)?")


def _well_formed_hosts(netloc: str) -> bool:
    """Every `host[:port]` of a (comma separated) host list has a numeric port."""
    return all(_HOST_PORT.fullmatch(host) for host in netloc.split(","))


def _in_parameter(between: str) -> bool:
    """Whether an `@` preceded by `between` (the URL from the end of its strict
    authority) sits in a query parameter's value (`?sslcert=/a@b`)."""
    query = between.find("?")
    return query >= 0 and "=" in between[query:]


def redact_url(url: str, mask: str = "***") -> str:
    """`url` with every credential replaced by `mask`: the password of its
    user info (`user:***@host`) and the value of a parameter that holds one
    (`?password=***`, `?token=***`, whatever the case or percent-escapes of its
    name: libpq decodes both).

    The user info is read as an operator may have written it: a password
    holding an unescaped `/`, `?`, `#` or `@` ends the URL's authority early
    (a strict parser then sees a port such as `pw` or `1234`, a path such as
    `/x@h`, or a second `@`), so the password runs to the last `@` of the URL
    unless that `@` is in a query parameter's value (`?user=me@corp`); a user
    name holding an `@` (`me@corp:pw@host`) ends at its first `:`. Whitespace
    and control characters are kept as written (`urlsplit` drops some, so its
    password would not match the text)."""
    head = _AUTHORITY.match(url)
    if head is not None:
        start = head.end()
        rest = url[start:]
        end = next((i for i, c in enumerate(rest) if c in "/?#"), len(rest))
        netloc = rest[:end]
        at = rest.rfind("@")
        strict_at = netloc.rfind("@")
        if at > end and _in_parameter(rest[end:at]):
            host = netloc[strict_at + 1 :] if strict_at >= 0 else netloc
            if _well_formed_hosts(host):
                at = strict_at  # the later `@` is in a parameter (`?sslcert=a@b`)
        # an empty authority (`sqlite:///tmp/a:b@c.db`) holds no user info
        if at >= 0 and netloc:
            colon = rest.find(":", 0, at)
            if 0 <= colon < at - 1:
                url = url[: start + colon + 1] + mask + url[start + at :]

    def param(m: re.Match[str]) -> str:
        name = unquote(m.group(2)).strip().lower()
        if name in _SECRET_PARAMS:
            return f"{m.group(1)}{m.group(2)}={mask}"
        return m.group(0)

    return _PARAM.sub(param, url)


def refuse_misplaced_user_info(url: str) -> None:
    """`ConfigurationError` for a server URL with an `@` after its authority:
    in the path, a parameter's name or the fragment. That is a password (or
    user name) holding an unescaped `/`, `?` or `#` (`redis://u:1234/x@h`):
    every parser reads host `u`, port 1234 and path `/x@h`, so the client would
    try another server and quote the rest of the password in its errors. The
    message names the fix and never the URL (it holds the password)."""
    parts = urlsplit(url)
    names = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True)]
    if "@" in parts.path or "@" in parts.fragment or any("@" in n for n in names):
        raise ConfigurationError(
            "malformed storage URL (not shown: it may hold a password): an '@' follows "
            "the host, so a '/', '?' or '#' of the user name or password ended the "
            "host early; percent-encode them in the user info ('/' as %2F, '?' as %3F, "
            "'#' as %23, '@' as %40)"
        )
