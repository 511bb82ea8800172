"""A lean, synchronous AMQP 0-9-1 client for the Spark connector (no pyspark import here).

The protocol is the client-role machine shared by every client-side user
(:class:`leveret.protocol.amqp091.client.ClientConnection`); this module adds one blocking
socket and the connector's API. The consume path does not build per-message objects: the
machine appends each ``basic.deliver`` straight into the columns of a :class:`Deliveries`
(``client.deliveries``). Publishing is pipelined with publisher confirms
(:meth:`AmqpClient.publish_frames` / :meth:`AmqpClient.wait_confirms`).
"""

from __future__ import annotations

import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn, TypeVar
from urllib.parse import unquote, urlsplit

from leveret.errors import AMQPError
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091.client import CLIENT_CAPABILITIES, ClientConnection, ConnectionState
from leveret.protocol.amqp091.client_events import (
    ContentReceived,
    HeartbeatMissed,
    MethodReceived,
    ProtocolHeaderReceived,
)
from leveret.protocol.amqp091.client_frames import NO_LIMIT, Deliveries, walk_frames
from leveret.spark._socket import SocketClient

if TYPE_CHECKING:
    from leveret.protocol.amqp091.client_events import Event
    from leveret.protocol.amqp091.fieldtable import FieldTable
    from leveret.protocol.amqp091.framing import Frame

__all__ = [
    "AmqpClient",
    "AmqpClientError",
    "ConnectionParams",
    "Deliveries",
    "scan_frames",
]

_RECV_SIZE = 1 << 20
_FLUSH_SIZE = 65536

M = TypeVar("M", bound=m.Method)


class AmqpClientError(Exception):
    """The broker closed the channel or connection, or the connection failed.

    ``reply_code`` is the AMQP reply code when the broker sent one (0 otherwise).
    """

    def __init__(self, message: str, reply_code: int = 0) -> None:
        super().__init__(message)
        self.reply_code = reply_code


@dataclass(frozen=True)
class ConnectionParams:
    """Where and how to connect; built from the ``uri`` option or the separate options."""

    host: str = "127.0.0.1"
    port: int = 5672
    vhost: str = "/"
    username: str = "guest"
    password: str = field(default="guest", repr=False)
    use_tls: bool = False
    tls_verify: bool = True
    tls_ca_file: str | None = None
    heartbeat: int = 0
    connect_timeout: float = 10.0
    frame_max: int = 131072

    @classmethod
    def from_uri(cls, uri: str, **overrides: object) -> ConnectionParams:
        """Parse ``amqp[s]://user:pass@host:port/vhost`` (vhost percent-encoded: ``%2F``)."""
        parts = urlsplit(uri)
        if parts.scheme not in ("amqp", "amqps"):
            raise ValueError(f"uri must start with amqp:// or amqps://, got {uri!r}")
        tls = parts.scheme == "amqps"
        path = parts.path[1:] if parts.path.startswith("/") else parts.path
        values: dict[str, object] = {
            "host": parts.hostname or "127.0.0.1",
            "port": parts.port or (5671 if tls else 5672),
            "vhost": unquote(path) if path else "/",
            "username": unquote(parts.username) if parts.username else "guest",
            "password": unquote(parts.password) if parts.password else "guest",
            "use_tls": tls,
        }
        values.update(overrides)
        return cls(**values)  # type: ignore[arg-type]


def scan_frames(buf: bytes, out: Deliveries, control: list[Frame]) -> int:
    """Parse every complete frame of ``buf``; return how many bytes were consumed.

    A ``basic.deliver`` is taken only once its content header and every body frame are in
    ``buf`` (a delivery is never split across calls), and appended to ``out``; every other
    frame is appended to ``control`` in order. Stateless (no channel or frame_max checks):
    the protocol's one frame reader (``client_frames.walk_frames``) on a recorded buffer.
    """

    def other(frame_type: int, channel: int, payload: bytes) -> bool:
        control.append((frame_type, channel, payload))
        return False

    return walk_frames(buf, 0, out, None, NO_LIMIT, other)


