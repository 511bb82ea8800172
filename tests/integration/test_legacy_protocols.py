"""The older protocols against a real broker process: the 0-8 / 0-9 headers answered octet
for octet as RabbitMQ 3.10.8 answered them (tests/data/rabbitmq-headers, raw sockets), and
AMQP/Fast 0.8a2 through the project's own client (``leveret.testing.amqpfast_socket``)
exchanging messages with pika over the same queues and topics."""

from __future__ import annotations

import json
import socket
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from leveret.protocol.amqpfast.commands import MessageHeader
from leveret.protocol.amqpfast.events import ServiceType
from leveret.testing.amqpfast_client import Delivered, Replied
from leveret.testing.amqpfast_socket import FastSocket
from tests.integration.pika_support import connect

if TYPE_CHECKING:
    from tests.integration.conftest import Broker

pytestmark = pytest.mark.leveret_only

DATA = Path(__file__).resolve().parents[1] / "data" / "rabbitmq-headers" / "captures.json"
CAPTURES: dict[str, Any] = json.loads(DATA.read_text())["headers"]
OLD_HEADERS = ("AMQP 1 1 0 9", "AMQP 1 1 8 0", "AMQP 1 1 9 1")


def _frame(channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHL", 1, channel, len(payload)) + payload + b"\xce"


def _shortstr(text: str) -> bytes:
    return bytes((len(text),)) + text.encode()


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _read_frame(sock: socket.socket) -> bytes:
    head = _read(sock, 7)
    (size,) = struct.unpack_from(">L", head, 3)
    return head + _read(sock, size + 1)


def _login(broker: Broker, header: bytes) -> socket.socket:
    """The capture tool's login (PLAIN guest/guest, tune-ok echoing, vhost /, channel 1)."""
    sock = socket.create_connection((broker.host, broker.port), timeout=5)
    sock.sendall(header)
    _read_frame(sock)  # connection.start
    start_ok = (
        b"\x00\x0a\x00\x0b\x00\x00\x00\x00"
        + _shortstr("PLAIN")
        + struct.pack(">L", 12)
        + b"\x00guest\x00guest"
        + _shortstr("en_US")
    )
    sock.sendall(_frame(0, start_ok))
    tune = _read_frame(sock)
    channel_max, frame_max, _ = struct.unpack_from(">HLH", tune, 11)
    sock.sendall(_frame(0, b"\x00\x0a\x00\x1f" + struct.pack(">HLH", channel_max, frame_max, 0)))
    sock.sendall(_frame(0, b"\x00\x0a\x00\x28" + _shortstr("/") + _shortstr("") + b"\x00"))
    _read_frame(sock)  # open-ok
    sock.sendall(_frame(1, b"\x00\x14\x00\x0a" + _shortstr("")))
    _read_frame(sock)  # channel.open-ok
    return sock


@pytest.mark.parametrize("header", OLD_HEADERS)
def test_old_headers_are_answered_as_rabbitmq_did(broker: Broker, header: str) -> None:
    entry = CAPTURES[header]
    for probe, recorded in entry["probes"].items():
        if probe.startswith("queue.unbind"):
            continue  # the shared 0-9-1 handler's 404 (see test_legacy_connection.py)
        sock = _login(broker, bytes.fromhex(entry["sent"]))
        try:
            for frame in recorded["sent"]:
                sock.sendall(bytes.fromhex(frame))
            expected = bytes.fromhex(recorded["received"])
            assert _read(sock, len(expected)) == expected, probe
        finally:
            sock.close()


def test_amqp_fast_and_0_9_1_share_queues_and_topics(broker: Broker, name: str) -> None:
    conn = connect(broker)
    ch = conn.channel()
    ch.queue_declare(name)
    ch.queue_declare(name + ".topic")
    ch.queue_bind(name + ".topic", "amq.topic", routing_key=name + ".#")
    with FastSocket.connect(broker.host, broker.port, client_name=name) as fast:
        client = fast.client
        client.open_channel(1)
        client.open_handle(
            1, 1, service=ServiceType.QUEUE, dest_name=name, producer=True, consumer=True
        )
        client.open_handle(1, 2, service=ServiceType.TOPIC, dest_name=name + ".", producer=True)
        header = MessageHeader(persistent=True, mime_type="text/plain", headers={"N": 1})
        client.send(1, b"fast to pika", header=header, confirm_tag=7)
        client.send(2, b"fast topic", dest_name="sport", confirm_tag=8)
        fast.flush()
        assert fast.wait(Replied).confirm_tag == 7
        assert fast.wait(Replied).confirm_tag == 8
        method, props, body = ch.basic_get(name, auto_ack=True)
        assert body == b"fast to pika"
        assert (props.content_type, props.delivery_mode, props.headers) == (
            "text/plain",
            2,
            {"N": 1},
        )
        method, props, body = ch.basic_get(name + ".topic", auto_ack=True)
        assert (body, method.routing_key) == (b"fast topic", name + ".sport")
        # And back: pika publishes, the AMQP/Fast consumer gets it and acknowledges it.
        ch.basic_publish("", name, b"pika to fast")
        client.consume(1, prefetch=5)
        fast.flush()
        delivered = fast.wait(Delivered)
        assert delivered.body == b"pika to fast"
        client.ack(1, delivered.message_nbr)
        fast.flush()
        fast.drain(0.2)
    assert ch.queue_declare(name, passive=True).method.message_count == 0
    conn.close()
