"""vllm-guardian: a per-node sidecar that supervises vLLM inference servers."""

__version__ = "0.1.0"
