"""Remediation: the restart sequence, its policy and lease, and how a server is launched again."""
