"""Bearer API keys: hashed at rest, each bound to one tenant, optionally read-only.

The key file (or the `AGENT_MEMORY_SERVER_KEYS` variable, same JSON) holds only
SHA-256 digests of the keys, never a key:

    {"keys": [{"id": "acme-app", "tenant": "acme", "sha256": "<64 hex>",
               "read_only": false, "revoked": false, "rate": 20, "burst": 40,
               "admin": false, "user": "alice"}]}

(`rate`/`burst` are optional per-key overrides of the server's rate limit;
`admin` lets a key read its tenant's audit trail; `user` binds a key to one
user id of its tenant: every user call made with it acts on that user only,
and naming another user is refused.)

Keys are 256-bit random tokens (`new_key()`), so one SHA-256 is the right
hash: a slow password hash buys nothing against a key nobody can guess, and
lookup by digest keeps the comparison free of timing on the secret. A key file
is re-read when it changes (revocation takes effect within a second, without a
restart); a file that becomes unreadable or invalid fails closed: no key is
accepted until it is fixed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from attrs import frozen

from agent_memory.domain.errors import ConfigurationError, InvalidInput
from agent_memory.domain.validation import require_id
from agent_memory.entrypoints.server.tenancy import Tenant

__all__ = ["ENV_KEYS", "ENV_KEYS_FILE", "ApiKey", "KeyRing", "hash_key", "new_key"]

ENV_KEYS = "AGENT_MEMORY_SERVER_KEYS"
ENV_KEYS_FILE = "AGENT_MEMORY_SERVER_KEYS_FILE"
_PREFIX = "amk_"
_log = logging.getLogger(__name__)


def hash_key(token: str) -> str:
    """The digest stored for a key."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def new_key() -> str:
    """A fresh random API key (256 bits)."""
    return _PREFIX + secrets.token_urlsafe(32)


@frozen
class ApiKey:
    """One configured key (its digest, not the key)."""

    id: str
    tenant: Tenant
    read_only: bool = False
    rate: float | None = None
    """Requests per second for this key (None: the server's `--rate`)."""
    burst: int | None = None
    admin: bool = False
    """May read the tenant's audit trail (`GET /v1/audit`)."""
    user: str | None = None
    """Bound to this one user id of the tenant (None: any user of the tenant)."""


def _parse(document: Any, source: str) -> dict[str, ApiKey]:
    if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
        raise ConfigurationError(f'{source}: expected {{"keys": [...]}}')
    out: dict[str, ApiKey] = {}
    ids: set[str] = set()
    for i, entry in enumerate(document["keys"]):
        where = f"{source}: keys[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigurationError(f"{where}: an object is required")
        unknown = set(entry) - {
            "id",
            "tenant",
            "sha256",
            "read_only",
            "revoked",
            "rate",
            "burst",
            "admin",
            "user",
        }
        if unknown:
            raise ConfigurationError(f"{where}: unknown fields {sorted(unknown)}")
        key_id, digest = entry.get("id"), entry.get("sha256")
        if not isinstance(key_id, str) or not key_id.strip() or key_id in ids:
            raise ConfigurationError(f"{where}: a unique non-empty string 'id' is required")
        if not isinstance(digest, str) or len(digest) != 64 or not _is_hex(digest):
            raise ConfigurationError(f"{where}: 'sha256' must be 64 hex digits")
        read_only, revoked = entry.get("read_only", False), entry.get("revoked", False)
        if not isinstance(read_only, bool) or not isinstance(revoked, bool):
            raise ConfigurationError(f"{where}: 'read_only' and 'revoked' are booleans")
        rate, burst = entry.get("rate"), entry.get("burst")
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float)
                                 or not rate > 0):  # fmt: skip
            raise ConfigurationError(f"{where}: 'rate' must be a number > 0")
        if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int)
                                  or burst < 1):  # fmt: skip
            raise ConfigurationError(f"{where}: 'burst' must be an integer >= 1")
        admin, user = entry.get("admin", False), entry.get("user")
        if not isinstance(admin, bool):
            raise ConfigurationError(f"{where}: 'admin' is a boolean")
        if user is not None:
            try:
                user = require_id(user, "user")
            except InvalidInput as exc:
                raise ConfigurationError(f"{where}: 'user' {exc}") from None
        ids.add(key_id)
        if revoked:
            continue
        tenant = Tenant(str(entry.get("tenant", "")), user)
        out[digest.lower()] = ApiKey(
            key_id, tenant, read_only, None if rate is None else float(rate), burst, admin, user
        )
    return out


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


class KeyRing:
    """The accepted keys, from a file (re-read when it changes) or a JSON text."""

    def __init__(self, *, path: str | os.PathLike[str] | None = None, text: str | None = None):
        if (path is None) == (text is None):
            raise ConfigurationError("API keys: give exactly one of a key file or a JSON text")
        self._path = None if path is None else Path(path)
        self._keys: dict[str, ApiKey] = {}
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        if text is not None:
            self._keys = _parse(_loads(text, ENV_KEYS), ENV_KEYS)
        else:
            self._reload(strict=True)

    @classmethod
    def from_env(cls, path: str | None = None, environ: Mapping[str, str] | None = None) -> KeyRing:
        """`path`, else `AGENT_MEMORY_SERVER_KEYS_FILE`, else `AGENT_MEMORY_SERVER_KEYS`."""
        env = os.environ if environ is None else environ
        path = path or env.get(ENV_KEYS_FILE)
        if path:
            return cls(path=path)
        if env.get(ENV_KEYS):
            return cls(text=env[ENV_KEYS])
        raise ConfigurationError(
            f"no API keys configured: pass --keys FILE or set {ENV_KEYS_FILE} or {ENV_KEYS} "
            "(create one with `agent-memory serve --new-key TENANT`)"
        )

    def __len__(self) -> int:
        self._refresh()
        return len(self._keys)

    def authenticate(self, token: str) -> ApiKey | None:
        """The key a presented token is, or None (unknown, revoked, malformed)."""
        self._refresh()
        if not token or len(token) > 512:
            return None
        return self._keys.get(hash_key(token))

    def _refresh(self) -> None:
        if self._path is None:
            return
        now = time.monotonic()
        if now - self._checked < 1.0:
            return
        self._checked = now
        self._reload(strict=False)

    def _reload(self, *, strict: bool) -> None:
        assert self._path is not None
        try:
            st = self._path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp == self._stamp:
                return
            keys = _parse(_loads(self._path.read_text("utf-8"), str(self._path)), str(self._path))
        except (OSError, UnicodeDecodeError, ConfigurationError) as exc:
            if strict:
                raise ConfigurationError(f"API key file {self._path}: {exc}") from None
            if self._keys:
                _log.error("API key file %s unusable, accepting no key: %s", self._path, exc)
            self._keys, self._stamp = {}, None
            return
        self._keys, self._stamp = keys, stamp


def _loads(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{source}: not JSON: {exc}") from None
