"""pytest plugin (entry point `agent_memory_contract`): rewrite the shipped
contract modules' asserts so installed tests show full diffs."""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite(
    "agent_memory.contract_tests.memory_store",
    "agent_memory.contract_tests.event_log",
    "agent_memory.contract_tests.lease_store",
    "agent_memory.contract_tests.cache",
    "agent_memory.contract_tests.triple_store",
    "agent_memory.contract_tests.state_machine",
    "agent_memory.contract_tests._support",
)
