"""openai adapter."""
