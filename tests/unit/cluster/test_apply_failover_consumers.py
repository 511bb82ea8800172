"""Where consumers go when a replicated queue's leader changes (``cluster/apply.py``),
without sockets: a node that led the queue and learns another was elected hands its own
clients' consumers to the proxy of the new leader, never a peer's consumer (made through
the inter-node link: the peer's proxy follows the record itself, and moved into this
node's proxy it would be fed the new leader's messages a second way round); a node whose
proxy follows the queue to a new leader cancels its consumers at the old one."""

from __future__ import annotations

from typing import Any

from leveret.auth.users import UserStore
from leveret.cluster.apply import Applier, QueueRecord
from leveret.cluster.etcd import KeyValue
from leveret.cluster.keys import Layout
from leveret.cluster.metadata import queue_value
from leveret.model.broker import Broker
from leveret.model.consumer import CallbackOwner, Consumer
from leveret.model.queues.args import PLAIN
from leveret.model.queues.remote import LinkLeader, RemoteQueue
from leveret.server.amqp091.session import Session
from leveret.server.parameters import Runtime
from leveret.testing import RecordingSink

LAYOUT = Layout("/t/")
ARGS: dict[str, object] = {"x-queue-type": "quorum"}


class _Leader(LinkLeader):
    """A proxy's leader (the link's peer), recording what the proxies ask of it. Its
    attributes are set in ``__init__``, not as class defaults: in the compiled build a
    class default here would shadow ``LinkLeader``'s native attribute, which the proxy
    reads."""

    def __init__(self, node: str) -> None:
        self.node = node
        self.up = True
        self.consumed: list[str] = []
        self.cancelled: list[str] = []
        self.resumed = 0

    def consume(self, queue: RemoteQueue, consumer: Consumer) -> None:
        self.consumed.append(consumer.tag)

    def cancel(self, queue: RemoteQueue, consumer: Consumer) -> None:
        self.cancelled.append(consumer.tag)

    def credit(self, queue: RemoteQueue, consumer: Consumer) -> None:
        return None

    def resume(self) -> None:
        """Consumers were handed to its proxies: it consumes for them at the leader."""
        self.resumed += 1

    def dropped(self, queue: RemoteQueue) -> None:
        for consumer in list(queue.consumers):
            self.cancel(queue, consumer)


class Node:
    def __init__(self, name: str) -> None:
        self.broker = Broker(consumer_timeout=None)
        self.applier = Applier(LAYOUT, name, self.broker, UserStore(), Runtime(self.broker))
        self.leaders: dict[str, _Leader] = {}
        self.applier.make_remote = self._make_remote
        self.revision = 1

    def _make_remote(self, vhost: Any, record: QueueRecord) -> RemoteQueue:
        leader = self.leaders.setdefault(record.leader, _Leader(record.leader))
        return RemoteQueue(
            leader,
            vhost,
            record.name,
            durable=True,
            auto_delete=False,
            exclusive=False,
            arguments=ARGS,
            config=PLAIN,
        )

    def record(self, leader: str, epoch: int) -> None:
        record = QueueRecord(
            "/", "q", True, False, False, ARGS, leader,
            members=("a", "b", "c"), epoch=epoch, in_sync=("a", "b", "c"),
        )  # fmt: skip
        self.revision += 1
        kv = KeyValue(LAYOUT.queue("/", "q"), queue_value(record), 2, self.revision, 1, 0)
        self.applier.apply_events([(False, kv)], self.revision)

    @property
    def queue(self) -> Any:
        vhost = self.broker.vhosts["/"]
        return vhost.queues.get("q") or vhost.remote_queues["q"]


def test_a_deposed_leader_moves_its_clients_consumers_and_leaves_the_peers() -> None:
    node = Node("a")
    node.record("a", 1)
    local = node.queue
    assert not local.forwards
    session = Session(node.broker.vhosts["/"], object(), RecordingSink())
    session.consume("q", "client", no_ack=False, exclusive=False, arguments={})
    peer = local.consumer("link:b:1", CallbackOwner(lambda _c, _e: None), auto_settle=False)
    local.add_consumer(peer)

    node.record("b", 2)  # b was elected while a could not tell

    proxy = node.queue
    assert proxy.forwards
    assert [c.tag for c in proxy.consumers] == ["client"]
    assert node.leaders["b"].resumed == 1


def test_a_proxy_following_a_new_leader_cancels_its_consumers_at_the_old_one() -> None:
    node = Node("c")
    node.record("a", 1)
    session = Session(node.broker.vhosts["/"], object(), RecordingSink())
    session.consume("q", "client", no_ack=False, exclusive=False, arguments={})
    assert node.leaders["a"].consumed == ["client"]

    node.record("b", 2)

    assert node.leaders["a"].cancelled == ["client"]
    assert node.leaders["b"].resumed == 1
    assert [c.tag for c in node.queue.consumers] == ["client"]
