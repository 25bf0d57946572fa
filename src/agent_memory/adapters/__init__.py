"""Adapters: one sub-package per backend or provider. They never import one another."""
