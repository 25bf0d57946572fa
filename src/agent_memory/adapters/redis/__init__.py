"""redis adapter."""
