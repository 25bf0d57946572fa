"""Adversarial configuration, second pass: text variables, passwords that end
a URL's authority early, client options a backend would accept until its first
call, and URL shapes (IPv6 hosts, percent-escapes, repeated or unknown options).

Every refusal is a typed `AgentMemoryError` that names what was wrong and never
shows a credential (a password, an API key, the key digests).
"""

from __future__ import annotations

import json
import string
from urllib.parse import quote

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent_memory.bootstrap.connect import scheme_of
from agent_memory.bootstrap.settings import Settings, redact_url
from agent_memory.domain.errors import AgentMemoryError, ConfigurationError, InvalidInput

_VARS = {f.metadata["env"].name: f.metadata["env"] for f in Settings.__attrs_attrs__}
_TEXT_VARS = sorted(n for n, v in _VARS.items() if v.kind in ("text", "url"))
_SECRET_VARS = sorted(n for n, v in _VARS.items() if v.secret)
_MARK = "Zq9"


def _env_for(name: str, raw: str) -> dict[str, str]:
    """`{name: raw}` plus whatever the variable needs beside it to be valid."""
    env = {name: raw}
    if name.endswith("_MODEL") and name != "AGENT_MEMORY_EMBEDDINGS_MODEL":
        env.setdefault("AGENT_MEMORY_LLM_URL", "http://127.0.0.1:9/v1")
        env.setdefault("AGENT_MEMORY_LLM_MODEL", "m")
    if name == "AGENT_MEMORY_LLM_URL":
        env["AGENT_MEMORY_LLM_MODEL"] = "m"
    if name == "AGENT_MEMORY_EMBEDDINGS_URL":
        env["AGENT_MEMORY_EMBEDDINGS_MODEL"] = "e"
    if name == "AGENT_MEMORY_EMBEDDINGS_MODEL":
        env["AGENT_MEMORY_EMBEDDINGS_URL"] = "http://127.0.0.1:9/v1"
    return env


def _value(name: str) -> str:
    return "sqlite:///tmp/x.db" if _VARS[name].kind == "url" else "7"


# -- text variables: surrounding blanks -----------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(_TEXT_VARS),
    before=st.sampled_from(["", " ", "\t", "\n", "\u00a0", "\u3000"]),
    after=st.sampled_from(["", " ", "\t", "\n", "\r\n", "\u00a0", "\u2003"]),
)
@example(name="AGENT_MEMORY_DEPLOYMENT", before=" ", after=" ")
def test_a_text_variable_with_surrounding_blanks_is_refused_naming_it(
    name: str, before: str, after: str
) -> None:
    """`AGENT_MEMORY_DEPLOYMENT=" 7 "` named another deployment than `7` (and a
    model name or key file path with a stray newline another model or file):
    a text or URL value that starts or ends with a blank is refused, naming the
    variable (docs/configuration.md), never silently kept or stripped."""
    raw = before + _value(name) + after
    env = _env_for(name, raw)
    if not before and not after:
        Settings.from_env(env)  # the same value without blanks is accepted
        return
    with pytest.raises(ConfigurationError, match=name) as caught:
        Settings.from_env(env)
    assert "blank" in str(caught.value)


@pytest.mark.parametrize("name", _TEXT_VARS)
def test_a_text_field_given_in_code_with_surrounding_blanks_is_refused(name: str) -> None:
    field = next(f.name for f in Settings.__attrs_attrs__ if f.metadata["env"].name == name)
    env = _env_for(name, _value(name))
    values = {
        f.name: env[f.metadata["env"].name]
        for f in Settings.__attrs_attrs__
        if f.metadata["env"].name in env
    }
    values[field] = f" {_value(name)}"
    with pytest.raises(ConfigurationError, match=name):
        Settings(**values)


# -- secrets in configuration errors ------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    name=st.sampled_from(_SECRET_VARS),
    bad=st.sampled_from(["\x00", "\ud800", " ", "\n"]),
    where=st.sampled_from(["start", "middle", "end"]),
)
def test_an_invalid_secret_variable_is_refused_without_showing_it(
    name: str, bad: str, where: str
) -> None:
    """`AGENT_MEMORY_API_KEY='sk-...\\x00'` was refused with the key in the message."""
    secret = f"sk-{_MARK}-secret"
    if bad.isspace() and where == "middle":
        where = "end"  # a blank inside a value is part of it
    raw = {"start": bad + secret, "middle": secret + bad + "x", "end": secret + bad}[where]
    with pytest.raises(ConfigurationError, match=name) as caught:
        Settings.from_env({name: raw})
    assert _MARK not in str(caught.value)
    field = next(f.name for f in Settings.__attrs_attrs__ if f.metadata["env"].name == name)
    with pytest.raises(ConfigurationError, match=name) as caught:
        Settings(**{field: raw})
    assert _MARK not in str(caught.value)


