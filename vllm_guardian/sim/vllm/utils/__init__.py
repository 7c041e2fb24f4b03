"""Modules laid out where vLLM keeps theirs, so that a stack dump of the simulator names the same
files as one of vLLM (the catalog matches frames by path suffix)."""
