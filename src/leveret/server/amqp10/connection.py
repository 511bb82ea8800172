"""The broker's AMQP 1.0 front end: the 1.0 connection machine (``protocol/amqp10``) given
its meaning in the broker core, with the surface ``server/frontend.py`` asks of a front end.

- SASL: PLAIN with the broker's users, EXTERNAL with the TLS client certificate's identity,
  ANONYMOUS when ``anonymous_user`` is set (``auth/authn.py`` decides, as for 0-9-1; a
  refusal is answered after its delay).
- The virtual host comes from ``open``'s hostname as RabbitMQ 4 reads it: ``vhost:NAME``
  names it; another hostname is the vhost when one has that name, else ``/``. A user
  without access to it is closed with ``amqp:unauthorized-access``, one over a connection
  limit with ``amqp:resource-limit-exceeded`` (``Access.open``). What the
  user may do there is the connection's ``Guard`` (``server/guard.py``), asked by the
  sessions, links and the management node before the core acts; a session counts as a
  channel against the user's channel limit.
- Sessions (``session.py``) and their links; the machine does windows, credit, frames.
- Output: every frame the machine queued goes out with one ``writelines`` per turn; past
  256 KiB of queued transfers the connection takes no more deliveries until flushed (as the
  0-9-1 front end does).
- Fairness: input is handed to the machine ``TURN_BYTES`` at a time (a paced publisher's
  connection ``PACED_TURN_BYTES``), the rest waits for the next turn (``pending``), so one
  busy publisher cannot starve the other connections of the loop.
- Timers: heartbeats and the idle time-out are the machine's (``get_timer``/
  ``handle_timer``), driven by the adapter's ``tick``; so is the 10 s handshake time-out.

Sans-IO like the machine; ``server/connection.py`` is its asyncio adapter.
"""

from __future__ import annotations

import logging
import platform
import socket
from typing import TYPE_CHECKING, Final, cast

from leveret import __version__
from leveret.auth import authn
from leveret.auth.access import Access
from leveret.errors import AMQPError
from leveret.protocol import sasl
from leveret.protocol.amqp091.connection import DEFAULT_LIMITS, HANDSHAKE_TIMEOUT
from leveret.protocol.amqp10 import (
    Connection,
    ConnectionClosed,
    ConnectionConfig,
    ConnectionOpened,
    CreditGranted,
    DispositionReceived,
    Error,
    LinkAttachRequested,
    LinkDetached,
    MessageReceived,
    SaslAuthRequested,
    SessionBegun,
    SessionEnded,
    Side,
    Symbol,
)
from leveret.server.amqp10.coordinator import CoordinatorLink
from leveret.server.amqp10.errors import error_for
from leveret.server.amqp10.links import IncomingLink, OutgoingLink, SelectorLink
from leveret.server.amqp10.management import ManagementNode
from leveret.server.amqp10.session import Session
from leveret.server.amqp10.session_core import ConnectionCore
from leveret.server.amqp10.transactions import Transactions
from leveret.server.guard import Guard

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.auth.users import User, UserStore
    from leveret.model.broker import Broker
    from leveret.model.publisher import Publisher
    from leveret.protocol.amqp091.connection import Limits
    from leveret.protocol.amqp10 import Event

log = logging.getLogger("leveret.amqp10")

__all__ = ["PACED_TURN_BYTES", "TURN_BYTES", "AMQP10Connection"]

TURN_BYTES: Final = 256 * 1024
PACED_TURN_BYTES: Final = 16 * 1024
OUTPUT_HIGH_WATER = 256 * 1024
# The RabbitMQ version whose AMQP 1.0 behaviour this front end follows.
RABBITMQ_DIALECT = "4.0.0"


