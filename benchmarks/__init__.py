"""The detection benchmark against a real vLLM: ``python -m benchmarks.run`` (``make bench``)."""
