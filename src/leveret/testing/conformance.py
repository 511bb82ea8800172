"""The front-end contract as reusable checks, after trio's ``check_two_way_stream``: every
front end (and, later, the cluster's inter-node link) must pass :func:`check_front_end`.

A front end is driven the way the asyncio adapter drives it, through its connection's
``Shell`` (``server/shell/``), in memory, with time passed in, by a client machine of its
protocol. A :class:`Driver` says how: which front end to attach to a shell, how to make a
client that logs in and opens a vhost, and what the protocol answers where each protocol
has a code of its own. The checks:

- a silent client (nothing, or only its protocol header) is cut at the handshake deadline;
- a refused login is answered only after the refusal delay, and then answered;
- a vhost the user may not open is refused with the protocol's code for it;
- output back-pressure (the transport's buffer full) pauses reading and deliveries, and
  output past the high-water mark pauses deliveries until it is taken;
- the model clock is set on every input, turn and tick;
- the introspection record is complete once the connection is open;
- a bug raised by the front end costs only that connection, closed with the protocol's code;
- a deferral of the whole connection holds its input until it completes, and the reply
  goes first.

``DRIVERS`` holds one driver per front end Leveret has; ``tests/unit/server/
test_frontend_conformance.py`` runs every check over every driver.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from leveret.auth.authn import FAILURE_DELAY
from leveret.auth.users import UserStore
from leveret.convert.stream_records import RECORDS
from leveret.model.broker import Broker
from leveret.model.completion import Completion
from leveret.model.queues.stream_log import MemoryStreamBackend
from leveret.protocol import amqp10 as p10
from leveret.protocol.amqp010 import events as e010
from leveret.protocol.amqp010.connection import Connection as Connection010
from leveret.protocol.amqp010.connection import ConnectionConfig as Config010
from leveret.protocol.amqp010.connection import Role as Role010
from leveret.protocol.amqp08._generated import methods as m08
from leveret.protocol.amqp09._generated import methods as m09
from leveret.protocol.amqp091.client import ClientConnection as Client091
from leveret.protocol.amqp091.connection import Limits
from leveret.protocol.amqp091.framing import FRAME_METHOD, FrameDecoder, encode_method_frame
from leveret.protocol.amqp091.framing import PROTOCOL_HEADER as AMQP091_HEADER
from leveret.protocol.rabbitstream import commands as cs
from leveret.protocol.rabbitstream.client import ClientConnection as StreamClient
from leveret.protocol.rabbitstream.constants import Code as StreamCode
from leveret.server import frontend
from leveret.server.legacy.dialects import AMQP08, AMQP09
from leveret.server.rabbitstream import StreamConnection, StreamServer
from leveret.server.shell.shell import HANDSHAKE_TIMEOUT, Shell
from leveret.testing import amqpfast_client as fc
from leveret.testing.client import feed, new_shell, plain_response, run_turns

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.server.shell.contract import FrontEnd
    from leveret.server.shell.shell import FrontEndFactory

__all__ = ["DRIVERS", "Conversation", "Driver", "check_front_end", "users_for_conformance"]

EARLY: Final = 0.01
# A user who may log in but has no permissions in the default vhost.
STRANGER: Final = "stranger"


class ClientSide(Protocol):
    """One protocol's client machine, as the checks move bytes for it."""

    def data_to_send(self) -> bytes: ...

    def receive(self, data: bytes, now: float) -> None: ...

    @property
    def is_open(self) -> bool: ...

    @property
    def refusal(self) -> object | None:
        """The protocol's code of a refused login or open the client saw, else None."""
        ...

    def probe(self) -> None:
        """Queue a request the server answers (a channel, a session, a metadata query)."""
        ...


@dataclass(frozen=True)
class Driver:
    """How the checks drive one front end."""

    name: str
    protocol: str  # ConnectionInfo.protocol
    factory: Callable[[Broker, UserStore], FrontEndFactory]
    client: Callable[[str, str, str], ClientSide]
    # The first bytes the protocol's client sends (its header, initiation, first command).
    opening: bytes
    # The refusal code of an open of a vhost the user has no access to.
    vhost_refused: object
    # Channels (sessions) the introspection record counts after one probe().
    channels_after_probe: int = 1
    # Whether a refused login closes the socket without an answer the client can see.
    login_refusal_is_silent: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)


def users_for_conformance() -> UserStore:
    """guest/guest (all of /) and ``stranger``/``pw`` (no permissions anywhere)."""
    users = UserStore.with_default_user()
    users.add_user(STRANGER, "pw")
    return users


