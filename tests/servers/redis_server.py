"""Session-scoped real redis server fixture (filled in by the redis adapter work)."""
