"""The side-by-side scenarios: the same client steps against RabbitMQ and Leveret, as data.

Owned by the conformance package; ``conformance/record.py`` runs them against RabbitMQ and
writes ``recorded.json``, ``tests/conformance/test_scenarios.py`` runs them against a
Leveret process and compares. Each scenario is a function of an :class:`Env` (connections
to one broker) returning JSON data: reply codes and the class/method ids of closes, which
methods came back and in what order, counts, header field types, the shape of broker-made
names. Reply texts are kept under ``_``-keys for reading and are not compared.

Scenarios use unique entity names and clean up after themselves, so they run against a
shared broker in any order.
"""

from __future__ import annotations

import struct
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from conformance.wire import (
    QUIET,
    Content,
    Json,
    Method,
    Typed,
    Unexpected,
    Wire,
    properties,
    read_properties,
    shape,
    summary,
    typed_table,
)
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m

if TYPE_CHECKING:
    from collections.abc import Callable


@dataclass(frozen=True)
class Scenario:
    name: str
    area: str
    doc: str
    func: Callable[[Env], Json]


SCENARIOS: dict[str, Scenario] = {}


def scenario(area: str, name: str | None = None) -> Callable[[Callable[[Env], Json]], Any]:
    """Register a scenario (its name defaults to the function's, dashes for underscores)."""

    def register(func: Callable[[Env], Json]) -> Callable[[Env], Json]:
        key = name or func.__name__.replace("_", "-")
        if key in SCENARIOS:
            raise ValueError(f"scenario {key} registered twice")
        SCENARIOS[key] = Scenario(key, area, (func.__doc__ or "").strip(), func)
        return func

    return register


class Env:
    """Connections to one broker for one scenario; :meth:`close` ends them all."""

    def __init__(self, host: str, port: int, scenario_name: str = "s") -> None:
        self.host = host
        self.port = port
        self.prefix = f"conf.{scenario_name}.{uuid.uuid4().hex[:8]}"
        self._wires: list[Wire] = []
        self._cleanup: list[Callable[[Wire, int], None]] = []

    def raw(self) -> Wire:
        """A TCP connection, nothing sent."""
        wire = Wire(self.host, self.port)
        self._wires.append(wire)
        return wire

    def conn(self, **handshake: Any) -> Wire:
        wire = self.raw()
        wire.handshake(**handshake)
        return wire

    def chan(self, **handshake: Any) -> tuple[Wire, int]:
        wire = self.conn(**handshake)
        return wire, wire.channel(1)

    def name(self, what: str = "q") -> str:
        return f"{self.prefix}.{what}"

    def later_delete_queue(self, name: str) -> None:
        self._cleanup.append(lambda w, ch: w.send(ch, m.QueueDelete(queue=name, no_wait=True)))

    def later_delete_exchange(self, name: str) -> None:
        self._cleanup.append(
            lambda w, ch: w.send(ch, m.ExchangeDelete(exchange=name, no_wait=True))
        )

    def close(self) -> None:
        for wire in self._wires:
            wire.close()
        if self._cleanup:
            try:
                wire = Wire(self.host, self.port)
                wire.handshake()
                wire.channel(1)
                for step in self._cleanup:
                    step(wire, 1)
                wire.send(1, m.ChannelClose())
                wire.expect(m.ChannelCloseOk)
                wire.close()
            except (OSError, AssertionError):
                pass


def run(sc: Scenario, host: str, port: int) -> Json:
    """Run one scenario against the broker at ``host:port``; its outcome as data."""
    env = Env(host, port, sc.name)
    try:
        return sc.func(env)
    except Unexpected as exc:
        return {"void": summary(exc.got), "_text": str(exc)}
    finally:
        env.close()


# -- helpers -------------------------------------------------------------------------------

HANDSHAKE_WAIT = 6.0
"""How long to wait for the end of a connection: RabbitMQ closes a socket that failed the
handshake, or that it sent connection.close on, only after a delay (up to about 3 s)."""


def after_close(wire: Wire, event: Json) -> Json:
    """Answer a server close with close-ok and note what follows (normally the end)."""
    if event.get("m") == "connection.close":
        wire.send(0, m.ConnectionCloseOk())
        return {"reply": event, "then": summary(wire.next(HANDSHAKE_WAIT))}
    if event.get("m") == "channel.close":
        wire.send(event["ch"], m.ChannelCloseOk())
    return {"reply": event}


def reply(wire: Wire, channel: int, method: m.Method, timeout: float | None = None) -> Json:
    """Send ``method``; the first answer, and after a connection close what follows."""
    return after_close(wire, wire.call(channel, method, timeout))


def declare(wire: Wire, channel: int, queue: str, **kw: Any) -> None:
    wire.send(channel, m.QueueDeclare(queue=queue, **kw))
    wire.expect(m.QueueDeclareOk, channel)


def declare_x(wire: Wire, channel: int, exchange: str, kind: str = "direct", **kw: Any) -> None:
    wire.send(channel, m.ExchangeDeclare(exchange=exchange, type=kind, **kw))
    wire.expect(m.ExchangeDeclareOk, channel)


def confirm(wire: Wire, channel: int) -> None:
    wire.send(channel, m.ConfirmSelect())
    wire.expect(m.ConfirmSelectOk, channel)


def get(wire: Wire, channel: int, queue: str, *, no_ack: bool = True) -> Json:
    wire.send(channel, m.BasicGet(queue=queue, no_ack=no_ack))
    event = wire.next()
    out = summary(event)
    if isinstance(event, Content):
        out["props"] = read_properties(event.properties)
    return out


def bodies(events: list[Any]) -> list[Json]:
    return [
        [e.method.NAME, e.body.decode()] if isinstance(e, Content) else summary(e) for e in events
    ]


def consumer_tag(event: Content) -> str:
    return str(getattr(event.method, "consumer_tag", ""))


# == protocol headers =======================================================================

_HEADERS = {
    "amqp-0-9-1": b"AMQP\x00\x00\x09\x01",
    "amqp-1-1-0-9": b"AMQP\x01\x01\x00\x09",
    "amqp-1-1-8-0": b"AMQP\x01\x01\x08\x00",
    "amqp-1-1-9-1": b"AMQP\x01\x01\x09\x01",
    "amqp-0-0-9-2": b"AMQP\x00\x00\x09\x02",
    "amqp-1-1-0-10": b"AMQP\x01\x01\x00\x0a",
    "amqp-9-9-9-9": b"AMQP\x09\x09\x09\x09",
    "http-get": b"GET / HTTP/1.1\r\n\r\n",
}


def _header_scenario(header: bytes) -> Callable[[Env], Json]:
    def func(env: Env) -> Json:
        wire = env.raw()
        wire.send_raw(header)
        first = wire.next()
        out = summary(first)
        if isinstance(first, Method) and isinstance(first.method, m.ConnectionStart):
            out["mechanisms"] = sorted(first.method.mechanisms.decode().split())
            out["locales"] = first.method.locales.decode()
            return {"first": out}
        return {"first": out, "then": summary(wire.next(1.5))}

    return func


for _label, _header in _HEADERS.items():
    scenario("protocol header", f"header-{_label}")(_header_scenario(_header))


def _with_ids(event: Any) -> Json:
    """``summary`` plus the raw class/method ids (0-8 numbers some methods differently)."""
    out = summary(event)
    if isinstance(event, Method | Content):
        out["ids"] = [event.method.CLASS_ID, event.method.METHOD_ID]
    elif out["m"] == "odd" and len(out.get("payload", "")) >= 8:
        out["ids"] = [int(out["payload"][0:4], 16), int(out["payload"][4:8], 16)]
    return out


# 0-8 numbers connection.close / close-ok 10/60 and 10/61 (0-9-1: 10/50 and 10/51).
_CLOSE_0_8 = struct.pack(">HH", 10, 60) + m.ConnectionClose(reply_code=200).encode()[4:]


