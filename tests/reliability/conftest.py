"""Fault tests reuse the unit tier's worlds and this folder's helpers (slow_drip, redis_procs)."""

import os
import sys

HERE = os.path.dirname(__file__)
for folder in (HERE, os.path.join(HERE, "..", "unit"), os.path.join(HERE, "..", "component")):
    if os.path.abspath(folder) not in map(os.path.abspath, sys.path):
        sys.path.insert(0, os.path.abspath(folder))
