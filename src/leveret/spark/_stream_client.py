"""A lean, synchronous client of RabbitMQ's stream protocol for the Spark connector.

The protocol is the client-role machine every client-side user shares
(:class:`leveret.protocol.rabbitstream.client.ClientConnection`); this module adds one
blocking socket and what the connector needs: stream metadata and stats, subscriptions whose
chunks are handed over whole (``deliver`` frames as stored, never split into messages here),
and publishers with pipelined confirms. No pyspark import here.
"""

from __future__ import annotations

import socket
import ssl
import time
from typing import TYPE_CHECKING, TypeVar

from leveret.protocol.rabbitstream import commands as c
from leveret.protocol.rabbitstream.client import ClientConnection, ClientState
from leveret.protocol.rabbitstream.constants import Code
from leveret.protocol.rabbitstream.errors import StreamProtocolError
from leveret.spark._socket import SocketClient

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.spark._client import ConnectionParams

__all__ = ["StreamClient", "StreamClientError"]

_RECV_SIZE = 1 << 20
_FLUSH_SIZE = 1 << 18

R = TypeVar("R", bound=c.Command)


class StreamClientError(Exception):
    """The broker refused a request, closed the connection, or the connection failed.

    ``code`` is the stream protocol's response code when the broker sent one (0 otherwise).
    """

    def __init__(self, message: str, code: int = 0) -> None:
        super().__init__(message)
        self.code = code


