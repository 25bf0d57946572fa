"""postgres adapter."""
