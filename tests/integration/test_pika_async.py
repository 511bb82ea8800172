"""Interop: pika's asynchronous adapters (SelectConnection, AsyncioConnection) against a broker.

The flow is pika's "asynchronous consumer example" (declare exchange → queue → bind → qos →
consume → ack) with a confirming publisher on a second channel, simplified; every run is bounded
by an ``ioloop.call_later`` timeout that stops the loop.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

import pika
import pytest
from pika.adapters.asyncio_connection import AsyncioConnection
from pika.adapters.select_connection import SelectConnection

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.integration.conftest import Broker

pytestmark = pytest.mark.interop

RUN_TIMEOUT = 15.0
MESSAGE_COUNT = 10


class ExampleClient:
    """pika's async consumer example plus a confirming publisher, as one callback chain."""

    def __init__(self, name: str) -> None:
        self.exchange = f"{name}.ex"
        self.queue = f"{name}.q"
        self.routing_key = "example.text"
        self.connection: Any = None
        self.consumer: Any = None
        self.publisher: Any = None
        self.consumer_tag: str | None = None
        self.received: list[tuple[bytes, str | None, dict[str, Any] | None]] = []
        self.acked_tags: list[int] = []
        self.events: list[str] = []
        self.errors: list[str] = []
        self.timed_out = False
        self.closed_reason: Any = None

    # Connection -------------------------------------------------------------------------------

    def on_connection_open(self, connection: Any) -> None:
        self.events.append("connection.open")
        connection.channel(on_open_callback=self.on_consumer_channel_open)

    def on_connection_open_error(self, _connection: Any, err: Exception) -> None:
        self.errors.append(f"open error: {err!r}")
        self.stop_loop()

    def on_connection_closed(self, _connection: Any, reason: Exception) -> None:
        self.events.append("connection.closed")
        self.closed_reason = reason
        self.stop_loop()

    def stop_loop(self) -> None:
        self.connection.ioloop.stop()

    def on_timeout(self) -> None:
        self.timed_out = True
        if self.connection.is_open:
            self.connection.close()
        else:
            self.stop_loop()

    # Consumer side ----------------------------------------------------------------------------

    def on_consumer_channel_open(self, channel: Any) -> None:
        self.consumer = channel
        channel.add_on_close_callback(self.on_channel_closed)
        channel.exchange_declare(
            exchange=self.exchange,
            exchange_type="topic",
            auto_delete=True,
            callback=self.on_exchange_declareok,
        )

    def on_channel_closed(self, channel: Any, reason: Exception) -> None:
        self.events.append(f"channel{channel.channel_number}.closed")
        if not isinstance(reason, pika.exceptions.ChannelClosedByClient):
            self.errors.append(f"channel closed: {reason!r}")
        if self.connection.is_open and not any(
            ch is not None and ch.is_open for ch in (self.consumer, self.publisher)
        ):
            self.connection.close()

    def on_exchange_declareok(self, _frame: Any) -> None:
        self.consumer.queue_declare(
            queue=self.queue, auto_delete=True, callback=self.on_queue_declareok
        )

    def on_queue_declareok(self, frame: Any) -> None:
        assert frame.method.queue == self.queue
        self.consumer.queue_bind(
            self.queue, self.exchange, routing_key=self.routing_key, callback=self.on_bindok
        )

    def on_bindok(self, _frame: Any) -> None:
        self.consumer.basic_qos(prefetch_count=1, callback=self.on_basic_qos_ok)

    def on_basic_qos_ok(self, _frame: Any) -> None:
        self.consumer.add_on_cancel_callback(self.on_consumer_cancelled)
        self.consumer_tag = self.consumer.basic_consume(self.queue, self.on_message)
        self.connection.channel(on_open_callback=self.on_publisher_channel_open)

    def on_consumer_cancelled(self, frame: Any) -> None:
        self.errors.append(f"consumer cancelled by the broker: {frame!r}")

    def on_message(self, channel: Any, basic_deliver: Any, properties: Any, body: bytes) -> None:
        self.received.append((body, properties.app_id, properties.headers))
        channel.basic_ack(basic_deliver.delivery_tag)
        self.maybe_finish()

    # Publisher side ---------------------------------------------------------------------------

    def on_publisher_channel_open(self, channel: Any) -> None:
        self.publisher = channel
        channel.add_on_close_callback(self.on_channel_closed)
        channel.confirm_delivery(self.on_delivery_confirmation, callback=self.on_confirm_selectok)

    def on_confirm_selectok(self, _frame: Any) -> None:
        properties = pika.BasicProperties(
            app_id="example-publisher", content_type="text/plain", headers={"k": "v"}
        )
        for i in range(MESSAGE_COUNT):
            self.publisher.basic_publish(
                self.exchange, self.routing_key, f"message {i}".encode(), properties
            )

    def on_delivery_confirmation(self, frame: Any) -> None:
        method = frame.method
        assert method.NAME == "Basic.Ack", method
        if method.multiple:
            last = self.acked_tags[-1] if self.acked_tags else 0
            self.acked_tags.extend(range(last + 1, method.delivery_tag + 1))
        else:
            self.acked_tags.append(method.delivery_tag)
        self.maybe_finish()

    # Shutdown ---------------------------------------------------------------------------------

    def maybe_finish(self) -> None:
        if len(self.received) == MESSAGE_COUNT and len(self.acked_tags) == MESSAGE_COUNT:
            self.consumer.basic_cancel(self.consumer_tag, callback=self.on_cancelok)

    def on_cancelok(self, _frame: Any) -> None:
        self.events.append("consumer.cancelled")
        self.publisher.close()
        self.consumer.close()

    def check(self) -> None:
        assert not self.timed_out, f"timed out; events={self.events} errors={self.errors}"
        assert self.errors == []
        assert self.received == [
            (f"message {i}".encode(), "example-publisher", {"k": "v"}) for i in range(MESSAGE_COUNT)
        ]
        assert sorted(self.acked_tags) == list(range(1, MESSAGE_COUNT + 1))
        assert self.events[0] == "connection.open"
        assert self.events[-1] == "connection.closed"
        assert isinstance(self.closed_reason, pika.exceptions.ConnectionClosedByClient)


