"""Discovery: which processes are vLLM servers, platform matching, the targets stage and the
worker thread that runs a pass off the loop."""
