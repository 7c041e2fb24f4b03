"""The fleet tier: the fleet store highly available on real Redis processes of this machine, a
Sentinel set (a master, a replica, three sentinels) and a Cluster (three masters). Each test
starts its own on free ports (``tests/support/redis_ha.py``). Run with ``make fleet``."""
