"""Fixtures of the cluster tests (the shared ``etcd_server`` is in ``tests/conftest.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from tests.cluster import nodes

if TYPE_CHECKING:
    from collections.abc import Iterator

    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node


@pytest.fixture
def two_nodes(etcd_server: EtcdServer, etcd_prefix: str) -> Iterator[tuple[Node, Node]]:
    """Two real ``leveret serve`` nodes, ``a@test`` and ``b@test``, on the session's etcd."""
    yield from nodes.two_nodes(etcd_server, etcd_prefix)
