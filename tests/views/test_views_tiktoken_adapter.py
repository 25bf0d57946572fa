"""The tiktoken `Tokenizer` adapter, tested offline.

tiktoken's named encodings are BPE files fetched over the network on first
use (then cached in TIKTOKEN_CACHE_DIR); tests cannot download them. So this
runs the real tiktoken library on a small BPE file written here, and checks
that a named encoding that cannot be loaded fails with a ConfigurationError.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import pytest

from agent_memory.adapters.tiktoken import TiktokenTokenizer
from agent_memory.domain.errors import ConfigurationError
from agent_memory.domain.views import count_tokens, trim_to_token_budget
from agent_memory.ports.models import Tokenizer


def _bpe_file(tmp_path: Path) -> Path:
    """All 256 single bytes, then merges for "ab", "abab" and " ab"."""
    tokens = [bytes([i]) for i in range(256)] + [b"ab", b"abab", b" ab"]
    path = tmp_path / "tiny.tiktoken"
    lines = [f"{base64.b64encode(tok).decode()} {rank}" for rank, tok in enumerate(tokens)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_counts_exactly_with_a_local_bpe_file(tmp_path: Path) -> None:
    tok = TiktokenTokenizer("tiny", bpe_file=_bpe_file(tmp_path))
    assert isinstance(tok, Tokenizer)
    assert tok.count("") == 0
    assert tok.count("abab") == 1
    assert tok.count("ab ab") == 2  # "ab" + " ab"
    assert tok.count("xyz") == 3
    assert tok.count("é") == 2  # two UTF-8 bytes, no merge
    assert count_tokens("ab ab", tok) == 2
    trim = trim_to_token_budget(["abab", "xyz", "ab"], 2, tokenizer=tok)
    assert trim.kept == ("abab", "ab")


def test_unknown_encoding_is_a_configuration_error() -> None:
    tok = TiktokenTokenizer("no_such_encoding")  # constructing loads nothing
    with pytest.raises(ConfigurationError, match="no_such_encoding"):
        tok.count("hello")


def test_uncached_named_encoding_without_network_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With an empty cache the BPE file must be downloaded; the download is
    refused here (HTTPS goes through a proxy on a closed local port)."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    tok = TiktokenTokenizer("cl100k_base")
    with pytest.raises(ConfigurationError, match="cl100k_base") as info:
        tok.load()
    assert "TIKTOKEN_CACHE_DIR" in str(info.value)


def test_missing_bpe_file_is_a_configuration_error(tmp_path: Path) -> None:
    tok = TiktokenTokenizer("tiny", bpe_file=tmp_path / "absent.tiktoken")
    with pytest.raises(ConfigurationError, match=r"absent\.tiktoken"):
        tok.count("x")


def test_missing_extra_is_a_configuration_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    with pytest.raises(ConfigurationError, match=r"agent-memory\[tiktoken\]"):
        TiktokenTokenizer().count("x")


def test_blank_encoding_name_is_rejected() -> None:
    with pytest.raises(ConfigurationError):
        TiktokenTokenizer(" ")
