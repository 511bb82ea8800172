"""The asyncio adapter for one client connection: socket bytes in, frames out.

Each accepted socket gets a ``Shell`` (``server/shell/``: the connection's lifecycle,
sans-IO) at once; the first bytes the client sends choose its front end (``frontend.py``:
the protocol header names it), which the shell then drives. From then on ``data_received``
feeds the shell synchronously and writes what it produced with one ``writelines`` per
event-loop turn.

Large frames are read another way (issue 26, scenario f): after a read that brought one
(``Shell.wants_views``: 0-9-1's decoder saw a frame of 16 KiB or more), the
transport is handed a ``_ViewReader``, an ``asyncio.BufferedProtocol`` (uvloop supports
it), so that the loop reads the socket into the loop's one read buffer (``read_buffer.py``)
and the decoder copies each frame out of it once (``Shell.view_received``), where uvloop
made a ``bytes`` of each read (a second copy of every 64 KiB body). A read of 16 KiB of
small frames, or eight small reads in a row (``FrameDecoder.wants_views``), hands the
transport back to the adapter itself: small messages keep the plain protocol, whose read
costs uvloop no call for a buffer (about 1,400 instructions less a lone publish's read).
A TLS transport is not switched. Writes produced by other
connections (deliveries to this one's consumers) are flushed at the loop iteration's end,
or after ``waiting_writes.READS`` more reads of other sockets if that comes first
(``waiting_writes.py``: a burst of a thousand publishes read in one iteration). A full
transport buffer (``pause_writing``) stops deliveries to this connection, and reading it,
until it drains (``resume_writing`` starts both again at once: a connection without
heartbeats, such as a peer node's link, has no later tick that would).

Reading stops while a turn of this connection waits (more input than one turn's share, or
a paced publisher), while the memory alarm blocks it, and while a deferral holds more input
than its bound (``Shell.reading``). A publisher whose last turn fed a queue far behind
(``Shell.held``) is neither read nor run until that queue is no longer far behind, looked
at every ``HOLD_TICK`` (no wake-up path from the queue is needed), or for ``HOLD_MAX`` at
most: its socket buffer fills and its client blocks on write.

Timers: one loop timer per connection, armed for the shell's next deadline
(``Shell.next_deadline``: the handshake deadline, a heartbeat to send, a silent peer to
drop, a close time-out, a refused login's answer) rather than at a fixed rate, so an idle
connection without heartbeats costs no wake-ups at all (and an advance of the test clock,
``testing/clock.py``, skips straight to the deadlines). Whatever the connection does only
moves its deadline later, except a change that also writes (a close, the connection
opening), so the schedule is looked at again after each flush and moved only earlier. A
turn of a front end that says so (``quiet_turns``, 0-9-1) that wrote nothing, and in which
the shell moved none of its own deadlines, is not flushed at all (``Shell.idle_turn``): a
lone publish read from its own socket, a thousand of them at once in a burst (issue 26).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Final, cast

from leveret.server.frontend import choose
from leveret.server.heartbeat_phase import next_heartbeat_phase
from leveret.server.listeners import certificate_identity
from leveret.server.read_buffer import VIEW_READ, read_buffer
from leveret.server.shell.contract import ShellContext
from leveret.server.shell.shell import Shell
from leveret.server.waiting_writes import waiting_writes

if TYPE_CHECKING:
    from leveret.auth.users import UserStore
    from leveret.model.broker import Broker
    from leveret.protocol.amqp091.connection import Limits
    from leveret.server.memory_alarm import MemoryAlarm
    from leveret.server.shell.shell import FrontEndFactory

log = logging.getLogger("leveret.connection")

# The least time between two ticks: a connection whose deadline did not move after its tick
# (a clock read a hair early) is ticked again this much later, not in a busy loop.
MIN_TICK: Final = 1e-3
# How often a blocked connection looks at the memory alarm again: queues may also shrink
# without any connection's traffic (TTLs).
BLOCKED_TICK: Final = 1.0
# How often a publisher held for a queue far behind (``Shell.held``) looks at that queue
# again: about the time a consumer takes to drain a hundred messages, so the publisher's
# socket stands idle little longer than the backlog takes to shrink.
HOLD_TICK: Final = 1e-3


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
        # An in-process peer on one end of a socket pair (a shovel's or federation link's
        # side on this broker, leveret.links): it logs in with EXTERNAL as this user.
        self.local_identity = local_identity
        self.local_peer = local_peer
        self.broker = broker
        self.users = users
        self.limits = limits
        self.registry = registry
        self.loop = asyncio.get_running_loop()
        self.waiting = waiting_writes(self.loop)
        # The loop's read buffer and this connection's reader into it, while large frames
        # come (``_read_views``); whether the transport may be switched (not TLS).
        self._buffer = read_buffer(self.loop)
        self._viewer: _ViewReader | None = None
        self._views_ok = False
        self.transport: asyncio.Transport | None = None
        self.shell: Shell | None = None
        # The first bytes, until they name the front end.
        self._head = b""
        self.peer = "?"
        self._flush_scheduled = False
        self._turn_scheduled = False
        self._reading = True
        self._timer: asyncio.TimerHandle | None = None
        self._hold_timer: asyncio.TimerHandle | None = None
        # When the timer is armed for (None: not armed).
        self._due: float | None = None
        self.closed = asyncio.Event()
        # Wall clock of the accept (management's connected_at, and the listing's order).
        self.connected_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing it.
        transport = cast("asyncio.Transport", transport)
        self.transport = transport
        if self.local_identity is not None:
            self.peer = self.local_peer
            loopback = True
            identity: str | None = self.local_identity
        else:
            peername = transport.get_extra_info("peername")
            host, port = (peername[0], peername[1]) if peername else ("?", 0)
            self.peer = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            loopback = _is_loopback(host)
            # Python fills peercert only for a certificate it verified (amqps, verify_peer).
            identity = certificate_identity(
                transport.get_extra_info("peercert"), self.cert_login_from
            )
        now = self.loop.time()
        self.connected_at = time.time()
        shell = self.shell = Shell(
            ShellContext(
                self.broker,
                self.users,
                self.limits,
                self.peer,
                loopback,
                now,
                identity,
                next_heartbeat_phase(),
            )
        )
        shell.on_output = self._schedule_flush
        shell.on_ready = self._schedule_turn
        info = shell.info
        info.connected_at = self.connected_at
        local = transport.get_extra_info("sockname")
        if local and isinstance(local, tuple):
            info.host, info.port = local[0], local[1]
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            info.ssl = True
            info.ssl_protocol = ssl_object.version()
            cipher = ssl_object.cipher()
            info.ssl_cipher = cipher[0] if cipher else None
        # The SSL transports' buffered reads are not switched mid-stream here.
        self._views_ok = ssl_object is None
        self.registry.add(self)
        log.info("accepted connection from %s", self.peer)
        if self.front_end is not None:
            shell.attach(self.front_end)
        # No protocol header yet: the handshake deadline applies all the same.
        self._rearm(now)

    def data_received(self, data: bytes) -> None:
        shell = self.shell
        if shell is None:
            return
        if shell.front is None:
            self._head += data
            factory = choose(self._head)
            if factory is None:
                return  # counted when the whole header is handed on
            shell.attach(factory)
            data, self._head = self._head, b""
        # One clock read serves the turn and its flush: a burst of publishes, one on each
        # of a thousand sockets, pays every per-read cost a thousand times (issue 26).
        now = self.loop.time()
        shell.data_received(data, now)
        self._after_turn(shell, now)
        self.waiting.read()
        # A read shorter than a large frame cannot have brought one whole: one comparison
        # is all a small message's read pays for the switch.
        if len(data) >= VIEW_READ and self._views_ok and shell.wants_views():
            self._read_views(True)

    def view_read(self, nbytes: int) -> None:
        """The ``_ViewReader``'s read of ``nbytes`` into the loop's buffer."""
        shell = self.shell
        if shell is None:
            return
        now = self.loop.time()
        shell.view_received(self._buffer[:nbytes], now)
        self._after_turn(shell, now)
        self.waiting.read()
        if not shell.wants_views():
            self._read_views(False)

    def _read_views(self, views: bool) -> None:
        """Read the socket into the loop's buffer (``views``) or as ``bytes`` again."""
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if views:
            viewer = self._viewer
            if viewer is None:
                viewer = self._viewer = _ViewReader(self)
            transport.set_protocol(viewer)
        else:
            transport.set_protocol(self)

    def _after_turn(self, shell: Shell, now: float) -> None:
        if shell.published:
            shell.published = False
            self.alarm.published(self)
        elif self.alarm.active:
            self.alarm.check()
        # A turn that wrote nothing and moved no deadline earlier (a lone publish read from
        # its own socket) needs neither the transport nor the schedule: the timer stands as
        # the last flush armed it (or not, with no deadline), and a tick asks afresh.
        if not shell.idle_turn():
            self._flush_at(now)
        if shell.wants_turn:
            # More input than one turn's share, a paced publisher, or a deferral that
            # completed: read nothing more until the next loop iteration, and let the
            # other connections run first.
            self._schedule_turn()
        elif shell.held and self._hold_timer is None:
            self._hold_timer = self.loop.call_later(HOLD_TICK, self._end_hold)
        self._set_reading()

    def _end_hold(self) -> None:
        self._hold_timer = None
        shell = self.shell
        if shell is None or self.transport is None:
            return
        if not shell.release_hold(self.loop.time()):
            self._hold_timer = self.loop.call_later(HOLD_TICK, self._end_hold)
            return
        if shell.wants_turn:
            self._schedule_turn()
        self._set_reading()

    def _schedule_turn(self) -> None:
        if not self._turn_scheduled and self.transport is not None:
            self._turn_scheduled = True
            self._set_reading()
            self.loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._turn_scheduled = False
        shell = self.shell
        if shell is None or self.transport is None:
            return
        now = self.loop.time()
        shell.run_turn(now)
        self._after_turn(shell, now)

    def _set_reading(self) -> None:
        """Read unless a turn is waiting, the memory alarm blocked this connection, or a
        deferral holds as much input as it may."""
        transport, shell = self.transport, self.shell
        if transport is None or shell is None:
            return
        want = not self._turn_scheduled and shell.reading
        # Asked after every read: the transport only when there is a change to make.
        if want != self._reading and not transport.is_closing():
            self._reading = want
            if want:
                transport.resume_reading()
            else:
                transport.pause_reading()

    def block(self, reason: str) -> None:
        shell = self.shell
        if shell is not None and shell.front is not None and self.transport is not None:
            shell.block(reason)
            self._set_reading()
            self._flush()
            self._arm(self.loop.time() + BLOCKED_TICK)

    def unblock(self) -> None:
        shell = self.shell
        if shell is not None and shell.front is not None and self.transport is not None:
            shell.unblock(self.loop.time())
            if shell.wants_turn:
                # Input that waited on the alarm without stopping the reads (the link's
                # held publishes) has no read to bring its turn.
                self._schedule_turn()
            self._set_reading()
            self._flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.waiting.add(self._flush_waiting)

    def _flush_waiting(self) -> None:
        # Flushed meanwhile by a turn of its own (or closed): nothing is waiting.
        if self._flush_scheduled:
            self._flush_at(self.loop.time())

    def _flush(self) -> None:
        self._flush_at(self.loop.time())

    def _flush_at(self, now: float) -> None:
        self._flush_scheduled = False
        shell, transport = self.shell, self.transport
        if shell is None or transport is None:
            return
        out = shell.take_output(now)
        if out:
            if transport.is_closing():
                return
            transport.writelines(out)
            # A write may find the peer gone (the transport closes at once).
            if transport.is_closing():
                return
        if shell.should_close_transport:
            transport.close()
            return
        self._rearm(now)

    def _rearm(self, now: float) -> None:
        shell = self.shell
        if shell is None:
            return
        due = shell.next_deadline(now)
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
        shell, transport = self.shell, self.transport
        if shell is None or transport is None:
            return
        now = self.loop.time()
        shell.tick(now)
        alarm = self.alarm
        alarm.check()
        self._flush_at(now)  # arms the timer for the shell's next deadline
        if shell.wants_turn:
            self._schedule_turn()
        self._set_reading()
        if alarm.active and shell.blocked and self.transport is not None:
            self._arm(now + BLOCKED_TICK)

    def pause_writing(self) -> None:
        if self.shell is not None:
            self.shell.set_writable(False)
            self._set_reading()

    def resume_writing(self) -> None:
        if self.shell is not None:
            self.shell.set_writable(True, self.loop.time())
            self._flush()
            # Reading stopped while the buffer was full (``Shell.reading``): it starts
            # again here, not at the next input or tick, which a connection without
            # heartbeats (a peer node's link) never has: it would stall for good.
            self._set_reading()

    def shutdown(self, reason: str) -> None:
        """Close with 320 CONNECTION_FORCED, as RabbitMQ does on shutdown."""
        shell = self.shell
        if shell is not None:
            shell.close(320, reason, self.loop.time())
            self._flush()
            if shell.front is None and self.transport is not None:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = self._due = None
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        shell = self.shell
        reason = "client closed" if exc is None else str(exc)
        if shell is not None:
            reason = shell.close_reason or reason
            shell.connection_lost(self.loop.time())
        log.info("closed connection %s (%s)", self.peer, reason)
        self.shell = None
        self.transport = None
        self._viewer = None
        self.registry.discard(self)
        self.alarm.forget(self)
        self.closed.set()


class _ViewReader(asyncio.BufferedProtocol):
    """A connection's protocol while large frames come: the loop reads its socket into the
    loop's one buffer, and the connection decodes each read in place (``view_read``).
    Everything else the transport tells a protocol goes to the connection as it is."""

    def __init__(self, connection: ConnectionProtocol) -> None:
        self.connection = connection

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.connection._buffer

    def buffer_updated(self, nbytes: int) -> None:
        self.connection.view_read(nbytes)

    def eof_received(self) -> bool | None:
        return self.connection.eof_received()

    def pause_writing(self) -> None:
        self.connection.pause_writing()

    def resume_writing(self) -> None:
        self.connection.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connection.connection_lost(exc)