class Conversation:
    """A client and a front end's shell, bytes moved by hand, time moved by hand."""

    def __init__(self, driver: Driver, client: ClientSide, *, broker: Broker | None = None):
        self.driver = driver
        self.now = 100.0
        self.broker = broker if broker is not None else conformance_broker()
        self.users = users_for_conformance()
        self.shell = new_shell(
            driver.factory(self.broker, self.users),
            self.broker,
            self.users,
            peer="127.0.0.1:40000",
            limits=Limits(heartbeat=0),
            now=self.now,
        )
        self.client = client

    def pump(self, rounds: int = 100) -> None:
        """Move bytes both ways until both sides are quiet."""
        for _ in range(rounds):
            out = self.client.data_to_send()
            if out and not self.shell.finished:
                feed(self.shell, out, self.now)
            back = b"".join(self.shell.take_output(self.now))
            if back:
                self.client.receive(back, self.now)
            if not out and not back:
                return

    def tick_to(self, when: float, *, pump: bool = True) -> None:
        self.now = when
        self.shell.tick(when)
        run_turns(self.shell, when)
        if pump:
            self.pump()


def conformance_broker() -> Broker:
    broker = Broker()
    broker.attach_streams(MemoryStreamBackend(RECORDS))
    return broker


# -- the checks ------------------------------------------------------------------------------
# (Flags are read through calls: the type checker would keep an earlier assert's answer.)


def _finished(shell: Shell) -> bool:
    return shell.finished


def _reading(shell: Shell) -> bool:
    return shell.reading


def _writable(client: Any) -> bool:
    return bool(client.writable)


def _refusal(client: ClientSide) -> object | None:
    return client.refusal


def check_front_end(driver: Driver) -> None:
    """Every check of the contract, for ``driver``'s front end."""
    for check in CHECKS:
        check(driver)


def check_silent_client_is_cut_at_the_deadline(driver: Driver) -> None:
    for first in (b"", driver.opening):
        conv = Conversation(driver, driver.client("guest", "guest", "/"))
        if first:
            feed(conv.shell, first, conv.now)
        deadline = conv.shell.next_deadline(conv.now)
        assert deadline is not None
        assert deadline <= conv.now + HANDSHAKE_TIMEOUT + 0.1
        conv.tick_to(deadline - EARLY, pump=False)
        assert not _finished(conv.shell), f"{driver.name}: cut before the deadline"
        conv.tick_to(conv.now + 2 * EARLY, pump=False)
        assert _finished(conv.shell), f"{driver.name}: a silent client outlived the deadline"
        assert conv.shell.close_reason == "handshake timeout"


def check_refused_login_is_delayed_then_answered(driver: Driver) -> None:
    conv = Conversation(driver, driver.client("guest", "wrong", "/"))
    start = conv.now
    conv.pump()
    assert _refusal(conv.client) is None, f"{driver.name}: refused at once"
    assert not _finished(conv.shell)
    assert conv.shell.client is None
    conv.tick_to(start + FAILURE_DELAY - EARLY)
    assert _refusal(conv.client) is None, f"{driver.name}: refused before the delay"
    assert not _finished(conv.shell)
    conv.tick_to(start + FAILURE_DELAY + EARLY)
    if driver.login_refusal_is_silent:
        assert _finished(conv.shell)
    else:
        assert _refusal(conv.client) is not None, f"{driver.name}: the refusal never came"
    assert not conv.client.is_open
    assert conv.shell.info.user == ""


def check_vhost_without_access_is_refused_with_the_protocols_code(driver: Driver) -> None:
    conv = Conversation(driver, driver.client(STRANGER, "pw", "/"))
    conv.pump()
    assert not conv.client.is_open
    assert _refusal(conv.client) == driver.vhost_refused, (
        f"{driver.name}: refused with {_refusal(conv.client)!r}, not {driver.vhost_refused!r}"
    )
    assert conv.shell.client is None
    assert conv.users.tracker.total == 0  # it never counted against the limits


def _opened(driver: Driver, broker: Broker | None = None) -> Conversation:
    conv = Conversation(driver, driver.client("guest", "guest", "/"), broker=broker)
    conv.pump()
    assert conv.client.is_open, f"{driver.name}: the handshake did not open"
    assert conv.shell.opened
    return conv


def check_back_pressure_pauses_reading_and_deliveries(driver: Driver) -> None:
    conv = _opened(driver)
    shell = conv.shell
    client = shell.client
    assert client is not None
    assert _reading(shell)
    assert _writable(client)
    shell.set_writable(False)  # the transport's buffer is full
    assert not _reading(shell)
    assert not _writable(client)
    shell.set_writable(True)
    assert _reading(shell)
    assert _writable(client)
    # Output past the high-water mark: deliveries pause until the output is taken.
    shell.output.count(shell.output.high_water + 1)
    assert not _writable(client)
    shell.take_output(conv.now)
    assert _writable(client)


