"""Fuzz tier: the parsers against generated hostile input."""