@pytest.mark.parametrize(
    "raw",
    [
        f"redis://agent:{_MARK}@127.0.0.1:6379/0\x00",
        f"redis://agent:{_MARK}@127.0.0.1:6379/0 ",
        f"redis-agent:{_MARK}@127.0.0.1",
        f"postgresql://agent:{_MARK}@db/x\ud800",
    ],
)
@pytest.mark.parametrize("name", ["AGENT_MEMORY_URL", "AGENT_MEMORY_COORDINATION_URL"])
def test_an_invalid_url_variable_is_refused_without_its_password(name: str, raw: str) -> None:
    with pytest.raises(ConfigurationError, match=name) as caught:
        Settings.from_env({name: raw})
    assert _MARK not in str(caught.value)


def test_server_keys_of_several_keys_are_accepted() -> None:
    """`AGENT_MEMORY_SERVER_KEYS` holds a JSON document of key digests: four keys
    are about 540 bytes, and the 512-byte bound of an id refused them (so
    `agent-memory serve` could not start)."""
    keys = [
        {"id": f"app-{i}", "tenant": "acme", "sha256": "a" * 64, "read_only": False}
        for i in range(6)
    ]
    text = json.dumps({"keys": keys})
    assert len(text) > 512
    assert Settings.from_env({"AGENT_MEMORY_SERVER_KEYS": text}).server_keys == text
    url = "postgresql://agent@db.example/app?" + "&".join(f"options{i}=x" for i in range(80))
    assert len(url) > 512
    assert Settings.from_env({"AGENT_MEMORY_URL": url}).url == url


# -- a password holding `/` after digits -------------------------------------------------------

_NETWORKED = ["redis", "rediss", "redis+cluster", "postgresql", "postgres", "qdrant", "milvus"]


@settings(max_examples=80, deadline=None)
@given(
    scheme=st.sampled_from(_NETWORKED),
    user=st.sampled_from(["", "u", "agent"]),
    digits=st.text(alphabet=string.digits, min_size=1, max_size=5),
    rest=st.text(alphabet=string.ascii_letters + string.digits + "/:!$*+,;=.-_~", max_size=8),
    tail=st.sampled_from(["", ":6379", ":6379/0", "/0", "/db?sslmode=disable"]),
)
@example(scheme="redis", user="u", digits="1234", rest="", tail="")
def test_a_password_of_digits_then_a_slash_is_never_shown(
    scheme: str, user: str, digits: str, rest: str, tail: str
) -> None:
    """`redis://u:1234/x@h` reads as host `u`, port 1234 and path `/x@h` to every
    parser: redaction showed `1234/x` and the Redis path error quoted `/x@h`. The
    URL is refused (the `/` must be percent-escaped) and never shown unredacted."""
    url = f"{scheme}://{user}:{digits}/{_MARK}{rest}@db.example{tail}"
    shown = redact_url(url)
    assert _MARK not in shown, shown
    assert f":{digits}/" not in shown, shown
    with pytest.raises(ConfigurationError, match="percent") as caught:
        scheme_of(url)
    assert _MARK not in str(caught.value)
    assert f":{digits}/" not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "redis://u:1234/{m}@127.0.0.1:9/0",
        "postgresql://u:1234/{m}@127.0.0.1:9/db",
        "qdrant://u:1234/{m}@127.0.0.1:9",
        "milvus://u:1234/{m}@127.0.0.1:9",
    ],
)
def test_doctor_refuses_a_password_with_a_slash_without_printing_it(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent_memory.entrypoints.cli import main

    code = main(["doctor", "--url", url.format(m=_MARK)])
    out = capsys.readouterr()
    assert code != 0, out
    assert _MARK not in out.out + out.err
    assert "1234/" not in out.out + out.err
    assert "percent" in out.out + out.err


def test_a_redis_adapter_url_with_a_path_password_does_not_echo_it() -> None:
    from agent_memory.adapters.redis._client import connect

    with pytest.raises(AgentMemoryError) as caught:
        connect(f"redis://u:1234/{_MARK}@127.0.0.1:9/0")
    assert _MARK not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://db.example:5432,db2.example:5433/db?sslcert=/a@b",
        "postgresql://app@db.example:5432/db?user=me@corp",
        "redis://u:pw%2F1@db.example:6379/0",
        "redis://[::1]:6379/0",
        "sqlite:///tmp/a:b@c.db",
    ],
)
def test_a_url_whose_at_sign_is_not_a_password_is_shown_and_accepted(url: str) -> None:
    assert redact_url(url) in (url, url.replace("pw%2F1", "***"))
    scheme_of(url)


