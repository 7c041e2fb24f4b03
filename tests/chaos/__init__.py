"""Chaos tier: faults injected on purpose (Redis killed, full disks, SIGKILLed guardians, pid reuse)."""
