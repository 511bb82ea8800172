"""An asyncio AMQP 1.0 client for links, on the project's 1.0 connection machine.

The protocol is :class:`leveret.protocol.amqp10.Connection` in its client role (SASL,
open, sessions, links, credit, transfers, dispositions, heartbeats); this module adds the
transport (TCP, TLS, or a socket pair into this broker), the loop clock, one session per
connection, waits for attaches, and the callbacks of a shovel's per-message paths:
``on_message`` for a receiving link, ``on_credit`` and ``on_disposition`` for a sending one.
What a callback queued is written by :meth:`Connection10.flush`, once per read.

Credit is the link's business (``grant``): a shovel source keeps ``prefetch`` minus what it
has not settled yet, so unsettled messages are bounded as 0-9-1's prefetch bounds them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from typing import TYPE_CHECKING, Any, Final, cast

from leveret import __version__
from leveret.links.amqp091 import LinkError, tls_context
from leveret.links.deadline import Deadline
from leveret.protocol.amqp10 import (
    Accepted,
    Connection,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionOpened,
    CreditGranted,
    DispositionReceived,
    LinkAttached,
    LinkDetached,
    MessageReceived,
    ReceiverSettleMode,
    Rejected,
    Released,
    Role,
    SenderSettleMode,
    SessionBegun,
    SessionEnded,
    Side,
    Source,
    Symbol,
    Target,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.links.local import LocalConnector
    from leveret.links.uri import Endpoint
    from leveret.protocol.amqp10 import Event
    from leveret.protocol.amqp10.types import Value

__all__ = ["ACCEPTED", "REJECTED", "RELEASED", "Connection10", "open_connection10"]

log = logging.getLogger("leveret.links")

WRITE_HIGH_WATER: Final = 1 << 20
ACCEPTED: Final = Accepted()
REJECTED: Final = Rejected()
RELEASED: Final = Released()


def _error_text(error: object) -> str:
    condition = getattr(error, "condition", None)
    description = getattr(error, "description", None)
    return f"{condition}: {description}" if description else str(condition)


class Connection10(asyncio.Protocol):
    """One AMQP 1.0 link connection with one session (see the module docstring)."""

    def __init__(self, endpoint: Endpoint, name: str) -> None:
        self.endpoint = endpoint
        self.name = name
        self.loop = asyncio.get_running_loop()
        hostname = endpoint.hostname
        if hostname is None and endpoint.local:
            hostname = f"vhost:{endpoint.vhost}"
        self.machine = Connection(
            ConnectionConfig(
                side=Side.CLIENT,
                container_id=endpoint.container_id or name,
                hostname=hostname,
                max_frame_size=endpoint.max_frame_size or 131072,
                idle_time_out=endpoint.idle_time_out,
                properties={
                    Symbol("product"): "Leveret",
                    Symbol("version"): __version__,
                    Symbol("connection_name"): name,
                },
                sasl_mechanism=endpoint.sasl or None,
                sasl_username=endpoint.username or "",
                sasl_password=endpoint.password or "",
            )
        )
        self.transport: asyncio.Transport | None = None
        # This broker's name for the connection when it is a local one (local.py).
        self.local_name = ""
        self.closed: asyncio.Future[str] = self.loop.create_future()
        self.opened: asyncio.Future[int] = self.loop.create_future()  # the session's channel
        self.channel = -1
        self.error: str | None = None
        self._attaches: dict[int, asyncio.Future[LinkAttached]] = {}
        self._credit_waiters: dict[int, asyncio.Future[None]] = {}
        self._transport_writable = True
        self._deadline = Deadline(self.loop, self._tick)
        self.on_message: Callable[[MessageReceived], None] | None = None
        self.on_disposition: Callable[[DispositionReceived], None] | None = None
        self.on_credit: Callable[[int, int], None] | None = None
        self.on_flow: Callable[[], None] | None = None
        self.on_read: Callable[[], None] | None = None
        self.on_detach: Callable[[int, str], None] | None = None

    @property
    def writable(self) -> bool:
        return self._transport_writable

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast("asyncio.Transport", transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER)
        self.machine.initiate()
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(f"connection lost: {exc}" if exc else "connection closed by the peer")
        self._deadline.cancel()

    def pause_writing(self) -> None:
        self._transport_writable = False
        if self.on_flow is not None:
            self.on_flow()

    def resume_writing(self) -> None:
        self._transport_writable = True
        if self.on_flow is not None:
            self.on_flow()

    def data_received(self, data: bytes) -> None:
        events = self.machine.receive_data(data, self.loop.time())
        try:
            for event in events:
                self._event(event)
            if self.on_read is not None:
                self.on_read()
        except LinkError as exc:
            self._fail(exc.reason)
        self.flush()

    def flush(self) -> None:
        pieces = self.machine.pieces_to_send(self.loop.time())
        transport = self.transport
        if pieces and transport is not None and not transport.is_closing():
            transport.writelines(pieces)
        self._rearm()

    def pause_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    # -- events -----------------------------------------------------------------------------

    def _event(self, event: Event) -> None:
        kind = type(event)
        if kind is MessageReceived:
            if self.on_message is not None:
                self.on_message(cast("MessageReceived", event))
        elif kind is DispositionReceived:
            if self.on_disposition is not None:
                self.on_disposition(cast("DispositionReceived", event))
        elif isinstance(event, CreditGranted):
            waiter = self._credit_waiters.pop(event.handle, None)
            if waiter is not None and not waiter.done() and event.credit > 0:
                waiter.set_result(None)
            if self.on_credit is not None:
                self.on_credit(event.handle, event.credit)
        elif isinstance(event, ConnectionOpened):
            self.machine.begin()
        elif isinstance(event, SessionBegun):
            self.channel = event.channel
            if not self.opened.done():
                self.opened.set_result(event.channel)
        elif isinstance(event, LinkAttached):
            waiter_a = self._attaches.get(event.handle)
            if waiter_a is not None and not waiter_a.done():
                # Refused: the peer's attach has no terminus on its side (the source for our
                # receiver, the target for our sender); the detach that follows says why.
                ours = event.source if event.role == Role.RECEIVER else event.target
                if ours is None:
                    return
                del self._attaches[event.handle]
                waiter_a.set_result(event)
        elif isinstance(event, LinkDetached):
            reason = (
                f"link detached by the peer: {_error_text(event.error)}"
                if event.error is not None
                else "link detached by the peer"
            )
            waiter_a = self._attaches.pop(event.handle, None)
            if waiter_a is not None and not waiter_a.done():
                waiter_a.set_exception(LinkError(reason))
            elif not event.local and self.on_detach is not None:
                self.on_detach(event.handle, reason)
        elif isinstance(event, SessionEnded):
            if not event.local:
                why = _error_text(event.error) if event.error is not None else "ended"
                raise LinkError(f"session ended by the peer: {why}")
        elif isinstance(event, ConnectionClosed):
            why = _error_text(event.error) if event.error is not None else "closed"
            self._fail(f"connection closed: {why}" if not event.local else f"closed: {why}")

    def _fail(self, reason: str) -> None:
        if self.error is not None:
            return
        self.error = reason
        error = LinkError(reason)
        waiters: list[asyncio.Future[Any]] = [
            *self._attaches.values(),
            *self._credit_waiters.values(),
            self.opened,
        ]
        for waiter in waiters:
            if not waiter.done():
                waiter.set_exception(error)
        self._attaches.clear()
        self._credit_waiters.clear()
        if not self.closed.done():
            self.closed.set_result(reason)
        if self.transport is not None:
            with contextlib.suppress(Exception):
                pieces = self.machine.pieces_to_send(self.loop.time())
                if pieces and not self.transport.is_closing():
                    self.transport.writelines(pieces)
            self.transport.close()

    def _rearm(self) -> None:
        self._deadline.arm(self.machine.get_timer())

    def _tick(self) -> None:
        if self.error is not None:
            return
        for event in self.machine.handle_timer(self.loop.time()):
            with contextlib.suppress(LinkError):
                self._event(event)
        self.flush()

    # -- links ------------------------------------------------------------------------------

    async def attach_receiver(
        self, name: str, address: str, *, settled: bool, within: float = 30.0
    ) -> int:
        """A receiving link from ``address`` (no credit yet: :meth:`grant`)."""
        handle = self.machine.attach(
            self.channel,
            name,
            Role.RECEIVER,
            source=Source(address=address),
            target=Target(),
            snd_settle_mode=SenderSettleMode.SETTLED if settled else SenderSettleMode.UNSETTLED,
            rcv_settle_mode=ReceiverSettleMode.FIRST,
        )
        await self._attached(handle, within)
        return handle

    async def attach_sender(
        self, name: str, address: str, *, settled: bool, within: float = 30.0
    ) -> int:
        """A sending link to ``address``, returned once the peer has given it credit."""
        handle = self.machine.attach(
            self.channel,
            name,
            Role.SENDER,
            source=Source(),
            target=Target(address=address),
            snd_settle_mode=SenderSettleMode.SETTLED if settled else SenderSettleMode.UNSETTLED,
            rcv_settle_mode=ReceiverSettleMode.FIRST,
        )
        credit: asyncio.Future[None] = self.loop.create_future()
        self._credit_waiters[handle] = credit
        await self._attached(handle, within)
        async with asyncio.timeout(within):
            await credit
        return handle

    async def _attached(self, handle: int, within: float) -> LinkAttached:
        waiter: asyncio.Future[LinkAttached] = self.loop.create_future()
        self._attaches[handle] = waiter
        self.flush()
        async with asyncio.timeout(within):
            return await waiter

    def credit(self, handle: int) -> int:
        return self.machine.credit(self.channel, handle)

    def grant(self, handle: int, credit: int) -> None:
        if self.error is None:
            self.machine.grant_credit(self.channel, handle, credit)

    def send(self, handle: int, payload: bytes, *, settled: bool, tag: bytes | None = None) -> int:
        """One transfer (the link must have credit); returns its delivery-id."""
        return self.machine.send_transfer(
            self.channel, handle, payload, settled=settled, delivery_tag=tag
        )

    def settle(self, first: int, last: int, state: Value = ACCEPTED) -> None:
        """Settle received deliveries ``first``..``last`` with ``state``."""
        if self.error is None:
            self.machine.settle(self.channel, first, last, role=Role.RECEIVER, state=state)

    async def close(self, within: float = 10.0) -> None:
        transport = self.transport
        if transport is None:
            return
        if self.error is None:
            with contextlib.suppress(Exception):
                self.machine.close()
                self.flush()
                async with asyncio.timeout(within):
                    await asyncio.shield(self.closed)
        self._fail("closed")
        transport.close()


async def open_connection10(
    endpoint: Endpoint, name: str, local: LocalConnector | None = None
) -> Connection10:
    """Connect (SASL as the URI says), open, and begin one session."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(endpoint.connection_timeout):
            if endpoint.local:
                if local is None:
                    raise LinkError("a URI without a host needs this broker (none is running)")
                sock, label = local.connect("amqp10", endpoint.username, name)
                _t, conn = await loop.create_connection(
                    lambda: Connection10(endpoint, name), sock=sock
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
                    lambda: Connection10(endpoint, name),
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
        raise LinkError(f"connection to {endpoint.safe_uri} timed out") from None
    except ssl.SSLError as exc:
        raise LinkError(f"TLS error with {endpoint.safe_uri}: {exc.reason or exc}") from None
    except OSError as exc:
        if isinstance(exc, ConnectionRefusedError):
            raise LinkError("connection to target host was refused (ECONNREFUSED)") from None
        raise LinkError(f"cannot connect to {endpoint.safe_uri}: {exc.strerror or exc}") from None
