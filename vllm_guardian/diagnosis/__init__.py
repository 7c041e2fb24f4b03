"""Diagnosis: what an incident most likely *is* and what to do about it.

- ``signature`` / ``catalog_load``: the known-bug catalog (YAML shipped in
  ``catalog/``, more from config ``diagnosis.catalogs``), validated on load;
- ``matcher``: pure matching of an ``Observation`` (incident kind, py-spy
  threads, log lines, metric windows, vLLM version, device utilisation, a
  parsed crash) against the catalog → ranked ``Match`` objects;
- ``traceback_parse`` / ``log_tail`` / ``forensics``: crash forensics for
  ``engine_dead`` (the last Python traceback in the target's log);
- ``node_view``: every accelerator of the node with its owning targets;
- ``report_html`` / ``svg``: the self-contained incident page.
"""