def _version(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


class StreamClient(SocketClient):
    """One blocking stream-protocol connection. Not thread-safe; every wait has a timeout."""

    def __init__(self, params: ConnectionParams, *, timeout: float = 30.0) -> None:
        self.params = params
        self.timeout = timeout
        self.machine = ClientConnection(
            params.username,
            params.password,
            params.vhost,
            properties={"product": "leveret.spark", "connection_name": "leveret.spark"},
            heartbeat=params.heartbeat,
        )
        super().__init__()
        self._responses: dict[int, c.Command] = {}
        # Delivered chunks, in order: (subscription id, the chunk's bytes as stored).
        self.chunks: list[tuple[int, bytes]] = []
        self.confirmed: dict[int, int] = {}  # publisher id -> publishing ids confirmed
        self.last_confirmed: dict[int, int] = {}  # publisher id -> highest id confirmed
        self.errors: list[tuple[int, int, int]] = []  # (publisher id, publishing id, code)
        self.gone: set[str] = set()  # streams a metadata update said are unavailable

    # -- connection ----------------------------------------------------------------------------

    @property
    def server_properties(self) -> dict[str, str]:
        return self.machine.server_properties

    @property
    def product(self) -> str:
        return self.server_properties.get("product", "")

    @property
    def is_leveret(self) -> bool:
        return self.product == "Leveret"

    @property
    def server_version(self) -> tuple[int, ...]:
        return _version(self.server_properties.get("version", ""))

    @property
    def has_stream_stats(self) -> bool:
        """Stream stats exist from RabbitMQ 3.11 on (3.10 closes the connection on them)."""
        return self.server_version >= (3, 11)

    @property
    def frame_max(self) -> int:
        return self.machine.frame_max

    def connect(self) -> StreamClient:
        """Open the socket and run the handshake; returns ``self``."""
        p = self.params
        try:
            sock = socket.create_connection((p.host, p.port), timeout=p.connect_timeout)
        except OSError as exc:
            raise StreamClientError(f"cannot connect to {p.host}:{p.port}: {exc}") from exc
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if p.use_tls:
                context = ssl.create_default_context(cafile=p.tls_ca_file)
                if not p.tls_verify:
                    context.check_hostname = False
                    context.verify_mode = ssl.CERT_NONE
                sock = context.wrap_socket(sock, server_hostname=p.host)
            sock.settimeout(self.timeout)
            self._sock = sock
            self.flush()
            deadline = time.monotonic() + min(self.timeout, p.connect_timeout)
            while self.machine.state is ClientState.HANDSHAKE:
                if time.monotonic() > deadline:
                    raise StreamClientError(f"no stream-protocol handshake from {p.host}:{p.port}")
                self._read_once()
        except BaseException:
            self.abort()
            raise
        if self.machine.state is not ClientState.OPEN:
            refused = self.machine.refused
            self.abort()
            if refused is not None:
                what, code = refused
                raise StreamClientError(f"{what} refused by the broker (code 0x{code:02x})", code)
            raise StreamClientError("the broker closed the connection during the handshake")
        return self

    def close(self) -> None:
        """Send close, wait briefly for its response, drop the socket."""
        if self._sock is None:
            return
        try:
            if self.machine.state is ClientState.OPEN:
                self.machine.close()
                self.flush()
                deadline = time.monotonic() + 1.0
                self._sock.settimeout(0.2)
                while time.monotonic() < deadline and not self.machine.closed:
                    try:
                        self._read_once()
                    except (StreamClientError, OSError, TimeoutError):
                        break
        except (OSError, StreamClientError):
            pass
        finally:
            self.abort()

    # -- I/O -----------------------------------------------------------------------------------

    def flush(self) -> None:
        data = self.machine.data_to_send()
        if not data:
            return
        if self._sock is None:
            raise StreamClientError("connection is closed")
        try:
            self._sock.sendall(data)
        except OSError as exc:
            self.abort()
            raise StreamClientError(f"send failed: {exc}") from exc
        self.machine.sent(time.monotonic())

    def _read_once(self) -> None:
        if self._sock is None:
            raise StreamClientError("connection is closed")
        try:
            data = self._sock.recv(_RECV_SIZE)
        except TimeoutError:
            raise
        except OSError as exc:
            self.abort()
            raise StreamClientError(f"receive failed: {exc}") from exc
        if not data:
            self.abort()
            raise StreamClientError("the broker closed the connection")
        try:
            commands = self.machine.receive_data(data, time.monotonic())
        except StreamProtocolError as exc:
            try:
                self.flush()
            except StreamClientError:
                pass
            self.abort()
            raise StreamClientError(f"protocol error from the broker: {exc}", exc.code) from exc
        chunks = self.chunks
        for command in commands:
            t = type(command)
            if t is c.Deliver:
                assert isinstance(command, c.Deliver)
                chunks.append((command.subscription_id, command.chunk))
            elif t is c.PublishConfirm:
                assert isinstance(command, c.PublishConfirm)
                pid = command.publisher_id
                ids = command.publishing_ids
                self.confirmed[pid] = self.confirmed.get(pid, 0) + len(ids)
                top = max(ids) if ids else 0
                if top > self.last_confirmed.get(pid, 0):
                    self.last_confirmed[pid] = top
            elif t is c.PublishError:
                assert isinstance(command, c.PublishError)
                self.errors.extend((command.publisher_id, i, code) for i, code in command.errors)
            elif t is c.MetadataUpdate:
                assert isinstance(command, c.MetadataUpdate)
                self.gone.add(command.stream)
            elif t is c.Close:
                assert isinstance(command, c.Close)
                self.flush()  # the close response the machine queued
                self.abort()
                raise StreamClientError(
                    f"connection closed by the broker: 0x{command.code:02x} {command.reason}",
                    command.code,
                )
            elif t is c.CreditResponse:
                assert isinstance(command, c.CreditResponse)
                raise StreamClientError(
                    f"credit refused for subscription {command.subscription_id}", command.code
                )
            else:
                cid = getattr(command, "correlation_id", None)
                if cid is not None:
                    self._responses[cid] = command
        if self.machine.output_size:
            self.flush()

    def poll(self, timeout: float) -> bool:
        """Read once, waiting at most ``timeout`` seconds; False when nothing arrived."""
        if self._sock is None:
            raise StreamClientError("connection is closed")
        if not self.machine.tick(time.monotonic()):
            self.abort()
            raise StreamClientError("no heartbeat from the broker")
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

    def call(self, make: Callable[[int], c.Command], reply: type[R]) -> R:
        """Send a request and wait for its response."""
        cid = self.machine.request(make)
        self.flush()
        deadline = time.monotonic() + self.timeout
        while cid not in self._responses:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StreamClientError(f"timed out waiting for the answer to request {cid}")
            self.poll(remaining)
        response = self._responses.pop(cid)
        if not isinstance(response, reply):
            raise StreamClientError(f"unexpected answer {type(response).__name__} to {cid}")
        return response

    def _code(self, make: Callable[[int], c.Command]) -> int:
        return self.call(make, c.Response).code

    # -- streams -------------------------------------------------------------------------------

    def metadata(self, streams: list[str]) -> dict[str, int]:
        """Each stream's response code (OK, or STREAM_DOES_NOT_EXIST, ...)."""
        response = self.call(lambda cid: c.Metadata(cid, list(streams)), c.MetadataResponse)
        return {s.stream: s.code for s in response.streams}

    def create(self, stream: str, arguments: dict[str, str] | None = None) -> int:
        return self._code(lambda cid: c.Create(cid, stream, dict(arguments or {})))

    def delete(self, stream: str) -> int:
        return self._code(lambda cid: c.Delete(cid, stream))

    def stream_stats(self, stream: str) -> dict[str, int]:
        response = self.call(lambda cid: c.StreamStats(cid, stream), c.StreamStatsResponse)
        if response.code != Code.OK:
            raise StreamClientError(
                f"stream stats of {stream!r} refused (code 0x{response.code:02x})", response.code
            )
        return dict(response.stats)

    # -- consuming -----------------------------------------------------------------------------

    def subscribe(
        self,
        subscription_id: int,
        stream: str,
        offset_type: int,
        offset: int = 0,
        credit: int = 1,
        properties: dict[str, str] | None = None,
    ) -> None:
        code = self._code(
            lambda cid: c.Subscribe(
                cid, subscription_id, stream, offset_type, offset, credit, dict(properties or {})
            )
        )
        if code != Code.OK:
            raise StreamClientError(
                f"subscription to stream {stream!r} refused (code 0x{code:02x})", code
            )

    def unsubscribe(self, subscription_id: int) -> None:
        self._code(lambda cid: c.Unsubscribe(cid, subscription_id))

    def credit(self, subscription_id: int, credit: int) -> None:
        """Queue credit (sent at the next flush or poll)."""
        self.machine.send(c.Credit(subscription_id, credit))

    # -- publishing ------------------------------------------------------------------------------

    def declare_publisher(self, publisher_id: int, reference: str | None, stream: str) -> None:
        code = self._code(lambda cid: c.DeclarePublisher(cid, publisher_id, reference, stream))
        if code != Code.OK:
            raise StreamClientError(
                f"publisher for stream {stream!r} refused (code 0x{code:02x})", code
            )

    def delete_publisher(self, publisher_id: int) -> None:
        self._code(lambda cid: c.DeletePublisher(cid, publisher_id))

    def publisher_sequence(self, reference: str, stream: str) -> int:
        """The highest publishing id the stream holds for ``reference`` (0 for none)."""
        response = self.call(
            lambda cid: c.QueryPublisherSequence(cid, reference, stream),
            c.QueryPublisherSequenceResponse,
        )
        if response.code != Code.OK:
            raise StreamClientError(
                f"publisher sequence of {stream!r} refused (code 0x{response.code:02x})",
                response.code,
            )
        return response.sequence

    def publish_frame(self, frame: bytes) -> None:
        """Queue one publish frame encoded by the caller (written at the next flush)."""
        self.machine.send_raw(frame)
        if self.machine.output_size >= _FLUSH_SIZE:
            self.flush()
