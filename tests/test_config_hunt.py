"""Adversarial configuration, as an operator meets it: `AGENT_MEMORY_*` values
and storage URLs.

A number variable holds an ASCII decimal number (docs/configuration.md): any
other spelling (full-width or Arabic-Indic digits, `1_000`, units, NaN, ...) is
a `ConfigurationError` naming the variable, never a silently different value or
a raw `ValueError`. A credential in a storage URL is never shown, however the
operator spelled it (a password holding `/`, `?`, `#`, `@`, a newline; a
percent-escaped parameter name), neither by `redact_url` nor in the error a
malformed URL raises.
"""

from __future__ import annotations

import re
import string
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_memory.bootstrap.connect import scheme_of
from agent_memory.bootstrap.settings import ENV_VARS, Settings, redact_url
from agent_memory.domain.errors import ConfigurationError, UnsupportedBackend

_VARS = {f.metadata["env"].name: f.metadata["env"] for f in Settings.__attrs_attrs__}
_NUMERIC = sorted(n for n, v in _VARS.items() if v.kind in ("int", "limit", "number", "fraction"))
_INT_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _outcome(name: str, raw: str) -> object:
    try:
        return Settings.from_env({name: raw})
    except ConfigurationError as exc:
        assert name in str(exc), f"the error names the variable: {exc}"  # noqa: PT017
        return exc


# -- environment variables ------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    ["\uff15", "\u0663", "1_000", "1_0", "\u00b2", "10s", "5 days", "0x10", "1e3 ", "nan", "true"],
)
@pytest.mark.parametrize(
    "name",
    [
        "AGENT_MEMORY_WINDOW_LIMIT",
        "AGENT_MEMORY_RETENTION_DAYS",
        "AGENT_MEMORY_VIEW_BUDGET_BYTES",
        "AGENT_MEMORY_SIGNAL_TTL_SECONDS",
        "AGENT_MEMORY_LOOKBACK_HOURS",
        "AGENT_MEMORY_CLEANUP_TIMEOUT_SECONDS",
        "AGENT_MEMORY_USER_WEIGHT_RECENCY",
    ],
)
def test_a_number_not_written_in_ascii_decimal_is_refused(name: str, raw: str) -> None:
    if raw == "1e3 " and _VARS[name].kind in ("number", "fraction"):
        raw = "1e3x"  # `1e3` (surrounding blanks stripped) is a documented float spelling
    outcome = _outcome(name, raw)
    assert isinstance(outcome, ConfigurationError), f"{name}={raw!r} was accepted"


_ODD_TEXT = st.one_of(
    st.text(max_size=8),
    st.text(alphabet=string.digits + "+-_.eE ,\u0663\uff15\u00b2xs", max_size=8),
    st.sampled_from(["nan", "inf", "-inf", "1e400", "1e-400", "-0", "+0", "9" * 30, " 12 "]),
)


@settings(max_examples=150, deadline=None)
@given(name=st.sampled_from(_NUMERIC), raw=_ODD_TEXT)
def test_every_numeric_variable_accepts_only_what_it_documents(name: str, raw: str) -> None:
    """Accepted only when the text is an ASCII decimal number; then the value is
    exactly that number (in the variable's unit)."""
    var = _VARS[name]
    outcome = _outcome(name, raw)
    if raw == "":
        assert isinstance(outcome, Settings)  # an empty variable is an unset one
        return
    if isinstance(outcome, ConfigurationError):
        return
    text = raw.strip()
    pattern = _INT_RE if var.kind in ("int", "limit") else _FLOAT_RE
    assert pattern.fullmatch(text), f"{name}={raw!r} accepted but not ASCII decimal"
    shown = next(s.value for s in outcome.explain({}) if s.variable == name)
    expected = int(text) if var.kind in ("int", "limit") else float(text)
    if var.unit is None:
        assert shown == expected
    else:
        assert shown == pytest.approx(expected, rel=1e-6)


def test_every_documented_default_is_the_code_default() -> None:
    from pathlib import Path

    doc = (Path(__file__).parent.parent / "docs/configuration.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(AGENT_MEMORY_\w+)` \| ([^|]+) \|", doc, re.M))
    assert set(rows) == set(ENV_VARS)
    for name, setting in ENV_VARS.items():
        cell = rows[name].strip()
        if setting.default is None:
            assert cell == "—", name
        else:
            assert cell == f"`{setting.default}`", name


# -- storage URLs: credentials --------------------------------------------------------------

_SCHEMES = [
    "redis",
    "rediss",
    "redis+cluster",
    "postgresql",
    "postgres",
    "qdrant",
    "milvus",
]
# characters an operator puts in a password without percent-escaping it
_PASSWORD = st.text(
    alphabet=string.ascii_letters + string.digits + "/?#@:;&=%!$*+,[] \n\t",
    min_size=1,
    max_size=12,
)


def _secret(password: str) -> str:
    return f"Zq{password}Zq"


