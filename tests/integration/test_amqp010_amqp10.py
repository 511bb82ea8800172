"""Messages crossing between AMQP 0-10 (the Apache Qpid Python client, Python 2.7 in a
subprocess) and AMQP 1.0 (Qpid Proton) through the one core, both ways, properties compared.
The 0-10 ↔ 0-9-1 pairs are in ``test_amqp010.py``; 1.0 ↔ 0-9-1 in ``test_amqp10_clients.py``."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import pika
import pytest
from proton import Message, symbol
from proton.utils import BlockingConnection

from tests.integration.test_amqp010 import qpid

if TYPE_CHECKING:
    from tools.qpid import Py2

    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only, pytest.mark.timeout(90)]


def _url(broker: Broker) -> str:
    return f"amqp://guest:guest@{broker.host}:{broker.port}"


def _declare(broker: Broker, name: str, *, bind: str | None = None) -> None:
    params = pika.ConnectionParameters(host=broker.host, port=broker.port)
    with pika.BlockingConnection(params) as conn:
        channel = conn.channel()
        channel.queue_declare(name)
        if bind is not None:
            channel.queue_bind(name, bind, routing_key=name)


def test_qpid_010_sender_to_proton_10_receiver(py2: Py2, broker: Broker, name: str) -> None:
    _declare(broker, name, bind="amq.direct")
    sent = qpid(py2, broker, "send_props", "amq.direct", name)
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        receiver = c.create_receiver(f"/queues/{name}", credit=1)
        got: Any = receiver.receive(timeout=10)
        receiver.accept()
    finally:
        c.close()
    body = got.body if isinstance(got.body, str) else bytes(got.body).decode()
    assert body == "cross-protocol"
    assert got.content_type == "text/plain"
    assert got.content_encoding == "utf-8"
    assert got.priority == 7
    assert got.durable
    assert got.ttl == 60
    assert str(got.id) == sent["message_id"]
    assert got.correlation_id == "corr-1"
    assert got.user_id in (b"guest", "guest")
    assert got.properties == {"s": "text", "i": 42, "b": True}
    assert got.annotations[symbol("x-exchange")] == "amq.direct"
    assert got.annotations[symbol("x-routing-key")] == name


def test_proton_10_sender_to_qpid_010_receiver(py2: Py2, broker: Broker, name: str) -> None:
    _declare(broker, name)
    message_id = str(uuid.uuid4())
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        sender = c.create_sender(f"/queues/{name}")
        sender.send(
            Message(
                body=b"from-proton",
                inferred=True,  # a data section: an amqp-value body would reach 0-10 encoded
                id=message_id,
                correlation_id="c-10",
                content_type="application/octet-stream",
                durable=True,
                priority=5,
                ttl=30,
                properties={"k": "v", "n": 7},
            )
        )
    finally:
        c.close()
    result = qpid(py2, broker, "receive_props", name)
    assert result["body"] == "from-proton"
    props = result["props"]
    assert props["content_type"] == "application/octet-stream"
    assert props["correlation_id"] == "c-10"
    assert props["delivery_mode"] == 2
    assert props["priority"] == 5
    assert props["ttl"] == 30000
    assert props["routing_key"] == name
    assert props["application_headers"]["k"] == "v"
    assert props["application_headers"]["n"] == 7