# -- Redis client options read only at the first call ---------------------------------------


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("socket_timeout=-1", "socket_timeout"),
        ("socket_timeout=0", "socket_timeout"),
        ("socket_timeout=nan", "socket_timeout"),
        ("socket_timeout=inf", "socket_timeout"),
        ("socket_connect_timeout=-5", "socket_connect_timeout"),
        ("socket_timeout=\u0663", "socket_timeout"),
        ("health_check_interval=-1", "health_check_interval"),
        ("max_connections=0", "max_connections"),
        ("socket_timeout=1&socket_timeout=2", "socket_timeout"),
        ("db=5", "db"),
        ("bogus=1", "bogus"),
    ],
)
def test_a_redis_option_the_client_would_take_until_its_first_call_is_refused(
    query: str, parameter: str
) -> None:
    from agent_memory.adapters.redis._client import connect

    with pytest.raises(InvalidInput, match=parameter):
        connect(f"redis://127.0.0.1:9/0?{query}")


@pytest.mark.parametrize("path", ["/\u0663", "/99999999999", "/-1", "/0/1", "/1%2F2"])
def test_a_redis_database_that_is_no_number_or_out_of_range_is_refused(path: str) -> None:
    from agent_memory.adapters.redis._client import connect

    with pytest.raises(InvalidInput, match="database"):
        connect(f"redis://127.0.0.1:9{path}")


async def test_a_database_the_redis_server_does_not_have_is_refused_at_connect(
    redis_url: str,
) -> None:
    """`/99999999` passed every check and failed at the first store call (`DB
    index is out of range`) as a `BackendUnavailable`; connect names it."""
    import agent_memory
    from agent_memory.adapters.memory import HashingEmbedder

    base = redis_url.rstrip("/").rsplit("/", 1)[0] if redis_url.count("/") > 2 else redis_url
    with pytest.raises(ConfigurationError, match="database 99999999"):
        async with agent_memory.connect(f"{base}/99999999", embedder=HashingEmbedder(8)):
            pass


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://me@corp.example:{_MARK}@db.example/db",
        f"redis://me@corp:{_MARK}/x@db.example:6379/0",
        f"qdrant://me@corp:{_MARK}@db.example:6333",
    ],
)
def test_a_user_name_holding_an_at_does_not_reveal_the_password(url: str) -> None:
    """Azure-style user names (`user@server`): the password began after the
    first `@`, so nothing was redacted."""
    assert _MARK not in redact_url(url), redact_url(url)


# -- Qdrant and Milvus URLs -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("qdrant://[::1]:6333", "http://[::1]:6333"),
        ("qdrant://[2001:db8::7]:7000?tls=true", "https://[2001:db8::7]:7000"),
        ("QDRANT://Db.Example:6333", "http://db.example:6333"),
    ],
)
def test_a_qdrant_url_names_its_ipv6_host_as_a_url_can(url: str, expected: str) -> None:
    """`qdrant://[::1]:6333` became `http://::1:6333`, which the client refuses
    with a raw `LocationParseError`."""
    from agent_memory.adapters.qdrant.factory import _parse, qdrant_client_from_url

    assert _parse(url)[1]["url"] == expected
    client, _ = qdrant_client_from_url(url)
    assert client is not None


def test_a_milvus_url_names_its_ipv6_host_as_a_url_can() -> None:
    from agent_memory.adapters.milvus.factory import parse_milvus_url

    assert parse_milvus_url("milvus://[::1]:19530").kwargs["uri"] == "http://[::1]:19530"


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("timeout=-1", "timeout"),
        ("timeout=0", "timeout"),
        ("timeout=\u0663", "timeout"),
        ("timeout=1_0", "timeout"),
        ("grpc_port=99999", "grpc_port"),
        ("grpc_port=0", "grpc_port"),
        ("timeout=1&timeout=2", "timeout"),
        ("prefix=a&prefix=b", "prefix"),
    ],
)
def test_a_qdrant_option_out_of_range_or_given_twice_is_refused(query: str, parameter: str) -> None:
    from agent_memory.adapters.qdrant.factory import _parse

    with pytest.raises(ConfigurationError, match=parameter):
        _parse(f"qdrant://db.example:6333?{query}")


