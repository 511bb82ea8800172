"""The AMQP/Fast server machine driven by the test client, in memory (no sockets).

A tiny front end (:class:`Pair`) moves octets both ways and answers the server's decisions
(login, virtual host) the way a broker would; each test then follows one RFC dialogue.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, TypeVar

import pytest

from leveret.protocol.amqpfast import commands as c
from leveret.protocol.amqpfast import events as ev
from leveret.protocol.amqpfast.framing import CommandDecoder, encode_command
from leveret.protocol.amqpfast.server import NEED_DATA, PAUSED, FastServer, State
from leveret.testing import amqpfast_client as fc

if TYPE_CHECKING:
    from collections.abc import Callable

# Left out of the compiled pass (scripts/test): the AMQP/Fast machine is not compiled.
pytestmark = pytest.mark.pure_only

E = TypeVar("E", bound=ev.Event)
C = TypeVar("C", bound=fc.ClientEvent)


class Pair:
    """A client and a server joined in memory; ``events`` collects the server's events."""

    def __init__(self, *, client: fc.FastClient | None = None, **server_args: object) -> None:
        self.client = client or fc.FastClient()
        self.server = FastServer(**server_args)  # type: ignore[arg-type]
        self.events: list[ev.Event] = []
        self.client_events: list[fc.ClientEvent] = []
        self.users = {"guest": "guest"}
        self.vhosts = {"/"}
        self.now = 0.0

    def pump(self) -> None:
        """Move octets until both sides are quiet."""
        for _ in range(100):
            up = self.client.data_to_send()
            if up:
                self.server.receive_data(up, self.now)
            self._serve()
            down = self.server.data_to_send()
            if down:
                self.client_events += self.client.receive_data(down)
            if not up and not down:
                return
        raise AssertionError("the two sides never went quiet")

    def _serve(self) -> None:
        while True:
            event = self.server.next_event()
            if event is NEED_DATA:
                return
            if event is PAUSED:
                pytest.fail("the front end owes an answer it does not know")
            assert isinstance(event, ev.Event)
            self.events.append(event)
            if isinstance(event, ev.LoginRequested):
                if self.users.get(event.login) == event.password:
                    self.server.accept_login()
                else:
                    self.server.refuse_login()
            elif isinstance(event, ev.OpenRequested):
                if event.virtual_path in self.vhosts:
                    self.server.accept_open()
                else:
                    self.server.refuse_open(402, "no such virtual host")

    def connect(self) -> None:
        self.client.initiate()
        self.pump()
        assert self.server.state is State.OPEN

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    def client_of(self, kind: type[C]) -> list[C]:
        return [e for e in self.client_events if isinstance(e, kind)]


@pytest.fixture
def pair() -> Pair:
    p = Pair(frame_max=1024)
    p.connect()
    p.events.clear()
    p.client_events.clear()
    return p


def test_connection_dialogue() -> None:
    p = Pair(
        client=fc.FastClient(client_name="me", heartbeat=5, dictionary={"ET": "Expiration-Time"})
    )
    p.client.initiate()
    p.pump()
    assert p.server.version == 1
    (login,) = p.of(ev.LoginRequested)
    assert login == ev.LoginRequested("PLAIN", "guest", "guest")
    (opened,) = p.of(ev.OpenRequested)
    assert (opened.virtual_path, opened.client_name) == ("/", "me")
    (connected, reply) = p.client_events
    assert isinstance(connected, fc.Connected)
    assert connected.options == {"FRAME_MAX": 131072, "HEARTBEAT": 0}
    assert reply == fc.Replied("connection", 0, 1, 200, "OK")
    assert p.server.client_heartbeat == 5
    assert p.server.dictionary == {"ET": "Expiration-Time"}
    p.client.close()
    p.pump()
    assert p.of(ev.ConnectionClosed) == [ev.ConnectionClosed(200, "OK", by_client=True)]
    assert p.client_events[-1] == fc.ConnectionClosed(200, "OK", by_server=False)
    assert p.server.state is State.CLOSED