class AmqpClient(SocketClient):
    """One blocking connection with one channel (number 1).

    Not thread-safe. Every wait has a timeout (``timeout`` seconds, per socket read).
    """

    CHANNEL = 1

    def __init__(self, params: ConnectionParams, *, timeout: float = 30.0) -> None:
        self.params = params
        self.timeout = timeout
        self.deliveries = Deliveries()
        self.machine = ClientConnection(
            params.username,
            params.password,
            params.vhost,
            client_properties={
                "product": "leveret.spark",
                "capabilities": dict(CLIENT_CAPABILITIES),
            },
            frame_max=params.frame_max,
            heartbeat=params.heartbeat,
            deliveries=self.deliveries,
        )
        super().__init__()
        self._methods: list[tuple[int, m.Method]] = []
        self.returns: list[m.BasicReturn] = []
        self.cancelled: list[str] = []
        self._consumer_seq = 0

    # -- connection --------------------------------------------------------------------

    @property
    def server_properties(self) -> FieldTable:
        return self.machine.server_properties

    @property
    def frame_max(self) -> int:
        """The frame_max in force (what we asked for until the server's tune)."""
        return self.machine.frame_max

    @property
    def product(self) -> str:
        """The server's ``product`` property (``"Leveret"``, ``"RabbitMQ"``, ...)."""
        value = self.server_properties.get("product")
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        return str(value) if value is not None else ""

    @property
    def is_leveret(self) -> bool:
        return self.product == "Leveret"

    def connect(self) -> AmqpClient:
        """Open the socket, run the handshake and open channel 1; returns ``self``."""
        p = self.params
        try:
            sock = socket.create_connection((p.host, p.port), timeout=p.connect_timeout)
        except OSError as exc:
            raise AmqpClientError(f"cannot connect to {p.host}:{p.port}: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if p.use_tls:
            context = ssl.create_default_context(cafile=p.tls_ca_file)
            if not p.tls_verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            sock = context.wrap_socket(sock, server_hostname=p.host)
        sock.settimeout(self.timeout)
        self._sock = sock
        try:
            self._handshake()
        except BaseException:
            self.abort()
            raise
        return self

    def _handshake(self) -> None:
        """The machine runs the handshake; this writes and reads until it is done."""
        self.flush()
        self._expect(0, m.ConnectionOpenOk)
        self._methods.clear()  # start and tune, reported on the way
        self.rpc(m.ChannelOpen(), m.ChannelOpenOk)

    def close(self) -> None:
        """Send connection.close and drop the socket without waiting for deliveries to drain.

        Stream consumers must not reject what they were sent (RabbitMQ closes the connection
        with 540), so the connector never cancels politely: it closes the connection.
        """
        if self._sock is None:
            return
        machine = self.machine
        try:
            machine.data_to_send()  # what was queued and not sent yet is dropped
            if machine.is_open:
                machine.close(200, "bye")
                self.flush()
                deadline = time.monotonic() + 1.0
                self._sock.settimeout(0.2)
                while time.monotonic() < deadline and not machine.closed:
                    try:
                        self._read_once()
                    except (AmqpClientError, OSError, TimeoutError):
                        break
        except OSError:
            pass
        finally:
            self.abort()

    # -- writing -------------------------------------------------------------------------

    def send_method(self, channel: int, method: m.Method) -> None:
        """Queue one method frame (sent at the next :meth:`flush`)."""
        self.machine.send_method(channel, method)
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if self.machine.output_size >= _FLUSH_SIZE:
            self.flush()

    def flush(self) -> None:
        """Write everything the machine has queued."""
        data = self.machine.data_to_send()
        if not data:
            return
        if self._sock is None:
            raise AmqpClientError("connection is closed")
        try:
            self._sock.sendall(data)
        except OSError as exc:
            self.abort()
            raise AmqpClientError(f"send failed: {exc}") from exc

    # -- reading -------------------------------------------------------------------------

    def _read_once(self) -> None:
        """One socket read; deliveries go to :attr:`deliveries`, the rest is handled."""
        if self._sock is None:
            raise AmqpClientError("connection is closed")
        try:
            chunk = self._sock.recv(_RECV_SIZE)
        except TimeoutError:
            raise
        except OSError as exc:
            self.abort()
            raise AmqpClientError(f"receive failed: {exc}") from exc
        if not chunk:
            self.abort()
            raise AmqpClientError("the broker closed the connection")
        machine = self.machine
        try:
            events = machine.receive_data(chunk, time.monotonic())
        except AMQPError as exc:
            self._closed_by_us(exc)
        for event in events:
            self._event(event)
        if machine.output_size:
            self.flush()  # close-oks, flow-oks and the like go out at once

    def _closed_by_us(self, exc: AMQPError) -> NoReturn:
        """The broker broke the protocol: tell it (the machine queued connection.close)."""
        try:
            self.flush()
        except AmqpClientError:
            pass
        self.abort()
        raise AmqpClientError(
            f"protocol error from the broker: {exc.reply_code} {exc}", exc.reply_code
        ) from exc

    def _event(self, event: Event) -> None:
        if type(event) is MethodReceived:
            channel, method = event.channel, event.method
            t = type(method)
            if t is m.BasicAck or t is m.BasicNack:
                return  # the machine keeps the confirm count
            if isinstance(method, m.ConnectionClose | m.ChannelClose):
                what = "connection" if channel == 0 else "channel"
                try:
                    self.flush()  # the close-ok the machine queued
                except AmqpClientError:
                    pass
                self.abort()
                raise AmqpClientError(
                    f"{what} closed by the broker: {method.reply_code} {method.reply_text}",
                    method.reply_code,
                )
            if isinstance(method, m.BasicCancel):
                self.cancelled.append(method.consumer_tag)
                return
            self._methods.append((channel, method))
        elif isinstance(event, ContentReceived):
            if isinstance(event.method, m.BasicReturn):
                self.returns.append(event.method)
        elif isinstance(event, ProtocolHeaderReceived):
            self.abort()
            raise AmqpClientError(f"the broker refused the protocol version: {event.data!r}")
        elif isinstance(event, HeartbeatMissed):
            self.abort()
            raise AmqpClientError(f"no heartbeat from the broker for {event.silent_for:.0f} s")

    def _heartbeats(self) -> None:
        if self.machine.heartbeat:
            for event in self.machine.tick(time.monotonic()):
                self._event(event)
            self.flush()

    def _expect(self, channel: int, cls: type[M]) -> M:
        deadline = time.monotonic() + self.timeout
        while True:
            for i, (ch, method) in enumerate(self._methods):
                if ch == channel and isinstance(method, cls):
                    del self._methods[i]
                    return method
            if time.monotonic() > deadline:
                raise AmqpClientError(f"timed out waiting for {cls.NAME}")
            if self.machine.state is ConnectionState.CLOSED:
                raise AmqpClientError(f"connection closed while waiting for {cls.NAME}")
            try:
                self._read_once()
            except TimeoutError as exc:
                raise AmqpClientError(f"timed out waiting for {cls.NAME}") from exc

    def rpc(self, method: m.Method, reply: type[M]) -> M:
        """Send a synchronous method on channel 1 and wait for its reply."""
        self.send_method(self.CHANNEL, method)
        self.flush()
        return self._expect(self.CHANNEL, reply)

    def poll(self, timeout: float) -> bool:
        """Read once, waiting at most ``timeout`` seconds; False when nothing arrived."""
        if self._sock is None:
            raise AmqpClientError("connection is closed")
        self._heartbeats()
        self.flush()
        self._sock.settimeout(max(timeout, 0.0001))
        try:
            self._read_once()
        except TimeoutError:
            return False
        finally:
            if self._sock is not None:
                self._sock.settimeout(self.timeout)
        return True

    # -- queues and consumers ------------------------------------------------------------

    def declare_passive(self, queue: str) -> m.QueueDeclareOk:
        """Passive queue.declare (404 when the queue does not exist closes the channel)."""
        return self.rpc(m.QueueDeclare(queue=queue, passive=True), m.QueueDeclareOk)

    def declare(self, queue: str, arguments: FieldTable | None = None) -> m.QueueDeclareOk:
        return self.rpc(
            m.QueueDeclare(queue=queue, durable=True, arguments=dict(arguments or {})),
            m.QueueDeclareOk,
        )

    def declare_exchange(self, exchange: str, kind: str = "direct") -> None:
        self.rpc(m.ExchangeDeclare(exchange=exchange, type=kind, durable=True), m.ExchangeDeclareOk)

    def bind(self, queue: str, exchange: str, routing_key: str = "") -> None:
        self.rpc(
            m.QueueBind(queue=queue, exchange=exchange, routing_key=routing_key), m.QueueBindOk
        )

    def delete_exchange(self, exchange: str) -> None:
        self.rpc(m.ExchangeDelete(exchange=exchange), m.ExchangeDeleteOk)

    def delete_queue(self, queue: str) -> None:
        self.rpc(m.QueueDelete(queue=queue), m.QueueDeleteOk)

    def qos(self, prefetch: int) -> None:
        self.rpc(m.BasicQos(prefetch_count=min(prefetch, 65535)), m.BasicQosOk)

    def consume(
        self, queue: str, *, arguments: FieldTable | None = None, no_ack: bool = False
    ) -> str:
        """basic.consume; returns the consumer tag."""
        self._consumer_seq += 1
        tag = f"leveret.spark.{self._consumer_seq}"
        self.rpc(
            m.BasicConsume(
                queue=queue, consumer_tag=tag, no_ack=no_ack, arguments=dict(arguments or {})
            ),
            m.BasicConsumeOk,
        )
        return tag

    def cancel(self, consumer_tag: str) -> None:
        """basic.cancel and wait for cancel-ok (deliveries still arriving are kept)."""
        self.rpc(m.BasicCancel(consumer_tag=consumer_tag), m.BasicCancelOk)

    def ack(self, delivery_tag: int, *, multiple: bool = True) -> None:
        """Queue a basic.ack (sent at the next flush, read or poll)."""
        self.machine.ack(self.CHANNEL, delivery_tag, multiple)
        self._maybe_flush()

    # -- publishing ------------------------------------------------------------------------

    def confirm_select(self) -> None:
        self.rpc(m.ConfirmSelect(), m.ConfirmSelectOk)

    @property
    def in_flight(self) -> int:
        """Published messages not yet confirmed."""
        return self.machine.unconfirmed(self.CHANNEL)

    @property
    def nacked(self) -> int:
        """Published messages the broker nacked."""
        return self.machine.nacked(self.CHANNEL)

    def publish_frames(self, frames: bytes) -> int:
        """Queue one encoded publish (method + header + body frames); returns its tag (0
        outside confirm mode)."""
        tag = self.machine.publish_encoded(self.CHANNEL, frames)
        self._maybe_flush()
        return tag

    def wait_confirms(self, max_in_flight: int, timeout: float) -> None:
        """Flush, then read until at most ``max_in_flight`` publishes are unconfirmed."""
        self.flush()
        deadline = time.monotonic() + timeout
        while self.in_flight > max_in_flight:
            if self.nacked:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AmqpClientError(
                    f"timed out after {timeout:.1f} s waiting for {self.in_flight} confirms"
                )
            self.poll(min(remaining, 1.0))
        if self.nacked:
            raise AmqpClientError(f"the broker nacked {self.nacked} published message(s)")
        if self.returns:
            ret = self.returns[0]
            raise AmqpClientError(
                f"message returned by the broker: {ret.reply_code} {ret.reply_text}"
                f" (exchange {ret.exchange!r}, routing key {ret.routing_key!r})",
                ret.reply_code,
            )
