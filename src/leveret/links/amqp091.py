"""An asyncio AMQP 0-9-1 client for links, on the project's client-role machine.

The protocol is :class:`leveret.protocol.amqp091.client.ClientConnection` (the one client
side of 0-9-1 in the project: handshake, channels, content assembly, confirms, heartbeats);
this module adds the transport (TCP, TLS, or a socket pair into this broker), the loop clock
for heartbeats, request/answer waits per channel, and the callbacks a shovel or federation
link needs on its per-message paths:

- deliveries arrive in columns (:class:`Deliveries`, filled by the machine's frame walk)
  and go to ``on_deliveries`` once per read, never one object per message;
- confirms (``basic.ack``/``basic.nack`` from the server) go to ``on_confirm``;
- what a read made the link queue (acks, publishes on another connection) is written by the
  link with :meth:`Connection091.flush`, once per read.

Flow: ``writable`` follows the transport's ``pause_writing``/``resume_writing`` and the
server's ``connection.blocked``; ``on_flow`` tells the link when it changes, so it can stop
reading from the other side. A broken connection (lost socket, server close, missed
heartbeats, a protocol error) fails every wait with :class:`LinkError` and resolves
``closed`` with the reason, once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections import deque
from typing import TYPE_CHECKING, Final, TypeVar, cast

from leveret import __version__
from leveret.errors import AMQPError
from leveret.links.deadline import Deadline
from leveret.protocol.amqp091._generated import methods as m
from leveret.protocol.amqp091.client import CLIENT_CAPABILITIES, ClientConnection, Deliveries
from leveret.protocol.amqp091.client_events import (
    HeartbeatMissed,
    MethodReceived,
    ProtocolHeaderReceived,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.links.local import LocalConnector
    from leveret.links.uri import Endpoint, TlsOptions
    from leveret.protocol.amqp091.client_events import Event
    from leveret.protocol.amqp091.fieldtable import FieldTable

__all__ = ["Connection091", "LinkError", "open_connection", "tls_context"]

log = logging.getLogger("leveret.links")

M = TypeVar("M", bound=m.Method)
WRITE_HIGH_WATER: Final = 1 << 20
CLOSE_TIMEOUT: Final = 10.0  # RabbitMQ's ?MAX_CONNECTION_CLOSE_TIMEOUT


class LinkError(Exception):
    """A link's connection or channel failed; the text is what its status shows."""

    def __init__(self, reason: str, *, code: int = 0) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


def tls_context(options: TlsOptions) -> ssl.SSLContext:
    """The client context an ``amqps`` URI asks for (RabbitMQ 3.10's client verifies the
    server only with ``verify=verify_peer``)."""
    if options.verify:
        context = ssl.create_default_context(cafile=options.cacertfile)
        context.check_hostname = options.server_name_indication != ""
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        if options.cacertfile:
            context.load_verify_locations(options.cacertfile)
    if options.certfile:
        context.load_cert_chain(options.certfile, options.keyfile, options.password)
    return context


