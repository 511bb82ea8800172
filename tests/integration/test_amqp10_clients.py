"""The AMQP 1.0 front end driven by real 1.0 clients: Qpid Proton (blocking and reactor
APIs), RabbitMQ's own 1.0 client (``rabbitmq-amqp-python-client``: the management node,
publish, consume, settle, streams), and messages crossing between 1.0 and 0-9-1 (pika) with
every property compared. Leveret only: RabbitMQ 3.10's 1.0 plugin has neither the v2
addresses nor the management node."""

from __future__ import annotations

import datetime
import signal
import threading
import uuid
from typing import TYPE_CHECKING, Any

import pika
import pytest
from proton import Message, Terminus, symbol
from proton.handlers import MessagingHandler
from proton.reactor import Container, LinkOption
from proton.utils import BlockingConnection

from tests.integration.conftest import start_broker

if TYPE_CHECKING:
    from pathlib import Path

    from tests.integration.conftest import Broker

pytestmark = [pytest.mark.interop, pytest.mark.leveret_only, pytest.mark.timeout(60)]


def _url(broker: Broker) -> str:
    return f"amqp://guest:guest@{broker.host}:{broker.port}"


def _pika(broker: Broker) -> Any:
    return pika.BlockingConnection(pika.ConnectionParameters(host=broker.host, port=broker.port))


def _get(receiver: Any, timeout: float) -> Any:
    """The next message (proton's types are too narrow for the assertions below)."""
    return receiver.receive(timeout=timeout)


def test_proton_blocking_send_receive_settle(broker: Broker, name: str) -> None:
    with _pika(broker) as conn:
        conn.channel().queue_declare(name)
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        sender = c.create_sender(f"/queues/{name}")
        for i in range(3):
            sender.send(Message(body=f"m{i}", id=f"id{i}", properties={"i": i}, durable=True))
        receiver = c.create_receiver(f"/queues/{name}", credit=10)
        first = _get(receiver, 5)
        assert (first.body, first.id, first.properties) == ("m0", "id0", {"i": 0})
        assert first.annotations[symbol("x-routing-key")] == name
        receiver.release()  # back to its place, redelivered
        again = _get(receiver, 5)
        assert again.body == "m1"
        receiver.accept()
        redelivered = _get(receiver, 5)
        assert redelivered.body in ("m0", "m2")
        receiver.accept()
        last = _get(receiver, 5)
        receiver.accept()
        assert {redelivered.body, last.body} == {"m0", "m2"}
        rerun = redelivered if redelivered.body == "m0" else last
        assert rerun.delivery_count >= 1
        assert not rerun.first_acquirer
    finally:
        c.close()
    with _pika(broker) as conn:
        assert conn.channel().queue_declare(name, passive=True).method.message_count == 0


def test_release_and_detach_in_one_write_keep_the_connection(broker: Broker, name: str) -> None:
    # The broker reads the release and the detach in one turn: the requeued message must not
    # go back to the link the peer has detached (it once did, and the connection died with
    # an internal error).
    with _pika(broker) as conn:
        conn.channel().queue_declare(name)
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        c.create_sender(f"/queues/{name}").send(Message(body="m"))
        receiver = c.create_receiver(f"/queues/{name}", credit=2)
        assert _get(receiver, 5).body == "m"
        receiver.release()  # settled at once; written with the detach below
        receiver.close()  # type: ignore[no-untyped-call]
        again = c.create_receiver(f"/queues/{name}", credit=1)
        back = _get(again, 5)
        assert (back.body, back.delivery_count) == ("m", 1)
        again.accept()
    finally:
        c.close()


def test_unknown_queue_is_refused_with_not_found(broker: Broker) -> None:
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        with pytest.raises(Exception, match="not-found"):
            c.create_receiver(f"/queues/missing-{uuid.uuid4().hex}")
    finally:
        c.close()


def test_a_queue_in_exclusive_use_refuses_the_attach_not_the_connection(
    broker: Broker, name: str
) -> None:
    """A receiver of a queue an exclusive 0-9-1 consumer holds is refused (403, RabbitMQ's
    "in exclusive use") and its connection goes on. Before, the attach was answered and
    then refused, and the connection closed with amqp:illegal-state."""
    with _pika(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name)
        ch.basic_consume(name, lambda *_: None, exclusive=True)
        c = BlockingConnection(_url(broker), timeout=10)
        try:
            with pytest.raises(Exception, match=r"unauthorized-access.*exclusive use"):
                c.create_receiver(f"/queues/{name}")
            c.create_sender(f"/queues/{name}").send(Message(body="still open"))
        finally:
            c.close()