class AMQP10Connection(ConnectionCore):
    """One client connection speaking AMQP 1.0 to the broker, without I/O."""

    def __init__(
        self,
        broker: Broker,
        users: UserStore,
        *,
        peer: str,
        loopback: bool,
        limits: Limits = DEFAULT_LIMITS,
        now: float = 0.0,
        certificate_identity: str | None = None,
    ) -> None:
        self.broker = broker
        self.users = users
        self.peer = peer
        self.loopback = loopback
        self.certificate_identity = certificate_identity
        mechanisms = tuple(
            m
            for m in authn.mechanisms(users, certificate_identity=certificate_identity)
            if m != sasl.AMQPLAIN
        )
        self.machine = Connection(
            ConnectionConfig(
                side=Side.SERVER,
                container_id=f"leveret@{socket.gethostname()}",
                max_frame_size=max(limits.frame_max, 4096),
                channel_max=limits.channel_max,
                idle_time_out=limits.heartbeat * 1000,
                sasl_mechanisms=mechanisms,
                # RabbitMQ's own 1.0 clients refuse a server that does not call itself
                # RabbitMQ 4 or later: Leveret speaks RabbitMQ 4's 1.0 dialect (addresses, the
                # management node), so it says so, and names itself beside it.
                properties={
                    Symbol("product"): "RabbitMQ",
                    Symbol("version"): RABBITMQ_DIALECT,
                    Symbol("leveret-version"): __version__,
                    Symbol("platform"): f"Python {platform.python_version()} (Leveret)",
                },
                offered_capabilities=("ANONYMOUS-RELAY",),
            )
        )
        # FrontEnd's surface (server/frontend.py).
        self.on_output: Callable[[], None] | None = None
        self.client = None
        self.user: User | None = None
        self.access: Access | None = None
        self.guard = None
        self.transactions = None
        self.published = False
        self.paced = False
        self.blocked = False
        self.heartbeat = 0
        self.should_close_transport = False
        self.close_reason = ""
        self.sessions: dict[int, Session] = {}
        self._created = now
        self._inbox = bytearray()
        self._in_receive = False
        self._refuse_at: float | None = None
        self._out_size = 0
        self._out_full = False
        self._transport_paused = False
        self._confirming: set[Publisher] = set()
        self._opened = False

    # -- FrontEnd: input -----------------------------------------------------------------

    @property
    def pending(self) -> bool:
        return bool(self._inbox) and not self.should_close_transport

    def data_received(self, data: bytes, now: float) -> None:
        if self.should_close_transport:
            return
        self._inbox += data
        self.run_turn(now)

    def run_turn(self, now: float | None = None) -> None:
        """Hand the machine up to one turn's share of the input, then act on its events."""
        if now is None:
            now = self.broker.timers.now
        self.broker.timers.now = now
        inbox = self._inbox
        share = PACED_TURN_BYTES if self.paced else TURN_BYTES
        if len(inbox) <= share:
            chunk = bytes(inbox)
            inbox.clear()
        else:
            chunk = bytes(inbox[:share])
            del inbox[:share]
        self._in_receive = True
        try:
            try:
                self._handle(self.machine.receive_data(chunk, now), now)
            except Exception:
                # A bug of ours must cost this connection, never the broker.
                log.exception("internal error on AMQP 1.0 connection %s", self.peer)
                self.machine.close(
                    Error(condition="amqp:internal-error", description="see the broker log")
                )
                self._release()
            self._turn_done()
        finally:
            self._in_receive = False

    def _turn_done(self) -> None:
        paced = False
        for publisher in self._confirming:
            publisher.flush_confirms()
            if publisher.feeds_backlog:
                publisher.feeds_backlog = False
                paced = True
        self._confirming.clear()
        self.paced = paced
        if self.machine.closed:
            self.should_close_transport = True
            self._inbox.clear()

    # -- events --------------------------------------------------------------------------

    def _handle(self, events: list[Event], now: float) -> None:
        for event in events:
            kind = type(event)
            if kind is MessageReceived:
                event = cast("MessageReceived", event)
                session = self.sessions.get(event.channel)
                link = None if session is None else session.links.get(event.handle)
                if isinstance(link, (IncomingLink, ManagementNode, CoordinatorLink)):
                    link.receive(event)
            elif kind is DispositionReceived:
                event = cast("DispositionReceived", event)
                session = self.sessions.get(event.channel)
                if session is not None:
                    session.disposition(event)
            elif kind is CreditGranted:
                event = cast("CreditGranted", event)
                session = self.sessions.get(event.channel)
                link = None if session is None else session.links.get(event.handle)
                if isinstance(link, (OutgoingLink, SelectorLink, ManagementNode)):
                    link.credit_granted(event)
            elif kind is LinkAttachRequested:
                event = cast("LinkAttachRequested", event)
                session = self.sessions.get(event.channel)
                if session is not None:
                    session.attach(event)
            elif kind is LinkDetached:
                event = cast("LinkDetached", event)
                session = self.sessions.get(event.channel)
                if session is not None:
                    session.detached(event.handle)
            elif kind is SessionBegun:
                event = cast("SessionBegun", event)
                self._begin(event.channel)
            elif kind is SessionEnded:
                event = cast("SessionEnded", event)
                self._end(event.channel)
            elif kind is SaslAuthRequested:
                self._sasl(cast("SaslAuthRequested", event), now)
            elif kind is ConnectionOpened:
                self._open(cast("ConnectionOpened", event))
            elif kind is ConnectionClosed:
                event = cast("ConnectionClosed", event)
                if event.error is not None:
                    self.close_reason = f"{event.error.condition}: {event.error.description}"
                self._release()

    def _sasl(self, event: SaslAuthRequested, now: float) -> None:
        mechanism = event.mechanism
        if mechanism == sasl.PLAIN:
            response = sasl.plain_response(
                event.username or "", event.password or "", event.authzid or ""
            )
        elif mechanism == sasl.EXTERNAL:
            response = sasl.external_response(event.authzid or "")
        else:
            response = sasl.anonymous_response(event.trace or "")
        login = authn.login(
            self.users,
            mechanism,
            response,
            loopback=self.loopback,
            peer=self.peer,
            certificate_identity=self.certificate_identity,
        )
        if login.ok:
            self.user = login.user
            self.machine.answer_sasl(True)
            self._handle(self.machine.receive_data(b"", now), now)
        else:
            self.close_reason = f"{mechanism} login refused"
            self._refuse_at = now + login.delay

    def _open(self, event: ConnectionOpened) -> None:
        user = self.user
        if user is None:
            self.machine.close(Error(condition="amqp:unauthorized-access", description="no login"))
            return
        hostname = event.hostname or ""
        if hostname.startswith("vhost:"):
            name = hostname[len("vhost:") :]
        else:
            name = hostname if hostname in self.broker.vhosts else "/"
        vhost = self.broker.vhosts.get(name)
        if vhost is None:
            self.close_reason = f"vhost {name} not found"
            self.machine.close(
                Error(condition="amqp:not-found", description=f"vhost '{name}' not found")
            )
            return
        if name not in user.vhosts:
            self.close_reason = f"access to vhost '{name}' refused"
            self.machine.close(
                Error(
                    condition="amqp:unauthorized-access",
                    description=f"access to vhost '{name}' refused for user '{user.name}'",
                )
            )
            return
        try:
            # The connection limits (node, vhost, user); counted until released.
            access = Access.open(self.users, user, name, peer=self.peer)
        except AMQPError as exc:
            self.close_reason = exc.reply_text
            self.machine.close(
                Error(condition="amqp:resource-limit-exceeded", description=exc.reply_text)
            )
            return
        self.access = access
        self.guard = Guard(access, vhost)
        self.transactions = Transactions(vhost)
        self.client = self.broker.connect(vhost, user.name, f"{self.peer} ({event.container_id})")
        self.client.writable = self.writable
        self._opened = True
        peer_idle = event.idle_time_out or 0
        if peer_idle:
            self.heartbeat = max(1, peer_idle // 2000)

    def _begin(self, channel: int) -> None:
        if self.client is None or self.access is None:
            return
        try:
            self.access.open_channel()  # the user's channel limit counts sessions
        except AMQPError as exc:
            self.machine.end(channel, error_for(exc))
            return
        session = Session(self, channel)
        self.sessions[channel] = session
        self.client.attach(channel, session)

    def _end(self, channel: int) -> None:
        session = self.sessions.pop(channel, None)
        if session is not None and self.access is not None:
            self.access.close_channel()
        if session is not None and self.client is not None:
            self.client.close_session(channel)
        elif session is not None:
            session.close()

    # -- what sessions and links ask ------------------------------------------------------

    def send_transfer(self, channel: int, handle: int, payload: bytes, settled: bool) -> int:
        delivery_id = self.machine.send_transfer(channel, handle, payload, settled=settled)
        self._out_size += len(payload)
        if self._out_size > OUTPUT_HIGH_WATER and not self._out_full:
            self._out_full = True
            self._update_writable()
        self.wrote()
        return delivery_id

    def wrote(self) -> None:
        if not self._in_receive and self.on_output is not None:
            self.on_output()

    def published_on(self, publisher: Publisher) -> None:
        self.published = True
        self._confirming.add(publisher)

    # -- FrontEnd: output and flow -------------------------------------------------------

    def take_output(self, now: float) -> list[bytes]:
        out = self.machine.pieces_to_send(now)
        self._out_size = 0
        if self._out_full:
            self._out_full = False
            self._update_writable()
        if self.machine.closed:
            self.should_close_transport = True
        return cast("list[bytes]", out)

    @property
    def writable(self) -> bool:
        return not (self._transport_paused or self._out_full)

    def set_writable(self, writable: bool) -> None:
        self._transport_paused = not writable
        self._update_writable()

    def _update_writable(self) -> None:
        client = self.client
        writable = self.writable
        if client is not None and client.writable != writable:
            client.set_writable(writable)

    def block(self, reason: str) -> None:
        self.blocked = True

    def unblock(self, now: float) -> None:
        self.blocked = False

    # -- FrontEnd: timers and closing ----------------------------------------------------

    def next_tick(self, now: float) -> float | None:
        """When ``tick`` next has something to do: the machine's timer (heartbeat, idle
        timeout, close timeout), a refused login's answer, the handshake timeout."""
        due = self.machine.get_timer()
        refuse_at = self._refuse_at
        if refuse_at is not None:
            return refuse_at if due is None else min(due, refuse_at)
        if not self._opened:
            # tick tests the handshake timeout with ">": just past it.
            timeout = self._created + HANDSHAKE_TIMEOUT + 1e-3
            return timeout if due is None else min(due, timeout)
        return due

    def tick(self, now: float) -> None:
        machine = self.machine
        refuse_at = self._refuse_at
        if refuse_at is not None and now >= refuse_at:
            self._refuse_at = None
            machine.answer_sasl(False)
            self._handle(machine.receive_data(b"", now), now)
        elif not self._opened and refuse_at is None and now - self._created > HANDSHAKE_TIMEOUT:
            log.info("closing AMQP 1.0 connection %s: handshake timeout", self.peer)
            self.close_reason = "handshake timeout"
            self.should_close_transport = True
            self._release()
            return
        timer = machine.get_timer()
        if timer is not None and now >= timer:
            self._handle(machine.handle_timer(now), now)
        if machine.closed:
            self.should_close_transport = True
        self.wrote()

    def close(self, reply_code: int, reply_text: str, now: float) -> None:
        """Close from the server side (shutdown: amqp:connection:forced)."""
        condition = "amqp:connection:forced" if reply_code == 320 else "amqp:internal-error"
        self.close_reason = reply_text
        self.machine.close(Error(condition=condition, description=reply_text))
        self._release()
        if self.machine.closed:
            self.should_close_transport = True

    def connection_lost(self) -> None:
        self._release()

    def _release(self) -> None:
        client = self.client
        self.client = None
        for channel, session in list(self.sessions.items()):
            del self.sessions[channel]
            if client is None:
                session.close()
        if client is not None:
            client.close()
        transactions = self.transactions
        if transactions is not None:
            # After the sessions: their unsettled deliveries went back first.
            self.transactions = None
            transactions.close()
        access = self.access
        if access is not None:
            self.access = None
            access.close()
