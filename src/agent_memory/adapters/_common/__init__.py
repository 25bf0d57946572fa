"""Helpers shared by adapters (not an adapter itself): lifecycle guard, clock,
argument checks."""
