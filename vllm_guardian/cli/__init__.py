"""The command line: ``guardian`` / ``vllm-guardian``.

``main`` (the entry point: argv in, one exit code out), ``parser`` (every subcommand and its
options), ``help`` (their descriptions and examples), ``common`` (the config, the logging, the
one-line failures they share), and one module per command group: ``daemon`` (run, probe,
check-config, demo), ``status``, ``incidents`` (incidents, snapshot), ``control`` (drain, restart,
undrain, maintenance), ``alerts``.

It sits above every wing: it assembles the daemon (``loop.runtime``), talks to a running one
(``surface``) and runs the demo (``sim``)."""
