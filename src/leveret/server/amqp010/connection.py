"""The broker's AMQP 0-10 front end: the protocol's sans-IO connection machine
(``protocol/amqp010/connection.py``) given its meaning in the broker core — who may log in
(``Shell.login``: PLAIN, AMQPLAIN, EXTERNAL with a verified certificate, ANONYMOUS when set;
a refusal answered after its delay) and open which vhost within its limits
(``Shell.open_vhost``), what the user may do there (``server/guard.py``, asked by
the handlers before the core acts; a session counts as a channel while attached), sessions
(``session.py``) that survive a dropped connection for their granted timeout (resumed only
by the same user), the command handlers (``handlers.py``), errors as
``execution.exception``, and completions once the store has what a transfer or a commit
must keep.

A ``FrontEnd`` of the connection's shell (``server/shell/``), which owns the lifecycle every
protocol shares; its unit of a turn is the machine's event. One ``SessionTable`` per broker
holds the
sessions of every 0-10 connection (``table_of``); a session detached with a timeout stays
there, and a model deadline (``Timers``) releases what it held when the timeout passes.
"""

from __future__ import annotations

import logging
import platform
import weakref
from typing import TYPE_CHECKING, Any, Final

from leveret import __version__
from leveret.auth import authn
from leveret.auth.access import OpenRefused
from leveret.errors import AMQPError
from leveret.model.completion import every
from leveret.model.dtx import DtxArgumentError, DtxStateError
from leveret.protocol.amqp010._generated.constants import ConnectionCloseCode, ExecutionErrorCode
from leveret.protocol.amqp010.connection import (
    Connection,
    ConnectionConfig,
    ConnectionState,
    Role,
)
from leveret.protocol.amqp010.errors import DecodeError, ExecutionError, error_code_for
from leveret.protocol.amqp010.events import (
    CommandReceived,
    CommandsCompleted,
    ConnectionClosed,
    ConnectionFailed,
    Event,
    OpenRequested,
    SecureOkReceived,
    SessionAttached,
    SessionDetached,
    StartOkReceived,
    Tuned,
)
from leveret.protocol.amqp010.session import SessionTable
from leveret.server.amqp010.handlers import HANDLERS, not_implemented
from leveret.server.amqp010.session import Session
from leveret.server.shell.info import ChannelInfo

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.model.broker import Broker, Client
    from leveret.model.completion import Completion
    from leveret.model.publisher import Publisher
    from leveret.protocol.amqp010._generated.commands import MessageTransfer
    from leveret.protocol.amqp010.session import Session as ProtocolSession
    from leveret.protocol.amqp010.types import Struct
    from leveret.server.guard import Guard
    from leveret.server.shell.shell import Shell

__all__ = ["AMQP010Connection", "table_of"]

log = logging.getLogger("leveret.amqp010")

# Events (commands, completions, session changes) handled per turn.
TURN_EVENTS: Final = 300
PACED_TURN_EVENTS: Final = 30
OUTPUT_HIGH_WATER: Final = 256 * 1024
_FORCED = int(ConnectionCloseCode.CONNECTION_FORCED)
_INVALID_PATH = int(ConnectionCloseCode.INVALID_PATH)


class _Expiry:
    """The model deadline that releases detached sessions whose timeout passed."""

    __slots__ = ("table",)

    def __init__(self, table: SessionTable) -> None:
        self.table = table

    def on_deadline(self, now: float) -> None:
        for ssn in self.table.expire(now):
            context = ssn.context
            if isinstance(context, Session):
                context.close()


_TABLES: weakref.WeakKeyDictionary[Broker, tuple[SessionTable, _Expiry]] = (
    weakref.WeakKeyDictionary()
)


def table_of(broker: Broker) -> SessionTable:
    """The 0-10 sessions of ``broker`` (attached and awaiting resume)."""
    entry = _TABLES.get(broker)
    if entry is None:
        table = SessionTable()
        entry = _TABLES[broker] = (table, _Expiry(table))
    return entry[0]


