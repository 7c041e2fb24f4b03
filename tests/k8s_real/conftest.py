"""The real-API-server tier: one kube-apiserver + etcd for the whole session (tests/support/real_kube.py).

The binaries are built once and cached outside the clone (tools/kube_apiserver.sh); a machine
that cannot build them fails this tier with the build's own message (nothing is skipped).
"""

from __future__ import annotations

import pytest

from tests.support.real_kube import RealKube, build


@pytest.fixture(scope="session")
def kube(tmp_path_factory):
    server = RealKube.start(build(), tmp_path_factory.mktemp("kube"))
    yield server
    server.stop()
