"""Property tests of the AMQP 1.0 connection machine.

1. Every state x every input (h2's state-machine test): a server brought into each
   connection, session and link state is fed any header, SASL frame, performative, empty
   frame or garbage; it either carries on or ends the connection, session or link with one
   of the spec's conditions, and never raises.
2. A hypothesis state machine drives a client/server pair through begins, attaches (accepted
   and refused), credit, transfers both ways (multi-frame), settlements, detaches and ends:
   every message arrives once, in order, and no error ever ends anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hypothesis import HealthCheck, given, settings
from hypothesis import event as note
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from leveret.protocol.amqp10 import (
    AmqpErrorCondition,
    Attach,
    Begin,
    Close,
    ConnectionClosed,
    ConnectionErrorCondition,
    ConnectionState,
    Error,
    LinkAttachRequested,
    LinkDetached,
    LinkErrorCondition,
    MessageReceived,
    Open,
    Role,
    SaslInit,
    SaslMechanisms,
    SaslOutcome,
    SaslResponse,
    SessionBegun,
    SessionEnded,
    SessionErrorCondition,
    Source,
    Target,
)
from leveret.protocol.amqp10.connection import Connection
from leveret.protocol.amqp10.framing import AMQP_HEADER, EMPTY_FRAME, SASL_HEADER, encode_frame
from leveret.testing.amqp10 import ClientServerPair, client_config, server_config
from tests.unit.protocol.amqp10.values import PERFORMATIVES

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.protocol.amqp10.events import Event
    from leveret.protocol.amqp10.types import Composite

CONDITIONS = frozenset(
    str(c)
    for enum in (
        AmqpErrorCondition,
        ConnectionErrorCondition,
        SessionErrorCondition,
        LinkErrorCondition,
    )
    for c in enum
)

# -- 1. every state x every input ------------------------------------------------------------


def _sasl(perf: Composite) -> bytes:
    return encode_frame(0, perf.encode(), 1)


def _amqp(perf: Composite, channel: int = 0) -> bytes:
    return encode_frame(channel, perf.encode())


def _start() -> Connection:
    return Connection(server_config())


def _sasl_state() -> Connection:
    c = _start()
    c.receive_data(SASL_HEADER, 0)
    return c


def _sasl_pending() -> Connection:
    c = _sasl_state()
    c.receive_data(_sasl(SaslInit(mechanism="ANONYMOUS")), 0)
    return c


def _header_wait() -> Connection:
    c = _sasl_pending()
    c.answer_sasl(True)
    c.receive_data(b"", 0)
    return c


def _opening() -> Connection:
    c = _header_wait()
    c.receive_data(AMQP_HEADER, 0)
    return c


def _opened() -> Connection:
    c = _opening()
    c.receive_data(_amqp(Open(container_id="p")), 0)
    return c


def _session() -> Connection:
    c = _opened()
    c.receive_data(_amqp(Begin(next_outgoing_id=0, incoming_window=5, outgoing_window=5), 1), 0)
    return c


def _links() -> Connection:
    """A session with an attached receiving link (credit 3), an attached sending link, and a
    link awaiting our answer."""
    c = _session()
    events = c.receive_data(
        _amqp(Attach(name="in", handle=0, role=Role.SENDER, target=Target()), 1)
        + _amqp(Attach(name="out", handle=1, role=Role.RECEIVER, source=Source()), 1)
        + _amqp(Attach(name="wait", handle=2, role=Role.SENDER, target=Target()), 1),
        0,
    )
    requests = [e for e in events if isinstance(e, LinkAttachRequested)]
    c.accept_link(0, requests[0].handle, credit=3)
    c.accept_link(0, requests[1].handle)
    return c


def _detach_sent() -> Connection:
    c = _links()
    c.detach(0, 0)
    return c


def _end_sent() -> Connection:
    c = _links()
    c.end(0)
    return c


def _close_sent() -> Connection:
    c = _links()
    c.close()
    return c


def _closed() -> Connection:
    c = _opened()
    c.receive_data(_amqp(Close()), 0)
    return c


STATES: dict[str, Callable[[], Connection]] = {
    "start": _start,
    "sasl": _sasl_state,
    "sasl-pending": _sasl_pending,
    "header-wait": _header_wait,
    "opening": _opening,
    "opened": _opened,
    "session": _session,
    "links": _links,
    "detach-sent": _detach_sent,
    "end-sent": _end_sent,
    "close-sent": _close_sent,
    "closed": _closed,
}

SASL_PERFORMATIVES = st.one_of(
    st.builds(SaslMechanisms, sasl_server_mechanisms=st.just(("PLAIN",))),
    st.builds(
        SaslInit,
        mechanism=st.sampled_from(["PLAIN", "ANONYMOUS", "EXTERNAL", "X"]),
        initial_response=st.none() | st.binary(max_size=12),
    ),
    st.builds(SaslResponse, response=st.binary(max_size=12)),
    st.builds(SaslOutcome, code=st.integers(0, 4)),
)
INPUTS = st.one_of(
    st.sampled_from([AMQP_HEADER, SASL_HEADER, b"AMQP\x02\x01\x00\x00", b"GET / HTTP/1.1\r\n"]),
    st.just(EMPTY_FRAME),
    st.binary(max_size=30),
    st.builds(_sasl, SASL_PERFORMATIVES),
    st.builds(
        lambda perf, channel, payload: encode_frame(channel, perf.encode() + payload),
        PERFORMATIVES,
        st.sampled_from([0, 1, 2]),
        st.sampled_from([b"", b"payload"]),
    ),
)


def _check(events: list[Event]) -> None:
    for event in events:
        # What this side ends carries a spec condition (or none: an end the test asked for).
        if isinstance(event, ConnectionClosed | SessionEnded | LinkDetached) and event.local:
            assert event.error is None or event.error.condition in CONDITIONS, event


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(STATES)), st.lists(INPUTS, min_size=1, max_size=3))
def test_every_state_and_input_carries_on_or_closes_properly(
    state: str, inputs: list[bytes]
) -> None:
    server = STATES[state]()
    server.data_to_send(0)
    for data in inputs:
        was_closing = server.state in (ConnectionState.CLOSE_SENT, ConnectionState.CLOSED)
        events = server.receive_data(data, 0)
        _check(events)
        if any(isinstance(e, ConnectionClosed) for e in events):
            assert server.state in (ConnectionState.CLOSE_SENT, ConnectionState.CLOSED)
        if was_closing:
            assert server.state in (ConnectionState.CLOSE_SENT, ConnectionState.CLOSED)
        out = server.data_to_send(0)
        if server.state is ConnectionState.CLOSED and not was_closing and out:
            # What goes out before the socket closes is a header, a SASL outcome or a close.
            assert out[:4] == b"AMQP" or b"\x00\x53\x18" in out or b"\x00\x53\x44" in out
    assert server.get_timer() is None or server.state is not ConnectionState.CLOSED


# -- 2. a client/server pair driven by a state machine ------------------------------------


@dataclass
class _Link:
    name: str
    client_role: bool
    client: tuple[int, int]
    server: tuple[int, int] | None = None
    sent: list[bytes] = field(default_factory=list)
    received: list[bytes] = field(default_factory=list)
    unsettled: list[int] = field(default_factory=list)  # receiver-side delivery ids


class PairMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.pair = ClientServerPair(
            client=client_config(max_frame_size=600, incoming_window=6),
            server=server_config(max_frame_size=512, incoming_window=4),
        )
        self.pair.open()
        self.sessions: list[int] = []  # client channels
        self.links: dict[str, _Link] = {}
        self.by_client: dict[tuple[int, int], _Link] = {}
        self.by_server: dict[tuple[int, int], _Link] = {}
        self.counter = 0
        self.refuse_next = False
        self.server_channels: dict[int, int] = {}  # client channel -> server channel
        self.throttled: set[int] = set()  # client channels whose server window is closed
        self.delivered = 0

    # Every exchange goes through here: events are checked and turned into the model.
    def _pump(self) -> None:
        """Pump until quiet, answering attaches and recording messages as they come."""
        while True:
            client_events, server_events = self.pair.pump()
            if not client_events and not server_events:
                return
            self._server_events(server_events)
            self._client_events(client_events)

    def _server_events(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, LinkAttachRequested):
                link = self.links[event.name]
                link.server = (event.channel, event.handle)
                self.by_server[link.server] = link
                if self.refuse_next:
                    error = Error(condition="amqp:not-found")
                    self.pair.server.refuse_link(event.channel, event.handle, error)
                else:
                    self.pair.server.accept_link(
                        event.channel, event.handle, credit=5, auto_credit=True
                    )
            elif isinstance(event, MessageReceived):
                self.by_server[(event.channel, event.handle)].received.append(event.payload)
                self.delivered += 1
            else:
                self._common(event, client=False)

    def _client_events(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, MessageReceived):
                link = self.by_client[(event.channel, event.handle)]
                link.received.append(event.payload)
                self.delivered += 1
                if not event.settled:
                    link.unsettled.append(event.delivery_id)
            else:
                self._common(event, client=True)

    def _common(self, event: Event, *, client: bool) -> None:
        assert not isinstance(event, ConnectionClosed), event
        if isinstance(event, SessionEnded):
            assert event.error is None, event
            if client:
                self.sessions.remove(event.channel)
                self.throttled.discard(event.channel)
                for name, link in list(self.links.items()):
                    if link.client[0] == event.channel:
                        self._forget(name)
        elif isinstance(event, SessionBegun) and not client:
            self.server_channels[event.remote_channel] = event.channel
        elif isinstance(event, LinkDetached) and client:
            found = self.by_client.get((event.channel, event.handle))
            if found is not None:
                # The only error a link may end with here is the refusal the test asked for.
                assert event.error is None or event.error.condition == "amqp:not-found", event
                self._forget(found.name)

    def _forget(self, name: str) -> None:
        link = self.links.pop(name)
        self.by_client.pop(link.client, None)
        if link.server is not None:
            self.by_server.pop(link.server, None)

    @initialize()
    def start_with_a_link_each_way(self) -> None:
        self.begin()
        self.refuse_next = False
        for role in (Role.SENDER, Role.RECEIVER):
            self._attach(self.sessions[0], role)
        self.pair.client.grant_credit(*self.links["link-2"].client, 4)
        self._pump()

    @rule()
    def begin(self) -> None:
        channel = self.pair.client.begin()
        self.sessions.append(channel)
        self._pump()

    def _attach(self, channel: int, role: bool) -> None:
        self.counter += 1
        name = f"link-{self.counter}"
        handle = self.pair.client.attach(
            channel, name, role, source=Source(address="s"), target=Target(address="t")
        )
        link = _Link(name, role, (channel, handle))
        self.links[name] = link
        self.by_client[link.client] = link
        self._pump()

    @precondition(lambda self: bool(self.sessions))
    @rule(data=st.data(), role=st.booleans(), refuse=st.booleans())
    def attach(self, data: st.DataObject, role: bool, refuse: bool) -> None:
        self.refuse_next = refuse
        self._attach(data.draw(st.sampled_from(self.sessions)), role)

    def _attached(self, role: bool) -> list[_Link]:
        return [
            lk for lk in self.links.values() if lk.client_role == role and lk.server is not None
        ]

    @precondition(lambda self: bool(self._attached(Role.RECEIVER)))
    @rule(data=st.data(), credit=st.integers(0, 6))
    def grant(self, data: st.DataObject, credit: int) -> None:
        link = data.draw(st.sampled_from(self._attached(Role.RECEIVER)))
        self.pair.client.grant_credit(*link.client, credit)
        self._pump()

    @precondition(lambda self: bool(self._attached(Role.SENDER) or self._attached(Role.RECEIVER)))
    @rule(
        data=st.data(),
        size=st.sampled_from([0, 5, 300, 700, 2000]),
        settled=st.booleans(),
        count=st.integers(1, 6),
    )
    def send(self, data: st.DataObject, size: int, settled: bool, count: int) -> None:
        link = data.draw(
            st.sampled_from(self._attached(Role.SENDER) + self._attached(Role.RECEIVER))
        )
        payload = bytes([len(link.sent) % 256]) * size
        key: tuple[int, int] | None = link.client
        machine = self.pair.client
        if link.client_role == Role.RECEIVER:
            machine, key = self.pair.server, link.server
        assert key is not None
        for _ in range(min(count, machine.credit(*key))):
            machine.send_transfer(*key, payload, settled=settled)
            link.sent.append(payload)
        self._pump()

    # Sending is the point of a link: two more rules doing it make it as likely as the rest.
    @precondition(lambda self: bool(self._attached(Role.SENDER) or self._attached(Role.RECEIVER)))
    @rule(data=st.data(), count=st.integers(1, 6))
    def send_small(self, data: st.DataObject, count: int) -> None:
        self.send(data, 10, False, count)

    @precondition(lambda self: bool(self._attached(Role.SENDER) or self._attached(Role.RECEIVER)))
    @rule(data=st.data(), count=st.integers(1, 3))
    def send_large(self, data: st.DataObject, count: int) -> None:
        self.send(data, 1500, True, count)

    @precondition(lambda self: any(lk.unsettled for lk in self.links.values()))
    @rule(data=st.data())
    def settle(self, data: st.DataObject) -> None:
        link = data.draw(st.sampled_from([lk for lk in self.links.values() if lk.unsettled]))
        ids = link.unsettled
        self.pair.client.settle(link.client[0], ids[0], ids[-1], role=Role.RECEIVER)
        link.unsettled = []
        self._pump()

    @precondition(lambda self: bool(self._attached(Role.SENDER) or self._attached(Role.RECEIVER)))
    @rule(data=st.data(), by_server=st.booleans(), dice=st.integers(0, 3))
    def detach(self, data: st.DataObject, by_server: bool, dice: int) -> None:
        if dice:
            return  # detaching is one draw in four: links live long enough to carry messages
        link = data.draw(
            st.sampled_from(self._attached(Role.SENDER) + self._attached(Role.RECEIVER))
        )
        if by_server and link.server is not None:
            self.pair.server.detach(*link.server)
        else:
            self.pair.client.detach(*link.client)
        self._pump()

    @precondition(lambda self: bool(self.sessions))
    @rule(data=st.data(), dice=st.integers(0, 3))
    def end(self, data: st.DataObject, dice: int) -> None:
        if dice:
            return
        channel = data.draw(st.sampled_from(self.sessions))
        self.pair.client.end(channel)
        self._pump()

    @precondition(lambda self: bool(self.sessions))
    @rule(data=st.data(), window=st.sampled_from([0, 0, 1, 3]))
    def throttle(self, data: st.DataObject, window: int) -> None:
        """The server closes or reopens a session's incoming window (back-pressure)."""
        channel = data.draw(st.sampled_from(self.sessions))
        self.pair.server.set_incoming_window(self.server_channels[channel], window)
        if window:
            self.throttled.discard(channel)
        else:
            self.throttled.add(channel)
        self._pump()

    @invariant()
    def messages_arrive_once_in_order(self) -> None:
        for link in self.links.values():
            assert link.received == link.sent[: len(link.received)]
            # After a pump nothing is in flight but what a closed window holds back.
            if link.client_role == Role.SENDER and link.client[0] not in self.throttled:
                assert link.received == link.sent

    def teardown(self) -> None:
        bucket = f"{self.delivered}" if self.delivered < 5 else "5+"
        note(f"messages delivered: {bucket}")
        self.pair.client.close()
        self.pair.pump()
        assert self.pair.client.closed
        assert self.pair.server.closed


PairMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestPairMachine = PairMachine.TestCase
