"""A simulated vLLM server and the demo that runs the guardian against it.

Shipped with the product (``guardian demo``), used by the live tests and the benchmark; kept
apart from ``vllm_guardian.testing`` (the fakes of the fast test tiers), which production code never
imports.

- ``vllm/``: the server (``python -m vllm_guardian.sim.vllm.api_server``): an API server process with
  a ``VLLM::EngineCore`` child, vLLM's endpoints and metrics, faults switched on by request;
- ``control.py``: ``SimServer`` (start, wait ready, inject faults, stop) and ``LoadGenerator``;
- ``demo.py``: ``guardian demo``.
"""
