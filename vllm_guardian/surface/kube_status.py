"""The status's ``kubernetes`` section: what the Kubernetes publisher failed to send (a type).

It lives apart from the publisher (``kube_publisher.py``), which reads the status snapshot, so
the snapshot can name its section without importing the publisher.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class KubernetesStatus:
    """The status's ``kubernetes`` section (and its failure counter metric)."""

    failures: Mapping[str, int]  # failed API calls by what was sent (GateWant, EventWant, NodeWant, TaintWant)
    queue_full: int
    node_tainted: bool | None  # None: no taint decided yet
