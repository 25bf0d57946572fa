"""`agent-memory conformance`: the shipped contract suite against a live backend
(given by URL) or a team's own store (`--factory package.module:callable`).

The runner (preflight, the suite, the verdict per port) lives with the suite in
`agent_memory.contract_tests.runner`; a URL's throw-away deployments come from
the composition root (`agent_memory.bootstrap.throwaway`). Exit codes:
`EXIT_CODES`.
"""

from __future__ import annotations

from agent_memory.contract_tests.runner import (
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_NOT_INSTALLED,
    EXIT_PASSED,
    EXIT_PREFLIGHT,
    EXIT_USAGE,
    PreflightError,
    Target,
    port_problems,
)

__all__ = [
    "EXIT_CODES",
    "EXIT_FAILED",
    "EXIT_NOT_INSTALLED",
    "EXIT_PASSED",
    "EXIT_PREFLIGHT",
    "EXIT_USAGE",
    "PreflightError",
    "Target",
    "port_problems",
    "run_conformance",
]


def run_conformance(
    *,
    url: str | None,
    factory: str | None,
    keyword: str | None = None,
    quiet: bool = False,
    keep: bool = False,
) -> int:
    """Preflight, run the suite, print the verdict; returns an `EXIT_*` code."""
    from agent_memory.bootstrap.throwaway import ThrowawayDeployments
    from agent_memory.contract_tests import runner

    return runner.run_conformance(
        url=url,
        factory=factory,
        keyword=keyword,
        quiet=quiet,
        keep=keep,
        deployments=ThrowawayDeployments,
    )
