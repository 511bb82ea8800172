"""The broker's AMQP 1.0 front end: the 1.0 connection machine (``protocol/amqp10``) given
its meaning in the broker core, as a ``FrontEnd`` of the connection's shell
(``server/shell/``, which owns the lifecycle every protocol shares).

- SASL: PLAIN with the broker's users, EXTERNAL with the TLS client certificate's identity,
  ANONYMOUS when ``anonymous_user`` is set (``Shell.login``, as for 0-9-1; a refusal is
  answered after its delay, ``Shell.refuse``).
- The virtual host comes from ``open``'s hostname as RabbitMQ 4 reads it: ``vhost:NAME``
  names it; another hostname is the vhost when one has that name, else ``/``
  (``Shell.open_vhost``). An unknown vhost is closed with ``amqp:not-found``, a user
  without access to it with ``amqp:unauthorized-access``, one over a connection limit with
  ``amqp:resource-limit-exceeded``. What the user may do there is the connection's
  ``Guard`` (``server/guard.py``), asked by the sessions, links and the management node
  before the core acts; a session counts as a channel against the user's channel limit.
- Sessions (``session.py``) and their links; the machine does windows, credit, frames.
- Turns: input is handed to the machine ``TURN_BYTES`` at a time (a paced publisher's
  connection ``PACED_TURN_BYTES``); a request the broker answers (open, begin, a peer's
  attach) ends the machine's pass, so the frames after it see the answer.
- Output: the machine keeps its frames; transfers are counted in the shell's ``Output``
  against its high-water mark.
- Timers: heartbeats and the idle time-out are the machine's (``get_timer``/
  ``handle_timer``); the handshake deadline is the shell's.

Sans-IO like the machine.
"""

from __future__ import annotations

import logging
import platform
import socket
from functools import partial
from typing import TYPE_CHECKING, Any, Final, cast

