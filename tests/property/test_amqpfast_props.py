"""Every state of the AMQP/Fast server machine by every command a client could send (h2's
state-machine property): the machine processes it or closes the right thing with the right
code, never raises, and everything it writes is well-formed server output."""

from __future__ import annotations

import decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leveret.protocol.amqpfast import commands as c
from leveret.protocol.amqpfast import events as ev
from leveret.protocol.amqpfast.framing import CommandDecoder, Fragment, encode_command
from leveret.protocol.amqpfast.server import ACCEPTED, NEED_DATA, PAUSED, FastServer, State

# Left out of the compiled pass (scripts/test): the AMQP/Fast codec is not compiled.
pytestmark = pytest.mark.pure_only

_KINDS: dict[str, st.SearchStrategy[Any]] = {
    "octet": st.integers(0, 255),
    # Small ids hit the open channel 1 and handle 1 often; big numbers still come up.
    "short": st.integers(0, 3) | st.integers(0, 0xFFFF),
    "long": st.integers(0, 40) | st.integers(0, 0xFFFFFFFF),
    "bit": st.booleans(),
    "shortstr": st.sampled_from(["", "q", "PLAIN", "guest", "/"])
    | st.text(max_size=8).filter(lambda s: "\x00" not in s and s.isprintable()),
    "longstr": st.binary(max_size=16),
    "table": st.dictionaries(
        st.sampled_from(["LOGIN", "PASSWORD", "FRAME_MAX", "HEARTBEAT", "X"]),
        st.sampled_from(["guest", "x"]) | st.integers(0, 5000) | st.just(decimal.Decimal("1.5")),
        max_size=3,
    ),
}


def _command(cls: type[c.Command]) -> st.SearchStrategy[c.Command]:
    return st.builds(cls, **{name: _KINDS[kind] for name, kind in cls.FIELDS})


def _client_feed(server: FastServer, *commands: c.Command) -> None:
    server.receive_data(b"".join(encode_command(x) for x in commands), 0.0)


def _drain(server: FastServer) -> list[ev.Event]:
    events: list[ev.Event] = []
    while True:
        event = server.next_event()
        if event is NEED_DATA or event is PAUSED:
            return events
        assert isinstance(event, ev.Event)
        events.append(event)


def server_in(state: State) -> FastServer:
    # CLOSE_RECEIVED is reached only where the broker answers the client's CLOSE itself.
    server = FastServer(
        frame_max=4096,
        temporary_prefix="t",
        broker_answers_closing=state is State.CLOSE_RECEIVED,
    )
    if state is State.AWAIT_INITIATION:
        return server
    server.receive_data(b"\x80\x01", 0.0)
    _drain(server)
    if state is State.CHALLENGED:
        return server
    _client_feed(server, c.ConnectionResponse("PLAIN", {"LOGIN": "guest", "PASSWORD": "guest"}))
    _drain(server)
    if state is State.AUTHENTICATING:
        return server
    server.accept_login()
    if state is State.TUNING:
        return server
    _client_feed(server, c.ConnectionOpen(1, "/"))
    _drain(server)
    if state is State.OPENING:
        return server
    server.accept_open()
    _client_feed(
        server,
        c.ChannelOpen(1, restartable=True),
        c.HandleOpen(1, 1, 1, 0, True, True, True, False, "q"),
        c.HandleConsume(1, 0, 5),
    )
    _drain(server)
    server.notify(1, c.MessageHeader(body_size=1), b"m")
    if state is State.OPEN:
        return server
    if state is State.CLOSING:
        server.close(320, "bye")
        return server
    _client_feed(server, c.ConnectionClose())
    _drain(server)
    assert server.state is state
    return server


def _written(server: FastServer) -> list[c.Command]:
    decoder = CommandDecoder(1 << 20)
    decoder.receive(server.data_to_send())
    out = []
    while (item := decoder.next()) is not None:
        if isinstance(item, c.Command):
            assert item.FROM_SERVER, item
            out.append(item)
    assert decoder.buffered == 0
    return out


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(list(State)),
    st.sampled_from(list(c.COMMANDS.values())).flatmap(_command),
    st.binary(max_size=40),
)
def test_every_state_and_command(state: State, command: c.Command, fragment: bytes) -> None:
    server = server_in(state)
    _written(server)  # what reaching the state wrote
    wire = encode_command(command)
    owed = getattr(command, "fragment_size", 0)
    if owed and not getattr(command, "out_of_band", False):
        wire += (fragment * (owed // max(len(fragment), 1) + 1))[:owed] if owed < 5000 else b""
    server.receive_data(wire, 1.0)
    events = _drain(server)
    written = _written(server)
    closes = [x for x in written if isinstance(x, c.ConnectionClose)]
    if state in (State.AUTHENTICATING, State.OPENING):
        assert (events, written) == ([], [])  # input waits for the front end's answer
        assert server.state is state
    elif state in (State.CLOSED, State.CLOSE_RECEIVED):
        assert (events, written) == ([], [])  # nothing more is read
        assert server.state is state
    elif state is State.AWAIT_INITIATION:
        assert server.state in (State.CLOSED, State.CHALLENGED, State.AWAIT_INITIATION)
    elif command.TYPE not in ACCEPTED[state]:
        # Out of place: the connection closes with 503 (already closing: close again).
        assert server.state in (State.CLOSING, State.CLOSED)
        if closes:
            assert closes[-1].reply_code in (501, 502, 503)
        else:
            # Unparseable input while already closing: nothing more to say, the socket goes.
            assert state is State.CLOSING
            assert [type(e) for e in events] == [ev.ConnectionClosed]
    else:
        if server.state in (State.CLOSING, State.CLOSED) and state is not State.CLOSING:
            assert closes or any(isinstance(e, ev.ConnectionClosed) for e in events)
    # Whatever happened, the books stay consistent.
    for handle_id, handle in server.handles.items():
        assert handle_id in server.channels[handle.channel_id].handles
    for channel in server.channels.values():
        assert set(channel.outstanding.values()) <= channel.handles


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from([State.CHALLENGED, State.TUNING, State.OPEN, State.CLOSING]),
    st.binary(max_size=60),
)
def test_random_octets_in_every_state(state: State, data: bytes) -> None:
    server = server_in(state)
    _written(server)
    server.receive_data(data, 1.0)
    _drain(server)
    decoder = CommandDecoder(1 << 20)
    decoder.receive(server.data_to_send())
    while (item := decoder.next()) is not None:
        assert isinstance(item, Fragment) or item.FROM_SERVER
