"""An operator's lowered minimum in-sync set (``x-min-in-sync``, or the ``min-in-sync``
policy key): three ``leveret serve`` nodes on one etcd, a quorum queue led by a that asks
for one in-sync member (its leader) and one that keeps the default majority; both
followers killed. The first goes on confirming on a alone once its dead followers left
the in-sync set; the second keeps them there and confirms nothing (docs/cluster.md,
"Lowering the minimum")."""

from __future__ import annotations

import signal
import time
from typing import TYPE_CHECKING

import pika
import pytest

from tests.cluster import nodes
from tests.cluster.test_replicated_queues import (  # noqa: F401 (a fixture)
    NAMES,
    connect,
    publish,
    queue_info,
    record,
    three_nodes,
)

if TYPE_CHECKING:
    from leveret.testing.etcd import EtcdServer
    from tests.cluster.nodes import Node

pytestmark = [pytest.mark.pure_only, pytest.mark.leveret_only]


def test_a_lowered_minimum_confirms_on_the_leader_alone_and_the_default_does_not(
    etcd_server: EtcdServer,
    three_nodes: tuple[str, list[Node]],  # noqa: F811 (the fixture)
) -> None:
    prefix, (a, b, c) = three_nodes
    conn = connect(a)
    ch = conn.channel()
    ch.queue_declare(
        "lowered", durable=True, arguments={"x-queue-type": "quorum", "x-min-in-sync": 1}
    )
    ch.queue_declare("majority", durable=True, arguments={"x-queue-type": "quorum"})
    # A bad minimum is refused as RabbitMQ refuses a bad argument: 406, the channel closes.
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        ch.queue_declare(
            "bad", durable=True, arguments={"x-queue-type": "quorum", "x-min-in-sync": 0}
        )
    assert refused.value.reply_code == 406
    conn.close()

    def online(name: str) -> bool:
        return bool(queue_info(a, name).get("online") == list(NAMES))

    nodes.eventually(lambda: online("lowered") and online("majority"), timeout=10)

    b.broker.stop(signal.SIGKILL)
    c.broker.stop(signal.SIGKILL)
    killed = time.monotonic()

    conn = connect(a)
    ch = conn.channel()
    ch.confirm_delivery()
    confirmed_at = None
    while time.monotonic() - killed < 20:
        if publish(ch, "lowered", b"alone"):
            confirmed_at = time.monotonic() - killed
            break
        time.sleep(0.2)
    assert confirmed_at is not None, "the lowered minimum never confirmed on the leader alone"
    print(f"lowered minimum: first confirm {confirmed_at:.2f} s after both followers died")
    assert record(etcd_server, prefix, "lowered")["in_sync"] == ["a@test"]
    conn.close()
    # The default (a majority of three) keeps its dead followers in the in-sync set: it
    # confirms nothing until one of them is back (its publishes wait).
    assert record(etcd_server, prefix, "majority")["in_sync"] == list(NAMES)
