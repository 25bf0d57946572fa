"""The conformance suite every storage backend must pass, shipped in the wheel.

Subclass one contract class per port and override its fixture::

    class TestAcmeStore(MemoryStoreContract):
        capabilities = Capabilities(atomic_batches=False)

        @pytest.fixture
        async def store(self):
            ...  # yield an EMPTY store; clean up after yield

Hypothesis strategies for your own tests:
`agent_memory.contract_tests.strategies` (adversarial scopes and ids, texts,
vectors, records), `.event_strategies` (events, lease payloads, cache keys) and
`.view_strategies` (events, facts, signals, knowledge, budgets for views).
"""

from agent_memory.contract_tests.cache import CacheContract
from agent_memory.contract_tests.capabilities import Capabilities
from agent_memory.contract_tests.event_log import EventLogContract
from agent_memory.contract_tests.lease_store import LeaseStoreContract
from agent_memory.contract_tests.memory_store import MemoryStoreContract
from agent_memory.contract_tests.triple_store import TripleStoreContract

__all__ = [
    "CacheContract",
    "Capabilities",
    "EventLogContract",
    "LeaseStoreContract",
    "MemoryStoreContract",
    "TripleStoreContract",
]
