"""What more than one test module uses, in one place.

- ``wait``: the one poll (``poll`` hands back a value or None, ``wait_for`` fails the test);
- the worlds, each a part of the guardian on fake seams: ``daemon_world`` (the whole pipeline,
  tick by tick), ``remediation_world`` (the remediation machine), ``evidence_world`` (evidence
  capture), ``detector_world`` (one target's views for the detector tables);
- ``guardian_process``: a real ``guardian run`` beside the simulated vLLM (live and chaos tiers);
- ``redis_procs``, ``slow_drip``, ``file_limits``: real redis-servers, a byte-at-a-time server,
  a file-size ceiling (reliability and chaos tiers);
- ``spinning_programs``: real processes spinning like vLLM bugs, for real py-spy dumps;
- ``report_page``, ``k8s_schemas``: the incident page and the Kubernetes schemas tests check against.
"""
