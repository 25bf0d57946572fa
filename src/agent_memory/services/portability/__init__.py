"""Moving memory between backends and embedding models: the export format,
export/import/verify over ports, and re-embedding (see docs/portability.md)."""
