"""Broker helpers for the Spark tests, built on the connector's own client."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091._generated.properties import BasicProperties
from leveret.spark._arrow import stream_offsets
from leveret.spark._client import AmqpClient, ConnectionParams

if TYPE_CHECKING:
    from collections.abc import Iterable

    from leveret.protocol.amqp091.fieldtable import FieldTable


def client(url: str) -> AmqpClient:
    return AmqpClient(ConnectionParams.from_uri(url), timeout=30).connect()


def declare(url: str, queue: str, arguments: FieldTable | None = None) -> None:
    with client(url) as c:
        c.declare(queue, arguments)


def declare_stream(url: str, queue: str, arguments: FieldTable | None = None) -> None:
    declare(url, queue, {"x-queue-type": "stream", **(arguments or {})})


def delete(url: str, queue: str) -> None:
    with client(url) as c:
        c.delete_queue(queue)


def publish(
    url: str,
    routing_key: str,
    bodies: Iterable[bytes],
    *,
    exchange: str = "",
    properties: BasicProperties | None = None,
) -> int:
    """Publish with confirms (window 500); returns how many were published."""
    raw = (properties or BasicProperties(delivery_mode=2)).encode()
    n = 0
    with client(url) as c:
        c.confirm_select()
        method = m.BasicPublish(exchange=exchange, routing_key=routing_key).encode()
        for body in bodies:
            c.publish_frames(framing.encode_message_frames(1, method, 60, body, raw, c.frame_max))
            n += 1
            if c.in_flight >= 500:
                c.wait_confirms(250, 30)
        c.wait_confirms(0, 30)
    return n


def depth(url: str, queue: str) -> int:
    with client(url) as c:
        return c.declare_passive(queue).message_count


def drain(url: str, queue: str, *, idle: float = 1.0) -> list[tuple[bytes, BasicProperties, bool]]:
    """Consume and ack everything in a classic queue: (body, properties, redelivered)."""
    out: list[tuple[bytes, BasicProperties, bool]] = []
    with client(url) as c:
        c.qos(1000)
        c.consume(queue)
        d = c.deliveries
        while c.poll(idle) or len(d):
            if len(d):
                c.ack(d.tags[-1])
                chunk = d.take()
                out.extend(
                    (body, BasicProperties.decode(raw), bool(r))
                    for body, raw, r in zip(
                        chunk.bodies, chunk.properties, chunk.redelivered, strict=True
                    )
                )
        c.flush()
    return out


def read_stream(url: str, queue: str, *, idle: float = 1.0) -> list[tuple[int, bytes]]:
    """Every (offset, body) of a stream queue, from its first offset."""
    out: list[tuple[int, bytes]] = []
    with client(url) as c:
        c.qos(1000)
        c.consume(queue, arguments={"x-stream-offset": "first"})
        d = c.deliveries
        while c.poll(idle) or len(d):
            if len(d):
                c.ack(d.tags[-1])
                chunk = d.take()
                out.extend(zip(stream_offsets(chunk.properties), chunk.bodies, strict=True))
    return out


def wait_for(predicate: object, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")