@pytest.mark.parametrize("query", ["prefix=a&prefix=b", "db=x&db=y", "token=a&token=b"])
def test_a_milvus_option_given_twice_is_refused(query: str) -> None:
    from agent_memory.adapters.milvus.factory import parse_milvus_url

    with pytest.raises(ConfigurationError, match=query.split("=")[0]) as caught:
        parse_milvus_url(f"milvus://db.example:19530?{query}")
    assert "token=" not in str(caught.value)


# -- URL shapes: every refusal is typed and never shows the password ------------------------

_HOSTS = st.sampled_from(
    [
        "db.example",
        "127.0.0.1",
        "[::1]",
        "[2001:db8::1]",
        "[fe80::1%25eth0]",
        "bücher.example",
        "xn--bcher-kva.example",
        "DB.Example",
        "h%2Fx",
        "[::1",
        "",
    ]
)
_OPTION = st.sampled_from(
    [
        "hnsw_m=16",
        "exact_threshold=5",
        "socket_timeout=1",
        "socket_timeout=-1",
        "db=3",
        "sslmode=disable",
        "connect_timeout=1",
        "call_timeout=none",
        "timeout=5",
        "prefix=p",
        "tls=true",
        "bogus=1",
        "x=",
        "=1",
        "",
        "keyword=false",
        "lease_wait_replicas=1",
    ]
)


def _parse_offline(url: str) -> None:
    """Every check a URL meets before any I/O: the scheme, then the backend's
    own parser (no connection is made)."""
    family = scheme_of(url)
    if family == "redis":
        from agent_memory.adapters._common.index_options import split_index_options
        from agent_memory.adapters.redis import _split_lease_options
        from agent_memory.adapters.redis._client import connect

        stripped, _ = split_index_options(url, aliases={"hnsw_ef_runtime": "hnsw_ef_search"})
        stripped, _ = _split_lease_options(stripped)
        connect(stripped)  # builds a client; connects on first use only
    elif family == "postgres":
        from agent_memory.adapters._common.index_options import split_index_options
        from agent_memory.adapters.postgres._database import (
            connect_timeout_of,
            split_call_timeout,
        )

        stripped, _ = split_index_options(url)
        connect_timeout_of(stripped)
        split_call_timeout(stripped)
    elif family == "qdrant":
        from agent_memory.adapters.qdrant.factory import _parse

        _parse(url)
    elif family == "milvus":
        from agent_memory.adapters.milvus.factory import parse_milvus_url

        parse_milvus_url(url)


@settings(max_examples=150, deadline=None)
@given(
    scheme=st.sampled_from(
        [
            *("redis", "REDIS", "Rediss", "redis+cluster", "postgresql", "Postgres"),
            *("qdrant", "QDRANT", "milvus", "Milvus"),
        ]
    ),
    password=st.text(
        alphabet=string.ascii_letters + string.digits + "/?#@:%[]", min_size=0, max_size=6
    ),
    escaped=st.booleans(),
    host=_HOSTS,
    port=st.sampled_from(["", ":6379", ":1", ":65535", ":65536", ":0", ":x", ":"]),
    path=st.sampled_from(["", "/", "/0", "/db", "/%30", "/\u0663"]),
    options=st.lists(_OPTION, max_size=3),
)
def test_every_url_shape_is_accepted_or_refused_typed_without_its_password(
    scheme: str,
    password: str,
    escaped: bool,
    host: str,
    port: str,
    path: str,
    options: list[str],
) -> None:
    secret = f"{_MARK}{password}"
    spelled = quote(secret, safe="") if escaped else secret
    query = ("?" + "&".join(options)) if options else ""
    url = f"{scheme}://agent:{spelled}@{host}{port}{path}{query}"
    assert _MARK not in redact_url(url), redact_url(url)
    try:
        _parse_offline(url)
    except AgentMemoryError as exc:
        assert _MARK not in str(exc), str(exc)  # noqa: PT017
        assert str(exc).strip()  # noqa: PT017