def test_version_negotiation_and_bad_initiations() -> None:
    server = FastServer()
    server.receive_data(b"\x80\x07", 0)  # a client that speaks up to version 7
    assert server.next_event() is NEED_DATA
    decoder = CommandDecoder()
    decoder.receive(server.data_to_send())
    assert decoder.next() == c.ConnectionChallenge(1, "PLAIN", {})
    for bad in (b"AM", b"\x80\x00", b"\x81\x01"):
        server = FastServer()
        server.receive_data(bad, 0)
        event = server.next_event()
        assert isinstance(event, ev.ConnectionClosed)
        assert event.reply_code == 501
        assert server.data_to_send() == b""  # 3.2.2: the socket is just closed


@pytest.mark.parametrize(
    ("user", "mechanism", "expect"),
    [("guest", "PLAIN", 200), ("bad", "PLAIN", 403), ("guest", "TLS", 403)],
)
def test_login(user: str, mechanism: str, expect: int) -> None:
    p = Pair(client=fc.FastClient(login=user, mechanism=mechanism))
    p.client.initiate()
    p.pump()
    if expect == 200:
        assert p.server.state is State.OPEN
        return
    (closed,) = p.client_of(fc.ConnectionClosed)
    assert (closed.reply_code, closed.by_server) == (expect, True)
    assert p.of(ev.ConnectionClosed)[0].by_client is False


def test_none_mechanism_and_refused_vhost() -> None:
    p = Pair(client=fc.FastClient(virtual_path="/nope"), mechanisms=("NONE",))
    p.users[""] = ""
    p.client.initiate()
    p.pump()
    assert p.of(ev.LoginRequested) == [ev.LoginRequested("NONE", "", "")]
    assert p.client_events[-1] == fc.ConnectionClosed(402, "no such virtual host", True)


def test_pipelined_commands_wait_for_the_open_decision() -> None:
    server = FastServer()
    client = fc.FastClient(open_confirm_tag=0)
    client.initiate()
    server.receive_data(client.data_to_send(), 0)
    assert server.next_event() is NEED_DATA
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send(), 0)
    assert isinstance(server.next_event(), ev.LoginRequested)
    assert server.next_event() is PAUSED
    server.accept_login()
    client.receive_data(server.data_to_send())
    client.open_channel(1)  # sent right behind CONNECTION OPEN, before any reply
    server.receive_data(client.data_to_send(), 0)
    assert isinstance(server.next_event(), ev.OpenRequested)
    assert server.next_event() is PAUSED
    server.accept_open()
    assert server.next_event() == ev.ChannelOpened(1, False, False)


def test_tune_limits() -> None:
    p = Pair(client=fc.FastClient(frame_max=512), frame_max=2048)
    p.client.initiate()
    p.pump()
    (closed,) = p.client_of(fc.ConnectionClosed)
    assert (closed.reply_code, closed.reply_text) == (530, "FRAME_MAX 512 outside 1024..2048")
    with pytest.raises(ValueError, match="1024"):
        FastServer(frame_max=1000)


def test_send_fragmented_message_with_confirmation(pair: Pair) -> None:
    pair.client.open_channel(1, confirm_tag=5)
    pair.client.open_handle(1, 2, dest_name="alt.rec.", producer=True, confirm_tag=6)
    body = bytes(range(256)) * 12  # 3072 octets: four fragments at FRAME_MAX 1024
    header = c.MessageHeader(persistent=True, priority=7, mime_type="text/plain", headers={"A": 1})
    assert pair.client.send(2, body, dest_name="pets", confirm_tag=9, header=header) == 4
    pair.pump()
    assert pair.client_of(fc.Replied) == [
        fc.Replied("channel", 1, 5, 200, "OK"),
        fc.Replied("handle", 2, 6, 200, "OK"),
        fc.Replied("handle", 2, 9, 200, "OK"),
    ]
    (message,) = pair.of(ev.MessageReceived)
    assert isinstance(message, ev.MessageReceived)
    assert message.destination == "alt.rec.pets"  # 3.5.2.3: open name + send name
    assert message.body == body
    assert (message.header.persistent, message.header.priority, message.header.headers) == (
        True,
        7,
        {"A": 1},
    )
    assert (message.channel_id, message.handle_id, message.transacted) == (1, 2, False)


def test_dictionary_aliases_expand_header_names() -> None:
    p = Pair(client=fc.FastClient(dictionary={"ET": "Expiration-Time"}))
    p.connect()
    p.client.open_channel(1)
    p.client.open_handle(1, 1, dest_name="q", producer=True)
    p.client.send(1, b"x", header=c.MessageHeader(headers={"ET": 5, "Other": 1}))
    p.pump()
    (message,) = p.of(ev.MessageReceived)
    assert message.header.headers == {"Expiration-Time": 5, "Other": 1}


