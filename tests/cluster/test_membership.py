"""A node's membership (``cluster/membership.py``) against a real etcd: its record lives
under its lease, one running node per name, a lost lease is told to the node (the event
the replication work acts on) and the node registers again under a new lease."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

import pytest

from leveret.cluster.etcd import EtcdClient
from leveret.cluster.keys import Layout, decode
from leveret.cluster.membership import Membership, NameInUse

if TYPE_CHECKING:
    from leveret.testing.etcd import EtcdServer

pytestmark = pytest.mark.pure_only


def test_record_lease_loss_and_renewal(etcd_server: EtcdServer, etcd_prefix: str) -> None:
    layout = Layout(etcd_prefix)

    async def scenario() -> None:
        client = EtcdClient([etcd_server.url])
        node = Membership(client, layout, "n1", ttl=2, record={"listeners": ["amqp://h:1"]})
        lost = asyncio.Event()
        renewed = asyncio.Event()
        extended: list[float] = []
        at_loss: list[float] = []
        node.on_lost.append(lambda: at_loss.append(node.valid_until))
        node.on_lost.append(lost.set)
        node.on_renewed.append(renewed.set)
        node.on_extended.append(extended.append)
        try:
            await node.start()
            assert node.held
            assert node.epoch == 1
            # Each answered keepalive moves the instant the lease is held until for sure:
            # never past a TTL from now (etcd counts from its receipt, later).
            sent = time.monotonic()
            for _ in range(50):
                if extended:
                    break
                await asyncio.sleep(0.1)
            assert extended
            assert sent < extended[-1] == node.valid_until <= time.monotonic() + 2
            found = await client.get(layout.node("n1"))
            assert decode(found.kvs[0].value)["listeners"] == ["amqp://h:1"]
            assert found.kvs[0].lease == node.lease
            assert (await client.get(layout.member("n1"))).kvs
            # A second process with the same name is refused while the first runs.
            twin = Membership(EtcdClient([etcd_server.url]), layout, "n1", ttl=2)
            with pytest.raises(NameInUse):
                await twin.start()
            await twin.client.close()
            # etcd drops the lease (as when the node was paused past its TTL): the node is
            # told, then holds a new lease and its record again.
            first = node.lease
            await client.revoke(first)
            await asyncio.wait_for(lost.wait(), 5)
            assert at_loss == [0.0]  # not held from the moment the loss is known
            await asyncio.wait_for(renewed.wait(), 5)
            assert node.held
            assert node.epoch == 2
            assert node.lease != first
            assert (await client.get(layout.node("n1"))).kvs[0].lease == node.lease
            # A clean stop revokes the lease: the record goes at once.
            await node.stop()
            assert not (await client.get(layout.node("n1"))).kvs
        finally:
            await node.stop()
            await client.close()

    asyncio.run(scenario())


def test_unreachable_etcd_means_the_lease_is_given_up_in_time(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    """With etcd gone, the node gives its lease up no later than etcd would expire it."""

    async def scenario() -> None:
        client = EtcdClient([etcd_server.url], timeout=0.5)
        node = Membership(client, Layout(etcd_prefix), "n2", ttl=2)
        lost = asyncio.Event()
        node.on_lost.append(lost.set)
        try:
            await node.start()
            client.endpoints = ["http://127.0.0.1:1"]  # as if etcd became unreachable
            loop = asyncio.get_running_loop()
            started = loop.time()
            await asyncio.wait_for(lost.wait(), 6)
            assert loop.time() - started <= 4.0  # TTL, one keepalive period, slack
            assert not node.held
        finally:
            client.endpoints = [etcd_server.url]
            await node.stop()
            await client.close()

    asyncio.run(scenario())