def _old_header_session(header: bytes, close: bytes | None = None) -> Callable[[Env], Json]:
    def func(env: Env) -> Json:
        """An 0-8/0-9 client's whole session: handshake, declare, publish, get, close."""
        wire = env.raw()
        wire.send_raw(header)
        first = wire.next()
        if not (isinstance(first, Method) and isinstance(first.method, m.ConnectionStart)):
            return {"first": summary(first)}
        wire.start_ok()
        tune = wire.expect(m.ConnectionTune)
        assert isinstance(tune, m.ConnectionTune)
        wire.send(
            0,
            m.ConnectionTuneOk(channel_max=tune.channel_max, frame_max=tune.frame_max, heartbeat=0),
        )
        wire.send(0, m.ConnectionOpen(virtual_host="/"))
        steps = [_with_ids(wire.next())]
        wire.send(1, m.ChannelOpen())
        steps.append(_with_ids(wire.next()))
        q = env.name()
        wire.send(1, m.QueueDeclare(queue=q, exclusive=True))
        steps.append(_with_ids(wire.next()))
        wire.publish(1, "", q, b"old")
        steps.append(get(wire, 1, q))
        if close is None:
            wire.send(0, m.ConnectionClose(reply_code=200))
        else:
            wire.frame(framing.FRAME_METHOD, 0, close)
        steps.append(_with_ids(wire.next()))
        return {"start": [first.method.version_major, first.method.version_minor], "steps": steps}

    return func


scenario("protocol header", "session-amqp-1-1-0-9")(_old_header_session(_HEADERS["amqp-1-1-0-9"]))
scenario("protocol header", "session-amqp-1-1-8-0")(
    _old_header_session(_HEADERS["amqp-1-1-8-0"], _CLOSE_0_8)
)


@scenario("protocol header")
def header_in_two_pieces(env: Env) -> Json:
    """The protocol header split over two TCP segments."""
    wire = env.raw()
    wire.send_raw(b"AMQP\x00")
    time.sleep(0.1)
    wire.send_raw(b"\x00\x09\x01")
    return summary(wire.next(), "version_major", "version_minor")


# == connection.tune and the handshake ======================================================


@scenario("tune")
def tune_proposal(env: Env) -> Json:
    """What the broker proposes in connection.tune."""
    wire = env.raw()
    wire.send_raw(framing.PROTOCOL_HEADER)
    wire.expect(m.ConnectionStart)
    wire.start_ok()
    return summary(wire.next())


def _tune_ok(frame_max: int, channel_max: int = 2047, heartbeat: int = 0) -> Callable[[Env], Json]:
    def func(env: Env) -> Json:
        wire = env.raw()
        wire.send_raw(framing.PROTOCOL_HEADER)
        wire.expect(m.ConnectionStart)
        wire.start_ok()
        wire.expect(m.ConnectionTune)
        wire.send(
            0,
            m.ConnectionTuneOk(channel_max=channel_max, frame_max=frame_max, heartbeat=heartbeat),
        )
        wire.send(0, m.ConnectionOpen(virtual_host="/"))
        return after_close(wire, summary(wire.next(HANDSHAKE_WAIT)))

    return func


for _fm in (0, 4095, 4096, 131072, 131073, 1048576):
    scenario("tune", f"tune-ok-frame-max-{_fm}")(_tune_ok(_fm))
for _cm in (0, 1, 2047, 2048, 65535):
    scenario("tune", f"tune-ok-channel-max-{_cm}")(_tune_ok(131072, channel_max=_cm))
scenario("tune", "tune-ok-heartbeat-65535")(_tune_ok(131072, heartbeat=65535))


@scenario("tune")
def open_without_tune_ok(env: Env) -> Json:
    """connection.open straight after start-ok (no tune-ok)."""
    wire = env.raw()
    wire.send_raw(framing.PROTOCOL_HEADER)
    wire.expect(m.ConnectionStart)
    wire.start_ok()
    wire.expect(m.ConnectionTune)
    wire.send(0, m.ConnectionOpen(virtual_host="/"))
    return after_close(wire, summary(wire.next(HANDSHAKE_WAIT)))


@scenario("tune")
def channel_open_before_connection_open(env: Env) -> Json:
    """channel.open after tune-ok but before connection.open."""
    wire = env.raw()
    wire.send_raw(framing.PROTOCOL_HEADER)
    wire.expect(m.ConnectionStart)
    wire.start_ok()
    wire.expect(m.ConnectionTune)
    wire.send(0, m.ConnectionTuneOk(channel_max=2047, frame_max=131072, heartbeat=0))
    wire.send(1, m.ChannelOpen())
    return after_close(wire, summary(wire.next(HANDSHAKE_WAIT)))


@scenario("tune")
def open_unknown_vhost(env: Env) -> Json:
    wire = env.raw()
    wire.send_raw(framing.PROTOCOL_HEADER)
    wire.expect(m.ConnectionStart)
    wire.start_ok()
    wire.expect(m.ConnectionTune)
    wire.send(0, m.ConnectionTuneOk(channel_max=2047, frame_max=131072, heartbeat=0))
    wire.send(0, m.ConnectionOpen(virtual_host="no-such-vhost"))
    return after_close(wire, summary(wire.next(HANDSHAKE_WAIT)))


@scenario("tune")
def second_connection_open(env: Env) -> Json:
    """connection.open again on an open connection."""
    wire = env.conn()
    return reply(wire, 0, m.ConnectionOpen(virtual_host="/"))


# == authentication =========================================================================


def _auth(
    mechanism: str,
    response: bytes | None,
    *,
    user: str = "guest",
    password: str = "guest",
    capability: bool = True,
) -> Callable[[Env], Json]:
    def func(env: Env) -> Json:
        wire = env.raw()
        wire.send_raw(framing.PROTOCOL_HEADER)
        wire.expect(m.ConnectionStart)
        caps = {"authentication_failure_close": capability}
        wire.start_ok(user, password, mechanism=mechanism, response=response, capabilities=caps)
        return after_close(wire, summary(wire.next(HANDSHAKE_WAIT)))

    return func


scenario("authentication", "auth-wrong-password")(_auth("PLAIN", None, password="nope"))
scenario("authentication", "auth-unknown-user")(_auth("PLAIN", None, user="nobody-here"))
scenario("authentication", "auth-wrong-password-no-capability")(
    _auth("PLAIN", None, password="nope", capability=False)
)
scenario("authentication", "auth-unknown-mechanism")(_auth("CRAM-MD5", b"guest"))
scenario("authentication", "auth-plain-malformed")(_auth("PLAIN", b"guest-guest"))
scenario("authentication", "auth-plain-empty")(_auth("PLAIN", b""))
scenario("authentication", "auth-amqplain-wrong-password")(
    _auth("AMQPLAIN", b"\x05LOGINS\x00\x00\x00\x05guest\x08PASSWORDS\x00\x00\x00\x04nope")
)
scenario("authentication", "auth-amqplain-malformed")(_auth("AMQPLAIN", b"\x05LOG"))


# == frames in the wrong place ==============================================================


@scenario("protocol errors")
def queue_method_on_channel_0(env: Env) -> Json:
    wire = env.conn()
    return reply(wire, 0, m.QueueDeclare(queue=env.name(), exclusive=True))


@scenario("protocol errors")
def channel_open_on_channel_0(env: Env) -> Json:
    wire = env.conn()
    return reply(wire, 0, m.ChannelOpen())


@scenario("protocol errors")
def connection_method_on_channel_1(env: Env) -> Json:
    """connection.open sent on an open channel."""
    wire, ch = env.chan()
    return reply(wire, ch, m.ConnectionOpen(virtual_host="/"))


@scenario("protocol errors")
def method_on_unopened_channel(env: Env) -> Json:
    wire = env.conn()
    return reply(wire, 5, m.QueueDeclare(queue=env.name(), exclusive=True))


@scenario("protocol errors")
def method_on_closed_channel(env: Env) -> Json:
    """A method on a channel after its close handshake finished."""
    wire, ch = env.chan()
    wire.send(ch, m.ChannelClose())
    wire.expect(m.ChannelCloseOk)
    return reply(wire, ch, m.QueueDeclare(queue=env.name(), exclusive=True))


@scenario("protocol errors")
def channel_open_twice(env: Env) -> Json:
    wire, ch = env.chan()
    return reply(wire, ch, m.ChannelOpen())


@scenario("protocol errors")
def unsolicited_channel_close_ok(env: Env) -> Json:
    """channel.close-ok on an open channel that nobody asked to close; then a declare."""
    wire, ch = env.chan()
    wire.send(ch, m.ChannelCloseOk())
    first = summary(wire.next(QUIET))
    if first["m"] != "silence":
        return {"first": after_close(wire, first)}
    return {
        "first": first,
        "then": reply(wire, ch, m.QueueDeclare(queue=env.name(), exclusive=True)),
    }


@scenario("protocol errors")
def unsolicited_connection_close_ok(env: Env) -> Json:
    """connection.close-ok that answers nothing; then a channel.open."""
    wire = env.conn()
    wire.send(0, m.ConnectionCloseOk())
    first = summary(wire.next(QUIET))
    if first["m"] != "silence":
        return {"first": after_close(wire, first)}
    return {"first": first, "then": reply(wire, 1, m.ChannelOpen())}