def test_consume_notify_ack_unget(pair: Pair) -> None:
    pair.client.open_channel(1)
    pair.client.open_handle(1, 3, dest_name="q", consumer=True)
    pair.client.consume(3, prefetch=2, confirm_tag=4)
    pair.pump()
    assert pair.of(ev.ConsumeRequested)[0] == ev.ConsumeRequested(
        3 if False else 1, 3, "q", 2, False, False, "", b"", ""
    )
    assert pair.server.credit(3) == 2
    big = b"z" * 3000
    first = pair.server.notify(3, c.MessageHeader(body_size=3000), big, dest_name="q")
    second = pair.server.notify(3, c.MessageHeader(body_size=1), b"y", redelivered=True)
    assert (first, second) == (1, 2)
    assert pair.server.credit(3) == 0
    pair.pump()
    delivered = pair.client_of(fc.Delivered)
    assert [(d.message_nbr, d.body, d.redelivered, d.dest_name) for d in delivered] == [
        (1, big, False, "q"),
        (2, b"y", True, ""),
    ]
    pair.client.unget(3, 2)
    pair.client.ack(1, 2, confirm_tag=8)
    pair.pump()
    assert pair.of(ev.UngetRequested) == [ev.UngetRequested(1, 3, 2)]
    assert pair.of(ev.Acked) == [ev.Acked(1, (1,))]
    assert pair.client_of(fc.Replied)[-1] == fc.Replied("channel", 1, 8, 200, "OK")
    assert pair.server.credit(3) == 2
    pair.client.flow(3, pause=True)
    pair.pump()
    assert pair.of(ev.FlowChanged) == [ev.FlowChanged(1, 3, True)]
    assert pair.server.credit(3) == 0


def test_reply_comes_after_what_the_front_end_sends() -> None:
    # 2.2.8.8: commands the server sends while processing arrive before the REPLY.
    server = FastServer()
    p = Pair()
    p.server = server
    p.connect()
    p.client.open_channel(1)
    p.client.open_handle(1, 1, dest_name="q", consumer=True)
    p.client.consume(1, confirm_tag=3)
    server.receive_data(p.client.data_to_send(), 0)
    events = []
    while (event := server.next_event()) is not NEED_DATA:
        events.append(event)
        if isinstance(event, ev.ConsumeRequested):
            server.notify(1, c.MessageHeader(body_size=1), b"a")
    decoder = CommandDecoder(1 << 20)
    decoder.receive(server.data_to_send())
    kinds = []
    while (item := decoder.next()) is not None:
        kinds.append(type(item).__name__)
    assert kinds == ["HandleNotify", "Fragment", "HandleReply"]


def _decoded(server: FastServer) -> list[str]:
    decoder = CommandDecoder(1 << 20)
    decoder.receive(server.data_to_send())
    kinds = []
    while (item := decoder.next()) is not None:
        kinds.append(type(item).__name__)
    return kinds


def test_a_held_reply_goes_when_sent_and_not_after_its_handle_closed() -> None:
    # A front end whose work finishes later (a cluster's metadata store) takes the reply
    # back and sends it then; a close of the handle meanwhile answers instead.
    server = FastServer()
    p = Pair()
    p.server = server
    p.connect()
    p.client.open_channel(1)
    p.client.open_handle(1, 1, dest_name="q", consumer=True)
    p.client.open_handle(1, 2, dest_name="r", consumer=True)
    p.client.consume(1, confirm_tag=3)
    p.client.consume(2, confirm_tag=4)
    server.receive_data(p.client.data_to_send(), 0)
    held = []
    while (event := server.next_event()) is not NEED_DATA:
        if isinstance(event, ev.ConsumeRequested):
            held.append(server.hold_reply())
    assert server.hold_reply() is None
    assert _decoded(server) == []
    first, second = held
    assert first is not None
    assert second is not None
    server.send_reply(first)
    assert _decoded(server) == ["HandleReply"]
    server.close_handle(2, 403, "refused")
    server.send_reply(second)
    assert _decoded(server) == ["HandleClose"]


