"""Reliability tier: one module per fault found in review; each module's docstring names its fault number."""
