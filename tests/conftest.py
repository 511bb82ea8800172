"""Settings every test shares."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest
from hypothesis import settings

from leveret.testing.etcd import EtcdMissing, EtcdServer

if TYPE_CHECKING:
    from collections.abc import Iterator

# No per-example deadline: the suite runs on shared 2-core machines, where a loaded moment
# made examples time out (hypothesis's DeadlineExceeded) though nothing was slow in the code.
# Tests that care about time measure it themselves.
settings.register_profile("leveret", deadline=None)
settings.load_profile("leveret")


@pytest.fixture(scope="session")
def etcd_server() -> Iterator[EtcdServer]:
    """One etcd for the session's cluster tests (Debian's etcd-server; scripts/test
    installs it), on free ports with a temporary data directory. Tests keep apart by
    their own key prefix (``etcd_prefix``)."""
    try:
        server = EtcdServer().start()
    except EtcdMissing as exc:
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def etcd_prefix(request: pytest.FixtureRequest) -> str:
    """A key prefix of this test's own in the shared etcd."""
    return f"/leveret-test/{request.node.name}-{uuid.uuid4().hex[:8]}/"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``scripts/test`` runs ``-n 2 --dist loadgroup``), a module's tests
    run on one worker, in order, so its module-scoped brokers and clusters start once; the
    Spark tests all run on one worker, so one JVM holds one Spark session."""
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        group = "spark" if path.startswith("tests/spark/") else path
        item.add_marker(pytest.mark.xdist_group(group))