def test_the_broker_answers_the_clients_handle_and_channel_close() -> None:
    """With ``broker_answers_closing`` HANDLE CLOSE and CHANNEL CLOSE wait for the front
    end's ``answer_handle_close`` / ``answer_channel_close``."""
    p = Pair(broker_answers_closing=True)
    p.connect()
    p.client.open_channel(1)
    p.client.open_handle(1, 1, dest_name="q", consumer=True)
    p.pump()
    p.client.close_handle(1)
    p.pump()
    assert p.of(ev.HandleClosed)[-1].by_client
    assert p.client_of(fc.HandleClosed) == []
    p.server.answer_handle_close(1)
    p.pump()
    assert p.client_of(fc.HandleClosed) == [fc.HandleClosed(1, 200, "OK", False)]
    p.server.answer_handle_close(1)  # answered: nothing more
    assert _decoded(p.server) == []
    p.client.close_channel(1)
    p.pump()
    assert p.of(ev.ChannelClosed)[-1].by_client
    assert p.client_of(fc.ChannelClosed) == []
    p.server.answer_channel_close(1)
    p.pump()
    assert p.client_of(fc.ChannelClosed) == [fc.ChannelClosed(1, 200, "OK", False)]


def test_the_broker_answers_the_clients_connection_close() -> None:
    """With ``broker_answers_closing`` the client's CONNECTION CLOSE of an open connection
    waits for ``answer_close`` (CLOSE_RECEIVED): nothing it sends after is read, and a
    close of the broker's own (a shutdown) answers it instead."""
    p = Pair(broker_answers_closing=True)
    p.connect()
    p.client.open_channel(1)
    p.pump()
    p.client.close()
    p.pump()
    assert p.of(ev.ConnectionClosed) == [ev.ConnectionClosed(200, "OK", by_client=True)]
    assert p.client_of(fc.ConnectionClosed) == []
    assert p.server.state is State.CLOSE_RECEIVED
    p.server.receive_data(encode_command(c.ChannelOpen(2, 0, False, False, {}, "")), 1.0)
    assert p.server.next_event() is NEED_DATA
    assert p.server.next_tick() is None
    assert _decoded(p.server) == []
    server = p.server  # read afresh: answer_close changes its state
    server.answer_close()
    p.pump()
    assert p.client_of(fc.ConnectionClosed) == [fc.ConnectionClosed(200, "OK", False)]
    assert server.state is State.CLOSED
    server.answer_close()  # answered: nothing more
    assert _decoded(server) == []

    q = Pair(broker_answers_closing=True)
    q.connect()
    q.client.close()
    q.pump()
    q.server.close()
    assert _decoded(q.server) == ["ConnectionClose"]
    assert q.server.state is State.CLOSED


def test_temporary_destination_created_before_reply(pair: Pair) -> None:
    pair.client.open_channel(1)
    pair.client.open_handle(1, 4, temporary=True, consumer=True, confirm_tag=2)
    pair.client.open_handle(1, 5, temporary=True, dest_name="mine")
    pair.pump()
    created, replied, named = pair.client_events[-3:]
    assert created == fc.Created(4, "amq.fast.1")
    assert replied == fc.Replied("handle", 4, 2, 200, "OK")
    assert named == fc.Created(5, "mine")
    opened = pair.of(ev.HandleOpened)[0]
    assert isinstance(opened, ev.HandleOpened)
    assert (opened.dest_name, opened.temporary, opened.mime_type, opened.encoding) == (
        "amq.fast.1",
        True,
        "application/octet-stream",
        "binary",
    )


def test_query_and_browse(pair: Pair) -> None:
    pair.client.open_channel(1)
    pair.client.open_handle(1, 6, dest_name="q", browser=True)
    pair.client.query(6)
    pair.client.browse(6, 9, confirm_tag=1)
    pair.client.browse(6, 10, confirm_tag=2)
    pair.pump()
    assert pair.of(ev.QueryRequested) == [ev.QueryRequested(1, 6, 0, "q", b"", "")]
    assert pair.of(ev.BrowseRequested) == [
        ev.BrowseRequested(1, 6, 1, 9),
        ev.BrowseRequested(1, 6, 2, 10),
    ]
    pair.server.index(6, 0, b"0 5 9 15-40 80")
    pair.server.notify(6, c.MessageHeader(body_size=2), b"hi", delivered=False)
    pair.server.browse_missing(6, 2)
    pair.pump()
    assert pair.client_of(fc.Indexed) == [fc.Indexed(6, 0, b"0 5 9 15-40 80")]
    (browsed,) = pair.client_of(fc.Delivered)
    assert browsed.delivered is False
    assert pair.client_of(fc.Replied)[-1] == fc.Replied("handle", 6, 2, 310, "message not found")
    pair.client.ack(1, 100)  # a browsed message is not outstanding
    pair.pump()
    assert pair.of(ev.Acked)[-1] == ev.Acked(1, ())