class AMQP010Connection:
    """One client connection speaking AMQP 0-10 to the broker, without I/O."""

    protocol = "AMQP 0-10"
    turn_budget = TURN_EVENTS
    paced_turn_budget = PACED_TURN_EVENTS
    output_high_water = OUTPUT_HIGH_WATER
    reads_when_blocked = False

    def __init__(self, shell: Shell, *, max_frame_size: int = 65535) -> None:
        self.shell = shell
        broker = shell.broker
        self.broker = broker
        self.users = shell.users
        self.peer = shell.peer
        self.table = table_of(broker)
        config = ConnectionConfig(
            mechanisms=tuple(
                authn.mechanisms(shell.users, certificate_identity=shell.certificate_identity)
            ),
            server_properties={
                "product": "Leveret",
                "version": __version__,
                "platform": f"Python {platform.python_version()}",
            },
            max_frame_size=max_frame_size,
            # A session detached with subscriptions of queues other nodes lead is answered
            # once those leaders let them go (``_detached``).
            broker_answers_detach=True,
            # So is a connection.close, which detaches its sessions first (``_answer_close``).
            broker_answers_close=True,
        )
        self.conn = Connection(Role.SERVER, config, sessions=self.table)
        self.vhost_name = "/"
        self.sessions: dict[int, Session] = {}
        self._protocol_sessions: dict[int, ProtocolSession] = {}
        # What this connection's transfers carry as ``Message.origin`` (0-10's no-local).
        self.origin = object()
        # FrontEnd
        self.should_close_transport = False
        self.close_reason = ""
        self.held_size = 0
        # Events decoded and not handled yet (turns, or a deferral holding the input).
        self._events: list[Event] = []
        self._inbox = bytearray()
        self._hold_all = False
        self._now = shell.created
        # What the sessions detached by the peer's connection.close let go of later.
        self._closing: list[Completion[None] | None] = []

    @property
    def client(self) -> Client | None:
        return self.shell.client

    @property
    def guard(self) -> Guard | None:
        return self.shell.guard

    # -- FrontEnd ------------------------------------------------------------------------

    @property
    def pending(self) -> bool:
        if self._hold_all or self.should_close_transport:
            return False
        return bool(self._events) or bool(self._inbox)

    def receive(self, data: bytes, now: float) -> None:
        # Kept for the turn: the machine answers some commands itself as it decodes them
        # (session attach), which must wait while a deferral holds the connection.
        self._now = now
        self._inbox += data

    def run(self, budget: int, now: float) -> None:
        self._now = now
        if self._inbox:
            data = bytes(self._inbox)
            self._inbox.clear()
            self._events.extend(self.conn.receive_data(data, now))
        events = self._events
        if len(events) <= budget:
            self._events = []
        else:
            self._events = events[budget:]
            events = events[:budget]
        self._handle(events)

    def take_output(self, now: float) -> list[bytes]:
        out = self.shell.output.take()
        data = self.conn.data_to_send()
        if data:
            out.append(data)
        return out

    def next_tick(self, now: float) -> float | None:
        """The machine's heartbeat timer once the connection is open."""
        if self.conn.state is not ConnectionState.OPEN:
            return None
        return self.conn.next_timer()

    def tick(self, now: float) -> None:
        self._now = now
        self._handle(self.conn.handle_timer(now))

    def writable_changed(self, writable: bool) -> None:
        for session in list(self.sessions.values()):
            session.set_writable(writable)

    def notify_blocked(self, reason: str) -> None:
        """0-10 has no blocked notification: the connection is only not read."""

    def notify_unblocked(self, now: float) -> None:
        """See ``notify_blocked``."""

    def hold_input(self, channel: int | None) -> bool:
        if channel is not None:
            return False  # a session's commands are not held alone: the connection's are
        self._hold_all = True
        return True

    def release_input(self, channel: int | None) -> None:
        self._hold_all = False

    def close(self, reply_code: int, reply_text: str, now: float) -> None:
        self.close_reason = reply_text
        self.conn.close(reply_code, reply_text)

    def internal_error(self, now: float) -> None:
        # 0-10's connection.close has no internal-error code (541 is an execution error).
        self._events = []
        self._inbox.clear()
        self.close_reason = "internal error"
        self.conn.close(_FORCED, "internal error; see the broker log")

    def connection_lost(self) -> None:
        self._handle(self.conn.connection_lost(self._now))
        self.shell.release()

    def channel_infos(self) -> list[ChannelInfo]:
        out = []
        for channel, session in sorted(self.sessions.items()):
            consumers = {
                tag: sub.consumer
                for tag, sub in session.subscriptions.items()
                if sub.consumer is not None
            }
            publisher = session.publisher
            tx = publisher.tx
            out.append(
                ChannelInfo(
                    channel,
                    session,
                    consumers,
                    unacked=len(session.unsettled),
                    uncommitted=len(tx.publishes) if tx is not None else 0,
                    confirm=publisher.confirms is not None,
                    transactional=tx is not None,
                )
            )
        return out

    def published_by(self, publisher: Publisher) -> None:
        self.shell.published_by(publisher)

    # -- SessionLink ---------------------------------------------------------------------

    def send_transfer(
        self, channel: int, command: MessageTransfer, header: bytes, body: bytes
    ) -> int:
        if not self._open(channel):
            # The machine closed the connection (or detached the session) on later input
            # of the same read, before the front end heard: the transfer stays unsettled
            # with its session, released when the session closes.
            return -1
        return self.conn.send_command(channel, command, header=header, body=body)

    def defer(self, completion: Completion[Any], then: Callable[[Completion[Any]], None]) -> None:
        self.shell.defer(completion, then)

    def complete(self, channel: int, command_id: int) -> None:
        ssn = self.conn.session(channel)
        if ssn is not None and command_id in ssn.incomplete and self._open(channel):
            self.conn.complete(channel, command_id)

    def _open(self, channel: int) -> bool:
        """Whether the machine can send on ``channel`` now."""
        return self.conn.state is ConnectionState.OPEN and self.conn.session(channel) is not None

    def output_ready(self) -> None:
        self.shell.wrote()

    # -- for handlers --------------------------------------------------------------------

    def result(self, ev: CommandReceived, value: Struct) -> None:
        if self._open(ev.channel):
            self.conn.send_result(ev.channel, ev.command_id, value)
            self.output_ready()

    def fail_command(self, ssn: Session, ev: CommandReceived, exc: Exception) -> None:
        """Report a failed command with ``execution.exception``."""
        if isinstance(exc, ExecutionError):
            code, text = exc.error_code, exc.description
        elif isinstance(exc, DtxStateError):
            code, text = int(ExecutionErrorCode.ILLEGAL_STATE), exc.reply_text
        elif isinstance(exc, DtxArgumentError):
            code, text = int(ExecutionErrorCode.INVALID_ARGUMENT), exc.reply_text
        elif isinstance(exc, AMQPError):
            code, text = error_code_for(exc), exc.reply_text
        else:
            code, text = int(ExecutionErrorCode.COMMAND_INVALID), str(exc)
        if self.conn.state is ConnectionState.OPEN and self.conn.session(ev.channel) is not None:
            self.conn.send_exception(
                ev.channel, code, text[:65535], command_id=ev.command_id, command=ev.command
            )
            # As Qpid C++: a session that failed a command is detached, which is what tells
            # a client waiting for a result (qpid-python fails its futures then).
            self.conn.detach(ev.channel)
            self.output_ready()

    # -- events --------------------------------------------------------------------------

    def _handle(self, events: list[Event]) -> None:
        for index, event in enumerate(events):
            if isinstance(event, CommandReceived):
                self._command(event)
            elif isinstance(event, CommandsCompleted):
                session = self.sessions.get(event.channel)
                if session is not None:
                    session.completed_by_peer(event.commands)
            elif isinstance(event, SessionAttached):
                self._attached(event)
            elif isinstance(event, SessionDetached):
                self._detached(event)
            elif isinstance(event, StartOkReceived):
                self.shell.info.client_properties = dict(event.client_properties)
                self._login(event.mechanism, event.response)
            elif isinstance(event, SecureOkReceived):
                self._refuse("ACCESS_REFUSED - no challenge was sent")
            elif isinstance(event, Tuned):
                info = self.shell.info
                info.timeout, info.frame_max, info.channel_max = (
                    event.heartbeat,
                    event.max_frame_size,
                    event.channel_max,
                )
            elif isinstance(event, OpenRequested):
                self._open_vhost(event.virtual_host)
            elif isinstance(event, ConnectionClosed | ConnectionFailed):
                if isinstance(event, ConnectionFailed):
                    self.close_reason = self.close_reason or event.reason
                elif event.by_peer:
                    self.close_reason = self.close_reason or "client closed"
                if self.conn.state is ConnectionState.CLOSE_RECEIVED:
                    self._answer_close()
                else:
                    self.should_close_transport = True
            if self._hold_all:
                # A handler deferred: the rest waits for its completion (release_input).
                self._events = events[index + 1 :] + self._events
                return

    def _login(self, mechanism: str, response: bytes) -> None:
        """The one place a 0-10 client logs in (the shell's, as every front end)."""
        if self.conn.state is not ConnectionState.AUTHENTICATING:
            return  # closed by later input of the same read: nobody to answer
        login = self.shell.login(mechanism, response)
        if login.user is None:
            # Answered when the delay ends: every guess costs the same time.
            text = login.close_text
            self.shell.refuse(login.delay, lambda: self._answer_refusal(text))
            return
        self.conn.accept_auth(login.user.name)

    def _answer_refusal(self, text: str | None) -> None:
        if self.conn.state is not ConnectionState.AUTHENTICATING:
            return
        if text is None:
            self.close_reason = "login refused"
            self.should_close_transport = True
        else:
            self._refuse(f"ACCESS_REFUSED - {text}")
        self.output_ready()

    def _refuse(self, text: str) -> None:
        log.info("closing 0-10 connection %s: %s", self.peer, text)
        self.close_reason = text
        self.conn.close(_FORCED, text)

    def _open_vhost(self, virtual_host: str) -> None:
        if self.conn.state is not ConnectionState.OPENING:
            return  # closed by later input of the same read
        name = virtual_host or "/"
        try:
            self.shell.open_vhost(name, label="AMQP 0-10")
        except OpenRefused as exc:
            # 0-10 has no access-refused close code: the vhost ones are invalid-path (as
            # Qpid C++), a limit is connection-forced.
            text = exc.reply_text
            self.close_reason = text
            self.conn.close(_FORCED if exc.why == "limit" else _INVALID_PATH, text)
            return
        self.vhost_name = name
        self._handle(self.conn.open_ok())

    def _attached(self, event: SessionAttached) -> None:
        ssn = self.conn.session(event.channel)
        if ssn is None or ssn.name != event.name or self.conn.state is not ConnectionState.OPEN:
            # Detached or closed again by later input of the same read (a client that
            # attaches and closes a session at once): nothing to set up; its
            # SessionDetached follows and finds nothing.
            return
        user = self.shell.user
        assert user is not None
        context = ssn.context
        if isinstance(context, Session):
            previous = context.link
            if isinstance(previous, AMQP010Connection) and previous is not self:
                # A forced takeover: the other connection learns its session went.
                previous._handle(previous.conn.pending_events())
                previous.output_ready()
            session = context
            if session.vhost.name != self.vhost_name or session.user != user.name:
                # Only its own user may resume a session (it holds that user's deliveries).
                self._refuse_session(event.channel, "session belongs to another user or vhost")
                return
        else:
            vhost = self.broker.vhosts[self.vhost_name]
            session = Session(vhost, self.broker.dtx, user.name, event.name)
            ssn.context = session
        try:
            self.shell.open_channel()  # a session counts as a channel (max-channels)
        except AMQPError as exc:
            if not isinstance(context, Session):
                ssn.context = None
                session.close()
            self._refuse_session(
                event.channel, exc.reply_text, ExecutionErrorCode.RESOURCE_LIMIT_EXCEEDED
            )
            return
        self.sessions[event.channel] = session
        self._protocol_sessions[event.channel] = ssn
        done, session.completed_detached = session.completed_detached, []
        session.attach(self, event.channel)
        for command_id in done:
            self.complete(event.channel, command_id)
        if not self.shell.writable:
            session.set_writable(False)

    def _refuse_session(
        self,
        channel: int,
        text: str,
        code: ExecutionErrorCode = ExecutionErrorCode.NOT_ALLOWED,
    ) -> None:
        self.conn.send_exception(channel, int(code), text)
        self.conn.detach(channel)
        self.output_ready()

    def _detached(self, event: SessionDetached) -> None:
        """The session on the event's channel detached; the peer's session.detach is
        answered once its subscriptions' queues let them go (``Session.withdrawn``: a
        queue another node leads, once its leader has, as message.cancel completes), so
        that a subscribe reaching such a leader another way right after the answer is not
        refused for them; at once on one node, or for a session kept for resume."""
        gone = self._detach_session(event)
        channel = event.channel
        conn = self.conn
        if conn.state is ConnectionState.CLOSE_RECEIVED:
            # Detached by the peer's connection.close: its close-ok waits for them all.
            self._closing.append(gone)
            return
        if gone is None or gone.done:
            conn.answer_detach(channel)
            return

        def answer(_done: Completion[None]) -> None:
            conn.answer_detach(channel)
            self.output_ready()

        self.defer(gone, answer)

    def _answer_close(self) -> None:
        """Answer the peer's connection.close (close-ok), then close the socket, once the
        sessions it detached are let go of (``_detached``; as session.detach waits): at once
        on one node, or when every session is kept for resume."""
        gone = every(self._closing)
        self._closing = []
        conn = self.conn
        if gone is None or gone.done:
            conn.answer_close()
            self.should_close_transport = True
            return

        def answer(_done: Completion[None]) -> None:
            conn.answer_close()
            self.should_close_transport = True
            self.output_ready()

        self.defer(gone, answer)

    def _detach_session(self, event: SessionDetached) -> Completion[None] | None:
        session = self.sessions.pop(event.channel, None)
        ssn = self._protocol_sessions.pop(event.channel, None)
        if session is not None:
            self.shell.close_channel()
        if session is None or session.link is not self:
            return None
        session.detach()
        if ssn is not None and ssn.detached_at is not None and ssn.timeout > 0:
            # Kept for resume: released if nobody resumes it in time.
            entry = _TABLES.get(self.broker)
            if entry is not None:
                self.broker.timers.schedule(ssn.detached_at + ssn.timeout, entry[1])
            return None
        session.close()
        return session.withdrawn

    def _command(self, event: CommandReceived) -> None:
        session = self.sessions.get(event.channel)
        if session is None or not self._open(event.channel):
            return  # its session (or the connection) went on later input of the same read
        handler = HANDLERS.get(type(event.command), not_implemented)
        try:
            done = handler(self, session, event)
        except (AMQPError, ExecutionError, DecodeError) as exc:
            self.fail_command(session, event, exc)
            return
        if done:
            self.complete(event.channel, event.command_id)
