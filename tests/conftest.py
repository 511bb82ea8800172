"""Settings every test shares."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

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


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (``scripts/test`` runs two workers): a module's tests run on one
    worker, in order, so its module-scoped brokers and clusters start once; the Spark tests
    all run on one worker, so one JVM holds one Spark session."""
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):  # type: ignore[misc]  # xdist has no types
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "tests/spark" if path.startswith("tests/spark/") else path

    return ByModule(config, log)