def check_clock_is_fresh_on_every_input_turn_and_tick(driver: Driver) -> None:
    conv = Conversation(driver, driver.client("guest", "guest", "/"))
    timers = conv.broker.timers
    for step in range(3):
        conv.now += 1.5
        timers.now = -1.0
        out = conv.client.data_to_send()
        conv.shell.data_received(out, conv.now)
        assert timers.now == conv.now, f"{driver.name}: input at a stale clock"
        timers.now = -1.0
        conv.now += 0.25
        conv.shell.run_turn(conv.now)
        assert timers.now == conv.now, f"{driver.name}: a turn at a stale clock"
        timers.now = -1.0
        conv.now += 0.25
        conv.shell.tick(conv.now)
        assert timers.now == conv.now, f"{driver.name}: a tick at a stale clock"
        back = b"".join(conv.shell.take_output(conv.now))
        if back:
            conv.client.receive(back, conv.now)
        if step == 2:
            conv.pump()


def check_introspection_record_is_complete(driver: Driver) -> None:
    conv = _opened(driver)
    conv.client.probe()
    conv.pump()
    info = conv.shell.info
    assert info.protocol == driver.protocol
    assert info.auth_mechanism == "PLAIN"
    assert (info.user, info.vhost, info.state) == ("guest", "/", "running")
    assert (info.peer_host, info.peer_port) == ("127.0.0.1", 40000)
    assert info.recv_oct > 0
    assert info.recv_cnt > 0
    assert info.send_oct > 0
    assert info.send_cnt > 0
    assert info.frame_max > 0
    assert len(conv.shell.channels()) == driver.channels_after_probe
    for channel in conv.shell.channels():
        assert channel.consumers is not None
        assert len(channel.counters) == 11
    conv.shell.block("low on memory")
    assert info.state == "blocked"
    conv.shell.unblock(conv.now)
    assert info.state == "running"


def check_a_bug_costs_only_its_connection(driver: Driver) -> None:
    conv = _opened(driver)
    bystander = _opened(driver, broker=conv.broker)
    front = conv.shell.front
    assert front is not None
    # The front end with a bug in its handling (a stand-in that delegates the rest: a
    # compiled front end's methods cannot be replaced).
    conv.shell.front = cast("FrontEnd", _Buggy(front))
    conv.client.probe()
    out = conv.client.data_to_send()
    feed(conv.shell, out, conv.now)
    assert conv.shell.internal_errors == 1
    said = b"".join(conv.shell.take_output(conv.now))
    assert said or _finished(conv.shell), f"{driver.name}: closed without a word"
    assert conv.shell.client is None  # released
    bystander.client.probe()
    bystander.pump()
    assert bystander.shell.internal_errors == 0
    assert bystander.client.is_open


def check_a_deferral_holds_the_connection_and_its_reply_goes_first(driver: Driver) -> None:
    conv = _opened(driver)
    shell = conv.shell
    order: list[str] = []
    completion: Completion[str] = Completion()
    shell.defer(completion, lambda done: order.append(done.result()))
    before = shell.info.send_oct
    conv.client.probe()
    conv.pump()
    assert shell.info.send_oct == before, f"{driver.name}: answered while held"
    assert order == []
    completion.resolve("reply")
    assert shell.wants_turn
    run_turns(shell, conv.now)
    conv.pump()
    assert order == ["reply"]
    assert shell.info.send_oct > before, f"{driver.name}: the held input was never handled"
    assert shell.internal_errors == 0


class _Buggy:
    """A front end whose ``run`` raises; everything else is the real one's."""

    def __init__(self, front: FrontEnd) -> None:
        self._front = front

    def run(self, budget: int, now: float) -> None:
        raise RuntimeError("a bug of ours")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._front, name)


CHECKS: tuple[Callable[[Driver], None], ...] = (
    check_silent_client_is_cut_at_the_deadline,
    check_refused_login_is_delayed_then_answered,
    check_vhost_without_access_is_refused_with_the_protocols_code,
    check_back_pressure_pauses_reading_and_deliveries,
    check_clock_is_fresh_on_every_input_turn_and_tick,
    check_introspection_record_is_complete,
    check_a_bug_costs_only_its_connection,
    check_a_deferral_holds_the_connection_and_its_reply_goes_first,
)


# -- one client per protocol -----------------------------------------------------------------