def test_select_connection_consumer_example(broker: Broker, name: str) -> None:
    client = ExampleClient(name)
    client.connection = SelectConnection(
        pika.URLParameters(broker.url),
        on_open_callback=client.on_connection_open,
        on_open_error_callback=client.on_connection_open_error,
        on_close_callback=client.on_connection_closed,
    )
    timer = client.connection.ioloop.call_later(RUN_TIMEOUT, client.on_timeout)
    try:
        client.connection.ioloop.start()
    finally:
        client.connection.ioloop.remove_timeout(timer)
        client.connection.ioloop.close()
    client.check()


def test_asyncio_connection_consumer_example(broker: Broker, name: str) -> None:
    client = ExampleClient(name)
    loop = asyncio.new_event_loop()
    try:
        client.connection = AsyncioConnection(
            pika.URLParameters(broker.url),
            on_open_callback=client.on_connection_open,
            on_open_error_callback=client.on_connection_open_error,
            on_close_callback=client.on_connection_closed,
            custom_ioloop=loop,
        )
        timer = loop.call_later(RUN_TIMEOUT, client.on_timeout)
        loop.run_forever()
        timer.cancel()
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
    client.check()


def _run_select(
    broker: Broker, on_channel: Callable[[Any, Any], None], timeout: float = RUN_TIMEOUT
) -> bool:
    """Open a SelectConnection and a channel, hand both to ``on_channel``; True if timed out.

    ``on_channel`` must eventually close the connection, which stops the loop.
    """
    timed_out = False
    errors: list[str] = []
    connection: Any  # assigned below, before the loop runs any callback

    def on_open(conn: Any) -> None:
        conn.channel(on_open_callback=functools.partial(on_channel, conn))

    def on_open_error(_connection: Any, err: Exception) -> None:
        errors.append(repr(err))
        connection.ioloop.stop()

    def on_timeout() -> None:
        nonlocal timed_out
        timed_out = True
        connection.close() if connection.is_open else connection.ioloop.stop()

    connection = SelectConnection(
        pika.URLParameters(broker.url),
        on_open_callback=on_open,
        on_open_error_callback=on_open_error,
        on_close_callback=lambda _c, _r: connection.ioloop.stop(),
    )
    timer = connection.ioloop.call_later(timeout, on_timeout)
    try:
        connection.ioloop.start()
    finally:
        connection.ioloop.remove_timeout(timer)
        connection.ioloop.close()
    assert errors == []
    return timed_out


def test_select_connection_mandatory_return_precedes_ack(broker: Broker, name: str) -> None:
    """On a confirm channel an unroutable mandatory message is returned, then acked."""
    events: list[tuple[str, Any]] = []

    def on_channel(connection: Any, channel: Any) -> None:
        def on_return(_ch: Any, method: Any, properties: Any, body: bytes) -> None:
            events.append(("return", (method.reply_code, method.reply_text, body)))

        def on_confirm(frame: Any) -> None:
            events.append((frame.method.NAME, frame.method.delivery_tag))
            # Acks may be coalesced (multiple=True), as the spec allows.
            if frame.method.delivery_tag >= 2:
                connection.close()

        def on_selectok(_frame: Any) -> None:
            channel.basic_publish("", f"{name}.nowhere", b"lost", mandatory=True)
            channel.basic_publish("", f"{name}.nowhere", b"dropped", mandatory=False)

        channel.add_on_return_callback(on_return)
        channel.confirm_delivery(on_confirm, callback=on_selectok)

    assert not _run_select(broker, on_channel)
    assert events[0] == ("return", (312, "NO_ROUTE", b"lost"))
    assert events[1:] in ([("Basic.Ack", 1), ("Basic.Ack", 2)], [("Basic.Ack", 2)])


def test_select_connection_get_and_server_named_queue(broker: Broker) -> None:
    """basic_get / get-empty and a server-named exclusive queue through callbacks."""
    results: dict[str, Any] = {}

    def on_channel(connection: Any, channel: Any) -> None:
        def on_declareok(frame: Any) -> None:
            queue = frame.method.queue
            results["queue"] = queue
            for i in range(2):
                channel.basic_publish("", queue, f"g{i}".encode())
            channel.basic_get(queue, functools.partial(on_get, queue), auto_ack=False)

        def on_get(queue: str, ch: Any, method: Any, _props: Any, body: bytes) -> None:
            results.setdefault("got", []).append((body, method.message_count))
            ch.basic_ack(method.delivery_tag)
            if len(results["got"]) < 2:
                ch.basic_get(queue, functools.partial(on_get, queue), auto_ack=False)
            else:
                # get-empty: pika reports it through the channel's own callback registry.
                ch.add_callback(on_empty, [pika.spec.Basic.GetEmpty], one_shot=True)
                ch.basic_get(queue, functools.partial(on_get, queue), auto_ack=False)

        def on_empty(_frame: Any) -> None:
            results["empty"] = True
            connection.close()

        channel.queue_declare("", exclusive=True, callback=on_declareok)

    assert not _run_select(broker, on_channel)
    assert results["queue"].startswith("amq.gen-")
    assert results["got"] == [(b"g0", 1), (b"g1", 0)]
    assert results["empty"] is True
