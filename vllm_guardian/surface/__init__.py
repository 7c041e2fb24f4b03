"""What people and programs see: the CLI, the control socket, the HTTP listener, the exporter,
the status snapshot and view, sd_notify and the instance lock."""