def test_transactions(pair: Pair) -> None:
    pair.client.open_channel(1, transacted=True)
    pair.client.open_handle(1, 1, dest_name="q", producer=True)
    pair.client.send(1, b"m")
    pair.client.commit(1, confirm_tag=3)
    pair.client.rollback(1)
    pair.client.open_channel(2)
    pair.client.commit(2)
    pair.pump()
    assert pair.of(ev.MessageReceived)[0].transacted is True
    assert pair.of(ev.Committed) == [ev.Committed(1)]
    assert pair.of(ev.RolledBack) == [ev.RolledBack(1)]
    assert pair.client_of(fc.ChannelClosed) == [
        fc.ChannelClosed(2, 503, pair.client_of(fc.ChannelClosed)[0].reply_text, True)
    ]
    assert pair.of(ev.ChannelClosed)[-1] == ev.ChannelClosed(2, (), 200, "OK", by_client=False)


def test_restartable_upload(pair: Pair) -> None:
    pair.client.open_channel(1, restartable=True)
    pair.client.open_handle(1, 1, dest_name="files", producer=True)
    body = b"f" * 2500
    pair.client.send_restartable(1, body, first=100, confirm_tag=7)
    pair.pump()
    assert pair.client_of(fc.Ready) == [fc.Ready(1, 100)]
    (message,) = pair.of(ev.MessageReceived)
    assert message.body == body
    assert pair.client_of(fc.Replied)[-1] == fc.Replied("handle", 1, 7, 200, "OK")
    pair.client.send_restartable(
        1, b"abc", first=1, content_hash=hashlib.sha1(b"x", usedforsecurity=False).hexdigest()
    )
    pair.pump()
    assert pair.client_of(fc.HandleClosed)[-1] == fc.HandleClosed(
        1, 542, "content-hash mismatch", True
    )


def test_handle_errors_close_the_handle(pair: Pair) -> None:
    pair.client.open_channel(1)
    cases: list[tuple[Callable[[], object], Callable[[], object], int]] = [
        (
            lambda: pair.client.open_handle(1, 1, dest_name="q"),
            lambda: pair.client.send(1, b"x"),
            403,
        ),
        (
            lambda: pair.client.open_handle(1, 2, consumer=True),
            lambda: pair.client.consume(2, prefetch=0),
            502,
        ),
        (
            lambda: pair.client.open_handle(1, 3, consumer=True),
            lambda: pair.client.consume(3, identifier="d"),
            503,
        ),
        (lambda: pair.client.open_handle(1, 4, service=ev.ServiceType.PEER), lambda: None, 540),
        (
            lambda: pair.client.open_handle(1, 5, service=ev.ServiceType.TOPIC),
            lambda: pair.client.unget(5, 1),
            503,
        ),
        (lambda: pair.client.open_handle(1, 6), lambda: pair.client.unget(6, 1), 404),
        (lambda: pair.client.open_handle(1, 7), lambda: pair.client.query(7), 403),
        (lambda: pair.client.open_handle(1, 8), lambda: pair.client.open_handle(1, 8), 503),
        (
            lambda: pair.client.open_handle(1, 9, producer=True),
            lambda: pair.client._send(c.HandleSend(9, 0, 0, streaming=True)),
            540,
        ),
        (
            lambda: pair.client.open_handle(1, 10, producer=True),
            lambda: pair.client._send(c.HandlePrepare(10, 0)),
            503,
        ),
        (
            lambda: pair.client.open_handle(1, 11, service=ev.ServiceType.TOPIC),
            lambda: pair.client.cancel(11, ""),
            503,
        ),
    ]
    for open_it, misuse, code in cases:
        open_it()
        misuse()
        pair.pump()
        closed = pair.client_of(fc.HandleClosed)[-1]
        assert isinstance(closed, fc.HandleClosed)
        assert (closed.reply_code, closed.by_server) == (code, True), closed
        assert pair.server.state is State.OPEN
    assert pair.server.handles == {}


