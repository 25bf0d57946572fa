"""Composition root: configuration -> wired stores and services."""
