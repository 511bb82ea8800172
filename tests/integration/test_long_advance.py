"""A long advance of the embedded broker's clock with connections open costs a few loop
steps, not one per connection per simulated second.

Each connection's timer sleeps until its shell's next deadline (``server/connection.py``,
``Shell.next_deadline``), so a day with five connections open passes in about a second of
real time (8-15 s when each connection ticked every second), while what the clock drives is
still observed at its own time: the broker's heartbeats every half interval (times the
connection's phase, 0.75 to 1), the drop of a
client silent for two intervals, a queue's message TTL with its dead-lettering.
``ClockedEventLoop.jumps`` counts the idle waits the advances skipped: a handful per
deadline, where one tick per second per connection made it 432,000.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import amqp
import pika
import pytest

from leveret.testing.embedded import EmbeddedBroker

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.leveret_only

HOUR = 3600.0
DAY = 24 * HOUR
# The heartbeat client's interval: 10 hours (0-9-1's field holds up to 18): the broker
# sends a heartbeat every 5 hours and drops the silent client past 20.
HEARTBEAT = 36_000
TTL = 12 * HOUR


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker


def jumps(broker: EmbeddedBroker) -> int:
    import asyncio

    def read() -> int:
        loop = asyncio.get_running_loop()
        return int(getattr(loop, "jumps"))  # noqa: B009 - the ClockedEventLoop's counter

    return broker.call(read)


def frames(client: amqp.Connection) -> tuple[int, bool]:
    """The frames waiting for ``client`` (heartbeats), read until a short real-time pause
    or the end of the socket, and whether the broker closed it."""
    before: int = client.bytes_recv
    while True:
        try:
            client.drain_events(timeout=0.3)
        except TimeoutError:
            return client.bytes_recv - before, False
        except OSError:  # the broker closed the socket (py-amqp: "Server unexpectedly closed")
            return client.bytes_recv - before, True


def test_a_simulated_day_with_connections_open_is_quick_and_keeps_every_deadline(
    broker: EmbeddedBroker,
) -> None:
    vhost = broker.new_vhost("day")
    url = broker.url(vhost)  # heartbeat=0
    quiet = [pika.BlockingConnection(pika.URLParameters(url)) for _ in range(4)]
    beating = amqp.Connection(
        f"{broker.host}:{broker.port}", virtual_host=vhost, heartbeat=HEARTBEAT
    )
    beating.connect()
    try:
        assert beating.heartbeat == HEARTBEAT
        channel = quiet[0].channel()
        channel.queue_declare("expired")
        channel.queue_declare(
            "short",
            arguments={
                "x-message-ttl": int(TTL * 1000),
                "x-dead-letter-exchange": "",
                "x-dead-letter-routing-key": "expired",
            },
        )
        channel.confirm_delivery()
        channel.basic_publish("", "short", b"m")
        steps = jumps(broker)

        broker.advance(TTL - 1)
        assert (broker.queue_length("short", vhost), broker.queue_length("expired", vhost)) == (
            1,
            0,
        )
        broker.advance(2)  # the TTL ends on the way: dead-lettered at once
        assert (broker.queue_length("short", vhost), broker.queue_length("expired", vhost)) == (
            0,
            1,
        )
        broker.advance(20 * HOUR - TTL - 60)
        # Heartbeats every 5 hours times the connection's phase (0.75 to 1,
        # server/heartbeat_phase.py): at 5, 10 and 15 hours, or as soon as every 3.75,
        # five of them; the client is still there.
        heartbeats, closed = frames(beating)
        assert not closed
        assert 3 <= heartbeats <= 5
        assert len(broker.admin("list_connections", vhost=vhost)) == 5

        broker.advance(120)  # the drop at 20 h
        assert len(broker.admin("list_connections", vhost=vhost)) == 4
        broker.advance(DAY - 20 * HOUR - 60)
        # At 20 h the client has also been silent two intervals (since its last frame,
        # read just before the broker's last write): the drop, with or without a heartbeat.
        heartbeats, closed = frames(beating)
        assert closed
        assert heartbeats <= 1
        assert len(broker.admin("list_connections", vhost=vhost)) == 4

        # Counted, not timed (real time is the machine's load): a few steps per deadline
        # (TTL, heartbeats, the drop, the advances' ends), where a tick per connection per
        # second made it hundreds of thousands.
        assert jumps(broker) - steps < 100
        # The quiet connections, without heartbeats, lived through the day.
        method, _, body = channel.basic_get("expired", auto_ack=True)
        assert method is not None
        assert body == b"m"
        for connection in quiet:
            assert connection.is_open
            connection.process_data_events(time_limit=0)
    finally:
        for connection in quiet:
            if connection.is_open:
                connection.close()
        beating.collect()
        broker.delete_vhost(vhost)