class _Client091:
    """The 0-9-1 client machine."""

    def __init__(self, user: str, password: str, vhost: str) -> None:
        self.machine = Client091(user, password, vhost)
        self.channels = 0

    def data_to_send(self) -> bytes:
        return self.machine.data_to_send()

    def receive(self, data: bytes, now: float) -> None:
        try:
            self.machine.receive_data(data, now)
        except Exception:
            return

    @property
    def is_open(self) -> bool:
        return self.machine.is_open

    @property
    def refusal(self) -> object | None:
        close = self.machine.close_reason
        return close.reply_code if close is not None else None

    def probe(self) -> None:
        self.channels += 1
        self.machine.open_channel(self.channels)


class _ClientLegacy:
    """An AMQP 0-8 or 0-9 client, in the version's own codec (``LegacyClient``'s handshake,
    as a machine). 0-8 field tables have no booleans, so it cannot ask for
    ``authentication_failure_close``: a refused login drops the socket."""

    def __init__(self, user: str, password: str, vhost: str, header: bytes) -> None:
        self.methods: Any = m08 if header == AMQP08_HEADER else m09
        self.user, self.password, self.vhost = user, password, vhost
        self.decoder = FrameDecoder(frame_max=0)
        self.out = [header]
        self.opened = False
        self.closed_with: int | None = None
        self.channels = 0

    def _send(self, channel: int, method: Any) -> None:
        self.out.append(encode_method_frame(channel, method.encode()))

    def data_to_send(self) -> bytes:
        out, self.out = self.out, []
        return b"".join(out)

    def receive(self, data: bytes, now: float) -> None:
        mm = self.methods
        for frame_type, _channel, payload in self.decoder.feed(data):
            if frame_type != FRAME_METHOD:
                continue
            method = mm.decode_method(bytes(payload))
            if isinstance(method, mm.ConnectionStart):
                self._send(
                    0,
                    mm.ConnectionStartOk(
                        client_properties={"product": "leveret.testing.conformance"},
                        mechanism="PLAIN",
                        response=plain_response(self.user, self.password),
                        locale="en_US",
                    ),
                )
            elif isinstance(method, mm.ConnectionTune):
                self._send(
                    0,
                    mm.ConnectionTuneOk(channel_max=method.channel_max, frame_max=method.frame_max),
                )
                self._send(0, mm.ConnectionOpen(virtual_host=self.vhost))
            elif isinstance(method, mm.ConnectionOpenOk):
                self.opened = True
            elif isinstance(method, mm.ConnectionClose):
                self.opened = False
                self.closed_with = method.reply_code
                self._send(0, mm.ConnectionCloseOk())

    @property
    def is_open(self) -> bool:
        return self.opened

    @property
    def refusal(self) -> object | None:
        return self.closed_with

    def probe(self) -> None:
        self.channels += 1
        self._send(self.channels, self.methods.ChannelOpen())


class _Client010:
    def __init__(self, user: str, password: str, vhost: str) -> None:
        self.machine = Connection010(Role010.CLIENT, Config010(virtual_host=vhost))
        self.response = plain_response(user, password)
        self.opened = False
        self.closed_with: int | None = None
        self.sessions = 0
        self.machine.initiate()

    def data_to_send(self) -> bytes:
        return self.machine.data_to_send()

    def receive(self, data: bytes, now: float) -> None:
        for event in self.machine.receive_data(data, now):
            if isinstance(event, e010.StartReceived):
                self.machine.start_ok("PLAIN", self.response)
            elif isinstance(event, e010.ConnectionOpened):
                self.opened = True
            elif isinstance(event, e010.ConnectionClosed):
                self.closed_with = event.reply_code
                self.opened = False

    @property
    def is_open(self) -> bool:
        return self.opened

    @property
    def refusal(self) -> object | None:
        return self.closed_with

    def probe(self) -> None:
        self.sessions += 1
        self.machine.attach(self.sessions, f"conformance-{id(self)}-{self.sessions}".encode())


class _Client10:
    def __init__(self, user: str, password: str, vhost: str) -> None:
        self.machine = p10.Connection(
            p10.ConnectionConfig(
                side=p10.Side.CLIENT,
                container_id="conformance",
                hostname=f"vhost:{vhost}",
                sasl_mechanism="PLAIN",
                sasl_username=user,
                sasl_password=password,
            )
        )
        self.machine.initiate()
        self.opened = False
        self.condition: str | None = None
        self.now = 0.0

    def data_to_send(self) -> bytes:
        return self.machine.data_to_send(self.now)

    def receive(self, data: bytes, now: float) -> None:
        self.now = now
        for event in self.machine.receive_data(data, now):
            if isinstance(event, p10.ConnectionOpened):
                self.opened = True
            elif isinstance(event, p10.ConnectionClosed):
                self.opened = False
                self.condition = event.error.condition if event.error is not None else "closed"

    @property
    def is_open(self) -> bool:
        return self.opened and self.condition is None

    @property
    def refusal(self) -> object | None:
        return self.condition

    def probe(self) -> None:
        self.machine.begin()


