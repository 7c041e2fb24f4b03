"""Configuration: the typed schema and the strict loader (errors name the key path)."""
