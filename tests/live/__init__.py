"""Live tier: the real ``guardian run`` against the simulated vLLM, a real kernel and real processes."""