class Connection091(asyncio.Protocol):
    """One link connection (see the module docstring)."""

    def __init__(self, endpoint: Endpoint, name: str, mechanism: str) -> None:
        self.endpoint = endpoint
        self.name = name
        self.loop = asyncio.get_running_loop()
        self.deliveries = Deliveries()
        properties: FieldTable = {
            "product": "Leveret",
            "version": __version__,
            "platform": "Python",
            "connection_name": name,
            "capabilities": dict(CLIENT_CAPABILITIES),
        }
        local = endpoint.local
        self.machine = ClientConnection(
            "" if local else (endpoint.username or "guest"),
            "" if local else (endpoint.password or "guest"),
            endpoint.vhost,
            mechanism=mechanism,
            client_properties=properties,
            frame_max=endpoint.frame_max or 131072,
            channel_max=endpoint.channel_max,
            heartbeat=0 if local else endpoint.heartbeat,
            deliveries=self.deliveries,
        )
        self.transport: asyncio.Transport | None = None
        # This broker's name for the connection when it is a local one (local.py).
        self.local_name = ""
        self.closed: asyncio.Future[str] = self.loop.create_future()
        self.opened: asyncio.Future[None] = self.loop.create_future()
        self.error: str | None = None
        self.on_deliveries: Callable[[Deliveries], None] | None = None
        self.on_confirm: Callable[[int, int, bool, bool], None] | None = None
        self.on_cancel: Callable[[int, str], None] | None = None
        self.on_flow: Callable[[], None] | None = None
        self.on_read: Callable[[], None] | None = None
        # A channel the server closed (its waiters have failed already); the link decides
        # whether that ends it (its working channels) or not (a disposable channel).
        self.on_channel_close: Callable[[int, LinkError], None] | None = None
        self._transport_writable = True
        self._waiters: dict[int, deque[tuple[tuple[type[m.Method], ...], asyncio.Future[m.Method]]]]
        self._waiters = {}
        self._deadline = Deadline(self.loop, self._tick)
        self._next_channel = 1

    # -- state ------------------------------------------------------------------------------

    @property
    def writable(self) -> bool:
        """Publishing makes progress: the socket drains and the server has not blocked us."""
        return self._transport_writable and not self.machine.blocked

    @property
    def server_properties(self) -> FieldTable:
        return self.machine.server_properties

    @property
    def is_open(self) -> bool:
        return self.error is None and self.machine.is_open

    # -- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast("asyncio.Transport", transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.flush()  # the protocol header

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(f"connection lost: {exc}" if exc else "connection closed by the peer")
        self._deadline.cancel()

    def pause_writing(self) -> None:
        self._transport_writable = False
        self._flow()

    def resume_writing(self) -> None:
        self._transport_writable = True
        self._flow()

    def _flow(self) -> None:
        if self.on_flow is not None:
            self.on_flow()

    def data_received(self, data: bytes) -> None:
        try:
            events = self.machine.receive_data(data, self.loop.time())
        except AMQPError as exc:
            self.flush()  # the connection.close that says so
            self._fail(f"protocol error from the server: {exc.reply_code} {exc}")
            return
        try:
            if self.deliveries.tags and self.on_deliveries is not None:
                self.on_deliveries(self.deliveries)
            self.deliveries.clear()
            for event in events:
                self._event(event)
            if self.on_read is not None:
                self.on_read()
        except LinkError as exc:
            self._fail(exc.reason)
        self.flush()

    # -- output -------------------------------------------------------------------------------

    def flush(self) -> None:
        """Write everything the machine has queued, in one ``write``."""
        data = self.machine.data_to_send()
        transport = self.transport
        if data and transport is not None and not transport.is_closing():
            transport.write(data)
            self._rearm()

    def pause_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    # -- events ---------------------------------------------------------------------------

    def _event(self, event: Event) -> None:
        if isinstance(event, MethodReceived):
            channel, method = event.channel, event.method
            if isinstance(method, m.BasicAck | m.BasicNack):
                if self.on_confirm is not None:
                    self.on_confirm(
                        channel,
                        method.delivery_tag,
                        method.multiple,
                        isinstance(method, m.BasicAck),
                    )
                return
            if isinstance(method, m.ConnectionOpenOk):
                if not self.opened.done():
                    self.opened.set_result(None)
                self._rearm()
                return
            if isinstance(method, m.ConnectionClose):
                self._fail(
                    f"server closed the connection: {method.reply_code} {method.reply_text}",
                    code=method.reply_code,
                )
                return
            if isinstance(method, m.ConnectionCloseOk):
                # The server leaves the socket to the client after close-ok (as RabbitMQ does):
                # the close is complete here, not when the socket goes.
                self._fail("closed")
                return
            if isinstance(method, m.ChannelClose):
                error = LinkError(
                    f"server closed channel {channel}: {method.reply_code} {method.reply_text}",
                    code=method.reply_code,
                )
                for _types, waiter in self._waiters.pop(channel, deque()):
                    if not waiter.done():
                        waiter.set_exception(error)
                if self.on_channel_close is not None:
                    self.on_channel_close(channel, error)
                return
            if isinstance(method, m.BasicCancel):
                if self.on_cancel is not None:
                    self.on_cancel(channel, method.consumer_tag)
                return
            if isinstance(method, m.ConnectionBlocked | m.ConnectionUnblocked):
                self._flow()
                return
            waiters = self._waiters.get(channel)
            if waiters:
                types, waiter = waiters[0]
                if isinstance(method, types):
                    waiters.popleft()
                    if not waiter.done():
                        waiter.set_result(method)
        elif isinstance(event, HeartbeatMissed):
            self._fail(f"missed heartbeats from the server ({event.silent_for:.0f} s silent)")
        elif isinstance(event, ProtocolHeaderReceived):
            self._fail(f"the server refused AMQP 0-9-1 (it answered {event.data!r})")

    def _fail(self, reason: str, *, code: int = 0) -> None:
        if self.error is not None:
            return
        self.error = reason
        error = LinkError(reason, code=code)
        for waiters in self._waiters.values():
            for _types, waiter in waiters:
                if not waiter.done():
                    waiter.set_exception(error)
        self._waiters.clear()
        if not self.opened.done():
            self.opened.set_exception(error)
        if not self.closed.done():
            self.closed.set_result(reason)
        if self.transport is not None:
            self.flush()
            self.transport.close()

    # -- heartbeats -------------------------------------------------------------------------

    def _rearm(self) -> None:
        self._deadline.arm(self.machine.next_deadline())

    def _tick(self) -> None:
        if self.error is not None:
            return
        for event in self.machine.tick(self.loop.time()):
            self._event(event)
        self.flush()
        self._rearm()

    # -- requests -----------------------------------------------------------------------------

    async def call(
        self, channel: int, method: m.Method, *replies: type[M], within: float = 30.0
    ) -> M:
        """Send ``method`` and wait for its answer on ``channel``."""
        if self.error is not None:
            raise LinkError(self.error)
        waiter: asyncio.Future[m.Method] = self.loop.create_future()
        self._waiters.setdefault(channel, deque()).append((replies, waiter))
        self.machine.send_method(channel, method)
        self.flush()
        async with asyncio.timeout(within):
            return cast("M", await waiter)

    def send(self, channel: int, method: m.Method) -> None:
        """Send a method that has no answer (or whose answer is not awaited)."""
        if self.error is not None:
            raise LinkError(self.error)
        self.machine.send_method(channel, method)

    async def open_channel(self) -> int:
        channel = self._next_channel
        self._next_channel += 1
        await self.call(channel, m.ChannelOpen(), m.ChannelOpenOk)
        return channel

    async def close_channel(self, channel: int) -> None:
        with contextlib.suppress(LinkError, TimeoutError):
            await self.call(channel, m.ChannelClose(200, "", 0, 0), m.ChannelCloseOk, within=5)

    async def disposable_call(self, method: m.Method, *replies: type[M], within: float = 30.0) -> M:
        """``method`` on a channel of its own, closed afterwards (RabbitMQ's
        ``disposable_channel_call``: a refusal closes only that channel)."""
        channel = await self.open_channel()
        result = await self.call(channel, method, *replies, within=within)
        await self.close_channel(channel)
        return result

    def publish(
        self, channel: int, exchange: str, routing_key: str, body: bytes, properties: bytes
    ) -> int:
        """Queue one publish (written by :meth:`flush`); its confirm tag in confirm mode."""
        return self.machine.publish(channel, exchange, routing_key, body, properties)

    def ack(self, channel: int, delivery_tag: int, multiple: bool = False) -> None:
        if self.error is None:
            self.machine.ack(channel, delivery_tag, multiple)

    def nack(self, channel: int, delivery_tag: int, multiple: bool, requeue: bool) -> None:
        if self.error is None:
            self.machine.send_method(channel, m.BasicNack(delivery_tag, multiple, requeue))

    async def close(self, within: float = CLOSE_TIMEOUT) -> None:
        """Close cleanly if open (unacknowledged deliveries go back to the queue), else drop
        the socket."""
        transport = self.transport
        if transport is None:
            return
        if self.error is None and self.machine.is_open:
            self.machine.close(200, "Goodbye")
            self.flush()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(within):
                    await asyncio.shield(self.closed)
        self._fail("closed")
        transport.close()


