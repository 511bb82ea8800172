"""Our server-role machine against Apache Qpid Proton's protocol engine, in memory (proton's
``Transport`` is sans-IO too: bytes are moved by hand, no socket): SASL PLAIN, sessions,
links, messages both ways (including multi-frame ones), settlement, drain, dynamic nodes,
refusals, closes and heartbeats, all as a real 1.0 client library speaks them."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from leveret.protocol.amqp10 import (
    Accepted,
    AmqpSequence,
    AmqpValue,
    ConnectionClosed,
    CreditGranted,
    Data,
    DispositionReceived,
    Error,
    Header,
    LinkAttachRequested,
    LinkDetached,
    MessageReceived,
    Properties,
    Role,
    SaslAuthRequested,
    Source,
    encode_message,
    parse_message,
)
from leveret.protocol.amqp10.connection import Connection
from leveret.testing.amqp10 import server_config

if TYPE_CHECKING:
    from leveret.protocol.amqp10.events import Event

proton = pytest.importorskip("proton")


class ProtonPeer:
    """A proton client connection bound to a transport, wired to our server machine."""

    def __init__(
        self,
        *,
        max_frame_size: int = 0,
        idle_timeout: float = 0,
        password: str = "secret",
        **server: Any,
    ) -> None:
        self.server = Connection(server_config(**server))
        self.conn = proton.Connection()
        self.conn.container = "proton-peer"
        self.conn.hostname = "vhost:/"
        self.conn.user = "guest"
        self.conn.password = password
        self.transport = proton.Transport()
        if max_frame_size:
            self.transport.max_frame_size = max_frame_size
        if idle_timeout:
            self.transport.idle_timeout = idle_timeout
        sasl = self.transport.sasl()
        sasl.allowed_mechs("PLAIN")
        sasl.allow_insecure_mechs = True  # PLAIN without TLS: fine in memory
        self.transport.bind(self.conn)
        self.now = 0.0
        self._out = bytearray()  # our output proton has no room for yet
        self.events: list[Event] = []
        self.answer_attach: Any = lambda ev: self.server.accept_link(
            ev.channel, ev.handle, credit=100, auto_credit=True
        )

    def pump(self) -> list[Event]:
        got: list[Event] = []
        for _ in range(200):
            moved = False
            pending = self.transport.pending()
            if pending > 0:
                data = bytes(self.transport.peek(pending))
                self.transport.pop(len(data))
                moved = True
                new = self.server.receive_data(data, self.now)
                while new:
                    got += new
                    answered = False
                    for event in new:
                        if isinstance(event, SaslAuthRequested):
                            self.server.answer_sasl(event.password == "secret")
                            answered = True
                        elif isinstance(event, LinkAttachRequested):
                            self.answer_attach(event)
                    new = self.server.receive_data(b"", self.now) if answered else []
            self._out += self.server.data_to_send(self.now)
            room = self.transport.capacity()
            if self._out and room > 0:
                self.transport.push(bytes(self._out[:room]))
                del self._out[:room]
                moved = True
            if not moved:
                break
        self.events += got
        return got

    def open(self) -> Any:
        self.conn.open()
        session = self.conn.session()
        session.open()
        self.pump()
        return session


T = TypeVar("T")


def _of(events: list[Event], kind: type[T]) -> list[T]:
    return [e for e in events if isinstance(e, kind)]


def test_proton_publishes_and_we_settle() -> None:
    peer = ProtonPeer()
    session = peer.open()
    assert peer.conn.remote_container == "server"
    sender = session.sender("publisher")
    sender.target.address = "/queues/q"
    sender.open()
    peer.pump()
    assert sender.credit == 100
    messages = [
        proton.Message(body="text", subject="s", id="m1", durable=True, priority=7, ttl=1.5),
        proton.Message(body=b"\x00\x01bytes", properties={"k": "v", "n": 3}),
        proton.Message(body=[1, "two", None], correlation_id=uuid.uuid4()),
        proton.Message(body={"a": 1.5}, content_type="application/json", reply_to="/queues/r"),
    ]
    deliveries = []
    for i, m in enumerate(messages):
        deliveries.append(sender.delivery(b"tag%d" % i))
        sender.send(m.encode())
        sender.advance()
    events = peer.pump()
    received = _of(events, MessageReceived)
    assert [r.delivery_tag for r in received] == [b"tag0", b"tag1", b"tag2", b"tag3"]
    for r, m in zip(received, messages, strict=True):
        msg = parse_message(r.payload)
        props = msg.properties()
        assert props is not None
        assert props.message_id == m.id
        assert props.subject == m.subject
        assert props.correlation_id == m.correlation_id
        assert props.reply_to == m.reply_to
        assert msg.application_properties() == (m.properties or {})
        body = msg.body()
        assert isinstance(body, AmqpValue)
        assert body.value == m.body
        # The bare message survives a re-annotation byte for byte, as proton encoded it.
        again = parse_message(b"".join(msg.reannotated(header=Header(delivery_count=1))))
        assert again.bare == msg.bare
    header = parse_message(received[0].payload).header()
    assert header is not None
    assert (header.durable, header.priority, header.ttl) == (True, 7, 1500)
    peer.server.settle(
        received[0].channel, received[0].delivery_id, received[-1].delivery_id, role=Role.RECEIVER
    )
    peer.pump()
    assert all(d.remote_state == proton.Delivery.ACCEPTED and d.settled for d in deliveries)


def test_we_deliver_and_proton_accepts() -> None:
    peer = ProtonPeer()
    session = peer.open()
    receiver = session.receiver("consumer")
    receiver.source.address = "/queues/q"
    receiver.open()
    receiver.flow(3)
    events = peer.pump()
    granted = _of(events, CreditGranted)[-1]
    assert granted.credit == 3
    payloads = [
        encode_message(Data(b"raw"), properties=Properties(message_id="a", subject="x")),
        encode_message(AmqpValue({"k": [1, 2]}), application_properties={"h": "v"}),
        encode_message([AmqpSequence([1, "x"])], header=Header(durable=True)),
    ]
    ids = [peer.server.send_transfer(granted.channel, granted.handle, p) for p in payloads]
    peer.pump()
    got = []
    while receiver.current is not None:
        delivery = receiver.current
        data = receiver.recv(delivery.pending)
        message = proton.Message()
        message.decode(data)
        got.append(message)
        receiver.advance()  # before settle(), which would advance past the next one itself
        delivery.update(proton.Delivery.ACCEPTED)
        delivery.settle()
    assert [m.id for m in got] == ["a", None, None]
    assert bytes(got[0].body) == b"raw"
    assert got[0].subject == "x"
    assert got[1].body == {"k": [1, 2]}
    assert got[1].properties == {"h": "v"}
    assert got[2].body == [1, "x"]
    assert got[2].durable
    dispositions = _of(peer.pump(), DispositionReceived)
    settled = sorted(i for d in dispositions for i in range(d.first, d.last + 1))
    assert settled == ids
    assert all(
        d.settled and d.state == Accepted() and d.role == Role.RECEIVER for d in dispositions
    )


def test_multi_frame_messages_both_ways() -> None:
    peer = ProtonPeer(max_frame_size=512)
    session = peer.open()
    sender = session.sender("p")
    sender.target.address = "q"
    sender.open()
    receiver = session.receiver("c")
    receiver.source.address = "q"
    receiver.open()
    receiver.flow(1)
    events = peer.pump()
    big = bytes(range(256)) * 40
    sender.delivery(b"big")
    sender.send(proton.Message(body=big).encode())
    sender.advance()
    got = _of(peer.pump(), MessageReceived)
    body = parse_message(got[0].payload).body()
    assert isinstance(body, AmqpValue)
    assert body.value == big
    credit = _of(events, CreditGranted)[0]
    peer.server.send_transfer(credit.channel, credit.handle, got[0].payload, settled=True)
    peer.pump()
    delivery = receiver.current
    assert delivery is not None
    assert not delivery.partial
    message = proton.Message()
    message.decode(receiver.recv(delivery.pending))
    assert message.body == big


def test_drain_and_dynamic_reply_queue() -> None:
    peer = ProtonPeer()
    session = peer.open()

    def dynamic(ev: LinkAttachRequested) -> None:
        assert ev.source is not None
        source = Source(address="/queues/amq.gen-42") if ev.source.dynamic else None
        peer.server.accept_link(ev.channel, ev.handle, source=source or ev.source)

    peer.answer_attach = dynamic
    receiver = session.receiver("replies")
    receiver.source.dynamic = True
    receiver.open()
    peer.pump()
    assert receiver.remote_source.address == "/queues/amq.gen-42"
    receiver.drain(5)
    granted = _of(peer.pump(), CreditGranted)[-1]
    assert (granted.credit, granted.drain) == (5, True)
    peer.server.drained(granted.channel, granted.handle)
    peer.pump()
    assert receiver.credit == 0
    assert receiver.draining() is False


def test_refused_link_and_server_close() -> None:
    peer = ProtonPeer()
    session = peer.open()
    peer.answer_attach = lambda ev: peer.server.refuse_link(
        ev.channel, ev.handle, Error(condition="amqp:not-found", description="no queue 'x'")
    )
    sender = session.sender("p")
    sender.target.address = "/queues/x"
    sender.open()
    peer.pump()
    assert sender.remote_condition.name == "amqp:not-found"
    assert sender.remote_condition.description == "no queue 'x'"
    sender.close()  # proton answers a remote detach when the application closes its end
    assert _of(peer.pump(), LinkDetached)[0].local
    peer.server.close(Error(condition="amqp:connection:forced", description="shutdown"))
    peer.pump()
    assert peer.conn.remote_condition.name == "amqp:connection:forced"
    peer.conn.close()
    events = peer.pump()
    assert _of(events, ConnectionClosed)[0].local
    assert peer.server.closed


def test_heartbeats_keep_an_idle_connection_and_silence_ends_it() -> None:
    peer = ProtonPeer(idle_timeout=2.0, idle_time_out=1000)
    peer.open()
    for _ in range(40):  # 10 s of an idle connection, each side sending its heartbeats
        peer.now += 0.25
        peer.transport.tick(peer.now)
        peer.server.handle_timer(peer.now)
        peer.pump()
    assert peer.server.state.value == "opened"
    assert peer.conn.remote_condition is None
    # Proton stops ticking: after a second of silence the server closes the connection.
    peer.now += 1.0
    closed = _of(peer.server.handle_timer(peer.now), ConnectionClosed)
    assert closed[0].error is not None
    assert closed[0].error.condition == "amqp:resource-limit-exceeded"
    peer.pump()
    condition: Any = peer.conn.remote_condition  # (mypy narrowed the attribute to None above)
    assert condition.name == "amqp:resource-limit-exceeded"


def test_wrong_password_is_refused() -> None:
    peer = ProtonPeer(password="wrong")
    peer.open()
    assert peer.server.closed
    assert _of(peer.events, ConnectionClosed)[0].error == Error(
        condition="amqp:unauthorized-access", description="authentication with PLAIN failed"
    )
    assert peer.transport.condition is not None