@scenario("protocol errors")
def client_close_then_socket(env: Env) -> Json:
    """The client's connection.close: close-ok, then who closes the socket. The spec leaves
    it to the recipient of close-ok; RabbitMQ waits for the client (aio-pika's robust
    reconnect races with a broker that closes first)."""
    wire = env.conn()
    wire.send(0, m.ConnectionClose(reply_code=200))
    first = summary(wire.next())
    return {"first": first, "then": summary(wire.next(QUIET))}


@scenario("protocol errors")
def channel_close_ok_on_unopened_channel(env: Env) -> Json:
    wire = env.conn()
    wire.send(7, m.ChannelCloseOk())
    first = summary(wire.next(QUIET))
    if first["m"] != "silence":
        return {"first": after_close(wire, first)}
    return {"first": first, "then": reply(wire, 1, m.ChannelOpen())}


@scenario("protocol errors")
def methods_while_channel_closing(env: Env) -> Json:
    """After a server channel.close, before close-ok: the broker ignores what the client sends."""
    wire, ch = env.chan()
    wire.send(ch, m.QueueDeclare(queue=env.name(), passive=True))
    close = summary(wire.next())
    wire.send(ch, m.QueueDeclare(queue=env.name("other"), exclusive=True))
    wire.send(ch, m.BasicQos(prefetch_count=1))
    during = [summary(e) for e in wire.drain()]
    wire.send(ch, m.ChannelCloseOk())
    wire.send(ch, m.ChannelOpen())
    return {"close": close, "during": during, "reopen": summary(wire.next())}


@scenario("protocol errors")
def header_frame_without_method(env: Env) -> Json:
    wire, ch = env.chan()
    frames = framing.encode_content_frames(ch, 60, b"x", b"\x00\x00", 131072)
    wire.send_raw(frames[0])
    return after_close(wire, summary(wire.next()))


@scenario("protocol errors")
def body_frame_without_header(env: Env) -> Json:
    wire, ch = env.chan()
    wire.frame(framing.FRAME_BODY, ch, b"orphan")
    return after_close(wire, summary(wire.next()))


@scenario("protocol errors")
def method_instead_of_content_header(env: Env) -> Json:
    """basic.publish followed by another method instead of its content header."""
    wire, ch = env.chan()
    wire.send(ch, m.BasicPublish(exchange="", routing_key="x"))
    return reply(wire, ch, m.BasicQos(prefetch_count=1))


@scenario("protocol errors")
def method_instead_of_body(env: Env) -> Json:
    """Content header announcing 10 bytes, then a method frame."""
    wire, ch = env.chan()
    wire.send(ch, m.BasicPublish(exchange="", routing_key="x"))
    wire.send_raw(framing.encode_content_frames(ch, 60, b"0123456789", b"\x00\x00", 131072)[0])
    return reply(wire, ch, m.BasicQos(prefetch_count=1))


@scenario("protocol errors")
def body_longer_than_announced(env: Env) -> Json:
    wire, ch = env.chan()
    wire.send(ch, m.BasicPublish(exchange="", routing_key="x"))
    wire.send_raw(framing.encode_content_frames(ch, 60, b"abc", b"\x00\x00", 131072)[0])
    wire.frame(framing.FRAME_BODY, ch, b"abcdef")
    return after_close(wire, summary(wire.next()))


@scenario("protocol errors")
def body_frame_after_empty_body(env: Env) -> Json:
    """A body frame after a content header announcing 0 bytes."""
    wire, ch = env.chan()
    wire.send(ch, m.BasicPublish(exchange="", routing_key="x"))
    wire.send_raw(framing.encode_content_frames(ch, 60, b"", b"\x00\x00", 131072)[0])
    wire.frame(framing.FRAME_BODY, ch, b"late")
    return after_close(wire, summary(wire.next()))


@scenario("protocol errors")
def content_header_on_channel_0(env: Env) -> Json:
    wire = env.conn()
    wire.send_raw(framing.encode_content_frames(0, 60, b"x", b"\x00\x00", 131072)[0])
    return after_close(wire, summary(wire.next()))


@scenario("protocol errors")
def heartbeat_on_channel_1(env: Env) -> Json:
    wire, ch = env.chan()
    wire.frame(framing.FRAME_HEARTBEAT, ch, b"")
    return after_close(wire, summary(wire.next()))


@scenario("protocol errors")
def unknown_frame_type(env: Env) -> Json:
    wire = env.conn()
    wire.frame(9, 0, b"\x00")
    return after_close(wire, summary(wire.next()))


@scenario("protocol errors")
def bad_frame_end(env: Env) -> Json:
    wire = env.conn()
    wire.send_raw(framing.encode_method_frame(1, m.ChannelOpen().encode())[:-1] + b"\x00")
    return after_close(wire, summary(wire.next()))


@scenario("protocol errors")
def truncated_method_arguments(env: Env) -> Json:
    """queue.declare whose argument list stops in the middle of the queue name."""
    wire, ch = env.chan()
    payload = m.QueueDeclare(queue="abcdef").encode()[:8]
    wire.frame(framing.FRAME_METHOD, ch, payload)
    return after_close(wire, summary(wire.next()))


@scenario("protocol errors")
def unknown_method_id(env: Env) -> Json:
    wire, ch = env.chan()
    wire.frame(framing.FRAME_METHOD, ch, b"\x00\x32\x00\x63")
    return after_close(wire, summary(wire.next()))


@scenario("protocol errors")
def content_header_wrong_class(env: Env) -> Json:
    """basic.publish whose content header names class 50 (queue)."""
    wire, ch = env.chan()
    wire.send(ch, m.BasicPublish(exchange="", routing_key="x"))
    wire.send_raw(framing.encode_content_frames(ch, 50, b"", b"\x00\x00", 131072)[0])
    return after_close(wire, summary(wire.next()))


@scenario("protocol errors")
def interleaved_content_on_two_channels(env: Env) -> Json:
    """Content of two publishes on channels 1 and 2, frames interleaved (allowed)."""
    wire, _ch = env.chan()
    wire.channel(2)
    q = env.name()
    declare(wire, 1, q, exclusive=True)
    h1, b1 = framing.encode_content_frames(1, 60, b"one", b"\x00\x00", 131072)
    h2, b2 = framing.encode_content_frames(2, 60, b"two", b"\x00\x00", 131072)
    pub = m.BasicPublish(exchange="", routing_key=q).encode()
    wire.send_raw(framing.encode_method_frame(1, pub) + framing.encode_method_frame(2, pub))
    wire.send_raw(h1 + h2 + b2 + b1)
    time.sleep(0.1)
    return sorted(get(wire, 1, q)["body"] for _ in range(2))


# == frame_max ============================================================================


def _body_frame(payload: int, frame_max: int = 4096) -> Callable[[Env], Json]:
    def func(env: Env) -> Json:
        wire, ch = env.chan(frame_max=frame_max)
        q = env.name()
        declare(wire, ch, q, exclusive=True)
        body = b"b" * payload
        method = framing.encode_method_frame(
            ch, m.BasicPublish(exchange="", routing_key=q).encode()
        )
        header = framing.encode_content_frames(ch, 60, body, b"\x00\x00", 0)[0]
        wire.send_raw(method + header + framing.encode_frame(framing.FRAME_BODY, ch, body))
        wire.send(ch, m.BasicQos(prefetch_count=0))
        first = summary(wire.next())
        if first["m"] != "basic.qos-ok":
            return after_close(wire, first)
        got = get(wire, ch, q)
        return {"qos": first, "got": got["m"], "size": len(got.get("body", ""))}

    return func


for _delta in (-1, 0, 1, 8, 9, 100, 4096):
    scenario("frame_max", f"body-frame-frame-max{_delta:+d}")(_body_frame(4096 - 8 + _delta))


@scenario("frame_max")
def method_frame_over_frame_max(env: Env) -> Json:
    """A queue.declare whose arguments table makes the frame 5000 bytes (frame_max 4096)."""
    wire, ch = env.chan(frame_max=4096)
    method = m.QueueDeclare(queue=env.name(), exclusive=True, arguments={"x-pad": "p" * 4900})
    return after_close(wire, wire.call(ch, method))


@scenario("frame_max")
def large_message_many_frames(env: Env) -> Json:
    """A 100 000-byte body in frames of exactly frame_max (4096); read back whole."""
    wire, ch = env.chan(frame_max=4096)
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    body = bytes(range(256)) * 390 + b"end"
    wire.publish(ch, "", q, body)
    got = get(wire, ch, q)
    return {"m": got["m"], "same": got.get("body", "").encode("latin-1") == body}


