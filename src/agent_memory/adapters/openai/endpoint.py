"""Base-URL rules and secret handling shared by the embedder and the chat model."""

from __future__ import annotations

from urllib.parse import urlsplit

from agent_memory.domain.errors import InvalidInput

__all__ = ["Secret", "api_root", "endpoint_identity"]


def api_root(base_url: str, field: str = "base_url") -> str:
    """The `/v1` API root for a configured base URL.

    Rule: trailing slashes are dropped; when the path's last segment is `v1` the
    URL is used as is, otherwise `/v1` is appended. So `http://localhost:11434`,
    `http://localhost:11434/` and `http://localhost:11434/v1/` all become
    `http://localhost:11434/v1`, and `https://gw.example/openai` becomes
    `https://gw.example/openai/v1`. Only http(s) URLs with a host are accepted;
    credentials, query strings and fragments are rejected (pass the key as
    `api_key`, so it never lands in a URL, a log line or an error message).
    """
    if not isinstance(base_url, str) or not base_url.strip():
        raise InvalidInput(field, f"a non-empty http(s) URL is required, got {base_url!r}")
    text = base_url.strip()
    try:
        parts = urlsplit(text)
        port = parts.port  # validates the port
    except ValueError as exc:
        raise InvalidInput(field, f"not a valid URL ({exc})") from None
    del port
    if parts.scheme not in ("http", "https"):
        raise InvalidInput(field, f"scheme must be http or https, got {parts.scheme!r}")
    if parts.username is not None or parts.password is not None:
        # Do not echo the URL: it holds a credential.
        raise InvalidInput(field, "credentials in the URL are not supported; pass api_key")
    if not parts.hostname:
        raise InvalidInput(field, f"a host is required, got {text!r}")
    if parts.query or parts.fragment:
        raise InvalidInput(field, f"query strings and fragments are not supported, got {text!r}")
    path = parts.path.rstrip("/")
    if path.rsplit("/", 1)[-1] != "v1":
        path = f"{path}/v1"
    return f"{parts.scheme}://{parts.netloc}{path}"


def endpoint_identity(root: str) -> str:
    """Host (lower-cased), explicit port and path of an API root: what the
    fingerprint may know about where the model runs. No scheme, no secrets."""
    parts = urlsplit(root)
    host = (parts.hostname or "").lower()
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{host}{port}{parts.path}"


class Secret:
    """A string that never shows itself in repr/str (API keys)."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def redact(self, text: str) -> str:
        """`text` with every occurrence of the secret replaced by `***`."""
        return text.replace(self._value, "***") if self._value else text

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__