def test_message_errors(pair: Pair) -> None:
    pair.client.open_channel(1)
    pair.client.open_handle(1, 1, dest_name="q", producer=True)
    header = c.MessageHeader(body_size=5).encode()
    pair.client._send(c.HandleSend(1, 0, len(header) + 2))  # ends 3 octets short
    pair.client._out.append(header + b"ab")
    pair.pump()
    assert pair.client_of(fc.HandleClosed)[-1].reply_code == 502
    pair.client.open_handle(1, 2, dest_name="q", producer=True)
    pair.client._send(c.HandleSend(2, 0, 3))  # no header block at all
    pair.client._out.append(b"abc")
    pair.client.send(2, b"ok")  # discarded: the handle is closing
    pair.pump()
    assert pair.client_of(fc.HandleClosed)[-1].reply_code == 502
    assert pair.of(ev.MessageReceived) == []


def test_connection_errors(pair: Pair) -> None:
    pair.client._send(c.HandleFlow(99, 0, True))  # unknown handle
    pair.client.open_channel(1)  # discarded: the connection is closing
    pair.pump()
    assert pair.client_events[-1] == fc.ConnectionClosed(
        504, "HANDLE FLOW on handle 99, which is not open", True
    )
    assert pair.server.state is State.CLOSED
    assert pair.of(ev.ChannelOpened) == []


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (c.ConnectionChallenge(), 503),  # only servers send it
        (c.ConnectionOpen(), 503),  # not after the connection is open
        (c.ChannelAck(7), 504),
        (c.ChannelOpen(0), 504),
    ],
)
def test_commands_out_of_place(pair: Pair, command: c.Command, code: int) -> None:
    pair.client._send(command)
    pair.pump()
    closed = pair.client_events[-1]
    assert isinstance(closed, fc.ConnectionClosed)
    assert closed.reply_code == code


def test_bad_framing_closes_at_once(pair: Pair) -> None:
    pair.server.receive_data(b"\x00\x02\x0e\x00", 0)  # command-end missing
    event = pair.server.next_event()
    assert event == ev.ConnectionClosed(
        501, "command-end: expected 0xCE, got 0x00", by_client=False
    )
    assert pair.server.state is State.CLOSED


def test_server_close_handshakes(pair: Pair) -> None:
    pair.client.open_channel(1)
    pair.client.open_handle(1, 1, dest_name="q", consumer=True)
    pair.client.open_channel(2)
    pair.pump()
    pair.server.close_handle(1, 404, "no queue q")
    pair.pump()
    assert pair.client_of(fc.HandleClosed) == [fc.HandleClosed(1, 404, "no queue q", True)]
    assert pair.of(ev.HandleClosed) == [ev.HandleClosed(1, 1, 200, "OK", by_client=False)]
    pair.server.close_channel(2, 406, "bad")
    pair.pump()
    assert pair.of(ev.ChannelClosed) == [ev.ChannelClosed(2, (), 200, "OK", by_client=False)]
    pair.server.close(320, "shutting down")
    pair.pump()
    assert pair.client_events[-1] == fc.ConnectionClosed(320, "shutting down", True)
    assert pair.of(ev.ConnectionClosed) == [ev.ConnectionClosed(200, "OK", by_client=False)]


def test_closing_connection_answers_commands_with_close() -> None:
    # 3.2.9: the initiating party answers any command but CLOSE with another CLOSE.
    server = FastServer()
    client = fc.FastClient()
    client.initiate()
    p = Pair(client=client)
    p.server = server
    p.pump()
    server.close(320, "bye")
    server.receive_data(encode_command(c.ChannelOpen(1)), 1.0)
    assert server.next_event() is NEED_DATA
    decoder = CommandDecoder(1 << 20)
    decoder.receive(server.data_to_send())
    assert [decoder.next(), decoder.next()] == [
        c.ConnectionClose(320, "bye"),
        c.ConnectionClose(503, "connection is closing"),
    ]