def test_exchange_address_and_unroutable_is_released(broker: Broker, name: str) -> None:
    with _pika(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name)
        ch.queue_bind(name, "amq.direct", routing_key=name)
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        sender = c.create_sender(f"/exchanges/amq.direct/{name}")
        sender.send(Message(body="routed"))
        nowhere = c.create_sender("/exchanges/amq.direct/nobody-binds-this")
        delivery = nowhere.send(Message(body="lost"), error_states=[])
        assert delivery.remote_state == delivery.RELEASED
        anonymous = c.create_sender(None)
        anonymous.send(Message(body="by to", address=f"/queues/{name}"))
        receiver = c.create_receiver(f"/queues/{name}")
        got = [_get(receiver, 5).body for _ in range(2)]
        receiver.accept()
        assert got == ["routed", "by to"]
    finally:
        c.close()


class _Requester(MessagingHandler):
    """Proton's client.py example: requests with a dynamic reply-to queue."""

    def __init__(self, url: str, service: str, requests: list[str]) -> None:
        super().__init__()
        self.url, self.service, self.requests = url, service, list(requests)
        self.replies: list[str] = []

    def on_start(self, event: Any) -> None:
        conn = event.container.connect(self.url)
        self.sender = event.container.create_sender(conn, self.service)
        self.receiver = event.container.create_receiver(conn, None, dynamic=True)

    def on_link_opened(self, event: Any) -> None:
        if event.receiver == self.receiver:
            self.reply_to = event.receiver.remote_source.address
            for text in self.requests:
                self.sender.send(Message(reply_to=self.reply_to, body=text))

    def on_message(self, event: Any) -> None:
        self.replies.append(event.message.body)
        if len(self.replies) == len(self.requests):
            event.connection.close()


class _Server(MessagingHandler):
    """Proton's server.py example: uppercase each request, answer to its reply-to."""

    def __init__(self, url: str, queue: str, count: int) -> None:
        super().__init__()
        self.url, self.queue, self.count = url, queue, count

    def on_start(self, event: Any) -> None:
        self.conn = event.container.connect(self.url)
        event.container.create_receiver(self.conn, self.queue)
        self.anonymous = event.container.create_sender(self.conn, None)

    def on_message(self, event: Any) -> None:
        request = event.message
        self.anonymous.send(Message(address=request.reply_to, body=request.body.upper()))
        self.count -= 1
        if self.count == 0:
            event.connection.close()


def test_proton_container_request_reply_with_dynamic_reply_queue(broker: Broker, name: str) -> None:
    with _pika(broker) as conn:
        conn.channel().queue_declare(name)
    url = _url(broker)
    # Two programs, as in proton's examples: the server's container runs in a thread.
    server = threading.Thread(target=Container(_Server(url, f"/queues/{name}", 3)).run, daemon=True)
    server.start()
    requester = _Requester(url, f"/queues/{name}", ["one", "two", "three"])
    Container(requester).run()
    server.join(10)
    assert requester.replies == ["ONE", "TWO", "THREE"]
    assert requester.reply_to.startswith("/queues/amq.gen-")


def test_pika_publishes_proton_receives_every_property(broker: Broker, name: str) -> None:
    stamp = datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC)
    with _pika(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name)
        ch.basic_publish(
            "",
            name,
            b"body bytes",
            pika.BasicProperties(
                content_type="text/plain",
                content_encoding="utf-8",
                headers={"s": "v", "n": 7, "b": True, "t": stamp, "x-custom": "ann"},
                delivery_mode=2,
                priority=3,
                correlation_id="corr",
                reply_to="/queues/r",
                expiration="60000",
                message_id="urn:uuid:12345678-1234-5678-1234-567812345678",
                timestamp=1700000000,
                type="kind",
                user_id="guest",
                app_id="app",
            ),
        )
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        m = _get(c.create_receiver(f"/queues/{name}"), 5)
        assert bytes(m.body) == b"body bytes"
        assert m.content_type == "text/plain"
        assert m.content_encoding == "utf-8"
        assert m.properties == {"s": "v", "n": 7, "b": True, "t": 1714564800000}
        assert m.annotations[symbol("x-custom")] == "ann"
        assert m.annotations[symbol("x-basic-type")] == "kind"
        assert m.annotations[symbol("x-exchange")] == ""
        assert m.durable
        assert m.priority == 3
        assert m.ttl == 60.0
        assert m.correlation_id == "corr"
        assert m.reply_to == "/queues/r"
        assert str(m.id) == "12345678-1234-5678-1234-567812345678"
        assert m.creation_time == 1700000000.0
        assert m.user_id == b"guest"
        assert m.group_id == "app"
    finally:
        c.close()


