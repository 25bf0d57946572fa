"""`python -m agent_memory.entrypoints.cli`."""

import sys

from agent_memory.entrypoints.cli import main

sys.exit(main())
