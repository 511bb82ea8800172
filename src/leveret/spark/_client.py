"""A lean, synchronous AMQP 0-9-1 client for the Spark connector (no pyspark import here).

It speaks the client role with the broker's own sans-IO codec (``protocol.amqp091``: frame
constants, generated methods, field tables) over one blocking socket. The consume path does
not build per-message objects: :func:`scan_frames` walks every complete frame in a received
buffer in one pass and appends each ``basic.deliver`` (method + content header + body) straight
into the columns of a :class:`Deliveries`; everything else comes back as a :class:`Frame` for the
slow path. Publishing is pipelined with publisher confirms (:meth:`AmqpClient.publish` /
:meth:`AmqpClient.wait_confirms`).
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import unquote, urlsplit

from leveret.errors import FrameError
from leveret.protocol.amqp091 import framing
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091.framing import Frame

if TYPE_CHECKING:
    from leveret.protocol.amqp091.fieldtable import FieldTable

__all__ = [
    "AmqpClient",
    "AmqpClientError",
    "ConnectionParams",
    "Deliveries",
    "scan_frames",
]

_HEADER = struct.Struct(">BHI")
_CONTENT = struct.Struct(">HHQ")
_QBB = struct.Struct(">QBB")
# Frame-end octet + next frame header (+ content-header prefix), as the broker writes them.
_END_HEADER = struct.Struct(">BBHIHHQ")
_END_BODY = struct.Struct(">BBHI")
_DELIVER = b"\x00\x3c\x00\x3c"  # class 60 (basic), method 60 (deliver)
_FRAME_END = framing.FRAME_END
_RECV_SIZE = 1 << 20

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


class Deliveries:
    """Deliveries in columns, as :func:`scan_frames` appends them (one list per field)."""

    __slots__ = ("bodies", "exchanges", "properties", "redelivered", "routing_keys", "tags")

    def __init__(self) -> None:
        self.tags: list[int] = []
        self.redelivered: list[int] = []
        self.exchanges: list[bytes] = []
        self.routing_keys: list[bytes] = []
        self.properties: list[bytes] = []  # raw property flags + property list
        self.bodies: list[bytes] = []

    def __len__(self) -> int:
        return len(self.tags)

    def clear(self) -> None:
        for name in self.__slots__:
            getattr(self, name).clear()

    def take(self, n: int | None = None) -> Deliveries:
        """Remove the first ``n`` deliveries (all when None) into a new object."""
        out = Deliveries()
        if n is None or n >= len(self.tags):
            for name in self.__slots__:
                setattr(out, name, getattr(self, name))
                setattr(self, name, [])
            return out
        for name in self.__slots__:
            column = getattr(self, name)
            setattr(out, name, column[:n])
            del column[:n]
        return out


def _frame_error(what: str) -> FrameError:
    return FrameError(f"frame_end: expected 0xCE after {what}")


def scan_frames(buf: bytes, out: Deliveries, control: list[Frame]) -> int:
    """Parse every complete frame of ``buf``; return how many bytes were consumed.

    A ``basic.deliver`` is taken only once its content header and every body frame are in
    ``buf`` (a delivery is never split across calls), and appended to ``out``; every other
    frame is appended to ``control`` in order. The fast path (a delivery whose body fits one
    frame) unpacks each frame-end octet together with the next frame's header, the way the
    broker's encoder writes them (``framing.encode_message_frames``).
    """
    n = len(buf)
    off = 0
    unpack = _HEADER.unpack_from
    unpack_header = _END_HEADER.unpack_from
    unpack_body = _END_BODY.unpack_from
    unpack_deliver = _QBB.unpack_from
    startswith = buf.startswith
    tags = out.tags
    redelivered = out.redelivered
    exchanges = out.exchanges
    routing_keys = out.routing_keys
    properties = out.properties
    bodies = out.bodies
    while n - off >= 8:
        ftype, channel, size = unpack(buf, off)
        start = off + 7
        end = start + size
        if end >= n:
            break
        if ftype != 1 or not startswith(_DELIVER, start):
            if buf[end] != _FRAME_END:
                raise _frame_error(f"a {size}-byte frame of type {ftype}")
            control.append(Frame(ftype, channel, buf[start:end]))
            off = end + 1
            continue
        # Method frame end + content header frame header + class/weight/body-size.
        if n - end < 20:
            break
        fend, htype, _hch, hsize, _cls, _weight, body_size = unpack_header(buf, end)
        hstart = end + 8
        hend = hstart + hsize
        if hend >= n:
            break
        if fend != _FRAME_END or htype != 2 or hsize < 14:
            raise FrameError(f"basic.deliver not followed by a content header ({htype})")
        if body_size == 0:
            if buf[hend] != _FRAME_END:
                raise _frame_error("a content header")
            body = b""
            p = hend + 1
        else:
            if n - hend < 8:
                break
            fend, btype, _bch, bsize = unpack_body(buf, hend)
            bstart = hend + 8
            bend = bstart + bsize
            if bend >= n:
                break
            if fend != _FRAME_END or btype != 3 or buf[bend] != _FRAME_END:
                raise FrameError(f"content header not followed by a body frame ({btype})")
            p = bend + 1
            if bsize == body_size:
                body = buf[bstart:bend]
            else:
                joined = _more_body(buf, p, buf[bstart:bend], body_size)
                if joined is None:
                    break
                body, p = joined
        # The deliver arguments: consumer-tag, delivery-tag, redelivered, exchange, key.
        o = start + 5 + buf[start + 4]
        tag, bits, elen = unpack_deliver(buf, o)
        o += 10
        exchanges.append(buf[o : o + elen])
        o += elen
        routing_keys.append(buf[o + 1 : o + 1 + buf[o]])
        tags.append(tag)
        redelivered.append(bits & 1)
        properties.append(buf[hstart + 12 : hend])
        bodies.append(body)
        off = p
    return off


def _more_body(buf: bytes, p: int, first: bytes, body_size: int) -> tuple[bytes, int] | None:
    """The rest of a body split over several frames; None when not all of it is in ``buf``."""
    n = len(buf)
    pieces = [first]
    got = len(first)
    while got < body_size:
        if n - p < 8:
            return None
        btype, _bch, bsize = _HEADER.unpack_from(buf, p)
        bstart = p + 7
        bend = bstart + bsize
        if bend >= n:
            return None
        if btype != 3 or buf[bend] != _FRAME_END:
            raise FrameError(f"body frame expected, got type {btype}")
        pieces.append(buf[bstart:bend])
        got += bsize
        p = bend + 1
    if got != body_size:
        raise FrameError(f"body of {got} bytes, the content header announced {body_size}")
    return b"".join(pieces), p


@dataclass
class _Returned:
    method: m.BasicReturn
    body_size: int = -1
    received: int = 0


class AmqpClient:
    """One blocking connection with one channel (number 1).

    Not thread-safe. Every wait has a timeout (``timeout`` seconds, per socket read).
    """

    CHANNEL = 1

    def __init__(self, params: ConnectionParams, *, timeout: float = 30.0) -> None:
        self.params = params
        self.timeout = timeout
        self.server_properties: FieldTable = {}
        self.frame_max = params.frame_max
        self.deliveries = Deliveries()
        self._sock: socket.socket | None = None
        self._rest = b""
        self._methods: list[tuple[int, m.Method]] = []
        self._returned: _Returned | None = None
        self.returns: list[m.BasicReturn] = []
        self.cancelled: list[str] = []
        self._out: list[bytes] = []
        self._out_size = 0
        # Publisher confirms.
        self._confirming = False
        self._next_tag = 1
        self._confirmed_upto = 0  # every tag <= this is settled
        self._settled: set[int] = set()
        self.nacked = 0
        self._consumer_seq = 0

    # -- connection --------------------------------------------------------------------

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
        p = self.params
        self._send_now(framing.PROTOCOL_HEADER)
        start = self._expect(0, m.ConnectionStart)
        self.server_properties = start.server_properties
        response = b"\x00" + p.username.encode() + b"\x00" + p.password.encode()
        self.send_method(
            0,
            m.ConnectionStartOk(
                client_properties={
                    "product": "leveret.spark",
                    "capabilities": {
                        "publisher_confirms": True,
                        "basic.nack": True,
                        "consumer_cancel_notify": True,
                        "connection.blocked": True,
                    },
                },
                mechanism="PLAIN",
                response=response,
                locale="en_US",
            ),
        )
        self.flush()
        tune = self._expect(0, m.ConnectionTune)
        frame_max = p.frame_max
        if tune.frame_max and (frame_max == 0 or tune.frame_max < frame_max):
            frame_max = tune.frame_max
        self.frame_max = frame_max
        heartbeat = min(p.heartbeat, tune.heartbeat) if tune.heartbeat else p.heartbeat
        self.send_method(
            0,
            m.ConnectionTuneOk(
                channel_max=tune.channel_max or 2047, frame_max=frame_max, heartbeat=heartbeat
            ),
        )
        self.send_method(0, m.ConnectionOpen(virtual_host=p.vhost))
        self.flush()
        self._expect(0, m.ConnectionOpenOk)
        self.rpc(m.ChannelOpen(), m.ChannelOpenOk)

    def close(self) -> None:
        """Send connection.close and drop the socket without waiting for deliveries to drain.

        Stream consumers must not reject what they were sent (RabbitMQ closes the connection
        with 540), so the connector never cancels politely: it closes the connection.
        """
        if self._sock is None:
            return
        try:
            self._out.clear()
            self.send_method(0, m.ConnectionClose(reply_code=200, reply_text="bye"))
            self.flush()
            deadline = time.monotonic() + 1.0
            self._sock.settimeout(0.2)
            while time.monotonic() < deadline:
                if any(isinstance(meth, m.ConnectionCloseOk) for _, meth in self._methods):
                    break
                try:
                    self._read_once()
                except (AmqpClientError, OSError, TimeoutError):
                    break
        except OSError:
            pass
        finally:
            self.abort()

    def abort(self) -> None:
        """Close the socket now."""
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def __enter__(self) -> AmqpClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------

    def _send_now(self, data: bytes) -> None:
        if self._sock is None:
            raise AmqpClientError("connection is closed")
        try:
            self._sock.sendall(data)
        except OSError as exc:
            self.abort()
            raise AmqpClientError(f"send failed: {exc}") from exc

    def send_method(self, channel: int, method: m.Method) -> None:
        """Queue one method frame (sent at the next :meth:`flush`)."""
        self.write(framing.encode_method_frame(channel, method.encode()))

    def write(self, data: bytes) -> None:
        self._out.append(data)
        self._out_size += len(data)
        if self._out_size >= 65536:
            self.flush()

    def flush(self) -> None:
        if self._out:
            data = b"".join(self._out)
            self._out.clear()
            self._out_size = 0
            self._send_now(data)

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
        data = self._rest + chunk if self._rest else chunk
        if data.startswith(b"AMQP"):
            raise AmqpClientError(f"the broker refused the protocol version: {data[:8]!r}")
        control: list[Frame] = []
        used = scan_frames(data, self.deliveries, control)
        self._rest = data[used:]
        for frame in control:
            self._control(frame)

    def _control(self, frame: Frame) -> None:
        ftype, channel, payload = frame
        if ftype == framing.FRAME_METHOD:
            method = m.decode_method(payload)
            if isinstance(method, m.ConnectionClose):
                self._reply_close(0, m.ConnectionCloseOk())
                self.abort()
                raise AmqpClientError(
                    f"connection closed by the broker: {method.reply_code} {method.reply_text}",
                    method.reply_code,
                )
            if isinstance(method, m.ChannelClose):
                self._reply_close(channel, m.ChannelCloseOk())
                self.abort()
                raise AmqpClientError(
                    f"channel closed by the broker: {method.reply_code} {method.reply_text}",
                    method.reply_code,
                )
            if isinstance(method, m.BasicAck | m.BasicNack) and channel == self.CHANNEL:
                self._settle(method.delivery_tag, multiple=method.multiple)
                if isinstance(method, m.BasicNack):
                    self.nacked += 1
                return
            if isinstance(method, m.BasicReturn):
                self._returned = _Returned(method)
                return
            if isinstance(method, m.BasicCancel):
                self.cancelled.append(method.consumer_tag)
                return
            self._methods.append((channel, method))
        elif ftype == framing.FRAME_HEADER and self._returned is not None:
            _cls, body_size, _raw = framing.parse_content_header(payload)
            self._returned.body_size = body_size
            if body_size == 0:
                self.returns.append(self._returned.method)
                self._returned = None
        elif ftype == framing.FRAME_BODY and self._returned is not None:
            self._returned.received += len(payload)
            if self._returned.received >= self._returned.body_size:
                self.returns.append(self._returned.method)
                self._returned = None
        elif ftype == framing.FRAME_HEARTBEAT and self.params.heartbeat:
            self._send_now(framing.HEARTBEAT_FRAME)

    def _reply_close(self, channel: int, method: m.Method) -> None:
        try:
            self._send_now(framing.encode_method_frame(channel, method.encode()))
        except AmqpClientError:
            pass

    def _expect(self, channel: int, cls: type[M]) -> M:
        deadline = time.monotonic() + self.timeout
        while True:
            for i, (ch, method) in enumerate(self._methods):
                if ch == channel and isinstance(method, cls):
                    del self._methods[i]
                    return method
            if time.monotonic() > deadline:
                raise AmqpClientError(f"timed out waiting for {cls.NAME}")
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
        self.send_method(self.CHANNEL, m.BasicAck(delivery_tag=delivery_tag, multiple=multiple))

    # -- publishing ------------------------------------------------------------------------

    def confirm_select(self) -> None:
        self.rpc(m.ConfirmSelect(), m.ConfirmSelectOk)
        self._confirming = True

    @property
    def in_flight(self) -> int:
        """Published messages not yet confirmed."""
        return self._next_tag - 1 - self._confirmed_upto - len(self._settled)

    def _settle(self, tag: int, *, multiple: bool) -> None:
        if multiple:
            if tag > self._confirmed_upto:
                self._confirmed_upto = tag
            self._settled = {t for t in self._settled if t > tag}
        else:
            self._settled.add(tag)
        upto = self._confirmed_upto
        settled = self._settled
        while upto + 1 in settled:
            upto += 1
            settled.discard(upto)
        self._confirmed_upto = upto

    def publish_frames(self, frames: bytes) -> int:
        """Queue one encoded publish (method + header + body frames); returns its tag."""
        self.write(frames)
        tag = self._next_tag
        self._next_tag += 1
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