def test_proton_sends_pika_consumes_every_property(broker: Broker, name: str) -> None:
    with _pika(broker) as conn:
        conn.channel().queue_declare(name)
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        c.create_sender(f"/queues/{name}").send(
            Message(
                body=b"raw",
                inferred=True,
                id="mid",
                correlation_id="cid",
                reply_to="rt",
                content_type="application/octet-stream",
                content_encoding="gzip",
                creation_time=1700000000.0,
                group_id="grp",
                user_id=b"guest",
                properties={"p": "q", "n": 1},
                annotations={symbol("x-opt-thing"): "t"},
                durable=False,
                priority=5,
                ttl=30.0,
            )
        )
    finally:
        c.close()
    with _pika(broker) as conn:
        method, props, body = conn.channel().basic_get(name, auto_ack=True)
    assert method is not None
    assert body == b"raw"
    assert props.headers == {"p": "q", "n": 1, "x-opt-thing": "t"}
    assert (props.message_id, props.correlation_id, props.reply_to) == ("mid", "cid", "rt")
    assert props.content_type == "application/octet-stream"
    assert props.content_encoding == "gzip"
    assert props.timestamp == 1700000000
    assert props.app_id == "grp"
    assert props.user_id == "guest"
    # Proton leaves durable=false out of the header; like RabbitMQ 4, a message that does not
    # say durable=false is durable.
    assert props.delivery_mode == 2
    assert props.priority == 5
    assert props.expiration == "30000"
    assert props.type is None


def test_amqp_value_body_reaches_pika_as_encoded_sections(broker: Broker, name: str) -> None:
    with _pika(broker) as conn:
        conn.channel().queue_declare(name)
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        c.create_sender(f"/queues/{name}").send(Message(body={"k": [1, 2]}))
    finally:
        c.close()
    with _pika(broker) as conn:
        _m, props, body = conn.channel().basic_get(name, auto_ack=True)
    assert props.type == "amqp-1.0"
    decoded = Message()
    decoded.decode(body)
    assert decoded.body == {"k": [1, 2]}