def test_channel_limits_and_reopen(pair: Pair) -> None:
    server = FastServer(channel_max=1, handle_max=1)
    p = Pair()
    p.server = server
    p.connect()
    p.client.open_channel(1)
    p.client.open_channel(2)
    p.client.open_handle(1, 1)
    p.client.open_handle(1, 2)
    p.client.open_channel(1)
    p.pump()
    closed = [(e.channel_id, e.reply_code) for e in p.client_of(fc.ChannelClosed)]
    assert closed == [(2, 506), (1, 503)]
    assert [(e.handle_id, e.reply_code) for e in p.client_of(fc.HandleClosed)] == [(2, 506)]


def test_heartbeats() -> None:
    p = Pair(client=fc.FastClient(heartbeat=10), heartbeat=30)
    p.connect()
    assert p.server.tick(5.0) is None
    assert p.server.data_to_send() == b""
    assert p.server.tick(10.0) is None
    p.client_events.clear()
    p.client_events += p.client.receive_data(p.server.data_to_send())
    assert p.client_events == [fc.Pinged(False)]
    p.client.ping(respond=True)
    p.now = 11.0
    p.pump()
    assert p.client_events[-1] == fc.Pinged(False)  # the server's answer
    assert p.server.tick(60.0) is None
    closed = p.server.tick(72.0)  # silent for more than two of the server's intervals
    assert closed == ev.ConnectionClosed(320, "missed heartbeats", by_client=False)
    assert p.server.state is State.CLOSED


def test_next_tick_says_when_a_ping_or_the_drop_is_due() -> None:
    """The adapter sleeps until ``next_tick``: a tick just before it does nothing, one at it
    does what is due (a PING every 10 s the client asked for; past two of the server's
    30 s intervals of silence from a client that pinged, the drop)."""
    p = Pair(client=fc.FastClient(heartbeat=10), heartbeat=30)
    assert p.server.next_tick() is None  # not open yet: no heartbeats
    p.connect()
    due = p.server.next_tick()
    assert due is not None
    assert due == pytest.approx(10.0)
    assert p.server.tick(due - 0.01) is None
    assert p.server.data_to_send() == b""
    assert p.server.tick(due) is None
    assert p.client.receive_data(p.server.data_to_send()) == [fc.Pinged(False)]
    p.client.ping(respond=False)
    p.now = 11.0
    p.pump()
    times = []
    closed = None
    while closed is None:
        due = p.server.next_tick()
        assert due is not None
        closed = p.server.tick(due)
        p.server.data_to_send()
        times.append(due)
    assert closed == ev.ConnectionClosed(320, "missed heartbeats", by_client=False)
    assert times[-1] == pytest.approx(11.0 + 60, abs=2e-3)
    assert p.server.next_tick() is None


def test_front_end_misuse_is_a_bug_not_a_close(pair: Pair) -> None:
    with pytest.raises(RuntimeError):
        pair.server.accept_login()
    with pytest.raises(RuntimeError):
        pair.server.notify(1, c.MessageHeader(), b"")
    pair.client.open_channel(1)
    pair.client.open_handle(1, 1, dest_name="q")
    pair.pump()
    with pytest.raises(RuntimeError, match="not consuming"):
        pair.server.notify(1, c.MessageHeader(), b"")
    with pytest.raises(RuntimeError, match="browsing"):
        pair.server.notify(1, c.MessageHeader(), b"", delivered=False)
    with pytest.raises(RuntimeError):
        pair.server.close_channel(9, 200, "")
    assert pair.server.credit(1) == 0


def test_closing_gives_back_unacknowledged_messages(pair: Pair) -> None:
    pair.client.open_channel(1)
    pair.client.open_handle(1, 1, dest_name="a", consumer=True)
    pair.client.open_handle(1, 2, dest_name="b", consumer=True)
    pair.client.consume(1, prefetch=5)
    pair.client.consume(2, prefetch=5)
    pair.pump()
    nbrs = [pair.server.notify(h, c.MessageHeader(body_size=1), b"x") for h in (1, 2, 1, 2)]
    assert nbrs == [1, 2, 3, 4]
    pair.client.close_handle(1)
    pair.pump()
    assert pair.of(ev.HandleClosed) == [ev.HandleClosed(1, 1, 200, "OK", True, (1, 3))]
    pair.client.ack(1, 2)  # covers only handle 2's message 2
    pair.client.close_channel(1)
    pair.pump()
    assert pair.of(ev.Acked) == [ev.Acked(1, (2,))]
    assert pair.of(ev.ChannelClosed) == [ev.ChannelClosed(1, (2,), 200, "OK", True, (4,))]
