"""vllm-guardian: a per-node sidecar that supervises vLLM inference servers."""

__version__ = "0.1.0"
# The project's home (pyproject's Homepage): the runbook links of alerts and incidents start here.
PROJECT_URL = "https://github.com/vllm-guardian/vllm-guardian"
