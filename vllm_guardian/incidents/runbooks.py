"""Where the runbook of an incident kind is: ``docs/runbooks/<kind>.md`` of the project (pure).

The alert event carries it as ``runbook``, ``guardian incidents show`` and ``report.html`` print
it, and the Prometheus rules link it as ``runbook_url``. A test reads the kinds from ``Kind`` and
fails for a kind without its page.
"""

from __future__ import annotations

from vllm_guardian import PROJECT_URL

RUNBOOKS_PATH = "docs/runbooks"  # in the repository; installed as share/doc/vllm-guardian/runbooks
RUNBOOKS_URL = f"{PROJECT_URL}/blob/main/{RUNBOOKS_PATH}"


def runbook_url(kind: str) -> str:
    """The runbook page of an incident kind (``busy_loop`` → ``…/docs/runbooks/busy_loop.md``)."""
    return f"{RUNBOOKS_URL}/{kind}.md"
