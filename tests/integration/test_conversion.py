"""Messages crossing every pair of protocols, both ways, through real clients: pika (0-9-1),
Qpid Proton (1.0), qpid.messaging (0-10, Python 2.7 in a subprocess), the project's 0-9
``message``-class and AMQP/Fast clients (``leveret.testing``) and rstream (the stream
protocol, on stream queues). Each publishes one message with every property its protocol
can carry; each consumer's view is compared, field by field, with what was sent, for the
fields both protocols carry (``CARRIES``). The mapping is ``leveret.convert``'s (the one
0-9-1 <-> 1.0 table, RabbitMQ 4's); docs/compatibility.md says where it differs from
RabbitMQ 3.10.8.

The 0-10, 0-9 and AMQP/Fast front ends do not consume from stream queues (0-10 refuses the
subscription), so the stream protocol's messages reach them through no pair; every other
pair runs, the same protocol on both sides included."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pika
import pytest
from proton import Message, symbol, timestamp, ulong
from proton.reactor import Filter
from proton.utils import BlockingConnection
from rstream import (
    AMQPMessage,
    Consumer,
    ConsumerOffsetSpecification,
    MessageContext,
    OffsetType,
    Producer,
    amqp_decoder,
)

# rstream's vendored AMQP 1.0 codec has no type hints mypy reads.
from rstream._pyamqp.message import Header as RHeader  # type: ignore[attr-defined]
from rstream._pyamqp.message import Properties as RProperties  # type: ignore[attr-defined]

from leveret.protocol.amqp09._generated import methods as m09
from leveret.protocol.amqp09.wiretypes import Content
from leveret.protocol.amqp10 import AmqpValue, parse_message
from leveret.protocol.amqpfast.commands import MessageHeader
from leveret.protocol.amqpfast.events import ServiceType
from leveret.server.legacy.dialects import AMQP09
from leveret.testing import FastSocket, LegacySocket
from leveret.testing.amqpfast_client import Delivered, Replied
from tests.integration.conftest import start_broker
from tests.integration.test_stream_protocol import stream_port_of

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tools.qpid import Py2

    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only, pytest.mark.timeout(60)]

QPID_CLIENT = Path(__file__).with_name("qpid_messaging_client.py2")
TIMEOUT = 10.0
UUID = "6b3e1c2a-1111-4222-8333-444455556666"

# What every publisher sends, in each protocol's own terms (the publishers below).
SENT: dict[str, Any] = {
    "body": b"\x00\x01 binary \xff",
    "content_type": "application/octet-stream",
    "content_encoding": "x-test",
    "headers": {"s": "text", "i": 42, "b": True},
    "message_id": UUID,
    "correlation_id": "corr-1",
    "reply_to": "replies",
    "priority": 7,
    "ttl_ms": 60_000,
    "timestamp": 1_700_000_000,
    "user_id": "guest",
    "app_id": "app-1",
    "type": "kind",
    "durable": True,
}
_ALL = frozenset(SENT)
# The fields each protocol can carry both ways (qpid.messaging sets no timestamp: it only
# reads one, so 0-10's is compared on receipt only; AMQP/Fast has no boolean header value).
CARRIES: dict[str, frozenset[str]] = {
    "0-9-1": _ALL,
    "1.0": _ALL,
    "0-10": _ALL,
    "0-9": _ALL,
    "fast": frozenset(
        [
            "body",
            "content_type",
            "content_encoding",
            "headers",
            "message_id",
            "priority",
            "ttl_ms",
            "durable",
        ]
    ),
    "stream": _ALL,
}
SENDS_TIMESTAMP = {"0-9-1", "1.0", "0-9", "stream"}
NO_BOOLEAN_HEADERS = {"fast"}
# Front ends that cannot consume from a stream queue.
NO_STREAM_CONSUMER = {"0-10", "0-9", "fast"}


# -- the broker and the queues ---------------------------------------------------------------


class Target:
    def __init__(self, broker: Broker, stream_port: int, py2: Py2) -> None:
        self.broker = broker
        self.host = broker.host
        self.port = broker.port
        self.stream_port = stream_port
        self.py2 = py2


@pytest.fixture(scope="module")
def target(py2: Py2) -> Iterator[Target]:
    broker = start_broker()
    try:
        yield Target(broker, stream_port_of(broker), py2)
    finally:
        broker.stop()


def _pika(t: Target) -> Any:
    return pika.BlockingConnection(pika.ConnectionParameters(host=t.host, port=t.port))


def _declare(t: Target, *, stream: bool) -> str:
    name = f"conv.{uuid.uuid4().hex[:10]}"
    with _pika(t) as conn:
        arguments = {"x-queue-type": "stream"} if stream else None
        conn.channel().queue_declare(name, durable=stream, arguments=arguments)
    return name


# -- publishers: SENT in each protocol's terms -------------------------------------------------


def _publish_091(t: Target, queue: str, body: bytes, extra: dict[str, Any]) -> None:
    s = SENT
    with _pika(t) as conn:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish(
            "",
            queue,
            body,
            pika.BasicProperties(
                content_type=extra.get("content_type", s["content_type"]),
                content_encoding=s["content_encoding"],
                headers=s["headers"],
                delivery_mode=2,
                priority=s["priority"],
                correlation_id=s["correlation_id"],
                reply_to=s["reply_to"],
                expiration=str(s["ttl_ms"]),
                message_id=s["message_id"],
                timestamp=s["timestamp"],
                type=extra.get("type", s["type"]),
                user_id=s["user_id"],
                app_id=s["app_id"],
            ),
        )


def _proton_url(t: Target) -> str:
    return f"amqp://guest:guest@{t.host}:{t.port}"


def _proton_message(body: Any, *, inferred: bool = True) -> Message:
    s = SENT
    return Message(
        body=body,
        inferred=inferred,
        id=s["message_id"],
        correlation_id=s["correlation_id"],
        reply_to=s["reply_to"],
        content_type=s["content_type"],
        content_encoding=s["content_encoding"],
        creation_time=float(s["timestamp"]),
        group_id=s["app_id"],
        user_id=s["user_id"].encode(),
        properties=dict(s["headers"]),
        annotations={symbol("x-basic-type"): s["type"]},
        durable=True,
        priority=s["priority"],
        ttl=s["ttl_ms"] / 1000,
    )


def _publish_10(t: Target, queue: str, body: bytes, extra: dict[str, Any]) -> None:
    message = extra.get("proton") or _proton_message(body)
    c = BlockingConnection(_proton_url(t), timeout=TIMEOUT)
    try:
        c.create_sender(f"/queues/{queue}").send(message)
    finally:
        c.close()


def _qpid(t: Target, *args: str) -> dict[str, Any]:
    return t.py2.run_json(QPID_CLIENT, t.host, str(t.port), *args)


def _publish_010(t: Target, queue: str, body: bytes, extra: dict[str, Any]) -> None:
    spec = {k: v for k, v in SENT.items() if k not in ("body", "timestamp")}
    spec["body"] = base64.b64encode(body).decode()
    _qpid(t, "send", queue, json.dumps(spec))


def _legacy(t: Target) -> LegacySocket:
    client = LegacySocket.open(t.host, t.port, AMQP09)
    client.handshake()
    client.open_channel(1)
    return client


def _publish_09(t: Target, queue: str, body: bytes, extra: dict[str, Any]) -> None:
    s = SENT
    with _legacy(t) as client:
        client.send(
            1,
            m09.MessageTransfer(
                routing_key=queue,
                content_type=s["content_type"],
                content_encoding=s["content_encoding"],
                application_headers={**s["headers"], "x-amqp-0-9-1-type": s["type"]},
                delivery_mode=2,
                priority=s["priority"],
                correlation_id=s["correlation_id"],
                reply_to=s["reply_to"],
                ttl=s["ttl_ms"],
                message_id=s["message_id"],
                timestamp=s["timestamp"],
                user_id=s["user_id"],
                app_id=s["app_id"],
                body=Content(body),
            ),
        )
        assert isinstance(client.next().method, m09.MessageOk)


def _fast(t: Target, queue: str) -> FastSocket:
    fast = FastSocket.connect(t.host, t.port, client_name=queue)
    fast.client.open_channel(1)
    fast.client.open_handle(
        1, 1, service=ServiceType.QUEUE, dest_name=queue, producer=True, consumer=True
    )
    return fast


def _publish_fast(t: Target, queue: str, body: bytes, extra: dict[str, Any]) -> None:
    s = SENT
    header = MessageHeader(
        persistent=True,
        priority=s["priority"],
        expiration=int(time.time() + s["ttl_ms"] / 1000),
        mime_type=s["content_type"],
        encoding=s["content_encoding"],
        identifier=s["message_id"],
        headers={k: v for k, v in s["headers"].items() if not isinstance(v, bool)},
    )
    with _fast(t, queue) as fast:
        fast.client.send(1, body, header=header, confirm_tag=1)
        fast.flush()
        assert fast.wait(Replied).confirm_tag == 1


def _rstream_message(**kw: Any) -> AMQPMessage:
    s = SENT
    sections: dict[str, Any] = {"body": kw.pop("body")} if "body" in kw else kw
    return AMQPMessage(
        header=RHeader(durable=True, priority=s["priority"], ttl=s["ttl_ms"]),
        message_annotations={"x-basic-type": s["type"]},
        properties=RProperties(
            message_id=s["message_id"],
            user_id=s["user_id"].encode(),
            reply_to=s["reply_to"],
            correlation_id=s["correlation_id"],
            content_type=s["content_type"],
            content_encoding=s["content_encoding"],
            creation_time=s["timestamp"] * 1000,
            group_id=s["app_id"],
        ),
        application_properties=dict(s["headers"]),
        **sections,
    )


def _run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT * 2))


def _publish_stream(t: Target, queue: str, body: bytes, extra: dict[str, Any]) -> None:
    message = extra.get("rstream") or _rstream_message(body=body)

    async def publish() -> None:
        async with Producer(t.host, port=t.stream_port, username="guest", password="guest") as p:
            await p.send_wait(queue, message)

    _run(publish())


PUBLISH: dict[str, Callable[[Target, str, bytes, dict[str, Any]], None]] = {
    "0-9-1": _publish_091,
    "1.0": _publish_10,
    "0-10": _publish_010,
    "0-9": _publish_09,
    "fast": _publish_fast,
    "stream": _publish_stream,
}


# -- consumers: what each sees, in SENT's terms -----------------------------------------------


def _consume_091(t: Target, queue: str, stream: bool) -> dict[str, Any]:
    with _pika(t) as conn:
        ch = conn.channel()
        if stream:
            ch.basic_qos(prefetch_count=1)
            got: list[tuple[Any, bytes]] = []
            ch.basic_consume(
                queue,
                lambda c, m, p, b: got.append((p, b)),
                arguments={"x-stream-offset": "first"},
            )
            deadline = time.monotonic() + TIMEOUT
            while not got and time.monotonic() < deadline:
                conn.process_data_events(0.1)
            assert got, "no delivery"
            props, body = got[0]
        else:
            method, props, body = ch.basic_get(queue, auto_ack=True)
            assert method is not None, "no message"
    return {
        "body": body,
        "content_type": props.content_type,
        "content_encoding": props.content_encoding,
        "headers": props.headers or {},
        "message_id": props.message_id,
        "correlation_id": props.correlation_id,
        "reply_to": props.reply_to,
        "priority": props.priority,
        "ttl_ms": None if props.expiration is None else int(props.expiration),
        "timestamp": props.timestamp,
        "user_id": props.user_id,
        "app_id": props.app_id,
        "type": props.type,
        "durable": props.delivery_mode == 2,
    }


def _receive_10(t: Target, queue: str, stream: bool) -> Any:
    c = BlockingConnection(_proton_url(t), timeout=TIMEOUT)
    try:
        first: Any = "first"
        options = Filter({symbol("rabbitmq:stream-offset-spec"): first}) if stream else None
        receiver = c.create_receiver(f"/queues/{queue}", credit=1, options=options)
        message: Any = receiver.receive(timeout=TIMEOUT)
        receiver.accept()
        return message
    finally:
        c.close()


def _consume_10(t: Target, queue: str, stream: bool) -> dict[str, Any]:
    m = _receive_10(t, queue, stream)
    body = m.body
    return {
        "body": bytes(body) if isinstance(body, bytes | memoryview) else body,
        "content_type": m.content_type,
        "content_encoding": m.content_encoding,
        "headers": dict(m.properties or {}),
        "message_id": None if m.id is None else str(m.id),
        "correlation_id": m.correlation_id,
        "reply_to": m.reply_to,
        "priority": m.priority,
        "ttl_ms": round(m.ttl * 1000),
        "timestamp": round(m.creation_time) if m.creation_time else None,
        "user_id": bytes(m.user_id).decode() if m.user_id else None,
        "app_id": m.group_id,
        "type": (m.annotations or {}).get(symbol("x-basic-type")),
        "durable": m.durable,
    }


def _consume_010(t: Target, queue: str, stream: bool) -> dict[str, Any]:
    got = _qpid(t, "receive", queue)
    got["body"] = base64.b64decode(got["body"])
    return got


def _consume_09(t: Target, queue: str, stream: bool) -> dict[str, Any]:
    with _legacy(t) as client:
        client.send(1, m09.MessageConsume(queue=queue, destination="c"))
        assert isinstance(client.next().method, m09.MessageOk)
        m = client.next().method
        client.send(1, m09.MessageOk())
    headers = dict(m.application_headers or {})
    kind = headers.pop("x-amqp-0-9-1-type", None)
    return {
        "body": m.body.data if isinstance(m.body, Content) else m.body,
        "content_type": m.content_type,
        "content_encoding": m.content_encoding,
        "headers": headers,
        "message_id": m.message_id,
        "correlation_id": m.correlation_id,
        "reply_to": m.reply_to,
        "priority": m.priority,
        "ttl_ms": m.ttl,
        "timestamp": m.timestamp,
        "user_id": m.user_id,
        "app_id": m.app_id,
        "type": kind.decode() if isinstance(kind, bytes) else kind,
        "durable": m.delivery_mode == 2,
    }


def _consume_fast(t: Target, queue: str, stream: bool) -> dict[str, Any]:
    with _fast(t, queue) as fast:
        fast.client.consume(1, prefetch=1)
        fast.flush()
        delivered = fast.wait(Delivered)
        fast.client.ack(1, delivered.message_nbr)
        fast.flush()
        fast.drain(0.1)
    h = delivered.header
    return {
        "body": delivered.body,
        "content_type": h.mime_type,
        "content_encoding": h.encoding,
        "headers": dict(h.headers),
        "message_id": h.identifier,
        "priority": h.priority,
        "ttl_ms": round((h.expiration - time.time()) * 1000) if h.expiration else None,
        "durable": h.persistent,
    }


async def _read_stream(t: Target, queue: str) -> bytes:
    got: list[bytes] = []
    done = asyncio.Event()
    consumer = Consumer(t.host, port=t.stream_port, username="guest", password="guest")
    await consumer.start()
    try:

        async def on_message(message: bytes, context: MessageContext) -> None:
            got.append(message)
            done.set()

        await consumer.subscribe(
            queue,
            on_message,
            decoder=bytes,
            offset_specification=ConsumerOffsetSpecification(OffsetType.FIRST),
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), TIMEOUT)
    finally:
        await consumer.close()
    assert got, "no record"
    return got[0]


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _consume_stream(t: Target, queue: str, stream: bool) -> dict[str, Any]:
    record = _run(_read_stream(t, queue))
    m = amqp_decoder(record)
    header, props = m.header, m.properties
    annotations = {_text(k): v for k, v in (m.message_annotations or {}).items()}
    return {
        "record": record,
        "body": m.body if m.body is not None else m.value,
        "content_type": _text(props.content_type),
        "content_encoding": _text(props.content_encoding),
        "headers": {_text(k): _text(v) for k, v in (m.application_properties or {}).items()},
        "message_id": str(props.message_id)
        if isinstance(props.message_id, uuid.UUID)
        else _text(props.message_id),
        "correlation_id": _text(props.correlation_id),
        "reply_to": _text(props.reply_to),
        "priority": header.priority,
        "ttl_ms": header.ttl,
        "timestamp": props.creation_time // 1000 if props.creation_time else None,
        "user_id": _text(props.user_id),
        "app_id": _text(props.group_id),
        "type": _text(annotations.get("x-basic-type")),
        "durable": header.durable,
    }


CONSUME: dict[str, Callable[[Target, str, bool], dict[str, Any]]] = {
    "0-9-1": _consume_091,
    "1.0": _consume_10,
    "0-10": _consume_010,
    "0-9": _consume_09,
    "fast": _consume_fast,
    "stream": _consume_stream,
}

PAIRS = [
    (a, b) for a in PUBLISH for b in CONSUME if not ("stream" in (a, b) and b in NO_STREAM_CONSUMER)
]


def _expected(source: str, sink: str) -> dict[str, Any]:
    fields = CARRIES[source] & CARRIES[sink]
    if source not in SENDS_TIMESTAMP:
        fields -= {"timestamp"}
    expected = {f: SENT[f] for f in fields}
    if "headers" in expected and NO_BOOLEAN_HEADERS & {source, sink}:
        expected["headers"] = {k: v for k, v in SENT["headers"].items() if not isinstance(v, bool)}
    return expected


@pytest.mark.parametrize(("source", "sink"), PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_every_property_crosses(target: Target, source: str, sink: str) -> None:
    stream = "stream" in (source, sink)
    queue = _declare(target, stream=stream)
    PUBLISH[source](target, queue, SENT["body"], {})
    seen = CONSUME[sink](target, queue, stream)
    expected = _expected(source, sink)
    for field, want in expected.items():
        got = seen[field]
        if field == "headers":
            got = {k: v for k, v in got.items() if k in want}
        if field == "ttl_ms" and "fast" in (source, sink):
            # AMQP/Fast carries an absolute expiry in whole seconds.
            assert abs(got - want) <= 2000, (field, got)
            continue
        assert got == want, field
    if source == sink == "stream":
        # Same protocol: the record comes back as the publisher sent it.
        assert seen["record"] == bytes(_rstream_message(body=SENT["body"]))


# -- body kinds: text, and 1.0's amqp-value / amqp-sequence ------------------------------------

TEXT = "text ünï ✓"


@pytest.mark.parametrize("sink", ["0-9-1", "1.0", "0-10", "0-9", "fast", "stream"])
def test_a_text_body_crosses_as_utf_8(target: Target, sink: str) -> None:
    stream = sink == "stream"
    queue = _declare(target, stream=stream)
    body = TEXT.encode()
    # 0-9-1 sends text as bytes with its content type: every consumer gets the same octets.
    _publish_091(target, queue, body, {"content_type": "text/plain"})
    seen = CONSUME[sink](target, queue, stream)
    got = seen["body"]
    assert (got.encode() if isinstance(got, str) else got) == body
    assert seen["content_type"] == "text/plain"


def _is_sections_of(body: bytes, value: Any) -> bool:
    parsed = parse_message(body)
    got = parsed.body()
    return isinstance(got, AmqpValue) and got.value == value


@pytest.mark.parametrize("sink", ["0-9-1", "1.0", "0-10", "0-9", "fast"])
def test_an_amqp_value_body_crosses(target: Target, sink: str) -> None:
    queue = _declare(target, stream=False)
    _publish_10(target, queue, b"", {"proton": _proton_message(TEXT, inferred=False)})
    seen = CONSUME[sink](target, queue, False)
    if sink == "1.0":
        assert seen["body"] == TEXT
        return
    # Every other protocol gets the encoded 1.0 body (RabbitMQ 4: type amqp-1.0 over 0-9-1).
    assert _is_sections_of(seen["body"], TEXT)
    if sink in ("0-9-1", "0-10", "0-9"):
        assert seen["type"] == "amqp-1.0"


@pytest.mark.parametrize("sink", ["0-9-1", "1.0", "stream"])
def test_an_amqp_sequence_body_from_the_stream_protocol_crosses(target: Target, sink: str) -> None:
    queue = _declare(target, stream=True)
    sent = _rstream_message(sequence=[[1, "two"]])  # rstream: a list of sections
    _publish_stream(target, queue, b"", {"rstream": sent})
    seen = CONSUME[sink](target, queue, True)
    if sink == "stream":
        assert seen["record"] == bytes(sent)
    elif sink == "1.0":
        assert list(seen["body"]) == [1, "two"]
    else:
        assert seen["type"] == "amqp-1.0"
        parsed = parse_message(seen["body"])
        sequences = parsed.body()
        assert isinstance(sequences, list)
        assert [s.value for s in sequences] == [[1, "two"]]  # one amqp-sequence section


def test_an_amqp_1_0_typed_0_9_1_body_reaches_1_0_as_its_value(target: Target) -> None:
    queue = _declare(target, stream=False)
    sections = AmqpValue({"k": [1, 2]}).encode()
    _publish_091(target, queue, sections, {"type": "amqp-1.0"})
    assert _consume_10(target, queue, False)["body"] == {"k": [1, 2]}


# -- values at the edges of either side ---------------------------------------------------------


def test_values_one_side_cannot_hold_cross_without_an_error(target: Target) -> None:
    """What 1.0 or 0-9-1 has no place for is kept where the other side can hold it (these
    ended deliveries with an internal error before)."""
    queue = _declare(target, stream=False)
    with _pika(target) as conn:
        conn.channel().basic_publish(
            "",
            queue,
            b"a",
            pika.BasicProperties(
                content_type="tëxt/plain",  # a 1.0 symbol holds ASCII only
                expiration="315360000000",  # ten years in ms: past a 1.0 uint
                headers={"x-ünï": "v"},  # not a symbol: an application property
            ),
        )
    m = _receive_10(target, queue, False)
    assert m.ttl == (2**32 - 1) / 1000
    assert m.annotations[symbol("x-basic-content-type")] == "tëxt/plain"
    assert m.properties == {"x-ünï": "v"}
    c = BlockingConnection(_proton_url(target), timeout=TIMEOUT)
    try:
        c.create_sender(f"/queues/{queue}").send(
            Message(
                body=b"b",
                inferred=True,
                properties={"huge": ulong(2**64 - 1), "far": timestamp(2**62)},
                creation_time=-5.0,
            )
        )
    finally:
        c.close()
    seen = _consume_091(target, queue, False)
    assert seen["headers"] == {"huge": str(2**64 - 1), "far": 2**62}
    assert seen["timestamp"] is None
