"""The AMQP 1.0 connection machine through an in-memory client/server pair: SASL, open and
close, sessions, links, credit and drain, transfers (single, multi-frame, aborted), windows,
dispositions, heartbeats, and every peer error ending with the spec's condition."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

import pytest

from leveret.protocol.amqp10 import (
    Accepted,
    Attach,
    Begin,
    Close,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionOpened,
    ConnectionState,
    CreditGranted,
    Data,
    Detach,
    DispositionReceived,
    Error,
    FlowReceived,
    LinkAttached,
    LinkAttachRequested,
    LinkDetached,
    LocalProtocolError,
    MessageReceived,
    Open,
    Rejected,
    Role,
    SaslAuthRequested,
    SaslInit,
    SaslOutcomeReceived,
    SaslResponse,
    SessionBegun,
    SessionEnded,
    Side,
    Source,
    Target,
    Transfer,
    encode_message,
)
from leveret.protocol.amqp10.connection import Connection
from leveret.protocol.amqp10.framing import AMQP_HEADER, EMPTY_FRAME, SASL_HEADER, encode_frame
from leveret.testing.amqp10 import ClientServerPair, client_config, server_config

if TYPE_CHECKING:
    from leveret.protocol.amqp10.events import Event


T = TypeVar("T")


def _one(events: list[Event], kind: type[T]) -> T:
    found = [e for e in events if isinstance(e, kind)]
    assert len(found) == 1, events
    return found[0]


def _opened(**server: object) -> ClientServerPair:
    pair = ClientServerPair(server=server_config(**server) if server else None)
    pair.open()
    assert pair.client.state is ConnectionState.OPENED
    assert pair.server.state is ConnectionState.OPENED
    return pair


def _link(
    pair: ClientServerPair, role: bool, *, credit: int = 0, auto: bool = False, **accept: object
) -> tuple[int, int, int, int]:
    """A session and a link the client attaches with ``role``; the server accepts it.
    Returns (client channel, client handle, server channel, server handle)."""
    channel = pair.client.begin()
    pair.pump()
    handle = pair.client.attach(
        channel, "link", role, source=Source(address="src"), target=Target(address="/queues/q")
    )
    _, server_events = pair.pump()
    req = _one(server_events, LinkAttachRequested)
    assert req.role == (not role)
    pair.server.accept_link(req.channel, req.handle, credit=credit, auto_credit=auto, **accept)  # type: ignore[arg-type]
    client_events, _ = pair.pump()
    attached = _one(client_events, LinkAttached)
    assert attached.handle == handle
    return channel, handle, req.channel, req.handle


def _closed_with(events: list[Event], condition: str) -> ConnectionClosed:
    closed = _one(events, ConnectionClosed)
    assert closed.error is not None
    assert closed.error.condition == condition
    return closed


# -- SASL and open -------------------------------------------------------------------------


def test_sasl_plain_then_open() -> None:
    pair = ClientServerPair()
    client_events, server_events = pair.open()
    request = _one(server_events, SaslAuthRequested)
    assert (request.mechanism, request.username, request.password) == ("PLAIN", "guest", "guest")
    assert request.hostname == "vhost:/"
    assert "password" not in repr(request)
    assert _one(client_events, SaslOutcomeReceived).code == 0
    assert _one(server_events, ConnectionOpened).hostname == "vhost:/"
    assert _one(client_events, ConnectionOpened).container_id == "server"


def test_sasl_refused_closes_both() -> None:
    pair = ClientServerPair(authenticate=lambda _: False)
    client_events, server_events = pair.open()
    assert _one(client_events, SaslOutcomeReceived).code == 1
    _closed_with(client_events, "amqp:unauthorized-access")
    _closed_with(server_events, "amqp:unauthorized-access")
    assert pair.client.closed
    assert pair.server.closed


@pytest.mark.parametrize("mechanism", ["ANONYMOUS", "EXTERNAL"])
def test_other_mechanisms(mechanism: str) -> None:
    pair = ClientServerPair(
        client=client_config(sasl_mechanism=mechanism),
        server=server_config(sasl_mechanisms=("PLAIN", "ANONYMOUS", "EXTERNAL")),
    )
    _, server_events = pair.open()
    assert _one(server_events, SaslAuthRequested).mechanism == mechanism
    assert pair.server.state is ConnectionState.OPENED


def test_mechanism_not_offered() -> None:
    pair = ClientServerPair(client=client_config(sasl_mechanism="EXTERNAL"))
    client_events, _ = pair.open()
    _closed_with(client_events, "amqp:not-implemented")


def test_plain_without_initial_response_gets_a_challenge() -> None:
    server = Connection(server_config())
    server.receive_data(SASL_HEADER, 0)
    assert server.data_to_send(0).startswith(SASL_HEADER)
    init = encode_frame(0, SaslInit(mechanism="PLAIN").encode(), 1)
    assert server.receive_data(init, 0) == []
    assert b"\x00\x53\x42" in server.data_to_send(0)  # sasl-challenge
    response = encode_frame(0, SaslResponse(response=b"\x00u\x00p").encode(), 1)
    events = server.receive_data(response, 0)
    assert _one(events, SaslAuthRequested).username == "u"


def test_bad_plain_response_fails_authentication() -> None:
    server = Connection(server_config())
    server.receive_data(SASL_HEADER, 0)
    init = encode_frame(0, SaslInit(mechanism="PLAIN", initial_response=b"x").encode(), 1)
    events = server.receive_data(init, 0)
    _closed_with(events, "amqp:unauthorized-access")
    assert server.data_to_send(0).endswith(b"\x00\x53\x44\xc0\x03\x01\x50\x01")  # outcome auth


def test_no_sasl_when_not_required() -> None:
    pair = ClientServerPair(
        client=client_config(sasl_mechanism=None), server=server_config(require_sasl=False)
    )
    pair.open()
    assert pair.server.state is ConnectionState.OPENED


def test_sasl_required_refuses_a_bare_amqp_header() -> None:
    server = Connection(server_config())
    events = server.receive_data(AMQP_HEADER, 0)
    assert server.data_to_send(0) == SASL_HEADER
    _closed_with(events, "amqp:connection:framing-error")


@pytest.mark.parametrize(
    "header", [b"AMQP\x02\x01\x00\x00", b"AMQP\x00\x00\x09\x01", b"AMQP\x00\x01\x00\x01"]
)
def test_unsupported_headers_are_answered_with_ours(header: bytes) -> None:
    server = Connection(server_config(sasl_mechanisms=()))
    events = server.receive_data(header, 0)
    assert server.data_to_send(0) == AMQP_HEADER
    assert server.closed
    _closed_with(events, "amqp:connection:framing-error")


def test_sasl_input_arriving_before_the_answer_is_held() -> None:
    client = Connection(client_config())
    server = Connection(server_config())
    client.initiate()
    server.receive_data(client.data_to_send(0), 0)
    client.receive_data(server.data_to_send(0), 0)
    init = client.data_to_send(0)
    # The init, the AMQP header and the open arrive in one piece, before the broker answers.
    events = server.receive_data(
        init + AMQP_HEADER + encode_frame(0, Open(container_id="c").encode()), 0
    )
    assert isinstance(events[0], SaslAuthRequested)
    assert server.state is ConnectionState.SASL_PENDING
    assert server.receive_data(b"", 0) == []
    server.answer_sasl(True)
    events = server.receive_data(b"", 0)
    assert _one(events, ConnectionOpened).container_id == "c"
    with pytest.raises(LocalProtocolError):
        server.answer_sasl(True)


# -- sessions and links ----------------------------------------------------------------------


def test_sessions_begin_and_end_both_ways() -> None:
    pair = _opened()
    channel = pair.client.begin()
    client_events, server_events = pair.pump()
    assert _one(client_events, SessionBegun).channel == channel
    server_channel = _one(server_events, SessionBegun).channel
    pair.server.end(server_channel, Error(condition="amqp:internal-error"))
    client_events, server_events = pair.pump()
    ended = _one(client_events, SessionEnded)
    assert ended.error is not None
    assert ended.error.condition == "amqp:internal-error"
    assert not ended.local
    assert _one(server_events, SessionEnded).local
    second = pair.client.begin()
    assert second == channel  # the channel is free again
    pair.pump()


def test_publish_credit_transfer_settle() -> None:
    pair = _opened()
    channel, handle, s_channel, s_handle = _link(pair, Role.SENDER, credit=2)
    assert pair.client.credit(channel, handle) == 2
    body = encode_message(Data(b"hello"))
    ids = [pair.client.send_transfer(channel, handle, body, settled=False) for _ in range(2)]
    with pytest.raises(LocalProtocolError, match="no credit"):
        pair.client.send_transfer(channel, handle, body)
    _, server_events = pair.pump()
    received = [e for e in server_events if isinstance(e, MessageReceived)]
    assert [m.delivery_id for m in received] == ids
    assert all(m.payload == body and not m.settled for m in received)
    assert received[0].handle == s_handle
    pair.server.settle(s_channel, ids[0], ids[1], role=Role.RECEIVER, state=Accepted())
    client_events, _ = pair.pump()
    disp = _one(client_events, DispositionReceived)
    assert (disp.first, disp.last, disp.settled, disp.role) == (ids[0], ids[1], True, Role.RECEIVER)
    assert disp.state == Accepted()


def test_auto_credit_keeps_a_publisher_going() -> None:
    pair = _opened()
    channel, handle, _, _ = _link(pair, Role.SENDER, credit=4, auto=True)
    sent = 0
    for _ in range(10):
        while pair.client.credit(channel, handle):
            pair.client.send_transfer(channel, handle, b"m", settled=True)
            sent += 1
        pair.pump()
    received = [e for e in pair.server_events if isinstance(e, MessageReceived)]
    assert len(received) == sent > 20


def test_consume_with_credit_and_drain() -> None:
    pair = _opened()
    channel, handle, s_channel, s_handle = _link(pair, Role.RECEIVER)
    pair.client.grant_credit(channel, handle, 3)
    _, server_events = pair.pump()
    assert _one(server_events, CreditGranted).credit == 3
    pair.server.send_transfer(s_channel, s_handle, b"one", settled=True)
    pair.client.grant_credit(channel, handle, 5, drain=True)
    client_events, server_events = pair.pump()
    assert _one(client_events, MessageReceived).payload == b"one"
    granted = _one(server_events, CreditGranted)
    # The client granted 5 before it saw the delivery in flight: the sender counts that one
    # against them (delivery-count 0 + 5 - 1).
    assert (granted.credit, granted.drain) == (4, True)
    pair.server.drained(s_channel, s_handle)
    client_events, _ = pair.pump()
    flow = _one(client_events, FlowReceived)
    assert (flow.credit, flow.delivery_count) == (0, 5)
    assert pair.server.credit(s_channel, s_handle) == 0


def test_echo_asks_for_the_peer_flow() -> None:
    pair = _opened()
    channel, handle, _, _ = _link(pair, Role.SENDER, credit=7)
    pair.client.send_flow(channel, handle, echo=True)
    client_events, server_events = pair.pump()
    assert _one(server_events, FlowReceived).credit == 7
    assert _one(client_events, CreditGranted).credit == 7
    pair.client.send_flow(channel, echo=True)
    client_events, _ = pair.pump()
    assert client_events == []  # a session flow answers with a session flow: no link event


def test_multi_frame_transfers_reassemble() -> None:
    pair = ClientServerPair(
        client=client_config(max_frame_size=512), server=server_config(max_frame_size=512)
    )
    pair.open()
    channel, handle, s_channel, s_handle = _link(pair, Role.RECEIVER)
    pair.client.grant_credit(channel, handle, 10)
    pair.pump()
    # 484 bytes is the most one 512-byte frame holds here (28 bytes of frame header and
    # performative): 485 takes two.
    payloads = [bytes(range(256)) * 9, b"x" * 484, b"y" * 485, b""]
    for p in payloads:
        pair.server.send_transfer(s_channel, s_handle, p)
    out = pair.server.data_to_send(pair.now)
    assert out.count(b"\x00\x53\x14") == 5 + 1 + 2 + 1
    events = pair.client.receive_data(out, pair.now)
    assert [e.payload for e in events if isinstance(e, MessageReceived)] == payloads


def test_aborted_delivery_is_dropped() -> None:
    pair = _opened(max_frame_size=512)
    channel, _, _, s_handle = _link(pair, Role.SENDER, credit=2)
    server = pair.server
    rh = 0
    # First frame with more=true, then an abort, then a whole message.
    first = Transfer(handle=rh, delivery_id=0, delivery_tag=b"t", more=True).encode() + b"part"
    abort = Transfer(handle=rh, more=False, aborted=True).encode()
    whole = Transfer(handle=rh, delivery_id=1, delivery_tag=b"u", settled=True).encode() + b"ok"
    events = server.receive_data(
        b"".join(encode_frame(channel, b) for b in (first, abort, whole)), 0
    )
    msgs = [e for e in events if isinstance(e, MessageReceived)]
    assert [(m.delivery_id, m.payload) for m in msgs] == [(1, b"ok")]
    assert s_handle == 0


def test_refuse_link_and_dynamic_source() -> None:
    pair = _opened()
    channel = pair.client.begin()
    pair.pump()
    pair.client.attach(channel, "bad", Role.RECEIVER, source=Source(address="/queues/none"))
    handle = pair.client.attach(channel, "reply", Role.RECEIVER, source=Source(dynamic=True))
    _, server_events = pair.pump()
    bad, dyn = [e for e in server_events if isinstance(e, LinkAttachRequested)]
    pair.server.refuse_link(bad.channel, bad.handle, Error(condition="amqp:not-found"))
    assert dyn.source is not None
    assert dyn.source.dynamic
    pair.server.accept_link(dyn.channel, dyn.handle, source=Source(address="/queues/amq.gen-1"))
    client_events, server_events = pair.pump()
    attached = [e for e in client_events if isinstance(e, LinkAttached)]
    assert attached[0].source is None  # the refusal's attach carries no source
    assert attached[1].source is not None
    assert attached[1].source.address == "/queues/amq.gen-1"
    assert attached[1].handle == handle
    detached = _one(client_events, LinkDetached)
    assert detached.error is not None
    assert detached.error.condition == "amqp:not-found"
    assert not detached.local
    assert _one(server_events, LinkDetached).local


def test_detach_both_ways_frees_handles() -> None:
    pair = _opened()
    channel, handle, s_channel, s_handle = _link(pair, Role.SENDER, credit=1)
    pair.client.detach(channel, handle)
    client_events, server_events = pair.pump()
    assert _one(client_events, LinkDetached).local
    assert not _one(server_events, LinkDetached).local
    again = pair.client.attach(channel, "link", Role.SENDER, target=Target(address="q"))
    assert again == handle
    _, server_events = pair.pump()
    req = _one(server_events, LinkAttachRequested)
    pair.server.accept_link(req.channel, req.handle)
    pair.pump()
    pair.server.detach(req.channel, req.handle, error=Error(condition="amqp:link:detach-forced"))
    client_events, _ = pair.pump()
    forced = _one(client_events, LinkDetached)
    assert forced.error is not None
    assert forced.error.condition == "amqp:link:detach-forced"
    assert s_channel == req.channel
    assert s_handle == req.handle


def test_the_broker_answers_the_peers_detach_and_keeps_its_handle_meanwhile() -> None:
    """With ``broker_answers_closing`` the peer's detach waits for ``answer_detach`` (a
    consumer let go by another node first); our handle is not given to a new link before."""
    pair = _opened(broker_answers_closing=True)
    channel, handle, s_channel, s_handle = _link(pair, Role.RECEIVER, credit=0)
    pair.client.detach(channel, handle)
    client_events, server_events = pair.pump()
    assert not _one(server_events, LinkDetached).local
    assert not [e for e in client_events if isinstance(e, LinkDetached)]
    with pytest.raises(LocalProtocolError):
        pair.server.send_transfer(s_channel, s_handle, b"late", settled=True)
    pair.client.attach(channel, "other", Role.RECEIVER, source=Source(address="q"))
    _, server_events = pair.pump()
    req = _one(server_events, LinkAttachRequested)
    assert req.handle != s_handle
    pair.server.accept_link(req.channel, req.handle)
    pair.pump()
    pair.server.answer_detach(s_channel, s_handle)
    client_events, _ = pair.pump()
    assert _one(client_events, LinkDetached).handle == handle
    pair.server.answer_detach(s_channel, s_handle)  # answered: nothing more
    assert pair.server.data_to_send(0) == b""
    assert pair.server.link(s_channel, req.handle) is not None


def test_the_broker_answers_the_peers_end_and_close() -> None:
    pair = _opened(broker_answers_closing=True)
    channel = pair.client.begin()
    _, server_events = pair.pump()
    s_channel = _one(server_events, SessionBegun).channel
    pair.client.end(channel)
    client_events, server_events = pair.pump()
    assert not _one(server_events, SessionEnded).local
    assert not [e for e in client_events if isinstance(e, SessionEnded)]
    pair.client.begin()
    _, server_events = pair.pump()
    assert _one(server_events, SessionBegun).channel != s_channel  # still ours
    pair.server.answer_end(s_channel)
    client_events, _ = pair.pump()
    assert _one(client_events, SessionEnded).local
    pair.client.close()
    client_events, server_events = pair.pump()
    assert not _one(server_events, ConnectionClosed).local
    assert not [e for e in client_events if isinstance(e, ConnectionClosed)]
    assert not pair.server.closed
    assert pair.server.receive_data(_frame(0, Close()), 0) == []  # nothing more is read
    pair.server.answer_close()
    client_events, _ = pair.pump()
    assert _one(client_events, ConnectionClosed).local
    assert pair.server.closed


def test_outgoing_transfers_wait_for_the_session_window() -> None:
    pair = ClientServerPair(client=client_config(incoming_window=4))
    pair.open()
    channel, handle, s_channel, s_handle = _link(pair, Role.RECEIVER)
    pair.client.grant_credit(channel, handle, 100)
    pair.pump()
    for i in range(10):
        pair.server.send_transfer(s_channel, s_handle, b"%d" % i, settled=True)
    first = pair.client.receive_data(pair.server.data_to_send(0), 0)
    assert len([e for e in first if isinstance(e, MessageReceived)]) == 4  # the window
    pair.pump()  # the client's window flow lets the rest out
    got = [e.payload for e in pair.client_events if isinstance(e, MessageReceived)]
    assert got == [b"%d" % i for i in range(4, 10)]  # the rest, after the first four


def test_close_handshake_and_timeout() -> None:
    pair = _opened()
    pair.client.close(Error(condition="amqp:connection:forced", description="bye"))
    client_events, server_events = pair.pump()
    assert _one(client_events, ConnectionClosed).local
    closed = _one(server_events, ConnectionClosed)
    assert not closed.local
    assert closed.error is not None
    assert closed.error.description == "bye"
    assert pair.client.closed
    assert pair.server.closed
    # A peer that never answers our close is given up on after close_timeout.
    lone = _opened()
    lone.client.close()
    lone.client.data_to_send(lone.now)
    assert lone.client.get_timer() == lone.now + 5.0
    assert lone.client.handle_timer(lone.now + 5.0)[0] == ConnectionClosed(error=None, local=True)


def test_heartbeats_and_idle_timeout() -> None:
    pair = ClientServerPair(server=server_config(idle_time_out=1000))
    pair.open()
    # The client must send something every 0.5 s; the server gives up after 1 s of silence.
    assert pair.client.get_timer() == pytest.approx(0.5)
    assert pair.server.get_timer() == pytest.approx(1.0)
    pair.now = 0.5
    assert pair.client.handle_timer(0.5) == []
    assert pair.client.data_to_send(0.5) == EMPTY_FRAME
    pair.server.receive_data(EMPTY_FRAME, 0.5)
    assert pair.server.get_timer() == pytest.approx(1.5)
    events = pair.server.handle_timer(1.5)
    _closed_with(events, "amqp:resource-limit-exceeded")
    assert pair.server.state is ConnectionState.CLOSE_SENT


# -- peer errors --------------------------------------------------------------------------------


def _raw_server(**config: object) -> Connection:
    """A server past SASL-less open, fed raw frames by the test."""
    server = Connection(server_config(sasl_mechanisms=(), **config))
    server.receive_data(AMQP_HEADER + encode_frame(0, Open(container_id="raw").encode()), 0)
    server.receive_data(
        encode_frame(3, Begin(next_outgoing_id=0, incoming_window=2, outgoing_window=9).encode()), 0
    )
    server.data_to_send(0)
    return server


def _frame(
    channel: int, perf: Attach | Transfer | Detach | Close | Begin, payload: bytes = b""
) -> bytes:
    return encode_frame(channel, perf.encode() + payload)


def test_garbage_is_a_framing_error() -> None:
    server = _raw_server()
    events = server.receive_data(b"\x00\x00\x00\x07junk", 0)
    _closed_with(events, "amqp:connection:framing-error")
    assert b"\x00\x53\x18" in server.data_to_send(0)  # a close went out
    assert server.state is ConnectionState.CLOSE_SENT


def test_undecodable_performative_is_a_decode_error() -> None:
    server = _raw_server()
    events = server.receive_data(encode_frame(3, b"\x00\x53\x12\xc0\x03\x01\x50"), 0)
    _closed_with(events, "amqp:decode-error")


def test_frames_before_open_are_illegal() -> None:
    server = Connection(server_config(sasl_mechanisms=()))
    events = server.receive_data(
        AMQP_HEADER + _frame(0, Begin(next_outgoing_id=0, incoming_window=1, outgoing_window=1)), 0
    )
    _closed_with(events, "amqp:illegal-state")
    # A refusal before our open still sends an open first (spec 2.4.5).
    out = server.data_to_send(0)
    assert out.index(b"\x00\x53\x10") < out.index(b"\x00\x53\x18")


def test_unattached_handle_ends_the_session() -> None:
    server = _raw_server()
    events = server.receive_data(_frame(3, Transfer(handle=9, delivery_id=0, delivery_tag=b"t")), 0)
    ended = _one(events, SessionEnded)
    assert ended.error is not None
    assert ended.error.condition == "amqp:session:unattached-handle"
    assert ended.local
    # Input for the ending session is discarded until the peer's end.
    assert server.receive_data(_frame(3, Detach(handle=9)), 0) == []


def test_handle_in_use_ends_the_session() -> None:
    server = _raw_server()
    attach = Attach(name="a", handle=0, role=Role.SENDER, target=Target(address="q"))
    server.receive_data(_frame(3, attach), 0)
    attach.name = "b"
    events = server.receive_data(_frame(3, attach), 0)
    assert _one(events, SessionEnded).error == Error(
        condition="amqp:session:handle-in-use", description="handle 0 is in use"
    )


def test_window_violation_ends_the_session() -> None:
    server = _raw_server(incoming_window=2)
    attach = Attach(name="a", handle=0, role=Role.SENDER, target=Target(address="q"))
    events = server.receive_data(_frame(3, attach), 0)
    req = _one(events, LinkAttachRequested)
    server.accept_link(req.channel, req.handle, credit=100)
    # The window is re-granted when half is used, so an honest peer never runs out of it...
    frames = b"".join(
        _frame(3, Transfer(handle=0, delivery_id=i, delivery_tag=b"%d" % i, settled=True))
        for i in range(5)
    )
    events = server.receive_data(frames, 0)
    assert len([e for e in events if isinstance(e, MessageReceived)]) == 5
    # ...until the broker closes it (back-pressure) and the peer sends anyway.
    server.set_incoming_window(req.channel, 0)
    assert b"\x00\x53\x13" in server.data_to_send(0)  # the flow telling the peer
    late = _frame(3, Transfer(handle=0, delivery_id=5, delivery_tag=b"5", settled=True))
    ended = _one(server.receive_data(late, 0), SessionEnded)
    assert ended.error is not None
    assert ended.error.condition == "amqp:session:window-violation"


def test_a_closed_window_holds_an_honest_sender_back() -> None:
    pair = _opened()
    channel, handle, s_channel, _ = _link(pair, Role.SENDER, credit=10)
    pair.server.set_incoming_window(s_channel, 0)
    pair.pump()
    for _ in range(3):
        pair.client.send_transfer(channel, handle, b"m", settled=True)
    _, server_events = pair.pump()
    assert not [e for e in server_events if isinstance(e, MessageReceived)]
    pair.server.set_incoming_window(s_channel, 2)
    _, server_events = pair.pump()
    assert len([e for e in server_events if isinstance(e, MessageReceived)]) == 3
    with pytest.raises(LocalProtocolError, match="out of range"):
        pair.server.set_incoming_window(s_channel, -1)


def test_transfer_without_credit_detaches_the_link() -> None:
    server = _raw_server()
    events = server.receive_data(
        _frame(3, Attach(name="a", handle=0, role=Role.SENDER, target=Target())), 0
    )
    req = _one(events, LinkAttachRequested)
    server.accept_link(req.channel, req.handle)  # no credit
    events = server.receive_data(_frame(3, Transfer(handle=0, delivery_id=0, delivery_tag=b"t")), 0)
    detached = _one(events, LinkDetached)
    assert detached.error is not None
    assert detached.error.condition == "amqp:link:transfer-limit-exceeded"
    # Further transfers on the detaching link are discarded.
    assert (
        server.receive_data(_frame(3, Transfer(handle=0, delivery_id=1, delivery_tag=b"u")), 0)
        == []
    )


def test_message_size_exceeded_detaches_the_link() -> None:
    pair = _opened()
    channel, handle, _, _ = _link(pair, Role.SENDER, credit=5, max_message_size=10)
    with pytest.raises(LocalProtocolError, match="max-message-size"):
        pair.client.send_transfer(channel, handle, b"x" * 11)
    # A peer that ignores the limit is detached.
    server = _raw_server()
    attach = Attach(name="a", handle=0, role=Role.SENDER, target=Target())
    req = _one(server.receive_data(_frame(3, attach), 0), LinkAttachRequested)
    server.accept_link(req.channel, req.handle, credit=5, max_message_size=10)
    big = _frame(3, Transfer(handle=0, delivery_id=0, delivery_tag=b"t"), b"x" * 11)
    assert _one(server.receive_data(big, 0), LinkDetached).error == Error(
        condition="amqp:link:message-size-exceeded", description="message over max-message-size 10"
    )


def test_continuation_with_another_delivery_id_detaches() -> None:
    server = _raw_server()
    events = server.receive_data(
        _frame(3, Attach(name="a", handle=0, role=Role.SENDER, target=Target())), 0
    )
    req = _one(events, LinkAttachRequested)
    server.accept_link(req.channel, req.handle, credit=5)
    first = _frame(3, Transfer(handle=0, delivery_id=0, delivery_tag=b"t", more=True), b"a")
    second = _frame(3, Transfer(handle=0, delivery_id=1, delivery_tag=b"t"), b"b")
    events = server.receive_data(first + second, 0)
    assert _one(events, LinkDetached).error == Error(
        condition="amqp:invalid-field",
        description="continuation of delivery 0 carries delivery-id 1",
    )


def test_api_misuse_is_a_local_error() -> None:
    pair = _opened()
    with pytest.raises(LocalProtocolError):
        pair.client.end(7)
    channel, handle, _, _ = _link(pair, Role.RECEIVER)
    with pytest.raises(LocalProtocolError, match="receiving link"):
        pair.client.send_transfer(channel, handle, b"x")
    with pytest.raises(LocalProtocolError, match="sending link"):
        pair.server.grant_credit(0, 0, 1)
    with pytest.raises(LocalProtocolError):
        pair.client.initiate()
    server = Connection(ConnectionConfig(side=Side.SERVER))
    with pytest.raises(LocalProtocolError):
        server.begin()


def test_rejected_outcome_round_trips() -> None:
    pair = _opened()
    channel, handle, s_channel, _ = _link(pair, Role.SENDER, credit=1)
    delivery = pair.client.send_transfer(channel, handle, b"m")
    pair.pump()
    state = Rejected(error=Error(condition="amqp:precondition-failed"))
    pair.server.settle(s_channel, delivery, role=Role.RECEIVER, state=state)
    client_events, _ = pair.pump()
    disp = _one(client_events, DispositionReceived)
    assert (disp.first, disp.last, disp.state) == (delivery, delivery, state)


def test_peer_close_in_any_open_state_is_answered() -> None:
    server = _raw_server()
    events = server.receive_data(_frame(0, Close(error=Error(condition="amqp:internal-error"))), 0)
    closed = _one(events, ConnectionClosed)
    assert not closed.local
    assert server.closed
    assert server.data_to_send(0).endswith(encode_frame(0, Close().encode()))
    assert server.receive_data(b"anything", 0) == []
