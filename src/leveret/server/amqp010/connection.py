"""The broker's AMQP 0-10 front end: the protocol's sans-IO connection machine
(``protocol/amqp010/connection.py``) given its meaning in the broker core — who may log in
(``auth.authn``: PLAIN, AMQPLAIN, EXTERNAL with a verified certificate, ANONYMOUS when set;
a refusal answered after its delay) and open which vhost within its limits
(``Access.open``), what the user may do there (``server/guard.py``, asked by
the handlers before the core acts; a session counts as a channel while attached), sessions
(``session.py``) that survive a dropped connection for their granted timeout (resumed only
by the same user), the command handlers (``handlers.py``), errors as
``execution.exception``, and completions once the store has what a transfer or a commit
must keep.

Implements ``server/frontend.py``'s ``FrontEnd``: ``server/connection.py`` drives it from
asyncio exactly as it drives the 0-9-1 front end. One ``SessionTable`` per broker holds the
sessions of every 0-10 connection (``table_of``); a session detached with a timeout stays
there, and a model deadline (``Timers``) releases what it held when the timeout passes.
"""

from __future__ import annotations

import logging
import platform
import weakref
from typing import TYPE_CHECKING

from leveret import __version__
from leveret.auth import authn
from leveret.auth.access import Access
from leveret.errors import AMQPError
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
from leveret.server.guard import Guard

if TYPE_CHECKING:
    from collections.abc import Callable

    from leveret.auth.users import User, UserStore
    from leveret.model.broker import Broker, Client
    from leveret.protocol.amqp010._generated.commands import MessageTransfer
    from leveret.protocol.amqp010.session import Session as ProtocolSession
    from leveret.protocol.amqp010.types import Struct

__all__ = ["AMQP010Connection", "table_of"]

log = logging.getLogger("leveret.amqp010")

