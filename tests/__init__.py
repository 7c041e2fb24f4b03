"""The test tiers (unit, component, live, reliability, chaos, fuzz, e2e) and their shared support.

Every folder is a package, so pytest imports each test module by its dotted path from the
repository root (``tests.unit.test_config``): no ``sys.path`` edits, and two folders may hold
modules of the same name. What more than one module uses lives in ``tests/support``.
"""
