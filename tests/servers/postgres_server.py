"""Session-scoped real postgres server fixture (filled in by the postgres adapter work)."""
