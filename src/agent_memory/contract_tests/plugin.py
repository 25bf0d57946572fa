"""Opt-in pytest plugin for suites that run the contract classes:
`pytest -p agent_memory.contract_tests.plugin`, or
`pytest_plugins = ["agent_memory.contract_tests.plugin"]` in a conftest.

Importing `agent_memory.contract_tests` already registers its modules for
assertion rewriting (so diffs are shown); this plugin additionally prints, at
the end of the run, every failed contract test under the clause it exists for
(primary), apart from tests that failed on an incidental check of another
clause (secondary), and every skip reason of a contract test. A failure whose
message names no clause (an exception the adapter raised inside a test, a bare
assert) is reported with the test's clause and rule prefixed:
`[MS-ADD-5] <rule>; raised DuplicateRecord: ...`.
"""

from __future__ import annotations

from typing import Any

import pytest

import agent_memory.contract_tests  # noqa: F401  (registers assertion rewriting)
from agent_memory.contract_tests._support import (
    CLAUSE_IN_TEXT,
    attribute_failure,
    primary_clauses,
)

_KEY = pytest.StashKey[dict[str, tuple[str, ...]]]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    found: dict[str, tuple[str, ...]] = {}
    for item in items:
        fn = getattr(item, "function", None)
        if fn is not None and fn.__module__.startswith("agent_memory.contract_tests."):
            found[item.nodeid] = primary_clauses(fn)
    config.stash[_KEY] = found


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Prefix the crash message of a contract test that failed without naming a
    clause with the test's clause and rule (the summary, junit and the
    conformance report all read that message)."""
    outcome = yield
    report = outcome.get_result()
    fn = getattr(item, "function", None)
    if report.when != "call" or not report.failed or fn is None:
        return
    if not fn.__module__.startswith("agent_memory.contract_tests."):
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if crash is None or not isinstance(message, str):
        return
    attributed = attribute_failure(fn, message)
    if attributed is None:
        return
    crash.message = attributed
    add = getattr(report.longrepr, "addsection", None)
    if add is not None:
        add("contract clause", attributed.split(";", 1)[0])


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    primaries = config.stash.get(_KEY, {})
    primary_lines: list[str] = []
    secondary_lines: list[str] = []
    skip_lines: list[str] = []
    for report in terminalreporter.stats.get("failed", []) + terminalreporter.stats.get(
        "error", []
    ):
        mine = primaries.get(report.nodeid)
        if mine is None:
            continue
        crash = getattr(report.longrepr, "reprcrash", None)
        message = str(getattr(crash, "message", "") or report.longrepr)
        head = message.strip().splitlines()[0][:200] if message.strip() else ""
        named = CLAUSE_IN_TEXT.findall(message)
        cid = named[0] if named else None
        if cid is None or cid in mine:
            primary_lines.append(f"[{cid or (mine[0] if mine else '?')}] {report.nodeid}: {head}")
        else:
            first = mine[0] if mine else "?"
            secondary_lines.append(f"[{first}] {report.nodeid} failed on [{cid}]: {head}")
    for report in terminalreporter.stats.get("skipped", []):
        if report.nodeid in primaries and isinstance(report.longrepr, tuple):
            skip_lines.append(f"{report.nodeid}: {report.longrepr[2]}")
    if primary_lines:
        terminalreporter.section("contract clauses failed (primary)")
        for line in sorted(primary_lines):
            terminalreporter.write_line(line)
    if secondary_lines:
        terminalreporter.section("contract tests failed on another clause (secondary)")
        for line in sorted(secondary_lines):
            terminalreporter.write_line(line)
    if skip_lines:
        terminalreporter.section("contract tests skipped")
        for line in sorted(skip_lines):
            terminalreporter.write_line(line)
