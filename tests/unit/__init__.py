"""Unit tier: pure parsers, detectors and state machines on fake seams."""