class _ClientFast:
    def __init__(self, user: str, password: str, vhost: str) -> None:
        self.machine = fc.FastClient(login=user, password=password, virtual_path=vhost)
        self.machine.initiate()
        self.opened = False
        self.closed_with: int | None = None
        self.channels = 0

    def data_to_send(self) -> bytes:
        return self.machine.data_to_send()

    def receive(self, data: bytes, now: float) -> None:
        for event in self.machine.receive_data(data):
            if isinstance(event, fc.Connected):
                self.opened = True
            elif isinstance(event, fc.ConnectionClosed):
                self.opened = False
                self.closed_with = event.reply_code

    @property
    def is_open(self) -> bool:
        return self.opened

    @property
    def refusal(self) -> object | None:
        return self.closed_with

    def probe(self) -> None:
        self.channels += 1
        self.machine.open_channel(self.channels, confirm_tag=self.channels)


class _ClientStream:
    def __init__(self, user: str, password: str, vhost: str) -> None:
        self.machine = StreamClient(user, password, vhost)

    def data_to_send(self) -> bytes:
        return self.machine.data_to_send()

    def receive(self, data: bytes, now: float) -> None:
        try:
            self.machine.receive_data(data, now)
        except Exception:
            return

    @property
    def is_open(self) -> bool:
        return self.machine.state.value == "open"

    @property
    def refusal(self) -> object | None:
        refused = self.machine.refused
        return refused[1] if refused is not None else None

    def probe(self) -> None:
        self.machine.request(lambda cid: cs.Metadata(cid, ["s"]))


def _by_header(header: bytes) -> Callable[[Broker, UserStore], FrontEndFactory]:
    def make(broker: Broker, users: UserStore) -> FrontEndFactory:
        factory = frontend.choose(header)
        assert factory is not None
        return factory

    return make


def _stream(broker: Broker, users: UserStore) -> FrontEndFactory:
    server = StreamServer(broker, users)

    def make(shell: Shell) -> Any:
        return StreamConnection(server, shell)

    return make


def _legacy_client(header: bytes) -> Callable[[str, str, str], ClientSide]:
    def make(user: str, password: str, vhost: str) -> ClientSide:
        return _ClientLegacy(user, password, vhost, header)

    return make


AMQP09_HEADER: Final = b"AMQP\x01\x01\x00\x09"
AMQP08_HEADER: Final = b"AMQP\x01\x01\x08\x00"
assert AMQP09_HEADER in AMQP09.headers
assert AMQP08_HEADER in AMQP08.headers

DRIVERS: tuple[Driver, ...] = (
    Driver("0-9-1", "AMQP 0-9-1", _by_header(AMQP091_HEADER), _Client091, AMQP091_HEADER, 530),
    Driver(
        "0-9",
        "AMQP 0-9",
        _by_header(AMQP09_HEADER),
        _legacy_client(AMQP09_HEADER),
        AMQP09_HEADER,
        530,
        login_refusal_is_silent=True,
    ),
    Driver(
        "0-8",
        "AMQP 0-8",
        _by_header(AMQP08_HEADER),
        _legacy_client(AMQP08_HEADER),
        AMQP08_HEADER,
        530,
        login_refusal_is_silent=True,
    ),
    Driver(
        "0-10",
        "AMQP 0-10",
        _by_header(b"AMQP\x01\x01\x00\x0a"),
        _Client010,
        b"AMQP\x01\x01\x00\x0a",
        402,  # invalid-path, as Qpid C++
    ),
    Driver(
        "1.0",
        "AMQP 1-0",
        _by_header(b"AMQP\x03\x01\x00\x00"),
        _Client10,
        b"AMQP\x03\x01\x00\x00",
        "amqp:unauthorized-access",
    ),
    Driver("fast", "AMQP/Fast 0.8a2", _by_header(b"\x80\x01"), _ClientFast, b"\x80\x01", 403),
    Driver(
        "stream",
        "stream",
        _stream,
        _ClientStream,
        cs.PeerProperties(1, {}).encode(),
        StreamCode.VIRTUAL_HOST_ACCESS_FAILURE,
        channels_after_probe=0,  # RabbitMQ counts no channels on a stream connection
    ),
)
