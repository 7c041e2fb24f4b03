"""The chaos tier: real processes, real Redis, real mounts, real signals. Some scenarios need
root (mounting a small tmpfs, forcing a pid to be reused through ns_last_pid); they skip with
that reason otherwise. Run with ``make chaos``."""
