"""The conformance suite every storage backend must pass, shipped in the wheel
(it needs the `conformance` extra: pip install 'agent-memory[conformance]').

Subclass one contract class per port and override its fixture::

    class TestAcmeStore(MemoryStoreContract):
        capabilities = Capabilities(atomic_batches=False)

        @pytest_asyncio.fixture  # or @pytest.fixture under asyncio_mode = "auto"
        async def store(self):
            ...  # yield an EMPTY store; clean up after yield

The contract tests mark themselves `pytest.mark.asyncio`, so they run under
pytest-asyncio's strict mode and its auto mode. Importing this package
registers its modules for pytest's assertion rewriting (full diffs on
failure); the opt-in plugin `-p agent_memory.contract_tests.plugin` adds a
clause summary at the end of the run and shows an exception the adapter raised
inside a test under that test's clause and rule. `agent-memory conformance`
runs the same classes from the command line.

Hypothesis strategies for your own tests:
`agent_memory.contract_tests.strategies` (adversarial scopes and ids, texts,
vectors, records), `.event_strategies` (events, lease payloads, cache keys) and
`.view_strategies` (events, facts, signals, knowledge, budgets for views).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from agent_memory.ports.capabilities import Capabilities, ConformanceFactory

if TYPE_CHECKING:
    from agent_memory.contract_tests.audit_log import AuditLogContract, AuditNeighbours
    from agent_memory.contract_tests.cache import CacheContract
    from agent_memory.contract_tests.event_log import EventLogContract
    from agent_memory.contract_tests.lease_store import LeaseStoreContract
    from agent_memory.contract_tests.memory_store import MemoryStoreContract
    from agent_memory.contract_tests.triple_store import TripleStoreContract

__all__ = [
    "AuditLogContract",
    "AuditNeighbours",
    "CacheContract",
    "Capabilities",
    "ConformanceFactory",
    "EventLogContract",
    "LeaseStoreContract",
    "MemoryStoreContract",
    "TripleStoreContract",
]

_CLASSES = {
    "AuditLogContract": "audit_log",
    "AuditNeighbours": "audit_log",
    "CacheContract": "cache",
    "EventLogContract": "event_log",
    "LeaseStoreContract": "lease_store",
    "MemoryStoreContract": "memory_store",
    "TripleStoreContract": "triple_store",
}

#: The modules whose asserts pytest rewrites (full diffs in failures).
REWRITTEN = (
    "_support",
    "audit_log",
    "cache",
    "event_log",
    "lease_store",
    "memory_store",
    "state_machine",
    "triple_store",
    "strategies",
    "event_strategies",
    "view_strategies",
)


def require_extra() -> None:
    """ImportError with the install line when the `conformance` extra is missing."""
    missing = [m for m in ("pytest", "pytest_asyncio", "hypothesis") if not _importable(m)]
    if missing:
        raise ImportError(
            f"agent_memory.contract_tests needs {', '.join(missing)}: "
            "pip install 'agent-memory[conformance]'"
        )


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ValueError, ImportError):  # sys.modules[name] is None; a finder refused it
        return False


def register_rewrite() -> None:
    """Ask pytest to rewrite the contract modules' asserts when pytest is
    running (already imported); a no-op otherwise, so that importing this
    package for `Capabilities` loads no test library. Called before any of
    the contract modules is imported."""
    pytest = sys.modules.get("pytest")
    if pytest is None:
        return

    names = [f"{__name__}.{m}" for m in REWRITTEN if f"{__name__}.{m}" not in sys.modules]
    if names:
        pytest.register_assert_rewrite(*names)


register_rewrite()


def __getattr__(name: str) -> Any:
    module = _CLASSES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require_extra()
    register_rewrite()
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