def test_durable_amqp10_messages_survive_kill_9(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    broker = start_broker("--data-dir", data_dir)
    try:
        with _pika(broker) as conn:
            conn.channel().queue_declare("durable-10", durable=True)
        c = BlockingConnection(_url(broker), timeout=10)
        sender = c.create_sender("/queues/durable-10")
        for i in range(20):
            sender.send(Message(body=f"d{i}", properties={"i": i}, durable=True))
        c.close()
        with _pika(broker) as conn:
            conn.channel().basic_publish("", "durable-10", b"transient")  # delivery-mode 1
    finally:
        broker.stop(signal.SIGKILL)
    again = start_broker("--data-dir", data_dir)
    try:
        c = BlockingConnection(_url(again), timeout=10)
        receiver = c.create_receiver("/queues/durable-10", credit=50)
        got = [_get(receiver, 5) for _ in range(20)]
        receiver.accept()
        assert [m.body for m in got] == [f"d{i}" for i in range(20)]
        assert [m.properties["i"] for m in got] == list(range(20))
        with pytest.raises(Exception, match="timed out"):
            _get(receiver, 0.5)
        c.close()
    finally:
        again.stop()


def test_stream_read_over_amqp10_from_first(broker: Broker, name: str) -> None:
    with _pika(broker) as conn:
        ch = conn.channel()
        ch.queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
        for i in range(5):
            ch.basic_publish("", name, f"s{i}".encode())
    from proton.reactor import Filter

    c = BlockingConnection(_url(broker), timeout=10)
    try:
        first: Any = "first"
        offset = Filter({symbol("rabbitmq:stream-offset-spec"): first})
        receiver = c.create_receiver(f"/queues/{name}", credit=10, options=offset)
        got = [_get(receiver, 5) for _ in range(5)]
        receiver.accept()
        assert [bytes(m.body) for m in got] == [f"s{i}".encode() for i in range(5)]
        assert [m.annotations[symbol("x-stream-offset")] for m in got] == list(range(5))
    finally:
        c.close()


def test_rabbitmq_amqp_client_declares_publishes_consumes(broker: Broker, name: str) -> None:
    rmq = pytest.importorskip("rabbitmq_amqp_python_client")
    env = rmq.Environment(f"amqp://guest:guest@{broker.host}:{broker.port}/")
    conn = env.connection()
    conn.dial()
    management = conn.management()
    try:
        management.declare_queue(rmq.ClassicQueueSpecification(name=name))
        exchange = f"{name}.x"
        management.declare_exchange(rmq.ExchangeSpecification(name=exchange))
        binding = management.bind(
            rmq.ExchangeToQueueBindingSpecification(
                source_exchange=exchange, destination_queue=name, binding_key="k"
            )
        )
        publisher = conn.publisher(rmq.AddressHelper.exchange_address(exchange, "k"))
        for i in range(4):
            status = publisher.publish(rmq.Message(body=rmq.Converter.string_to_bytes(f"m{i}")))
            assert status.remote_state == status.ACCEPTED
        publisher.close()
        info = management.queue_info(name)
        assert info.message_count == 4
        assert info.is_durable

        received: list[str] = []

        base: Any = rmq.AMQPMessagingHandler

        class Handler(base):  # type: ignore[misc]
            def on_amqp_message(self, event: Any) -> None:
                received.append(rmq.Converter.bytes_to_string(event.message.body))
                if len(received) == 2:
                    self.delivery_context.discard(event)  # rejected: gone (no DLX)
                else:
                    self.delivery_context.accept(event)
                if len(received) == 4:
                    raise StopIteration

        consumer = conn.consumer(rmq.AddressHelper.queue_address(name), message_handler=Handler())
        with pytest.raises(StopIteration):
            consumer.run()
        consumer.close()
        assert received == ["m0", "m1", "m2", "m3"]
        assert management.purge_queue(name) == 0
        management.unbind(binding)
        management.delete_exchange(exchange)
        management.delete_queue(name)
    finally:
        management.close()
        conn.close()


def test_open_names_leveret_beside_the_rabbitmq_dialect(broker: Broker) -> None:
    """RabbitMQ's 1.0 clients refuse a server whose ``open`` does not say product RabbitMQ,
    version 4 or later (docs/compatibility.md); Leveret says so, and names itself."""
    from leveret import __version__

    c: Any = BlockingConnection(_url(broker), timeout=10)
    try:
        props = dict(c.conn.remote_properties)
    finally:
        c.close()
    assert props[symbol("product")] == "RabbitMQ"
    assert props[symbol("version")] == "4.0.0"
    assert props[symbol("leveret-version")] == __version__
    assert "Leveret" in props[symbol("platform")]


def test_v1_queue_addresses_declare_their_queue(broker: Broker, name: str) -> None:
    # RabbitMQ 3's plugin and RabbitMQ 4 declare the queue of a bare name or /queue/NAME at
    # attach: a classic queue, durable when the terminus is (Proton's examples use "examples").
    c = BlockingConnection(_url(broker), timeout=10)
    try:
        c.create_receiver(f"{name}.bare")
        c.create_sender(f"/queue/{name}.durable", options=_DurableTarget())
    finally:
        c.close()
    with _pika(broker) as conn:
        channel = conn.channel()
        channel.queue_declare(f"{name}.durable", durable=True)  # equivalent: no 406
        with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="durable"):
            channel.queue_declare(f"{name}.bare", durable=True)


class _DurableTarget(LinkOption):
    def apply(self, link: Any) -> None:
        link.target.durability = Terminus.DELIVERIES


def test_sender_may_attach_to_another_connections_exclusive_queue(broker: Broker) -> None:
    # Exclusive queues refuse other connections' consumers, not their messages: Proton's
    # server_tx example attaches a sender to each client's dynamic reply queue.
    client = BlockingConnection(_url(broker), timeout=10)
    server = BlockingConnection(_url(broker), timeout=10)
    try:
        replies = client.create_receiver(None, dynamic=True, credit=1)
        reply_to = replies.remote_source.address
        assert reply_to.startswith("/queues/amq.gen-")
        server.create_sender(reply_to).send(Message(body="answer"))
        got: Any = replies.receive(timeout=5)
        replies.accept()
        assert got.body == "answer"
    finally:
        server.close()
        client.close()
