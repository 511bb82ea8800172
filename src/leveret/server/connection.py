"""The asyncio adapter for one client connection: socket bytes in, frames out.

The first bytes the client sends choose its front end (``frontend.py``: the protocol header
names it). From then on ``data_received`` feeds that sans-IO front end synchronously and
writes what it produced with one ``writelines`` per event-loop turn. Writes produced by
other connections (deliveries to this one's consumers) are flushed with one ``call_soon``
per turn. A full
transport buffer (``pause_writing``) stops deliveries to this connection until it drains.

Timers: one loop timer per connection, armed for the front end's next deadline
(``frontend_contract.tick_schedule``: a heartbeat to send, a silent peer to drop, a close or
handshake timeout, a refused login's delay) rather than at a fixed rate, so an idle
connection without heartbeats costs no wake-ups at all (and an advance of the test clock,
``testing/clock.py``, skips straight to the deadlines). Whatever the front end does only
moves its deadline later, except a change that also writes (a close, the connection
opening), so the schedule is looked at again after each flush and moved only earlier.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Final, cast

from leveret.protocol.amqp091.connection import HANDSHAKE_TIMEOUT
from leveret.server.frontend import FrontEnd, FrontEndContext, FrontEndFactory, choose
from leveret.server.frontend_contract import TICK_EVERY, tick_schedule
from leveret.server.listeners import certificate_identity

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.auth.users import UserStore
    from leveret.model.broker import Broker
    from leveret.protocol.amqp091.connection import Limits
    from leveret.server.memory_alarm import MemoryAlarm

log = logging.getLogger("leveret.connection")

# The least time between two ticks: a front end whose deadline did not move after its tick
# (a clock read a hair early) is ticked again this much later, not in a busy loop.
MIN_TICK: Final = 1e-3


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
        local_identity: str | None = None,
        local_peer: str = "local",
    ) -> None:
        # A listener of one protocol (the stream port) names its front end; otherwise the
        # first bytes choose it.
        self.front_end = front_end
        self.alarm = alarm
        # ssl_cert_login_from: which part of a client certificate names its user.
        self.cert_login_from = cert_login_from
        self._identity: str | None = None
        # An in-process peer on one end of a socket pair (a shovel's or federation link's
        # side on this broker, leveret.links): it logs in with EXTERNAL as this user.
        self.local_identity = local_identity
        self.local_peer = local_peer
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
        # When the timer is armed for (None: not armed), and the front end's schedule.
        self._due: float | None = None
        self._next_tick: Callable[[float], float | None] | None = None
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
        if self.local_identity is not None:
            self.peer = self.local_peer
            self._loopback = True
            self._identity = self.local_identity
        else:
            peername = transport.get_extra_info("peername")
            host, port = (peername[0], peername[1]) if peername else ("?", 0)
            self.peer = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            self._loopback = _is_loopback(host)
            # Python fills peercert only for a certificate it verified (amqps, verify_peer).
            self._identity = certificate_identity(
                transport.get_extra_info("peercert"), self.cert_login_from
            )
        self._accepted = self.loop.time()
        self.connected_at = time.time()
        self.registry.add(self)
        log.info("accepted connection from %s", self.peer)
        # No protocol header yet: the handshake timeout applies all the same.
        self._arm(self._accepted + HANDSHAKE_TIMEOUT + MIN_TICK)

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
        self._next_tick = tick_schedule(amqp)
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
            # Look at the alarm every second while blocked (_on_timer): queues may also
            # shrink without any connection's traffic (TTLs).
            self._arm(self.loop.time() + TICK_EVERY)

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
        next_tick = self._next_tick
        if next_tick is not None and not transport.is_closing():
            now = self.loop.time()
            due = next_tick(now)
            if due is not None:
                self._arm(max(due, now + MIN_TICK))

    def _arm(self, due: float) -> None:
        """Tick at ``due`` unless the timer is armed for then or earlier already."""
        armed = self._due
        if armed is not None and armed <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._due = due
        self._timer = self.loop.call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = self._due = None
        if self.transport is None:
            return
        now = self.loop.time()
        amqp = self.amqp
        if amqp is None:
            if now - self._accepted > HANDSHAKE_TIMEOUT:
                log.info("closing connection %s: handshake timeout", self.peer)
                self._closed_in_handshake = True
                self.transport.close()
                return
            self._arm(max(self._accepted + HANDSHAKE_TIMEOUT, now) + MIN_TICK)
            return
        amqp.tick(now)
        alarm = self.alarm
        alarm.check()
        self._flush()  # arms the timer for the front end's next deadline
        if alarm.active and amqp.blocked and self.transport is not None:
            self._arm(now + TICK_EVERY)

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
            self._timer = self._due = None
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
