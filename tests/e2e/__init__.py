"""End-to-end tier: a real vLLM server (``make e2e-vllm``) against the real guardian."""