def _mechanism(endpoint: Endpoint) -> str:
    if endpoint.local:
        return "EXTERNAL"
    for mechanism in endpoint.mechanisms:
        if mechanism in ("PLAIN", "AMQPLAIN", "EXTERNAL"):
            return mechanism
    return "PLAIN"


async def open_connection(
    endpoint: Endpoint, name: str, local: LocalConnector | None = None
) -> Connection091:
    """Connect, log in and open the vhost; :class:`LinkError` with RabbitMQ's kind of
    reason if any of it fails (refused, unreachable, login refused, vhost refused)."""
    loop = asyncio.get_running_loop()
    mechanism = _mechanism(endpoint)
    try:
        async with asyncio.timeout(endpoint.connection_timeout):
            if endpoint.local:
                if local is None:
                    raise LinkError("a URI without a host needs this broker (none is running)")
                sock, label = local.connect("amqp091", endpoint.username, name)
                _t, conn = await loop.create_connection(
                    lambda: Connection091(endpoint, name, mechanism), sock=sock
                )
                conn.local_name = label
            else:
                context = tls_context(endpoint.tls) if endpoint.tls is not None else None
                server_hostname = None
                if context is not None and endpoint.tls is not None:
                    sni = endpoint.tls.server_name_indication
                    server_hostname = endpoint.host if sni is None else sni
                assert endpoint.host is not None
                _t, conn = await loop.create_connection(
                    lambda: Connection091(endpoint, name, mechanism),
                    endpoint.host,
                    endpoint.port,
                    ssl=context,
                    server_hostname=server_hostname,
                )
            try:
                await conn.opened
            except BaseException:
                conn._fail("cancelled")
                raise
            return conn
    except TimeoutError:
        raise LinkError(
            f"connection to {endpoint.safe_uri} timed out (connection_timeout"
            f" {endpoint.connection_timeout:g} s)"
        ) from None
    except ssl.SSLError as exc:
        raise LinkError(f"TLS error with {endpoint.safe_uri}: {exc.reason or exc}") from None
    except OSError as exc:
        raise LinkError(_socket_error(endpoint, exc)) from None


def _socket_error(endpoint: Endpoint, exc: OSError) -> str:
    """RabbitMQ's wording of connection errors (``human_readable_connection_error``)."""
    if isinstance(exc, ConnectionRefusedError):
        return "connection to target host was refused (ECONNREFUSED)"
    if isinstance(exc, ConnectionResetError):
        return "connection to target host was reset by peer (ECONNRESET)"
    if isinstance(exc, socket.gaierror):
        return f"target hostname cannot be resolved ({endpoint.host})"
    return f"cannot connect to {endpoint.safe_uri}: {exc.strerror or exc}"
