"""The far-behind hold (``Shell.held``): which connections it stops reading."""

from __future__ import annotations

from leveret.protocol.amqp091._generated import methods as m
from leveret.testing import CodecClient


def _held_after_flooding(reads_when_blocked: bool) -> bool:
    client = CodecClient.connect()
    client.handshake()
    client.open_channel(1)
    # As the cluster link's front end says of itself (it carries every queue's acks).
    client.shell._reads_when_blocked = reads_when_blocked
    client.send(1, m.QueueDeclare(queue="q"))
    client.send(1, m.BasicQos(prefetch_count=1))
    client.send(1, m.BasicConsume(queue="q", consumer_tag="c"))
    flood = b"".join(client.encode_publish(1, "", "q", b"x") for _ in range(5000))
    client.send_raw(flood)
    return client.shell.held


def test_a_connection_feeding_a_queue_far_behind_is_held() -> None:
    assert _held_after_flooding(reads_when_blocked=False)


def test_a_front_end_that_reads_when_blocked_is_never_held() -> None:
    assert not _held_after_flooding(reads_when_blocked=True)