# == channel numbers ========================================================================


def _channel_number(number: int, channel_max: int | None) -> Callable[[Env], Json]:
    def func(env: Env) -> Json:
        wire = env.conn(channel_max=channel_max)
        return reply(wire, number, m.ChannelOpen())

    return func


_CHANNEL_CASES: tuple[tuple[int, int | None], ...] = (
    (10, 10),
    (11, 10),
    (2047, None),
    (2048, None),
    (65535, None),
)
for _n, _limit in _CHANNEL_CASES:
    _label = "negotiated" if _limit is None else str(_limit)
    scenario("channels", f"channel-open-{_n}-channel-max-{_label}")(_channel_number(_n, _limit))


@scenario("channels")
def reuse_closed_channel_number(env: Env) -> Json:
    wire, ch = env.chan()
    wire.send(ch, m.ChannelClose())
    wire.expect(m.ChannelCloseOk)
    return reply(wire, ch, m.ChannelOpen())


@scenario("channels")
def reuse_channel_after_server_close(env: Env) -> Json:
    """The server closed the channel (404), the client said close-ok and reopens it."""
    wire, ch = env.chan()
    wire.send(ch, m.QueueDeclare(queue=env.name(), passive=True))
    wire.expect(m.ChannelClose)
    wire.send(ch, m.ChannelCloseOk())
    return reply(wire, ch, m.ChannelOpen())


@scenario("channels")
def reopen_before_close_ok(env: Env) -> Json:
    """The server closed the channel; the client reopens it without close-ok."""
    wire, ch = env.chan()
    wire.send(ch, m.QueueDeclare(queue=env.name(), passive=True))
    wire.expect(m.ChannelClose)
    return reply(wire, ch, m.ChannelOpen(), timeout=QUIET * 2)


@scenario("channels")
def more_channels_than_channel_max(env: Env) -> Json:
    """channel_max 3: open 1, 2, 3, close 2, open 4 (count fits, number does not)."""
    wire = env.conn(channel_max=3)
    for n in (1, 2, 3):
        wire.channel(n)
    wire.send(2, m.ChannelClose())
    wire.expect(m.ChannelCloseOk)
    return reply(wire, 4, m.ChannelOpen())


@scenario("channels")
def channel_flow_active(env: Env) -> Json:
    wire, ch = env.chan()
    return wire.call(ch, m.ChannelFlow(active=True))


# == exchanges ==============================================================================


def _redeclare_x(first: dict[str, Any], second: dict[str, Any]) -> Callable[[Env], Json]:
    def func(env: Env) -> Json:
        wire, ch = env.chan()
        x = env.name("x")
        env.later_delete_exchange(x)
        wire.send(ch, m.ExchangeDeclare(exchange=x, **first))
        wire.expect(m.ExchangeDeclareOk)
        return reply(wire, ch, m.ExchangeDeclare(exchange=x, **second))

    return func


_X_REDECLARE: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "type": ({"type": "direct"}, {"type": "fanout"}),
    "durable": ({"type": "direct"}, {"type": "direct", "durable": True}),
    "auto-delete": ({"type": "direct"}, {"type": "direct", "auto_delete": True}),
    "internal": ({"type": "direct"}, {"type": "direct", "internal": True}),
    "same-args": (
        {"type": "direct", "arguments": {"x-foo": "a"}},
        {"type": "direct", "arguments": {"x-foo": "a"}},
    ),
    "other-custom-arg": (
        {"type": "direct", "arguments": {"x-foo": "a"}},
        {"type": "direct", "arguments": {"x-foo": "b"}},
    ),
    "added-custom-arg": ({"type": "direct"}, {"type": "direct", "arguments": {"x-foo": "a"}}),
    "alternate-exchange": (
        {"type": "direct", "arguments": {"alternate-exchange": "ae1"}},
        {"type": "direct", "arguments": {"alternate-exchange": "ae2"}},
    ),
    "added-alternate-exchange": (
        {"type": "direct"},
        {"type": "direct", "arguments": {"alternate-exchange": "ae1"}},
    ),
    "passive-other-type": ({"type": "direct"}, {"type": "fanout", "passive": True}),
}
for _label, (_a, _b) in _X_REDECLARE.items():
    scenario("exchanges", f"exchange-redeclare-{_label}")(_redeclare_x(_a, _b))


def _x_call(method: m.Method) -> Callable[[Env], Json]:
    def func(env: Env) -> Json:
        wire, ch = env.chan()
        return reply(wire, ch, method)

    return func


for _label, _method in {
    "passive-default": m.ExchangeDeclare(exchange="", type="direct", passive=True),
    "passive-default-as-fanout": m.ExchangeDeclare(exchange="", type="fanout", passive=True),
    "declare-default": m.ExchangeDeclare(exchange="", type="direct"),
    "passive-amq-direct": m.ExchangeDeclare(exchange="amq.direct", type="direct", passive=True),
    "passive-missing": m.ExchangeDeclare(exchange="conf.no-such-x", type="direct", passive=True),
    "declare-amq-prefix": m.ExchangeDeclare(exchange="amq.conformance", type="direct"),
    "declare-unknown-type": m.ExchangeDeclare(exchange="conf.badtype", type="x-nonesuch"),
    "declare-empty-type": m.ExchangeDeclare(exchange="conf.emptytype", type=""),
    "redeclare-amq-direct-durable": m.ExchangeDeclare(
        exchange="amq.direct", type="direct", durable=True
    ),
    "delete-missing": m.ExchangeDelete(exchange="conf.no-such-x"),
    "delete-default": m.ExchangeDelete(exchange=""),
    "delete-amq-direct": m.ExchangeDelete(exchange="amq.direct"),
    "bind-missing-source": m.ExchangeBind(
        destination="amq.fanout", source="conf.no-such-x", routing_key="k"
    ),
    "bind-missing-destination": m.ExchangeBind(
        destination="conf.no-such-x", source="amq.direct", routing_key="k"
    ),
    "unbind-missing-binding": m.ExchangeUnbind(
        destination="amq.fanout", source="amq.direct", routing_key="conf.none"
    ),
    "unbind-missing-source": m.ExchangeUnbind(
        destination="amq.fanout", source="conf.no-such-x", routing_key="k"
    ),
    "unbind-missing-destination": m.ExchangeUnbind(
        destination="conf.no-such-x", source="amq.direct", routing_key="k"
    ),
}.items():
    scenario("exchanges", f"exchange-{_label}")(_x_call(_method))


@scenario("exchanges")
def exchange_delete_if_unused_bound(env: Env) -> Json:
    wire, ch = env.chan()
    x, q = env.name("x"), env.name()
    env.later_delete_exchange(x)
    declare_x(wire, ch, x)
    declare(wire, ch, q, exclusive=True)
    wire.send(ch, m.QueueBind(queue=q, exchange=x, routing_key="k"))
    wire.expect(m.QueueBindOk)
    return reply(wire, ch, m.ExchangeDelete(exchange=x, if_unused=True))


@scenario("exchanges")
def exchange_delete_if_unused_as_source_of_exchange(env: Env) -> Json:
    """if_unused with only an exchange-to-exchange binding from it."""
    wire, ch = env.chan()
    x = env.name("x")
    env.later_delete_exchange(x)
    declare_x(wire, ch, x)
    wire.send(ch, m.ExchangeBind(destination="amq.fanout", source=x, routing_key="k"))
    wire.expect(m.ExchangeBindOk)
    out = reply(wire, ch, m.ExchangeDelete(exchange=x, if_unused=True))
    wire.send(ch, m.ExchangeUnbind(destination="amq.fanout", source=x, routing_key="k"))
    return out


@scenario("exchanges")
def publish_missing_exchange(env: Env) -> Json:
    wire, ch = env.chan()
    wire.publish(ch, "conf.no-such-x", "k", b"x")
    return after_close(wire, summary(wire.next()))


@scenario("exchanges")
def publish_internal_exchange(env: Env) -> Json:
    wire, ch = env.chan()
    x = env.name("x")
    env.later_delete_exchange(x)
    declare_x(wire, ch, x, internal=True)
    wire.publish(ch, x, "k", b"x")
    return after_close(wire, summary(wire.next()))


@scenario("exchanges")
def publish_default_exchange_missing_queue_mandatory(env: Env) -> Json:
    wire, ch = env.chan()
    wire.publish(ch, "", env.name("nothing"), b"x", mandatory=True)
    return summary(wire.next())


