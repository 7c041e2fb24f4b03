"""Shipped fakes and the simulated vLLM server, for tests and ``guardian demo``.

Production code never imports this package (checked by a layering test), except
the CLI's ``demo`` command, which exists to run the simulated server.
"""
