"""The far-behind hold (``Shell.held``): which connections it stops reading."""

from __future__ import annotations

from leveret.protocol.amqp091._generated import methods as m
from leveret.server.shell.shell import FLOW_SHOWN, HOLD_MAX
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


def test_a_held_connection_shows_as_flow_for_five_seconds_after_the_hold() -> None:
    client = CodecClient.connect()
    client.handshake()
    assert client.shell.state(client.shell.now) == "running"
    client.open_channel(1)
    client.send(1, m.QueueDeclare(queue="q"))
    client.send(1, m.BasicQos(prefetch_count=1))
    client.send(1, m.BasicConsume(queue="q", consumer_tag="c"))
    client.send_raw(b"".join(client.encode_publish(1, "", "q", b"x") for _ in range(5000)))
    shell = client.shell
    held_at = shell.now
    assert shell.held
    assert shell.state(held_at + 60) == "flow"  # held still, however long ago it began
    assert shell.release_hold(held_at + HOLD_MAX)
    assert not shell.held
    assert shell.state(held_at + FLOW_SHOWN - 0.1) == "flow"
    assert shell.state(held_at + FLOW_SHOWN + 0.1) == "running"
