"""A simulated vLLM server: looks like vLLM from outside, can be told to hang, leak or die.

``api_server`` is the process you start (``python -m guardian.testing.sim_vllm.api_server``);
``engine`` is its spawned ``VLLM::EngineCore`` child. ``guardian.testing.sim_control``
drives both from tests and from ``guardian demo``.
"""
