"""The command line: ``guardian`` / ``vllm-guardian`` (``main``) and its help texts (``help``).

It sits above every wing: it assembles the daemon (``loop.runtime``), talks to a running one
(``surface``) and runs the demo (``sim``)."""
