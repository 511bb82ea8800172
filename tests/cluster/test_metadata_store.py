"""The metadata store (``cluster/metadata.py``) against a real etcd: two nodes' copies in
one process, each with its own model, registry and watch, writing concurrently."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import pytest

from leveret.auth.users import UserStore
from leveret.cluster.apply import Applier
from leveret.cluster.etcd import EtcdClient
from leveret.cluster.keys import Layout
from leveret.cluster.membership import Membership
from leveret.cluster.metadata import MetadataStore
from leveret.errors import NotFound, PreconditionFailed
from leveret.model.broker import Broker
from leveret.server.parameters import Runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    from leveret.testing.etcd import EtcdServer

pytestmark = pytest.mark.pure_only


def make_node(url: str, prefix: str, name: str) -> MetadataStore:
    broker = Broker(consumer_timeout=None)
    applier = Applier(Layout(prefix), name, broker, UserStore(), Runtime(broker))
    applier.prepare = lambda vhost: setattr(vhost, "auto_delete_exchanges", False)
    for vhost in broker.vhosts.values():  # as a node prepares what it recovered
        applier.prepare(vhost)
    return MetadataStore(EtcdClient([url]), applier)


@asynccontextmanager
async def cluster(server: EtcdServer, prefix: str) -> AsyncIterator[tuple[MetadataStore, ...]]:
    nodes = (make_node(server.url, prefix, "a"), make_node(server.url, prefix, "b"))
    for node in nodes:
        await node.load()
        node.start_watch()
    try:
        yield nodes
    finally:
        for node in nodes:
            await node.stop()
            await node.client.close()


async def eventually(check: Callable[[], bool]) -> None:
    """Until ``check()`` holds (what another node's watch brings), at most 5 s."""
    async with asyncio.timeout(5.0):
        while not check():  # noqa: ASYNC110 - polling another node's copy, bounded
            await asyncio.sleep(0.02)


async def seed(a: MetadataStore) -> None:
    await a.change_auth(lambda users: users.add_vhost("/"))
    await a.change_auth(lambda users: users.put_user("admin", b"", tags=("administrator",)))


def test_auth_and_runtime_changes_reach_the_other_node(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    async def scenario() -> None:
        async with cluster(etcd_server, etcd_prefix) as (a, b):
            await seed(a)
            await a.change_auth(lambda users: users.add_vhost("v1"))
            await a.change_auth(lambda users: users.set_permissions("admin", "v1", ".*", ".*", ""))
            await eventually(lambda: ("admin", "v1") in b.applier.users.permissions)
            assert "v1" in b.applier.broker.vhosts
            await b.change_runtime(
                lambda r: r.set_policy("v1", "ttl", "^t", {"message-ttl": 1000}, 0, "queues")
            )
            await eventually(lambda: "ttl" in a.applier.broker.vhosts["v1"].policies)
            # The errors are the single node's.
            with pytest.raises(Exception, match="does not exist"):
                await a.change_auth(lambda users: users.set_permissions("nobody", "v1", "", "", ""))
            await b.change_auth(lambda users: users.delete_vhost("v1"))
            await eventually(lambda: "v1" not in a.applier.broker.vhosts)
            assert not any(
                k.startswith(a.layout.under("runtime", "policies", "v1")) for k in a.applier.entries
            )

    asyncio.run(scenario())


def test_concurrent_declares_agree_on_one_outcome(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    async def scenario() -> None:
        async with cluster(etcd_server, etcd_prefix) as (a, b):
            await seed(a)
            await eventually(lambda: "/" in b.applier.users.vhosts)
            # Equivalent declarations from both nodes at once: one makes it, both succeed.
            results = await asyncio.gather(
                a.declare_queue("/", "q1", arguments={"x-max-length": 10}),
                b.declare_queue("/", "q1", arguments={"x-max-length": 10}),
            )
            assert sorted(created for _record, created in results) == [False, True]
            leaders = {record.leader for record, _created in results}
            assert len(leaders) == 1
            # Inequivalent ones: one makes it, the other gets the redeclaration's 406.
            outcomes = await asyncio.gather(
                a.declare_queue("/", "q2", arguments={"x-max-length": 1}),
                b.declare_queue("/", "q2", arguments={"x-max-length": 2}),
                return_exceptions=True,
            )
            errors = [o for o in outcomes if isinstance(o, BaseException)]
            assert len(errors) == 1
            assert isinstance(errors[0], PreconditionFailed)
            assert "inequivalent arg 'x-max-length'" in errors[0].reply_text
            # The leader holds it in its model; the other node has its record.
            await eventually(lambda: ("/", "q2") in b.applier.view.queues)
            (record,) = [o for o in outcomes if not isinstance(o, BaseException)]
            leader, other = (a, b) if record[0].leader == "a" else (b, a)
            assert "q2" in leader.applier.broker.vhosts["/"].queues
            assert "q2" not in other.applier.broker.vhosts["/"].queues

    asyncio.run(scenario())


def test_exchanges_bindings_and_deletion_cascade(etcd_server: EtcdServer, etcd_prefix: str) -> None:
    async def scenario() -> None:
        async with cluster(etcd_server, etcd_prefix) as (a, b):
            await seed(a)
            await a.declare_exchange("/", "x", "topic")
            await a.declare_exchange("/", "ad", "fanout", auto_delete=True)
            await a.declare_queue("/", "q")
            await a.bind("/", "x", "queue", "q", "k.*")
            await a.bind("/", "ad", "queue", "q", "")
            with pytest.raises(NotFound):
                await a.bind("/", "missing", "queue", "q", "")
            with pytest.raises(PreconditionFailed):
                await b.declare_exchange("/", "x", "direct")
            await eventually(lambda: "x" in b.applier.broker.vhosts["/"].exchanges)
            x = a.applier.broker.vhosts["/"].exchanges["x"]
            assert [key for _d, key, _a in x.kind.bindings()] == ["k.*"]
            # Deleting the queue takes its bindings, and the auto-delete exchange left
            # without any binding.
            await b.delete_queue("/", "q")
            await eventually(lambda: "ad" not in a.applier.broker.vhosts["/"].exchanges)
            assert "q" not in a.applier.broker.vhosts["/"].queues
            assert len(x.kind) == 0
            assert not any(
                k.startswith(a.layout.under("entities", "bindings")) for k in a.applier.entries
            )

    asyncio.run(scenario())


def test_a_retiring_queue_takes_the_auto_delete_exchanges_it_leaves_bare_up_the_chain(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    """x2 -> x1 -> q and x3 -> {x1, keep}, every exchange auto-delete: when q retires on
    its leader, x1 has no binding left and goes, then x2 (its one binding was to x1);
    x3 keeps its binding to keep and stays (RabbitMQ's cascade)."""

    async def scenario() -> None:
        async with cluster(etcd_server, etcd_prefix) as (a, b):
            a.membership = Membership(a.client, a.layout, "a", ttl=2)
            await a.membership.start()
            try:
                await seed(a)
                for name in ("x1", "x2", "x3"):
                    await a.declare_exchange("/", name, "fanout", auto_delete=True)
                for name in ("q", "keep"):
                    await a.declare_queue("/", name)
                await a.bind("/", "x1", "queue", "q", "")
                await a.bind("/", "x2", "exchange", "x1", "")
                await a.bind("/", "x3", "exchange", "x1", "")
                await a.bind("/", "x3", "queue", "keep", "")
                exchanges = b.applier.broker.vhosts["/"].exchanges
                await eventually(lambda: {"x1", "x2", "x3"} <= set(exchanges))
                # What the leader's model tells it when q retires (x-expires, auto-delete,
                # its exclusive connection gone).
                assert await a.queue_removed("/", "q")
                await eventually(lambda: not {"x1", "x2"} & set(exchanges))
                assert "x3" in exchanges
                left = [
                    (v.value["source"], v.value["destination"])
                    for k, v in b.applier.entries.items()
                    if k.startswith(b.layout.under("entities", "bindings"))
                ]
                assert left == [("x3", "keep")]
                assert ("/", "q") not in b.applier.view.queues
            finally:
                await a.membership.stop()

    asyncio.run(scenario())


def test_a_copy_that_falls_behind_compaction_reads_everything_again(
    etcd_server: EtcdServer, etcd_prefix: str
) -> None:
    async def scenario() -> None:
        async with cluster(etcd_server, etcd_prefix) as (a, b):
            await seed(a)
            await b.stop()  # b stops watching: it falls behind
            await a.declare_exchange("/", "later", "direct")
            last = await a.client.put(a.layout.key("scratch"), b"x")
            await a.client.compact(last)
            b.start_watch()
            await eventually(lambda: "later" in b.applier.broker.vhosts["/"].exchanges)

    asyncio.run(scenario())
