"""The asyncio adapter for one client connection: socket bytes in, frames out.

The first bytes the client sends choose its front end (``frontend.py``: the protocol header
names it). From then on ``data_received`` feeds that sans-IO front end synchronously and
writes what it produced with one ``writelines`` per event-loop turn. Writes produced by
other connections (deliveries to this one's consumers) are flushed with one ``call_soon``
per turn. A full
transport buffer (``pause_writing``) stops deliveries to this connection until it drains.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, cast

from leveret.protocol.amqp091.connection import HANDSHAKE_TIMEOUT
from leveret.server.frontend import FrontEnd, FrontEndContext, FrontEndFactory, choose
from leveret.server.listeners import certificate_identity

if TYPE_CHECKING:
    from leveret.auth.users import UserStore
    from leveret.model.broker import Broker
    from leveret.protocol.amqp091.connection import Limits
    from leveret.server.flow import MemoryAlarm

log = logging.getLogger("leveret.connection")

# Seconds between ticks until the connection is open: a refused login is answered when its
# delay ends (auth.authn.FAILURE_DELAY), give or take this.
HANDSHAKE_TICK = 0.25


def _is_loopback(host: str) -> bool:
    return host.startswith("127.") or host in ("::1", "localhost") or host.startswith("::ffff:127.")


class ConnectionProtocol(asyncio.Protocol):
    """One accepted socket."""

    def __init__(
        self,
        broker: Broker,
        users: UserStore,
        limits: Limits,
        registry: set[ConnectionProtocol],
        alarm: MemoryAlarm,
        *,
        cert_login_from: str = "distinguished_name",
        front_end: FrontEndFactory | None = None,
    ) -> None:
        # A listener of one protocol (the stream port) names its front end; otherwise the
        # first bytes choose it.
        self.front_end = front_end
        self.alarm = alarm
        # ssl_cert_login_from: which part of a client certificate names its user.
        self.cert_login_from = cert_login_from
        self._identity: str | None = None
        self.broker = broker
        self.users = users
        self.limits = limits
        self.registry = registry
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.amqp: FrontEnd | None = None
        # The first bytes, until they name the front end.
        self._head = b""
        self._loopback = False
        self._accepted = 0.0
        self._closed_in_handshake = False
        self.peer = "?"
        self._flush_scheduled = False
        self._turn_scheduled = False
        self._reading = True
        self._timer: asyncio.TimerHandle | None = None
        self.closed = asyncio.Event()
        # Management counters (octets and reads/writes), sampled on a timer; wall clock
        # of the accept for connected_at.
        self.recv_oct = 0
        self.recv_cnt = 0
        self.send_oct = 0
        self.send_cnt = 0
        self.connected_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        transport = cast("asyncio.Transport", transport)
        self.transport = transport
        peername = transport.get_extra_info("peername")
        host, port = (peername[0], peername[1]) if peername else ("?", 0)
        self.peer = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._loopback = _is_loopback(host)
        # Python fills peercert only for a certificate it verified (amqps with verify_peer).
        self._identity = certificate_identity(
            transport.get_extra_info("peercert"), self.cert_login_from
        )
        self._accepted = self.loop.time()
        self.connected_at = time.time()
        self.registry.add(self)
        log.info("accepted connection from %s", self.peer)
        self._arm_timer()

    def data_received(self, data: bytes) -> None:
        self.recv_oct += len(data)
        self.recv_cnt += 1
        amqp = self.amqp
        if amqp is None:
            amqp = self._choose_front_end(data)
            if amqp is None:
                return
            data, self._head = self._head, b""
        amqp.data_received(data, self.loop.time())
        self._after_turn(amqp)

    def _choose_front_end(self, data: bytes) -> FrontEnd | None:
        """Collect the first bytes until they name the protocol; then make its front end."""
        self._head += data
        factory = self.front_end or choose(self._head)
        if factory is None:
            return None
        amqp = self.amqp = factory(
            FrontEndContext(
                self.broker,
                self.users,
                self.limits,
                self.peer,
                self._loopback,
                self._accepted,
                self._identity,
            )
        )
        amqp.on_output = self._schedule_flush
        return amqp

    def _after_turn(self, amqp: FrontEnd) -> None:
        if amqp.published:
            amqp.published = False
            self.alarm.published(self)
        elif self.alarm.active:
            self.alarm.check()
        self._flush()
        if (amqp.pending or amqp.paced) and not self._turn_scheduled:
            # More frames than one turn's share, or a publisher feeding a queue whose
            # consumers fall behind: read nothing more until the next loop iteration, and
            # let the other connections run first.
            self._turn_scheduled = True
            self._set_reading()
            self.loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._turn_scheduled = False
        amqp = self.amqp
        if amqp is None:
            return
        self.broker.timers.now = self.loop.time()
        amqp.run_turn()
        self._after_turn(amqp)
        self._set_reading()

    def _set_reading(self) -> None:
        """Read unless a turn is waiting or the memory alarm blocked this connection."""
        transport, amqp = self.transport, self.amqp
        if transport is None or amqp is None or transport.is_closing():
            return
        want = not (self._turn_scheduled or amqp.blocked)
        if want != self._reading:
            self._reading = want
            if want:
                transport.resume_reading()
            else:
                transport.pause_reading()

    def block(self, reason: str) -> None:
        if self.amqp is not None and self.transport is not None:
            self.amqp.block(reason)
            self._set_reading()
            self._flush()

    def unblock(self) -> None:
        if self.amqp is not None and self.transport is not None:
            self.amqp.unblock(self.loop.time())
            self._set_reading()
            self._flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        amqp, transport = self.amqp, self.transport
        if amqp is None or transport is None:
            return
        out = amqp.take_output(self.loop.time())
        if out and not transport.is_closing():
            transport.writelines(out)
            self.send_cnt += 1
            self.send_oct += sum(map(len, out))
        if amqp.should_close_transport and not transport.is_closing():
            transport.close()

    def _arm_timer(self) -> None:
        amqp = self.amqp
        # Tick often enough for heartbeats (half an interval) and close handshakes.
        interval = amqp.heartbeat / 2 if amqp is not None and amqp.heartbeat else 1.0
        if amqp is None or amqp.client is None:
            interval = HANDSHAKE_TICK
        self._timer = self.loop.call_later(min(interval, 1.0), self._on_timer)

    def _on_timer(self) -> None:
        if self.transport is None:
            return
        amqp = self.amqp
        if amqp is None:
            # No complete protocol header yet: the handshake timeout applies all the same.
            if self.loop.time() - self._accepted > HANDSHAKE_TIMEOUT:
                log.info("closing connection %s: handshake timeout", self.peer)
                self._closed_in_handshake = True
                self.transport.close()
                return
            self._arm_timer()
            return
        amqp.tick(self.loop.time())
        self.alarm.check()
        self._flush()
        self._arm_timer()

    def pause_writing(self) -> None:
        if self.amqp is not None:
            self.amqp.set_writable(False)

    def resume_writing(self) -> None:
        if self.amqp is not None:
            self.amqp.set_writable(True)
            self._flush()

    def shutdown(self, reason: str) -> None:
        """Close with 320 CONNECTION_FORCED, as RabbitMQ does on shutdown."""
        if self.amqp is not None:
            self.amqp.close(320, reason, self.loop.time())
            self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        amqp = self.amqp
        reason = "client closed" if exc is None else str(exc)
        if amqp is not None:
            reason = amqp.close_reason or reason
            amqp.connection_lost()
        elif self._closed_in_handshake:
            reason = "handshake timeout"
        log.info("closed connection %s (%s)", self.peer, reason)
        self.amqp = None
        self.transport = None
        self.registry.discard(self)
        self.alarm.forget(self)
        self.closed.set()
