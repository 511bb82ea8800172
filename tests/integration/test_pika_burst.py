"""Scenario h's shape through pika (issue 26): many publishers, one message each at a time,
one consumer with a prefetch window that acks each delivery on its own.

Every message arrives once, each publisher's in the order it published them: the window
refills from each single ack (``Session.ack``'s path for one delivery).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.integration.pika_support import Opened, connect, pump

if TYPE_CHECKING:
    from tests.integration.conftest import Broker

pytestmark = pytest.mark.interop

PUBLISHERS = 40
ROUNDS = 10
PREFETCH = 7  # far fewer than a round's messages: the window refills from single acks


def test_many_publishers_one_acking_consumer(broker: Broker, name: str) -> None:
    with Opened(connect(broker)) as consumer_conn:
        ch = consumer_conn.channel()
        ch.queue_declare(queue=name, auto_delete=True)
        ch.basic_qos(prefetch_count=PREFETCH)
        got: list[tuple[int, int]] = []

        def on_message(channel: Any, method: Any, _props: Any, body: bytes) -> None:
            publisher, seq = map(int, body.split(b":"))
            got.append((publisher, seq))
            # Acked one by one, as the Go tool's client does.
            channel.basic_ack(delivery_tag=method.delivery_tag)

        ch.basic_consume(queue=name, on_message_callback=on_message)
        publishers = [connect(broker) for _ in range(PUBLISHERS)]
        try:
            channels = [p.channel() for p in publishers]
            for seq in range(ROUNDS):
                # One message on each publisher's socket, back to back: the broker finds
                # them readable together.
                for i, pch in enumerate(channels):
                    pch.basic_publish(exchange="", routing_key=name, body=b"%d:%d" % (i, seq))
            total = PUBLISHERS * ROUNDS
            assert pump(consumer_conn, lambda: len(got) >= total, timeout=20.0), len(got)
        finally:
            for p in publishers:
                if p.is_open:
                    p.close()
        assert len(got) == total
        for i in range(PUBLISHERS):
            assert [seq for publisher, seq in got if publisher == i] == list(range(ROUNDS))
        # Nothing more comes (no message twice).
        pump(consumer_conn, lambda: False, timeout=0.3)
        assert len(got) == total
