"""Example budgets the suite shares, each stated once."""

#: `MemoryStoreContract.state_machine_examples` for every backend but the
#: in-memory one (and the cap of the SQLite file-soundness machine): the README
#: command's profile runs 100 examples (dev: 30); a machine on a real backend
#: runs at most 50 of them, which keeps the suite within its 15 minutes. Every
#: CI run draws new examples.
STATE_MACHINE_EXAMPLES = 50