@scenario("exchanges")
def bind_queue_to_default_exchange(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    return reply(wire, ch, m.QueueBind(queue=q, exchange="", routing_key="k"))


# == queues =================================================================================


def _q_call(method: m.Method) -> Callable[[Env], Json]:
    def func(env: Env) -> Json:
        wire, ch = env.chan()
        return reply(wire, ch, method)

    return func


for _label, _method in {
    "delete-missing": m.QueueDelete(queue="conf.no-such-q"),
    "delete-missing-if-empty": m.QueueDelete(queue="conf.no-such-q", if_empty=True),
    "delete-missing-if-unused": m.QueueDelete(queue="conf.no-such-q", if_unused=True),
    "purge-missing": m.QueuePurge(queue="conf.no-such-q"),
    "passive-missing": m.QueueDeclare(queue="conf.no-such-q", passive=True),
    "declare-amq-prefix": m.QueueDeclare(queue="amq.conformance"),
    "bind-missing-queue": m.QueueBind(queue="conf.no-such-q", exchange="amq.direct"),
    "unbind-missing-queue": m.QueueUnbind(queue="conf.no-such-q", exchange="amq.direct"),
    "unbind-missing-exchange": m.QueueUnbind(queue="conf.no-such-q", exchange="conf.no-such-x"),
    "get-missing": m.BasicGet(queue="conf.no-such-q"),
    "consume-missing": m.BasicConsume(queue="conf.no-such-q"),
    "declare-x-expires-0": m.QueueDeclare(queue="conf.exp0", arguments={"x-expires": 0}),
    "declare-x-max-length-negative": m.QueueDeclare(
        queue="conf.maxlen", arguments={"x-max-length": -1}
    ),
    "declare-x-message-ttl-string": m.QueueDeclare(
        queue="conf.ttlstr", arguments={"x-message-ttl": "100"}
    ),
    "declare-unknown-queue-type": m.QueueDeclare(
        queue="conf.qtype", arguments={"x-queue-type": "nonesuch"}
    ),
}.items():
    scenario("queues", f"queue-{_label}")(_q_call(_method))


@scenario("queues")
def queue_unbind_missing_binding(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    return reply(wire, ch, m.QueueUnbind(queue=q, exchange="amq.direct", routing_key="none"))


@scenario("queues")
def queue_unbind_missing_exchange_existing_queue(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    return reply(wire, ch, m.QueueUnbind(queue=q, exchange="conf.no-such-x", routing_key="k"))


@scenario("queues")
def queue_bind_missing_exchange(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    return reply(wire, ch, m.QueueBind(queue=q, exchange="conf.no-such-x", routing_key="k"))


@scenario("queues")
def queue_delete_twice(env: Env) -> Json:
    """Delete a queue with 2 messages, then delete it again."""
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q)
    wire.publish(ch, "", q, b"1")
    wire.publish(ch, "", q, b"2")
    first = wire.call(ch, m.QueueDelete(queue=q))
    return {"first": first, "second": reply(wire, ch, m.QueueDelete(queue=q))}


@scenario("queues")
def queue_delete_if_empty_not_empty(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    wire.publish(ch, "", q, b"1")
    return reply(wire, ch, m.QueueDelete(queue=q, if_empty=True))


@scenario("queues")
def queue_delete_if_unused_with_consumer(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    wire.send(ch, m.BasicConsume(queue=q, consumer_tag="c1"))
    wire.expect(m.BasicConsumeOk)
    return reply(wire, ch, m.QueueDelete(queue=q, if_unused=True))


@scenario("queues")
def queue_delete_exclusive_of_other_connection(env: Env) -> Json:
    owner, ch = env.chan()
    q = env.name()
    declare(owner, ch, q, exclusive=True)
    other, ch2 = env.chan()
    return reply(other, ch2, m.QueueDelete(queue=q))


def _redeclare_q(first: dict[str, Any], second: dict[str, Any]) -> Callable[[Env], Json]:
    def func(env: Env) -> Json:
        wire, ch = env.chan()
        q = env.name()
        env.later_delete_queue(q)
        declare(wire, ch, q, **first)
        return reply(wire, ch, m.QueueDeclare(queue=q, **second))

    return func


_Q_REDECLARE: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "durable": ({}, {"durable": True}),
    "auto-delete": ({}, {"auto_delete": True}),
    "exclusive": ({}, {"exclusive": True}),
    "ttl": ({"arguments": {"x-message-ttl": 1000}}, {"arguments": {"x-message-ttl": 2000}}),
    "ttl-int-widths": (
        {"arguments": {"x-message-ttl": 1000}},
        {"arguments": {"x-message-ttl": 1000.0}},
    ),
    "custom-arg": ({"arguments": {"x-foo": "a"}}, {"arguments": {"x-foo": "b"}}),
    "added-max-length": ({}, {"arguments": {"x-max-length": 10}}),
    "passive-other-args": ({"arguments": {"x-max-length": 10}}, {"passive": True}),
}
for _label, (_a, _b) in _Q_REDECLARE.items():
    scenario("queues", f"queue-redeclare-{_label}")(_redeclare_q(_a, _b))


@scenario("queues")
def queue_declare_exclusive_of_other_connection(env: Env) -> Json:
    owner, ch = env.chan()
    q = env.name()
    declare(owner, ch, q, exclusive=True)
    other, ch2 = env.chan()
    return {
        "declare": reply(other, ch2, m.QueueDeclare(queue=q)),
        "passive": reply(other, other.channel(2), m.QueueDeclare(queue=q, passive=True)),
    }


@scenario("queues")
def server_named_queue(env: Env) -> Json:
    wire, ch = env.chan()
    wire.send(ch, m.QueueDeclare(queue="", exclusive=True))
    ok = wire.expect(m.QueueDeclareOk)
    assert isinstance(ok, m.QueueDeclareOk)
    return {"shape": shape(ok.queue), "counts": [ok.message_count, ok.consumer_count]}


@scenario("queues")
def declare_ok_counts(env: Env) -> Json:
    """message_count and consumer_count in a passive declare-ok."""
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    for i in range(3):
        wire.publish(ch, "", q, str(i).encode())
    wire.channel(2)
    wire.send(2, m.BasicQos(prefetch_count=1))
    wire.expect(m.BasicQosOk)
    wire.send(2, m.BasicConsume(queue=q, consumer_tag="c"))
    wire.expect(m.BasicConsumeOk)
    wire.next()
    return wire.call(ch, m.QueueDeclare(queue=q, passive=True))


@scenario("queues")
def purge_counts(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    for i in range(4):
        wire.publish(ch, "", q, str(i).encode())
    wire.send(ch, m.BasicGet(queue=q))
    wire.next()
    return wire.call(ch, m.QueuePurge(queue=q))


# == consumers ==============================================================================


@scenario("consumers")
def server_consumer_tag(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    wire.send(ch, m.BasicConsume(queue=q))
    ok = wire.expect(m.BasicConsumeOk)
    assert isinstance(ok, m.BasicConsumeOk)
    return shape(ok.consumer_tag)


@scenario("consumers")
def duplicate_consumer_tag(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    wire.send(ch, m.BasicConsume(queue=q, consumer_tag="dup"))
    wire.expect(m.BasicConsumeOk)
    return reply(wire, ch, m.BasicConsume(queue=q, consumer_tag="dup"))


@scenario("consumers")
def cancel_unknown_tag(env: Env) -> Json:
    wire, ch = env.chan()
    wire.send(ch, m.BasicCancel(consumer_tag="nobody"))
    event = wire.next()
    out = summary(event)
    if isinstance(event, Method) and isinstance(event.method, m.BasicCancelOk):
        out["tag"] = event.method.consumer_tag
    return after_close(wire, out)


@scenario("consumers")
def exclusive_consume_with_other_consumer(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    wire.send(ch, m.BasicConsume(queue=q, consumer_tag="a"))
    wire.expect(m.BasicConsumeOk)
    return reply(wire, ch, m.BasicConsume(queue=q, consumer_tag="b", exclusive=True))


@scenario("consumers")
def consume_after_exclusive_consumer(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    wire.send(ch, m.BasicConsume(queue=q, consumer_tag="a", exclusive=True))
    wire.expect(m.BasicConsumeOk)
    return reply(wire, ch, m.BasicConsume(queue=q, consumer_tag="b"))


@scenario("consumers")
def consume_exclusive_queue_of_other_connection(env: Env) -> Json:
    owner, ch = env.chan()
    q = env.name()
    declare(owner, ch, q, exclusive=True)
    other, ch2 = env.chan()
    return reply(other, ch2, m.BasicConsume(queue=q))


def _ack_case(steps: Callable[[Wire, int, str], None]) -> Callable[[Env], Json]:
    def func(env: Env) -> Json:
        wire, ch = env.chan()
        q = env.name()
        declare(wire, ch, q, exclusive=True)
        steps(wire, ch, q)
        return after_close(wire, summary(wire.next(QUIET * 2)))

    return func


def _ack_unknown(w: Wire, ch: int, q: str) -> None:
    w.send(ch, m.BasicAck(delivery_tag=99))


def _ack_twice(w: Wire, ch: int, q: str) -> None:
    w.publish(ch, "", q, b"x")
    w.send(ch, m.BasicGet(queue=q))
    w.next()
    w.send(ch, m.BasicAck(delivery_tag=1))
    w.send(ch, m.BasicAck(delivery_tag=1))


def _ack_no_ack_delivery(w: Wire, ch: int, q: str) -> None:
    w.publish(ch, "", q, b"x")
    w.send(ch, m.BasicGet(queue=q, no_ack=True))
    w.next()
    w.send(ch, m.BasicAck(delivery_tag=1))


def _ack_multiple_zero_nothing(w: Wire, ch: int, q: str) -> None:
    w.send(ch, m.BasicAck(delivery_tag=0, multiple=True))


def _nack_unknown(w: Wire, ch: int, q: str) -> None:
    w.send(ch, m.BasicNack(delivery_tag=5, requeue=True))


def _reject_unknown(w: Wire, ch: int, q: str) -> None:
    w.send(ch, m.BasicReject(delivery_tag=5, requeue=True))


def _ack_tag_zero_not_multiple(w: Wire, ch: int, q: str) -> None:
    w.publish(ch, "", q, b"x")
    w.send(ch, m.BasicGet(queue=q))
    w.next()
    w.send(ch, m.BasicAck(delivery_tag=0))


for _label, _steps in {
    "ack-unknown-tag": _ack_unknown,
    "ack-twice": _ack_twice,
    "ack-after-no-ack-get": _ack_no_ack_delivery,
    "ack-multiple-zero-with-nothing": _ack_multiple_zero_nothing,
    "ack-tag-zero-single": _ack_tag_zero_not_multiple,
    "nack-unknown-tag": _nack_unknown,
    "reject-unknown-tag": _reject_unknown,
}.items():
    scenario("acks", _label)(_ack_case(_steps))


@scenario("acks")
def nack_requeue_keeps_position(env: Env) -> Json:
    """Get 1, 2, 3 unacked; nack 2 with requeue; the order gets see, with redelivered flags."""
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    for b in (b"1", b"2", b"3", b"4"):
        wire.publish(ch, "", q, b)
    for _ in range(3):
        get(wire, ch, q, no_ack=False)
    wire.send(ch, m.BasicNack(delivery_tag=2, requeue=True))
    wire.send(ch, m.BasicNack(delivery_tag=1, requeue=True))
    out = []
    for _ in range(3):
        g = get(wire, ch, q)
        out.append([g.get("body"), g.get("redelivered")])
    return out


@scenario("acks")
def recover_requeue(env: Env) -> Json:
    """basic.recover(requeue=true) with two unacked deliveries to a consumer."""
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    wire.publish(ch, "", q, b"a")
    wire.publish(ch, "", q, b"b")
    wire.send(ch, m.BasicConsume(queue=q, consumer_tag="c"))
    wire.expect(m.BasicConsumeOk)
    first = wire.drain()
    wire.send(ch, m.BasicRecover(requeue=True))
    return {"first": bodies(first), "after": [summary(e) for e in wire.drain()]}


# == qos ======================================================================================


def _fill(wire: Wire, ch: int, q: str, n: int) -> None:
    for i in range(n):
        wire.publish(ch, "", q, str(i).encode())


@scenario("qos")
def qos_change_for_existing_consumer(env: Env) -> Json:
    """prefetch 1, consume, then basic.qos 3 (per consumer): deliveries before and after."""
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    _fill(wire, ch, q, 6)
    wire.send(ch, m.BasicQos(prefetch_count=1))
    wire.expect(m.BasicQosOk)
    wire.send(ch, m.BasicConsume(queue=q, consumer_tag="c"))
    wire.expect(m.BasicConsumeOk)
    before = len(wire.drain())
    wire.send(ch, m.BasicQos(prefetch_count=3))
    wire.expect(m.BasicQosOk)
    after_qos = len(wire.drain())
    wire.send(ch, m.BasicAck(delivery_tag=1))
    after_ack = len(wire.drain())
    return {"before": before, "after-qos": after_qos, "after-ack": after_ack}


@scenario("qos")
def qos_global_and_per_consumer(env: Env) -> Json:
    """global 3 + per-consumer 2, two consumers on a 10-message queue: deliveries per tag."""
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    _fill(wire, ch, q, 10)
    wire.send(ch, m.BasicQos(prefetch_count=3, global_=True))
    wire.expect(m.BasicQosOk)
    wire.send(ch, m.BasicQos(prefetch_count=2))
    wire.expect(m.BasicQosOk)
    for tag in ("a", "b"):
        wire.send(ch, m.BasicConsume(queue=q, consumer_tag=tag))
        wire.expect(m.BasicConsumeOk)
    events = wire.drain()
    counts: dict[str, int] = {}
    for e in events:
        if isinstance(e, Content):
            tag = consumer_tag(e)
            counts[tag] = counts.get(tag, 0) + 1
    return {"total": sum(counts.values()), "per": counts}


@scenario("qos")
def qos_global_only(env: Env) -> Json:
    """global 3, two consumers: deliveries in all."""
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    _fill(wire, ch, q, 10)
    wire.send(ch, m.BasicQos(prefetch_count=3, global_=True))
    wire.expect(m.BasicQosOk)
    for tag in ("a", "b"):
        wire.send(ch, m.BasicConsume(queue=q, consumer_tag=tag))
        wire.expect(m.BasicConsumeOk)
    return len(wire.drain())


@scenario("qos")
def qos_global_lowered_for_existing(env: Env) -> Json:
    """global 5 with a consumer holding 5; global lowered to 2; acks of 2 bring how many."""
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    _fill(wire, ch, q, 10)
    wire.send(ch, m.BasicQos(prefetch_count=5, global_=True))
    wire.expect(m.BasicQosOk)
    wire.send(ch, m.BasicConsume(queue=q, consumer_tag="a"))
    wire.expect(m.BasicConsumeOk)
    first = len(wire.drain())
    wire.send(ch, m.BasicQos(prefetch_count=2, global_=True))
    wire.expect(m.BasicQosOk)
    wire.send(ch, m.BasicAck(delivery_tag=2, multiple=True))
    return {"first": first, "after-acks": len(wire.drain())}


@scenario("qos")
def qos_prefetch_size(env: Env) -> Json:
    wire, ch = env.chan()
    return reply(wire, ch, m.BasicQos(prefetch_size=1000, prefetch_count=0))


@scenario("qos")
def qos_per_consumer_set_after_consume_new_consumer(env: Env) -> Json:
    """qos 1, consumer a, qos 2, consumer b: deliveries per consumer on a 10-message queue."""
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    _fill(wire, ch, q, 10)
    wire.send(ch, m.BasicQos(prefetch_count=1))
    wire.expect(m.BasicQosOk)
    wire.send(ch, m.BasicConsume(queue=q, consumer_tag="a"))
    wire.expect(m.BasicConsumeOk)
    wire.drain()
    wire.send(ch, m.BasicQos(prefetch_count=2))
    wire.expect(m.BasicQosOk)
    wire.send(ch, m.BasicConsume(queue=q, consumer_tag="b"))
    wire.expect(m.BasicConsumeOk)
    events = wire.drain()
    return sorted(consumer_tag(e) for e in events if isinstance(e, Content))


# == single active consumer ===================================================================


@scenario("single active consumer")
def sac_cancel_with_unacked(env: Env) -> Json:
    """Active consumer a holds 2 unacked; b waits; a cancels. Who gets the rest, and a's 2?"""
    wire, ch = env.chan()
    wire.channel(2)
    q = env.name()
    declare(wire, ch, q, exclusive=True, arguments={"x-single-active-consumer": True})
    _fill(wire, ch, q, 4)
    wire.send(ch, m.BasicQos(prefetch_count=2))
    wire.expect(m.BasicQosOk)
    wire.send(ch, m.BasicConsume(queue=q, consumer_tag="a"))
    wire.expect(m.BasicConsumeOk)
    wire.send(2, m.BasicQos(prefetch_count=10))
    wire.expect(m.BasicQosOk)
    wire.send(2, m.BasicConsume(queue=q, consumer_tag="b"))
    wire.expect(m.BasicConsumeOk)
    to_a = bodies(wire.drain())
    wire.send(ch, m.BasicCancel(consumer_tag="a"))
    after_cancel = bodies(wire.drain())
    wire.send(ch, m.ChannelClose())
    after_close_ = bodies(wire.drain())
    return {"to-a": to_a, "after-cancel": after_cancel, "after-a-channel-closed": after_close_}


@scenario("single active consumer")
def sac_second_consumer_waits(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True, arguments={"x-single-active-consumer": True})
    for tag in ("a", "b"):
        wire.send(ch, m.BasicConsume(queue=q, consumer_tag=tag))
        wire.expect(m.BasicConsumeOk)
    _fill(wire, ch, q, 4)
    events = wire.drain()
    return sorted({consumer_tag(e) for e in events if isinstance(e, Content)})


@scenario("single active consumer")
def sac_passive_declare_consumer_count(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True, arguments={"x-single-active-consumer": True})
    for tag in ("a", "b"):
        wire.send(ch, m.BasicConsume(queue=q, consumer_tag=tag))
        wire.expect(m.BasicConsumeOk)
    return wire.call(ch, m.QueueDeclare(queue=q, passive=True))


# == publish validation =======================================================================


def _publish_props(**props: Any) -> Callable[[Env], Json]:
    def func(env: Env) -> Json:
        wire, ch = env.chan()
        q = env.name()
        declare(wire, ch, q, exclusive=True)
        confirm(wire, ch)
        wire.publish(ch, "", q, b"p", properties(**props))
        first = summary(wire.next())
        if first["m"] != "basic.ack":
            return after_close(wire, first)
        got = get(wire, ch, q)
        return {"confirm": first["m"], "got": got.get("props", got["m"])}

    return func


for _dm in (0, 1, 2, 3, 255):
    scenario("publish validation", f"delivery-mode-{_dm}")(_publish_props(delivery_mode=_dm))
for _label, _exp in {
    "empty": "",
    "zero": "0",
    "60000": "60000",
    "negative": "-1",
    "letters": "abc",
    "decimal": "1.5",
    "leading-space": " 100",
    "plus-sign": "+100",
    "huge": "99999999999999999999",
}.items():
    scenario("publish validation", f"expiration-{_label}")(_publish_props(expiration=_exp))
scenario("publish validation", "user-id-matching")(_publish_props(user_id="guest"))
scenario("publish validation", "user-id-other")(_publish_props(user_id="mallory"))
scenario("publish validation", "user-id-empty")(_publish_props(user_id=""))
scenario("publish validation", "priority-300-as-octet")(_publish_props(priority=255))


@scenario("publish validation")
def mandatory_unroutable(env: Env) -> Json:
    wire, ch = env.chan()
    confirm(wire, ch)
    wire.publish(ch, "amq.direct", env.name("nowhere"), b"x", mandatory=True)
    return [summary(e) for e in wire.drain()]


@scenario("publish validation")
def publish_confirm_tags(env: Env) -> Json:
    """Three publishes in confirm mode: the acks' tags, multiple flags folded."""
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    confirm(wire, ch)
    for _ in range(3):
        wire.publish(ch, "", q, b"x")
    acked: set[int] = set()
    for e in wire.drain():
        if isinstance(e, Method) and isinstance(e.method, m.BasicAck):
            tag = int(e.method.delivery_tag)
            acked |= set(range(1, tag + 1)) if e.method.multiple else {tag}
    return sorted(acked)


# == dead letters =============================================================================


def _dlx_setup(
    env: Env, wire: Wire, ch: int, extra: dict[str, Any] | None = None
) -> tuple[str, str]:
    src, dead = env.name("src"), env.name("dead")
    declare(wire, ch, dead, exclusive=True)
    args: dict[str, Any] = {"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dead}
    args.update(extra or {})
    declare(wire, ch, src, exclusive=True, arguments=args)
    return src, dead


def _death(got: Json) -> Json:
    headers = got.get("props", {}).get("headers", {})
    return {k: v for k, v in headers.items() if k.startswith("x-")}


@scenario("dead letters")
def x_death_rejected(env: Env) -> Json:
    """Field types of x-death and x-first-death-* after a reject(requeue=false)."""
    wire, ch = env.chan()
    src, _dead = _dlx_setup(env, wire, ch)
    wire.publish(ch, "", src, b"d")
    get(wire, ch, src, no_ack=False)
    wire.send(ch, m.BasicReject(delivery_tag=1, requeue=False))
    time.sleep(0.1)
    got = get(wire, ch, _dead)
    return _normalise_names(_death(got), env)


@scenario("dead letters")
def x_death_expired(env: Env) -> Json:
    """x-death of a message expired by per-message expiration (original-expiration kept)."""
    wire, ch = env.chan()
    src, dead = _dlx_setup(env, wire, ch)
    wire.publish(ch, "", src, b"d", properties(expiration="20"))
    time.sleep(0.3)
    got = get(wire, ch, dead)
    return {"props": _normalise_names(got.get("props", got["m"]), env)}


@scenario("dead letters")
def x_death_twice(env: Env) -> Json:
    """Rejected twice through the same queue (dead queue routes back): count and order."""
    wire, ch = env.chan()
    a, b = env.name("a"), env.name("b")
    declare(
        wire,
        ch,
        b,
        exclusive=True,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": a},
    )
    declare(
        wire,
        ch,
        a,
        exclusive=True,
        arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": b},
    )
    wire.publish(ch, "", a, b"d")
    for tag, q in enumerate((a, b, a), start=1):
        get(wire, ch, q, no_ack=False)
        wire.send(ch, m.BasicReject(delivery_tag=tag, requeue=False))
        time.sleep(0.1)
    got = get(wire, ch, b)
    return _normalise_names(_death(got), env)


@scenario("dead letters")
def x_death_max_length(env: Env) -> Json:
    """reason maxlen: x-max-length 1, two publishes; the first is dead-lettered."""
    wire, ch = env.chan()
    src, dead = _dlx_setup(env, wire, ch, {"x-max-length": 1})
    wire.publish(ch, "", src, b"1")
    wire.publish(ch, "", src, b"2")
    time.sleep(0.1)
    got = get(wire, ch, dead)
    return {"body": got.get("body"), "death": _normalise_names(_death(got), env)}


def _normalise_names(value: Json, env: Env) -> Json:
    if isinstance(value, str):
        return value.replace(env.prefix, "<prefix>")
    if isinstance(value, list):
        return [_normalise_names(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _normalise_names(v, env) for k, v in value.items()}
    return value


# == direct reply-to ==========================================================================

REPLY_TO = "amq.rabbitmq.reply-to"


@scenario("direct reply-to")
def reply_to_consume_with_acks(env: Env) -> Json:
    wire, ch = env.chan()
    return reply(wire, ch, m.BasicConsume(queue=REPLY_TO, no_ack=False))


@scenario("direct reply-to")
def reply_to_publish_without_consumer(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    wire.publish(ch, "", q, b"req", properties(reply_to=REPLY_TO))
    return after_close(wire, summary(wire.next(QUIET * 2)))


@scenario("direct reply-to")
def reply_to_round_trip(env: Env) -> Json:
    """Request with reply_to amq.rabbitmq.reply-to; the responder answers to the value it got."""
    client, ch = env.chan()
    server, sch = env.chan()
    q = env.name()
    declare(server, sch, q, exclusive=True)
    client.send(ch, m.BasicConsume(queue=REPLY_TO, no_ack=True, consumer_tag="rt"))
    client.expect(m.BasicConsumeOk)
    client.publish(ch, "", q, b"req", properties(reply_to=REPLY_TO, correlation_id="c1"))
    time.sleep(0.1)
    request = get(server, sch, q)
    reply_to = request["props"]["reply_to"]
    server.publish(sch, "", reply_to, b"resp", properties(correlation_id="c1"), mandatory=True)
    answer = client.next()
    out = summary(answer)
    if isinstance(answer, Content):
        out["props"] = read_properties(answer.properties)
    return {
        "reply-to-prefix": reply_to[: len(REPLY_TO) + 1],
        "answer": out,
        "server-after": [summary(e) for e in server.drain()],
    }


@scenario("direct reply-to")
def reply_to_unknown_target(env: Env) -> Json:
    """Publish (mandatory) to a reply-to name nobody holds."""
    wire, ch = env.chan()
    confirm(wire, ch)
    wire.publish(ch, "", f"{REPLY_TO}.g2dkAA1yYWJiaXRAbG9jYWxob3N0AAAF", b"x", mandatory=True)
    return [after_close(wire, summary(e)) for e in wire.drain()]


@scenario("direct reply-to")
def reply_to_second_consumer(env: Env) -> Json:
    wire, ch = env.chan()
    wire.send(ch, m.BasicConsume(queue=REPLY_TO, no_ack=True, consumer_tag="a"))
    wire.expect(m.BasicConsumeOk)
    return reply(wire, ch, m.BasicConsume(queue=REPLY_TO, no_ack=True, consumer_tag="b"))


@scenario("direct reply-to")
def reply_to_passive_declare(env: Env) -> Json:
    wire, ch = env.chan()
    return reply(wire, ch, m.QueueDeclare(queue=REPLY_TO, passive=True))


@scenario("direct reply-to")
def reply_to_get(env: Env) -> Json:
    wire, ch = env.chan()
    return reply(wire, ch, m.BasicGet(queue=REPLY_TO, no_ack=True))


# == headers exchange =========================================================================


def _headers_match(binding: dict[str, Typed], message: dict[str, Typed]) -> Callable[[Env], Json]:
    def func(env: Env) -> Json:
        wire, ch = env.chan()
        q = env.name()
        declare(wire, ch, q, exclusive=True)
        args = typed_table(binding)
        # The binding's arguments go as raw bytes: patch them into the encoded method.
        bind = m.QueueBind(queue=q, exchange="amq.headers", routing_key="", arguments={})
        payload = bind.encode()[:-4] + args
        wire.frame(framing.FRAME_METHOD, ch, payload)
        wire.expect(m.QueueBindOk)
        wire.publish(ch, "amq.headers", "", b"h", properties(headers=typed_table(message)))
        time.sleep(0.05)
        # The exclusive queue and its binding go with the connection.
        return get(wire, ch, q)["m"] == "basic.get-ok"

    return func


_ALL = Typed("S", "all")
_ANY = Typed("S", "any")
_HEADER_CASES: dict[str, tuple[Typed, Typed]] = {
    "I1-I1": (Typed("I", 1), Typed("I", 1)),
    "I1-l1": (Typed("I", 1), Typed("l", 1)),
    "I1-b1": (Typed("I", 1), Typed("b", 1)),
    "I1-s1": (Typed("I", 1), Typed("s", 1)),
    "l1-d1.0": (Typed("l", 1), Typed("d", 1.0)),
    "I1-D1": (Typed("I", 1), Typed("D", "1")),
    "I1-S1": (Typed("I", 1), Typed("S", "1")),
    "t-true-I1": (Typed("t", True), Typed("I", 1)),
    "S-x-same-bytes": (Typed("S", "abc"), Typed("x", b"abc")),
    "S-S-case": (Typed("S", "abc"), Typed("S", "ABC")),
    "f-d-1.5": (Typed("f", 1.5), Typed("d", 1.5)),
    "A-same": (
        Typed("A", [Typed("I", 1), Typed("S", "a")]),
        Typed("A", [Typed("I", 1), Typed("S", "a")]),
    ),
    "A-widths": (Typed("A", [Typed("I", 1)]), Typed("A", [Typed("l", 1)])),
    "V-V": (Typed("V", None), Typed("V", None)),
    "V-S": (Typed("V", None), Typed("S", "")),
    "F-same": (Typed("F", {"k": Typed("S", "v")}), Typed("F", {"k": Typed("S", "v")})),
    "T-T": (Typed("T", 1000), Typed("T", 1000)),
    "T-l": (Typed("T", 1000), Typed("l", 1000)),
}
for _label, (_bv, _mv) in _HEADER_CASES.items():
    scenario("headers exchange", f"headers-{_label}")(
        _headers_match({"x-match": _ALL, "k": _bv}, {"k": _mv})
    )
scenario("headers exchange", "headers-any-one-of-two")(
    _headers_match(
        {"x-match": _ANY, "a": Typed("S", "1"), "b": Typed("S", "2")}, {"b": Typed("S", "2")}
    )
)
scenario("headers exchange", "headers-all-missing-key")(
    _headers_match(
        {"x-match": _ALL, "a": Typed("S", "1"), "b": Typed("S", "2")}, {"a": Typed("S", "1")}
    )
)
scenario("headers exchange", "headers-no-args-matches-all")(
    _headers_match({"x-match": _ALL}, {"a": Typed("S", "1")})
)
scenario("headers exchange", "headers-x-key-ignored")(
    _headers_match({"x-match": _ALL, "x-k": Typed("S", "1")}, {"a": Typed("S", "1")})
)
scenario("headers exchange", "headers-any-with-x")(
    _headers_match(
        {"x-match": Typed("S", "any-with-x"), "x-k": Typed("S", "1")}, {"x-k": Typed("S", "1")}
    )
)


@scenario("headers exchange")
def headers_bad_x_match(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    return reply(
        wire, ch, m.QueueBind(queue=q, exchange="amq.headers", arguments={"x-match": "some"})
    )


# == transactions and confirms ==============================================================


for _label, _method in {
    "tx-commit-without-select": m.TxCommit(),
    "tx-rollback-without-select": m.TxRollback(),
}.items():
    scenario("tx", _label)(_q_call(_method))


@scenario("tx")
def confirm_then_tx_select(env: Env) -> Json:
    wire, ch = env.chan()
    confirm(wire, ch)
    return reply(wire, ch, m.TxSelect())


@scenario("tx")
def tx_then_confirm_select(env: Env) -> Json:
    wire, ch = env.chan()
    wire.send(ch, m.TxSelect())
    wire.expect(m.TxSelectOk)
    return reply(wire, ch, m.ConfirmSelect())


@scenario("tx")
def tx_rollback_publish(env: Env) -> Json:
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    wire.send(ch, m.TxSelect())
    wire.expect(m.TxSelectOk)
    wire.publish(ch, "", q, b"x")
    rolled = wire.call(ch, m.TxRollback())
    return {"rollback": rolled, "get": get(wire, ch, q)["m"]}


@scenario("tx")
def tx_commit_ack(env: Env) -> Json:
    """Ack inside a transaction takes effect at commit only."""
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q, exclusive=True)
    wire.publish(ch, "", q, b"x")
    wire.send(ch, m.TxSelect())
    wire.expect(m.TxSelectOk)
    get(wire, ch, q, no_ack=False)
    wire.send(ch, m.BasicAck(delivery_tag=1))
    before = wire.call(ch, m.QueueDeclare(queue=q, passive=True))
    wire.send(ch, m.TxRollback())
    wire.expect(m.TxRollbackOk)
    wire.send(ch, m.BasicRecover(requeue=True))
    wire.expect(m.BasicRecoverOk)
    after = wire.call(ch, m.QueueDeclare(queue=q, passive=True))
    return {"before": before, "after": after}


# == queue deletion and its consumers =========================================================


@scenario("consumers")
def queue_delete_with_own_consumer(env: Env) -> Json:
    """The channel that consumes from a queue deletes it: what it receives, in order."""
    wire, ch = env.chan()
    q = env.name()
    declare(wire, ch, q)
    wire.send(ch, m.BasicConsume(queue=q, consumer_tag="own"))
    wire.expect(m.BasicConsumeOk)
    wire.send(ch, m.QueueDelete(queue=q))
    return [summary(e) for e in wire.drain()]


@scenario("consumers")
def queue_delete_with_consumer_on_other_channel(env: Env) -> Json:
    """Channel 2 consumes, channel 1 deletes the queue: what each channel receives."""
    wire, ch = env.chan()
    wire.channel(2)
    q = env.name()
    declare(wire, ch, q)
    wire.send(2, m.BasicConsume(queue=q, consumer_tag="other"))
    wire.expect(m.BasicConsumeOk)
    wire.send(ch, m.QueueDelete(queue=q))
    return sorted((summary(e) for e in wire.drain()), key=lambda e: (e.get("ch", 0), e["m"]))


@scenario("consumers")
def queue_delete_with_consumer_on_other_connection(env: Env) -> Json:
    owner, ch = env.chan()
    other, och = env.chan()
    q = env.name()
    declare(owner, ch, q)
    other.send(och, m.BasicConsume(queue=q, consumer_tag="remote"))
    other.expect(m.BasicConsumeOk)
    deleted = owner.call(ch, m.QueueDelete(queue=q))
    return {"deleter": deleted, "consumer": [summary(e) for e in other.drain()]}
