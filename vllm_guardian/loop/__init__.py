"""The assembler (builds every part once), the daemon (one tick) and the run loop."""