from leveret import __version__
from leveret.auth import authn
from leveret.auth.access import OpenRefused
from leveret.errors import AMQPError
from leveret.model.completion import every
from leveret.protocol import sasl
from leveret.protocol.amqp10 import (
    AMQP10Error,
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
from leveret.protocol.amqp10.errors import LocalProtocolError
from leveret.server.amqp10.coordinator import CoordinatorLink
from leveret.server.amqp10.errors import error_for
from leveret.server.amqp10.links import COPIES, CopyLink, IncomingLink, OutgoingLink, SelectorLink
from leveret.server.amqp10.management import ManagementNode
from leveret.server.amqp10.session import Session
from leveret.server.amqp10.session_core import ConnectionCore
from leveret.server.amqp10.transactions import Transactions
from leveret.server.shell.info import ChannelInfo

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.completion import Completion
    from leveret.model.consumer import Consumer
    from leveret.model.publisher import Publisher
    from leveret.protocol.amqp10 import Event
    from leveret.server.shell.shell import Shell

log = logging.getLogger("leveret.amqp10")

__all__ = ["PACED_TURN_BYTES", "TURN_BYTES", "AMQP10Connection"]

TURN_BYTES: Final = 256 * 1024
PACED_TURN_BYTES: Final = 16 * 1024
OUTPUT_HIGH_WATER: Final = 256 * 1024
# The RabbitMQ version whose AMQP 1.0 behaviour this front end follows.
RABBITMQ_DIALECT = "4.0.0"
# OpenRefused.why -> the 1.0 error condition RabbitMQ 4 closes with.
_OPEN_REFUSED: Final = {
    "not_found": "amqp:not-found",
    "access": "amqp:unauthorized-access",
    "limit": "amqp:resource-limit-exceeded",
}


class AMQP10Connection(ConnectionCore):
    """One client connection speaking AMQP 1.0 to the broker, without I/O."""

    protocol = "AMQP 1-0"
    turn_budget = TURN_BYTES
    paced_turn_budget = PACED_TURN_BYTES
    output_high_water = OUTPUT_HIGH_WATER
    reads_when_blocked = False

    def __init__(self, shell: Shell) -> None:
        self.shell = shell
        self.broker = shell.broker
        self.users = shell.users
        self.peer = shell.peer
        limits = shell.limits
        mechanisms = tuple(
            m
            for m in authn.mechanisms(shell.users, certificate_identity=shell.certificate_identity)
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
                # Each session, link and the open are answered before the frames after them
                # are looked at (a detach in the same read then finds the attached link).
                answer_before_more=True,
                # A detach, end or close letting go of consumers of queues other nodes
                # lead is answered once those leaders have (``_answer_once``).
                broker_answers_closing=True,
            )
        )
        # Set at open from the shell's (what the sessions are made with), until released.
        self.client = None
        self.guard = None
        self.transactions = None
        self.should_close_transport = False
        self.close_reason = ""
        self.held_size = 0
        self.sessions: dict[int, Session] = {}
        self._inbox = bytearray()
        # Events not handled yet because a deferral holds the connection.
        self._left: list[Event] = []
        self._hold_all = False

    # -- FrontEnd: input -----------------------------------------------------------------

    @property
    def pending(self) -> bool:
        if self.should_close_transport or self._hold_all:
            return False
        return bool(self._inbox) or bool(self._left) or self.machine.backlogged

    def receive(self, data: bytes, now: float) -> None:
        if not self.should_close_transport:
            self._inbox += data

    def run(self, budget: int, now: float) -> None:
        """Hand the machine up to ``budget`` bytes of the input, then act on its events."""
        try:
            self._run(budget, now)
        except AMQP10Error as exc:
            # What the peer sent cannot be taken (a message that does not decode): the
            # protocol's error, to the peer.
            self._protocol_error(exc.condition, exc.description)
        except LocalProtocolError as exc:
            # The peer's later frames (in the same read) ended what an answer was for: the
            # machine refused the answer. Its frames were out of order: a protocol error.
            self._protocol_error("amqp:illegal-state", f"frames out of order: {exc}")

    def _protocol_error(self, condition: str, description: str) -> None:
        log.info("closing AMQP 1.0 connection %s: %s %s", self.peer, condition, description)
        self._inbox.clear()
        self._left = []
        self.close_reason = f"{condition}: {description}"
        self.machine.close(Error(condition=condition, description=description))
        self._release()
        if self.machine.closed:
            self.should_close_transport = True

    def _run(self, budget: int, now: float) -> None:
        if self._left:
            left, self._left = self._left, []
            self._handle(left, now)
        machine = self.machine
        while machine.backlogged and not self._hold_all:
            self._handle(machine.receive_data(b"", now), now)
        inbox = self._inbox
        if inbox and not self._hold_all:
            if len(inbox) <= budget:
                chunk = bytes(inbox)
                inbox.clear()
            else:
                chunk = bytes(inbox[:budget])
                del inbox[:budget]
            self._handle(machine.receive_data(chunk, now), now)
            while machine.backlogged and not self._hold_all:
                self._handle(machine.receive_data(b"", now), now)
        if machine.closed:
            self.should_close_transport = True
            self._inbox.clear()

    def defer(self, completion: Completion[Any], then: Callable[[], None]) -> None:
        def done(_completion: Completion[Any]) -> None:
            if not self.shell.finished:
                then()
                self.wrote()

        self.shell.defer(completion, done)

    def hold_input(self, channel: int | None) -> bool:
        if channel is not None:
            return False  # a session's input is not held alone: the connection's is
        self._hold_all = True
        return True

    def release_input(self, channel: int | None) -> None:
        self._hold_all = False

    # -- events --------------------------------------------------------------------------

    def _handle(self, events: list[Event], now: float) -> None:
        for index, event in enumerate(events):
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
                if isinstance(link, (OutgoingLink, SelectorLink, CopyLink, ManagementNode)):
                    link.credit_granted(event)
            elif kind is LinkAttachRequested:
                event = cast("LinkAttachRequested", event)
                session = self.sessions.get(event.channel)
                if session is not None:
                    session.attach(event)
            elif kind is LinkDetached:
                event = cast("LinkDetached", event)
                channel, handle = event.channel, event.handle
                session = self.sessions.get(channel)
                gone = None if session is None else session.detached(handle)
                if not event.local:
                    self._answer_once(gone, partial(self.machine.answer_detach, channel, handle))
            elif kind is SessionBegun:
                event = cast("SessionBegun", event)
                self._begin(event.channel)
            elif kind is SessionEnded:
                event = cast("SessionEnded", event)
                channel = event.channel
                gone = self._end(channel)
                if not event.local:
                    self._answer_once(gone, partial(self.machine.answer_end, channel))
            elif kind is SaslAuthRequested:
                self._sasl(cast("SaslAuthRequested", event), now)
            elif kind is ConnectionOpened:
                self._open(cast("ConnectionOpened", event))
            elif kind is ConnectionClosed:
                event = cast("ConnectionClosed", event)
                if event.error is not None:
                    self.close_reason = f"{event.error.condition}: {event.error.description}"
                gone = self._release()
                if not event.local:
                    self._answer_close(gone)
            if self._hold_all:
                # A handler deferred: the rest waits for its completion (release_input).
                self._left = events[index + 1 :] + self._left
                return

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
        login = self.shell.login(mechanism, response)
        if login.ok:
            self.machine.answer_sasl(True)
            self._handle(self.machine.receive_data(b"", now), now)
        else:
            self.close_reason = f"{mechanism} login refused"
            self.shell.refuse(login.delay, self._answer_refusal)

    def _answer_refusal(self) -> None:
        now = self.shell.now
        self.machine.answer_sasl(False)
        self._handle(self.machine.receive_data(b"", now), now)
        if self.machine.closed:
            self.should_close_transport = True

    def _open(self, event: ConnectionOpened) -> None:
        shell = self.shell
        hostname = event.hostname or ""
        if hostname.startswith("vhost:"):
            name = hostname[len("vhost:") :]
        else:
            name = hostname if hostname in self.broker.vhosts else "/"
        info = shell.info
        info.container_id = event.container_id
        properties = event.properties
        if isinstance(properties, dict):
            info.client_properties = {str(key): value for key, value in properties.items()}
        info.frame_max = self.machine.config.max_frame_size
        info.channel_max = self.machine.config.channel_max
        info.timeout = shell.limits.heartbeat
        try:
            client = shell.open_vhost(name, label=event.container_id or "")
        except OpenRefused as exc:
            self.close_reason = exc.reply_text
            self.machine.close(
                Error(
                    condition=_OPEN_REFUSED.get(exc.why, "amqp:unauthorized-access"),
                    description=exc.reply_text,
                )
            )
            return
        self.client = client
        self.guard = shell.guard
        self.transactions = Transactions(client.vhost)

    def _begin(self, channel: int) -> None:
        client = self.client
        if client is None:
            return
        try:
            self.shell.open_channel()  # the user's channel limit counts sessions
        except AMQPError as exc:
            self.machine.end(channel, error_for(exc))
            return
        session = Session(self, channel)
        self.sessions[channel] = session
        client.attach(channel, session)

    def _end(self, channel: int) -> Completion[None] | None:
        """The session on ``channel`` ended: what its links' consumers' queues let go of
        later (``Session.withdrawn``)."""
        session = self.sessions.pop(channel, None)
        if session is None:
            return None
        self.shell.close_channel()
        if self.client is not None:
            self.client.close_session(channel)
        else:
            session.close()
        return session.withdrawn

    def _answer_once(self, gone: Completion[None] | None, answer: Callable[[], None]) -> None:
        """Answer the peer's detach or end (``answer``) once ``gone`` is done: consumers of
        queues other nodes lead let go by those leaders (``Source.withdrawn``), so that a
        consume reaching such a leader another way right after the answer is not refused
        for them; at once on one node. Further input goes on meanwhile: the machine keeps
        the link's handle (the session's channel) ours until the answer goes."""
        if gone is None or gone.done:
            answer()
            return

        def late(_done: Completion[None]) -> None:
            if not self.shell.finished:
                answer()
                self.wrote()

        gone.on_done(late)

    def _answer_close(self, gone: Completion[None] | None) -> None:
        """Answer the peer's close once ``gone`` is done (as ``_answer_once``); the
        connection is released already."""
        machine = self.machine
        if gone is None or gone.done:
            machine.answer_close()
            return

        def answer(_done: Completion[None]) -> None:
            machine.answer_close()

        self.shell.defer(gone, answer)

    # -- what sessions and links ask ------------------------------------------------------

    def send_transfer(self, channel: int, handle: int, payload: bytes, settled: bool) -> int:
        # The links make sure the machine can take it (OutgoingLink.wire); a management
        # node's reply on a link the peer detached in the same read is dropped.
        try:
            delivery_id = self.machine.send_transfer(channel, handle, payload, settled=settled)
        except LocalProtocolError:
            return -1
        self.shell.output.count(len(payload))
        return delivery_id

    def wrote(self) -> None:
        self.shell.wrote()

    def published_on(self, publisher: Publisher) -> None:
        self.shell.published_by(publisher)

    # -- FrontEnd: output, flow, timers, closing -------------------------------------------

    def take_output(self, now: float) -> list[bytes]:
        out = cast("list[bytes]", self.machine.pieces_to_send(now))
        extra = self.shell.output.take()  # resets the transfers' count
        if extra:
            out.extend(extra)
        if self.machine.closed:
            self.should_close_transport = True
        return out

    def writable_changed(self, writable: bool) -> None:
        """The sessions are the model client's: the shell tells it."""

    def notify_blocked(self, reason: str) -> None:
        """AMQP 1.0 has no blocked notification: the connection is only not read."""

    def notify_unblocked(self, now: float) -> None:
        """See ``notify_blocked``."""

    def next_tick(self, now: float) -> float | None:
        """The machine's timer: heartbeat, idle time-out, close time-out."""
        return self.machine.get_timer()

    def tick(self, now: float) -> None:
        machine = self.machine
        timer = machine.get_timer()
        if timer is not None and now >= timer:
            self._handle(machine.handle_timer(now), now)
        if machine.closed:
            self.should_close_transport = True

    def close(self, reply_code: int, reply_text: str, now: float) -> None:
        """Close from the server side (shutdown: amqp:connection:forced)."""
        condition = "amqp:connection:forced" if reply_code == 320 else "amqp:internal-error"
        self.close_reason = reply_text
        self.machine.close(Error(condition=condition, description=reply_text))
        self._release()
        if self.machine.closed:
            self.should_close_transport = True

    def internal_error(self, now: float) -> None:
        self._inbox.clear()
        self._left = []
        self.machine.close(Error(condition="amqp:internal-error", description="see the broker log"))
        self._release()
        if self.machine.closed:
            self.should_close_transport = True

    def connection_lost(self) -> None:
        self._release()

    def _release(self) -> Completion[None] | None:
        """Give back what the connection held; returns what its sessions' consumers'
        queues let go of later (``Session.withdrawn``)."""
        client = self.client
        self.client = None
        sessions = list(self.sessions.values())
        for channel, session in list(self.sessions.items()):
            del self.sessions[channel]
            if client is None:
                session.close()
        self.shell.release()  # closes the client's sessions and gives back the limits
        transactions = self.transactions
        if transactions is not None:
            # After the sessions: their unsettled deliveries went back first.
            self.transactions = None
            transactions.close()
        return every(session.withdrawn for session in sessions)

    # -- introspection ---------------------------------------------------------------------

    def channel_infos(self) -> list[ChannelInfo]:
        out = []
        for channel, session in sorted(self.sessions.items()):
            consumers: dict[str, Consumer] = {}
            transactional = False
            for link in session.links.values():
                if isinstance(link, OutgoingLink):
                    consumers[link.consumer.tag] = link.consumer
            out.append(
                ChannelInfo(
                    channel,
                    session,
                    consumers,
                    # A copy (``COPIES``) takes nothing from its queue: not unacked.
                    unacked=sum(1 for d in session.unsettled.values() if d.queue is not COPIES),
                    transactional=transactional,
                    links=len(session.links),
                )
            )
        return out
