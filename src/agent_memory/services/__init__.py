"""Use cases: domain rules driven through ports, fail-open."""
