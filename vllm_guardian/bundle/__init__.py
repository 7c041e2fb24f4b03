"""Evidence bundles: py-spy, redaction, the evidence writer, summaries, retention."""