@settings(max_examples=200, deadline=None)
@given(
    scheme=st.sampled_from(_SCHEMES),
    password=_PASSWORD,
    escaped=st.booleans(),
    port=st.sampled_from(["", ":6379", ":0", ":65536", ":x"]),
    tail=st.sampled_from(["", "/0", "/db?sslmode=disable", "/?x=1", "/db#f"]),
)
def test_a_password_is_never_shown(
    scheme: str, password: str, escaped: bool, port: str, tail: str
) -> None:
    secret = _secret(password)
    spelled = quote(secret, safe="") if escaped else secret
    url = f"{scheme}://agent:{spelled}@db.example{port}{tail}"
    shown = redact_url(url)
    assert spelled not in shown, shown
    assert "Zq" not in shown.replace("***", ""), shown
    try:
        scheme_of(url)
    except (ConfigurationError, UnsupportedBackend) as exc:
        assert "Zq" not in str(exc), str(exc)  # noqa: PT017


@settings(max_examples=100, deadline=None)
@given(
    name=st.sampled_from(["password", "sslpassword", "token", "api_key", "apikey", "access_token"]),
    value=st.text(
        alphabet=string.ascii_letters + string.digits + "!$*+,:@/", min_size=1, max_size=10
    ),
    spelling=st.sampled_from(["plain", "upper", "escaped_name"]),
    sep=st.sampled_from(["?", "?a=1&", "?a=1;"]),
)
def test_a_credential_parameter_is_never_shown(
    name: str, value: str, spelling: str, sep: str
) -> None:
    if spelling == "upper":
        name = name.upper()
    elif spelling == "escaped_name":
        # libpq decodes the escapes of a parameter's name too: %70assword is password
        name = "".join(f"%{ord(c):02X}" if i == 0 else c for i, c in enumerate(name))
    secret = _secret(value)
    url = f"postgresql://agent@db.example/db{sep}{name}={secret}"
    assert "Zq" not in redact_url(url).replace("***", ""), redact_url(url)


def test_doctor_never_prints_a_password_with_a_slash(capsys: pytest.CaptureFixture[str]) -> None:
    from agent_memory.entrypoints.cli import main

    code = main(["doctor", "--url", "redis://agent:pw/Zq-MARKER@127.0.0.1:9/0"])
    out = capsys.readouterr()
    assert code != 0, out
    assert "MARKER" not in out.out + out.err


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://app@db.example:5432/db?user=me@corp",
        "postgresql://db.example:5432,db2.example:5433/db?sslcert=/a@b",
        "redis://[::1]:6379/0",
        "sqlite:///tmp/a:b@c.db",
        "milvus://db.example:19530?db=prod",
    ],
)
def test_a_url_without_credentials_is_shown_as_written(url: str) -> None:
    assert redact_url(url) == url


def test_a_password_with_an_at_in_a_parameter_keeps_the_host() -> None:
    shown = redact_url("postgresql://app:Zq-pw@db.example:5432/db?sslcert=/a@b")
    assert shown == "postgresql://app:***@db.example:5432/db?sslcert=/a@b"


# -- storage URLs: typed errors -------------------------------------------------------------


async def _open(url: str) -> None:
    import agent_memory
    from agent_memory.adapters.memory import HashingEmbedder

    async with agent_memory.connect(url, embedder=HashingEmbedder(8)):
        pass


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:0/0",
        "rediss://[::1]:0/0",
        "redis+cluster://127.0.0.1:7000,127.0.0.1:0/",
        "postgresql://127.0.0.1:0/db",
        "qdrant://127.0.0.1:0",
        "milvus://127.0.0.1:0",
    ],
)
def test_port_zero_is_refused_not_read_as_the_default_port(url: str) -> None:
    with pytest.raises(ConfigurationError, match="port"):
        scheme_of(url)


@pytest.mark.parametrize(
    "query",
    [
        "hnsw_m=16&hnsw_m=32",
        "exact_threshold=5&exact_threshold=5",
        "hnsw_m=\uff15",
        "exact_threshold=\u0663",
        "exact_threshold=1_000",
        "hnsw_ef_search=1e3",
    ],
)
@pytest.mark.parametrize("base", ["memory://", "sqlite:///{tmp}/m.db"])
async def test_an_index_parameter_given_twice_or_in_odd_digits_is_refused(
    base: str, query: str, tmp_path: object
) -> None:
    url = base.format(tmp=tmp_path) + "?" + query
    with pytest.raises(ConfigurationError, match=query.split("=")[0]):
        await _open(url)


async def test_a_sqlite_option_given_twice_is_refused(tmp_path: object) -> None:
    with pytest.raises(ConfigurationError, match="busy_timeout"):
        await _open(f"sqlite:///{tmp_path}/m.db?busy_timeout=1&busy_timeout=2")


@pytest.mark.parametrize("path", ["/tmp/q%00", "/tmp/q\x00", "/tmp/q%ff"])
async def test_a_qdrant_local_path_that_names_no_directory_is_refused(path: str) -> None:
    import qdrant_client  # noqa: F401 (a test dependency: a missing install fails, never skips)

    with pytest.raises(ConfigurationError, match="qdrant"):
        await _open(f"qdrant+local://{path}")
