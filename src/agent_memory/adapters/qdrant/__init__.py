"""qdrant adapter."""