HANDSHAKE_TIMEOUT = 10.0
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

    def __init__(
        self,
        broker: Broker,
        users: UserStore,
        *,
        peer: str,
        loopback: bool,
        now: float = 0.0,
        max_frame_size: int = 65535,
        certificate_identity: str | None = None,
    ) -> None:
        self.broker = broker
        self.users = users
        self.peer = peer
        self.loopback = loopback
        self.certificate_identity = certificate_identity
        self.table = table_of(broker)
        config = ConnectionConfig(
            mechanisms=tuple(authn.mechanisms(users, certificate_identity=certificate_identity)),
            server_properties={
                "product": "Leveret",
                "version": __version__,
                "platform": f"Python {platform.python_version()}",
            },
            max_frame_size=max_frame_size,
        )
        self.conn = Connection(Role.SERVER, config, sessions=self.table)
        self.started = now
        self.user: User | None = None
        self.access: Access | None = None
        self.guard: Guard | None = None
        # A refused login: when to answer, and the close text (None: drop the socket).
        self._refusal: tuple[float, str | None] | None = None
        self.client: Client | None = None
        self.vhost_name = "/"
        self.sessions: dict[int, Session] = {}
        self._protocol_sessions: dict[int, ProtocolSession] = {}
        # Sessions that published this turn: their confirms are flushed once at its end.
        self.confirming: set[Session] = set()
        # What this connection's transfers carry as ``Message.origin`` (0-10's no-local).
        self.origin = object()
        # FrontEnd
        self.on_output: Callable[[], None] | None = None
        self.published = False
        self.paced = False
        self.blocked = False
        self.heartbeat = 0
        self.should_close_transport = False
        self.close_reason = ""
        self.writable = True
        self._now = now

    # -- FrontEnd ------------------------------------------------------------------------

    @property
    def pending(self) -> bool:
        return False

    def data_received(self, data: bytes, now: float) -> None:
        if self._refusal is not None:
            return  # nothing is read while a refused login waits for its answer
        self._now = now
        self.broker.timers.now = now
        self._handle(self.conn.receive_data(data, now))
        self._turn_done()

    def run_turn(self) -> None:
        self._turn_done()

    def take_output(self, now: float) -> list[bytes]:
        data = self.conn.data_to_send()
        return [data] if data else []

    def next_tick(self, now: float) -> float | None:
        """When ``tick`` next has something to do: a refused login's answer, the handshake
        timeout (tested with ">": just past it), the machine's heartbeat timer."""
        if self._refusal is not None:
            return self._refusal[0]
        if self.conn.state is not ConnectionState.OPEN:
            timeout = self.started + HANDSHAKE_TIMEOUT + 1e-3
            # Closing after the handshake: tick drops the socket a second after at most,
            # as when every connection ticked each second.
            return timeout if timeout > now else now + 1.0
        return self.conn.next_timer()

    def tick(self, now: float) -> None:
        self._now = now
        if self._refusal is not None:
            if now >= self._refusal[0]:
                self._answer_refusal()
            return
        if self.conn.state is not ConnectionState.OPEN and now - self.started > HANDSHAKE_TIMEOUT:
            if self.conn.state in (ConnectionState.CLOSING, ConnectionState.CLOSED):
                self.should_close_transport = True
            else:
                self.close_reason = "handshake timeout"
                self.conn.close(_FORCED, "handshake timeout")
            return
        self._handle(self.conn.handle_timer(now))

    def set_writable(self, writable: bool) -> None:
        self.writable = writable
        for session in list(self.sessions.values()):
            session.set_writable(writable)

    def block(self, reason: str) -> None:
        self.blocked = True

    def unblock(self, now: float) -> None:
        self.blocked = False

    def close(self, reply_code: int, reply_text: str, now: float) -> None:
        self.close_reason = reply_text
        self.conn.close(reply_code, reply_text)

    def connection_lost(self) -> None:
        self._handle(self.conn.connection_lost(self._now))
        client, self.client = self.client, None
        if client is not None:
            client.close()
        access, self.access = self.access, None
        if access is not None:
            access.close()

    # -- SessionLink ---------------------------------------------------------------------

    def send_transfer(
        self, channel: int, command: MessageTransfer, header: bytes, body: bytes
    ) -> int:
        return self.conn.send_command(channel, command, header=header, body=body)

    def complete(self, channel: int, command_id: int) -> None:
        ssn = self.conn.session(channel)
        if ssn is not None and command_id in ssn.incomplete:
            self.conn.complete(channel, command_id)

    def output_ready(self) -> None:
        if self.on_output is not None:
            self.on_output()

    # -- for handlers --------------------------------------------------------------------

    def result(self, ev: CommandReceived, value: Struct) -> None:
        if self.conn.session(ev.channel) is not None:
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

    def _turn_done(self) -> None:
        confirming, self.confirming = self.confirming, set()
        for session in confirming:
            session.flush_confirms()

    def _handle(self, events: list[Event]) -> None:
        for event in events:
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
                self._login(event.mechanism, event.response)
            elif isinstance(event, SecureOkReceived):
                self._refuse("ACCESS_REFUSED - no challenge was sent")
            elif isinstance(event, Tuned):
                self.heartbeat = event.heartbeat
            elif isinstance(event, OpenRequested):
                self._open(event.virtual_host)
            elif isinstance(event, ConnectionClosed | ConnectionFailed):
                if isinstance(event, ConnectionFailed):
                    self.close_reason = self.close_reason or event.reason
                elif event.by_peer:
                    self.close_reason = self.close_reason or "client closed"
                self.should_close_transport = True

    def _login(self, mechanism: str, response: bytes) -> None:
        """The one place a 0-10 client logs in (``auth.authn``, as every front end)."""
        login = authn.login(
            self.users,
            mechanism,
            response,
            loopback=self.loopback,
            peer=self.peer,
            certificate_identity=self.certificate_identity,
        )
        if login.user is None:
            # Answered when the delay ends (tick): every guess costs the same time.
            self._refusal = (self._now + login.delay, login.close_text)
            return
        self.user = login.user
        self.conn.accept_auth(login.user.name)

    def _answer_refusal(self) -> None:
        assert self._refusal is not None
        text = self._refusal[1]
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

    def _open(self, virtual_host: str) -> None:
        assert self.user is not None
        name = virtual_host or "/"
        vhost = self.broker.vhosts.get(name)
        try:
            # RabbitMQ's checks in its order (the vhost, access to it, the limits).
            access = Access.open(self.users, self.user, name, peer=self.peer)
        except AMQPError as exc:
            # 0-10 has no access-refused close code: the vhost ones are invalid-path (as
            # Qpid C++), a limit is connection-forced.
            text = exc.reply_text
            code = _INVALID_PATH if text.startswith(("vhost ", "access to vhost")) else _FORCED
            self.close_reason = text
            self.conn.close(code, text)
            return
        if vhost is None:
            access.close()
            text = f"vhost {name} not found"
            self.close_reason = text
            self.conn.close(_INVALID_PATH, text)
            return
        self.access = access
        self.guard = Guard(access, vhost)
        self.vhost_name = name
        self.client = self.broker.connect(vhost, self.user.name, f"{self.peer} (AMQP 0-10)")
        self._handle(self.conn.open_ok())

    def _attached(self, event: SessionAttached) -> None:
        ssn = self.conn.session(event.channel)
        if ssn is None or ssn.name != event.name:
            # Detached again in the same input (a client that attaches and closes a session
            # at once): nothing to set up; its SessionDetached follows and finds nothing.
            return
        assert self.user is not None
        context = ssn.context
        if isinstance(context, Session):
            previous = context.link
            if isinstance(previous, AMQP010Connection) and previous is not self:
                # A forced takeover: the other connection learns its session went.
                previous._handle(previous.conn.pending_events())
                previous.output_ready()
            session = context
            if session.vhost.name != self.vhost_name or session.user != self.user.name:
                # Only its own user may resume a session (it holds that user's deliveries).
                self._refuse_session(event.channel, "session belongs to another user or vhost")
                return
        else:
            vhost = self.broker.vhosts[self.vhost_name]
            session = Session(vhost, self.broker.dtx, self.user.name, event.name)
            ssn.context = session
        assert self.access is not None
        try:
            self.access.open_channel()  # a session counts as a channel (max-channels)
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
        if not self.writable:
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
        session = self.sessions.pop(event.channel, None)
        ssn = self._protocol_sessions.pop(event.channel, None)
        if session is not None and self.access is not None:
            self.access.close_channel()
        self.confirming.discard(session) if session is not None else None
        if session is None or session.link is not self:
            return
        session.detach()
        if ssn is not None and ssn.detached_at is not None and ssn.timeout > 0:
            # Kept for resume: released if nobody resumes it in time.
            entry = _TABLES.get(self.broker)
            if entry is not None:
                self.broker.timers.schedule(ssn.detached_at + ssn.timeout, entry[1])
            return
        session.close()

    def _command(self, event: CommandReceived) -> None:
        session = self.sessions.get(event.channel)
        if session is None:
            return
        handler = HANDLERS.get(type(event.command), not_implemented)
        try:
            done = handler(self, session, event)
        except (AMQPError, ExecutionError, DecodeError) as exc:
            self.fail_command(session, event, exc)
            return
        if done:
            self.complete(event.channel, event.command_id)
