"""The conformance suite every storage backend must pass, shipped in the wheel.

Subclass one contract class per port and override its fixture::

    class TestAcmeStore(MemoryStoreContract):
        capabilities = Capabilities(atomic_batches=False)

        @pytest.fixture
        async def store(self):
            ...  # yield an EMPTY store; clean up after yield
"""
