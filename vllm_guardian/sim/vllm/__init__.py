"""A simulated vLLM server: looks like vLLM from outside, can be told to hang, leak or die.

``api_server`` is the process you start (``python -m vllm_guardian.sim.vllm.api_server``);
``engine`` is its spawned ``VLLM::EngineCore`` child. ``vllm_guardian.sim.control``
drives both from tests and from ``guardian demo``.
"""
